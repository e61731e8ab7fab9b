"""Every request body field of hostd/api/openapi.yaml is reachable from the
SDK: a parameter of one of the methods that call the operation (by the
field's name or an alias below), one of ``create``'s ``**limits`` (the API's
create fields, passed through), or listed as left out with a reason."""

from __future__ import annotations

import inspect
from typing import Dict, List, Set

import yaml

import agentbox

from test_coverage import REACHABLE, SPEC

# (operationId, field) -> the SDK parameter that carries it.
ALIASES = {
    ("execCommand", "timeout_s"): "timeout",
    ("moveFile", "from"): "src",
    ("moveFile", "to"): "dst",
    ("forkSandbox", "count"): "n",
    ("extendTimeout", "timeout_s"): "seconds",
    ("createTemplate", "image"): "ref",  # build_image(name, ref, ...): the ImageSource's fields are its parameters
}
# Operations whose method passes unknown keyword arguments into the body.
PASS_THROUGH = {"createSandbox"}
# (operationId, field) -> why the SDK does not offer it.
LEFT_OUT = {
    ("execCommand", "tty"): "PTY sessions are Sandbox.pty (execPTY), not a flag of run",
    ("snapshotSandbox", "kind"): "step snapshots are the blueprint engine's (the agentbox CLI's)",
    ("snapshotSandbox", "cache_key"): "step snapshots are the blueprint engine's (the agentbox CLI's)",
    ("snapshotSandbox", "user"): "the snapshot's user is the blueprint engine's (the agentbox CLI's)",
    ("createTemplate", "shared"): "admin-only sharing is for the CLI, not an agent's SDK",
}


def body_fields() -> Dict[str, List[str]]:
    spec = yaml.safe_load(SPEC.read_text())
    schemas = spec["components"]["schemas"]
    out: Dict[str, List[str]] = {}
    for item in spec["paths"].values():
        for op in item.values():
            if not isinstance(op, dict) or "requestBody" not in op:
                continue
            media = op["requestBody"].get("content", {}).get("application/json")
            if media is None:
                continue
            ref = media["schema"].get("$ref", "").rsplit("/", 1)[-1]
            out[op["operationId"]] = list(schemas.get(ref, {}).get("properties", {}))
    return out


def params_of(op: str, cls_prefix: str = "") -> Set[str]:
    params: Set[str] = set()
    for m in REACHABLE[op]:
        cls, name = m.split(".")
        params |= set(inspect.signature(getattr(getattr(agentbox, cls_prefix + cls), name)).parameters)
    return params


def test_every_body_field_is_reachable() -> None:
    fields = body_fields()
    assert len(fields) > 10
    missing = []
    for op, props in fields.items():
        for prefix in ("", "Async"):
            params = params_of(op, prefix)
            for p in props:
                if (op, p) in LEFT_OUT or op in PASS_THROUGH:
                    continue
                if ALIASES.get((op, p), p) not in params:
                    missing.append(f"{prefix}{op}.{p}")
    assert not missing, f"request fields the Python SDK cannot send: {missing}"
    assert all(LEFT_OUT.values())
    stale = [k for k in list(LEFT_OUT) + list(ALIASES) if k[1] not in fields.get(k[0], [])]
    assert not stale, f"no longer in the spec: {stale}"
