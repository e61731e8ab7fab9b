// Branches: the lineage of sandboxes and snapshots drawn as a tree (SVG).
// Edges come from what the API gives: a snapshot's sandbox_id (taken from)
// and parent_id, and a sandbox's snapshot_id (started from). Two nodes
// picked are shown side by side with their last commands.
import { AuditEvent, enc, json, Sandbox, sb, Snapshot } from "../api";
import { h, replace, s as svg } from "../dom";
import type { Page } from "../main";

interface Node { id: string; kind: "sandbox" | "snapshot"; label: string; state: string; children: Node[]; sb?: Sandbox; snap?: Snapshot; exit?: string }

export function branchesPage(focus?: string): Page {
  const ac = new AbortController();
  const graph = h("div", { class: "graph" }, h("p", {}, "Loading…"));
  const compare = h("div", { class: "compare", "aria-live": "polite" });
  const picked: Node[] = [];

  async function load() {
    const [sbs, snaps] = await Promise.all([
      json<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes", { signal: ac.signal }),
      json<{ snapshots: Snapshot[] }>("GET", "/v1/snapshots", { signal: ac.signal }),
    ]);
    const nodes = new Map<string, Node>();
    for (const x of sbs.sandboxes) nodes.set(x.id, { id: x.id, kind: "sandbox", label: x.id, state: x.state, children: [], sb: x });
    for (const x of snaps.snapshots) nodes.set(x.id, { id: x.id, kind: "snapshot", label: `${x.kind} ${x.id}`, state: x.kind, children: [], snap: x });
    const parent = new Map<string, string>();
    for (const x of snaps.snapshots) {
      if (x.parent_id && nodes.has(x.parent_id) && x.sandbox_id !== x.parent_id) parent.set(x.id, x.sandbox_id && nodes.has(x.sandbox_id) ? x.sandbox_id : x.parent_id);
      else if (x.sandbox_id && nodes.has(x.sandbox_id)) parent.set(x.id, x.sandbox_id);
    }
    for (const x of sbs.sandboxes) if (x.snapshot_id && nodes.has(x.snapshot_id) && snaps.snapshots.find((y) => y.id === x.snapshot_id)?.sandbox_id !== x.id) parent.set(x.id, x.snapshot_id);
    // A fork's or a restore's origin is in its own flight recorder (its
    // first lifecycle fork or restore event): read it for those still
    // without a parent (a bounded number of them).
    const orphans = sbs.sandboxes.filter((x) => !parent.has(x.id)).slice(-60);
    await Promise.all(orphans.map(async (x) => {
      try {
        const r = await json<{ events: AuditEvent[] }>("GET", `${sb(x.id)}/events?type=lifecycle&limit=20`, { signal: ac.signal });
        const l = r.events.map((e) => e.lifecycle).find((l) => l && (l.action === "fork" || l.action === "restore"));
        if (l?.snapshot_id && nodes.has(l.snapshot_id)) parent.set(x.id, l.snapshot_id);
        else if (l?.source_id && nodes.has(l.source_id) && l.source_id !== x.id) parent.set(x.id, l.source_id);
      } catch { /* no recorder */ }
    }));
    for (const [c, p] of parent) nodes.get(p)!.children.push(nodes.get(c)!);
    let roots = [...nodes.values()].filter((n) => !parent.has(n.id));
    if (focus && nodes.has(focus)) {
      let r = focus;
      while (parent.has(r)) r = parent.get(r)!;
      roots = [nodes.get(r)!];
    }
    // Prune lone sandboxes from the whole-host view when there are many.
    if (!focus && roots.length > 40) roots = roots.filter((n) => n.children.length);
    await lastExits([...nodes.values()].filter((n) => n.kind === "sandbox" && n.state === "running").slice(0, 20));
    draw(roots);
  }

  async function lastExits(ns: Node[]) {
    await Promise.all(ns.map(async (n) => {
      try {
        const r = await json<{ events: AuditEvent[] }>("GET", `${sb(n.id)}/events?type=exec&limit=10000`, { signal: ac.signal });
        const end = r.events.filter((e) => e.exec?.phase === "end").pop();
        if (end) n.exit = `last: ${(end.exec!.argv ?? []).join(" ").slice(0, 24)} → ${end.exec!.signal || end.exec!.exit_code}`;
      } catch { /* ignore */ }
    }));
  }

  function draw(roots: Node[]) {
    const W = 230, H = 64;
    let row = 0;
    const placed: { n: Node; x: number; y: number }[] = [];
    const edges: [number, number, number, number][] = [];
    const seen = new Set<string>();
    const walk = (n: Node, depth: number): number => {
      seen.add(n.id);
      const live = n.children.filter((c) => !seen.has(c.id)); // no cycles
      live.forEach((c) => seen.add(c.id));
      const kids = live.map((c) => walk(c, depth + 1));
      const y = kids.length ? (kids[0] + kids[kids.length - 1]) / 2 : row++ * H;
      const x = depth * W;
      placed.push({ n, x, y });
      live.forEach((_, i) => edges.push([x + 190, y + 24, (depth + 1) * W, kids[i] + 24]));
      return y;
    };
    roots.forEach((r) => walk(r, 0));
    if (!placed.length) { replace(graph, h("p", {}, "No sandboxes or snapshots yet.")); return; }
    const width = Math.max(...placed.map((p) => p.x)) + W, height = row * H + 8;
    const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "tree", "aria-label": "Lineage of sandboxes and snapshots" });
    for (const [x1, y1, x2, y2] of edges) root.appendChild(svg("path", { d: `M${x1},${y1} C${x1 + 20},${y1} ${x2 - 20},${y2} ${x2},${y2}`, class: "edge" }));
    for (const p of placed) {
      const g = svg("g", { transform: `translate(${p.x},${p.y})`, tabindex: 0, role: "treeitem", class: `node ${p.n.kind} ${p.n.state}`, "data-id": p.n.id,
        "aria-label": `${p.n.kind} ${p.n.id}, ${p.n.state}${p.n.exit ? ", " + p.n.exit : ""}` },
        svg("rect", { width: 190, height: 48, rx: 8 }),
        svg("text", { x: 10, y: 19, class: "t1" }, p.n.kind === "sandbox" ? p.n.id : p.n.label.slice(0, 26)),
        svg("text", { x: 10, y: 37, class: "t2" }, p.n.exit ?? p.n.state));
      const choose = () => pick(p.n, g);
      g.addEventListener("click", choose);
      g.addEventListener("dblclick", () => { if (p.n.kind === "sandbox") location.hash = `#/sandboxes/${enc(p.n.id)}`; });
      g.addEventListener("keydown", (ev) => {
        const k = (ev as KeyboardEvent).key;
        if (k === "Enter" || k === " ") { ev.preventDefault(); choose(); }
      });
      root.appendChild(g);
    }
    replace(graph, root);
  }

  function pick(n: Node, g: SVGElement) {
    const i = picked.indexOf(n);
    if (i >= 0) picked.splice(i, 1); else { picked.push(n); if (picked.length > 2) picked.shift(); }
    graph.querySelectorAll(".node").forEach((x) => x.classList.toggle("picked", picked.some((p) => p.id === x.getAttribute("data-id"))));
    void g;
    replace(compare, picked.map((p) => panel(p)));
  }

  function panel(n: Node): HTMLElement {
    const cmds = h("ol", { class: "cmds" });
    const el = h("div", { class: "panel" }, h("h3", {}, `${n.kind} ${n.id}`),
      h("p", {}, n.state, n.snap ? ` · from ${n.snap.sandbox_id}` : "", n.sb?.snapshot_id ? ` · started from ${n.sb.snapshot_id}` : ""),
      n.kind === "sandbox" ? h("a", { href: `#/sandboxes/${enc(n.id)}` }, "Open") : null,
      n.kind === "sandbox" ? [h("h4", {}, "Last commands"), cmds] : null);
    if (n.kind === "sandbox") json<{ events: AuditEvent[] }>("GET", `${sb(n.id)}/events?type=exec&limit=10000`).then((r) => {
      replace(cmds, r.events.filter((e) => e.exec?.phase === "end").slice(-10).map((e) => h("li", {}, h("code", {}, (e.exec!.argv ?? []).join(" ")), ` → ${e.exec!.signal || e.exec!.exit_code}`)));
    }).catch(() => {});
    return el;
  }

  load().catch((e) => { if (!ac.signal.aborted) replace(graph, h("p", { class: "error" }, (e as Error).message)); });
  const el = h("section", { class: "branches", "aria-labelledby": "br-title" },
    h("div", { class: "toolbar" }, h("h1", { id: "br-title" }, focus ? `Branches of ${focus}` : "Branches"),
      focus ? h("a", { href: "#/branches" }, "All") : null,
      h("p", { class: "help" }, "Select two nodes (click, or Enter) to compare them side by side; double-click a sandbox to open it.")),
    graph, compare);
  return { el, title: "Branches", dispose: () => ac.abort() };
}
