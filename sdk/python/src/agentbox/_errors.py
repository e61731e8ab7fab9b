"""Exceptions: every API error carries the API's stable ``code`` and ``message``."""

from __future__ import annotations

import json
from typing import Dict, Optional, Type

__all__ = [
    "AgentboxError",
    "APIError",
    "InvalidRequest",
    "Unauthorized",
    "PermissionDenied",
    "NotFound",
    "Conflict",
    "SandboxNotRunning",
    "ExecFailed",
    "Timeout",
    "NotSupported",
    "ServerError",
    "ConnectionFailed",
    "error_from_response",
]


class AgentboxError(Exception):
    """The base of every exception this package raises."""


class APIError(AgentboxError):
    """An error answered by hostd: ``status`` (0 inside a stream), ``code``, ``message``."""

    def __init__(self, code: str, message: str, status: int = 0) -> None:
        super().__init__(f"{message} ({code}" + (f", HTTP {status})" if status else ")"))
        #: The API's stable snake_case code, e.g. ``sandbox_not_found``.
        self.code = code
        #: The human-readable message.
        self.message = message
        #: The HTTP status, or 0 for an error that ended a stream.
        self.status = status


class InvalidRequest(APIError):
    """400: a bad body, parameter, path or value."""


class Unauthorized(APIError):
    """401: the API key is missing or wrong."""


class PermissionDenied(APIError):
    """403: the guest denied a file operation, or a share link expired."""


class NotFound(APIError):
    """404: no such sandbox, file, snapshot, template, secret or route."""


class Conflict(APIError):
    """409: the target exists, is in use, is not empty, or was deleted."""


class SandboxNotRunning(Conflict):
    """409 ``sandbox_not_running`` / ``sandbox_paused``: the sandbox is not running."""


class ExecFailed(APIError):
    """422 ``exec_failed``: the command could not start (e.g. binary not found)."""


class Timeout(APIError):
    """504: the operation timed out."""


class NotSupported(APIError):
    """501: this hostd lacks the feature (e.g. service URLs)."""


class ServerError(APIError):
    """500 and any other unexpected status."""


class ConnectionFailed(AgentboxError):
    """hostd could not be reached (connection refused, reset, DNS)."""


_BY_CODE: Dict[str, Type[APIError]] = {
    "sandbox_not_running": SandboxNotRunning,
    "sandbox_paused": SandboxNotRunning,
    "exec_failed": ExecFailed,
    "snapshot_corrupt": InvalidRequest,
    "not_supported": NotSupported,
    "invalid_build": InvalidRequest,
    "build_failed": ExecFailed,
}

_BY_STATUS: Dict[int, Type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: PermissionDenied,
    404: NotFound,
    405: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: ExecFailed,
    501: NotSupported,
    504: Timeout,
}


def make_error(code: str, message: str, status: int = 0) -> APIError:
    """Return the exception class that fits ``code`` (then ``status``), instantiated."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _BY_STATUS.get(status)
    if cls is None and status == 0:
        cls = Conflict if code == "sandbox_deleted" else APIError
    return (cls or ServerError)(code, message, status)


def error_from_response(status: int, body: bytes, reason: Optional[str] = None) -> APIError:
    """Turn an error response's status and body into an :class:`APIError`."""
    try:
        err = json.loads(body)["error"]
        code, message = str(err["code"]), str(err.get("message", ""))
    except (ValueError, KeyError, TypeError):
        code = "http_error"
        message = body.decode("utf-8", "replace").strip()[:2000] or (reason or f"HTTP {status}")
    return make_error(code, message, status)
