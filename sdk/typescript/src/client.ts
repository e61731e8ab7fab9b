/** The client: Client, Sandbox and their helpers. */
import "./polyfill.js";
import { readFileSync, promises as fsp } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Readable } from "node:stream";
import { AgentboxError, ConnectionFailed, NotFound, errorFromResponse } from "./errors.js";
import { buildQuery, pack, plan } from "./build.js";
import { tarDir, untarSafely } from "./files.js";
import type {
  CreateOptions, Event, ExecResult, ExecSession, FileEvent, FileInfo, Health, NetworkPatch, NetworkPolicy,
  APIKey, BuildEvent, BuildOptions, CreatedKey, ImageBuildOptions, Output, PortAccess, Project, RunOptions, SandboxInfo, Secret, ShareLink, SnapshotInfo, Template, Usage,
} from "./models.js";
import { Pty } from "./pty.js";
import { ExecReader, lines, parseLine, streamError } from "./stream.js";

export const DEFAULT_URL = "http://127.0.0.1:7070";
/** The most events a page of `GET …/events` may ask for. */
const MAX_EVENTS_PAGE = 10000;
const DEFAULT_DATA_DIR = "/var/lib/agentbox";

/** Options of `new Client()`. */
export interface ClientOptions {
  /** hostd's address (default `$AGENTBOX_URL`, else http://127.0.0.1:7070). */
  url?: string;
  /** The API key (default `$AGENTBOX_API_KEY`, else `$AGENTBOX_DATA_DIR/api-key`). */
  apiKey?: string;
  /** What `create` starts from when given neither template nor snapshot (default `$AGENTBOX_TEMPLATE`). */
  template?: string;
  /** Returns extra headers per call, e.g. `traceparent` from your tracer. */
  traceHeaders?: () => Record<string, string>;
}

function resolveKey(k?: string): string {
  if (k) return k;
  const env = (process.env.AGENTBOX_API_KEY ?? "").trim();
  if (env) return env;
  try {
    return readFileSync(path.join(process.env.AGENTBOX_DATA_DIR || DEFAULT_DATA_DIR, "api-key"), "utf8").trim();
  } catch { return ""; }
}

/** A request body. */
type Body = string | Uint8Array | ReadableStream<Uint8Array>;
type Query = Record<string, string | string[] | number | boolean | undefined>;
interface Req { query?: Query; json?: unknown; body?: Body | ReadableStream<Uint8Array>; contentType?: string; expect?: number[]; signal?: AbortSignal }

/** A command: a string runs under `sh -c`, an array is the argv. */
export type Command = string | string[];
function argv(cmd: Command): string[] {
  if (typeof cmd === "string") return ["sh", "-c", cmd];
  if (cmd.length === 0) throw new AgentboxError("empty command");
  return cmd.map(String);
}
function execBody(cmd: Command, o: RunOptions = {}): Record<string, unknown> {
  const b: Record<string, unknown> = { cmd: argv(cmd) };
  if (o.cwd) b.cwd = o.cwd;
  if (o.user) b.user = o.user;
  if (o.env) b.env = o.env;
  if (o.stdin !== undefined) b.stdin = o.stdin;
  if (o.timeout) b.timeout_s = Math.max(1, Math.ceil(o.timeout));
  return b;
}

/** A client of one hostd. */
export class Client {
  readonly url: string;
  readonly apiKey: string;
  /** The template `create` uses by default. */
  readonly defaultTemplate: string | undefined;
  /** Templates: list, get, create, delete, build from a blueprint. */
  readonly templates: Templates;
  /** Secrets for egress injection. */
  readonly secrets: Secrets;
  /** API keys (admin). */
  readonly keys: Keys;
  /** Projects (admin). */
  readonly projects: Projects;
  /** Snapshots: list, get, delete. */
  readonly snapshots: Snapshots;
  private trace?: () => Record<string, string>;

  constructor(opts: ClientOptions = {}) {
    this.url = (opts.url || process.env.AGENTBOX_URL || DEFAULT_URL).replace(/\/+$/, "");
    this.apiKey = resolveKey(opts.apiKey);
    this.defaultTemplate = opts.template || process.env.AGENTBOX_TEMPLATE || undefined;
    this.trace = opts.traceHeaders;
    this.templates = new Templates(this);
    this.secrets = new Secrets(this);
    this.keys = new Keys(this);
    this.projects = new Projects(this);
    this.snapshots = new Snapshots(this);
  }

