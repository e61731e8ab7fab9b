"""Typed results of the API (dataclasses built from its JSON)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypedDict, TypeVar

T = TypeVar("T")


def from_dict(cls: Type[T], d: Dict[str, Any]) -> T:
    """Build dataclass ``cls`` from ``d``, ignoring keys it does not know."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    obj = cls(**{k: v for k, v in d.items() if k in names})
    if "raw" in names:
        object.__setattr__(obj, "raw", d)
    return obj


@dataclass
class Health:
    """``GET /healthz``: hostd is up, with its VMM and accelerator."""

    status: str
    vmm: str
    accel: str


@dataclass
class Limits:
    """A sandbox's resource limits and lifecycle options (0 = none)."""

    cpu_quota: float = 0
    host_memory_mib: int = 0
    disk_mib: int = 0
    disk_bps: int = 0
    net_bps: int = 0
    max_pids: int = 0
    exec_timeout_s: int = 0
    idle_timeout_s: int = 0
    on_timeout: str = ""


@dataclass
class SandboxInfo:
    """What hostd says about a sandbox (``GET /v1/sandboxes/{id}``)."""

    id: str
    state: str
    vcpus: int = 0
    memory_mib: int = 0
    env: Dict[str, str] = field(default_factory=dict)
    timeout_s: int = 0
    metadata: Dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    error: str = ""
    vm_pid: int = 0
    snapshot_id: str = ""
    limits: Optional[Dict[str, Any]] = None
    deadline: Optional[str] = None


@dataclass
class ExecResult:
    """The outcome of a command: its output, exit code and whether it succeeded."""

    stdout: str
    stderr: str
    exit_code: int
    signal: str = ""
    exec_id: str = ""
    #: The exact output bytes (stdout and stderr).
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0 and not self.signal


@dataclass
class Output:
    """A piece of a command's output: ``stream`` is "stdout" or "stderr"."""

    stream: str
    data: bytes
    #: The position of ``data``'s first byte in the session's output log.
    offset: int

    @property
    def text(self) -> str:
        """``data`` decoded as UTF-8 (invalid bytes replaced)."""
        return self.data.decode("utf-8", "replace")


@dataclass
class ExecSession:
    """One exec session of a sandbox (``GET /v1/sandboxes/{id}/exec``)."""

    exec_id: str
    cmd: List[str]
    pid: int
    running: bool
    tty: bool
    started_at: str
    exit_code: Optional[int] = None
    signal: str = ""
    ended_at: Optional[str] = None


@dataclass
class FileInfo:
    """A file or directory in the guest."""

    name: str
    path: str
    size: int
    mode: int
    mod_time: str
    is_dir: bool


@dataclass
class FileEvent:
    """A change seen by ``files.watch``: create, modify, delete or rename."""

    type: str
    path: str
    old_path: str = ""
    is_dir: bool = False
    size: int = 0
    time: str = ""


@dataclass
class SnapshotInfo:
    """A snapshot: memory, devices and disk of a sandbox at one moment."""

    id: str
    kind: str
    sandbox_id: str
    parent_id: str
    vcpus: int
    memory_mib: int
    size_bytes: int
    cache_key: str
    created_at: str
    used_by: List[str] = field(default_factory=list)


@dataclass
class Template:
    """A named snapshot with a warm pool."""

    name: str
    snapshot_id: str
    pool_size: int
    pool_ready: int
    created_at: str
    #: The image it was built from and its config (ref, digest, env,
    #: working_dir, user, entrypoint, cmd, exposed_ports), if any.
    image: Optional[Dict[str, Any]] = None
    #: Its guest kernel: ``{"source": "default"}`` or its own (path,
    #: digest, modules_dir, modules).
    kernel: Optional[Dict[str, Any]] = None


@dataclass
class Secret:
    """A stored secret's name (values are never returned)."""

    name: str
    created_at: str


@dataclass
class APIKey:
    """An API key's record (never its secret): id, name, visible prefix, project, role."""

    id: str
    name: str
    prefix: str
    project: str
    role: str
    created_at: str
    last_used_at: Optional[str] = None
    expires_at: Optional[str] = None
    bootstrap: bool = False


@dataclass
class CreatedKey:
    """A new key: its record and its secret, shown this once."""

    key: APIKey
    secret: str


@dataclass
class Project:
    """A project: the owner of keys, sandboxes, snapshots, templates and secrets."""

    name: str
    created_at: str


@dataclass
class Usage:
    """What a sandbox has consumed."""

    cpu_seconds: float
    memory_peak_bytes: int
    memory_bytes: int
    disk_used_bytes: int
    bytes_in: int
    bytes_out: int


@dataclass
class NetworkPolicy:
    """A sandbox's egress policy."""

    mode: str
    allow_domains: List[str] = field(default_factory=list)
    allow_cidrs: List[str] = field(default_factory=list)
    allow_ports: List[int] = field(default_factory=list)
    inject: List[Dict[str, str]] = field(default_factory=list)


@dataclass
class PortAccess:
    """A guest port's service URLs and access token."""

    port: int
    path_url: str
    token: str
    public: bool
    url: str = ""


@dataclass
class ShareLink:
    """A signed link to a port that expires."""

    path_url: str
    token: str
    expires_at: str
    url: str = ""


@dataclass
class Event:
    """A flight-recorder event; the member named by ``type`` is in ``detail``."""

    id: int
    sandbox_id: str
    time: str
    type: str
    trace_id: str = ""
    span_id: str = ""
    api_key: str = ""
    #: The whole event as JSON (``raw[type]`` holds its details).
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def detail(self) -> Dict[str, Any]:
        """The details of the event, e.g. ``{"exec_id":…,"phase":"start",…}``."""
        d = self.raw.get(self.type)
        return d if isinstance(d, dict) else {}


class Mount(TypedDict, total=False):
    """A mount of ``create(mounts=[...])``: ``type`` ("host", "s3" or "git")
    and ``path`` (the absolute guest path) always, then the type's fields."""

    type: str
    path: str
    source: str
    endpoint: str
    bucket: str
    prefix: str
    region: str
    secret: str
    url: str
    ref: str
    read_only: bool
    allow_symlinks: bool


@dataclass
class BuildEvent:
    """One progress line of a template build (``templates.build_image``,
    ``templates.build``): ``progress`` (an image's pull, its phase) or
    ``log`` (a line of a Dockerfile or blueprint build's output)."""

    type: str
    #: pull (bytes), unpack (layers), cached, build, boot, snapshot.
    phase: str = ""
    current: int = 0
    total: int = 0
    #: A log event's line (no newline) and stream (stdout, stderr).
    line: str = ""
    stream: str = ""
