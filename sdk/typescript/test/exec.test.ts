// The exec reader, with no hostd: output that is not UTF-8 comes back
// exact in stdoutBytes, and stdout is its text with U+FFFD (issue 38 #11).
import { test } from "node:test";
import assert from "node:assert/strict";
import { ExecReader } from "../src/stream.js";

const line = (ev: Record<string, unknown>) => JSON.stringify(ev);
const b64 = (b: number[]) => Buffer.from(b).toString("base64");

test("output that is not UTF-8 keeps its bytes", () => {
  const got: string[] = [];
  const r = new ExecReader((t) => got.push(t));
  r.feed(line({ type: "start", exec_id: "e1" }));
  // A byte 0xff, then a euro sign cut across two events.
  r.feed(line({ type: "stdout", data: b64([0x00, 0x62, 0x69, 0x6e, 0xff, 0xe2, 0x82]) }));
  r.feed(line({ type: "stdout", data: b64([0xac]) }));
  r.feed(line({ type: "stderr", data: Buffer.from("w\u00e4rn").toString("base64") }));
  r.feed(line({ type: "exit", exit_code: 0 }));
  const res = r.result();
  assert.deepEqual([...res.stdoutBytes], [0x00, 0x62, 0x69, 0x6e, 0xff, 0xe2, 0x82, 0xac]);
  assert.equal(res.stdout, "\u0000bin\ufffd\u20ac");
  assert.equal(got.join(""), res.stdout);
  assert.equal(res.stderr, "w\u00e4rn");
  assert.deepEqual([...res.stderrBytes], [...Buffer.from("w\u00e4rn")]);
});
