// The console's browser test: playwright-core driving Debian's chromium
// against a real hostd (hostd/console's VM test starts it and runs this).
// Env: CONSOLE_URL (hostd's http://127.0.0.1:PORT), CONSOLE_KEY, ARTIFACTS
// (a directory for screenshots), SCENARIO ("vm" or "list1000"),
// CHROMIUM (default /usr/bin/chromium). Exits non-zero on any failure, a
// dialog, an uncaught page error or a CSP violation.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const base = process.env.CONSOLE_URL;
const key = process.env.CONSOLE_KEY;
const out = process.env.ARTIFACTS;
const scenario = process.env.SCENARIO || "vm";
if (!base || !key || !out) throw new Error("CONSOLE_URL, CONSOLE_KEY and ARTIFACTS are required");
if (!/^http:\/\/(127\.0\.0\.1|localhost):\d+$/.test(base)) throw new Error(`refusing a non-loopback URL: ${base}`);

const problems = [];
const log = (...a) => console.log(new Date().toISOString().slice(11, 23), ...a);
const T = 120_000;

async function api(method, path, body) {
  const r = await fetch(base + path, {
    method, headers: { Authorization: `Bearer ${key}`, ...(body !== undefined ? { "Content-Type": "application/json" } : {}) },
    body: body === undefined ? undefined : typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.status === 204 ? undefined : r.headers.get("content-type")?.includes("json") ? r.json() : r.text();
}
const sh = (id, cmd, extra = {}) => api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["sh", "-c", cmd], ...extra });

const profile = mkdtempSync(join(tmpdir(), "console-chromium-"));
// A fresh profile (--user-data-dir) per run.
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true, viewport: { width: 1280, height: 800 },
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});

function watch(page) {
  page.on("dialog", (d) => { problems.push(`a dialog opened: ${d.type()} ${d.message()}`); d.dismiss().catch(() => {}); });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error" && /Content Security Policy|Refused to/.test(m.text())) problems.push(`CSP: ${m.text()}`); });
  return page;
}
const shot = async (page, name) => { await page.screenshot({ path: join(out, `${name}.png`) }); log("screenshot", name); };
const noImages = async (page, where) => {
  const n = await page.evaluate(() => document.querySelectorAll("img, script:not([src]), [onerror]").length);
  if (n) problems.push(`${where}: ${n} element(s) made from guest data (img, inline script or onerror)`);
};