  /** The headers of every call. @internal */
  headers(): Record<string, string> {
    const h: Record<string, string> = { "User-Agent": "agentbox-typescript/0.1.0", ...(this.trace?.() ?? {}) };
    if (this.apiKey) h.Authorization = `Bearer ${this.apiKey}`;
    return h;
  }

  /** One call; throws an APIError unless the status is expected. @internal */
  async fetch(method: string, p: string, r: Req = {}): Promise<Response> {
    const u = new URL(this.url + p);
    for (const [k, v] of Object.entries(r.query ?? {})) {
      if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, x);
      else if (v !== undefined) u.searchParams.set(k, String(v));
    }
    const headers = this.headers();
    let body: any = r.body;
    if (r.json !== undefined) { body = JSON.stringify(r.json); headers["Content-Type"] = "application/json"; }
    if (r.contentType) headers["Content-Type"] = r.contentType;
    let resp: Response;
    try {
      resp = await fetch(u, { method, headers, body, signal: r.signal, ...(body instanceof ReadableStream ? { duplex: "half" } : {}) } as RequestInit);
    } catch (e) {
      throw new ConnectionFailed(`${method} ${u}: ${(e as Error).cause ?? e}`);
    }
    if (!(r.expect ?? [200]).includes(resp.status)) throw await errorFromResponse(resp);
    return resp;
  }

  /** A call that answers JSON. @internal */
  async json<T = any>(method: string, p: string, r: Req = {}): Promise<T> {
    return (await (await this.fetch(method, p, r)).json()) as T;
  }

  /** `GET /healthz` (no key needed). */
  health(): Promise<Health> { return this.json("GET", "/healthz"); }
  /** The OpenAPI document hostd was generated from. */
  async openapi(): Promise<string> { return (await this.fetch("GET", "/openapi.yaml")).text(); }
  /** Operator metrics (Prometheus text). */
  async metrics(): Promise<string> { return (await this.fetch("GET", "/metrics")).text(); }

  /** Create and boot a sandbox; resolves once it runs. */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const body: Record<string, unknown> = {};
    if (opts.template === undefined && opts.snapshot === undefined && this.defaultTemplate) body.template = this.defaultTemplate;
    for (const [k, v] of Object.entries(opts)) if (v !== undefined && v !== null && v !== "") body[k] = v;
    return new Sandbox(this, await this.json("POST", "/v1/sandboxes", { json: body, expect: [201] }));
  }

  /** `create`, as a sandbox that `await using` disposes of (deletes). Without
   * `await using`: `try { … } finally { await sb.delete() }`. */
  sandbox(opts: CreateOptions = {}): Promise<Sandbox> { return this.create(opts); }

  /** Run `fn` with a new sandbox and delete it afterwards, errors included. */
  async withSandbox<T>(opts: CreateOptions, fn: (sb: Sandbox) => Promise<T>): Promise<T> {
    const sb = await this.create(opts);
    try { return await fn(sb); } finally { await sb.delete({ missingOk: true }); }
  }

  /** The sandbox `id` (throws NotFound). */
  async get(id: string): Promise<Sandbox> { return new Sandbox(this, await this.json("GET", `/v1/sandboxes/${id}`)); }

  /** Every sandbox, oldest first. */
  async list(): Promise<Sandbox[]> {
    const d = await this.json("GET", "/v1/sandboxes");
    return d.sandboxes.map((s: SandboxInfo) => new Sandbox(this, s));
  }
}

/** A sandbox: run commands, move files, snapshot, fork, pause. `await using` deletes it. */
export class Sandbox {
  /** The guest's files. */
  readonly files: Files;
  /** The egress policy. */
  readonly network: Network;
  constructor(/** @internal */ readonly client: Client, /** What hostd said last. */ public info: SandboxInfo) {
    this.files = new Files(this);
    this.network = new Network(this);
  }
  /** The sandbox's id. */
  get id(): string { return this.info.id; }
  /** The state when last seen. */
  get state(): string { return this.info.state; }
  /** @internal */
  p(suffix = ""): string { return `/v1/sandboxes/${this.id}${suffix}`; }
  private set(d: SandboxInfo): this { this.info = d; return this; }

