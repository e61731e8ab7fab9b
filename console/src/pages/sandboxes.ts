// The sandboxes list: live (polled), filtered, virtualized (only the rows in
// view are in the DOM, so a thousand sandboxes scroll smoothly).
import { json, Sandbox, sb, Template, Usage } from "../api";
import * as act from "../actions";
import { fmtAge, fmtBytes, fmtDuration, h, replace, toast } from "../dom";
import type { Page } from "../main";

const rowHeight = 44;
const pollEvery = 2500;

export function sandboxesPage(): Page {
  const ac = new AbortController();
  let all: Sandbox[] = [];
  let shown: Sandbox[] = [];
  let templates: Template[] = [];
  const usage = new Map<string, { u: Usage; at: number }>();
  const search = h("input", { id: "sb-search", type: "search", placeholder: "id, label, state…", "aria-controls": "sb-list" });
  const stateSel = h("select", { id: "sb-state", "aria-controls": "sb-list" },
    ["all", "running", "paused", "creating", "failed"].map((s) => h("option", { value: s }, s)));
  const count = h("p", { class: "count", role: "status", "aria-live": "polite" });
  const spacer = h("div", { class: "vspacer" });
  const rows = h("div", { class: "vrows", role: "rowgroup" });
  const viewport = h("div", { id: "sb-list", class: "vlist", role: "table", "aria-label": "Sandboxes", "aria-rowcount": 0, tabindex: "0" },
    h("div", { class: "vrow vhead", role: "row", "aria-rowindex": 1 },
      ["State", "Sandbox", "Template", "Age", "CPU", "Memory", "Disk", "I/O in/out", "TTL · idle", "Labels", "Actions"].map((c, i) =>
        h("span", { role: "columnheader", class: `c${i}` }, c))),
    spacer, rows);
  let renderQueued = false;

  const templateOf = (s: Sandbox) => templates.find((t) => t.snapshot_id === s.snapshot_id)?.name ?? (s.snapshot_id ? s.snapshot_id.slice(0, 12) : "base");

  function filter() {
    const q = search.value.trim().toLowerCase();
    const st = stateSel.value;
    shown = all.filter((s) => {
      if (st !== "all" && s.state !== st) return false;
      if (!q) return true;
      const hay = [s.id, s.state, templateOf(s), ...Object.entries(s.metadata ?? {}).map(([k, v]) => `${k}=${v}`)].join(" ").toLowerCase();
      return hay.includes(q);
    });
    viewport.setAttribute("aria-rowcount", String(shown.length + 1));
    spacer.style.height = `${shown.length * rowHeight}px`;
    replace(count, `${shown.length} of ${all.length} sandboxes`);
    queueRender();
  }

  function queueRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      renderRows();
    });
  }

  function ttl(s: Sandbox): string {
    const parts: string[] = [];
    if (s.deadline) parts.push(fmtDuration(Math.max(0, (Date.parse(s.deadline) - Date.now()) / 1000)));
    else parts.push("∞");
    if (s.limits?.idle_timeout_s) parts.push(`idle ${fmtDuration(s.limits.idle_timeout_s)}`);
    return parts.join(" · ");
  }

  function actions(s: Sandbox): HTMLElement {
    const refreshAfter = (p: Promise<unknown>) => p.then(() => refresh());
    const b = (label: string, f: () => void, extra: Record<string, string> = {}) =>
      h("button", { type: "button", class: "small", "aria-label": `${label} ${s.id}`, onclick: f, ...extra }, label);
    const running = s.state === "running";
    return h("span", { class: "actions" },
      running ? b("Pause", () => refreshAfter(act.pause(s.id))) : s.state === "paused" ? b("Resume", () => refreshAfter(act.resume(s.id))) : null,
      running ? b("Fork", () => refreshAfter(act.fork(s.id))) : null,
      running ? b("Snapshot", () => refreshAfter(act.snapshot(s.id))) : null,
      b("Extend", () => refreshAfter(act.extend(s.id))),
      b("Delete", () => refreshAfter(act.remove(s.id)), { class: "small danger" }));
  }

  function row(s: Sandbox, i: number): HTMLElement {
    const u = usage.get(s.id)?.u;
    const labels = Object.entries(s.metadata ?? {}).map(([k, v]) => h("span", { class: "chip" }, `${k}=${v}`));
    const r = h("div", { class: "vrow", role: "row", "aria-rowindex": i + 2, "data-id": s.id },
      h("span", { role: "cell", class: "c0" }, h("span", { class: `state ${s.state}` }, s.state)),
      h("span", { role: "cell", class: "c1" }, h("a", { href: `#/sandboxes/${encodeURIComponent(s.id)}` }, s.id)),
      h("span", { role: "cell", class: "c2" }, templateOf(s)),
      h("span", { role: "cell", class: "c3" }, fmtAge(s.created_at)),
      h("span", { role: "cell", class: "c4" }, u ? `${s.vcpus} · ${u.cpu_seconds.toFixed(1)}s` : String(s.vcpus)),
      h("span", { role: "cell", class: "c5" }, u ? `${fmtBytes(u.memory_bytes)} / ${s.memory_mib} MiB` : `${s.memory_mib} MiB`),
      h("span", { role: "cell", class: "c6" }, u ? fmtBytes(u.disk_used_bytes) : "–"),
      h("span", { role: "cell", class: "c7" }, u ? `${fmtBytes(u.bytes_in)} / ${fmtBytes(u.bytes_out)}` : "–"),
      h("span", { role: "cell", class: "c8" }, ttl(s)),
      h("span", { role: "cell", class: "c9" }, labels),
      h("span", { role: "cell", class: "c10" }, actions(s)));
    r.style.top = `${i * rowHeight}px`;
    return r;
  }

  function renderRows() {
    const head = rowHeight; // the sticky header row
    const top = Math.max(0, viewport.scrollTop - head);
    const first = Math.max(0, Math.floor(top / rowHeight) - 5);
    const last = Math.min(shown.length, Math.ceil((top + viewport.clientHeight) / rowHeight) + 5);
    const keep = document.activeElement && rows.contains(document.activeElement) ? (document.activeElement.closest(".vrow") as HTMLElement | null)?.dataset.id : undefined;
    const frag: HTMLElement[] = [];
    for (let i = first; i < last; i++) frag.push(row(shown[i], i));
    replace(rows, frag);
    if (keep) (rows.querySelector(`.vrow[data-id="${CSS.escape(keep)}"] a`) as HTMLElement | null)?.focus();
    fetchUsage(shown.slice(first, last));
  }

  let usageBusy = false;
  async function fetchUsage(visible: Sandbox[]) {
    if (usageBusy) return;
    usageBusy = true;
    try {
      const now = Date.now();
      const due = visible.filter((s) => s.state === "running" && now - (usage.get(s.id)?.at ?? 0) > 10_000).slice(0, 12);
      await Promise.all(due.map(async (s) => {
        try {
          usage.set(s.id, { u: await json<Usage>("GET", sb(s.id) + "/usage", { signal: ac.signal }), at: Date.now() });
        } catch {
          usage.set(s.id, { u: undefined as unknown as Usage, at: Date.now() });
        }
      }));
      if (due.length) queueRender();
    } finally {
      usageBusy = false;
    }
  }

  async function refresh() {
    try {
      const r = await json<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes", { signal: ac.signal });
      all = r.sandboxes.filter((s) => s.state !== "deleted").reverse(); // newest first
      filter();
      list.classList.add("loaded");
    } catch (e) {
      if (!ac.signal.aborted) replace(count, `Could not list sandboxes: ${(e as Error).message}`);
    }
  }

  const create = createForm(() => templates, refresh, ac.signal);
  viewport.addEventListener("scroll", queueRender, { passive: true });
  search.addEventListener("input", filter);
  stateSel.addEventListener("change", filter);
  const list = h("section", { class: "sandboxes", "aria-labelledby": "sb-title" },
    h("div", { class: "toolbar" },
      h("h1", { id: "sb-title" }, "Sandboxes"),
      h("label", { for: "sb-search" }, "Search", search),
      h("label", { for: "sb-state" }, "State", stateSel),
      count),
    create, viewport);
  json<{ templates: Template[] }>("GET", "/v1/templates", { signal: ac.signal }).then((r) => {
    templates = r.templates;
    create.dispatchEvent(new Event("templates"));
    filter();
  }).catch(() => {});
  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, pollEvery);
  const onResize = () => queueRender();
  window.addEventListener("resize", onResize);
  return { el: list, title: "Sandboxes", dispose: () => { ac.abort(); clearInterval(timer); window.removeEventListener("resize", onResize); } };
}

