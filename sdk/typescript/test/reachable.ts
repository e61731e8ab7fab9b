// The SDK's methods per operation of hostd/api/openapi.yaml: the table that
// coverage.test.ts and requests.test.ts check (not a test file itself).

// operationId -> the public methods (Class.method) that call it.
export const reachable: Record<string, string[]> = {
  getHealth: ["Client.health"], getOpenAPI: ["Client.openapi"], getMetrics: ["Client.metrics"],
  createSandbox: ["Client.create", "Client.sandbox", "Client.withSandbox"], listSandboxes: ["Client.list"],
  getSandbox: ["Client.get", "Sandbox.refresh"], deleteSandbox: ["Sandbox.delete"],
  execCommand: ["Sandbox.run", "Sandbox.start", "Sandbox.pty"], listExecs: ["Sandbox.execs"],
  attachExec: ["Sandbox.attach", "ExecHandle.wait"], execPTY: ["Sandbox.pty", "Sandbox.ptyAttach"],
  signalExec: ["ExecHandle.kill"], getPort: ["Sandbox.port", "Sandbox.url"], setPort: ["Sandbox.setPublic"],
  createShareLink: ["Sandbox.share"], readFile: ["Files.read"], writeFile: ["Files.write"], removeFile: ["Files.remove"],
  listDir: ["Files.list", "Files.pages"], statFile: ["Files.stat", "Files.exists"], makeDir: ["Files.mkdir"], moveFile: ["Files.move"],
  getArchive: ["Files.downloadDir"], putArchive: ["Files.uploadDir"], watchDir: ["Files.watch"],
  snapshotSandbox: ["Sandbox.snapshot"], forkSandbox: ["Sandbox.fork"], pauseSandbox: ["Sandbox.pause"],
  resumeSandbox: ["Sandbox.resume"], migrateSandbox: ["Sandbox.migrate"], extendTimeout: ["Sandbox.extend"], getUsage: ["Sandbox.usage"],
  listSnapshots: ["Snapshots.list"], getSnapshot: ["Snapshots.get"], deleteSnapshot: ["Snapshots.delete"],
  diffSandbox: ["Sandbox.diff"], diffSnapshot: ["Snapshots.diff"], getSandboxLineage: ["Sandbox.lineage"], replaySnapshot: ["Snapshots.replay"],
  createTemplate: ["Templates.create", "Templates.buildImage"], buildTemplateFromContext: ["Templates.build"], listTemplates: ["Templates.list"],
  getTemplate: ["Templates.get"], deleteTemplate: ["Templates.delete"],
  getSandboxNetwork: ["Network.get"], patchSandboxNetwork: ["Network.update"], listSandboxEvents: ["Sandbox.events"],
  createSecret: ["Secrets.set"], listSecrets: ["Secrets.list"], deleteSecret: ["Secrets.delete"],
  createKey: ["Keys.create"], listKeys: ["Keys.list"], revokeKey: ["Keys.revoke"], rotateKey: ["Keys.rotate"],
  createProject: ["Projects.create"], listProjects: ["Projects.list"],
};