  /** Fetch the current description into `info`. */
  async refresh(): Promise<this> { return this.set(await this.client.json("GET", this.p())); }

  /** Stop the sandbox and delete everything it owned. */
  async delete(opts: { missingOk?: boolean } = {}): Promise<void> {
    try { await this.client.fetch("DELETE", this.p(), { expect: [204] }); }
    catch (e) { if (!(opts.missingOk && e instanceof NotFound)) throw e; }
  }
  async [Symbol.asyncDispose](): Promise<void> { await this.delete({ missingOk: true }); }

  /** Run `cmd` and resolve to its result once it exits (a non-zero exit is not an error: see `ok`). */
  async run(cmd: Command, opts: RunOptions = {}): Promise<ExecResult> {
    const resp = await this.client.fetch("POST", this.p("/exec"), { query: { stream: true }, json: execBody(cmd, opts) });
    const r = new ExecReader(opts.onStdout, opts.onStderr);
    for await (const line of lines(resp.body)) { r.feed(line); if (r.done) break; }
    return r.result();
  }

  /** Start `cmd` in the background; the handle streams its output. */
  async start(cmd: Command, opts: Omit<RunOptions, "onStdout" | "onStderr"> = {}): Promise<ExecHandle> {
    const d = await this.client.json("POST", this.p("/exec"), { json: { ...execBody(cmd, opts), background: true }, expect: [202] });
    return new ExecHandle(this, d.exec_id);
  }

  /** A handle on session `execId` that reads its output from `offset`. */
  attach(execId: string, opts: { offset?: number } = {}): ExecHandle { return new ExecHandle(this, execId, opts.offset ?? 0); }

  /** The exec sessions, oldest first. */
  async execs(): Promise<ExecSession[]> { return (await this.client.json("GET", this.p("/exec"))).sessions; }

  /** Start `cmd` on a terminal of rows x cols and connect to it. */
  async pty(cmd: Command = "bash", opts: { rows?: number; cols?: number; env?: Record<string, string>; cwd?: string } = {}): Promise<Pty> {
    const body = { ...execBody(cmd, opts), background: true, tty: true, rows: opts.rows ?? 24, cols: opts.cols ?? 80 };
    const d = await this.client.json("POST", this.p("/exec"), { json: body, expect: [202] });
    return Pty.connect(this.client.url, this.client.headers(), this.id, d.exec_id, 0);
  }

  /** Reconnect to session `execId`'s WebSocket, replaying output from `offset`. */
  ptyAttach(execId: string, opts: { offset?: number } = {}): Promise<Pty> {
    return Pty.connect(this.client.url, this.client.headers(), this.id, execId, opts.offset ?? 0);
  }

