"""Every method of test_coverage's REACHABLE table, sync and async, really
calls its operation, and together they send every request body field of
hostd/api/openapi.yaml. Each method is called, with a value for each of its
parameters, against a real HTTP server on loopback that records the
requests and answers each with an API error; the requests are then matched
against the spec's method and path templates, and their JSON keys (nested
ones as ``image.ref``, ``mounts[].type``) against its request schemas, their
query parameters against its parameters and their bodies' Content-Type
(JSON, a file's bytes, a tar) against its request bodies'.
Needs no hostd."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

import agentbox
from agentbox._models import SandboxInfo

import test_shapes
from test_coverage import REACHABLE, SPEC

# (operationId, field) -> why no method sends it. test_shapes' table, less
# the PTY flag: Sandbox.pty sends tty.
LEFT_OUT = {k: v for k, v in test_shapes.LEFT_OUT.items() if k != ("execCommand", "tty")}

# (operationId, query parameter) -> why no method sends it.
LEFT_OUT_QUERY = {
    ("listSandboxes", "project"): "an admin's filter across projects: the CLI's, not an agent's SDK",
    ("listSnapshots", "project"): "an admin's filter across projects: the CLI's, not an agent's SDK",
    ("listTemplates", "project"): "an admin's filter across projects: the CLI's, not an agent's SDK",
    ("listSecrets", "project"): "an admin's filter across projects: the CLI's, not an agent's SDK",
    ("listSandboxEvents", "format"): "the SDK reads events as JSON (format=otlp is for collectors)",
    ("diffSandbox", "max_patch_bytes"): "hostd's default bound on a patch; not offered",
    ("diffSandbox", "limit"): "Sandbox.diff follows every page; the page size is hostd's",
    ("diffSnapshot", "max_patch_bytes"): "hostd's default bound on a patch; not offered",
    ("diffSnapshot", "limit"): "Snapshots.diff answers one page of hostd's size",
    ("diffSnapshot", "cursor"): "Snapshots.diff answers one page (its next_cursor is in the answer)",
}

KEEP_DEFAULT = object()  # a VALUES entry that leaves the parameter at its default

# Arguments by parameter name; "Class.method:param" entries win.
VALUES: Dict[str, Any] = {
    "sandbox_id": "sb-test", "snapshot_id": "snap-test", "exec_id": "ex-test", "key_id": "key-test",
    "name": "n-test", "value": "v", "port": 8080, "path": "/root/x", "src": "/root/a", "dst": "/root/b",
    "remote": "/root/d", "data": b"data", "mode": 0o644, "recursive": True, "offset": 3, "limit": 5,
    "cmd": ["echo", "hi"], "cwd": "/root", "env": {"A": "1"}, "stdin": "in", "timeout": 5, "user": "root",
    "background": True, "rows": 30, "cols": 100, "stay_paused": True, "n": 2, "host": "h-test",
    "seconds": 60, "public": True, "expires_in_s": 600, "signal": "SIGTERM",
    "other": "sb-other", "against": "snap-other", "patch": True, "method": "walk", "exclude": ["/tmp"],
    "events": True, "types": ["exec"], "follow": False, "since": "2026-01-01T00:00:00Z",
    "until": "2026-12-31T00:00:00Z", "after": 1, "timeout_s": 30, "keep": True,
    "allow_domains": ["example.com"], "allow_cidrs": ["10.0.0.0/8"], "allow_ports": [443],
    "inject": [{"host": "example.com", "header": "Authorization", "value": "{{secret:T}}", "kind": "bearer"}],
    "project": "p-test", "role": "member", "expires_at": "2027-01-01T00:00:00Z",
    "ref": "registry.test/img:1", "pool_size": 1, "insecure": True, "registry_secret": "reg",
    "free_mib": 512, "memory_mib": 512, "kernel": "/srv/vmlinux", "modules": "/srv/modules",
    "pool": 1, "no_cache": True, "build_args": {"V": "1"}, "dockerfile": "FROM scratch\n",
    "template": "t-test", "snapshot": "snap-test", "vcpus": 2, "secret_env": {"TOKEN": "T"},
    "metadata": {"k": "v"}, "boot": "cold",
    "network": {"mode": "proxy", "allow_domains": ["example.com"], "allow_cidrs": ["10.0.0.0/8"], "allow_ports": [443],
                "inject": [{"host": "example.com", "header": "Authorization", "value": "{{secret:T}}", "kind": "bearer"}]},
    "mounts": [
        {"type": "host", "path": "/mnt/h", "source": "/srv/h", "read_only": True, "allow_symlinks": True},
        {"type": "s3", "path": "/mnt/s", "endpoint": "http://127.0.0.1:9000", "bucket": "b", "prefix": "p/",
         "region": "us-east-1", "secret": "s3key"},
        {"type": "git", "path": "/mnt/g", "url": "https://git.test/r.git", "ref": "main", "secret": "tok"},
    ],
    # callbacks
    "on_stdout": print, "on_stderr": print, "on_progress": print, "progress": print,
    # Client.url with share calls share (createShareLink), not getPort.
    "Sandbox.url:share": KEEP_DEFAULT, "Sandbox.url:path": True,
    "Files.read:format": KEEP_DEFAULT, "Files.read:encoding": KEEP_DEFAULT,
    "Templates.build:blueprint": KEEP_DEFAULT,  # a dockerfile build instead (one or the other)
    "Templates.create:pool_size": 2,
    "Keys.create:expires_in_s": 3600,
}
# Class.method -> more calls of it, each with these VALUES overridden.
VARIANTS: Dict[str, List[Dict[str, Any]]] = {
    "Sandbox.events": [{"follow": True}],
    "Sandbox.run": [{"background": KEEP_DEFAULT}],  # streamed, not in the background
    "Templates.build": [{"blueprint": {"base": "b-test", "steps": [{"run": "true"}]}, "dockerfile": KEEP_DEFAULT,
                         "context": KEEP_DEFAULT}],
}
# create's **limits: the API's other create fields, passed explicitly.
LIMITS = {"cpu_quota": 0.5, "host_memory_mib": 1024, "disk_mib": 2048, "disk_bps": 1 << 20, "net_bps": 1 << 20,
          "max_pids": 100, "exec_timeout_s": 60, "idle_timeout_s": 120, "on_timeout": "pause", "start": True}
# Directory parameters get a fresh temporary directory.
DIRS = {"local", "context"}

NOT_FOUND = json.dumps({"error": {"code": "not_found", "message": "the recorder answers every call so"}}).encode()


class Recorder(ThreadingHTTPServer):
    """An HTTP server on loopback that records each request and answers it
    with an API error (a background exec gets its 202, so that Sandbox.pty
    goes on to the PTY WebSocket)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.log: List[Dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, *a: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        u = urlsplit(self.path)
        raw, ctype = self._body(), self.headers.get("Content-Type", "")
        body = None
        if ctype.startswith("application/json") and raw:
            body = json.loads(raw)
        rec = {"method": self.command, "path": u.path, "query": parse_qs(u.query), "ctype": ctype, "json": body,
               "has_body": bool(raw)}
        with self.server.lock:
            self.server.log.append(rec)
        status, answer = answer_to(rec)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(answer)
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle


def answer_to(rec: Dict[str, Any]) -> Tuple[int, bytes]:
    """The API error, but a background exec gets its 202 (so Sandbox.pty
    goes on to the PTY WebSocket), and a listing's or diff's first page a
    next page (so the cursor is sent)."""
    path, body = rec["path"], rec["json"]
    if rec["method"] == "POST" and path.endswith("/exec") and isinstance(body, dict) and body.get("background"):
        return 202, json.dumps({"exec_id": "ex-test"}).encode()
    if rec["method"] == "GET" and path.endswith(("/files/list", "/diff")) and "cursor" not in rec["query"]:
        return 200, json.dumps({"entries": [], "next_cursor": "c-test", "method": "walk", "reason": ""}).encode()
    return 404, NOT_FOUND


# --- the spec ---------------------------------------------------------------


def _resolve(schemas: Dict[str, Any], s: Dict[str, Any]) -> Dict[str, Any]:
    while "$ref" in s:
        s = schemas[s["$ref"].rsplit("/", 1)[-1]]
    return s


def schema_fields(schemas: Dict[str, Any], s: Dict[str, Any], prefix: str = "") -> Set[str]:
    """The properties of schema s, nested ones as ``a.b`` and ``a[].b``."""
    out: Set[str] = set()
    for k, v in _resolve(schemas, s).get("properties", {}).items():
        out.add(prefix + k)
        v = _resolve(schemas, v)
        if v.get("type") == "array":
            out |= schema_fields(schemas, v.get("items", {}), f"{prefix}{k}[].")
        elif v.get("properties"):
            out |= schema_fields(schemas, v, f"{prefix}{k}.")
    return out


def sent_fields(v: Any, prefix: str = "") -> Set[str]:
    """The keys of a JSON value, nested ones as ``a.b`` and ``a[].b``."""
    out: Set[str] = set()
    if isinstance(v, dict):
        for k, x in v.items():
            out.add(prefix + k)
            out |= sent_fields(x, f"{prefix}{k}.")
    elif isinstance(v, list):
        for x in v:
            out |= sent_fields(x, prefix[:-1] + "[]." if prefix else "")
    return out


class Op:
    def __init__(self, op_id: str, method: str, template: str, fields: Optional[Set[str]], ctypes: Set[str],
                 query: Set[str]) -> None:
        self.id, self.method, self.template, self.fields, self.ctypes = op_id, method, template, fields, ctypes
        self.query = query
        self.literal = len(re.sub(r"\{[^}]+\}", "", template))
        self.rx = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")


def spec_ops() -> Dict[str, Op]:
    spec = yaml.safe_load(SPEC.read_text())
    schemas = spec["components"]["schemas"]
    ops: Dict[str, Op] = {}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "operationId" not in op:
                continue
            content = op.get("requestBody", {}).get("content", {})
            media = content.get("application/json")
            fields = schema_fields(schemas, media["schema"]) if media else None
            params = [spec["components"]["parameters"][x["$ref"].rsplit("/", 1)[-1]] if "$ref" in x else x
                      for x in op.get("parameters", []) + item.get("parameters", [])]
            query = {x["name"] for x in params if x["in"] == "query"}
            ops[op["operationId"]] = Op(op["operationId"], method.upper(), path, fields, set(content), query)
    return ops


def _parent(field: str) -> str:
    """``a.`` of ``a.b``, ``a[].`` of ``a[].b``, "" of a top-level field."""
    return field[: field.rfind(".") + 1]


def match(ops: Dict[str, Op], rec: Dict[str, Any]) -> Optional[str]:
    """The operation a request is (the most literal template of those that match)."""
    hits = [o for o in ops.values() if o.method == rec["method"] and o.rx.match(rec["path"])]
    return max(hits, key=lambda o: o.literal).id if hits else None


# --- calling every method ---------------------------------------------------


def arguments(qual: str, fn: Callable[..., Any], tmp: Path, variant: Dict[str, Any]) -> Dict[str, Any]:
    """A value for each parameter of fn (qual is Class.method): VALUES, a
    directory for DIRS, LIMITS for **limits; raises for a required one
    without a value."""
    kw: Dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.VAR_KEYWORD:
            kw.update(LIMITS if qual in ("Client.create", "Client.sandbox") else {})
            if qual == "Client.sandbox":  # takes create's arguments
                kw.update(arguments("Client.create", agentbox.Client.create, tmp, {}))
            continue
        v = variant.get(p.name, VALUES.get(f"{qual}:{p.name}", VALUES.get(p.name, KEEP_DEFAULT)))
        if p.name in DIRS and v is KEEP_DEFAULT and p.name not in variant:
            v = tmp / f"{qual}-{p.name}"
            v.mkdir(parents=True, exist_ok=True)
            (v / "f.txt").write_text("x")
        if v is KEEP_DEFAULT:
            if p.default is p.empty:
                raise AssertionError(f"{qual}: no test value for its required parameter {p.name!r}: add one to VALUES")
            continue
        kw[p.name] = v
    return kw


def objects(c: Any, flavor: str) -> Dict[str, Any]:
    """The object each class's methods are called on, on fake ids."""
    sb = getattr(agentbox, flavor + "Sandbox")(c, SandboxInfo(id="sb-test", state="running"))
    return {"Client": c, "Sandbox": sb, "Files": sb.files, "Network": sb.network,
            "ExecHandle": getattr(agentbox, flavor + "ExecHandle")(sb, "ex-test"),
            "Templates": c.templates, "Secrets": c.secrets, "Keys": c.keys, "Projects": c.projects,
            "Snapshots": c.snapshots}


def methods() -> Dict[str, List[str]]:
    """Class.method -> the operations REACHABLE says it calls."""
    out: Dict[str, List[str]] = {}
    for op, ms in REACHABLE.items():
        for m in ms:
            out.setdefault(m, []).append(op)
    return out


def call_sync(c: agentbox.Client, qual: str, tmp: Path, variant: Dict[str, Any]) -> Optional[BaseException]:
    cls, name = qual.split(".")
    fn = getattr(objects(c, "")[cls], name)
    try:
        r = fn(**arguments(qual, getattr(agentbox, cls).__dict__[name], tmp, variant))
        if hasattr(r, "__enter__"):
            with r:
                pass
        elif hasattr(r, "__iter__") and not isinstance(r, (str, bytes, list, dict)):
            next(iter(r), None)
    except Exception as e:  # the recorder's error, expected
        return e
    return None


async def call_async(c: agentbox.AsyncClient, qual: str, tmp: Path, variant: Dict[str, Any]) -> Optional[BaseException]:
    cls, name = qual.split(".")
    fn = getattr(objects(c, "Async")[cls], name)
    try:
        r = fn(**arguments(qual, getattr(agentbox, "Async" + cls).__dict__[name], tmp, variant))
        if inspect.isawaitable(r):
            r = await r
        if hasattr(r, "__aenter__"):
            async with r:
                pass
        elif hasattr(r, "__aiter__"):
            await r.__aiter__().__anext__()
    except Exception as e:  # the recorder's error, expected
        return e
    return None


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    srv = Recorder()
    t = threading.Thread(target=srv.serve_forever, name="recorder", daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()


Calls = Dict[str, Tuple[List[Dict[str, Any]], List[Optional[BaseException]]]]


def run_all(recorder: Recorder, flavor: str, tmp: Path) -> Calls:
    """Calls every method (and its VARIANTS); returns each one's requests and errors."""
    out: Calls = {}

    def keep(qual: str, start: int, err: Optional[BaseException]) -> None:
        reqs, errs = out.setdefault(qual, ([], []))
        reqs.extend(recorder.log[start:])
        errs.append(err)

    if flavor == "":
        with agentbox.Client(recorder.url, "test", timeout=30) as c:
            for qual in methods():
                for v in [{}] + VARIANTS.get(qual, []):
                    start = len(recorder.log)
                    keep(qual, start, call_sync(c, qual, tmp, v))
        return out

    async def go() -> None:
        async with agentbox.AsyncClient(recorder.url, "test", timeout=30) as c:
            for qual in methods():
                for v in [{}] + VARIANTS.get(qual, []):
                    start = len(recorder.log)
                    keep(qual, start, await call_async(c, qual, tmp, v))

    asyncio.run(go())
    return out


def check(calls: Calls, flavor: str) -> None:
    ops = spec_ops()
    problems: List[str] = []
    sent: Dict[str, Set[str]] = {}
    queries: Dict[str, Set[str]] = {}
    for qual, want in methods().items():
        reqs, err = calls[qual]
        got = [match(ops, r) for r in reqs]
        for r, op in zip(reqs, got):
            if op is None:
                problems.append(f"{flavor} {qual} sent {r['method']} {r['path']}, which is no operation of the spec")
                continue
            if r["has_body"] and r["ctype"].split(";")[0].strip() not in ops[op].ctypes:
                problems.append(f"{flavor} {qual} sent {op} a body of Content-Type {r['ctype']!r}, not one of the spec's "
                                f"{sorted(ops[op].ctypes)}")
            if r["json"] is not None:
                sent.setdefault(op, set()).update(sent_fields(r["json"]))
            queries.setdefault(op, set()).update(r["query"])
        for op in want:
            if op not in got:
                seen = ", ".join(f"{r['method']} {r['path']}" for r in reqs) or "nothing"
                problems.append(f"{flavor} {qual} does not call {op} ({ops[op].method} {ops[op].template}): "
                                f"it sent {seen} (its errors: {err!r})")
    for op in sorted(ops):
        fields = ops[op].fields
        if fields is None:
            continue
        got = sent.get(op, set())
        missing = sorted(f for f in fields - got if (op, f.split(".")[0].split("[")[0]) not in LEFT_OUT and (op, f) not in LEFT_OUT)
        if missing:
            problems.append(f"{flavor} SDK never sends {op}'s body fields {missing} (methods: {REACHABLE.get(op)})")
        unknown = sorted(f for f in got - fields if _parent(f) == "" or any(x.startswith(_parent(f)) for x in fields))
        if unknown:
            problems.append(f"{flavor} SDK sends {op} fields the spec does not have: {unknown}")
        stale = sorted(f for (o, f) in LEFT_OUT if o == op and (f in got or f not in fields))
        if stale:
            problems.append(f"LEFT_OUT entries of {op} that are sent or no longer in the spec: {stale}")
    for op in sorted(ops):
        q = queries.get(op, set())
        missing = sorted(ops[op].query - q - {f for (o, f) in LEFT_OUT_QUERY if o == op})
        if missing:
            problems.append(f"{flavor} SDK never sends {op}'s query parameters {missing} (methods: {REACHABLE.get(op)})")
        unknown = sorted(q - ops[op].query)
        if unknown:
            problems.append(f"{flavor} SDK sends {op} query parameters the spec does not have: {unknown}")
        stale = sorted(f for (o, f) in LEFT_OUT_QUERY if o == op and (f in q or f not in ops[op].query))
        if stale:
            problems.append(f"LEFT_OUT_QUERY entries of {op} that are sent or no longer in the spec: {stale}")
    assert not problems, "requests that do not match hostd/api/openapi.yaml:\n  " + "\n  ".join(problems)


def test_sync_methods_send_their_requests(recorder: Recorder, tmp_path: Path) -> None:
    check(run_all(recorder, "", tmp_path), "Python")


def test_async_methods_send_their_requests(recorder: Recorder, tmp_path: Path) -> None:
    check(run_all(recorder, "Async", tmp_path), "Python async")


def test_tables_are_current() -> None:
    ops = spec_ops()
    stale = [k for k in LEFT_OUT if ops.get(k[0]) is None or ops[k[0]].fields is None or k[1] not in ops[k[0]].fields]
    stale += [k for k in LEFT_OUT_QUERY if ops.get(k[0]) is None or k[1] not in ops[k[0]].query]
    assert not stale, f"LEFT_OUT entries no longer in the spec: {stale}"
    assert all(LEFT_OUT.values()) and all(LEFT_OUT_QUERY.values()), "every left-out field needs a reason"
    assert not set(VARIANTS) - set(methods()), f"VARIANTS of no REACHABLE method: {set(VARIANTS) - set(methods())}"
    params = {p for m in methods() for flavor in ("", "Async")
              for p in inspect.signature(getattr(getattr(agentbox, flavor + m.split(".")[0]), m.split(".")[1])).parameters}
    unused = sorted(k for k in VALUES if k.split(":")[-1] not in params | DIRS)
    assert not unused, f"VALUES entries no method has as a parameter: {unused}"
