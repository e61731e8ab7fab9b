"""Runs every ```python block of sdk/python/README.md (in order, in one
namespace) and of the top-level README.md against the test hostd."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def blocks(path: Path) -> list:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), re.M | re.S)


def run_blocks(path: Path) -> None:
    bs = blocks(path)
    assert bs, f"{path} has no python examples"
    ns: dict = {"__name__": "__readme__"}
    for i, code in enumerate(bs):
        try:
            exec(compile(code, f"{path.name}[block {i + 1}]", "exec"), ns)
        except Exception as e:
            raise AssertionError(f"{path.name} block {i + 1} failed: {e!r}\n{code}") from e


def test_sdk_readme() -> None:
    run_blocks(ROOT / "sdk" / "python" / "README.md")


def test_top_readme() -> None:
    run_blocks(ROOT / "README.md")