  /** Capture memory, devices and disk. */
  snapshot(opts: { stayPaused?: boolean; env?: Record<string, string>; cwd?: string } = {}): Promise<SnapshotInfo> {
    const body: Record<string, unknown> = {};
    if (opts.stayPaused) body.stay_paused = true;
    if (opts.env) body.env = opts.env;
    if (opts.cwd) body.cwd = opts.cwd;
    return this.client.json("POST", this.p("/snapshots"), { json: body, expect: [201] });
  }
  /** `n` copy-on-write copies of the running sandbox (delete them yourself). */
  async fork(n = 1): Promise<Sandbox[]> {
    const d = await this.client.json("POST", this.p("/fork"), { json: { count: n }, expect: [201] });
    return d.sandboxes.map((s: SandboxInfo) => new Sandbox(this.client, s));
  }
  /** What this sandbox has that `other` (a sandbox, or a sandbox or snapshot id) has not, every page followed:
   * `{method, base_snapshot, entries: [{path, status, kind, new, old, patch}], events}`. */
  async diff(other: Sandbox | string, opts: DiffOptions = {}): Promise<Diff> {
    const against = typeof other === "string" ? other : other.id;
    let acc: Diff | undefined;
    let cursor: string | undefined;
    for (;;) {
      const page: Diff = await this.client.json("GET", this.p("/diff"), { query: diffQuery(against, opts, cursor) });
      if (acc) { acc.entries.push(...page.entries); acc.next_cursor = page.next_cursor; } else acc = page;
      cursor = page.next_cursor;
      if (!cursor) return acc;
    }
  }
  /** The tree of snapshots and forks this sandbox belongs to, each node with its last command and exit code. */
  lineage(): Promise<Lineage> { return this.client.json("GET", this.p("/lineage")); }
  /** Write memory to disk and end the VM. */
  async pause(): Promise<this> { return this.set(await this.client.json("POST", this.p("/pause"))); }
  /** Bring a paused sandbox back. */
  async resume(): Promise<this> { return this.set(await this.client.json("POST", this.p("/resume"))); }
  /** Move the sandbox to another host of a fleet (`host`, or one the fleet places), with its files,
   * processes and exec sessions. Only a fleet's control plane with a snapshot store does this;
   * hostd alone answers 404. */
  async migrate(host?: string): Promise<this> { return this.set(await this.client.json("POST", this.p("/migrate"), { json: host ? { host } : {} })); }
  /** Make the timeout end `seconds` from now. */
  async extend(seconds: number): Promise<this> { return this.set(await this.client.json("POST", this.p("/timeout"), { json: { timeout_s: seconds } })); }
  /** What the sandbox has consumed. */
  usage(): Promise<Usage> { return this.client.json("GET", this.p("/usage")); }

  /** A port's service URLs, token and whether it is public. */
  port(port: number): Promise<PortAccess> { return this.client.json("GET", this.p(`/ports/${port}`)); }
  /** Make a port public (no credential), or private again. */
  setPublic(port: number, pub = true): Promise<PortAccess> { return this.client.json("PUT", this.p(`/ports/${port}`), { json: { public: pub } }); }
  /** A signed share link to `port` that expires. */
  share(port: number, expiresInS = 3600): Promise<ShareLink> {
    return this.client.json("POST", this.p(`/ports/${port}/links`), { json: { expires_in_s: expiresInS }, expect: [201] });
  }
  /** A URL that opens `port` (with the token unless public); `share: SECONDS` gives an expiring link. */
  async url(port: number, opts: { share?: number; path?: boolean } = {}): Promise<string> {
    if (opts.share) { const l = await this.share(port, opts.share); return opts.path || !l.url ? l.path_url : l.url; }
    const pa = await this.port(port);
    let u = pa.url && !opts.path ? pa.url : pa.path_url;
    if (!pa.public) u += (u.includes("?") ? "&" : "?") + "token=" + pa.token;
    return u;
  }

  /** The flight recorder, oldest first; with `follow`, then live until the sandbox is deleted or you stop. */
  async *events(opts: { types?: string[]; follow?: boolean; since?: string; until?: string; after?: number; limit?: number; signal?: AbortSignal } = {}): AsyncGenerator<Event> {
    const q: Query = { type: opts.types?.join(","), since: opts.since, until: opts.until };
    let after = opts.after ?? 0;
    if (opts.follow) {
      const ac = new AbortController();
      opts.signal?.addEventListener("abort", () => ac.abort());
      const resp = await this.client.fetch("GET", this.p("/events"), { query: { ...q, follow: true, after }, signal: ac.signal });
      try { for await (const l of lines(resp.body)) yield parseLine(l) as Event; } finally { ac.abort(); }
      return;
    }
    let n = 0;
    for (;;) {
      const page = await this.client.json("GET", this.p("/events"), { query: { ...q, after, limit: opts.limit ? Math.min(opts.limit, MAX_EVENTS_PAGE) : undefined } });
      for (const e of page.events) { yield e; if (opts.limit && ++n >= opts.limit) return; }
      if (page.events.length === 0 || page.next_after === after) return;
      after = page.next_after;
    }
  }
}

/** A command running in the background (or any session, via `sb.attach`). */
export class ExecHandle implements AsyncIterable<Output> {
  exitCode: number | undefined;
  signal = "";
  constructor(readonly sandbox: Sandbox, /** The session's id. */ readonly execId: string, /** Where the next read starts. */ public offset = 0) {}

