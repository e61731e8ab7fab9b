"""The asyncio client: :class:`AsyncClient`, :class:`AsyncSandbox` and their helpers
(the same surface as the sync client, with ``async``)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import IO, Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import httpx

from . import _core
from ._core import Command, OutputCallback
from ._errors import ConnectionFailed, NotFound, error_from_response
from ._async_templates import AsyncTemplates
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

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncExecHandle", "AsyncFiles", "AsyncNetwork", "AsyncTemplates", "AsyncSecrets", "AsyncSnapshots", "AsyncFileStream", "AsyncWatch"]

Data = Union[str, bytes, IO[bytes], Iterable[bytes]]


class AsyncClient:
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
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=_core.headers(self.api_key),
            # exec and files stream: no read timeout unless asked for
            timeout=httpx.Timeout(timeout, connect=30.0),
        )
        #: Templates: list, get, create, delete, build from a blueprint.
        self.templates = AsyncTemplates(self)
        #: Secrets for egress injection.
        self.secrets = AsyncSecrets(self)
        #: API keys (admin).
        self.keys = AsyncKeys(self)
        #: Projects (admin).
        self.projects = AsyncProjects(self)
        #: Snapshots: list, get, delete.
        self.snapshots = AsyncSnapshots(self)

    # -- plumbing

    async def _request(self, method: str, path: str, *, expect: Sequence[int] = (200,), **kw: Any) -> httpx.Response:
        kw["headers"] = {**_core.trace_headers(), **kw.get("headers", {})}
        try:
            resp = await self._http.request(method, path, **kw)
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{method} {self.url}{path}: {e}") from e
        if resp.status_code not in expect:
            raise error_from_response(resp.status_code, resp.content, resp.reason_phrase)
        return resp

    async def _json(self, method: str, path: str, **kw: Any) -> Any:
        return (await self._request(method, path, **kw)).json()

    @contextlib.asynccontextmanager
    async def _stream(self, method: str, path: str, **kw: Any) -> AsyncIterator[httpx.Response]:
        kw["headers"] = {**_core.trace_headers(), **kw.get("headers", {})}
        try:
            async with self._http.stream(method, path, **kw) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    raise error_from_response(resp.status_code, resp.content, resp.reason_phrase)
                yield resp
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{method} {self.url}{path}: {e}") from e

    async def close(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- system

    async def health(self) -> Health:
        """``GET /healthz``: status, VMM and accelerator (no key needed)."""
        return from_dict(Health, await self._json("GET", "/healthz"))

    async def openapi(self) -> str:
        """The OpenAPI document hostd was generated from."""
        return (await self._request("GET", "/openapi.yaml")).text

    async def metrics(self) -> str:
        """Operator metrics in the Prometheus text format."""
        return (await self._request("GET", "/metrics")).text

    # -- sandboxes

    async def create(
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
    ) -> "AsyncSandbox":
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
        d = await self._json("POST", "/v1/sandboxes", json=body, expect=(201,))
        return AsyncSandbox(self, from_dict(SandboxInfo, d))

    @contextlib.asynccontextmanager
    async def sandbox(self, **kw: Any) -> AsyncIterator["AsyncSandbox"]:
        """:meth:`create` as a context manager: the sandbox is deleted on exit,
        exceptions included. Takes :meth:`create`'s arguments."""
        sb = await self.create(**kw)
        try:
            yield sb
        finally:
            await sb.delete(missing_ok=True)

    async def get(self, sandbox_id: str) -> "AsyncSandbox":
        """The sandbox ``sandbox_id`` (raises :class:`NotFound`)."""
        return AsyncSandbox(self, from_dict(SandboxInfo, await self._json("GET", f"/v1/sandboxes/{sandbox_id}")))

    async def list(self) -> List["AsyncSandbox"]:
        """Every sandbox, oldest first."""
        d = await self._json("GET", "/v1/sandboxes")
        return [AsyncSandbox(self, from_dict(SandboxInfo, s)) for s in d["sandboxes"]]


