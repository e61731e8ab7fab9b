// Small DOM helpers. Every string becomes a text node or an attribute value:
// nothing is ever parsed as HTML, so guest data (file names, output,
// commands) is shown as text whatever it holds.

export type Child = Node | string | number | null | undefined | false;
type Attr = string | number | boolean | null | undefined | ((ev: any) => void);

/** h makes an element with attributes (on* are listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, Attr> = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v as EventListener);
    } else if (k === "class") {
      el.className = String(v);
    } else if (k === "style") {
      throw new Error("no inline styles: use a class (CSP)");
    } else if (v === true) {
      el.setAttribute(k, "");
    } else {
      el.setAttribute(k, String(v));
    }
  }
  append(el, ...children);
  return el;
}

/** append adds children (strings as text nodes). */
export function append(el: Node, ...children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

/** replace empties el and adds children. */
export function replace(el: Node, ...children: (Child | Child[])[]): void {
  while (el.firstChild) el.removeChild(el.firstChild);
  append(el, ...children);
}

const svgNS = "http://www.w3.org/2000/svg";

/** s makes an SVG element. */
export function s(tag: string, attrs: Record<string, string | number> = {}, ...children: (Node | string)[]): SVGElement {
  const el = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  return el as SVGElement;
}

/** A modal <dialog> that resolves with the button pressed (or null). */
export function dialog(title: string, body: Child | Child[], buttons: { label: string; value: string; danger?: boolean }[]): Promise<string | null> {
  return new Promise((resolve) => {
    const d = h("dialog", { "aria-labelledby": "dlg-title", class: "dialog" });
    const form = h("form", { method: "dialog" },
      h("h2", { id: "dlg-title" }, title),
      h("div", { class: "dialog-body" }, body),
      h("div", { class: "dialog-buttons" },
        h("button", { value: "", type: "submit" }, "Cancel"),
        buttons.map((b) => h("button", { value: b.value, type: "submit", class: b.danger ? "danger" : "primary" }, b.label))));
    d.appendChild(form);
    d.addEventListener("close", () => {
      const v = d.returnValue;
      d.remove();
      resolve(v ? v : null);
    });
    document.body.appendChild(d);
    d.showModal();
    (form.querySelector(".dialog-buttons button:last-child") as HTMLButtonElement | null)?.focus();
  });
}

/** confirmDanger asks before an action that loses data. */
export async function confirmDanger(title: string, what: string, action: string): Promise<boolean> {
  return (await dialog(title, h("p", {}, what), [{ label: action, value: "ok", danger: true }])) === "ok";
}

/** prompt asks for one value in a labelled input. */
export async function prompt(title: string, label: string, value: string, type = "text"): Promise<string | null> {
  const input = h("input", { id: "dlg-input", type, value, required: true });
  const r = await dialog(title, h("label", { for: "dlg-input" }, label, input), [{ label: "OK", value: "ok" }]);
  return r === "ok" ? input.value : null;
}

let toastBox: HTMLElement | null = null;

/** toast shows a short status message in a live region. */
export function toast(msg: string, kind: "info" | "error" = "info"): void {
  if (!toastBox) {
    toastBox = h("div", { class: "toasts", role: "status", "aria-live": "polite" });
    document.body.appendChild(toastBox);
  }
  const t = h("div", { class: `toast ${kind}` }, msg);
  toastBox.appendChild(t);
  setTimeout(() => t.remove(), kind === "error" ? 8000 : 4000);
}

export function fmtBytes(n: number | undefined): string {
  if (n === undefined || n === null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${u[i]}`;
}

export function fmtAge(from: string | Date, now = Date.now()): string {
  const t = typeof from === "string" ? Date.parse(from) : from.getTime();
  return fmtDuration(Math.max(0, now - t) / 1000);
}

export function fmtDuration(sec: number): string {
  if (sec < 60) return `${Math.floor(sec)}s`;
  if (sec < 3600) return `${Math.floor(sec / 60)}m`;
  if (sec < 86400) return `${Math.floor(sec / 3600)}h${Math.floor((sec % 3600) / 60)}m`;
  return `${Math.floor(sec / 86400)}d${Math.floor((sec % 86400) / 3600)}h`;
}

/** download saves a blob as a file. */
export function download(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: name, class: "hidden" });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
