// Every method of reachable.ts really calls its operation, and together they
// send every request body field of hostd/api/openapi.yaml. Each method is
// called (the calls table below, with every option it offers) against a
// real HTTP server on loopback that records the requests and answers each
// with an API error; the requests are then matched against the spec's
// method and path templates, and their JSON keys (nested ones as
// `image.ref`, `mounts[].type`) against its request schemas, their query
// parameters against its parameters and their bodies' Content-Type (JSON, a
// file's bytes, a tar) against its request bodies'.
// Needs no hostd.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { Client, ExecHandle, Sandbox, type SandboxInfo } from "../src/index.js";
import { reachable } from "./reachable.js";

const specText = readFileSync(fileURLToPath(new URL("../../../../hostd/api/openapi.yaml", import.meta.url)), "utf8");

// (operationId, field) -> why no method sends it.
const leftOut: Record<string, string> = {
  "snapshotSandbox.kind": "step snapshots are the blueprint engine's (the agentbox CLI's)",
  "snapshotSandbox.cache_key": "step snapshots are the blueprint engine's (the agentbox CLI's)",
  "snapshotSandbox.user": "the snapshot's user is the blueprint engine's (the agentbox CLI's)",
  "createTemplate.shared": "admin-only sharing is for the CLI, not an agent's SDK",
};

// (operationId, query parameter) -> why no method sends it.
const leftOutQuery: Record<string, string> = {
  "listSandboxes.project": "an admin's filter across projects: the CLI's, not an agent's SDK",
  "listSnapshots.project": "an admin's filter across projects: the CLI's, not an agent's SDK",
  "listTemplates.project": "an admin's filter across projects: the CLI's, not an agent's SDK",
  "listSecrets.project": "an admin's filter across projects: the CLI's, not an agent's SDK",
  "listSandboxEvents.format": "the SDK reads events as JSON (format=otlp is for collectors)",
  "diffSandbox.max_patch_bytes": "hostd's default bound on a patch; not offered",
  "diffSandbox.limit": "Sandbox.diff follows every page; the page size is hostd's",
  "diffSnapshot.max_patch_bytes": "hostd's default bound on a patch; not offered",
  "diffSnapshot.limit": "Snapshots.diff answers one page of hostd's size",
  "diffSnapshot.cursor": "Snapshots.diff answers one page (its next_cursor is in the answer)",
};

