"""The blocking client against a real hostd."""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from pathlib import Path

import pytest

import agentbox
from agentbox import Client, Sandbox


def test_one_call(client: Client) -> None:
    with client.sandbox() as s:
        assert s.run("python3 -c 'print(6*7)'").stdout == "42\n"
        sid = s.id
    with pytest.raises(agentbox.NotFound) as ei:
        client.get(sid)
    assert ei.value.code == "sandbox_not_found" and ei.value.status == 404


def test_deleted_on_exception(client: Client) -> None:
    with pytest.raises(RuntimeError):
        with client.sandbox() as s:
            sid = s.id
            raise RuntimeError("boom")
    assert sid not in [x.id for x in client.list()]


def test_health_and_system(client: Client) -> None:
    h = client.health()
    assert h.status == "ok" and h.vmm == "qemu"
    assert "operationId: createSandbox" in client.openapi()
    assert "agentbox" in client.metrics()


def test_get_list(client: Client, sb: Sandbox) -> None:
    assert client.get(sb.id).info.metadata == {"suite": "python"}
    assert sb.id in [x.id for x in client.list()]
    assert sb.refresh().state == "running"


def test_run(sb: Sandbox) -> None:
    r = sb.run("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("out\n", "err\n", 3, False)
    assert r.exec_id
    r = sb.run(["sh", "-c", 'echo "$A $PWD"; cat'], cwd="/tmp", env={"A": "a"}, stdin="in")
    assert r.ok and r.stdout == "a /tmp\nin"
    got: list = []
    r = sb.run("for i in 1 2 3; do echo $i; done", on_stdout=got.append)
    assert "".join(got) == "1\n2\n3\n" == r.stdout
    r = sb.run("sleep 30", timeout=1)
    assert not r.ok and r.signal == "SIGKILL"
    r = sb.run(["printf", "\\377\\000"])
    assert r.stdout_bytes == b"\xff\x00"


def test_errors(client: Client, sb: Sandbox) -> None:
    with pytest.raises(agentbox.ExecFailed) as ei:
        sb.run(["no-such-binary"])
    assert ei.value.code == "exec_failed"
    with pytest.raises(agentbox.NotFound) as nf:
        client.get("sb-nope")
    assert nf.value.code == "sandbox_not_found"
    with pytest.raises(agentbox.Unauthorized):
        Client(api_key="ab_wrong").list()
    with pytest.raises(agentbox.InvalidRequest) as ir:
        sb.files.read("relative/path")
    assert ir.value.code in ("bad_path", "invalid_param")


def test_background_attach_kill(sb: Sandbox) -> None:
    h = sb.run("for i in 1 2 3; do echo line$i; sleep 0.2; done", background=True)
    assert h.exec_id
    chunks = [o for o in h]
    assert b"".join(o.data for o in chunks) == b"line1\nline2\nline3\n"
    assert h.exit_code == 0
    again = sb.attach(h.exec_id, offset=6).wait()
    assert again.stdout == "line2\nline3\n"
    assert any(s.exec_id == h.exec_id and not s.running for s in sb.execs())
    k = sb.run("sleep 60", background=True)
    k.kill("SIGTERM")
    r = k.wait()
    assert r.signal == "SIGTERM" and not r.ok


def test_pty(sb: Sandbox) -> None:
    with sb.pty("sh", rows=30, cols=100) as p:
        p.write("stty size; exit 4\n")
        out = b""
        for b in p:
            out += b
        assert b"30 100" in out
        assert p.wait() == 4


def test_files(sb: Sandbox, tmp_path: Path) -> None:
    f = sb.files
    f.mkdir("/root/sdk/a")
    f.write("/root/sdk/a/b.txt", "hello")
    assert f.read("/root/sdk/a/b.txt") == b"hello"
    assert f.read("/root/sdk/a/b.txt", format="text") == "hello"
    f.write("/root/sdk/bin.dat", io.BytesIO(os.urandom(1) * 0 + bytes(range(256)) * 4096), mode=0o600)
    st = f.stat("/root/sdk/bin.dat")
    assert st.size == 1 << 20 and st.mode & 0o777 == 0o600
    with f.read("/root/sdk/bin.dat", format="stream") as s:
        assert sum(len(c) for c in s) == 1 << 20
    f.write("/root/sdk/gen.txt", (b"x" * 10 for _ in range(3)))
    assert f.read("/root/sdk/gen.txt") == b"x" * 30
    assert {e.name for e in f.list("/root/sdk")} == {"a", "bin.dat", "gen.txt"}
    assert f.exists("/root/sdk/a") and not f.exists("/root/sdk/nope")
    f.mkdir("/root/sdk/d/e")
    f.move("/root/sdk/gen.txt", "/root/sdk/d/gen.txt")
    assert f.exists("/root/sdk/d/gen.txt")
    with pytest.raises(agentbox.Conflict) as ei:
        f.remove("/root/sdk/d")
    assert ei.value.code == "directory_not_empty"
    f.remove("/root/sdk/d", recursive=True)
    with pytest.raises(agentbox.NotFound) as nf:
        f.read("/root/sdk/d/gen.txt")
    assert nf.value.code == "file_not_found"


def test_dirs(sb: Sandbox, tmp_path: Path) -> None:
    sb.files.write("/root/new/parents/f.txt", "p")  # parents are created
    assert sb.files.read("/root/new/parents/f.txt") == b"p"
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "top.txt").write_text("top")
    (src / "sub" / "x.bin").write_bytes(b"\x00" * 5000)
    res = sb.files.upload_dir(src, "/root/up")
    assert res["entries"] >= 3
    assert sb.run("cat /root/up/top.txt; wc -c < /root/up/sub/x.bin").stdout == "top5000\n"
    dst = tmp_path / "dst"
    n = sb.files.download_dir("/root/up", dst)
    assert n >= 3
    assert (dst / "top.txt").read_text() == "top" and (dst / "sub" / "x.bin").stat().st_size == 5000


