"""What the sync and async clients share: configuration, request bodies,
stream parsing and archive handling. No I/O to hostd happens here."""

from __future__ import annotations

import base64
import codecs
import json
import os
import tarfile
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from ._errors import APIError, AgentboxError, make_error
from ._models import ExecResult, FileEvent, Output

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_DATA_DIR = "/var/lib/agentbox"
USER_AGENT = "agentbox-python/0.1.0"
#: The largest NDJSON line accepted (1 MiB of output is 1.4 MiB in base64).
MAX_LINE = 4 << 20
CHUNK = 256 << 10
#: The most events a page of ``GET .../events`` may ask for.
MAX_EVENTS_PAGE = 10000
#: The Content-Types of a file's bytes (PUT .../files) and of a tar (PUT .../files/archive), as the spec has them.
FILE_TYPE = "application/octet-stream"
TAR_TYPE = "application/x-tar"

Command = Union[str, Sequence[str]]
OutputCallback = Callable[[str], Any]


def resolve_url(url: Optional[str]) -> str:
    """``url``, else ``$AGENTBOX_URL``, else the default, without a trailing slash."""
    return (url or os.environ.get("AGENTBOX_URL") or DEFAULT_URL).rstrip("/")


def resolve_api_key(api_key: Optional[str]) -> str:
    """``api_key``, else ``$AGENTBOX_API_KEY``, else hostd's key file
    ``$AGENTBOX_DATA_DIR/api-key`` (default /var/lib/agentbox), as the CLI does.
    An unreadable key file gives "" (calls then fail with Unauthorized)."""
    if api_key:
        return api_key
    env = os.environ.get("AGENTBOX_API_KEY", "").strip()
    if env:
        return env
    path = Path(os.environ.get("AGENTBOX_DATA_DIR") or DEFAULT_DATA_DIR) / "api-key"
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def headers(api_key: str) -> Dict[str, str]:
    """The headers of every call: the key and the user agent."""
    h = {"User-Agent": USER_AGENT}
    if api_key:
        h["Authorization"] = "Bearer " + api_key
    return h


def trace_headers() -> Dict[str, str]:
    """The current OpenTelemetry span's ``traceparent``, if OpenTelemetry is importable."""
    try:
        from opentelemetry import propagate  # type: ignore[import-not-found]
    except ImportError:
        return {}
    carrier: Dict[str, str] = {}
    try:
        propagate.inject(carrier)
    except Exception:  # a misconfigured propagator must not break a call
        return {}
    return carrier


def argv(cmd: Command) -> List[str]:
    """A ``str`` runs under ``sh -c``; a sequence is the argv."""
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    out = [str(a) for a in cmd]
    if not out:
        raise ValueError("empty command")
    return out


