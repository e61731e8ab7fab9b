"""Dockerfile and blueprint builds' request: the build context as a tar and
the query of ``POST /v1/templates/build`` (shared by the sync and async
clients). hostd runs the build; this only packs what it reads."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import tempfile
from typing import IO, Any, Dict, List, Mapping, Optional, Tuple, Union

from ._errors import AgentboxError

#: The names an inline Dockerfile or blueprint gets in the uploaded context.
INLINE_DOCKERFILE = ".agentbox-build/Dockerfile"
INLINE_BLUEPRINT = ".agentbox-build/blueprint.yaml"

Source = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def _is_text(s: str) -> bool:
    return "\n" in s or s.lstrip().startswith("{")


def plan(
    blueprint: Optional[Source],
    dockerfile: Optional[Union[str, "os.PathLike[str]"]],
    context: Optional[Union[str, "os.PathLike[str]"]],
) -> Tuple[Optional[str], str, Optional[bytes], str]:
    """What to upload: (context dir or None, the file's path in the
    context, its content when inline else None, the parameter naming it)."""
    if (blueprint is None) == (dockerfile is None):
        raise AgentboxError("templates.build: give a blueprint or a dockerfile, not both or neither")
    ctx = os.path.abspath(os.fspath(context)) if context is not None else None
    if dockerfile is not None:
        src, param, inline_name = os.fspath(dockerfile), "dockerfile", INLINE_DOCKERFILE
    elif isinstance(blueprint, Mapping):
        return ctx, INLINE_BLUEPRINT, json.dumps(blueprint).encode(), "blueprint"  # JSON is YAML
    else:
        assert blueprint is not None
        src, param, inline_name = os.fspath(blueprint), "blueprint", INLINE_BLUEPRINT
    if _is_text(src):
        return ctx, inline_name, src.encode(), param
    path = os.path.abspath(src)
    if ctx is None:
        ctx = os.path.dirname(path)  # the CLI's default: the file's directory
    rel = os.path.relpath(path, ctx)
    if rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        with open(path, "rb") as f:  # a file outside its context travels inline
            return ctx, inline_name, f.read(), param
    return ctx, rel.replace(os.sep, "/"), None, param


def pack(ctx: Optional[str], name: str, inline: Optional[bytes]) -> IO[bytes]:
    """The build context as a gzip tar in a temporary file (rewound): every
    file and directory under ctx (symlinks followed, as a COPY follows
    them; special files left out), plus the inline file as ``name``."""
    out = tempfile.SpooledTemporaryFile(max_size=8 << 20)
    with tarfile.open(fileobj=out, mode="w:gz") as tf:
        if ctx is not None:
            if not os.path.isdir(ctx):
                raise AgentboxError(f"templates.build: context {ctx} is not a directory")
            for root, dirs, files in os.walk(ctx, followlinks=True):
                dirs.sort()
                for d in dirs:
                    _add(tf, ctx, os.path.join(root, d))
                for f in sorted(files):
                    _add(tf, ctx, os.path.join(root, f))
        if inline is not None:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(inline), 0o644
            tf.addfile(ti, io.BytesIO(inline))
    out.seek(0)
    return out


def _add(tf: tarfile.TarFile, ctx: str, path: str) -> None:
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        return  # a dangling symlink
    arc = os.path.relpath(path, ctx).replace(os.sep, "/")
    if stat.S_ISDIR(st.st_mode):
        ti = tarfile.TarInfo(arc + "/")
        ti.type, ti.mode = tarfile.DIRTYPE, stat.S_IMODE(st.st_mode)
        tf.addfile(ti)
    elif stat.S_ISREG(st.st_mode):
        ti = tarfile.TarInfo(arc)
        ti.size, ti.mode, ti.mtime = st.st_size, stat.S_IMODE(st.st_mode), int(st.st_mtime)
        with open(path, "rb") as f:
            tf.addfile(ti, f)


def params(name: str, file: str, param: str, build_args: Optional[Mapping[str, str]], pool: int,
           no_cache: bool) -> List[Tuple[str, str]]:
    """The query of the build."""
    q = [("name", name), (param, file)]
    q += [("build_arg", f"{k}={v}") for k, v in (build_args or {}).items()]
    if pool:
        q.append(("pool_size", str(pool)))
    if no_cache:
        q.append(("no_cache", "true"))
    return q


HEADERS: Dict[str, str] = {"Content-Type": "application/x-tar"}
