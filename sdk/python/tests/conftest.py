"""Fixtures of the SDK suite. It runs against a real hostd: AGENTBOX_URL and
AGENTBOX_API_KEY (or AGENTBOX_DATA_DIR) must point at one; sdk/sdktest (Go,
tag vm) starts one, creates the template AGENTBOX_TEMPLATE that sandboxes
here start from (a restore, not a cold boot) and runs this suite."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from agentbox import Client, Sandbox


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("AGENTBOX_URL"):
        raise pytest.UsageError("AGENTBOX_URL is not set: these tests need a running hostd (see sdk/sdktest)")


@pytest.fixture(scope="session")
def client() -> Iterator[Client]:
    """A client of the test hostd."""
    with Client() as c:
        yield c


@pytest.fixture(scope="module")
def sb(client: Client) -> Iterator[Sandbox]:
    """One sandbox per test module (from the default template)."""
    with client.sandbox(metadata={"suite": "python"}) as s:
        yield s