async function vm() {
  const page = watch(context.pages()[0] ?? (await context.newPage()));
  // Data exists before anyone logs in: a sandbox made through the API.
  const pre = await api("POST", "/v1/sandboxes", { metadata: { made: "api" } });
  log("sandbox made through the API", pre.id);

  // Missing and wrong keys: refused, nothing shown.
  await page.goto(base + "/console/");
  await page.getByLabel("API key").waitFor();
  await page.getByRole("button", { name: "Log in" }).click();
  if (await page.locator("#sb-list").count()) problems.push("the list showed without a key");
  await page.getByLabel("API key").fill("ab_wrong-key");
  await page.getByRole("button", { name: "Log in" }).click();
  await page.getByText("That key was refused.").waitFor();
  const text = await page.locator("body").innerText();
  if (text.includes(pre.id) || (await page.locator("#sb-list").count())) problems.push("data shown with a wrong key");
  if (await page.evaluate(() => sessionStorage.length)) problems.push("a wrong key was stored");
  await shot(page, "login-refused");

  // Log in, create a sandbox from the form.
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Log in" }).click();
  await page.locator(`.vrow[data-id="${pre.id}"]`).waitFor({ timeout: T });
  const before = new Set(await page.locator(".vrows .vrow").evaluateAll((rs) => rs.map((r) => r.dataset.id)));
  await page.getByLabel("Labels").fill("made=console");
  await page.getByRole("button", { name: "Create sandbox" }).click();
  await page.waitForFunction((b) => [...document.querySelectorAll(".vrows .vrow")].some((r) => !b.includes(r.dataset.id) && r.textContent.includes("running")), [...before], { timeout: T });
  const id = await page.locator(".vrows .vrow").evaluateAll((rs, b) => rs.map((r) => r.dataset.id).find((x) => !b.includes(x)), [...before]);
  log("created from the console", id);
  await shot(page, "sandboxes");

  // The terminal: echo hi, then hostile output shown as text.
  await page.goto(`${base}/console/#/sandboxes/${id}/terminal`);
  await page.locator(".term[data-connected]").waitFor({ timeout: T });
  await page.locator(".term").click();
  await page.keyboard.type("echo hi\r");
  const termHas = (s) => page.waitForFunction((s) => [...document.querySelectorAll(".xterm-accessibility-tree > div")].some((d) => d.textContent.trim() === s), s, { timeout: T });
  await termHas("hi");
  log("terminal printed hi");
  await page.keyboard.type("printf '\\033[1;31m<b>bold</b><img src=x onerror=alert(1)>\\033[0m\\n'\r");
  await termHas("<b>bold</b><img src=x onerror=alert(1)>");
  await noImages(page, "terminal");
  await shot(page, "terminal");

  // Files: a hostile name, an upload by drag and drop, a live watch update.
  const hostile = "<img src=x onerror=alert(1)>";
  await api("PUT", `/v1/sandboxes/${id}/files?path=${encodeURIComponent("/root/" + hostile)}`, "x");
  await sh(id, "printf 'echo \"hello\" # a comment\\nexit 0\\n' > /root/script.sh");
  await page.goto(`${base}/console/#/sandboxes/${id}/files?path=/root`);
  await page.locator(`ul.files li[data-name="${hostile}"]`).waitFor({ timeout: T });
  await page.evaluate(() => {
    const dt = new DataTransfer();
    dt.items.add(new File(["uploaded by drag and drop\n"], "dropped.txt", { type: "text/plain" }));
    document.querySelector(".drop").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
  });
  await page.locator('ul.files li[data-name="dropped.txt"]').waitFor({ timeout: T });
  log("upload listed");
  await page.getByText("Watching for changes").waitFor({ timeout: T });
  await sh(id, "echo made-in-guest > /root/watched.txt");
  await page.locator('ul.files li[data-name="watched.txt"]').waitFor({ timeout: T });
  log("watch update listed");
  await page.getByRole("button", { name: "script.sh", exact: true }).click();
  await page.locator("pre.code .tk-c").waitFor({ timeout: T });
  await noImages(page, "files");
  await shot(page, "files");

  // The timeline: a command run through the API appears live.
  await page.goto(`${base}/console/#/sandboxes/${id}/timeline`);
  await page.locator("ol.timeline li").first().waitFor({ timeout: T });
  await sh(id, "echo from-the-api", { env: {} });
  await page.locator("ol.timeline li", { hasText: "echo from-the-api → exit 0" }).waitFor({ timeout: T });
  log("timeline showed the API's command");
  await page.locator("ol.timeline li", { hasText: "echo from-the-api → exit 0" }).getByRole("button").click();
  await shot(page, "timeline");

  // Sessions, usage, network.
  await page.goto(`${base}/console/#/sandboxes/${id}/sessions`);
  await page.getByRole("button", { name: /^Attach to/ }).first().click();
  await page.locator("pre.output", { hasText: "[exit" }).waitFor({ timeout: T });
  await shot(page, "sessions");
  await page.goto(`${base}/console/#/sandboxes/${id}/usage`);
  await page.locator(".chart canvas").waitFor({ timeout: T });
  await page.waitForTimeout(4500); // two samples for the chart (a screenshot, not an assertion)
  await shot(page, "usage");
  await page.goto(`${base}/console/#/sandboxes/${id}/network`);
  await page.getByText("Mode").waitFor({ timeout: T });
  await shot(page, "network");

  // A service URL, opened from the console.
  await sh(id, "mkdir -p /tmp/www && echo served-by-the-guest > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8000", { background: true });
  const pa = await api("GET", `/v1/sandboxes/${id}/ports/8000`);
  for (let i = 0; ; i++) {
    const r = await fetch(new URL(pa.path_url, base).href, { headers: { Authorization: `Bearer ${key}` } }).catch(() => null);
    if (r && r.ok) break;
    if (i > 600) throw new Error("the guest's server never answered");
    await new Promise((res) => setTimeout(res, 200));
  }
  await page.goto(`${base}/console/#/sandboxes/${id}/services`);
  const [popup] = await Promise.all([context.waitForEvent("page"), page.locator("#open-service").click()]);
  watch(popup);
  await popup.waitForLoadState();
  await popup.getByText("served-by-the-guest").waitFor({ timeout: T });
  log("service URL opened", popup.url().replace(/token=[^&]+/, "token=…"));
  await shot(page, "services");
  await popup.close();

  // Fork twice; the tree shows both forks.
  const f1 = (await api("POST", `/v1/sandboxes/${id}/fork`, { count: 1 })).sandboxes[0].id;
  const f2 = (await api("POST", `/v1/sandboxes/${id}/fork`, { count: 1 })).sandboxes[0].id;
  log("forked", f1, f2);
  await page.goto(`${base}/console/#/branches/${id}`);
  for (const x of [id, f1, f2]) await page.locator(`.graph .node[data-id="${x}"]`).waitFor({ timeout: T });
  await page.locator(`.graph .node[data-id="${f1}"]`).click();
  await page.locator(`.graph .node[data-id="${f2}"]`).click();
  await page.locator(".compare .panel").nth(1).waitFor();
  await shot(page, "branches");

  await page.goto(`${base}/console/#/templates`);
  await page.getByRole("heading", { name: "Snapshots" }).waitFor();
  await page.locator("table.grid tbody tr").first().waitFor({ timeout: T });
  await shot(page, "templates");

  // Delete from the list, with its confirmation; the row goes.
  await page.goto(`${base}/console/#/`);
  await page.locator(`.vrow[data-id="${id}"]`).waitFor({ timeout: T });
  await page.getByRole("button", { name: `Delete ${id}` }).click();
  await page.locator("dialog").getByRole("button", { name: "Delete" }).click();
  await page.locator(`.vrow[data-id="${id}"]`).waitFor({ state: "detached", timeout: T });
  log("deleted and gone from the list");
  for (const x of [f1, f2, pre.id]) await api("DELETE", `/v1/sandboxes/${x}`).catch(() => {});
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(300);
  await shot(page, "sandboxes-phone");
}

