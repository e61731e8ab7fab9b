// Extracts the ```ts blocks of README.md into test/readme.test.ts (one test,
// the blocks in order), so `npm test` runs the documentation's examples.
import { readFileSync, writeFileSync } from "node:fs";
const md = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const blocks = [...md.matchAll(/^```ts\n([\s\S]*?)^```/gm)].map((m) => m[1]);
const names = new Map(), body = []; // module -> imported names
for (const b of blocks) {
  for (const line of b.split("\n")) {
    const m = line.match(/^import \{([^}]*)\} from "([^"]+)";/);
    if (!m) { body.push("  " + line); continue; }
    const mod = m[2] === "@agentbox/sdk" ? "../src/index.js" : m[2];
    if (!names.has(mod)) names.set(mod, new Set());
    for (const n of m[1].split(",")) if (n.trim()) names.get(mod).add(n.trim());
  }
}
const imports = [...names].map(([mod, ns]) => `import { ${[...ns].join(", ")} } from "${mod}";`);
writeFileSync(new URL("../test/readme.test.ts", import.meta.url),
  `// Generated from README.md by scripts/extract-readme.mjs: do not edit.\nimport { test } from "node:test";\n${[...imports].join("\n")}\n\n` +
  `test("README examples", async () => {\n${body.join("\n")}\n});\n`);
