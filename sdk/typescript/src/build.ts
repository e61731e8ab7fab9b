/** Dockerfile and blueprint builds' request: the build context as a tar and
 * the query of `POST /v1/templates/build`. hostd runs the build; this only
 * packs what it reads. */
import { createReadStream, promises as fsp } from "node:fs";
import * as path from "node:path";
import { Readable } from "node:stream";
import { createGzip } from "node:zlib";
import * as tar from "tar-stream";
import { AgentboxError } from "./errors.js";

/** The names an inline Dockerfile or blueprint gets in the uploaded context. */
export const INLINE_DOCKERFILE = ".agentbox-build/Dockerfile";
export const INLINE_BLUEPRINT = ".agentbox-build/blueprint.yaml";

/** What `templates.build` uploads: the context directory (if any), the file's
 * path in it, its content when inline, and the parameter naming it. */
export interface BuildPlan { context?: string; file: string; inline?: Buffer; param: "dockerfile" | "blueprint" }

const isText = (s: string) => s.includes("\n") || s.trimStart().startsWith("{");

/** Plans a build from a blueprint (a path, YAML text or an object) or a
 * Dockerfile (a path or its text), with context (default: the file's
 * directory; none for inline text). */
export async function plan(blueprint: string | object | undefined, dockerfile: string | undefined, context: string | undefined): Promise<BuildPlan> {
  if ((blueprint === undefined) === (dockerfile === undefined)) throw new AgentboxError("templates.build: give a blueprint or a dockerfile, not both or neither");
  let ctx = context === undefined ? undefined : path.resolve(context);
  const param = dockerfile !== undefined ? "dockerfile" : "blueprint";
  const inlineName = param === "dockerfile" ? INLINE_DOCKERFILE : INLINE_BLUEPRINT;
  if (blueprint !== undefined && typeof blueprint !== "string") {
    return { context: ctx, file: INLINE_BLUEPRINT, inline: Buffer.from(JSON.stringify(blueprint)), param }; // JSON is YAML
  }
  const src = (dockerfile ?? blueprint) as string;
  if (isText(src)) return { context: ctx, file: inlineName, inline: Buffer.from(src), param };
  const file = path.resolve(src);
  ctx ??= path.dirname(file); // the CLI's default: the file's directory
  const rel = path.relative(ctx, file);
  if (rel.startsWith("..") || path.isAbsolute(rel)) return { context: ctx, file: inlineName, inline: await fsp.readFile(file), param };
  return { context: ctx, file: rel.split(path.sep).join("/"), param };
}

async function walk(root: string, rel = ""): Promise<string[]> {
  const out: string[] = [];
  const names = (await fsp.readdir(path.join(root, rel))).sort();
  for (const n of names) {
    const r = rel ? `${rel}/${n}` : n;
    const st = await fsp.stat(path.join(root, r)).catch(() => undefined); // follows symlinks; a dangling one is left out
    if (!st || (!st.isDirectory() && !st.isFile())) continue;
    out.push(r);
    if (st.isDirectory()) out.push(...(await walk(root, r)));
  }
  return out;
}

/** The build context as a gzip tar: every file and directory under the
 * plan's context (symlinks followed, special files left out), plus the
 * inline file. */
export function pack(p: BuildPlan): Readable {
  const tp = tar.pack();
  (async () => {
    if (p.context !== undefined) {
      const st = await fsp.stat(p.context).catch(() => undefined);
      if (!st?.isDirectory()) throw new AgentboxError(`templates.build: context ${p.context} is not a directory`);
      for (const rel of await walk(p.context)) {
        const full = path.join(p.context, rel);
        const st = await fsp.stat(full);
        const base = { name: rel, mode: st.mode & 0o777, mtime: st.mtime };
        if (st.isDirectory()) { tp.entry({ ...base, type: "directory" }); continue; }
        await new Promise<void>((res, rej) => {
          const w = tp.entry({ ...base, size: st.size }, (e) => (e ? rej(e) : res()));
          createReadStream(full).on("error", rej).pipe(w);
        });
      }
    }
    if (p.inline) tp.entry({ name: p.file, mode: 0o644 }, p.inline);
    tp.finalize();
  })().catch((e) => tp.destroy(e));
  return tp.pipe(createGzip());
}

/** The build's query (build_arg repeats). */
export function buildQuery(name: string, p: BuildPlan, o: { buildArgs?: Record<string, string>; pool?: number; noCache?: boolean }): Record<string, string | string[]> {
  const q: Record<string, string | string[]> = { name, [p.param]: p.file };
  const args = Object.entries(o.buildArgs ?? {}).map(([k, v]) => `${k}=${v}`);
  if (args.length) q.build_arg = args;
  if (o.pool) q.pool_size = String(o.pool);
  if (o.noCache) q.no_cache = "true";
  return q;
}