async function list1000() {
  await context.addInitScript((k) => sessionStorage.setItem("agentbox.key", k), key);
  const page = watch(await context.newPage());
  const t0 = Date.now();
  await page.goto(base + "/console/");
  await page.locator(".vrows .vrow").first().waitFor({ timeout: T });
  const m = await page.evaluate(() => {
    const fcp = performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? -1;
    return { fcp, interactive: performance.now(), rows: document.querySelectorAll(".vrows .vrow").length, count: document.querySelector(".count")?.textContent };
  });
  log(`1000 sandboxes: first paint ${m.fcp.toFixed(0)} ms, interactive (rows drawn) ${m.interactive.toFixed(0)} ms after navigation (${Date.now() - t0} ms wall); ${m.rows} rows in the DOM; ${m.count}`);
  if (!/^1000 of 1000/.test(m.count || "")) problems.push(`count: ${m.count}`);
  await shot(page, "sandboxes-1000");
  // Scroll to the end in steps, timing the frames.
  const s = await page.evaluate(async () => {
    const v = document.getElementById("sb-list");
    const frames = [];
    let last = performance.now();
    while (v.scrollTop + v.clientHeight < v.scrollHeight - 1) {
      v.scrollTop += 600;
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      const now = performance.now();
      frames.push(now - last);
      last = now;
    }
    frames.sort((a, b) => a - b);
    const rows = [...document.querySelectorAll(".vrows .vrow")].map((r) => +r.getAttribute("aria-rowindex"));
    return { steps: frames.length, p50: frames[Math.floor(frames.length / 2)], p95: frames[Math.floor(frames.length * 0.95)], max: frames[frames.length - 1], lastRow: Math.max(...rows), dom: rows.length };
  });
  log(`scrolled to the end in ${s.steps} steps: two frames per step p50 ${s.p50.toFixed(1)} ms, p95 ${s.p95.toFixed(1)} ms, max ${s.max.toFixed(1)} ms; last row ${s.lastRow}, ${s.dom} rows in the DOM`);
  if (s.lastRow !== 1001) problems.push(`the last row shown is ${s.lastRow}, want 1001`);
  await shot(page, "sandboxes-1000-end");
  await page.getByLabel("Search").fill("sb-list-0999");
  await page.waitForFunction(() => /^1 of 1000/.test(document.querySelector(".count")?.textContent || ""), null, { timeout: T }).catch(() => problems.push("search did not narrow the list to one"));
  await page.setViewportSize({ width: 390, height: 844 });
  await page.getByLabel("Search").fill("");
  await page.waitForTimeout(300);
  await shot(page, "sandboxes-1000-phone");
}

let failed = false;
try {
  if (scenario === "list1000") await list1000(); else await vm();
} catch (e) {
  failed = true;
  console.error("FAIL:", e);
  for (const p of context.pages()) await p.screenshot({ path: join(out, `failure-${context.pages().indexOf(p)}.png`) }).catch(() => {});
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
for (const p of problems) console.error("PROBLEM:", p);
process.exit(failed || problems.length ? 1 : 0);
