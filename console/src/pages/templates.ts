// Templates and snapshots: list, build a template from an image (progress
// streamed) or name a snapshot, with a warm-pool size; delete.
import { call, enc, json, ndjson, Sandbox, Snapshot, Template } from "../api";
import { confirmDanger, fmtAge, fmtBytes, h, replace, toast } from "../dom";
import type { Page } from "../main";

export function templatesPage(): Page {
  const ac = new AbortController();
  const tbody = h("tbody");
  const sbody = h("tbody");
  const snapSel = h("select", { id: "t-snap" });
  async function load() {
    try {
      const [t, s] = await Promise.all([
        json<{ templates: Template[] }>("GET", "/v1/templates", { signal: ac.signal }),
        json<{ snapshots: Snapshot[] }>("GET", "/v1/snapshots", { signal: ac.signal }),
      ]);
      replace(tbody, t.templates.map((x) => h("tr", {}, h("td", {}, x.name), h("td", {}, x.image?.ref ?? "snapshot"), h("td", {}, x.snapshot_id),
        h("td", {}, `${x.pool_ready} / ${x.pool_size}`), h("td", {}, fmtAge(x.created_at)),
        h("td", {}, h("button", { type: "button", class: "small danger", "aria-label": `Delete template ${x.name}`, onclick: () => delTemplate(x.name) }, "Delete")))));
      if (!t.templates.length) tbody.appendChild(h("tr", {}, h("td", { colspan: 6, class: "help" }, "No templates.")));
      replace(sbody, s.snapshots.slice().reverse().map((x) => h("tr", {}, h("td", {}, x.id), h("td", {}, x.kind), h("td", {}, x.sandbox_id),
        h("td", {}, fmtBytes(x.size_bytes)), h("td", {}, fmtAge(x.created_at)), h("td", {}, (x.used_by ?? []).join(", ") || "–"),
        h("td", {}, h("button", { type: "button", class: "small", "aria-label": `New sandbox from ${x.id}`, onclick: () => fromSnap(x.id) }, "New sandbox"),
          h("button", { type: "button", class: "small danger", "aria-label": `Delete snapshot ${x.id}`, onclick: () => delSnap(x.id) }, "Delete")))));
      replace(snapSel, s.snapshots.map((x) => h("option", { value: x.id }, `${x.id} (${x.kind}, ${x.sandbox_id})`)));
    } catch (e) {
      if (!ac.signal.aborted) toast((e as Error).message, "error");
    }
  }
  async function delTemplate(n: string) {
    if (!(await confirmDanger(`Delete template ${n}?`, "The template and its warm pool go (its snapshot stays).", "Delete"))) return;
    try { await call("DELETE", `/v1/templates/${enc(n)}`); load(); } catch (e) { toast((e as Error).message, "error"); }
  }
  async function delSnap(id: string) {
    if (!(await confirmDanger(`Delete snapshot ${id}?`, "Its memory and disk layer are deleted; it cannot be restored.", "Delete"))) return;
    try { await call("DELETE", `/v1/snapshots/${enc(id)}`); load(); } catch (e) { toast((e as Error).message, "error"); }
  }
  async function fromSnap(id: string) {
    try { const s = await json<Sandbox>("POST", "/v1/sandboxes", { body: { snapshot: id } }); location.hash = `#/sandboxes/${enc(s.id)}`; } catch (e) { toast((e as Error).message, "error"); }
  }

  const name = h("input", { id: "t-name", required: true, pattern: "[A-Za-z0-9][A-Za-z0-9._-]{0,62}" });
  const image = h("input", { id: "t-image", placeholder: "registry/repo:tag or an OCI layout path" });
  const pool = h("input", { id: "t-pool", type: "number", min: 0, max: 16, value: "0" });
  const source = h("select", { id: "t-source" }, h("option", { value: "image" }, "an OCI image"), h("option", { value: "snapshot" }, "a snapshot"));
  const progress = h("progress", { id: "t-progress", max: 1, value: 0, "aria-label": "Build progress" });
  const log = h("pre", { class: "output", "aria-live": "polite", "aria-label": "Build log" });
  async function build(ev: Event) {
    ev.preventDefault();
    replace(log);
    const body: Record<string, unknown> = { name: name.value, pool_size: +pool.value || 0 };
    if (source.value === "snapshot") body.snapshot_id = snapSel.value; else body.image = { ref: image.value };
    try {
      const r = await call("POST", "/v1/templates", { body, signal: ac.signal });
      if (r.status === 201) { log.appendChild(document.createTextNode(`template ${name.value} named\n`)); load(); return; }
      await ndjson(r, (e) => {
        if (e.type === "progress") {
          if (e.total) { progress.max = e.total; progress.value = e.current ?? 0; }
          log.appendChild(document.createTextNode(`${e.phase}${e.total ? ` ${e.current}/${e.total}` : ""}\n`));
        } else if (e.type === "done") { log.appendChild(document.createTextNode(`done: ${e.template?.name}\n`)); progress.value = progress.max; }
        else if (e.type === "error") log.appendChild(document.createTextNode(`error: ${e.error?.code}: ${e.error?.message}\n`));
      });
      load();
    } catch (e) {
      log.appendChild(document.createTextNode(`failed: ${(e as Error).message}\n`));
    }
  }
  load();
  const el = h("section", { class: "templates", "aria-labelledby": "tp-title" },
    h("h1", { id: "tp-title" }, "Templates"),
    h("table", { class: "grid" }, h("thead", {}, h("tr", {}, ["Name", "Source", "Snapshot", "Warm pool (ready / size)", "Age", ""].map((c) => h("th", { scope: "col" }, c)))), tbody),
    h("form", { class: "create", onsubmit: build, "aria-label": "Build a template" },
      h("label", { for: "t-name" }, "Name", name),
      h("label", { for: "t-source" }, "From", source),
      h("label", { for: "t-image" }, "Image", image),
      h("label", { for: "t-snap" }, "Snapshot", snapSel),
      h("label", { for: "t-pool" }, "Warm pool size", pool),
      h("button", { type: "submit", class: "primary" }, "Build")),
    h("p", { class: "help" }, "A Dockerfile builds with the CLI: agentbox template build -f Dockerfile NAME (it drives this same API)."),
    progress, log,
    h("h2", {}, "Snapshots"),
    h("table", { class: "grid" }, h("thead", {}, h("tr", {}, ["Snapshot", "Kind", "Taken from", "Size", "Age", "Used by", ""].map((c) => h("th", { scope: "col" }, c)))), sbody));
  return { el, title: "Templates & snapshots", dispose: () => ac.abort() };
}
