// The TypeScript SDK against a real hostd (sdk/sdktest starts one and sets
// AGENTBOX_URL, AGENTBOX_API_KEY, AGENTBOX_TEMPLATE and AGENTBOX_CLI).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, mkdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { Client, Conflict, ExecFailed, InvalidRequest, NotFound, Sandbox, Unauthorized } from "../src/index.js";

if (!process.env.AGENTBOX_URL) throw new Error("AGENTBOX_URL is not set: these tests need a running hostd (see sdk/sdktest)");

const client = new Client();
let sb: Sandbox;

before(async () => { sb = await client.sandbox({ metadata: { suite: "typescript" } }); });
after(async () => { await sb?.delete({ missingOk: true }); });

describe("sandboxes", () => {
  test("await using deletes the sandbox", async () => {
    let id = "";
    {
      await using s = await client.sandbox();
      id = s.id;
      assert.equal((await s.run("python3 -c 'print(6*7)'")).stdout, "42\n");
    }
    await assert.rejects(client.get(id), (e: any) => e instanceof NotFound && e.code === "sandbox_not_found" && e.status === 404);
  });
  test("withSandbox deletes on error", async () => {
    let id = "";
    await assert.rejects(client.withSandbox({}, async (s) => { id = s.id; throw new Error("boom"); }), /boom/);
    assert.ok(!(await client.list()).some((s) => s.id === id));
  });
  test("health, get, list", async () => {
    assert.equal((await client.health()).status, "ok");
    assert.match(await client.openapi(), /operationId: createSandbox/);
    assert.match(await client.metrics(), /agentbox/);
    assert.deepEqual((await client.get(sb.id)).info.metadata, { suite: "typescript" });
    assert.ok((await client.list()).some((s) => s.id === sb.id));
    assert.equal((await sb.refresh()).state, "running");
  });
  test("errors", async () => {
    await assert.rejects(sb.run(["no-such-binary"]), (e: any) => e instanceof ExecFailed && e.code === "exec_failed");
    await assert.rejects(new Client({ apiKey: "ab_wrong" }).list(), Unauthorized);
    await assert.rejects(sb.files.read("relative"), InvalidRequest);
  });
});

describe("exec", () => {
  test("run", async () => {
    const r = await sb.run("echo out; echo err >&2; exit 3");
    assert.deepEqual([r.stdout, r.stderr, r.exitCode, r.ok], ["out\n", "err\n", 3, false]);
    const r2 = await sb.run(["sh", "-c", 'echo "$A $PWD"; cat'], { cwd: "/tmp", env: { A: "a" }, stdin: "in" });
    assert.equal(r2.stdout, "a /tmp\nin");
    const got: string[] = [];
    await sb.run("echo 1; echo 2", { onStdout: (t) => got.push(t) });
    assert.equal(got.join(""), "1\n2\n");
    const k = await sb.run("sleep 30", { timeout: 1 });
    assert.equal(k.signal, "SIGKILL");
  });
  test("background, attach, kill", async () => {
    const h = await sb.start("for i in 1 2 3; do echo line$i; sleep 0.2; done");
    const parts: Uint8Array[] = [];
    for await (const o of h) parts.push(o.data);
    assert.equal(Buffer.concat(parts).toString(), "line1\nline2\nline3\n");
    assert.equal(h.exitCode, 0);
    assert.equal((await sb.attach(h.execId, { offset: 6 }).wait()).stdout, "line2\nline3\n");
    assert.ok((await sb.execs()).some((s) => s.exec_id === h.execId && !s.running));
    const k = await sb.start("sleep 60");
    await k.kill("SIGTERM");
    assert.equal((await k.wait()).signal, "SIGTERM");
  });
  test("pty", async () => {
    await using p = await sb.pty("sh", { rows: 30, cols: 100 });
    await p.write("stty size; exit 4\n");
    let out = "";
    for await (const b of p) out += Buffer.from(b).toString();
    assert.match(out, /30 100/);
    assert.equal(await p.wait(), 4);
  });
});

