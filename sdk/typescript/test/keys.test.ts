// client.keys and client.projects, with no hostd: each is a thin call of
// its route (issue 38 #2).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { Client } from "../src/index.js";

test("keys and projects call their routes", async () => {
  const seen: string[] = [];
  const key = { id: "key_1", name: "ci", prefix: "abcdefgh", project: "alpha", role: "member", created_at: "2026-01-01T00:00:00Z" };
  const answers: Record<string, [number, unknown]> = {
    "POST /v1/keys": [201, { key, secret: "ab_abcdefgh-rest" }],
    "GET /v1/keys?project=alpha": [200, { keys: [key] }],
    "DELETE /v1/keys/key_1": [204, undefined],
    "POST /v1/keys/rotate": [201, { key: { ...key, id: "key_2", bootstrap: true }, secret: "ab_new" }],
    "POST /v1/projects": [201, { name: "alpha", created_at: "2026-01-01T00:00:00Z" }],
    "GET /v1/projects": [200, { projects: [{ name: "alpha", created_at: "2026-01-01T00:00:00Z" }] }],
  };
  const body = async (r: IncomingMessage) => { let s = ""; for await (const c of r) s += c; return s; };
  const srv = createServer(async (req, res) => {
    const b = await body(req);
    const route = `${req.method} ${req.url}`;
    seen.push(b ? `${route} ${b}` : route);
    const [status, out] = answers[route] ?? [404, { error: { code: "not_found", message: route } }];
    res.writeHead(status, { "Content-Type": "application/json" });
    res.end(out === undefined ? "" : JSON.stringify(out));
  });
  await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
  try {
    const c = new Client({ url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, apiKey: "ab_admin" });
    const made = await c.keys.create({ name: "ci", project: "alpha", expiresInS: 60 });
    assert.equal(made.secret, "ab_abcdefgh-rest");
    assert.equal((await c.keys.list("alpha"))[0].id, "key_1");
    await c.keys.revoke("key_1");
    assert.equal((await c.keys.rotate()).key.bootstrap, true);
    assert.equal((await c.projects.create("alpha")).name, "alpha");
    assert.equal((await c.projects.list()).length, 1);
    assert.deepEqual(seen, [
      `POST /v1/keys {"name":"ci","project":"alpha","expires_in_s":60}`,
      "GET /v1/keys?project=alpha",
      "DELETE /v1/keys/key_1",
      "POST /v1/keys/rotate",
      `POST /v1/projects {"name":"alpha"}`,
      "GET /v1/projects",
    ]);
  } finally {
    srv.close();
  }
});
