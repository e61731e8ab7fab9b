// Image, Dockerfile and blueprint builds over the API (with progress), and mounts as create's parameter.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BuildEvent, Client, InvalidRequest, Mount } from "../src/index.js";

if (!process.env.AGENTBOX_URL) throw new Error("AGENTBOX_URL is not set: these tests need a running hostd (see sdk/sdktest)");
const client = new Client();

test("buildImage builds in hostd with progress", { skip: !process.env.AGENTBOX_TEST_IMAGE }, async () => {
  const image = process.env.AGENTBOX_TEST_IMAGE!;
  const events: BuildEvent[] = [];
  const t = await client.templates.buildImage("ts-busybox", image, { onProgress: (e) => events.push(e) });
  try {
    assert.equal(t.name, "ts-busybox");
    assert.ok(events.length > 0 && events.every((e) => e.type === "progress"));
    assert.ok(events.some((e) => e.phase === "snapshot"));
    await using sb = await client.sandbox({ template: "ts-busybox" });
    assert.equal((await sb.run("echo hi from busybox")).stdout, "hi from busybox\n");
  } finally {
    await client.templates.delete("ts-busybox");
  }
});

test("create takes mounts", { skip: !process.env.AGENTBOX_TEST_MOUNT_DIR }, async () => {
  const m: Mount = { type: "host", source: process.env.AGENTBOX_TEST_MOUNT_DIR!, path: "/mnt/shared", read_only: true };
  await using sb = await client.sandbox({ mounts: [m] });
  assert.equal(await sb.files.read("/mnt/shared/hello.txt", { format: "text" }), "from the host\n");
  assert.notEqual((await sb.run("touch /mnt/shared/x")).exitCode, 0);
});

test("build builds a Dockerfile and its context in hostd, cached the second time", async () => {
  const ctx = mkdtempSync(join(tmpdir(), "ts-df-"));
  try {
    mkdirSync(join(ctx, "app"));
    writeFileSync(join(ctx, "app", "hello.txt"), "hello from the context\n");
    writeFileSync(join(ctx, "Dockerfile"), `FROM template:${process.env.AGENTBOX_TEMPLATE}\nARG WHO=nobody\nCOPY app/ /opt/app/\nRUN echo built by $WHO > /opt/app/who\n`);
    const events: BuildEvent[] = [];
    const opts = { dockerfile: join(ctx, "Dockerfile"), buildArgs: { WHO: "ts" }, onProgress: (e: BuildEvent) => events.push(e) };
    const t = await client.templates.build("ts-df", undefined, opts);
    try {
      assert.equal(t.name, "ts-df");
      assert.ok(events.some((e) => e.type === "log" && /^\[1\/2\] (CACHED )?COPY app\//.test(e.line ?? "")), JSON.stringify(events));
      await client.withSandbox({ template: "ts-df" }, async (s) =>
        assert.equal((await s.run("cat /opt/app/hello.txt /opt/app/who")).stdout, "hello from the context\nbuilt by ts\n"));
      events.length = 0;
      await client.templates.build("ts-df", undefined, opts);
      assert.equal(events.filter((e) => e.line?.includes("CACHED")).length, 2);
    } finally {
      await client.templates.delete("ts-df");
    }
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
});

test("build refuses a bad Dockerfile with InvalidRequest", async () => {
  await assert.rejects(client.templates.build("ts-bad", undefined, { dockerfile: "FROM scratch\nRUN true\n" }), InvalidRequest);
});