  private async *read(r: ExecReader): AsyncGenerator<Output> {
    const resp = await this.sandbox.client.fetch("GET", this.sandbox.p(`/exec/${this.execId}`), { query: { offset: this.offset } });
    for await (const line of lines(resp.body)) {
      const o = r.feed(line);
      if (o) { this.offset = o.offset + o.data.length; yield o; }
      if (r.done) { this.exitCode = r.exitCode; this.signal = r.signal; return; }
    }
    r.result();
  }
  [Symbol.asyncIterator](): AsyncIterator<Output> { return this.read(new ExecReader(undefined, undefined, false)); }

  /** Read from `offset` to the exit and resolve to the result. */
  async wait(opts: { onStdout?: (t: string) => void; onStderr?: (t: string) => void } = {}): Promise<ExecResult> {
    const r = new ExecReader(opts.onStdout, opts.onStderr);
    for await (const _ of this.read(r)) { /* collected by r */ }
    return r.result();
  }
  /** Send `signal` to the command's process group. */
  async kill(signal = "SIGKILL"): Promise<void> {
    await this.sandbox.client.fetch("POST", this.sandbox.p(`/exec/${this.execId}/signal`), { json: { signal }, expect: [204] });
  }
}

/** What `files.write` takes. */
export type Data = string | Uint8Array | ReadableStream<Uint8Array> | Readable | AsyncIterable<Uint8Array>;
function toBody(d: Data): Body | ReadableStream<Uint8Array> {
  if (typeof d === "string" || d instanceof Uint8Array || d instanceof ReadableStream) return d;
  const r = d instanceof Readable ? d : Readable.from(d);
  return Readable.toWeb(r) as unknown as ReadableStream<Uint8Array>;
}

/** A directory being watched: `for await` its events; `close()` to stop. */
export class Watch implements AsyncIterable<FileEvent> {
  constructor(private resp: Response, private ac: AbortController) {}
  async *[Symbol.asyncIterator](): AsyncIterator<FileEvent> {
    try {
      for await (const l of lines(this.resp.body)) {
        const ev = parseLine(l);
        if (ev.type === "keepalive") continue;
        if (ev.type === "error") throw streamError(ev);
        yield ev as FileEvent;
      }
    } catch (e) { if (!this.ac.signal.aborted) throw e; }
  }
  /** Stop watching. */
  close(): void { this.ac.abort(); }
  async [Symbol.asyncDispose](): Promise<void> { this.close(); }
}

