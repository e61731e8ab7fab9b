// Directory listings come in pages; the SDK follows their cursor.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Client, Sandbox } from "../src/index.js";

if (!process.env.AGENTBOX_URL) throw new Error("AGENTBOX_URL is not set: these tests need a running hostd (see sdk/sdktest)");

const client = new Client();
let sb: Sandbox;
before(async () => { sb = await client.sandbox({ metadata: { suite: "typescript-pages" } }); });
after(async () => { await sb?.delete({ missingOk: true }); });

test("list follows the listing's cursor", async () => {
  const n = 2500;
  const r = await sb.run(`mkdir /root/pages && cd /root/pages && seq -f f%04g 0 ${n - 1} | xargs touch`);
  assert.equal(r.exitCode, 0, r.stderr);
  const sizes: number[] = [];
  const names: string[] = [];
  for await (const page of sb.files.pages("/root/pages", { limit: 1000 })) {
    sizes.push(page.length);
    names.push(...page.map((e) => e.name));
  }
  assert.deepEqual(sizes, [1000, 1000, 500]);
  assert.deepEqual(names, Array.from({ length: n }, (_, i) => `f${String(i).padStart(4, "0")}`));
  assert.equal((await sb.files.list("/root/pages")).length, n);
});
