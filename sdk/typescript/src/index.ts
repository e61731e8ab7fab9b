/**
 * agentbox: a microVM sandbox per AI agent, from TypeScript (Node 18+).
 *
 * ```ts
 * import { Client } from "@agentbox/sdk";
 * await using sb = await new Client().sandbox();
 * console.log((await sb.run("python3 -c 'print(6*7)'")).stdout); // 42
 * ```
 */
import "./polyfill.js";
export * from "./errors.js";
export * from "./models.js";
export { Client, Sandbox, ExecHandle, Files, Network, Snapshots, Templates, Secrets, Keys, Projects, Watch, DEFAULT_URL } from "./client.js";
export type { DiffOptions, Diff, Lineage, ReplayOptions, ReplayResult } from "./client.js";
export type { ClientOptions, Command, Data, Blueprint, KeyOptions } from "./client.js";
export { Pty } from "./pty.js";
