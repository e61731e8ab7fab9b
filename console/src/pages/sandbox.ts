// One sandbox: terminal, files, exec sessions, service URLs, network, usage
// and its timeline, as tabs (each tab its own route).
import { b64, call, enc, ExecSession, json, ndjson, NetworkPolicy, PortAccess, Sandbox, sb, Usage, AuditEvent } from "../api";
import * as act from "../actions";
import { fmtAge, fmtBytes, h, replace, toast } from "../dom";
import type { Page } from "../main";
import { terminal } from "../terminal";
import { files } from "../files";
import { timeline } from "./timeline";
import { usageChart } from "../usage";

const tabs: [string, string][] = [
  ["terminal", "Terminal"], ["files", "Files"], ["sessions", "Sessions"], ["services", "Services"],
  ["network", "Network"], ["usage", "Limits & usage"], ["timeline", "Timeline"],
];

export function sandboxPage(id: string, tab: string, query: URLSearchParams): Page {
  const disposers: (() => void)[] = [];
  const head = h("div", { class: "sb-head" }, h("h1", {}, id));
  const refreshHead = async () => {
    try {
      const s = await json<Sandbox>("GET", sb(id));
      replace(head, h("h1", {}, id), h("span", { class: `state ${s.state}` }, s.state),
        h("span", { class: "meta" }, `${s.vcpus} vCPU · ${s.memory_mib} MiB · up ${fmtAge(s.created_at)}`),
        h("span", { class: "actions" },
          s.state === "running" ? h("button", { type: "button", onclick: () => act.pause(id).then(refreshHead) }, "Pause") : null,
          s.state === "paused" ? h("button", { type: "button", onclick: () => act.resume(id).then(refreshHead) }, "Resume") : null,
          s.state === "running" ? h("button", { type: "button", onclick: () => act.fork(id) }, "Fork") : null,
          s.state === "running" ? h("button", { type: "button", onclick: () => act.snapshot(id) }, "Snapshot") : null,
          h("button", { type: "button", onclick: () => act.extend(id).then(refreshHead) }, "Extend"),
          h("a", { class: "button", href: `#/branches/${enc(id)}` }, "Branches"),
          h("button", { type: "button", class: "danger", onclick: async () => { if (await act.remove(id)) location.hash = "#/"; } }, "Delete")));
    } catch (e) {
      replace(head, h("h1", {}, id), h("p", { class: "error", role: "alert" }, `Cannot load the sandbox: ${(e as Error).message}`));
    }
  };
  refreshHead();
  const tablist = h("nav", { class: "tabs", "aria-label": "Sandbox sections" },
    tabs.map(([t, label]) => h("a", { href: `#/sandboxes/${enc(id)}/${t}`, "aria-current": t === tab ? "page" : undefined }, label)));
  let body: HTMLElement;
  const add = (x: { el: HTMLElement; dispose(): void }) => { disposers.push(() => x.dispose()); return x.el; };
  switch (tab) {
    case "files": body = add(files(id, query.get("path") || "/root")); break;
    case "sessions": body = add(sessions(id, query.get("exec") || "")); break;
    case "services": body = add(services(id)); break;
    case "network": body = add(network(id)); break;
    case "usage": body = add(usagePane(id)); break;
    case "timeline": body = add(timeline(id, query)); break;
    default: body = add(terminal(id));
  }
  const el = h("section", { class: "sandbox", "aria-label": `Sandbox ${id}` }, head, tablist, body);
  return { el, title: `${id} · ${tab}`, dispose: () => disposers.forEach((d) => d()) };
}

