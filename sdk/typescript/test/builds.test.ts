// Image builds over the API (with progress) and mounts as create's parameter.
import { test } from "node:test";
import assert from "node:assert/strict";
import { BuildEvent, Client, Mount } from "../src/index.js";

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
