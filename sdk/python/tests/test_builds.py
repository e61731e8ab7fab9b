"""Image, Dockerfile and blueprint builds over the API (with progress), and
mounts as create's parameter."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from agentbox import AsyncClient, BuildEvent, Client, InvalidRequest, Mount


def test_build_image_with_progress(client: Client) -> None:
    image = os.environ.get("AGENTBOX_TEST_IMAGE")
    if not image:
        pytest.skip("AGENTBOX_TEST_IMAGE is set by sdk/sdktest")
    events: list = []
    t = client.templates.build_image("py-busybox", image, on_progress=events.append)
    try:
        assert t.name == "py-busybox" and t.image and t.image["ref"] == image
        assert events and all(isinstance(e, BuildEvent) and e.type == "progress" for e in events)
        assert "snapshot" in {e.phase for e in events}
        with client.sandbox(template="py-busybox") as sb:
            assert sb.run("echo hi from busybox").stdout == "hi from busybox\n"
    finally:
        client.templates.delete("py-busybox")


def test_create_with_mounts(client: Client) -> None:
    host = os.environ.get("AGENTBOX_TEST_MOUNT_DIR")
    if not host:
        pytest.skip("AGENTBOX_TEST_MOUNT_DIR is set by sdk/sdktest")
    m: Mount = {"type": "host", "source": host, "path": "/mnt/shared", "read_only": True}
    with client.sandbox(mounts=[m]) as sb:
        assert sb.files.read("/mnt/shared/hello.txt", format="text") == "from the host\n"
        assert sb.run("touch /mnt/shared/x").exit_code != 0


def test_build_dockerfile_with_context(client: Client, tmp_path: Path) -> None:
    base = os.environ["AGENTBOX_TEMPLATE"]
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "hello.txt").write_text("hello from the context\n")
    (tmp_path / "Dockerfile").write_text(
        f"FROM template:{base}\nARG WHO=nobody\nCOPY app/ /opt/app/\nRUN echo built by $WHO > /opt/app/who\n")
    events: list = []
    t = client.templates.build("py-df", dockerfile=tmp_path / "Dockerfile", build_args={"WHO": "py"},
                               on_progress=events.append)
    try:
        assert t.name == "py-df"
        lines = [e.line for e in events if e.type == "log"]
        # "[1/2] CACHED COPY" when an earlier build (the suite's other run) cached that step.
        assert any(re.match(r"\[1/2\] (CACHED )?COPY", line) for line in lines), lines
        with client.sandbox(template="py-df") as sb:
            assert sb.run("cat /opt/app/hello.txt /opt/app/who").stdout == "hello from the context\nbuilt by py\n"
        # Again: every step is cached.
        again: list = []
        client.templates.build("py-df", dockerfile=tmp_path / "Dockerfile", build_args={"WHO": "py"}, on_progress=again.append)
        assert sum("CACHED" in e.line for e in again) == 2
    finally:
        client.templates.delete("py-df")


def test_build_refuses_a_bad_dockerfile(client: Client) -> None:
    with pytest.raises(InvalidRequest):
        client.templates.build("py-bad", dockerfile="FROM scratch\nRUN true\n")


def test_async_build_blueprint() -> None:
    base = os.environ["AGENTBOX_TEMPLATE"]

    async def main() -> None:
        async with AsyncClient() as c:
            t = await c.templates.build("py-abp", {"template": base, "steps": [{"run": "echo async > /root/a"}]})
            try:
                assert t.name == "py-abp"
                sb = await c.create(template="py-abp")
                try:
                    assert (await sb.run("cat /root/a")).stdout == "async\n"
                finally:
                    await sb.delete()
            finally:
                await c.templates.delete("py-abp")

    asyncio.run(main())