/** The guest's filesystem (absolute paths). */
export class Files {
  constructor(private sb: Sandbox) {}
  private f(method: string, suffix: string, p: string, r: Req = {}): Promise<Response> {
    return this.sb.client.fetch(method, this.sb.p("/files" + suffix), { ...r, query: { path: p, ...r.query } });
  }
  /** The file's bytes. */
  async read(p: string): Promise<Uint8Array>;
  /** The file as text. */
  async read(p: string, opts: { format: "text" }): Promise<string>;
  /** The file as a stream of chunks (for large files). */
  async read(p: string, opts: { format: "stream" }): Promise<ReadableStream<Uint8Array>>;
  async read(p: string, opts: { format?: "bytes" | "text" | "stream" } = {}): Promise<Uint8Array | string | ReadableStream<Uint8Array>> {
    const resp = await this.f("GET", "", p);
    if (opts.format === "stream") return resp.body!;
    if (opts.format === "text") return resp.text();
    return new Uint8Array(await resp.arrayBuffer());
  }
  /** Write `data` (string, bytes, or a stream, streamed) to `p`, atomically; parents are created. */
  async write(p: string, data: Data, opts: { mode?: number | string } = {}): Promise<void> {
    const mode = opts.mode === undefined ? undefined : typeof opts.mode === "string" ? opts.mode : opts.mode.toString(8).padStart(4, "0");
    await this.f("PUT", "", p, { body: toBody(data), contentType: "application/octet-stream", query: { mode }, expect: [204] });
  }
  /** The entries of directory `p`, every page of them (see `pages`). */
  async list(p: string): Promise<FileInfo[]> {
    const out: FileInfo[] = [];
    for await (const page of this.pages(p)) out.push(...page);
    return out;
  }
  /** Directory `p`'s entries a page at a time (up to `opts.limit` each, hostd's
   * default 1000), sorted by name, following the listing's cursor. */
  async *pages(p: string, opts: { limit?: number } = {}): AsyncGenerator<FileInfo[]> {
    let cursor: string | undefined;
    for (;;) {
      const d = (await (await this.f("GET", "/list", p, { query: { limit: opts.limit, cursor } })).json()) as { entries: FileInfo[]; next_cursor?: string };
      yield d.entries;
      if (!d.next_cursor || d.next_cursor === cursor) return;
      cursor = d.next_cursor;
    }
  }
  /** Describe `p` (throws NotFound). */
  async stat(p: string): Promise<FileInfo> { return (await (await this.f("GET", "/stat", p)).json()) as FileInfo; }
  /** True if `p` exists. */
  async exists(p: string): Promise<boolean> {
    try { await this.stat(p); return true; } catch (e) { if (e instanceof NotFound) return false; throw e; }
  }
  /** mkdir -p. */
  async mkdir(p: string): Promise<void> { await this.f("POST", "/mkdir", p, { expect: [204] }); }
  /** Rename `from` to `to`. */
  async move(from: string, to: string): Promise<void> {
    await this.sb.client.fetch("POST", this.sb.p("/files/move"), { json: { from, to }, expect: [204] });
  }
  /** Remove a file, or a directory (`recursive` if not empty). */
  async remove(p: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.f("DELETE", "", p, { query: { recursive: !!opts.recursive }, expect: [204] });
  }
  /** Copy local directory `local` into `remote` as a tar.gz stream. */
  async uploadDir(local: string, remote: string): Promise<{ entries: number; bytes: number }> {
    const body = Readable.toWeb(tarDir(local)) as unknown as ReadableStream<Uint8Array>;
    return (await (await this.f("PUT", "/archive", remote, { body, contentType: "application/x-tar" })).json()) as { entries: number; bytes: number };
  }
  /** Copy guest directory `remote` into `local`, refusing entries that would escape it. */
  async downloadDir(remote: string, local: string): Promise<number> {
    const resp = await this.f("GET", "/archive", remote);
    return untarSafely(Readable.fromWeb(resp.body as any), local);
  }
  /** Watch directory `p` for changes. */
  async watch(p: string, opts: { recursive?: boolean } = {}): Promise<Watch> {
    const ac = new AbortController();
    const resp = await this.f("GET", "/watch", p, { query: { recursive: opts.recursive ?? true }, signal: ac.signal });
    return new Watch(resp, ac);
  }
}

/** A sandbox's egress policy. */
export class Network {
  constructor(private sb: Sandbox) {}
  /** The policy in force. */
  get(): Promise<NetworkPolicy> { return this.sb.client.json("GET", this.sb.p("/network")); }
  /** Replace the fields given (the others stay); applies at once. */
  update(patch: NetworkPatch): Promise<NetworkPolicy> { return this.sb.client.json("PATCH", this.sb.p("/network"), { json: patch }); }
}