// --- a minimal reader of the spec's YAML -----------------------------------
// Block mappings and block sequences (an item becomes the key "#n" of its
// parent), as the spec writes them (a sequence indented under its key);
// block scalars and flow values are kept as strings or skipped. (The SDK
// has no YAML dependency and a test should not add one.)
type Node = { [k: string]: Node | string };
function parseYAML(text: string): Node {
  const root: Node = {};
  const stack: { indent: number; node: Node }[] = [{ indent: -1, node: root }];
  let skipDeeper = -1; // skip lines indented deeper than this (a scalar's continuation)
  const entry = (line: string, indent: number): void => {
    while (stack[stack.length - 1].indent >= indent) stack.pop();
    const parent = stack[stack.length - 1].node;
    if (line.startsWith("- ") || line === "-") {
      const item: Node = {};
      parent[`#${Object.keys(parent).length}`] = item;
      stack.push({ indent, node: item });
      if (line.length > 2) entry(line.slice(2).trim(), indent + 2);
      return;
    }
    const m = line.match(/^("[^"]*"|'[^']*'|[^:]+):(?:\s+(.*))?$/);
    if (!m) { skipDeeper = indent; return; } // a scalar item
    const key = m[1].replace(/^["']|["']$/g, "");
    const value = (m[2] ?? "").replace(/\s+#.*$/, "");
    if (value === "") {
      const child: Node = {};
      parent[key] = child;
      stack.push({ indent, node: child });
    } else {
      parent[key] = value.replace(/^["']|["']$/g, "");
      skipDeeper = indent; // a block scalar (| or >) or a plain one continued
    }
  };
  for (const raw of text.split("\n")) {
    if (!raw.trim() || raw.trimStart().startsWith("#")) continue;
    const indent = raw.length - raw.trimStart().length;
    if (skipDeeper >= 0 && indent > skipDeeper) continue;
    skipDeeper = -1;
    entry(raw.trim(), indent);
  }
  return root;
}

const spec = parseYAML(specText);
const schemas = (spec.components as Node).schemas as Node;
const resolve = (s: Node | string | undefined): Node => {
  let n = (s ?? {}) as Node;
  while (typeof n.$ref === "string") n = schemas[n.$ref.split("/").pop()!] as Node;
  return n;
};
/** The properties of schema s, nested ones as `a.b` and `a[].b`. */
function schemaFields(s: Node | string | undefined, prefix = ""): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries((resolve(s).properties ?? {}) as Node)) {
    out.push(prefix + k);
    const r = resolve(v);
    if (r.type === "array") out.push(...schemaFields(r.items, `${prefix}${k}[].`));
    else if (r.properties) out.push(...schemaFields(r, `${prefix}${k}.`));
  }
  return out;
}
interface Op { id: string; method: string; template: string; rx: RegExp; literal: number; fields?: Set<string>; types: string[]; query: Set<string> }
const ops = new Map<string, Op>();
const parameters = (spec.components as Node).parameters as Node;
/** The names of the query parameters of an operation or path item. */
const queryOf = (n: Node): string[] => Object.values((n.parameters ?? {}) as Node)
  .map((x) => (typeof (x as Node).$ref === "string" ? parameters[((x as Node).$ref as string).split("/").pop()!] : x) as Node)
  .filter((x) => x.in === "query").map((x) => x.name as string);
for (const [template, item] of Object.entries(spec.paths as Node)) {
  for (const [method, op] of Object.entries(item as Node)) {
    if (typeof op !== "object" || typeof op.operationId !== "string") continue;
    const content = ((op.requestBody as Node)?.content ?? {}) as Node;
    const media = content["application/json"] as Node | undefined;
    const rx = new RegExp("^" + template.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{[^}]+\}/g, "[^/]+") + "$");
    ops.set(op.operationId, { id: op.operationId, method: method.toUpperCase(), template, rx,
      literal: template.replace(/\{[^}]+\}/g, "").length, fields: media ? new Set(schemaFields(media.schema)) : undefined, types: Object.keys(content),
      query: new Set([...queryOf(op), ...queryOf(item as Node)]) });
  }
}

/** The keys of a JSON value, nested ones as `a.b` and `a[].b`. */
function sentFields(v: unknown, prefix = ""): string[] {
  if (Array.isArray(v)) return v.flatMap((x) => sentFields(x, prefix ? prefix.slice(0, -1) + "[]." : ""));
  if (v === null || typeof v !== "object") return [];
  return Object.entries(v).flatMap(([k, x]) => [prefix + k, ...sentFields(x, `${prefix}${k}.`)]);
}
const parentOf = (f: string) => f.slice(0, f.lastIndexOf(".") + 1);

/** The operation a request is (the most literal template of those that match). */
function match(r: Rec): Op | undefined {
  const hits = [...ops.values()].filter((o) => o.method === r.method && o.rx.test(r.path));
  return hits.sort((a, b) => b.literal - a.literal)[0];
}

// --- the recording server ---------------------------------------------------

interface Rec { method: string; path: string; query: URLSearchParams; contentType: string; hasBody: boolean; json?: unknown }
const log: Rec[] = [];
const notFound = JSON.stringify({ error: { code: "not_found", message: "the recorder answers every call so" } });

function record(req: IncomingMessage, body: Buffer): Rec {
  const u = new URL(req.url ?? "/", "http://recorder");
  const contentType = String(req.headers["content-type"] ?? "");
  const rec: Rec = { method: req.method ?? "", path: u.pathname, query: u.searchParams, contentType, hasBody: body.length > 0 };
  if (contentType.startsWith("application/json") && body.length) rec.json = JSON.parse(body.toString("utf8"));
  log.push(rec);
  return rec;
}

/** The API error, but a background exec gets its 202 (so that Sandbox.pty goes on to the PTY
 * WebSocket), and a listing's or diff's first page a next page (so that the cursor is sent). */
function answerTo(r: Rec): [number, string] {
  if (r.method === "POST" && r.path.endsWith("/exec") && (r.json as any)?.background) return [202, JSON.stringify({ exec_id: "ex-test" })];
  if (r.method === "GET" && /\/(files\/list|diff)$/.test(r.path) && !r.query.has("cursor")) {
    return [200, JSON.stringify({ entries: [], next_cursor: "c-test", method: "walk", reason: "" })];
  }
  return [404, notFound];
}

let server: Server;
let url = "";
const tmp = mkdtempSync(path.join(os.tmpdir(), "sdk-requests-"));
before(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const r = record(req, Buffer.concat(chunks));
      const [status, answer] = answerTo(r);
      res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(answer), Connection: "close" });
      res.end(answer);
    });
  });
  // The PTY WebSocket: recorded, refused with the API's error.
  server.on("upgrade", (req: IncomingMessage, socket: Socket) => {
    record(req, Buffer.alloc(0));
    socket.end(`HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(notFound)}\r\nConnection: close\r\n\r\n${notFound}`);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  server.closeAllConnections?.();
  await new Promise((r) => server.close(r));
  rmSync(tmp, { recursive: true, force: true });
});

