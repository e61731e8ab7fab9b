/** Interactive sessions over hostd's PTY WebSocket (the `ws` package). */
import "./polyfill.js";
import WebSocket from "ws";
import { ConnectionFailed, makeError, APIError } from "./errors.js";
import { streamError } from "./stream.js";

/** An interactive connection to an exec session. Closing it leaves the session running. */
export class Pty implements AsyncIterable<Uint8Array> {
  /** Set once the session exited. */
  exitCode: number | undefined;
  signal = "";
  private queue: (Uint8Array | null)[] = [];
  private waiters: (() => void)[] = [];
  private error: Error | undefined;
  private done: Promise<void>;

  private constructor(private ws: WebSocket, /** The session's id. */ readonly execId: string) {
    let finish!: () => void;
    this.done = new Promise((r) => (finish = r));
    ws.on("message", (data, isBinary) => {
      const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      if (isBinary) return this.push(new Uint8Array(buf));
      let m: any;
      try { m = JSON.parse(buf.toString("utf8")); } catch { return; }
      if (m.type === "exit") { this.exitCode = Number(m.exit_code ?? 0); this.signal = String(m.signal ?? ""); }
      else if (m.type === "error") this.error = streamError(m);
    });
    ws.on("error", (e) => { this.error ??= new ConnectionFailed(`pty: ${e.message}`); });
    ws.on("close", () => {
      if (this.exitCode === undefined) this.error ??= new ConnectionFailed("pty closed before exit");
      this.push(null);
      finish();
    });
  }

  /** Dial session `execId`'s WebSocket, replaying output from `offset`. */
  static connect(base: string, headers: Record<string, string>, sandboxId: string, execId: string, offset = 0): Promise<Pty> {
    const url = `${base.replace(/^http/, "ws")}/v1/sandboxes/${sandboxId}/exec/${execId}/pty?offset=${offset}`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers, maxPayload: 8 << 20 });
      ws.once("open", () => resolve(new Pty(ws, execId)));
      ws.once("unexpected-response", (_req, res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => {
          let err: APIError;
          try { const e = JSON.parse(body).error; err = makeError(e.code, e.message, res.statusCode ?? 0); }
          catch { err = makeError("http_error", body || String(res.statusCode), res.statusCode ?? 0); }
          reject(err);
        });
      });
      ws.once("error", (e) => reject(new ConnectionFailed(`pty ${url}: ${e.message}`)));
    });
  }

  private push(b: Uint8Array | null): void {
    this.queue.push(b);
    this.waiters.splice(0).forEach((w) => w());
  }

  /** The next output bytes; an empty array once the session exited and all was read. */
  async read(): Promise<Uint8Array> {
    while (this.queue.length === 0) await new Promise<void>((r) => this.waiters.push(r));
    const b = this.queue[0];
    if (b === null) {
      if (this.exitCode === undefined && this.error) throw this.error;
      return new Uint8Array();
    }
    this.queue.shift();
    return b;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (;;) {
      const b = await this.read();
      if (b.length === 0) return;
      yield b;
    }
  }

  private send(d: string | Uint8Array): Promise<void> {
    return new Promise((res, rej) => this.ws.send(d, { binary: typeof d !== "string" }, (e) => (e ? rej(e) : res())));
  }

  /** Send keystrokes to stdin (Ctrl-C is "\x03"). */
  write(data: string | Uint8Array): Promise<void> {
    return this.send(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }
  /** Set the terminal's size. */
  resize(rows: number, cols: number): Promise<void> { return this.send(JSON.stringify({ type: "resize", rows, cols })); }
  /** Send a signal to the session's process group. */
  sendSignal(signal: string): Promise<void> { return this.send(JSON.stringify({ type: "signal", signal })); }
  /** Close stdin (^D on a terminal). */
  closeStdin(): Promise<void> { return this.send(JSON.stringify({ type: "eof" })); }

  /** Wait for the exit and return the exit code. */
  async wait(): Promise<number> {
    await this.done;
    if (this.exitCode === undefined) throw this.error ?? new ConnectionFailed("pty closed before exit");
    return this.exitCode;
  }

  /** Close the connection; the session runs on. */
  async close(): Promise<void> {
    if (this.ws.readyState !== WebSocket.CLOSED) this.ws.close(1000);
    await this.done;
  }

  async [Symbol.asyncDispose](): Promise<void> { await this.close(); }
}
