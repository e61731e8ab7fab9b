/** NDJSON streams and exec events. */
import { AgentboxError, makeError, APIError } from "./errors.js";
import type { ExecResult, Output } from "./models.js";

/** The largest NDJSON line accepted (1 MiB of output is 1.4 MiB in base64). */
const MAX_LINE = 4 << 20;

/** Split a response body into lines as they arrive. */
export async function* lines(body: ReadableStream<Uint8Array> | null): AsyncGenerator<string> {
  if (!body) return;
  const dec = new TextDecoder();
  let buf = "";
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (line) yield line;
      }
      if (buf.length > MAX_LINE) throw new AgentboxError("stream line too long");
    }
    buf += dec.decode();
    if (buf.trim()) yield buf.trim();
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/** One NDJSON line as an object. */
export function parseLine(line: string): Record<string, any> {
  let d: unknown;
  try { d = JSON.parse(line); } catch (e) { throw new AgentboxError(`bad stream line: ${e}`); }
  if (!d || typeof d !== "object") throw new AgentboxError("bad stream line: not an object");
  return d as Record<string, any>;
}

/** The error of an `error` line that ended a stream. */
export function streamError(ev: Record<string, any>): APIError {
  const e = ev.error ?? {};
  return makeError(String(e.code ?? "internal"), String(e.message ?? "stream failed"), Number(ev.status ?? 0));
}

/** Folds exec events into output pieces and, at the end, an ExecResult. */
export class ExecReader {
  execId = "";
  exitCode: number | undefined;
  signal = "";
  private out: Record<"stdout" | "stderr", Uint8Array[]> = { stdout: [], stderr: [] };
  private dec = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  constructor(
    private onStdout?: (t: string) => void,
    private onStderr?: (t: string) => void,
    private keep = true,
  ) {}

  get done(): boolean { return this.exitCode !== undefined; }

  /** Take one line; return the output it carries. Throws the stream's error. */
  feed(line: string): Output | undefined {
    const ev = parseLine(line);
    switch (ev.type) {
      case "start": this.execId = String(ev.exec_id ?? ""); return;
      case "stdout": case "stderr": {
        const s = ev.type as "stdout" | "stderr";
        const data = new Uint8Array(Buffer.from(String(ev.data ?? ""), "base64"));
        if (this.keep) this.out[s].push(data);
        const cb = s === "stdout" ? this.onStdout : this.onStderr;
        if (cb) { const t = this.dec[s].decode(data, { stream: true }); if (t) cb(t); }
        return { stream: s, data, offset: Number(ev.offset ?? 0), get text() { return Buffer.from(data).toString("utf8"); } };
      }
      case "exit":
        this.exitCode = Number(ev.exit_code ?? 0);
        this.signal = String(ev.signal ?? "");
        for (const s of ["stdout", "stderr"] as const) {
          const cb = s === "stdout" ? this.onStdout : this.onStderr;
          const t = this.dec[s].decode();
          if (cb && t) cb(t);
        }
        return;
      case "error": throw streamError(ev);
    }
    return;
  }

  /** The collected result; throws if the stream ended before the exit. */
  result(): ExecResult {
    if (this.exitCode === undefined) throw new AgentboxError("exec stream ended before the exit event");
    const o = Buffer.concat(this.out.stdout), e = Buffer.concat(this.out.stderr);
    return {
      stdout: o.toString("utf8"), stderr: e.toString("utf8"), exitCode: this.exitCode, signal: this.signal,
      execId: this.execId, stdoutBytes: new Uint8Array(o), stderrBytes: new Uint8Array(e),
      ok: this.exitCode === 0 && !this.signal,
    };
  }
}
