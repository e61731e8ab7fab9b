"""The synchronous client: :class:`Client`, :class:`Sandbox` and their helpers."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import httpx

from . import _core
from ._core import Command, OutputCallback
from ._errors import ConnectionFailed, NotFound, error_from_response
from ._templates import Templates
from ._models import (
    APIKey,
    Mount,
    CreatedKey,
    Project,
    Event,
    ExecResult,
    ExecSession,
    FileEvent,
    FileInfo,
    Health,
    NetworkPolicy,
    Output,
    PortAccess,
    SandboxInfo,
    Secret,
    ShareLink,
    SnapshotInfo,
    Usage,
    from_dict,
)

__all__ = ["Client", "Sandbox", "ExecHandle", "Files", "Network", "Templates", "Secrets", "Snapshots", "FileStream", "Watch"]

Data = Union[str, bytes, IO[bytes], Iterable[bytes]]


class Client:
    """A client of one hostd.

    ``url`` defaults to ``$AGENTBOX_URL`` (else http://127.0.0.1:7070) and
    ``api_key`` to ``$AGENTBOX_API_KEY``, else hostd's key file
    ``$AGENTBOX_DATA_DIR/api-key``. ``template`` (default
    ``$AGENTBOX_TEMPLATE``) is what :meth:`create` starts from when given
    neither a template nor a snapshot (unset: the base image, restored from
    hostd's base snapshot).
    ``timeout`` bounds each read from hostd (default: none, since exec and
    files stream). Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        template: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.url = _core.resolve_url(url)
        self.api_key = _core.resolve_api_key(api_key)
        #: The template :meth:`create` uses by default.
        self.default_template = template or os.environ.get("AGENTBOX_TEMPLATE") or None
        self._http = httpx.Client(
            base_url=self.url,
            headers=_core.headers(self.api_key),
            # exec and files stream: no read timeout unless asked for
            timeout=httpx.Timeout(timeout, connect=30.0),
        )
        #: Templates: list, get, create, delete, build from a blueprint.
        self.templates = Templates(self)
        #: Secrets for egress injection.
        self.secrets = Secrets(self)
        #: API keys (admin).
        self.keys = Keys(self)
        #: Projects (admin).
        self.projects = Projects(self)
        #: Snapshots: list, get, delete.
        self.snapshots = Snapshots(self)

    # -- plumbing

    def _request(self, method: str, path: str, *, expect: Sequence[int] = (200,), **kw: Any) -> httpx.Response:
        kw["headers"] = {**_core.trace_headers(), **kw.get("headers", {})}
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{method} {self.url}{path}: {e}") from e
        if resp.status_code not in expect:
            raise error_from_response(resp.status_code, resp.content, resp.reason_phrase)
        return resp

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        return self._request(method, path, **kw).json()

    @contextlib.contextmanager
    def _stream(self, method: str, path: str, **kw: Any) -> Iterator[httpx.Response]:
        kw["headers"] = {**_core.trace_headers(), **kw.get("headers", {})}
        try:
            with self._http.stream(method, path, **kw) as resp:
                if resp.status_code != 200:
                    resp.read()
                    raise error_from_response(resp.status_code, resp.content, resp.reason_phrase)
                yield resp
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{method} {self.url}{path}: {e}") from e

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- system

    def health(self) -> Health:
        """``GET /healthz``: status, VMM and accelerator (no key needed)."""
        return from_dict(Health, self._json("GET", "/healthz"))

    def openapi(self) -> str:
        """The OpenAPI document hostd was generated from."""
        return self._request("GET", "/openapi.yaml").text

    def metrics(self) -> str:
        """Operator metrics in the Prometheus text format."""
        return self._request("GET", "/metrics").text

    # -- sandboxes

    def create(
        self,
        *,
        template: Optional[str] = None,
        snapshot: Optional[str] = None,
        vcpus: Optional[int] = None,
        memory_mib: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout_s: Optional[int] = None,
        network: Optional[Mapping[str, Any]] = None,
        secret_env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        boot: Optional[str] = None,
        mounts: Optional[Sequence[Mount]] = None,
        **limits: Any,
    ) -> "Sandbox":
        """Create and boot a sandbox; returns once it runs. ``limits`` are the
        API's other create fields (``cpu_quota``, ``disk_mib``, ``idle_timeout_s``…).
        ``mounts`` are host, s3 or git mounts (:class:`Mount`). ``boot="cold"`` boots the base image instead of restoring hostd's base
        snapshot."""
        if template is None and snapshot is None:
            template = self.default_template
        body = _core.create_body(
            template=template, snapshot=snapshot, vcpus=vcpus, memory_mib=memory_mib,
            env=dict(env or {}), timeout_s=timeout_s, network=dict(network) if network else None,
            secret_env=dict(secret_env or {}), metadata=dict(metadata or {}), boot=boot,
            mounts=[dict(m) for m in mounts or []] or None, **limits,
        )
        d = self._json("POST", "/v1/sandboxes", json=body, expect=(201,))
        return Sandbox(self, from_dict(SandboxInfo, d))

    @contextlib.contextmanager
    def sandbox(self, **kw: Any) -> Iterator["Sandbox"]:
        """:meth:`create` as a context manager: the sandbox is deleted on exit,
        exceptions included. Takes :meth:`create`'s arguments."""
        sb = self.create(**kw)
        try:
            yield sb
        finally:
            sb.delete(missing_ok=True)

    def get(self, sandbox_id: str) -> "Sandbox":
        """The sandbox ``sandbox_id`` (raises :class:`NotFound`)."""
        return Sandbox(self, from_dict(SandboxInfo, self._json("GET", f"/v1/sandboxes/{sandbox_id}")))

    def list(self) -> List["Sandbox"]:
        """Every sandbox, oldest first."""
        d = self._json("GET", "/v1/sandboxes")
        return [Sandbox(self, from_dict(SandboxInfo, s)) for s in d["sandboxes"]]


class Sandbox:
    """A sandbox: run commands, move files, snapshot, fork, pause. Also a
    context manager that deletes it on exit."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self._c = client
        #: What hostd said last (see :meth:`refresh`).
        self.info = info
        #: The guest's files.
        self.files = Files(self)
        #: The egress policy: ``get()`` and ``update(...)``.
        self.network = Network(self)

    @property
    def id(self) -> str:
        """The sandbox's id."""
        return self.info.id

    @property
    def state(self) -> str:
        """The state when last seen (``running``, ``paused``…)."""
        return self.info.state

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.state!r})"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete(missing_ok=True)

    def _p(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{self.id}{suffix}"

    def _set(self, d: Dict[str, Any]) -> "Sandbox":
        self.info = from_dict(SandboxInfo, d)
        return self

    def refresh(self) -> "Sandbox":
        """Fetch the sandbox's current description into :attr:`info`."""
        return self._set(self._c._json("GET", self._p()))

    def delete(self, *, missing_ok: bool = False) -> None:
        """Stop the sandbox and delete everything it owned."""
        try:
            self._c._request("DELETE", self._p(), expect=(204,))
        except NotFound:
            if not missing_ok:
                raise

    # -- exec

    def run(
        self,
        cmd: Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        user: Optional[str] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        background: bool = False,
    ) -> Any:
        """Run ``cmd`` (a ``str`` under ``sh -c``, or an argv list) and return
        an :class:`ExecResult` once it exits; a non-zero exit is not an error
        (see ``result.ok``). ``on_stdout``/``on_stderr`` get output text as it
        arrives. ``timeout`` kills it after that many seconds. ``user`` runs it
        as that user ("root", a name or uid, optionally ":group") instead of
        the template's default. With
        ``background=True`` it returns an :class:`ExecHandle` at once."""
        body = _core.exec_body(cmd, cwd, env, stdin, timeout, user)
        if background:
            body["background"] = True
            d = self._c._json("POST", self._p("/exec"), json=body, expect=(202,))
            return ExecHandle(self, d["exec_id"])
        reader = _core.ExecReader(on_stdout, on_stderr)
        with self._c._stream("POST", self._p("/exec"), params={"stream": "true"}, json=body) as resp:
            for line in resp.iter_lines():
                reader.feed(line)
                if reader.done:
                    break
        return reader.result()

    def attach(self, exec_id: str, *, offset: int = 0) -> "ExecHandle":
        """A handle on session ``exec_id`` that reads its output from ``offset``."""
        return ExecHandle(self, exec_id, offset)

    def execs(self) -> List[ExecSession]:
        """The sandbox's exec sessions, running and finished, oldest first."""
        d = self._c._json("GET", self._p("/exec"))
        return [from_dict(ExecSession, s) for s in d["sessions"]]

    def pty(self, cmd: Command = "bash", rows: int = 24, cols: int = 80, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> "Any":
        """Start ``cmd`` on a terminal of ``rows`` x ``cols`` and connect to it
        over the WebSocket; returns a :class:`agentbox.Pty` (needs ``websockets``)."""
        from ._pty import Pty

        body = _core.exec_body(cmd, cwd, env, None, None)
        body.update(background=True, tty=True, rows=rows, cols=cols)
        d = self._c._json("POST", self._p("/exec"), json=body, expect=(202,))
        return Pty.connect(self._c.url, self._c.api_key, self.id, d["exec_id"], 0)

    def pty_attach(self, exec_id: str, *, offset: int = 0) -> "Any":
        """Reconnect to session ``exec_id``'s WebSocket, replaying output from ``offset``."""
        from ._pty import Pty

        return Pty.connect(self._c.url, self._c.api_key, self.id, exec_id, offset)

    # -- lifecycle

    def snapshot(self, *, stay_paused: bool = False, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> SnapshotInfo:
        """Capture memory, devices and disk; create sandboxes from it with
        ``client.create(snapshot=snap.id)``."""
        body = _core.create_body(stay_paused=stay_paused or None, env=dict(env or {}), cwd=cwd)
        return from_dict(SnapshotInfo, self._c._json("POST", self._p("/snapshots"), json=body, expect=(201,)))

    def fork(self, n: int = 1) -> List["Sandbox"]:
        """``n`` copy-on-write copies of the running sandbox (delete them yourself)."""
        d = self._c._json("POST", self._p("/fork"), json={"count": n}, expect=(201,))
        return [Sandbox(self._c, from_dict(SandboxInfo, s)) for s in d["sandboxes"]]

    def diff(self, other: "Any", *, path: Optional[str] = None, patch: bool = False, method: Optional[str] = None,
             exclude: Optional[Sequence[str]] = None, events: bool = False) -> Dict[str, Any]:
        """What this sandbox has that ``other`` (a sandbox, a snapshot, or an id) has not:
        ``{"method", "base_snapshot", "entries": [{"path", "status", "kind", "new", "old",
        "patch", ...}], "events"}``, every page followed."""
        against = getattr(other, "id", other)
        acc: Optional[Dict[str, Any]] = None
        cursor = None
        while True:
            page = self._c._json("GET", self._p("/diff"), params=_core.diff_params(against, path, patch, method, exclude, events and cursor is None, None, cursor))
            acc = _core.merge_diff_page(acc, page)
            cursor = page.get("next_cursor")
            if not cursor:
                return acc

    def lineage(self) -> Dict[str, Any]:
        """The tree of snapshots and forks this sandbox belongs to: ``{"sandbox_id", "root":
        {"kind", "id", "state", "created_at", "last_command": {"argv", "exit_code"}, "children"}}``."""
        return self._c._json("GET", self._p("/lineage"))

    def pause(self) -> "Sandbox":
        """Write the memory to disk and end the VM; :meth:`resume` brings it back."""
        return self._set(self._c._json("POST", self._p("/pause")))

    def resume(self) -> "Sandbox":
        """Bring a paused sandbox back, with its files and processes."""
        return self._set(self._c._json("POST", self._p("/resume")))

    def migrate(self, host: Optional[str] = None) -> "Sandbox":
        """Move the sandbox to another host of a fleet (``host``, or one the
        fleet places), with its files, processes and exec sessions. Only a
        fleet's control plane with a snapshot store does this; hostd alone
        answers NotFound."""
        body = {"host": host} if host else {}
        return self._set(self._c._json("POST", self._p("/migrate"), json=body))

    def extend(self, seconds: int) -> "Sandbox":
        """Make the sandbox's timeout end ``seconds`` from now."""
        return self._set(self._c._json("POST", self._p("/timeout"), json={"timeout_s": int(seconds)}))

    def usage(self) -> Usage:
        """CPU, memory, disk and agent-channel bytes the sandbox has used."""
        return from_dict(Usage, self._c._json("GET", self._p("/usage")))

    # -- ports

    def port(self, port: int) -> PortAccess:
        """A guest port's service URLs, token and whether it is public."""
        return from_dict(PortAccess, self._c._json("GET", self._p(f"/ports/{port}")))

    def set_public(self, port: int, public: bool = True) -> PortAccess:
        """Make a port's service URLs public (no credential), or private again."""
        return from_dict(PortAccess, self._c._json("PUT", self._p(f"/ports/{port}"), json={"public": public}))

    def share(self, port: int, expires_in_s: int = 3600) -> ShareLink:
        """A signed share link to ``port`` that expires."""
        d = self._c._json("POST", self._p(f"/ports/{port}/links"), json={"expires_in_s": int(expires_in_s)}, expect=(201,))
        return from_dict(ShareLink, d)

    def url(self, port: int, *, share: Optional[int] = None, path: bool = False) -> str:
        """A URL that opens guest ``port`` (with the sandbox's token unless the
        port is public); ``share=SECONDS`` gives a signed link that expires."""
        if share:
            link = self.share(port, share)
            return link.path_url if path or not link.url else link.url
        return _core.url_with_token(self._c._json("GET", self._p(f"/ports/{port}")), path)

    # -- events

    def events(
        self,
        types: Optional[Sequence[str]] = None,
        *,
        follow: bool = False,
        since: Optional[str] = None,
        until: Optional[str] = None,
        after: int = 0,
        limit: Optional[int] = None,
    ) -> Iterator[Event]:
        """The flight recorder, oldest first. Without ``follow`` every matching
        event (paged); with it, then each new one live until the sandbox is
        deleted or you stop iterating."""
        params = _core.event_params(types, since, until, None if follow else limit)
        if follow:
            params.update(follow="true", after=after)
            with self._c._stream("GET", self._p("/events"), params=params) as resp:
                for line in resp.iter_lines():
                    d = _core.parse_line(line)
                    if d is not None:
                        yield from_dict(Event, d)
            return
        n = 0
        while True:
            page = self._c._json("GET", self._p("/events"), params={**params, "after": after})
            for d in page["events"]:
                yield from_dict(Event, d)
                n += 1
                if limit and n >= limit:
                    return
            if not page["events"] or page["next_after"] == after:
                return
            after = page["next_after"]


class ExecHandle:
    """A command running in the background (or any session, via
    :meth:`Sandbox.attach`). Iterate it for :class:`Output` as it arrives;
    :meth:`wait` for the result; :meth:`kill` to signal it."""

    def __init__(self, sandbox: Sandbox, exec_id: str, offset: int = 0) -> None:
        self.sandbox = sandbox
        #: The session's id (use it to re-attach later).
        self.exec_id = exec_id
        #: Where the next read starts in the session's output log.
        self.offset = offset
        #: Set once the session exited.
        self.exit_code: Optional[int] = None
        self.signal = ""

    def __repr__(self) -> str:
        return f"ExecHandle({self.exec_id!r}, offset={self.offset})"

    def _read(self, reader: "_core.ExecReader") -> Iterator[Output]:
        path = self.sandbox._p(f"/exec/{self.exec_id}")
        with self.sandbox._c._stream("GET", path, params={"offset": self.offset}) as resp:
            for line in resp.iter_lines():
                out = reader.feed(line)
                if out is not None:
                    self.offset = out.offset + len(out.data)
                    yield out
                if reader.done:
                    self.exit_code, self.signal = reader.exit_code, reader.signal
                    return
        reader.result()  # raises: the stream ended early

    def __iter__(self) -> Iterator[Output]:
        return self._read(_core.ExecReader(keep=False))

    def wait(self, *, on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None) -> ExecResult:
        """Read the output from :attr:`offset` to the exit and return the result."""
        reader = _core.ExecReader(on_stdout, on_stderr)
        for _ in self._read(reader):
            pass
        return reader.result()

    def kill(self, signal: str = "SIGKILL") -> None:
        """Send ``signal`` ("SIGTERM", "TERM" or "15") to the command's process group."""
        self.sandbox._c._request("POST", self.sandbox._p(f"/exec/{self.exec_id}/signal"), json={"signal": signal}, expect=(204,))


class FileStream:
    """A file being downloaded: iterate it for chunks of bytes; close it (or
    use ``with``) when done."""

    def __init__(self, cm: Any) -> None:
        self._cm = cm
        self._resp: httpx.Response = cm.__enter__()

    def __iter__(self) -> Iterator[bytes]:
        return self._resp.iter_bytes(_core.CHUNK)

    def read(self) -> bytes:
        """The rest of the file."""
        return b"".join(self)

    def close(self) -> None:
        """End the download."""
        self._cm.__exit__(None, None, None)

    def __enter__(self) -> "FileStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Watch:
    """A directory being watched: iterate it for :class:`FileEvent`; close it to stop."""

    def __init__(self, cm: Any) -> None:
        self._cm = cm
        self._resp: httpx.Response = cm.__enter__()

    def __iter__(self) -> Iterator[FileEvent]:
        for line in self._resp.iter_lines():
            ev = _core.file_event(line)
            if ev is not None:
                yield ev

    def close(self) -> None:
        """Stop watching."""
        self._cm.__exit__(None, None, None)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _body(data: Data) -> Any:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        return _core.file_chunks(data)  # type: ignore[arg-type]
    return data


class Files:
    """The guest's filesystem (absolute paths)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _req(self, method: str, suffix: str, path: str, expect: Sequence[int] = (200,), **kw: Any) -> httpx.Response:
        params = {"path": path, **kw.pop("params", {})}
        return self._sb._c._request(method, self._sb._p("/files" + suffix), params=params, expect=expect, **kw)

    def read(self, path: str, *, format: str = "bytes", encoding: str = "utf-8") -> Any:
        """The file's content: ``format="bytes"`` (default), ``"text"``, or
        ``"stream"`` (a :class:`FileStream` of chunks, for large files)."""
        if format == "stream":
            return FileStream(self._sb._c._stream("GET", self._sb._p("/files"), params={"path": path}))
        b = self._req("GET", "", path).content
        return b.decode(encoding) if format == "text" else b

    def write(self, path: str, data: Data, *, mode: Optional[Union[int, str]] = None) -> None:
        """Write ``data`` (str, bytes, a binary file object or an iterable of
        bytes, streamed) to ``path``, replacing it atomically; parents are created."""
        params = {}
        if mode is not None:
            params["mode"] = mode if isinstance(mode, str) else format(mode, "04o")
        self._req("PUT", "", path, expect=(204,), params=params, content=_body(data),
                  headers={"Content-Type": _core.FILE_TYPE})

    def list(self, path: str) -> List[FileInfo]:
        """The entries of directory ``path``, every page of them (see :meth:`pages`)."""
        return [e for page in self.pages(path) for e in page]

    def pages(self, path: str, *, limit: Optional[int] = None) -> Iterator[List[FileInfo]]:
        """Directory ``path``'s entries a page at a time (up to ``limit`` each,
        hostd's default 1000), sorted by name, following the listing's cursor."""
        params: Dict[str, Any] = {} if limit is None else {"limit": limit}
        while True:
            d = self._req("GET", "/list", path, params=dict(params)).json()
            yield [from_dict(FileInfo, e) for e in d["entries"]]
            cursor = d.get("next_cursor")
            if not cursor or cursor == params.get("cursor"):
                return
            params["cursor"] = cursor

    def stat(self, path: str) -> FileInfo:
        """Describe ``path`` (raises :class:`NotFound`)."""
        return from_dict(FileInfo, self._req("GET", "/stat", path).json())

    def exists(self, path: str) -> bool:
        """True if ``path`` exists."""
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def mkdir(self, path: str) -> None:
        """Create directory ``path`` and its parents (mkdir -p)."""
        self._req("POST", "/mkdir", path, expect=(204,))

    def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``."""
        self._sb._c._request("POST", self._sb._p("/files/move"), json={"from": src, "to": dst}, expect=(204,))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, or a directory (``recursive=True`` if not empty)."""
        self._req("DELETE", "", path, expect=(204,), params={"recursive": "true" if recursive else "false"})

    def upload_dir(self, local: Union[str, "os.PathLike[str]"], remote: str) -> Dict[str, int]:
        """Copy local directory ``local`` into ``remote`` (as a tar.gz stream);
        returns ``{"entries": N, "bytes": N}``."""
        with tempfile.SpooledTemporaryFile(max_size=32 << 20) as tmp:
            _core.tar_dir(local, tmp)  # type: ignore[arg-type]
            tmp.seek(0)
            resp = self._req("PUT", "/archive", remote, content=_core.file_chunks(tmp),  # type: ignore[arg-type]
                             headers={"Content-Type": _core.TAR_TYPE})
            return resp.json()  # type: ignore[no-any-return]

    def download_dir(self, remote: str, local: Union[str, "os.PathLike[str]"]) -> int:
        """Copy guest directory ``remote`` into ``local``, refusing entries
        that would escape it; returns the number of entries."""
        with tempfile.TemporaryFile() as tmp:
            with self._sb._c._stream("GET", self._sb._p("/files/archive"), params={"path": remote}) as resp:
                for chunk in resp.iter_bytes(_core.CHUNK):
                    tmp.write(chunk)
            tmp.seek(0)
            return _core.untar_safely(tmp, local)

    def watch(self, path: str, *, recursive: bool = True) -> Watch:
        """Watch directory ``path`` for changes; iterate the :class:`Watch`."""
        params = {"path": path, "recursive": "true" if recursive else "false"}
        return Watch(self._sb._c._stream("GET", self._sb._p("/files/watch"), params=params))


class Network:
    """A sandbox's egress policy."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def get(self) -> NetworkPolicy:
        """The policy in force."""
        return from_dict(NetworkPolicy, self._sb._c._json("GET", self._sb._p("/network")))

    def update(
        self,
        *,
        allow_domains: Optional[Sequence[str]] = None,
        allow_cidrs: Optional[Sequence[str]] = None,
        allow_ports: Optional[Sequence[int]] = None,
        inject: Optional[Sequence[Mapping[str, str]]] = None,
    ) -> NetworkPolicy:
        """Replace the fields given (the others stay); applies at once."""
        body = {k: list(v) for k, v in dict(allow_domains=allow_domains, allow_cidrs=allow_cidrs, allow_ports=allow_ports, inject=inject).items() if v is not None}
        return from_dict(NetworkPolicy, self._sb._c._json("PATCH", self._sb._p("/network"), json=body))


class Snapshots:
    """Snapshots: lineage and deletion (take one with :meth:`Sandbox.snapshot`)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self) -> List[SnapshotInfo]:
        """Every snapshot, oldest first."""
        return [from_dict(SnapshotInfo, s) for s in self._c._json("GET", "/v1/snapshots")["snapshots"]]

    def get(self, snapshot_id: str) -> SnapshotInfo:
        """Describe a snapshot, with what uses it."""
        return from_dict(SnapshotInfo, self._c._json("GET", f"/v1/snapshots/{snapshot_id}"))

    def delete(self, snapshot_id: str) -> None:
        """Delete a snapshot nothing uses (else :class:`Conflict`)."""
        self._c._request("DELETE", f"/v1/snapshots/{snapshot_id}", expect=(204,))

    def diff(self, snapshot_id: str, against: str, *, path: Optional[str] = None, patch: bool = False,
             method: Optional[str] = None, exclude: Optional[Sequence[str]] = None, events: bool = False) -> Dict[str, Any]:
        """What snapshot ``snapshot_id`` has that ``against`` (a snapshot or sandbox id) has not (one page);
        ``exclude`` and ``events`` as :meth:`Sandbox.diff`'s."""
        params = _core.diff_params(against, path, patch, method, exclude, events, None, None)
        return self._c._json("GET", f"/v1/snapshots/{snapshot_id}/diff", params=params)

    def replay(self, snapshot_id: str, cmd: Any, n: int = 3, *, env: Optional[Dict[str, str]] = None, cwd: str = "",
               timeout_s: int = 0, keep: bool = False, progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
        """Restore the snapshot ``n`` times, run ``cmd`` (a string runs through ``sh -c``) in each:
        ``{"runs": [{"index", "exit_code", "stdout", "stderr", "group"}], "groups", "differ"}``;
        ``env``, ``cwd`` and ``timeout_s`` are each run's; ``keep`` keeps the restored sandboxes;
        ``progress`` gets each ``started``/``finished`` line as it comes."""
        body = _core.replay_body(cmd, n, env, cwd, timeout_s, keep)
        with self._c._stream("POST", f"/v1/snapshots/{snapshot_id}/replay", params={"stream": "true"}, json=body) as resp:
            return _core.replay_lines(resp.iter_lines(), progress)


class Secrets:
    """Secrets for egress injection (``{{secret:NAME}}``); values are never returned."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def set(self, name: str, value: str) -> Secret:
        """Store (or replace) secret ``name``."""
        return from_dict(Secret, self._c._json("POST", "/v1/secrets", json={"name": name, "value": value}, expect=(201,)))

    def list(self) -> List[Secret]:
        """The secrets' names."""
        return [from_dict(Secret, s) for s in self._c._json("GET", "/v1/secrets")["secrets"]]

    def delete(self, name: str) -> None:
        """Delete secret ``name``."""
        self._c._request("DELETE", f"/v1/secrets/{name}", expect=(204,))


class Keys:
    """API keys (admin): create, list, revoke, rotate the bootstrap key."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self, name: str = "", *, project: str = "", role: str = "member",
        expires_in_s: int = 0, expires_at: Optional[str] = None,
    ) -> CreatedKey:
        """Make a key of ``project`` (default: the caller's) with ``role``; its secret is in the answer only."""
        body: Dict[str, Any] = {"name": name, "project": project, "role": role, "expires_in_s": expires_in_s}
        if expires_at is not None:
            body["expires_at"] = expires_at
        return _created_key(self._c._json("POST", "/v1/keys", json=body, expect=(201,)))

    def list(self, project: Optional[str] = None) -> List[APIKey]:
        """The live keys of the caller's project (admin: ``project``, or ``"*"`` for all)."""
        params = {"project": project} if project else None
        return [from_dict(APIKey, k) for k in (self._c._json("GET", "/v1/keys", params=params))["keys"]]

    def revoke(self, key_id: str) -> None:
        """Revoke key ``key_id``: refused from its next call, its streams closed."""
        self._c._request("DELETE", f"/v1/keys/{key_id}", expect=(204,))

    def rotate(self) -> CreatedKey:
        """Make a new bootstrap key (written to hostd's key file) and revoke the previous one."""
        return _created_key(self._c._json("POST", "/v1/keys/rotate", expect=(201,)))


class Projects:
    """Projects (admin): create, list."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, name: str) -> Project:
        """Create project ``name``."""
        return from_dict(Project, self._c._json("POST", "/v1/projects", json={"name": name}, expect=(201,)))

    def list(self) -> List[Project]:
        """Every project."""
        return [from_dict(Project, p) for p in (self._c._json("GET", "/v1/projects"))["projects"]]


def _created_key(d: Dict[str, Any]) -> CreatedKey:
    return CreatedKey(key=from_dict(APIKey, d["key"]), secret=d["secret"])
