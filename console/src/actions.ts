// Sandbox lifecycle actions, with confirmation where data is lost.
import { json, sb, Sandbox, Snapshot } from "./api";
import { confirmDanger, prompt, toast } from "./dom";

async function run<T>(what: string, f: () => Promise<T>): Promise<T | undefined> {
  try {
    const v = await f();
    toast(what);
    return v;
  } catch (e) {
    toast(`${what} failed: ${(e as Error).message}`, "error");
    return undefined;
  }
}

export async function pause(id: string) {
  return run(`Paused ${id}`, () => json<Sandbox>("POST", sb(id) + "/pause"));
}
export async function resume(id: string) {
  return run(`Resumed ${id}`, () => json<Sandbox>("POST", sb(id) + "/resume"));
}
export async function snapshot(id: string) {
  return run(`Snapshot of ${id} taken`, () => json<Snapshot>("POST", sb(id) + "/snapshots", { body: {} }));
}
export async function fork(id: string) {
  const n = await prompt(`Fork ${id}`, "How many forks", "1", "number");
  if (n === null) return undefined;
  const count = Math.max(1, Math.min(64, parseInt(n, 10) || 1));
  return run(`Forked ${id} ×${count}`, () => json<{ sandboxes: Sandbox[] }>("POST", sb(id) + "/fork", { body: { count } }));
}
export async function extend(id: string) {
  const v = await prompt(`Extend ${id}`, "Time out in (seconds from now)", "3600", "number");
  if (v === null) return undefined;
  const timeout_s = Math.max(1, parseInt(v, 10) || 3600);
  return run(`Extended ${id}`, () => json<Sandbox>("POST", sb(id) + "/timeout", { body: { timeout_s } }));
}
export async function remove(id: string): Promise<boolean> {
  if (!(await confirmDanger(`Delete ${id}?`, "The sandbox stops and its disk, memory and sessions are deleted. This cannot be undone.", "Delete"))) return false;
  return (await run(`Deleted ${id}`, () => json<void>("DELETE", sb(id)).then(() => true))) === true;
}
