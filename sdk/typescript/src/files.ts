/** Directory archives: pack a local directory, unpack one safely. */
import { createReadStream, createWriteStream, promises as fsp } from "node:fs";
import * as path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGzip, createGunzip } from "node:zlib";
import * as tar from "tar-stream";
import { AgentboxError } from "./errors.js";

async function walk(root: string, rel = ""): Promise<string[]> {
  const out: string[] = [];
  const ents = await fsp.readdir(path.join(root, rel), { withFileTypes: true });
  ents.sort((a, b) => a.name.localeCompare(b.name));
  for (const e of ents) {
    const r = rel ? `${rel}/${e.name}` : e.name;
    out.push(r);
    if (e.isDirectory()) out.push(...(await walk(root, r)));
  }
  return out;
}

/** A gzip'd tar stream of directory `local` (entries relative to it). */
export function tarDir(local: string): Readable {
  const pack = tar.pack();
  (async () => {
    for (const rel of await walk(local)) {
      const full = path.join(local, rel);
      const st = await fsp.lstat(full);
      const base = { name: rel, mode: st.mode & 0o7777, mtime: st.mtime };
      if (st.isDirectory()) pack.entry({ ...base, type: "directory" });
      else if (st.isSymbolicLink()) pack.entry({ ...base, type: "symlink", linkname: await fsp.readlink(full) });
      else if (st.isFile()) {
        await new Promise<void>((res, rej) => {
          const w = pack.entry({ ...base, size: st.size }, (e) => (e ? rej(e) : res()));
          createReadStream(full).on("error", rej).pipe(w);
        });
      }
    }
    pack.finalize();
  })().catch((e) => pack.destroy(e));
  return pack.pipe(createGzip());
}

function inside(root: string, p: string): boolean {
  const r = path.relative(root, p);
  return r === "" || (!r.startsWith("..") && !path.isAbsolute(r));
}

/** Unpack the tar stream `src` into `local`, refusing any entry (or link
 * target) that would land outside it, hard links and device files. Returns
 * the number of entries. */
export async function untarSafely(src: Readable, local: string): Promise<number> {
  const root = path.resolve(local);
  await fsp.mkdir(root, { recursive: true });
  const ex = tar.extract();
  let n = 0;
  const done = (async () => {
    for await (const entry of ex) {
      const h = entry.header;
      const name = h.name.replace(/^(\.\/)+/, "");
      if (!name || name === ".") { entry.resume(); continue; }
      const dest = path.resolve(root, name);
      if (path.isAbsolute(h.name) || !inside(root, dest)) throw new AgentboxError(`archive entry ${h.name} escapes ${root}`);
      const mode = (h.mode ?? 0o644) & 0o777;
      switch (h.type) {
        case "directory":
          await fsp.mkdir(dest, { recursive: true, mode: mode | 0o700 });
          entry.resume();
          break;
        case "file":
          await fsp.mkdir(path.dirname(dest), { recursive: true });
          await pipeline(entry, createWriteStream(dest, { mode }));
          break;
        case "symlink": {
          const target = path.resolve(path.dirname(dest), h.linkname ?? "");
          if (path.isAbsolute(h.linkname ?? "") || !inside(root, target)) throw new AgentboxError(`archive link ${h.name} -> ${h.linkname} escapes ${root}`);
          await fsp.mkdir(path.dirname(dest), { recursive: true });
          await fsp.symlink(h.linkname!, dest);
          entry.resume();
          break;
        }
        default:
          throw new AgentboxError(`archive entry ${h.name} of type ${h.type} refused`);
      }
      n++;
    }
  })();
  // Gunzip if the stream is gzip'd (magic 1f 8b), else pass through.
  const it = src[Symbol.asyncIterator]();
  const first = await it.next();
  const head: Buffer = first.done ? Buffer.alloc(0) : Buffer.from(first.value);
  const rest = Readable.from((async function* () { yield head; for (;;) { const r = await it.next(); if (r.done) return; yield r.value; } })());
  const gz = head[0] === 0x1f && head[1] === 0x8b;
  await Promise.all([gz ? pipeline(rest, createGunzip(), ex) : pipeline(rest, ex), done]);
  return n;
}
