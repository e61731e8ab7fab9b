"""Every operationId of hostd/api/openapi.yaml is reachable from the SDK, or
listed below as deliberately left out with a reason."""

from __future__ import annotations

import re
from pathlib import Path

import agentbox

SPEC = Path(__file__).resolve().parents[3] / "hostd" / "api" / "openapi.yaml"

# operationId -> the public methods (Class.method) that call it, sync and async.
REACHABLE = {
    "getHealth": ["Client.health"],
    "getOpenAPI": ["Client.openapi"],
    "getMetrics": ["Client.metrics"],
    "createSandbox": ["Client.create", "Client.sandbox"],
    "listSandboxes": ["Client.list"],
    "getSandbox": ["Client.get", "Sandbox.refresh"],
    "deleteSandbox": ["Sandbox.delete"],
    "execCommand": ["Sandbox.run", "Sandbox.pty"],
    "listExecs": ["Sandbox.execs"],
    "attachExec": ["Sandbox.attach", "ExecHandle.wait"],
    "execPTY": ["Sandbox.pty", "Sandbox.pty_attach"],
    "signalExec": ["ExecHandle.kill"],
    "getPort": ["Sandbox.port", "Sandbox.url"],
    "setPort": ["Sandbox.set_public"],
    "createShareLink": ["Sandbox.share"],
    "readFile": ["Files.read"],
    "writeFile": ["Files.write"],
    "removeFile": ["Files.remove"],
    "listDir": ["Files.list", "Files.pages"],
    "statFile": ["Files.stat", "Files.exists"],
    "makeDir": ["Files.mkdir"],
    "moveFile": ["Files.move"],
    "getArchive": ["Files.download_dir"],
    "putArchive": ["Files.upload_dir"],
    "watchDir": ["Files.watch"],
    "snapshotSandbox": ["Sandbox.snapshot"],
    "diffSandbox": ["Sandbox.diff"],
    "diffSnapshot": ["Snapshots.diff"],
    "getSandboxLineage": ["Sandbox.lineage"],
    "replaySnapshot": ["Snapshots.replay"],
    "forkSandbox": ["Sandbox.fork"],
    "pauseSandbox": ["Sandbox.pause"],
    "resumeSandbox": ["Sandbox.resume"],
    "migrateSandbox": ["Sandbox.migrate"],
    "extendTimeout": ["Sandbox.extend"],
    "getUsage": ["Sandbox.usage"],
    "listSnapshots": ["Snapshots.list"],
    "getSnapshot": ["Snapshots.get"],
    "deleteSnapshot": ["Snapshots.delete"],
    "createTemplate": ["Templates.create", "Templates.build_image"],
    "buildTemplateFromContext": ["Templates.build"],
    "listTemplates": ["Templates.list"],
    "getTemplate": ["Templates.get"],
    "deleteTemplate": ["Templates.delete"],
    "getSandboxNetwork": ["Network.get"],
    "patchSandboxNetwork": ["Network.update"],
    "listSandboxEvents": ["Sandbox.events"],
    "createSecret": ["Secrets.set"],
    "listSecrets": ["Secrets.list"],
    "deleteSecret": ["Secrets.delete"],
    "createKey": ["Keys.create"],
    "listKeys": ["Keys.list"],
    "revokeKey": ["Keys.revoke"],
    "rotateKey": ["Keys.rotate"],
    "createProject": ["Projects.create"],
    "listProjects": ["Projects.list"],
}

# operationId -> why the SDK does not offer it.
LEFT_OUT: dict = {
    "releaseSandbox": "a fleet control plane's call to the host a sandbox moved from (host token or admin), not an agent's",
}


def spec_operations() -> set:
    return set(re.findall(r"^\s+operationId:\s*(\w+)\s*$", SPEC.read_text(), re.M))


def test_every_operation_is_covered() -> None:
    ops = spec_operations()
    assert len(ops) > 40
    missing = ops - set(REACHABLE) - set(LEFT_OUT)
    assert not missing, f"operations neither reachable from the Python SDK nor left out with a reason: {sorted(missing)}"
    stale = (set(REACHABLE) | set(LEFT_OUT)) - ops
    assert not stale, f"no longer in the spec: {sorted(stale)}"
    assert all(LEFT_OUT.values()), "every left-out operation needs a reason"


def test_methods_exist_sync_and_async() -> None:
    for op, methods in REACHABLE.items():
        for m in methods:
            cls, name = m.split(".")
            for c in (getattr(agentbox, cls), getattr(agentbox, "Async" + cls)):
                assert callable(getattr(c, name, None)), f"{op}: {c.__name__}.{name} is missing"
