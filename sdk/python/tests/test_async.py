"""The asyncio client against a real hostd (the same surface as the sync one)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agentbox
from agentbox import AsyncClient, Sandbox


@pytest.mark.asyncio
async def test_one_call_async() -> None:
    async with AsyncClient() as c:
        async with c.sandbox() as sb:
            assert (await sb.run("python3 -c 'print(6*7)'")).stdout == "42\n"
            sid = sb.id
        with pytest.raises(agentbox.NotFound):
            await c.get(sid)
        with pytest.raises(RuntimeError):
            async with c.sandbox() as sb2:
                sid = sb2.id
                raise RuntimeError("boom")
        assert sid not in [s.id for s in await c.list()]


@pytest.mark.asyncio
async def test_exec_async(sb: Sandbox) -> None:
    async with AsyncClient() as c:
        s = await c.get(sb.id)
        r = await s.run(["sh", "-c", "echo out; echo err >&2; exit 2"])
        assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("out\n", "err\n", 2, False)
        got: list = []
        await s.run("echo a; echo b", on_stdout=got.append)
        assert "".join(got) == "a\nb\n"
        h = await s.run("echo one; sleep 0.3; echo two", background=True)
        assert b"".join([o.data async for o in h]) == b"one\ntwo\n"
        assert (await s.attach(h.exec_id, offset=4).wait()).stdout == "two\n"
        k = await s.run("sleep 60", background=True)
        await k.kill()
        assert (await k.wait()).signal == "SIGKILL"
        assert any(x.exec_id == h.exec_id for x in await s.execs())
        with pytest.raises(agentbox.ExecFailed):
            await s.run(["no-such-binary"])


@pytest.mark.asyncio
async def test_pty_async(sb: Sandbox) -> None:
    async with AsyncClient() as c:
        s = await c.get(sb.id)
        async with await s.pty("sh", rows=20, cols=70) as p:
            await p.write("stty size; exit 5\n")
            out = b"".join([b async for b in p])
            assert b"20 70" in out and await p.wait() == 5


@pytest.mark.asyncio
async def test_files_async(sb: Sandbox, tmp_path: Path) -> None:
    async with AsyncClient() as c:
        f = (await c.get(sb.id)).files
        await f.write("/root/async/x/y.txt", "hi")
        assert await f.read("/root/async/x/y.txt", format="text") == "hi"
        async with await f.read("/root/async/x/y.txt", format="stream") as st:
            assert await st.read() == b"hi"
        assert [e.name for e in await f.list("/root/async/x")] == ["y.txt"]
        assert (await f.stat("/root/async/x/y.txt")).size == 2
        assert await f.exists("/root/async/x") and not await f.exists("/root/async/no")
        await f.mkdir("/root/async/m")
        await f.move("/root/async/x/y.txt", "/root/async/m/y.txt")
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "f").write_text("f")
        assert (await f.upload_dir(tmp_path / "d", "/root/async/up"))["entries"] >= 1
        assert await f.download_dir("/root/async", tmp_path / "down") >= 3
        assert (tmp_path / "down" / "up" / "f").read_text() == "f"
        await f.remove("/root/async", recursive=True)
        assert not await f.exists("/root/async")


@pytest.mark.asyncio
async def test_lifecycle_async(sb: Sandbox) -> None:
    async with AsyncClient() as c:
        s = await c.get(sb.id)
        forks = await s.fork(1)
        try:
            assert (await forks[0].pause()).state == "paused"
            assert (await forks[0].resume()).state == "running"
        finally:
            await forks[0].delete()
        snap = await s.snapshot()
        assert (await c.snapshots.get(snap.id)).sandbox_id == s.id
        assert (await s.extend(300)).info.deadline
        assert (await s.usage()).bytes_in > 0
        assert "token=" in await s.url(8080)
        assert (await s.network.update(allow_domains=["a.example"])).allow_domains == ["a.example"]
        assert (await s.network.get()).mode == "proxy"
        evs = [e async for e in s.events(types=["lifecycle"])]
        assert evs and all(e.type == "lifecycle" for e in evs)
        async for e in s.events(follow=True):
            assert e.sandbox_id == s.id
            break
        await c.secrets.set("sdk-py-async", "v")
        assert "sdk-py-async" in [x.name for x in await c.secrets.list()]
        await c.secrets.delete("sdk-py-async")
        assert (await c.health()).status == "ok"
        assert isinstance(await c.templates.list(), list)


@pytest.mark.asyncio
async def test_compare_async(sb: Sandbox) -> None:
    async with AsyncClient() as c:
        s = await c.get(sb.id)
        await s.files.write("/root/cmp-async.txt", "one\n")
        (f,) = await s.fork(1)
        try:
            await f.run("echo two >> /root/cmp-async.txt")
            d = await f.diff(s, patch=True)
            entry = next(e for e in d["entries"] if e["path"] == "/root/cmp-async.txt")
            assert entry["status"] == "modified" and "+two" in entry["patch"]
            ids, todo = [], [(await f.lineage())["root"]]
            while todo:  # the whole tree: earlier tests may have made older snapshots of sb
                n = todo.pop()
                ids.append(n["id"])
                todo.extend(n.get("children") or [])
            assert f.id in ids and s.id in ids
            snap = await f.snapshot()
            r = await c.snapshots.replay(snap.id, "cat /root/cmp-async.txt", 2)
            assert not r["differ"] and r["runs"][0]["stdout"] == "one\ntwo\n"
        finally:
            await f.delete()
