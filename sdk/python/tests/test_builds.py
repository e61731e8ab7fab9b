"""Image builds over the API (with progress) and mounts as create's parameter."""

from __future__ import annotations

import os

import pytest

from agentbox import BuildEvent, Client, Mount


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