def exec_body(
    cmd: Command,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    stdin: Union[str, bytes, None],
    timeout: Optional[float],
    user: Optional[str] = None,
) -> Dict[str, Any]:
    """The JSON body of ``POST /v1/sandboxes/{id}/exec``."""
    body: Dict[str, Any] = {"cmd": argv(cmd)}
    if cwd:
        body["cwd"] = cwd
    if user:
        body["user"] = user
    if env:
        body["env"] = dict(env)
    if stdin is not None:
        body["stdin"] = stdin.decode() if isinstance(stdin, bytes) else stdin
    if timeout:
        body["timeout_s"] = max(1, int(-(-timeout // 1)))  # whole seconds, rounded up
    return body


def create_body(**kw: Any) -> Dict[str, Any]:
    """The JSON body of ``POST /v1/sandboxes``: keyword arguments that are set."""
    return {k: v for k, v in kw.items() if v not in (None, "", {}, 0)}


def parse_line(line: Union[str, bytes]) -> Optional[Dict[str, Any]]:
    """One NDJSON line as a dict; None for a blank line."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    line = line.strip()
    if not line:
        return None
    if len(line) > MAX_LINE:
        raise AgentboxError("stream line too long")
    try:
        d = json.loads(line)
    except ValueError as e:
        raise AgentboxError(f"bad stream line: {e}") from None
    if not isinstance(d, dict):
        raise AgentboxError("bad stream line: not an object")
    return d


def stream_error(ev: Mapping[str, Any]) -> APIError:
    """The exception of an ``error`` line that ended a stream."""
    err = ev.get("error") or {}
    return make_error(str(err.get("code", "internal")), str(err.get("message", "stream failed")), 0)


class ExecReader:
    """Folds exec events (start, stdout, stderr, exit, error) into output
    pieces and, at the end, an :class:`ExecResult`."""

    def __init__(
        self,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        keep: bool = True,
    ) -> None:
        self.exec_id = ""
        self.exit_code: Optional[int] = None
        self.signal = ""
        self._keep = keep
        self._out: Dict[str, List[bytes]] = {"stdout": [], "stderr": []}
        self._cb = {"stdout": on_stdout, "stderr": on_stderr}
        self._dec = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in self._out}

    @property
    def done(self) -> bool:
        """True once the exit event was seen."""
        return self.exit_code is not None

    def feed(self, line: Union[str, bytes]) -> Optional[Output]:
        """Take one line; return the output it carries, if any. Raises the
        stream's error (e.g. ``sandbox_deleted``) as an :class:`APIError`."""
        ev = parse_line(line)
        if ev is None:
            return None
        typ = ev.get("type")
        if typ == "start":
            self.exec_id = str(ev.get("exec_id", ""))
        elif typ in ("stdout", "stderr"):
            data = base64.b64decode(ev.get("data") or "")
            if self._keep:
                self._out[typ].append(data)
            cb = self._cb[typ]
            if cb is not None:
                text = self._dec[typ].decode(data)
                if text:
                    cb(text)
            return Output(typ, data, int(ev.get("offset") or 0))
        elif typ == "exit":
            self.exit_code = int(ev.get("exit_code") or 0)
            self.signal = str(ev.get("signal") or "")
            for s, cb in self._cb.items():
                tail = self._dec[s].decode(b"", final=True)
                if cb is not None and tail:
                    cb(tail)
        elif typ == "error":
            raise stream_error(ev)
        return None

    def result(self) -> ExecResult:
        """The collected result; raises if the stream ended before the exit."""
        if self.exit_code is None:
            raise AgentboxError("exec stream ended before the exit event")
        out, err = b"".join(self._out["stdout"]), b"".join(self._out["stderr"])
        return ExecResult(
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            exit_code=self.exit_code,
            signal=self.signal,
            exec_id=self.exec_id,
            stdout_bytes=out,
            stderr_bytes=err,
        )


def file_event(line: Union[str, bytes]) -> Optional[FileEvent]:
    """One line of ``files/watch`` as a :class:`FileEvent` (None for blank or keepalive)."""
    ev = parse_line(line)
    if ev is None or ev.get("type") == "keepalive":
        return None
    if ev.get("type") == "error":
        raise stream_error(ev)
    return FileEvent(
        type=str(ev.get("type", "")),
        path=str(ev.get("path", "")),
        old_path=str(ev.get("old_path") or ""),
        is_dir=bool(ev.get("is_dir")),
        size=int(ev.get("size") or 0),
        time=str(ev.get("time") or ""),
    )


def event_params(
    types: Optional[Sequence[str]], since: Optional[str], until: Optional[str], limit: Optional[int]
) -> Dict[str, Any]:
    """Query parameters of ``GET /v1/sandboxes/{id}/events``."""
    p: Dict[str, Any] = {}
    if types:
        p["type"] = ",".join([types] if isinstance(types, str) else types)
    if since:
        p["since"] = since
    if until:
        p["until"] = until
    if limit:
        p["limit"] = min(limit, MAX_EVENTS_PAGE)  # a page; events() stops at limit
    return p


def file_chunks(f: IO[bytes]) -> Iterator[bytes]:
    """Read a binary file object in chunks."""
    while True:
        b = f.read(CHUNK)
        if not b:
            return
        if isinstance(b, str):
            b = b.encode()
        yield b


# --- directory archives -------------------------------------------------


def tar_dir(local: Union[str, "os.PathLike[str]"], out: IO[bytes]) -> None:
    """Write a gzip'd tar of directory ``local`` (entries relative to it) to ``out``."""
    root = Path(local)
    if not root.is_dir():
        raise NotADirectoryError(str(root))
    with tarfile.open(fileobj=out, mode="w:gz") as tf:
        for p in sorted(root.rglob("*")):
            tf.add(str(p), arcname=p.relative_to(root).as_posix(), recursive=False)


def _inside(root: Path, p: Path) -> bool:
    try:
        p.resolve().relative_to(root)
        return True
    except ValueError:
        return False


def untar_safely(src: IO[bytes], local: Union[str, "os.PathLike[str]"]) -> int:
    """Extract the tar stream ``src`` into ``local``, refusing any entry whose
    path (or link target) would land outside it, and device files. Returns
    the number of entries. (Hand-rolled because Debian 12's Python 3.11.2
    predates tarfile's extraction filters.)"""
    root = Path(local)
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    n = 0
    with tarfile.open(fileobj=src, mode="r|*") as tf:
        for m in tf:
            name = m.name
            while name.startswith("./"):
                name = name[2:]
            if name in ("", "."):
                continue
            dest = root / name
            if os.path.isabs(m.name) or not _inside(root, dest):
                raise AgentboxError(f"archive entry {m.name!r} escapes {root}")
            if m.isdev() or m.isfifo():
                raise AgentboxError(f"archive entry {m.name!r} is a device or fifo")
            if m.issym():
                target = dest.parent / m.linkname
                if os.path.isabs(m.linkname) or not _inside(root, target):
                    raise AgentboxError(f"archive link {m.name!r} -> {m.linkname!r} escapes {root}")
            if m.islnk():
                raise AgentboxError(f"archive hard link {m.name!r} refused")
            m.name = name
            m.mode &= 0o777  # no setuid/setgid/sticky from the guest
            tf.extract(m, str(root), set_attrs=m.isfile() or m.isdir())
            n += 1
    return n


def url_with_token(pa: Mapping[str, Any], path_only: bool = False) -> str:
    """A port's URL that opens it: host-based if hostd has a domain, with the token unless public."""
    u = pa.get("url") or ""
    if not u or path_only:
        u = pa["path_url"]
    if not pa.get("public"):
        u += ("&" if "?" in u else "?") + "token=" + pa["token"]
    return u


def image_body(name: str, ref: str, pool_size: int, **image: Any) -> Dict[str, Any]:
    """The JSON body of an image build, ``POST /v1/templates`` with ``image``."""
    img = {"ref": ref, **{k: v for k, v in image.items() if v not in (None, "", 0, False)}}
    return {"name": name, "image": img, "pool_size": pool_size}


def build_event(d: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A build's last event: its template (done) or raises its error (of
    the event's status); None for a progress or log event."""
    if d.get("type") == "done":
        return d.get("template") or {}
    if d.get("type") == "error":
        err = d.get("error") or {}
        raise make_error(str(err.get("code", "build_failed")), str(err.get("message", "")), int(d.get("status") or 0))
    return None


def diff_params(against: str, path: "Optional[str]", patch: bool, method: "Optional[str]", exclude: "Optional[Sequence[str]]",
                events: bool, limit: "Optional[int]", cursor: "Optional[str]") -> "Dict[str, str]":
    """The query of a diff page (GET .../diff)."""
    p = {"against": against}
    if path:
        p["path"] = path
    if patch:
        p["patch"] = "true"
    if method:
        p["method"] = method
    if exclude is not None:
        p["exclude"] = ",".join(exclude)
    if events:
        p["events"] = "true"
    if limit:
        p["limit"] = str(limit)
    if cursor:
        p["cursor"] = cursor
    return p


def merge_diff_page(acc: "Optional[Dict[str, Any]]", page: "Dict[str, Any]") -> "Dict[str, Any]":
    """Adds a page's entries to the first page's answer."""
    if acc is None:
        return page
    acc["entries"].extend(page.get("entries", []))
    acc["next_cursor"] = page.get("next_cursor", "")
    return acc


def replay_body(cmd: Any, n: int, env: "Optional[Dict[str, str]]", cwd: str, timeout_s: int, keep: bool) -> "Dict[str, Any]":
    """The JSON body of a replay (a string cmd runs through ``sh -c``)."""
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    body: Dict[str, Any] = {"cmd": argv, "n": n}
    if env:
        body["env"] = env
    if cwd:
        body["cwd"] = cwd
    if timeout_s:
        body["timeout_s"] = timeout_s
    if keep:
        body["keep"] = True
    return body


def replay_lines(lines: "Iterable[str]", progress: "Optional[Callable[[Dict[str, Any]], None]]") -> "Dict[str, Any]":
    """The result of a replay's NDJSON stream, calling progress for each run line."""
    for line in lines:
        if not line.strip():
            continue
        ev = json.loads(line)
        if ev.get("type") == "result":
            return ev["result"]
        if ev.get("type") == "error":
            raise RuntimeError(ev.get("error", {}).get("message", "replay failed"))
        if progress is not None:
            progress(ev)
    raise RuntimeError("replay: the stream ended without a result")
