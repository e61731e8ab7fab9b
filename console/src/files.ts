// The file browser: list, open text (lightly highlighted), upload by drag
// and drop or picker, download a directory as a tar, live watch updates.
import { call, enc, json, ndjson, sb, FileInfo } from "./api";
import { confirmDanger, download, fmtBytes, h, replace, toast } from "./dom";
import { highlight } from "./highlight";

export function files(id: string, start = "/root"): { el: HTMLElement; dispose(): void } {
  let dir = start;
  let watch: AbortController | null = null;
  const ac = new AbortController();
  const pathIn = h("input", { id: "f-path", type: "text", value: dir });
  const list = h("ul", { class: "files", "aria-label": "Directory entries", "aria-live": "polite" });
  const viewer = h("div", { class: "viewer", "aria-label": "File contents" });
  const picker = h("input", { id: "f-upload", type: "file", multiple: true });
  const live = h("span", { class: "help", role: "status" });
  const drop = h("div", { class: "drop", "aria-label": "Drop files here to upload" }, list);

  async function load(p: string) {
    dir = p.replace(/\/+$/, "") || "/";
    pathIn.value = dir;
    try {
      const r = await json<{ entries: FileInfo[] }>("GET", `${sb(id)}/files/list?path=${enc(dir)}`, { signal: ac.signal });
      const es = r.entries.sort((a, b) => (a.is_dir === b.is_dir ? a.name.localeCompare(b.name) : a.is_dir ? -1 : 1));
      const up = dir === "/" ? null : h("li", {}, h("button", { type: "button", class: "link", onclick: () => load(dir.replace(/\/[^/]*$/, "") || "/") }, ".."));
      replace(list, up, es.map((f) => h("li", { "data-name": f.name },
        h("button", { type: "button", class: "link", onclick: () => (f.is_dir ? load(f.path) : open(f)) }, f.is_dir ? f.name + "/" : f.name),
        h("span", { class: "meta" }, f.is_dir ? "dir" : fmtBytes(f.size), " · ", f.mode),
        h("button", { type: "button", class: "small danger", "aria-label": `Delete ${f.name}`, onclick: () => del(f) }, "Delete"))));
      if (!es.length) list.appendChild(h("li", { class: "help" }, "(empty)"));
      startWatch();
    } catch (e) {
      replace(list, h("li", { class: "error" }, `Cannot list ${dir}: ${(e as Error).message}`));
    }
  }

  async function open(f: FileInfo) {
    if (f.size > 1 << 20) {
      replace(viewer, h("p", {}, `${f.name} is ${fmtBytes(f.size)}; `, h("button", { type: "button", class: "link", onclick: () => dl(f) }, "download it")));
      return;
    }
    try {
      const text = await (await call("GET", `${sb(id)}/files?path=${enc(f.path)}`, { signal: ac.signal })).text();
      replace(viewer, h("div", { class: "viewer-head" }, h("strong", {}, f.path), h("button", { type: "button", class: "small", onclick: () => dl(f) }, "Download")),
        h("pre", { class: "code", tabindex: "0" }, highlight(text, f.name)));
    } catch (e) {
      toast(`Open failed: ${(e as Error).message}`, "error");
    }
  }

  async function dl(f: FileInfo) {
    const b = await (await call("GET", `${sb(id)}/files?path=${enc(f.path)}`)).blob();
    download(b, f.name);
  }

  async function del(f: FileInfo) {
    if (!(await confirmDanger(`Delete ${f.name}?`, `${f.path} is removed from the sandbox${f.is_dir ? ", with everything in it" : ""}.`, "Delete"))) return;
    try {
      await call("DELETE", `${sb(id)}/files?path=${enc(f.path)}&recursive=${f.is_dir}`);
      load(dir);
    } catch (e) {
      toast(`Delete failed: ${(e as Error).message}`, "error");
    }
  }

  async function upload(fs: FileList | File[]) {
    for (const f of Array.from(fs)) {
      try {
        await call("PUT", `${sb(id)}/files?path=${enc((dir === "/" ? "" : dir) + "/" + f.name)}`, { raw: f, contentType: "application/octet-stream" });
        toast(`Uploaded ${f.name}`);
      } catch (e) {
        toast(`Upload of ${f.name} failed: ${(e as Error).message}`, "error");
      }
    }
    load(dir);
  }

  async function archive() {
    try {
      const b = await (await call("GET", `${sb(id)}/files/archive?path=${enc(dir)}`)).blob();
      download(b, (dir.split("/").pop() || "root") + ".tar");
    } catch (e) {
      toast(`Archive failed: ${(e as Error).message}`, "error");
    }
  }

  let reload: number | undefined;
  function startWatch() {
    watch?.abort();
    const w = new AbortController();
    watch = w;
    call("GET", `${sb(id)}/files/watch?path=${enc(dir)}`, { signal: w.signal })
      .then((r) => { replace(live, "Watching for changes"); return ndjson(r, (ev) => {
        replace(live, `${ev.type}: ${ev.path}`);
        clearTimeout(reload);
        reload = window.setTimeout(() => load(dir), 300);
      }); })
      .catch(() => { if (!w.signal.aborted) replace(live, "Live updates unavailable here"); });
  }

  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer?.files.length) upload(e.dataTransfer.files);
  });
  picker.addEventListener("change", () => picker.files && upload(picker.files));
  const el = h("section", { class: "files-wrap", "aria-label": "Files" },
    h("form", { class: "toolbar", onsubmit: (e: Event) => { e.preventDefault(); load(pathIn.value); } },
      h("label", { for: "f-path" }, "Directory", pathIn),
      h("button", { type: "submit" }, "Go"),
      h("label", { for: "f-upload", class: "button" }, "Upload…", picker),
      h("button", { type: "button", onclick: archive }, "Download as .tar"),
      live),
    h("div", { class: "split" }, drop, viewer));
  load(dir);
  return { el, dispose() { ac.abort(); watch?.abort(); clearTimeout(reload); } };
}
