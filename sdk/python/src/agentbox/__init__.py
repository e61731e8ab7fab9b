"""agentbox: a microVM sandbox per AI agent, from Python.

>>> from agentbox import Client
>>> with Client().sandbox() as sb:
...     print(sb.run("python3 -c 'print(6*7)'").stdout)
42

:class:`Client` is blocking; :class:`AsyncClient` has the same surface with
``async``. Errors are :class:`APIError` subclasses carrying the API's
``code`` and ``message``.
"""

from ._async import (
    AsyncClient,
    AsyncExecHandle,
    AsyncKeys,
    AsyncProjects,
    AsyncFiles,
    AsyncFileStream,
    AsyncNetwork,
    AsyncSandbox,
    AsyncSecrets,
    AsyncSnapshots,
    AsyncTemplates,
    AsyncWatch,
)
from ._errors import (
    AgentboxError,
    APIError,
    Conflict,
    ConnectionFailed,
    ExecFailed,
    InvalidRequest,
    NotFound,
    NotSupported,
    PermissionDenied,
    SandboxNotRunning,
    ServerError,
    Timeout,
    Unauthorized,
)
from ._models import (
    APIKey,
    BuildEvent,
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
    Template,
    Usage,
)
from ._pty import AsyncPty, Pty
from ._sync import Client, ExecHandle, Files, FileStream, Keys, Network, Projects, Sandbox, Secrets, Snapshots, Templates, Watch

__version__ = "0.1.0"

__all__ = [
    "Client", "Sandbox", "ExecHandle", "Files", "FileStream", "Watch", "Network", "Templates", "Secrets", "Snapshots",
    "AsyncClient", "AsyncSandbox", "AsyncExecHandle", "AsyncFiles", "AsyncFileStream", "AsyncWatch", "AsyncNetwork",
    "AsyncTemplates", "AsyncSecrets", "AsyncSnapshots", "Pty", "AsyncPty", "Keys", "AsyncKeys", "Projects", "AsyncProjects",
    "APIKey", "CreatedKey", "Project", "BuildEvent", "Mount",
    "AgentboxError", "APIError", "Conflict", "ConnectionFailed", "ExecFailed", "InvalidRequest", "NotFound",
    "NotSupported", "PermissionDenied", "SandboxNotRunning", "ServerError", "Timeout", "Unauthorized",
    "Event", "ExecResult", "ExecSession", "FileEvent", "FileInfo", "Health", "NetworkPolicy", "Output",
    "PortAccess", "SandboxInfo", "Secret", "ShareLink", "SnapshotInfo", "Template", "Usage",
]
