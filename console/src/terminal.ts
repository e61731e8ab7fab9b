// A terminal over the pty WebSocket (execPTY): binary messages both ways,
// JSON control messages for resize; reconnects from the last offset read, so
// a network drop loses no output.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { CanvasAddon } from "@xterm/addon-canvas";
import "@xterm/xterm/css/xterm.css";
import { getKey, json, sb } from "./api";
import { h, replace } from "./dom";

const shell = ["/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"];

export interface TermHandle {
  el: HTMLElement;
  dispose(): void;
}

export function terminal(id: string): TermHandle {
  const status = h("span", { class: "term-status", role: "status", "aria-live": "polite" }, "Starting…");
  const host = h("div", { class: "term", "aria-label": "Terminal" });
  const newBtn = h("button", { type: "button", class: "small" }, "New shell");
  const el = h("section", { class: "term-wrap", "aria-label": "Terminal" },
    h("div", { class: "term-bar" }, status, newBtn,
      h("span", { class: "help" }, "Paste with Ctrl+Shift+V; scroll back with the wheel or Shift+PageUp.")),
    host);
  const term = new Terminal({
    scrollback: 10000, cursorBlink: true, convertEol: false, screenReaderMode: true,
    fontFamily: "ui-monospace, 'DejaVu Sans Mono', monospace", fontSize: 14,
    theme: { background: "#0b1020", foreground: "#e6e9f2" },
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  // The canvas renderer, loaded before open: xterm's DOM renderer would add
  // <style> elements, which the console's CSP refuses.
  term.loadAddon(new CanvasAddon());
  let ws: WebSocket | null = null;
  let execID = sessionStorage.getItem(`agentbox.pty.${id}`) ?? "";
  let offset = 0;
  let exited = false;
  let disposed = false;
  let retry = 0;
  let retryTimer: number | undefined;
  const encoder = new TextEncoder();

  async function start(fresh: boolean) {
    if (fresh || !execID) {
      exited = false;
      offset = 0;
      term.reset();
      replace(status, "Starting a shell…");
      try {
        const r = await json<{ exec_id: string }>("POST", sb(id) + "/exec", {
          body: { cmd: shell, tty: true, background: true, rows: term.rows, cols: term.cols, env: { TERM: "xterm-256color" } },
        });
        execID = r.exec_id;
        sessionStorage.setItem(`agentbox.pty.${id}`, execID);
      } catch (e) {
        replace(status, `Could not start a shell: ${(e as Error).message}`);
        return;
      }
    }
    connect();
  }

  function connect() {
    if (disposed) return;
    const key = getKey() ?? "";
    if (!/^[A-Za-z0-9._~-]+$/.test(key)) {
      replace(status, "This key cannot be sent to a WebSocket (it is not a token).");
      return;
    }
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${proto}//${location.host}${sb(id)}/exec/${encodeURIComponent(execID)}/pty?offset=${offset}`;
    const sock = new WebSocket(url, ["agentbox.pty", "agentbox.bearer." + key]);
    sock.binaryType = "arraybuffer";
    ws = sock;
    sock.onopen = () => {
      retry = 0;
      replace(status, `Connected · session ${execID}`);
      host.dataset.connected = "1";
      sendResize();
    };
    sock.onmessage = (ev) => {
      if (ev.data instanceof ArrayBuffer) {
        offset += ev.data.byteLength;
        term.write(new Uint8Array(ev.data));
        return;
      }
      let m: any;
      try {
        m = JSON.parse(String(ev.data));
      } catch {
        return;
      }
      if (m.type === "exit") {
        exited = true;
        sessionStorage.removeItem(`agentbox.pty.${id}`);
        replace(status, `Shell exited (${m.signal || m.exit_code}).`);
      } else if (m.type === "error") {
        exited = true;
        replace(status, `Session ended: ${m.error?.message ?? m.error?.code ?? "error"}`);
      } else if (m.type === "warning") {
        replace(status, `Warning: ${m.error?.message ?? ""}`);
      }
    };
    sock.onclose = (ev) => {
      if (ws !== sock) return;
      ws = null;
      delete host.dataset.connected;
      if (disposed || exited) return;
      if (ev.code === 1006 && offset === 0 && retry > 3) {
        // Never connected: the session is gone; start another.
        execID = "";
      }
      retry++;
      const wait = Math.min(10_000, 500 * 2 ** Math.min(retry, 5));
      replace(status, `Disconnected; reconnecting in ${Math.round(wait / 1000)}s (from byte ${offset})…`);
      retryTimer = window.setTimeout(() => (execID ? connect() : start(true)), wait);
    };
  }

  function sendResize() {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", rows: term.rows, cols: term.cols }));
  }

  term.onData((d) => {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(d));
  });
  term.onBinary((d) => {
    if (!ws || ws.readyState !== WebSocket.OPEN) return;
    const b = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 0xff;
    ws.send(b);
  });
  term.onResize(sendResize);
  newBtn.addEventListener("click", () => {
    ws?.close();
    ws = null;
    start(true);
  });
  const ro = new ResizeObserver(() => {
    try {
      fit.fit();
    } catch {
      /* not laid out yet */
    }
  });
  // Opened once the element is in the document (xterm measures it).
  requestAnimationFrame(() => {
    if (disposed) return;
    term.open(host);
    fit.fit();
    ro.observe(host);
    term.focus();
    start(false);
  });
  return {
    el,
    dispose() {
      disposed = true;
      clearTimeout(retryTimer);
      ro.disconnect();
      ws?.close();
      term.dispose();
    },
  };
}