// --- the calls ----------------------------------------------------------------

interface Objs { client: Client; sb: Sandbox; handle: ExecHandle }
const dir = (name: string) => { const d = mkdtempSync(path.join(tmp, name)); writeFileSync(path.join(d, "f.txt"), "x"); return d; };
const cb = () => {};
const env = { A: "1" };
const inject = [{ host: "example.com", header: "Authorization", value: "{{secret:T}}", kind: "bearer" }];
const network = { mode: "proxy", allow_domains: ["example.com"], allow_cidrs: ["10.0.0.0/8"], allow_ports: [443], inject };
const createOpts = {
  template: "t-test", snapshot: "snap-test", vcpus: 2, memory_mib: 512, env, timeout_s: 30, network,
  secret_env: { TOKEN: "T" }, metadata: { k: "v" }, boot: "cold" as const, start: true,
  cpu_quota: 0.5, host_memory_mib: 1024, disk_mib: 2048, disk_bps: 1 << 20, net_bps: 1 << 20, max_pids: 100,
  exec_timeout_s: 60, idle_timeout_s: 120, on_timeout: "pause",
  mounts: [
    { type: "host" as const, path: "/mnt/h", source: "/srv/h", read_only: true, allow_symlinks: true },
    { type: "s3" as const, path: "/mnt/s", endpoint: "http://127.0.0.1:9000", bucket: "b", prefix: "p/", region: "us-east-1", secret: "s3key" },
    { type: "git" as const, path: "/mnt/g", url: "https://git.test/r.git", ref: "main", secret: "tok" },
  ],
} as any;
const run = { cwd: "/root", env, stdin: "in", user: "root", timeout: 5 };
const diff = { path: "/root", patch: true, method: "walk" as const, exclude: ["/tmp"], events: true };

