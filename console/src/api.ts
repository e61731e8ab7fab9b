// The console's client of hostd's public HTTP API (hostd/api/openapi.yaml).
// The key lives in sessionStorage only: it goes when the tab closes.

const keyItem = "agentbox.key";

export function getKey(): string | null {
  return sessionStorage.getItem(keyItem);
}
export function setKey(k: string): void {
  sessionStorage.setItem(keyItem, k);
}
export function clearKey(): void {
  sessionStorage.removeItem(keyItem);
}

/** APIError is an error answer: its HTTP status and stable code. */
export class APIError extends Error {
  constructor(public status: number, public code: string, message: string) {
    super(message);
  }
}

let onUnauthorized: () => void = () => {};
export function setOnUnauthorized(f: () => void): void {
  onUnauthorized = f;
}

async function errorOf(resp: Response): Promise<APIError> {
  let code = "http_" + resp.status;
  let msg = resp.statusText;
  try {
    const b = await resp.json();
    if (b && b.error) {
      code = String(b.error.code);
      msg = String(b.error.message);
    }
  } catch {
    /* not JSON */
  }
  return new APIError(resp.status, code, msg);
}

export interface Req {
  body?: unknown;
  raw?: BodyInit;
  contentType?: string;
  signal?: AbortSignal;
  key?: string;
  accept?: string;
}

/** call sends one request and returns the response, or throws APIError. */
export async function call(method: string, path: string, r: Req = {}): Promise<Response> {
  const key = r.key ?? getKey();
  const headers: Record<string, string> = {};
  if (key) headers["Authorization"] = "Bearer " + key;
  let body: BodyInit | undefined = r.raw;
  if (r.body !== undefined) {
    body = JSON.stringify(r.body);
    headers["Content-Type"] = "application/json";
  } else if (r.contentType) {
    headers["Content-Type"] = r.contentType;
  }
  if (r.accept) headers["Accept"] = r.accept;
  const resp = await fetch(path, { method, headers, body, signal: r.signal, credentials: "omit", cache: "no-store" });
  if (!resp.ok) {
    const err = await errorOf(resp);
    if (resp.status === 401 && !r.key) onUnauthorized();
    throw err;
  }
  return resp;
}

/** json sends one request and decodes its JSON answer (undefined for 204). */
export async function json<T>(method: string, path: string, r: Req = {}): Promise<T> {
  const resp = await call(method, path, r);
  if (resp.status === 204) return undefined as T;
  return (await resp.json()) as T;
}

/** ndjson reads a JSON Lines answer, calling each for every object. */
export async function ndjson(resp: Response, each: (v: any) => void): Promise<void> {
  if (!resp.body) return;
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line) each(JSON.parse(line));
    }
  }
  if (buf.trim()) each(JSON.parse(buf));
}

export const enc = encodeURIComponent;
export const sb = (id: string) => `/v1/sandboxes/${enc(id)}`;

/** b64 decodes standard base64 to bytes. */
export function b64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// The parts of the API's schemas the console reads.
export interface Limits {
  cpu_quota: number;
  host_memory_mib: number;
  disk_mib: number;
  disk_bps: number;
  net_bps: number;
  max_pids: number;
  exec_timeout_s: number;
  idle_timeout_s: number;
  on_timeout: string;
}
export interface Sandbox {
  id: string;
  state: string;
  vcpus: number;
  memory_mib: number;
  env: Record<string, string>;
  timeout_s: number;
  metadata: Record<string, string>;
  created_at: string;
  error: string;
  vm_pid: number;
  snapshot_id?: string;
  limits?: Limits;
  deadline?: string;
  main_exec_id?: string;
}
export interface Usage {
  cpu_seconds: number;
  memory_peak_bytes: number;
  memory_bytes: number;
  disk_used_bytes: number;
  bytes_in: number;
  bytes_out: number;
}
export interface Snapshot {
  id: string;
  kind: string;
  sandbox_id: string;
  parent_id: string;
  vcpus: number;
  memory_mib: number;
  size_bytes: number;
  created_at: string;
  used_by: string[];
}
export interface Template {
  name: string;
  snapshot_id: string;
  pool_size: number;
  pool_ready: number;
  created_at: string;
  image?: { ref: string; digest: string };
}
export interface FileInfo {
  name: string;
  path: string;
  size: number;
  mode: string;
  mod_time: string;
  is_dir: boolean;
}
export interface ExecSession {
  exec_id: string;
  cmd: string[];
  pid: number;
  running: boolean;
  tty: boolean;
  exit_code?: number;
  signal?: string;
  started_at: string;
  ended_at?: string;
}
export interface AuditEvent {
  id: number;
  sandbox_id: string;
  time: string;
  type: string;
  trace_id?: string;
  span_id?: string;
  api_key?: string;
  exec?: {
    exec_id: string;
    phase: string;
    argv?: string[];
    cwd?: string;
    tty?: boolean;
    started_at: string;
    ended_at?: string;
    duration_ms?: number;
    exit_code?: number;
    signal?: string;
    stdout?: { head: string; tail?: string; total_bytes: number };
    stderr?: { head: string; tail?: string; total_bytes: number };
    error?: string;
  };
  file?: { op: string; path: string; old_path?: string; dir?: boolean; size: number; source: string; exec_id?: string };
  package?: { manager: string; action: string; name: string; version: string; exec_id?: string };
  network?: { kind: string; host: string; port: number; method?: string; path?: string; status: number; allowed: boolean; rule: string; bytes_in: number; bytes_out: number; exec_id?: string };
  lifecycle?: { action: string; state?: string; snapshot_id?: string; source_id?: string; reason?: string };
  api?: { method: string; route: string; path: string; status: number; duration_ms: number };
  recorder?: { lost?: number; watch_error?: string };
}
export interface PortAccess {
  port: number;
  url?: string;
  path_url: string;
  token: string;
  public: boolean;
}
export interface NetworkPolicy {
  mode: string;
  allow_domains: string[];
  allow_cidrs: string[];
  allow_ports: number[];
  inject: { host: string; header: string; value: string }[];
}
