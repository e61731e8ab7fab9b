"""Interactive sessions over hostd's PTY WebSocket (needs ``websockets``)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, AsyncIterator, Dict, Iterator, Optional

from . import _core
from ._errors import AgentboxError, ConnectionFailed, make_error

__all__ = ["AsyncPty", "Pty"]

_EOF = object()


def _ws_url(base: str, sandbox_id: str, exec_id: str, offset: int) -> str:
    scheme, rest = base.split("://", 1)
    ws = "wss" if scheme == "https" else "ws"
    return f"{ws}://{rest}/v1/sandboxes/{sandbox_id}/exec/{exec_id}/pty?offset={int(offset)}"


async def _dial(url: str, headers: Dict[str, str]) -> Any:
    try:
        import websockets
    except ImportError as e:  # pragma: no cover - an install problem
        raise AgentboxError("sb.pty needs the websockets package") from e
    major = int(websockets.__version__.split(".")[0])
    try:
        if major >= 14:
            from websockets.asyncio.client import connect

            return await connect(url, additional_headers=headers, max_size=8 << 20)
        return await websockets.connect(url, extra_headers=headers, max_size=8 << 20)  # type: ignore[attr-defined]
    except OSError as e:
        raise ConnectionFailed(f"pty {url}: {e}") from e
    except Exception as e:
        status = getattr(e, "status_code", None) or getattr(getattr(e, "response", None), "status_code", 0)
        if status:
            codes = {401: "unauthorized", 404: "sandbox_not_found", 409: "sandbox_not_running"}
            raise make_error(codes.get(status, "http_error"), f"pty: {e}", status) from e
        raise


class AsyncPty:
    """An interactive connection to an exec session (a terminal): read its
    output, write its stdin, resize, signal. Closing it leaves the session
    running (reconnect with ``sb.pty_attach``)."""

    def __init__(self, ws: Any, exec_id: str) -> None:
        self._ws = ws
        #: The session's id.
        self.exec_id = exec_id
        #: Set once the session exited.
        self.exit_code: Optional[int] = None
        self.signal = ""
        self._error: Optional[Exception] = None
        self._q: "asyncio.Queue[Any]" = asyncio.Queue()
        self._done = asyncio.Event()
        self._task = asyncio.ensure_future(self._reader())

    @classmethod
    async def connect(cls, base: str, api_key: str, sandbox_id: str, exec_id: str, offset: int = 0) -> "AsyncPty":
        """Dial session ``exec_id``'s WebSocket, replaying output from ``offset``."""
        ws = await _dial(_ws_url(base, sandbox_id, exec_id, offset), {**_core.headers(api_key), **_core.trace_headers()})
        return cls(ws, exec_id)

    async def _reader(self) -> None:
        try:
            async for msg in self._ws:
                if isinstance(msg, bytes):
                    await self._q.put(msg)
                    continue
                try:
                    m = json.loads(msg)
                except ValueError:
                    continue
                if m.get("type") == "exit":
                    self.exit_code = int(m.get("exit_code") or 0)
                    self.signal = str(m.get("signal") or "")
                    break
                if m.get("type") == "error":
                    self._error = _core.stream_error(m)
                    break
        except Exception as e:  # the connection broke
            self._error = ConnectionFailed(f"pty closed before exit: {e}")
        finally:
            if self.exit_code is None and self._error is None:
                self._error = ConnectionFailed("pty closed before exit")
            self._done.set()
            await self._q.put(_EOF)

    async def read(self) -> bytes:
        """The next output bytes; ``b""`` once the session exited and all was read."""
        item = await self._q.get()
        if item is _EOF:
            await self._q.put(_EOF)
            if self.exit_code is None and self._error is not None:
                raise self._error
            return b""
        return item  # type: ignore[no-any-return]

    async def _iter(self) -> AsyncIterator[bytes]:
        while True:
            b = await self.read()
            if not b:
                return
            yield b

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iter()

    async def write(self, data: "bytes | str") -> None:
        """Send keystrokes to the session's stdin (Ctrl-C is ``"\\x03"``)."""
        await self._ws.send(data.encode() if isinstance(data, str) else bytes(data))

    async def _control(self, **m: Any) -> None:
        await self._ws.send(json.dumps(m))

    async def resize(self, rows: int, cols: int) -> None:
        """Set the terminal's size."""
        await self._control(type="resize", rows=rows, cols=cols)

    async def send_signal(self, signal: str) -> None:
        """Send a signal ("SIGINT", "TERM", "9") to the session's process group."""
        await self._control(type="signal", signal=signal)

    async def close_stdin(self) -> None:
        """Close stdin (^D on a terminal)."""
        await self._control(type="eof")

    async def wait(self) -> int:
        """Wait for the exit and return the exit code (output stays readable)."""
        await self._done.wait()
        if self.exit_code is None:
            assert self._error is not None
            raise self._error
        return self.exit_code

    async def close(self) -> None:
        """Close the connection; the session runs on."""
        await self._ws.close()
        try:
            await self._task
        except Exception:
            pass

    async def __aenter__(self) -> "AsyncPty":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class Pty:
    """The blocking form of :class:`AsyncPty` (its event loop runs on a
    thread of its own): the same methods without ``await``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread, inner: AsyncPty) -> None:
        self._loop, self._thread, self._p = loop, thread, inner

    @classmethod
    def connect(cls, base: str, api_key: str, sandbox_id: str, exec_id: str, offset: int = 0) -> "Pty":
        """Dial session ``exec_id``'s WebSocket, replaying output from ``offset``."""
        loop = asyncio.new_event_loop()
        t = threading.Thread(target=loop.run_forever, name="agentbox-pty", daemon=True)
        t.start()
        try:
            inner = asyncio.run_coroutine_threadsafe(AsyncPty.connect(base, api_key, sandbox_id, exec_id, offset), loop).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            t.join()
            loop.close()
            raise
        return cls(loop, t, inner)

    def _run(self, coro: Any, timeout: Optional[float] = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def exec_id(self) -> str:
        """The session's id."""
        return self._p.exec_id

    @property
    def exit_code(self) -> Optional[int]:
        """Set once the session exited."""
        return self._p.exit_code

    def read(self, timeout: Optional[float] = None) -> bytes:
        """The next output bytes; ``b""`` once the session exited and all was read."""
        return self._run(self._p.read(), timeout)  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[bytes]:
        while True:
            b = self.read()
            if not b:
                return
            yield b

    def write(self, data: "bytes | str") -> None:
        """Send keystrokes to the session's stdin."""
        self._run(self._p.write(data))

    def resize(self, rows: int, cols: int) -> None:
        """Set the terminal's size."""
        self._run(self._p.resize(rows, cols))

    def send_signal(self, signal: str) -> None:
        """Send a signal to the session's process group."""
        self._run(self._p.send_signal(signal))

    def close_stdin(self) -> None:
        """Close stdin (^D on a terminal)."""
        self._run(self._p.close_stdin())

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the exit and return the exit code."""
        return self._run(self._p.wait(), timeout)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Close the connection (the session runs on) and stop the loop thread."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._p.close(), 30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> "Pty":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