// "Class.method" -> a call of it with every option it offers.
const calls: Record<string, (o: Objs) => unknown> = {
  "Client.health": (o) => o.client.health(),
  "Client.openapi": (o) => o.client.openapi(),
  "Client.metrics": (o) => o.client.metrics(),
  "Client.create": (o) => o.client.create(createOpts),
  "Client.sandbox": (o) => o.client.sandbox(createOpts),
  "Client.withSandbox": (o) => o.client.withSandbox(createOpts, async () => 0),
  "Client.list": (o) => o.client.list(),
  "Client.get": (o) => o.client.get("sb-test"),
  "Sandbox.refresh": (o) => o.sb.refresh(),
  "Sandbox.delete": (o) => o.sb.delete({ missingOk: false }),
  "Sandbox.run": (o) => o.sb.run(["echo", "hi"], { ...run, onStdout: cb, onStderr: cb }),
  "Sandbox.start": (o) => o.sb.start(["echo", "hi"], run),
  "Sandbox.pty": (o) => o.sb.pty(["bash"], { rows: 30, cols: 100, env, cwd: "/root" }),
  "Sandbox.ptyAttach": (o) => o.sb.ptyAttach("ex-test", { offset: 3 }),
  "Sandbox.execs": (o) => o.sb.execs(),
  "Sandbox.attach": (o) => o.sb.attach("ex-test", { offset: 3 }),
  "ExecHandle.wait": (o) => o.handle.wait({ onStdout: cb, onStderr: cb }),
  "ExecHandle.kill": (o) => o.handle.kill("SIGTERM"),
  "Sandbox.port": (o) => o.sb.port(8080),
  "Sandbox.url": (o) => o.sb.url(8080, { path: true }),
  "Sandbox.setPublic": (o) => o.sb.setPublic(8080, true),
  "Sandbox.share": (o) => o.sb.share(8080, 600),
  "Files.read": (o) => o.sb.files.read("/root/x"),
  "Files.write": (o) => o.sb.files.write("/root/x", "data", { mode: 0o644 }),
  "Files.remove": (o) => o.sb.files.remove("/root/x", { recursive: true }),
  "Files.list": (o) => o.sb.files.list("/root"),
  "Files.pages": (o) => o.sb.files.pages("/root", { limit: 5 }),
  "Files.stat": (o) => o.sb.files.stat("/root/x"),
  "Files.exists": (o) => o.sb.files.exists("/root/x"),
  "Files.mkdir": (o) => o.sb.files.mkdir("/root/d"),
  "Files.move": (o) => o.sb.files.move("/root/a", "/root/b"),
  "Files.downloadDir": (o) => o.sb.files.downloadDir("/root/d", dir("down-")),
  "Files.uploadDir": (o) => o.sb.files.uploadDir(dir("up-"), "/root/d"),
  "Files.watch": (o) => o.sb.files.watch("/root", { recursive: true }),
  "Sandbox.snapshot": (o) => o.sb.snapshot({ stayPaused: true, env, cwd: "/root" }),
  "Sandbox.fork": (o) => o.sb.fork(2),
  "Sandbox.pause": (o) => o.sb.pause(),
  "Sandbox.resume": (o) => o.sb.resume(),
  "Sandbox.migrate": (o) => o.sb.migrate("h-test"),
  "Sandbox.extend": (o) => o.sb.extend(60),
  "Sandbox.usage": (o) => o.sb.usage(),
  "Sandbox.diff": (o) => o.sb.diff("sb-other", diff),
  "Sandbox.lineage": (o) => o.sb.lineage(),
  "Sandbox.events": (o) => o.sb.events({ types: ["exec"], since: "2026-01-01T00:00:00Z", until: "2026-12-31T00:00:00Z", after: 1, limit: 5 }),
  "Snapshots.list": (o) => o.client.snapshots.list(),
  "Snapshots.get": (o) => o.client.snapshots.get("snap-test"),
  "Snapshots.delete": (o) => o.client.snapshots.delete("snap-test"),
  "Snapshots.diff": (o) => o.client.snapshots.diff("snap-test", "snap-other", diff),
  "Snapshots.replay": (o) => o.client.snapshots.replay("snap-test", ["echo"], 2, { env, cwd: "/root", timeoutS: 30, keep: true, onProgress: cb }),
  "Templates.list": (o) => o.client.templates.list(),
  "Templates.get": (o) => o.client.templates.get("n-test"),
  "Templates.create": (o) => o.client.templates.create("n-test", "snap-test", { poolSize: 2 }),
  "Templates.buildImage": (o) => o.client.templates.buildImage("n-test", "registry.test/img:1", {
    poolSize: 1, insecure: true, registrySecret: "reg", freeMiB: 512, memoryMiB: 512, kernel: "/srv/vmlinux", modules: "/srv/modules", onProgress: cb }),
  "Templates.build": (o) => o.client.templates.build("n-test", undefined, {
    dockerfile: "FROM scratch\n", context: dir("ctx-"), buildArgs: { V: "1" }, pool: 1, noCache: true, onProgress: cb }),
  "Templates.delete": (o) => o.client.templates.delete("n-test"),
  "Templates.build.blueprint": (o) => o.client.templates.build("n-test", { base: "b-test", steps: [{ run: "true" }] }, { pool: 1 }),
  "Network.get": (o) => o.sb.network.get(),
  "Network.update": (o) => o.sb.network.update({ allow_domains: ["example.com"], allow_cidrs: ["10.0.0.0/8"], allow_ports: [443], inject }),
  "Sandbox.events.follow": (o) => o.sb.events({ follow: true, types: ["exec"], after: 1 }),
  "Secrets.set": (o) => o.client.secrets.set("n-test", "v"),
  "Secrets.list": (o) => o.client.secrets.list(),
  "Secrets.delete": (o) => o.client.secrets.delete("n-test"),
  "Keys.create": (o) => o.client.keys.create({ name: "n-test", project: "p-test", role: "member", expiresInS: 3600, expiresAt: "2027-01-01T00:00:00Z" }),
  "Keys.list": (o) => o.client.keys.list("p-test"),
  "Keys.revoke": (o) => o.client.keys.revoke("key-test"),
  "Keys.rotate": (o) => o.client.keys.rotate(),
  "Projects.create": (o) => o.client.projects.create("n-test"),
  "Projects.list": (o) => o.client.projects.list(),
};
// Extra calls (a second form of a method) count for the method before the last dot.
const methodOf = (k: string) => k.split(".").slice(0, 2).join(".");

/** Calls one: awaits it, takes one item of what it iterates, closes what it opened; the recorder's error is expected. */
async function invoke(call: (o: Objs) => unknown, o: Objs): Promise<unknown> {
  try {
    let r: any = await call(o);
    if (r && typeof r[Symbol.asyncIterator] === "function") {
      const it = r[Symbol.asyncIterator]();
      try { await it.next(); } finally { await it.return?.(); }
    }
    if (r && typeof r.close === "function") await r.close();
    return undefined;
  } catch (e) { return e; }
}

