// The flight recorder as a timeline: followed live, filtered by type, zoomable
// lane above a list; each item links to its output or request; JSONL export.
import { AuditEvent, b64, call, enc, ndjson, sb } from "../api";
import { download, h, replace } from "../dom";

const types = ["exec", "file", "package", "network", "lifecycle", "api", "recorder"];

function summary(e: AuditEvent): string {
  if (e.exec) {
    const x = e.exec;
    const cmd = (x.argv ?? []).join(" ");
    return x.phase === "end" ? `${cmd} → exit ${x.signal || x.exit_code}${x.duration_ms !== undefined ? ` in ${x.duration_ms} ms` : ""}${x.error ? ` (${x.error})` : ""}` : `${cmd} started`;
  }
  if (e.file) return `${e.file.op} ${e.file.path}${e.file.old_path ? ` (from ${e.file.old_path})` : ""} [${e.file.source}]`;
  if (e.package) return `${e.package.manager} ${e.package.action} ${e.package.name} ${e.package.version}`;
  if (e.network) { const n = e.network; return `${n.kind} ${n.method ?? ""} ${n.host}:${n.port}${n.path ?? ""} ${n.allowed ? "allowed" : "refused"} ${n.status || ""}`; }
  if (e.lifecycle) { const l = e.lifecycle; return `${l.action}${l.state ? " " + l.state : ""}${l.snapshot_id ? " " + l.snapshot_id : ""}${l.reason ? ` (${l.reason})` : ""}`; }
  if (e.api) return `${e.api.method} ${e.api.path} → ${e.api.status} (${e.api.duration_ms} ms)`;
  if (e.recorder) return e.recorder.watch_error ?? `${e.recorder.lost ?? 0} events lost`;
  return e.type;
}

