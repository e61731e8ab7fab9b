/** Errors: every API error carries the API's stable `code` and `message`. */

/** The base of every error this package throws. */
export class AgentboxError extends Error {
  override name = "AgentboxError";
}

/** An error answered by hostd: `status` (0 inside a stream), `code`, `message`. */
export class APIError extends AgentboxError {
  override name = "APIError";
  constructor(
    /** The API's stable snake_case code, e.g. `sandbox_not_found`. */
    public readonly code: string,
    /** The human-readable message. */
    public readonly apiMessage: string,
    /** The HTTP status, or 0 for an error that ended a stream. */
    public readonly status = 0,
  ) {
    super(`${apiMessage} (${code}${status ? `, HTTP ${status}` : ""})`);
  }
}
/** 400: a bad body, parameter, path or value. */
export class InvalidRequest extends APIError { override name = "InvalidRequest"; }
/** 401: the API key is missing or wrong. */
export class Unauthorized extends APIError { override name = "Unauthorized"; }
/** 403: the guest denied a file operation, or a share link expired. */
export class PermissionDenied extends APIError { override name = "PermissionDenied"; }
/** 404: no such sandbox, file, snapshot, template, secret or route. */
export class NotFound extends APIError { override name = "NotFound"; }
/** 409: the target exists, is in use, is not empty, or was deleted. */
export class Conflict extends APIError { override name = "Conflict"; }
/** 409 `sandbox_not_running` / `sandbox_paused`. */
export class SandboxNotRunning extends Conflict { override name = "SandboxNotRunning"; }
/** 422 `exec_failed`: the command could not start. */
export class ExecFailed extends APIError { override name = "ExecFailed"; }
/** 504: the operation timed out. */
export class Timeout extends APIError { override name = "Timeout"; }
/** 501: this hostd lacks the feature. */
export class NotSupported extends APIError { override name = "NotSupported"; }
/** 500 and any other unexpected status. */
export class ServerError extends APIError { override name = "ServerError"; }
/** hostd could not be reached. */
export class ConnectionFailed extends AgentboxError { override name = "ConnectionFailed"; }

type Ctor = new (code: string, message: string, status: number) => APIError;

const byCode: Record<string, Ctor> = {
  sandbox_not_running: SandboxNotRunning,
  sandbox_paused: SandboxNotRunning,
  exec_failed: ExecFailed,
  snapshot_corrupt: InvalidRequest,
  not_supported: NotSupported,
  invalid_build: InvalidRequest,
  build_failed: ExecFailed,
};
const byStatus: Record<number, Ctor> = {
  400: InvalidRequest, 401: Unauthorized, 403: PermissionDenied, 404: NotFound, 405: NotFound,
  409: Conflict, 413: InvalidRequest, 422: ExecFailed, 501: NotSupported, 504: Timeout,
};

/** The error class that fits `code` (then `status`), instantiated. */
export function makeError(code: string, message: string, status = 0): APIError {
  let C = byCode[code] ?? byStatus[status];
  if (!C && status === 0) C = code === "sandbox_deleted" ? Conflict : APIError;
  return new (C ?? ServerError)(code, message, status);
}

/** Turn an error response into an APIError (reads its body). */
export async function errorFromResponse(resp: Response): Promise<APIError> {
  const text = await resp.text().catch(() => "");
  try {
    const e = JSON.parse(text).error;
    if (e && typeof e.code === "string") return makeError(e.code, String(e.message ?? ""), resp.status);
  } catch { /* not JSON */ }
  return makeError("http_error", text.trim().slice(0, 2000) || resp.statusText, resp.status);
}