test("every method sends its operation's request, and they send every body field of the spec", async () => {
  const client = new Client({ url, apiKey: "test" });
  const sb = new Sandbox(client, { id: "sb-test", state: "running" } as SandboxInfo);
  const o: Objs = { client, sb, handle: new ExecHandle(sb, "ex-test") };
  const wants = new Map<string, string[]>();
  for (const [op, ms] of Object.entries(reachable)) for (const m of ms) wants.set(m, [...(wants.get(m) ?? []), op]);

  const problems: string[] = [];
  const sent = new Map<string, Set<string>>();
  const queries = new Map<string, Set<string>>();
  const got = new Map<string, Set<string>>(); // method -> the operations it called
  const errors = new Map<string, unknown>();
  for (const [key, call] of Object.entries(calls)) {
    const start = log.length;
    errors.set(key, await invoke(call, o));
    for (const r of log.slice(start)) {
      const op = match(r);
      if (!op) { problems.push(`${key} sent ${r.method} ${r.path}, which is no operation of the spec`); continue; }
      const type = r.contentType.split(";")[0].trim();
      if (r.hasBody && !op.types.includes(type)) problems.push(`${key} sent ${op.id} a body of Content-Type "${r.contentType}", not one of the spec's ${op.types.join(", ")}`);
      queries.set(op.id, new Set([...(queries.get(op.id) ?? []), ...r.query.keys()]));
      const m = methodOf(key);
      got.set(m, (got.get(m) ?? new Set()).add(op.id));
      if (r.json !== undefined) {
        const s = sent.get(op.id) ?? new Set();
        for (const f of sentFields(r.json)) s.add(f);
        sent.set(op.id, s);
      }
    }
  }
  for (const [m, want] of wants) {
    if (!Object.keys(calls).some((k) => methodOf(k) === m)) { problems.push(`${m}: no entry in the calls table`); continue; }
    for (const op of want) {
      if (got.get(m)?.has(op)) continue;
      const o = ops.get(op)!;
      problems.push(`${m} does not call ${op} (${o.method} ${o.template}): it called ${[...(got.get(m) ?? [])].join(", ") || "nothing"} (its error: ${errors.get(m)})`);
    }
  }
  for (const k of Object.keys(calls)) if (!wants.has(methodOf(k))) problems.push(`calls table entry ${k} is no method of reachable.ts`);
  for (const op of [...ops.values()].filter((x) => x.fields)) {
    const s = sent.get(op.id) ?? new Set<string>();
    const missing = [...op.fields!].filter((f) => !s.has(f) && !(`${op.id}.${f.split(/[.[]/)[0]}` in leftOut));
    if (missing.length) problems.push(`the SDK never sends ${op.id}'s body fields ${missing.join(", ")} (methods: ${reachable[op.id]})`);
    const unknown = [...s].filter((f) => !op.fields!.has(f) && (parentOf(f) === "" || [...op.fields!].some((x) => x.startsWith(parentOf(f)))));
    if (unknown.length) problems.push(`the SDK sends ${op.id} fields the spec does not have: ${unknown.join(", ")}`);
  }
  for (const k of Object.keys(leftOut)) {
    const [op, f] = k.split(".");
    if (!ops.get(op)?.fields?.has(f) || sent.get(op)?.has(f)) problems.push(`leftOut entry ${k} is sent or no longer in the spec`);
  }
  for (const op of ops.values()) {
    const q = queries.get(op.id) ?? new Set<string>();
    const missing = [...op.query].filter((p) => !q.has(p) && !(`${op.id}.${p}` in leftOutQuery));
    if (missing.length) problems.push(`the SDK never sends ${op.id}'s query parameters ${missing.join(", ")} (methods: ${reachable[op.id]})`);
    const unknown = [...q].filter((p) => !op.query.has(p));
    if (unknown.length) problems.push(`the SDK sends ${op.id} query parameters the spec does not have: ${unknown.join(", ")}`);
  }
  for (const k of Object.keys(leftOutQuery)) {
    const [op, p] = k.split(".");
    if (!ops.get(op)?.query.has(p) || queries.get(op)?.has(p)) problems.push(`leftOutQuery entry ${k} is sent or no longer in the spec`);
  }
  assert.ok(Object.values(leftOut).every(Boolean) && Object.values(leftOutQuery).every(Boolean), "every left-out field needs a reason");
  assert.ok(ops.size > 40 && [...ops.values()].filter((x) => x.fields).length > 10, "the spec's operations were not read");
  assert.deepEqual(problems, [], "requests that do not match hostd/api/openapi.yaml");
});