/** Snapshots: lineage and deletion. */
export class Snapshots {
  constructor(private c: Client) {}
  /** Every snapshot. */
  async list(): Promise<SnapshotInfo[]> { return (await this.c.json("GET", "/v1/snapshots")).snapshots; }
  /** Describe one. */
  get(id: string): Promise<SnapshotInfo> { return this.c.json("GET", `/v1/snapshots/${id}`); }
  /** Delete one nothing uses (else Conflict). */
  async delete(id: string): Promise<void> { await this.c.fetch("DELETE", `/v1/snapshots/${id}`, { expect: [204] }); }
  /** What snapshot `id` has that `against` (a snapshot or sandbox id) has not (one page). */
  diff(id: string, against: string, opts: DiffOptions = {}): Promise<Diff> {
    return this.c.json("GET", `/v1/snapshots/${id}/diff`, { query: diffQuery(against, opts, undefined) });
  }
  /** Restore the snapshot `n` times and run `cmd` (a string runs through `sh -c`) in each; `env`, `cwd` and
   * `timeoutS` are each run's, `keep` keeps the restored sandboxes, `onProgress` (or a function in place of the
   * options) gets each started/finished line. Resolves to `{runs: [{index, exit_code, stdout, stderr, group}], groups, differ}`. */
  async replay(id: string, cmd: string | string[], n = 3, opts: ReplayOptions | ((ev: Record<string, any>) => void) = {}): Promise<ReplayResult> {
    const o: ReplayOptions = typeof opts === "function" ? { onProgress: opts } : opts;
    const onProgress = o.onProgress;
    const argv = typeof cmd === "string" ? ["/bin/sh", "-c", cmd] : cmd;
    const json: Record<string, unknown> = { cmd: argv, n };
    if (o.env) json.env = o.env;
    if (o.cwd) json.cwd = o.cwd;
    if (o.timeoutS) json.timeout_s = o.timeoutS;
    if (o.keep) json.keep = true;
    const resp = await this.c.fetch("POST", `/v1/snapshots/${id}/replay`, { query: { stream: true }, json });
    for await (const line of lines(resp.body)) {
      if (!line.trim()) continue;
      const ev = JSON.parse(line);
      if (ev.type === "result") return ev.result;
      if (ev.type === "error") throw new Error(ev.error?.message ?? "replay failed");
      onProgress?.(ev);
    }
    throw new Error("replay: the stream ended without a result");
  }
}

/** Options of a replay: each run's env, cwd and timeout; whether to keep the restored sandboxes; progress lines. */
export interface ReplayOptions { env?: Record<string, string>; cwd?: string; timeoutS?: number; keep?: boolean; onProgress?: (ev: Record<string, any>) => void }
/** Options of a diff: a subtree, patches, how candidates are found, excludes, the events side by side. */
export interface DiffOptions { path?: string; patch?: boolean; method?: "auto" | "journal" | "walk" | "full"; exclude?: string[]; events?: boolean }
/** A diff (see the API's Diff schema). */
export type Diff = { method: string; reason: string; base_snapshot?: string; entries: Array<Record<string, any>>; next_cursor?: string; events?: Record<string, any> } & Record<string, any>;
/** A lineage tree (see the API's Lineage schema). */
export type Lineage = { sandbox_id: string; root: Record<string, any> };
/** A replay's runs (see the API's ReplayResult schema). */
export type ReplayResult = { runs: Array<Record<string, any>>; groups: number; differ: boolean };

function diffQuery(against: string, o: DiffOptions, cursor: string | undefined): Record<string, string | boolean | undefined> {
  return { against, path: o.path, patch: o.patch || undefined, method: o.method, exclude: o.exclude?.join(","),
    events: (o.events && !cursor) || undefined, cursor };
}

/** A blueprint: `{template|base, vcpus?, memory_mib?, steps: [{run}|{copy:{src,dest}}|{env}|{workdir}]}`. */
export type Blueprint = Record<string, unknown>;

/** Templates: named snapshots with a warm pool. */
export class Templates {
  constructor(private c: Client) {}
  /** Every template. */
  async list(): Promise<Template[]> { return (await this.c.json("GET", "/v1/templates")).templates; }
  /** Describe one. */
  get(name: string): Promise<Template> { return this.c.json("GET", `/v1/templates/${name}`); }
  /** Name a snapshot as a template. */
  create(name: string, snapshotId: string, opts: { poolSize?: number } = {}): Promise<Template> {
    return this.c.json("POST", "/v1/templates", { json: { name, snapshot_id: snapshotId, pool_size: opts.poolSize ?? 0 }, expect: [201] });
  }
  /** Build template `name` from OCI image `ref` (a registry reference, or an OCI
   * layout or `docker save` tarball on hostd's machine) in hostd, with progress. */
  async buildImage(name: string, ref: string, opts: ImageBuildOptions = {}): Promise<Template> {
    const image: Record<string, unknown> = { ref };
    if (opts.insecure) image.insecure = true;
    if (opts.registrySecret) image.registry_secret = opts.registrySecret;
    if (opts.freeMiB) image.free_mib = opts.freeMiB;
    if (opts.memoryMiB) image.memory_mib = opts.memoryMiB;
    if (opts.kernel) image.kernel = opts.kernel;
    if (opts.modules) image.modules = opts.modules;
    const resp = await this.c.fetch("POST", "/v1/templates", { json: { name, image, pool_size: opts.poolSize ?? 0 }, expect: [200] });
    for await (const line of lines(resp.body)) {
      const ev = parseLine(line);
      if (ev.type === "done") return ev.template as Template;
      if (ev.type === "error") throw streamError(ev);
      opts.onProgress?.(ev as BuildEvent);
    }
    throw new AgentboxError(`template build ${name}: the stream ended without its result`);
  }
  /** Delete a template and its pool (not its snapshot). */
  async delete(name: string): Promise<void> { await this.c.fetch("DELETE", `/v1/templates/${name}`, { expect: [204] }); }

