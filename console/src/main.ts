// hostd's web console: a hash-routed single page over the public API.
import "./style.css";
import { APIError, clearKey, getKey, json, setKey, setOnUnauthorized } from "./api";
import { h, replace } from "./dom";
import { sandboxesPage } from "./pages/sandboxes";
import { sandboxPage } from "./pages/sandbox";
import { branchesPage } from "./pages/branches";
import { templatesPage } from "./pages/templates";

/** A page: its element and what stops its streams and timers. */
export interface Page {
  el: HTMLElement;
  title: string;
  dispose?: () => void;
}

const app = document.getElementById("app")!;
let current: Page | null = null;

function nav(): HTMLElement {
  const route = location.hash || "#/";
  const link = (href: string, label: string, match: (r: string) => boolean) =>
    h("a", { href, "aria-current": match(route) ? "page" : undefined }, label);
  return h("header", { class: "top" },
    h("a", { class: "brand", href: "#/" }, "agentbox"),
    h("nav", { "aria-label": "Main" },
      link("#/", "Sandboxes", (r) => r === "#/" || r.startsWith("#/sandboxes")),
      link("#/branches", "Branches", (r) => r.startsWith("#/branches")),
      link("#/templates", "Templates & snapshots", (r) => r.startsWith("#/templates"))),
    h("button", { class: "logout", type: "button", onclick: () => { clearKey(); render(); } }, "Log out"));
}

function loginPage(message = ""): Page {
  const input = h("input", { id: "key", type: "password", name: "key", autocomplete: "off", required: true, "aria-describedby": "key-help" });
  const err = h("p", { id: "login-error", class: "error", role: "alert" }, message);
  const form = h("form", {
    class: "login", "aria-labelledby": "login-title",
    onsubmit: async (ev: Event) => {
      ev.preventDefault();
      const key = input.value.trim();
      replace(err, "Checking…");
      try {
        await json("GET", "/v1/sandboxes", { key });
        setKey(key);
        render();
      } catch (e) {
        input.value = "";
        replace(err, e instanceof APIError && e.status === 401 ? "That key was refused." : `Could not log in: ${(e as Error).message}`);
        input.focus();
      }
    },
  },
    h("h1", { id: "login-title" }, "agentbox console"),
    h("label", { for: "key" }, "API key"),
    input,
    h("p", { id: "key-help", class: "help" }, "The key is kept in this tab's session storage only, and sent to this hostd's API."),
    h("button", { type: "submit", class: "primary" }, "Log in"),
    err);
  return { el: form, title: "Log in" };
}

function route(): Page {
  const path = (location.hash || "#/").slice(1);
  const [p, q = ""] = path.split("?");
  const parts = p.split("/").filter(Boolean).map(decodeURIComponent);
  const query = new URLSearchParams(q);
  if (parts[0] === "sandboxes" && parts[1]) return sandboxPage(parts[1], parts[2] || "terminal", query);
  if (parts[0] === "branches") return branchesPage(parts[1]);
  if (parts[0] === "templates") return templatesPage();
  return sandboxesPage();
}

let unauthorizedShown = false;

function render(message = ""): void {
  current?.dispose?.();
  current = null;
  if (!getKey()) {
    const page = loginPage(message);
    replace(app, h("main", { id: "main", class: "login-main" }, page.el));
    document.title = "agentbox · " + page.title;
    current = page;
    (document.getElementById("key") as HTMLInputElement).focus();
    return;
  }
  unauthorizedShown = false;
  const page = route();
  current = page;
  replace(app, nav(), h("main", { id: "main", tabindex: "-1" }, page.el));
  document.title = "agentbox · " + page.title;
}

setOnUnauthorized(() => {
  // The key was revoked, or expired: drop it, and every page with it.
  if (unauthorizedShown) return;
  unauthorizedShown = true;
  clearKey();
  render("The key was refused (revoked or expired). Log in again.");
});

window.addEventListener("hashchange", () => render());
render();