class AsyncSandbox:
    """A sandbox: run commands, move files, snapshot, fork, pause. Also a
    context manager that deletes it on exit."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self._c = client
        #: What hostd said last (see :meth:`refresh`).
        self.info = info
        #: The guest's files.
        self.files = AsyncFiles(self)
        #: The egress policy: ``get()`` and ``update(...)``.
        self.network = AsyncNetwork(self)

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

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.delete(missing_ok=True)

    def _p(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{self.id}{suffix}"

    def _set(self, d: Dict[str, Any]) -> "AsyncSandbox":
        self.info = from_dict(SandboxInfo, d)
        return self

    async def refresh(self) -> "AsyncSandbox":
        """Fetch the sandbox's current description into :attr:`info`."""
        return self._set(await self._c._json("GET", self._p()))

    async def delete(self, *, missing_ok: bool = False) -> None:
        """Stop the sandbox and delete everything it owned."""
        try:
            await self._c._request("DELETE", self._p(), expect=(204,))
        except NotFound:
            if not missing_ok:
                raise

    # -- exec

    async def run(
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
        ``background=True`` it returns an :class:`AsyncExecHandle` at once."""
        body = _core.exec_body(cmd, cwd, env, stdin, timeout, user)
        if background:
            body["background"] = True
            d = await self._c._json("POST", self._p("/exec"), json=body, expect=(202,))
            return AsyncExecHandle(self, d["exec_id"])
        reader = _core.ExecReader(on_stdout, on_stderr)
        async with self._c._stream("POST", self._p("/exec"), params={"stream": "true"}, json=body) as resp:
            async for line in resp.aiter_lines():
                reader.feed(line)
                if reader.done:
                    break
        return reader.result()

    def attach(self, exec_id: str, *, offset: int = 0) -> "AsyncExecHandle":
        """A handle on session ``exec_id`` that reads its output from ``offset``."""
        return AsyncExecHandle(self, exec_id, offset)

    async def execs(self) -> List[ExecSession]:
        """The sandbox's exec sessions, running and finished, oldest first."""
        d = await self._c._json("GET", self._p("/exec"))
        return [from_dict(ExecSession, s) for s in d["sessions"]]

    async def pty(self, cmd: Command = "bash", rows: int = 24, cols: int = 80, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> "Any":
        """Start ``cmd`` on a terminal of ``rows`` x ``cols`` and connect to it
        over the WebSocket; returns a :class:`agentbox.Pty` (needs ``websockets``)."""
        from ._pty import AsyncPty

        body = _core.exec_body(cmd, cwd, env, None, None)
        body.update(background=True, tty=True, rows=rows, cols=cols)
        d = await self._c._json("POST", self._p("/exec"), json=body, expect=(202,))
        return await AsyncPty.connect(self._c.url, self._c.api_key, self.id, d["exec_id"], 0)

    async def pty_attach(self, exec_id: str, *, offset: int = 0) -> "Any":
        """Reconnect to session ``exec_id``'s WebSocket, replaying output from ``offset``."""
        from ._pty import AsyncPty

        return await AsyncPty.connect(self._c.url, self._c.api_key, self.id, exec_id, offset)

    # -- lifecycle

    async def snapshot(self, *, stay_paused: bool = False, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> SnapshotInfo:
        """Capture memory, devices and disk; create sandboxes from it with
        ``client.create(snapshot=snap.id)``."""
        body = _core.create_body(stay_paused=stay_paused or None, env=dict(env or {}), cwd=cwd)
        return from_dict(SnapshotInfo, await self._c._json("POST", self._p("/snapshots"), json=body, expect=(201,)))

    async def fork(self, n: int = 1) -> List["AsyncSandbox"]:
        """``n`` copy-on-write copies of the running sandbox (delete them yourself)."""
        d = await self._c._json("POST", self._p("/fork"), json={"count": n}, expect=(201,))
        return [AsyncSandbox(self._c, from_dict(SandboxInfo, s)) for s in d["sandboxes"]]

    async def diff(self, other: "Any", *, path: Optional[str] = None, patch: bool = False, method: Optional[str] = None,
             exclude: Optional[Sequence[str]] = None, events: bool = False) -> Dict[str, Any]:
        """What this sandbox has that ``other`` (a sandbox, a snapshot, or an id) has not:
        ``{"method", "base_snapshot", "entries": [{"path", "status", "kind", "new", "old",
        "patch", ...}], "events"}``, every page followed."""
        against = getattr(other, "id", other)
        acc: Optional[Dict[str, Any]] = None
        cursor = None
        while True:
            page = await self._c._json("GET", self._p("/diff"), params=_core.diff_params(against, path, patch, method, exclude, events and cursor is None, None, cursor))
            acc = _core.merge_diff_page(acc, page)
            cursor = page.get("next_cursor")
            if not cursor:
                return acc

    async def lineage(self) -> Dict[str, Any]:
        """The tree of snapshots and forks this sandbox belongs to: ``{"sandbox_id", "root":
        {"kind", "id", "state", "created_at", "last_command": {"argv", "exit_code"}, "children"}}``."""
        return await self._c._json("GET", self._p("/lineage"))

    async def pause(self) -> "AsyncSandbox":
        """Write the memory to disk and end the VM; :meth:`resume` brings it back."""
        return self._set(await self._c._json("POST", self._p("/pause")))

    async def resume(self) -> "AsyncSandbox":
        """Bring a paused sandbox back, with its files and processes."""
        return self._set(await self._c._json("POST", self._p("/resume")))

    async def migrate(self, host: Optional[str] = None) -> "AsyncSandbox":
        """Move the sandbox to another host of a fleet (``host``, or one the
        fleet places), with its files, processes and exec sessions. Only a
        fleet's control plane with a snapshot store does this; hostd alone
        answers NotFound."""
        body = {"host": host} if host else {}
        return self._set(await self._c._json("POST", self._p("/migrate"), json=body))

    async def extend(self, seconds: int) -> "AsyncSandbox":
        """Make the sandbox's timeout end ``seconds`` from now."""
        return self._set(await self._c._json("POST", self._p("/timeout"), json={"timeout_s": int(seconds)}))

    async def usage(self) -> Usage:
        """CPU, memory, disk and agent-channel bytes the sandbox has used."""
        return from_dict(Usage, await self._c._json("GET", self._p("/usage")))

    # -- ports

    async def port(self, port: int) -> PortAccess:
        """A guest port's service URLs, token and whether it is public."""
        return from_dict(PortAccess, await self._c._json("GET", self._p(f"/ports/{port}")))

    async def set_public(self, port: int, public: bool = True) -> PortAccess:
        """Make a port's service URLs public (no credential), or private again."""
        return from_dict(PortAccess, await self._c._json("PUT", self._p(f"/ports/{port}"), json={"public": public}))

    async def share(self, port: int, expires_in_s: int = 3600) -> ShareLink:
        """A signed share link to ``port`` that expires."""
        d = await self._c._json("POST", self._p(f"/ports/{port}/links"), json={"expires_in_s": int(expires_in_s)}, expect=(201,))
        return from_dict(ShareLink, d)

    async def url(self, port: int, *, share: Optional[int] = None, path: bool = False) -> str:
        """A URL that opens guest ``port`` (with the sandbox's token unless the
        port is public); ``share=SECONDS`` gives a signed link that expires."""
        if share:
            link = await self.share(port, share)
            return link.path_url if path or not link.url else link.url
        return _core.url_with_token(await self._c._json("GET", self._p(f"/ports/{port}")), path)

    # -- events

    async def events(
        self,
        types: Optional[Sequence[str]] = None,
        *,
        follow: bool = False,
        since: Optional[str] = None,
        until: Optional[str] = None,
        after: int = 0,
        limit: Optional[int] = None,
    ) -> AsyncIterator[Event]:
        """The flight recorder, oldest first. Without ``follow`` every matching
        event (paged); with it, then each new one live until the sandbox is
        deleted or you stop iterating."""
        params = _core.event_params(types, since, until, None if follow else limit)
        if follow:
            params.update(follow="true", after=after)
            async with self._c._stream("GET", self._p("/events"), params=params) as resp:
                async for line in resp.aiter_lines():
                    d = _core.parse_line(line)
                    if d is not None:
                        yield from_dict(Event, d)
            return
        n = 0
        while True:
            page = await self._c._json("GET", self._p("/events"), params={**params, "after": after})
            for d in page["events"]:
                yield from_dict(Event, d)
                n += 1
                if limit and n >= limit:
                    return
            if not page["events"] or page["next_after"] == after:
                return
            after = page["next_after"]


class AsyncExecHandle:
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

    async def _read(self, reader: "_core.ExecReader") -> AsyncIterator[Output]:
        path = self.sandbox._p(f"/exec/{self.exec_id}")
        async with self.sandbox._c._stream("GET", path, params={"offset": self.offset}) as resp:
            async for line in resp.aiter_lines():
                out = reader.feed(line)
                if out is not None:
                    self.offset = out.offset + len(out.data)
                    yield out
                if reader.done:
                    self.exit_code, self.signal = reader.exit_code, reader.signal
                    return
        reader.result()  # raises: the stream ended early

    def __aiter__(self) -> AsyncIterator[Output]:
        return self._read(_core.ExecReader(keep=False))

    async def wait(self, *, on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None) -> ExecResult:
        """Read the output from :attr:`offset` to the exit and return the result."""
        reader = _core.ExecReader(on_stdout, on_stderr)
        async for _ in self._read(reader):
            pass
        return reader.result()

    async def kill(self, signal: str = "SIGKILL") -> None:
        """Send ``signal`` ("SIGTERM", "TERM" or "15") to the command's process group."""
        await self.sandbox._c._request("POST", self.sandbox._p(f"/exec/{self.exec_id}/signal"), json={"signal": signal}, expect=(204,))


class AsyncFileStream:
    """A file being downloaded: ``async for`` it for chunks of bytes; close it
    (or use ``async with``) when done."""

    def __init__(self, cm: Any) -> None:
        self._cm = cm
        self._resp: Optional[httpx.Response] = None

    async def _open(self) -> httpx.Response:
        if self._resp is None:
            self._resp = await self._cm.__aenter__()
        return self._resp

    async def _chunks(self) -> AsyncIterator[bytes]:
        resp = await self._open()
        async for b in resp.aiter_bytes(_core.CHUNK):
            yield b

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def read(self) -> bytes:
        """The rest of the file."""
        return b"".join([b async for b in self._chunks()])

    async def close(self) -> None:
        """End the download."""
        if self._resp is not None:
            self._resp = None
            await self._cm.__aexit__(None, None, None)

    async def __aenter__(self) -> "AsyncFileStream":
        await self._open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncWatch:
    """A directory being watched: ``async for`` it for :class:`FileEvent`;
    close it (or leave ``async with``) to stop."""

    def __init__(self, cm: Any) -> None:
        self._cm = cm
        self._resp: Optional[httpx.Response] = None

    async def _open(self) -> httpx.Response:
        if self._resp is None:
            self._resp = await self._cm.__aenter__()
        return self._resp

    async def _events(self) -> AsyncIterator[FileEvent]:
        resp = await self._open()
        async for line in resp.aiter_lines():
            ev = _core.file_event(line)
            if ev is not None:
                yield ev

    def __aiter__(self) -> AsyncIterator[FileEvent]:
        return self._events()

    async def close(self) -> None:
        """Stop watching."""
        if self._resp is not None:
            self._resp = None
            await self._cm.__aexit__(None, None, None)

    async def __aenter__(self) -> "AsyncWatch":
        await self._open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def _achunks(it: Iterable[bytes]) -> AsyncIterator[bytes]:
    for b in it:
        yield b


def _body(data: Data) -> Any:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        return _achunks(_core.file_chunks(data))  # type: ignore[arg-type]
    if hasattr(data, "__aiter__"):
        return data
    return _achunks(data)


class AsyncFiles:
    """The guest's filesystem (absolute paths)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def _req(self, method: str, suffix: str, path: str, expect: Sequence[int] = (200,), **kw: Any) -> httpx.Response:
        params = {"path": path, **kw.pop("params", {})}
        return await self._sb._c._request(method, self._sb._p("/files" + suffix), params=params, expect=expect, **kw)

    async def read(self, path: str, *, format: str = "bytes", encoding: str = "utf-8") -> Any:
        """The file's content: ``format="bytes"`` (default), ``"text"``, or
        ``"stream"`` (an :class:`AsyncFileStream` of chunks, for large files)."""
        if format == "stream":
            fs = AsyncFileStream(self._sb._c._stream("GET", self._sb._p("/files"), params={"path": path}))
            await fs._open()
            return fs
        b = (await self._req("GET", "", path)).content
        return b.decode(encoding) if format == "text" else b

    async def write(self, path: str, data: Union[Data, AsyncIterator[bytes]], *, mode: Optional[Union[int, str]] = None) -> None:
        """Write ``data`` (str, bytes, a binary file object, or a sync or async
        iterable of bytes, streamed) to ``path``, replacing it atomically;
        parents are created."""
        params = {}
        if mode is not None:
            params["mode"] = mode if isinstance(mode, str) else format(mode, "04o")
        await self._req("PUT", "", path, expect=(204,), params=params, content=_body(data),  # type: ignore[arg-type]
                        headers={"Content-Type": _core.FILE_TYPE})

    async def list(self, path: str) -> List[FileInfo]:
        """The entries of directory ``path``, every page of them (see :meth:`pages`)."""
        return [e async for page in self.pages(path) for e in page]

    async def pages(self, path: str, *, limit: Optional[int] = None) -> AsyncIterator[List[FileInfo]]:
        """Directory ``path``'s entries a page at a time (up to ``limit`` each,
        hostd's default 1000), sorted by name, following the listing's cursor."""
        params: Dict[str, Any] = {} if limit is None else {"limit": limit}
        while True:
            d = (await self._req("GET", "/list", path, params=dict(params))).json()
            yield [from_dict(FileInfo, e) for e in d["entries"]]
            cursor = d.get("next_cursor")
            if not cursor or cursor == params.get("cursor"):
                return
            params["cursor"] = cursor

    async def stat(self, path: str) -> FileInfo:
        """Describe ``path`` (raises :class:`NotFound`)."""
        return from_dict(FileInfo, (await self._req("GET", "/stat", path)).json())

    async def exists(self, path: str) -> bool:
        """True if ``path`` exists."""
        try:
            await self.stat(path)
            return True
        except NotFound:
            return False

    async def mkdir(self, path: str) -> None:
        """Create directory ``path`` and its parents (mkdir -p)."""
        await self._req("POST", "/mkdir", path, expect=(204,))

    async def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``."""
        await self._sb._c._request("POST", self._sb._p("/files/move"), json={"from": src, "to": dst}, expect=(204,))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, or a directory (``recursive=True`` if not empty)."""
        await self._req("DELETE", "", path, expect=(204,), params={"recursive": "true" if recursive else "false"})

    async def upload_dir(self, local: Union[str, "os.PathLike[str]"], remote: str) -> Dict[str, int]:
        """Copy local directory ``local`` into ``remote`` (as a tar.gz stream);
        returns ``{"entries": N, "bytes": N}``."""
        with tempfile.SpooledTemporaryFile(max_size=32 << 20) as tmp:
            _core.tar_dir(local, tmp)  # type: ignore[arg-type]
            tmp.seek(0)
            resp = await self._req("PUT", "/archive", remote, content=_achunks(_core.file_chunks(tmp)),  # type: ignore[arg-type]
                                   headers={"Content-Type": _core.TAR_TYPE})
            return resp.json()  # type: ignore[no-any-return]

    async def download_dir(self, remote: str, local: Union[str, "os.PathLike[str]"]) -> int:
        """Copy guest directory ``remote`` into ``local``, refusing entries
        that would escape it; returns the number of entries."""
        with tempfile.TemporaryFile() as tmp:
            async with self._sb._c._stream("GET", self._sb._p("/files/archive"), params={"path": remote}) as resp:
                async for chunk in resp.aiter_bytes(_core.CHUNK):
                    tmp.write(chunk)
            tmp.seek(0)
            return _core.untar_safely(tmp, local)

    async def watch(self, path: str, *, recursive: bool = True) -> AsyncWatch:
        """Watch directory ``path`` for changes; ``async for`` the :class:`AsyncWatch`."""
        params = {"path": path, "recursive": "true" if recursive else "false"}
        w = AsyncWatch(self._sb._c._stream("GET", self._sb._p("/files/watch"), params=params))
        await w._open()
        return w


class AsyncNetwork:
    """A sandbox's egress policy."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def get(self) -> NetworkPolicy:
        """The policy in force."""
        return from_dict(NetworkPolicy, await self._sb._c._json("GET", self._sb._p("/network")))

    async def update(
        self,
        *,
        allow_domains: Optional[Sequence[str]] = None,
        allow_cidrs: Optional[Sequence[str]] = None,
        allow_ports: Optional[Sequence[int]] = None,
        inject: Optional[Sequence[Mapping[str, str]]] = None,
    ) -> NetworkPolicy:
        """Replace the fields given (the others stay); applies at once."""
        body = {k: list(v) for k, v in dict(allow_domains=allow_domains, allow_cidrs=allow_cidrs, allow_ports=allow_ports, inject=inject).items() if v is not None}
        return from_dict(NetworkPolicy, await self._sb._c._json("PATCH", self._sb._p("/network"), json=body))


class AsyncSnapshots:
    """Snapshots: lineage and deletion (take one with :meth:`AsyncSandbox.snapshot`)."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def list(self) -> List[SnapshotInfo]:
        """Every snapshot, oldest first."""
        return [from_dict(SnapshotInfo, s) for s in (await self._c._json("GET", "/v1/snapshots"))["snapshots"]]

    async def get(self, snapshot_id: str) -> SnapshotInfo:
        """Describe a snapshot, with what uses it."""
        return from_dict(SnapshotInfo, await self._c._json("GET", f"/v1/snapshots/{snapshot_id}"))

    async def delete(self, snapshot_id: str) -> None:
        """Delete a snapshot nothing uses (else :class:`Conflict`)."""
        await self._c._request("DELETE", f"/v1/snapshots/{snapshot_id}", expect=(204,))

    async def diff(self, snapshot_id: str, against: str, *, path: Optional[str] = None, patch: bool = False,
                   method: Optional[str] = None, exclude: Optional[Sequence[str]] = None, events: bool = False) -> Dict[str, Any]:
        """What snapshot ``snapshot_id`` has that ``against`` (a snapshot or sandbox id) has not (one page);
        ``exclude`` and ``events`` as :meth:`Sandbox.diff`'s."""
        params = _core.diff_params(against, path, patch, method, exclude, events, None, None)
        return await self._c._json("GET", f"/v1/snapshots/{snapshot_id}/diff", params=params)

    async def replay(self, snapshot_id: str, cmd: Any, n: int = 3, *, env: Optional[Dict[str, str]] = None, cwd: str = "",
                     timeout_s: int = 0, keep: bool = False,
                     progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
        """Restore the snapshot ``n`` times, run ``cmd`` in each (see :meth:`Snapshots.replay`)."""
        body = _core.replay_body(cmd, n, env, cwd, timeout_s, keep)
        async with self._c._stream("POST", f"/v1/snapshots/{snapshot_id}/replay", params={"stream": "true"}, json=body) as resp:
            lines = [line async for line in resp.aiter_lines()]
        return _core.replay_lines(lines, progress)


class AsyncSecrets:
    """Secrets for egress injection (``{{secret:NAME}}``); values are never returned."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def set(self, name: str, value: str) -> Secret:
        """Store (or replace) secret ``name``."""
        return from_dict(Secret, await self._c._json("POST", "/v1/secrets", json={"name": name, "value": value}, expect=(201,)))

    async def list(self) -> List[Secret]:
        """The secrets' names."""
        return [from_dict(Secret, s) for s in (await self._c._json("GET", "/v1/secrets"))["secrets"]]

    async def delete(self, name: str) -> None:
        """Delete secret ``name``."""
        await self._c._request("DELETE", f"/v1/secrets/{name}", expect=(204,))


class AsyncKeys:
    """API keys (admin): create, list, revoke, rotate the bootstrap key."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(
        self, name: str = "", *, project: str = "", role: str = "member",
        expires_in_s: int = 0, expires_at: Optional[str] = None,
    ) -> CreatedKey:
        """Make a key of ``project`` (default: the caller's) with ``role``; its secret is in the answer only."""
        body: Dict[str, Any] = {"name": name, "project": project, "role": role, "expires_in_s": expires_in_s}
        if expires_at is not None:
            body["expires_at"] = expires_at
        return _created_key(await self._c._json("POST", "/v1/keys", json=body, expect=(201,)))

    async def list(self, project: Optional[str] = None) -> List[APIKey]:
        """The live keys of the caller's project (admin: ``project``, or ``"*"`` for all)."""
        params = {"project": project} if project else None
        return [from_dict(APIKey, k) for k in (await self._c._json("GET", "/v1/keys", params=params))["keys"]]

    async def revoke(self, key_id: str) -> None:
        """Revoke key ``key_id``: refused from its next call, its streams closed."""
        await self._c._request("DELETE", f"/v1/keys/{key_id}", expect=(204,))

    async def rotate(self) -> CreatedKey:
        """Make a new bootstrap key (written to hostd's key file) and revoke the previous one."""
        return _created_key(await self._c._json("POST", "/v1/keys/rotate", expect=(201,)))


class AsyncProjects:
    """Projects (admin): create, list."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(self, name: str) -> Project:
        """Create project ``name``."""
        return from_dict(Project, await self._c._json("POST", "/v1/projects", json={"name": name}, expect=(201,)))

    async def list(self) -> List[Project]:
        """Every project."""
        return [from_dict(Project, p) for p in (await self._c._json("GET", "/v1/projects"))["projects"]]


def _created_key(d: Dict[str, Any]) -> CreatedKey:
    return CreatedKey(key=from_dict(APIKey, d["key"]), secret=d["secret"])