function sessions(id: string, focus: string) {
  const ac = new AbortController();
  let attach: AbortController | null = null;
  const table = h("tbody");
  const out = h("pre", { class: "output", tabindex: "0", "aria-label": "Session output", "aria-live": "off" });
  const offsetIn = h("input", { id: "s-offset", type: "number", min: 0, value: "0" });
  const which = h("p", { class: "help" }, "Pick a session to read its output.");
  async function load() {
    try {
      const r = await json<{ sessions: ExecSession[] }>("GET", `${sb(id)}/exec`, { signal: ac.signal });
      replace(table, r.sessions.slice().reverse().map((s) => h("tr", {},
        h("td", {}, s.exec_id), h("td", {}, h("code", {}, s.cmd.join(" "))),
        h("td", {}, s.running ? "running" : `exit ${s.signal || s.exit_code}`), h("td", {}, fmtAge(s.started_at)),
        h("td", {}, h("button", { type: "button", class: "small", "aria-label": `Attach to ${s.exec_id}`, onclick: () => read(s.exec_id) }, "Attach"),
          s.running ? h("button", { type: "button", class: "small", "aria-label": `Interrupt ${s.exec_id}`, onclick: () => signal(s.exec_id) }, "SIGINT") : null))));
    } catch (e) {
      replace(table, h("tr", {}, h("td", { colspan: 5, class: "error" }, (e as Error).message)));
    }
  }
  async function signal(e: string) {
    try { await call("POST", `${sb(id)}/exec/${enc(e)}/signal`, { body: { signal: "SIGINT" } }); load(); } catch (err) { toast((err as Error).message, "error"); }
  }
  async function read(e: string) {
    attach?.abort();
    const a = new AbortController();
    attach = a;
    const off = Math.max(0, +offsetIn.value || 0);
    replace(out);
    replace(which, `Session ${e} from byte ${off}`);
    const dec = new TextDecoder();
    try {
      const r = await call("GET", `${sb(id)}/exec/${enc(e)}?offset=${off}`, { signal: a.signal });
      await ndjson(r, (ev) => {
        if (ev.type === "stdout" || ev.type === "stderr") out.appendChild(document.createTextNode(dec.decode(b64(ev.data), { stream: true })));
        else if (ev.type === "exit") out.appendChild(h("span", { class: "exit" }, `\n[exit ${ev.signal || ev.exit_code}]\n`));
        else if (ev.type === "error") out.appendChild(h("span", { class: "error" }, `\n[${ev.error?.code}] ${ev.error?.message}\n`));
      });
      load();
    } catch (err) {
      if (!a.signal.aborted) out.appendChild(h("span", { class: "error" }, (err as Error).message));
    }
  }
  load();
  if (focus) read(focus);
  const el = h("section", { "aria-label": "Exec sessions" },
    h("div", { class: "toolbar" }, h("h2", {}, "Exec sessions"), h("label", { for: "s-offset" }, "Read from byte", offsetIn),
      h("button", { type: "button", onclick: load }, "Refresh")),
    h("table", { class: "grid" }, h("thead", {}, h("tr", {}, ["Session", "Command", "Status", "Started", ""].map((c) => h("th", { scope: "col" }, c)))), table),
    which, out);
  return { el, dispose() { ac.abort(); attach?.abort(); } };
}

function services(id: string) {
  const port = h("input", { id: "p-port", type: "number", min: 1, max: 65535, value: "8000" });
  const ttl = h("input", { id: "p-ttl", type: "number", min: 60, value: "3600" });
  const out = h("div", { class: "ports", "aria-live": "polite" });
  const withToken = (u: string, t: string) => u + (u.includes("?") ? "&" : "?") + "token=" + enc(t);
  function show(pa: PortAccess) {
    const open = pa.url || pa.path_url;
    replace(out, h("dl", {},
      pa.url ? [h("dt", {}, "Host URL"), h("dd", {}, h("code", {}, pa.url))] : null,
      h("dt", {}, "Path URL"), h("dd", {}, h("code", {}, pa.path_url)),
      h("dt", {}, "Access"), h("dd", {}, pa.public ? "public (no credential needed)" : "private (token, API key or share link)")),
      h("div", { class: "actions" },
        h("a", { class: "button primary", id: "open-service", href: pa.public ? open : withToken(open, pa.token), target: "_blank", rel: "noopener noreferrer" }, `Open port ${pa.port}`),
        h("button", { type: "button", onclick: () => setPublic(pa.port, !pa.public) }, pa.public ? "Make private" : "Make public"),
        h("button", { type: "button", onclick: () => share(pa.port) }, "Create share link")),
      h("div", { id: "share-out" }));
  }
  async function get(e?: Event) {
    e?.preventDefault();
    try { show(await json<PortAccess>("GET", `${sb(id)}/ports/${+port.value}`)); } catch (err) { replace(out, h("p", { class: "error" }, (err as Error).message)); }
  }
  async function setPublic(p: number, pub: boolean) {
    try { show(await json<PortAccess>("PUT", `${sb(id)}/ports/${p}`, { body: { public: pub } })); } catch (err) { toast((err as Error).message, "error"); }
  }
  async function share(p: number) {
    try {
      const l = await json<{ url?: string; path_url: string; expires_at: string }>("POST", `${sb(id)}/ports/${p}/links`, { body: { expires_in_s: +ttl.value || 3600 } });
      const u = l.url || l.path_url;
      replace(out.querySelector("#share-out")!, h("p", {}, "Share link (until ", l.expires_at, "): ",
        h("a", { href: u, target: "_blank", rel: "noopener noreferrer" }, h("code", {}, u)),
        " ", h("button", { type: "button", class: "small", onclick: () => navigator.clipboard?.writeText(u).then(() => toast("Copied")) }, "Copy")));
    } catch (err) { toast((err as Error).message, "error"); }
  }
  const el = h("section", { "aria-label": "Service URLs" },
    h("form", { class: "toolbar", onsubmit: get }, h("h2", {}, "Service URLs"),
      h("label", { for: "p-port" }, "Guest port", port), h("label", { for: "p-ttl" }, "Share link lifetime (s)", ttl),
      h("button", { type: "submit" }, "Show")), out);
  get();
  return { el, dispose() {} };
}

