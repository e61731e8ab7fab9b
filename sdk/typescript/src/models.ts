/** Types of the API's JSON (see hostd/api/openapi.yaml). */

/** `GET /healthz`. */
export interface Health { status: string; vmm: string; accel: string }

/** What hostd says about a sandbox. */
export interface SandboxInfo {
  id: string; state: string; vcpus: number; memory_mib: number; env: Record<string, string>;
  timeout_s: number; metadata: Record<string, string>; created_at: string; error: string; vm_pid: number;
  snapshot_id?: string; limits?: Record<string, unknown>; deadline?: string;
}

/** The outcome of a command. */
export interface ExecResult {
  stdout: string; stderr: string; exitCode: number; signal: string; execId: string;
  /** The exact output bytes. */
  stdoutBytes: Uint8Array; stderrBytes: Uint8Array;
  /** True when the command exited 0. */
  ok: boolean;
}

/** A piece of output: `stream` is stdout or stderr; `offset` its position in the session's log. */
export interface Output { stream: "stdout" | "stderr"; data: Uint8Array; offset: number; text: string }

/** One exec session. */
export interface ExecSession {
  exec_id: string; cmd: string[]; pid: number; running: boolean; tty: boolean; started_at: string;
  exit_code?: number; signal?: string; ended_at?: string;
}

/** A file or directory in the guest. */
export interface FileInfo { name: string; path: string; size: number; mode: number; mod_time: string; is_dir: boolean }

/** A change seen by `files.watch`. */
export interface FileEvent {
  type: "create" | "modify" | "delete" | "rename"; path: string; old_path?: string; is_dir?: boolean; size?: number; time?: string;
}

/** A snapshot. */
export interface SnapshotInfo {
  id: string; kind: string; sandbox_id: string; parent_id: string; vcpus: number; memory_mib: number;
  size_bytes: number; cache_key: string; created_at: string; used_by: string[];
}

/** A named snapshot with a warm pool. */
export interface Template {
  name: string; snapshot_id: string; pool_size: number; pool_ready: number; created_at: string;
  /** The image it was built from and its config, if any. */
  image?: TemplateImage;
  /** Its guest kernel: hostd's ("default") or its own. */
  kernel?: TemplateKernel;
}

/** The image a template was built from, and its config. */
export interface TemplateImage {
  ref: string; digest: string; env?: Record<string, string>; working_dir?: string; user?: string;
  entrypoint?: string[]; cmd?: string[]; exposed_ports?: string[];
}

/** The guest kernel a template's sandboxes run. */
export interface TemplateKernel { source: "default" | "template"; path?: string; digest?: string; modules_dir?: string; modules?: string[] }

/** A stored secret's name. */
export interface Secret { name: string; created_at: string }

/** An API key's record (never its secret). */
export interface APIKey {
  id: string; name: string; prefix: string; project: string; role: "admin" | "member"; created_at: string;
  last_used_at?: string; expires_at?: string; bootstrap?: boolean;
}

/** A new key: its record and its secret, shown this once. */
export interface CreatedKey { key: APIKey; secret: string }

/** A project: the owner of keys, sandboxes, snapshots, templates and secrets. */
export interface Project { name: string; created_at: string }

/** What a sandbox has consumed. */
export interface Usage {
  cpu_seconds: number; memory_peak_bytes: number; memory_bytes: number; disk_used_bytes: number; bytes_in: number; bytes_out: number;
}

/** An injection rule of the egress proxy. */
export interface InjectRule { host: string; header: string; value: string }

/** A sandbox's egress policy. */
export interface NetworkPolicy {
  mode: "proxy" | "none"; allow_domains: string[]; allow_cidrs: string[]; allow_ports: number[]; inject: InjectRule[];
}

/** Fields of a policy update (present ones replace). */
export interface NetworkPatch { allow_domains?: string[]; allow_cidrs?: string[]; allow_ports?: number[]; inject?: InjectRule[] }

/** A port's service URLs. */
export interface PortAccess { port: number; url?: string; path_url: string; token: string; public: boolean }

/** A signed share link. */
export interface ShareLink { url?: string; path_url: string; token: string; expires_at: string }

/** A flight-recorder event; the member named by `type` holds its details. */
export interface Event {
  id: number; sandbox_id: string; time: string; type: string; trace_id?: string; span_id?: string; api_key?: string;
  [detail: string]: unknown;
}

/** Options of `client.create` / `client.sandbox`. */
/** A mount of `create({ mounts })`: `type` and `path` (the absolute guest path), then the type's fields. */
export interface Mount {
  type: "host" | "s3" | "git"; path: string;
  /** host: the host directory. */ source?: string;
  /** s3 */ endpoint?: string; bucket?: string; prefix?: string; region?: string;
  /** s3: the hostd secret with ACCESS_KEY:SECRET_KEY; git: the token's secret. */ secret?: string;
  /** git */ url?: string; ref?: string;
  read_only?: boolean; allow_symlinks?: boolean;
}

/** One progress line of an image build (`templates.buildImage`). */
export interface BuildEvent {
  type: "progress" | "log" | "done" | "error";
  /** pull (bytes), unpack (layers), cached, build, boot, snapshot. */
  phase?: string; current?: number; total?: number;
  /** A log event's line (no newline) and stream. */
  line?: string; stream?: "stdout" | "stderr";
}

/** Options of `templates.build`. */
export interface BuildOptions {
  /** A Dockerfile (a path or its text) instead of a blueprint. */
  dockerfile?: string;
  /** The build context directory (default: the file's directory). */
  context?: string;
  buildArgs?: Record<string, string>;
  pool?: number; noCache?: boolean;
  onProgress?: (ev: BuildEvent) => void;
}

/** Options of `templates.buildImage`. */
export interface ImageBuildOptions {
  poolSize?: number; insecure?: boolean; registrySecret?: string; freeMiB?: number; memoryMiB?: number;
  /** The template's own guest kernel and its modules' directory: paths on hostd's machine under a directory it imports from (default: hostd's). */
  kernel?: string; modules?: string;
  onProgress?: (ev: BuildEvent) => void;
}

export interface CreateOptions {
  /** Host, s3 or git mounts. */
  mounts?: Mount[];
  template?: string; snapshot?: string; vcpus?: number; memory_mib?: number; env?: Record<string, string>;
  timeout_s?: number; network?: Partial<NetworkPolicy>; secret_env?: Record<string, string>;
  metadata?: Record<string, string>;
  /** "cold" boots the base image instead of restoring hostd's base snapshot (default "auto"). */
  boot?: "auto" | "cold";
  /** The API's other create fields (cpu_quota, disk_mib, idle_timeout_s, …). */
  [limit: string]: unknown;
}

/** Options of `sb.run`. */
export interface RunOptions {
  cwd?: string; env?: Record<string, string>; stdin?: string;
  /** Run as this user ("root", a name or uid, optionally ":group") instead of the template's default. */
  user?: string;
  /** Kill the command after this many seconds. */
  timeout?: number;
  onStdout?: (text: string) => void; onStderr?: (text: string) => void;
}
