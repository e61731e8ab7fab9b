"""The asyncio client's templates (:class:`AsyncTemplates`)."""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING, Any, AsyncIterator, Callable, List, Mapping, Optional, Union

from . import _buildctx, _core
from ._models import BuildEvent, Template, from_dict

if TYPE_CHECKING:
    from ._async import AsyncClient


async def _chunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    while True:
        b = f.read(1 << 20)
        if not b:
            return
        yield b


class AsyncTemplates:
    """Templates: named snapshots with a warm pool, built in hostd from an
    image, a Dockerfile or a blueprint."""

    def __init__(self, client: "AsyncClient") -> None:
        self._c = client

    async def list(self) -> List[Template]:
        """Every template."""
        return [from_dict(Template, t) for t in (await self._c._json("GET", "/v1/templates"))["templates"]]

    async def get(self, name: str) -> Template:
        """Describe template ``name``."""
        return from_dict(Template, await self._c._json("GET", f"/v1/templates/{name}"))

    async def create(self, name: str, snapshot_id: str, *, pool_size: int = 0) -> Template:
        """Name snapshot ``snapshot_id`` as template ``name``."""
        body = {"name": name, "snapshot_id": snapshot_id, "pool_size": pool_size}
        return from_dict(Template, await self._c._json("POST", "/v1/templates", json=body, expect=(201,)))

    async def build_image(
        self,
        name: str,
        ref: str,
        *,
        pool_size: int = 0,
        insecure: bool = False,
        registry_secret: Optional[str] = None,
        free_mib: int = 0,
        memory_mib: int = 0,
        kernel: Optional[str] = None,
        modules: Optional[str] = None,
        on_progress: Optional[Callable[[BuildEvent], Any]] = None,
    ) -> Template:
        """Build template ``name`` from OCI image ``ref`` (a registry reference,
        or an OCI layout or ``docker save`` tarball on hostd's machine) in
        hostd; ``on_progress`` gets each :class:`BuildEvent`. ``kernel`` is
        the template's own guest kernel and ``modules`` its modules' directory
        (paths on hostd's machine under a directory it imports from; default:
        hostd's)."""
        body = _core.image_body(name, ref, pool_size, insecure=insecure, registry_secret=registry_secret,
                                free_mib=free_mib, memory_mib=memory_mib, kernel=kernel, modules=modules)
        async with self._c._stream("POST", "/v1/templates", json=body, timeout=None) as resp:
            async for line in resp.aiter_lines():
                d = _core.parse_line(line)
                if d is None:
                    continue
                t = _core.build_event(d)
                if t is not None:
                    return from_dict(Template, t)
                if on_progress is not None:
                    on_progress(from_dict(BuildEvent, d))
        raise _core.AgentboxError(f"template build {name}: the stream ended without its result")

    async def delete(self, name: str) -> None:
        """Delete a template and its warm pool (not its snapshot)."""
        await self._c._request("DELETE", f"/v1/templates/{name}", expect=(204,))

    async def build(
        self,
        name: str,
        blueprint: Optional[_buildctx.Source] = None,
        *,
        dockerfile: Optional[Union[str, "os.PathLike[str]"]] = None,
        context: Optional[Union[str, "os.PathLike[str]"]] = None,
        build_args: Optional[Mapping[str, str]] = None,
        pool: int = 0,
        no_cache: bool = False,
        on_progress: Optional[Callable[[BuildEvent], Any]] = None,
    ) -> Template:
        """Build template ``name`` in hostd from a blueprint or a Dockerfile
        (see :meth:`agentbox.Templates.build`)."""
        ctx, file, inline, param = _buildctx.plan(blueprint, dockerfile, context)
        q = _buildctx.params(name, file, param, build_args, pool, no_cache)
        with _buildctx.pack(ctx, file, inline) as body:
            async with self._c._stream("POST", "/v1/templates/build", params=q, content=_chunks(body), headers=_buildctx.HEADERS, timeout=None) as resp:
                async for line in resp.aiter_lines():
                    d = _core.parse_line(line)
                    if d is None:
                        continue
                    t = _core.build_event(d)
                    if t is not None:
                        return from_dict(Template, t)
                    if on_progress is not None:
                        on_progress(from_dict(BuildEvent, d))
        raise _core.AgentboxError(f"template build {name}: the stream ended without its result")