function network(id: string) {
  const ac = new AbortController();
  const pol = h("div");
  const reqs = h("tbody");
  const domains = h("textarea", { id: "n-domains", rows: 4 });
  async function load() {
    try {
      const p = await json<NetworkPolicy>("GET", `${sb(id)}/network`, { signal: ac.signal });
      domains.value = p.allow_domains.join("\n");
      replace(pol, h("dl", {}, h("dt", {}, "Mode"), h("dd", {}, p.mode),
        h("dt", {}, "Allowed CIDRs"), h("dd", {}, p.allow_cidrs.join(", ") || "none"),
        h("dt", {}, "Allowed ports"), h("dd", {}, p.allow_ports.join(", ") || "any"),
        h("dt", {}, "Injection rules"), h("dd", {}, p.inject.map((r) => `${r.host}: ${r.header}`).join(", ") || "none")));
    } catch (e) {
      replace(pol, h("p", { class: "error" }, (e as Error).message));
    }
    try {
      const r = await json<{ events: AuditEvent[] }>("GET", `${sb(id)}/events?type=network&limit=10000`, { signal: ac.signal });
      replace(reqs, r.events.slice(-50).reverse().map((e) => { const n = e.network!; return h("tr", {},
        h("td", {}, new Date(e.time).toLocaleTimeString()), h("td", {}, n.kind), h("td", {}, n.method ?? ""),
        h("td", {}, `${n.host}:${n.port}${n.path ?? ""}`), h("td", {}, n.allowed ? "allowed" : "refused"), h("td", {}, String(n.status || "")),
        h("td", {}, `${fmtBytes(n.bytes_out)} / ${fmtBytes(n.bytes_in)}`)); }));
    } catch { /* no recorder */ }
  }
  async function save(e: Event) {
    e.preventDefault();
    try {
      await json("PATCH", `${sb(id)}/network`, { body: { allow_domains: domains.value.split(/\s+/).filter(Boolean) } });
      toast("Network policy saved");
      load();
    } catch (err) { toast((err as Error).message, "error"); }
  }
  load();
  const el = h("section", { "aria-label": "Network" }, h("h2", {}, "Egress policy"), pol,
    h("form", { onsubmit: save }, h("label", { for: "n-domains" }, "Allowed domains (one a line)"), domains, h("button", { type: "submit" }, "Save")),
    h("h2", {}, "Last requests through the proxy"),
    h("table", { class: "grid" }, h("thead", {}, h("tr", {}, ["Time", "Kind", "Method", "Target", "Verdict", "Status", "Out / in"].map((c) => h("th", { scope: "col" }, c)))), reqs));
  return { el, dispose() { ac.abort(); } };
}

function usagePane(id: string) {
  const ac = new AbortController();
  const limits = h("dl");
  const now = h("dl");
  const chart = usageChart();
  let prev: { t: number; cpu: number } | null = null;
  json<Sandbox>("GET", sb(id), { signal: ac.signal }).then((s) => {
    const l = s.limits;
    replace(limits, l ? Object.entries(l).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]) : h("p", {}, "No limits reported."));
  }).catch(() => {});
  async function tick() {
    try {
      const u = await json<Usage>("GET", `${sb(id)}/usage`, { signal: ac.signal });
      const t = Date.now() / 1000;
      if (prev) chart.push(t, Math.max(0, ((u.cpu_seconds - prev.cpu) / (t - prev.t)) * 100), u.memory_bytes / 1048576);
      prev = { t, cpu: u.cpu_seconds };
      replace(now, h("dt", {}, "CPU"), h("dd", {}, `${u.cpu_seconds.toFixed(2)} s`),
        h("dt", {}, "Memory"), h("dd", {}, `${fmtBytes(u.memory_bytes)} (peak ${fmtBytes(u.memory_peak_bytes)})`),
        h("dt", {}, "Disk"), h("dd", {}, fmtBytes(u.disk_used_bytes)),
        h("dt", {}, "Agent channel in / out"), h("dd", {}, `${fmtBytes(u.bytes_in)} / ${fmtBytes(u.bytes_out)}`));
    } catch { /* paused or gone */ }
  }
  tick();
  const timer = setInterval(tick, 2000);
  const el = h("section", { class: "usage", "aria-label": "Limits and usage" },
    h("div", {}, h("h2", {}, "Usage now"), now, h("h2", {}, "Limits"), limits),
    h("div", {}, h("h2", {}, "Live usage"), chart.el));
  return { el, dispose() { ac.abort(); clearInterval(timer); chart.dispose(); } };
}
