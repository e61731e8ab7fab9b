"""The synchronous client's templates (:class:`Templates`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Union

from . import _buildctx, _core
from ._models import BuildEvent, Template, from_dict

if TYPE_CHECKING:
    from ._sync import Client


class Templates:
    """Templates: named snapshots with a warm pool, built in hostd from an
    image, a Dockerfile or a blueprint."""

    def __init__(self, client: "Client") -> None:
        self._c = client

    def list(self) -> List[Template]:
        """Every template."""
        return [from_dict(Template, t) for t in self._c._json("GET", "/v1/templates")["templates"]]

    def get(self, name: str) -> Template:
        """Describe template ``name``."""
        return from_dict(Template, self._c._json("GET", f"/v1/templates/{name}"))

    def create(self, name: str, snapshot_id: str, *, pool_size: int = 0) -> Template:
        """Name snapshot ``snapshot_id`` as template ``name`` (replacing one of that name)."""
        body = {"name": name, "snapshot_id": snapshot_id, "pool_size": pool_size}
        return from_dict(Template, self._c._json("POST", "/v1/templates", json=body, expect=(201,)))

    def build_image(
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
        with self._c._stream("POST", "/v1/templates", json=body, timeout=None) as resp:
            for line in resp.iter_lines():
                d = _core.parse_line(line)
                if d is None:
                    continue
                t = _core.build_event(d)
                if t is not None:
                    return from_dict(Template, t)
                if on_progress is not None:
                    on_progress(from_dict(BuildEvent, d))
        raise _core.AgentboxError(f"template build {name}: the stream ended without its result")

    def delete(self, name: str) -> None:
        """Delete a template and its warm pool (not its snapshot)."""
        self._c._request("DELETE", f"/v1/templates/{name}", expect=(204,))

    def build(
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
        """Build template ``name`` in hostd from a blueprint (a file path, YAML
        text or a mapping) or a ``dockerfile`` (a path or its text), reusing
        cached steps as ``agentbox template build`` does. ``context`` is the
        directory uploaded as the build context (default: the file's
        directory; none for inline text): COPY and copy sources come from it.
        ``build_args`` are a Dockerfile's ARGs, ``pool`` the warm pool size,
        ``no_cache`` runs every step. ``on_progress`` gets each
        :class:`BuildEvent`: ``log`` lines (``line``, ``stream``) and a FROM
        image's pull ``progress``."""
        ctx, file, inline, param = _buildctx.plan(blueprint, dockerfile, context)
        q = _buildctx.params(name, file, param, build_args, pool, no_cache)
        with _buildctx.pack(ctx, file, inline) as body:
            with self._c._stream("POST", "/v1/templates/build", params=q, content=body, headers=_buildctx.HEADERS, timeout=None) as resp:
                for line in resp.iter_lines():
                    d = _core.parse_line(line)
                    if d is None:
                        continue
                    t = _core.build_event(d)
                    if t is not None:
                        return from_dict(Template, t)
                    if on_progress is not None:
                        on_progress(from_dict(BuildEvent, d))
        raise _core.AgentboxError(f"template build {name}: the stream ended without its result")