  /** Build template `name` in hostd from a blueprint (a file path, YAML text or
   * an object) or `opts.dockerfile` (a path or its text), reusing cached steps
   * as `agentbox template build` does. `opts.context` is the directory uploaded
   * as the build context (default: the file's directory; none for inline text);
   * `buildArgs` are a Dockerfile's ARGs. `onProgress` gets each BuildEvent:
   * `log` lines (`line`, `stream`) and a FROM image's pull `progress`. */
  async build(name: string, blueprint?: string | Blueprint, opts: BuildOptions = {}): Promise<Template> {
    const p = await plan(blueprint, opts.dockerfile, opts.context);
    const body = Readable.toWeb(pack(p)) as unknown as ReadableStream<Uint8Array>;
    const resp = await this.c.fetch("POST", "/v1/templates/build", { query: buildQuery(name, p, opts), body, contentType: "application/x-tar", expect: [200] });
    for await (const line of lines(resp.body)) {
      const ev = parseLine(line);
      if (ev.type === "done") return ev.template as Template;
      if (ev.type === "error") throw streamError(ev);
      opts.onProgress?.(ev as BuildEvent);
    }
    throw new AgentboxError(`template build ${name}: the stream ended without its result`);
  }
}

/** Secrets for egress injection; values are never returned. */
export class Secrets {
  constructor(private c: Client) {}
  /** Store (or replace) a secret. */
  set(name: string, value: string): Promise<Secret> { return this.c.json("POST", "/v1/secrets", { json: { name, value }, expect: [201] }); }
  /** The secrets' names. */
  async list(): Promise<Secret[]> { return (await this.c.json("GET", "/v1/secrets")).secrets; }
  /** Delete one. */
  async delete(name: string): Promise<void> { await this.c.fetch("DELETE", `/v1/secrets/${name}`, { expect: [204] }); }
}

/** Options of a new API key. */
export interface KeyOptions { name?: string; project?: string; role?: "admin" | "member"; expiresInS?: number; expiresAt?: string }

/** API keys (admin): create, list, revoke, rotate the bootstrap key. */
export class Keys {
  constructor(private c: Client) {}
  /** Make a key (default: a member of the caller's project); its secret is in the answer only. */
  create(o: KeyOptions = {}): Promise<CreatedKey> {
    const json = { name: o.name, project: o.project, role: o.role, expires_in_s: o.expiresInS, expires_at: o.expiresAt };
    return this.c.json("POST", "/v1/keys", { json, expect: [201] });
  }
  /** The live keys of the caller's project (admin: `project`, or "*" for all). */
  async list(project?: string): Promise<APIKey[]> { return (await this.c.json("GET", "/v1/keys", { query: { project } })).keys; }
  /** Revoke a key: refused from its next call, its streams closed. */
  async revoke(id: string): Promise<void> { await this.c.fetch("DELETE", `/v1/keys/${id}`, { expect: [204] }); }
  /** Make a new bootstrap key (written to hostd's key file) and revoke the previous one. */
  rotate(): Promise<CreatedKey> { return this.c.json("POST", "/v1/keys/rotate", { expect: [201] }); }
}

/** Projects (admin): create, list. */
export class Projects {
  constructor(private c: Client) {}
  /** Create a project. */
  create(name: string): Promise<Project> { return this.c.json("POST", "/v1/projects", { json: { name }, expect: [201] }); }
  /** Every project. */
  async list(): Promise<Project[]> { return (await this.c.json("GET", "/v1/projects")).projects; }
}