export function timeline(id: string, query: URLSearchParams) {
  let follow: AbortController | null = null;
  const chosen = new Set((query.get("type") ?? "exec,file,package,network,lifecycle,recorder").split(",").filter((t) => types.includes(t)));
  const trace = query.get("trace") ?? "";
  const events: AuditEvent[] = [];
  let zoom = 1;
  const list = h("ol", { class: "timeline", "aria-label": "Events", "aria-live": "polite" });
  const lane = h("div", { class: "lane", role: "img", "aria-label": "Events over time" });
  const laneWrap = h("div", { class: "lane-wrap" }, lane);
  const count = h("span", { class: "help", role: "status" });
  const boxes = types.map((t) => {
    const cb = h("input", { type: "checkbox", id: `t-${t}`, checked: chosen.has(t), onchange: () => { cb.checked ? chosen.add(t) : chosen.delete(t); restart(); } });
    return h("label", { for: `t-${t}`, class: "check" }, cb, t);
  });

  function item(e: AuditEvent): HTMLElement {
    const details = h("div", { class: "details" });
    const li = h("li", { class: `ev ev-${e.type}`, "data-type": e.type },
      h("time", { datetime: e.time }, new Date(e.time).toLocaleTimeString([], { hour12: false })),
      h("span", { class: `badge ${e.type}` }, e.type),
      h("button", { type: "button", class: "link summary", "aria-expanded": "false", onclick: (ev: Event) => {
        const b = ev.currentTarget as HTMLElement;
        const open = b.getAttribute("aria-expanded") !== "true";
        b.setAttribute("aria-expanded", String(open));
        open ? fill(details, e) : replace(details);
      } }, summary(e)),
      e.trace_id ? h("a", { class: "trace", href: `#/sandboxes/${enc(id)}/timeline?trace=${enc(e.trace_id)}&type=${[...types].join(",")}`, title: "Show this trace's events" },
        `traceparent 00-${e.trace_id}-${e.span_id ?? "0000000000000000"}-01`) : null,
      details);
    return li;
  }

  function fill(details: HTMLElement, e: AuditEvent) {
    const dec = (s?: string) => (s ? new TextDecoder().decode(b64(s)) : "");
    const parts: (HTMLElement | null)[] = [];
    if (e.exec) {
      parts.push(h("a", { href: `#/sandboxes/${enc(id)}/sessions?exec=${enc(e.exec.exec_id)}` }, `Read session ${e.exec.exec_id}'s output`));
      if (e.exec.stdout) parts.push(h("pre", { class: "output" }, dec(e.exec.stdout.head), e.exec.stdout.tail ? "\n…\n" + dec(e.exec.stdout.tail) : ""));
      if (e.exec.stderr?.total_bytes) parts.push(h("pre", { class: "output stderr" }, dec(e.exec.stderr.head)));
    }
    if (e.network?.exec_id || e.file?.exec_id) parts.push(h("a", { href: `#/sandboxes/${enc(id)}/sessions?exec=${enc((e.network?.exec_id || e.file?.exec_id)!)}` }, "The command that did it"));
    parts.push(h("pre", { class: "json" }, JSON.stringify(e, null, 2)));
    replace(details, parts);
  }

  let laneQueued = false;
  function drawLane() {
    if (laneQueued) return;
    laneQueued = true;
    requestAnimationFrame(() => {
      laneQueued = false;
      if (!events.length) { replace(lane); return; }
      const t0 = Date.parse(events[0].time);
      const t1 = Math.max(t0 + 1000, Date.parse(events[events.length - 1].time));
      const width = Math.max(laneWrap.clientWidth, 600) * zoom;
      lane.style.width = `${width}px`;
      const x = (t: number) => ((t - t0) / (t1 - t0)) * (width - 12);
      replace(lane, events.map((e) => {
        const m = h("span", { class: `mark ${e.type}`, title: summary(e) });
        const end = Date.parse(e.time);
        const dur = e.exec?.phase === "end" && e.exec.duration_ms ? e.exec.duration_ms : 0;
        m.style.left = `${x(end - dur)}px`;
        m.style.width = `${Math.max(3, x(end) - x(end - dur))}px`;
        return m;
      }));
    });
  }

  function add(e: AuditEvent) {
    if (trace && e.trace_id !== trace) return;
    events.push(e);
    list.appendChild(item(e));
    replace(count, `${events.length} events${follow ? " · following" : ""}`);
    drawLane();
  }

  function params(): string {
    return `type=${[...chosen].join(",")}`;
  }

  function restart() {
    follow?.abort();
    events.length = 0;
    replace(list);
    drawLane();
    if (!chosen.size) { replace(count, "No types chosen"); return; }
    const a = new AbortController();
    follow = a;
    call("GET", `${sb(id)}/events?follow=true&${params()}`, { signal: a.signal, accept: "application/x-ndjson" })
      .then((r) => ndjson(r, add))
      .then(() => { if (follow === a) { follow = null; replace(count, `${events.length} events (the sandbox is gone)`); } })
      .catch((e) => { if (!a.signal.aborted) replace(count, `Cannot follow: ${(e as Error).message}`); });
  }

  async function exportJSONL() {
    const r = await call("GET", `${sb(id)}/events?format=jsonl&${params()}`);
    download(await r.blob(), `${id}-events.jsonl`);
  }

  const el = h("section", { class: "timeline-wrap", "aria-label": "Timeline" },
    h("div", { class: "toolbar" }, h("h2", {}, "What happened"),
      h("fieldset", {}, h("legend", {}, "Types"), boxes),
      h("button", { type: "button", "aria-label": "Zoom in", onclick: () => { zoom = Math.min(64, zoom * 2); drawLane(); } }, "Zoom +"),
      h("button", { type: "button", "aria-label": "Zoom out", onclick: () => { zoom = Math.max(1, zoom / 2); drawLane(); } }, "Zoom −"),
      h("button", { type: "button", onclick: exportJSONL }, "Export JSONL"),
      trace ? h("a", { href: `#/sandboxes/${enc(id)}/timeline` }, `Trace ${trace} · show all`) : null,
      count),
    laneWrap, list);
  restart();
  return { el, dispose() { follow?.abort(); } };
}