describe("files", () => {
  test("read, write, list, stat, move, remove", async () => {
    const f = sb.files;
    await f.write("/root/ts/a/b.txt", "hello");
    assert.equal(await f.read("/root/ts/a/b.txt", { format: "text" }), "hello");
    assert.deepEqual(await f.read("/root/ts/a/b.txt"), new TextEncoder().encode("hello"));
    const big = Buffer.alloc(1 << 20, 7);
    await f.write("/root/ts/big", Readable.from([big.subarray(0, 1000), big.subarray(1000)]), { mode: 0o600 });
    const st = await f.stat("/root/ts/big");
    assert.equal(st.size, 1 << 20);
    assert.equal(st.mode & 0o777, 0o600);
    let n = 0;
    for await (const c of await f.read("/root/ts/big", { format: "stream" })) n += c.length;
    assert.equal(n, 1 << 20);
    assert.deepEqual((await f.list("/root/ts")).map((e) => e.name).sort(), ["a", "big"]);
    assert.ok(await f.exists("/root/ts/a"));
    assert.ok(!(await f.exists("/root/ts/nope")));
    await f.mkdir("/root/ts/d/e");
    await f.move("/root/ts/big", "/root/ts/d/big");
    await assert.rejects(f.remove("/root/ts/d"), (e: any) => e instanceof Conflict && e.code === "directory_not_empty");
    await f.remove("/root/ts/d", { recursive: true });
    await assert.rejects(f.read("/root/ts/d/big"), (e: any) => e instanceof NotFound && e.code === "file_not_found");
  });
  test("uploadDir, downloadDir", async () => {
    const tmp = await mkdtemp(join(tmpdir(), "ab-ts-"));
    try {
      await mkdir(join(tmp, "src/sub"), { recursive: true });
      await writeFile(join(tmp, "src/top.txt"), "top");
      await writeFile(join(tmp, "src/sub/x.bin"), Buffer.alloc(5000));
      const res = await sb.files.uploadDir(join(tmp, "src"), "/root/tsup");
      assert.ok(res.entries >= 3);
      assert.equal((await sb.run("cat /root/tsup/top.txt; wc -c < /root/tsup/sub/x.bin")).stdout, "top5000\n");
      assert.ok((await sb.files.downloadDir("/root/tsup", join(tmp, "dst"))) >= 3);
      assert.equal(await readFile(join(tmp, "dst/top.txt"), "utf8"), "top");
      assert.equal((await stat(join(tmp, "dst/sub/x.bin"))).size, 5000);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });
  test("watch", async () => {
    await sb.run("mkdir -p /root/tsw");
    await using w = await sb.files.watch("/root/tsw");
    // The watch starts a moment after it answers: repeat the write until seen.
    let seen = false, stop = false;
    const touch = (async () => {
      for (let i = 0; i < 60 && !stop; i++) {
        await new Promise((r) => setTimeout(r, 500));
        await sb.run("echo n >> /root/tsw/new.txt");
      }
      w.close(); // never hang
    })();
    for await (const ev of w) if (ev.path === "/root/tsw/new.txt") { seen = ["create", "modify"].includes(ev.type); break; }
    stop = true;
    await touch;
    assert.ok(seen);
  });
});

describe("lifecycle", () => {
  test("snapshot, fork, pause, resume, extend, usage", async () => {
    await sb.files.write("/root/mark", "snap");
    const snap = await sb.snapshot();
    assert.equal((await client.snapshots.get(snap.id)).id, snap.id);
    assert.ok((await client.snapshots.list()).some((s) => s.id === snap.id));
    await client.withSandbox({ snapshot: snap.id }, async (s2) => {
      assert.equal(await s2.files.read("/root/mark", { format: "text" }), "snap");
    });
    const forks = await sb.fork(2);
    try {
      assert.equal(new Set(forks.map((f) => f.id)).size, 2);
      assert.equal((await forks[0].pause()).state, "paused");
      assert.equal((await forks[0].resume()).state, "running");
      assert.equal((await forks[1].run("cat /root/mark")).stdout, "snap");
    } finally {
      for (const f of forks) await f.delete();
    }
    await assert.rejects(client.snapshots.delete(snap.id), Conflict);
    assert.ok((await sb.extend(600)).info.deadline);
    assert.ok((await sb.usage()).cpu_seconds > 0);
  });
  test("ports", async () => {
    assert.match(await sb.url(8000), /\/ports\/8000\/.*token=/);
    assert.equal((await sb.setPublic(8000, true)).public, true);
    assert.doesNotMatch(await sb.url(8000), /token=/);
    await sb.setPublic(8000, false);
    assert.ok((await sb.share(8000, 60)).token);
    assert.match(await sb.url(8000, { share: 60 }), /token=/);
  });
  test("network and events", async () => {
    assert.equal((await sb.network.get()).mode, "proxy");
    assert.deepEqual((await sb.network.update({ allow_domains: ["example.com"] })).allow_domains, ["example.com"]);
    await sb.run("echo recorded");
    const evs = [];
    for await (const e of sb.events({ types: ["exec"] })) evs.push(e);
    assert.ok(evs.some((e: any) => JSON.stringify(e.exec?.argv) === JSON.stringify(["sh", "-c", "echo recorded"])));
    for await (const e of sb.events({ types: ["exec"], follow: true })) { assert.equal(e.type, "exec"); break; }
  });
  test("secrets", async () => {
    assert.equal((await client.secrets.set("sdk-ts", "v")).name, "sdk-ts");
    assert.ok((await client.secrets.list()).some((s) => s.name === "sdk-ts"));
    await client.secrets.delete("sdk-ts");
    await assert.rejects(client.secrets.delete("sdk-ts"), NotFound);
  });
  test("templates", async () => {
    const snap = await sb.snapshot();
    assert.equal((await client.templates.create("sdk-ts-t", snap.id)).snapshot_id, snap.id);
    assert.equal((await client.templates.get("sdk-ts-t")).name, "sdk-ts-t");
    assert.ok((await client.templates.list()).some((t) => t.name === "sdk-ts-t"));
    await client.templates.delete("sdk-ts-t");
    const progress: string[] = [];
    const t = await client.templates.build("sdk-ts-built", { template: process.env.AGENTBOX_TEMPLATE, steps: [{ run: "echo built > /root/built" }] }, { onProgress: (e) => progress.push(e.line ?? "") });
    try {
      assert.ok(progress.length > 0);
      await client.withSandbox({ template: t.name }, async (s) => assert.equal((await s.run("cat /root/built")).stdout, "built\n"));
    } finally {
      await client.templates.delete("sdk-ts-built");
    }
  });
});