function createForm(templates: () => Template[], done: () => void, signal: AbortSignal): HTMLElement {
  const tpl = h("select", { id: "c-template", name: "template" });
  const fill = () => replace(tpl, h("option", { value: "" }, "base image"), templates().map((t) => h("option", { value: t.name }, t.name)));
  fill();
  const vcpus = h("input", { id: "c-vcpus", type: "number", min: 0, max: 256, value: "0" });
  const mem = h("input", { id: "c-mem", type: "number", min: 0, max: 1048576, step: 128, value: "0" });
  const ttl = h("input", { id: "c-ttl", type: "number", min: 0, max: 31622400, value: "3600" });
  const labels = h("input", { id: "c-labels", type: "text", placeholder: "team=a, task=42" });
  const btn = h("button", { type: "submit", class: "primary" }, "Create sandbox");
  const form = h("form", {
    class: "create", "aria-label": "Create a sandbox",
    onsubmit: async (ev: Event) => {
      ev.preventDefault();
      const metadata: Record<string, string> = {};
      for (const p of labels.value.split(",")) {
        const [k, ...v] = p.split("=");
        if (k.trim()) metadata[k.trim()] = v.join("=").trim();
      }
      btn.disabled = true;
      replace(btn, "Creating…");
      try {
        const s = await json<Sandbox>("POST", "/v1/sandboxes", {
          signal,
          body: { template: tpl.value || undefined, vcpus: +vcpus.value || 0, memory_mib: +mem.value || 0, timeout_s: +ttl.value || 0, metadata },
        });
        toast(`Created ${s.id}`);
        done();
      } catch (e) {
        toast(`Create failed: ${(e as Error).message}`, "error");
      } finally {
        btn.disabled = false;
        replace(btn, "Create sandbox");
      }
    },
  },
    h("label", { for: "c-template" }, "Template", tpl),
    h("label", { for: "c-vcpus" }, "vCPUs (0 = default)", vcpus),
    h("label", { for: "c-mem" }, "Memory MiB (0 = default)", mem),
    h("label", { for: "c-ttl" }, "Time out (s, 0 = none)", ttl),
    h("label", { for: "c-labels" }, "Labels", labels),
    btn);
  form.addEventListener("templates", fill);
  return form;
}