def test_watch(client: Client, sb: Sandbox) -> None:
    sb.run("mkdir -p /root/w")
    stop = threading.Event()

    def touch() -> None:  # the watch starts a moment after it answers: repeat until seen
        for _ in range(60):
            if stop.wait(0.5):
                return
            sb.run("echo n >> /root/w/new.txt")

    with Client(timeout=60).get(sb.id).files.watch("/root/w") as w:  # a read timeout: never hang
        t = threading.Thread(target=touch)
        t.start()
        try:
            for ev in w:
                if ev.path == "/root/w/new.txt":
                    assert ev.type in ("create", "modify") and not ev.is_dir
                    break
        finally:
            stop.set()
            t.join()


def test_lifecycle(client: Client, sb: Sandbox) -> None:
    sb.files.write("/root/mark", "snap")
    snap = sb.snapshot()
    assert snap.id and snap.sandbox_id == sb.id
    assert client.snapshots.get(snap.id).id == snap.id
    assert snap.id in [s.id for s in client.snapshots.list()]
    with client.sandbox(snapshot=snap.id) as s2:
        assert s2.files.read("/root/mark") == b"snap"
    forks = sb.fork(2)
    try:
        assert len(forks) == 2 and len({f.id for f in forks}) == 2
        assert all(f.run("cat /root/mark").stdout == "snap" for f in forks)
        p = forks[0].pause()
        assert p.state == "paused"
        assert forks[0].resume().state == "running"
        assert forks[0].run("echo back").stdout == "back\n"
    finally:
        for f in forks:
            f.delete()
    assert sb.extend(600).info.deadline
    u = sb.usage()
    assert u.cpu_seconds > 0 and u.bytes_in > 0


def test_ports(sb: Sandbox) -> None:
    u = sb.url(8000)
    assert "/ports/8000/" in u and "token=" in u
    assert sb.port(8000).public is False
    assert sb.set_public(8000, True).public is True
    assert "token=" not in sb.url(8000)
    sb.set_public(8000, False)
    link = sb.share(8000, 60)
    assert link.token and link.expires_at
    assert "token=" in sb.url(8000, share=60)


def test_network(sb: Sandbox) -> None:
    pol = sb.network.get()
    assert pol.mode == "proxy"
    pol = sb.network.update(allow_domains=["example.com"], allow_ports=[443])
    assert pol.allow_domains == ["example.com"] and pol.allow_ports == [443]


def test_events(sb: Sandbox) -> None:
    sb.run("echo recorded")
    evs = list(sb.events(types=["exec"]))
    assert evs and all(e.type == "exec" for e in evs)
    assert any(e.detail.get("argv") == ["sh", "-c", "echo recorded"] for e in evs)
    assert len(list(sb.events(limit=2))) == 2
    for e in sb.events(types=["exec"], follow=True):
        assert e.type == "exec"
        break


def test_secrets(client: Client) -> None:
    s = client.secrets.set("sdk-py", "value")
    assert s.name == "sdk-py"
    assert "sdk-py" in [x.name for x in client.secrets.list()]
    with client.sandbox(secret_env={"TOKEN": "sdk-py"}, network={"allow_domains": ["example.com"], "inject": [{"host": "example.com", "header": "Authorization", "value": "Bearer {{secret:sdk-py}}"}]}) as s2:
        tok = s2.run("echo $TOKEN").stdout.strip()
        assert tok and tok != "value"
    client.secrets.delete("sdk-py")
    with pytest.raises(agentbox.NotFound):
        client.secrets.delete("sdk-py")


def test_templates(client: Client, sb: Sandbox) -> None:
    snap = sb.snapshot()
    t = client.templates.create("sdk-py-t", snap.id)
    assert t.snapshot_id == snap.id
    assert client.templates.get("sdk-py-t").name == "sdk-py-t"
    assert "sdk-py-t" in [x.name for x in client.templates.list()]
    client.templates.delete("sdk-py-t")
    # the snapshot stays: sb now overlays it (deleting it answers 409)
    with pytest.raises(agentbox.Conflict):
        client.snapshots.delete(snap.id)


def test_template_build(client: Client) -> None:
    base = os.environ["AGENTBOX_TEMPLATE"]
    lines: list = []
    t = client.templates.build(
        "sdk-py-built",
        {"template": base, "steps": [{"run": "echo built > /root/built"}, {"env": {"BUILT": "yes"}}]},
        on_progress=lines.append,
    )
    try:
        assert t.name == "sdk-py-built" and lines
        with client.sandbox(template="sdk-py-built") as s:
            assert s.run("cat /root/built; echo $BUILT").stdout == "built\nyes\n"
    finally:
        client.templates.delete("sdk-py-built")
