"""Directory listings come in pages; the SDK follows their cursor."""

from __future__ import annotations

import pytest

from agentbox import AsyncClient, Sandbox

N = 2500


def _make(sb: Sandbox, d: str) -> None:
    r = sb.run(f"mkdir {d} && cd {d} && seq -f f%04g 0 {N - 1} | xargs touch")
    assert r.exit_code == 0, r.stderr


def test_list_follows_the_cursor(sb: Sandbox) -> None:
    _make(sb, "/root/pages-sync")
    pages = list(sb.files.pages("/root/pages-sync", limit=1000))
    assert [len(p) for p in pages] == [1000, 1000, 500]
    names = [e.name for p in pages for e in p]
    assert names == [f"f{i:04d}" for i in range(N)]
    assert [e.name for e in sb.files.list("/root/pages-sync")] == names


@pytest.mark.asyncio
async def test_async_list_follows_the_cursor(sb: Sandbox) -> None:
    _make(sb, "/root/pages-async")
    async with AsyncClient() as c:
        f = (await c.get(sb.id)).files
        sizes = [len(p) async for p in f.pages("/root/pages-async", limit=1000)]
        assert sizes == [1000, 1000, 500]
        assert len(await f.list("/root/pages-async")) == N
