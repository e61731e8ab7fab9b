"""Pieces that need no hostd: archive safety, errors, request bodies."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from pathlib import Path

import pytest

from agentbox import AgentboxError, Conflict, NotFound, SandboxNotRunning
from agentbox._core import ExecReader, argv, exec_body, untar_safely
from agentbox._errors import error_from_response


def _tar(*members: tarfile.TarInfo) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for m in members:
            tf.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("name,kind,link", [
    ("../evil", tarfile.REGTYPE, ""),
    ("/abs", tarfile.REGTYPE, ""),
    ("a/../../evil", tarfile.REGTYPE, ""),
    ("ln", tarfile.SYMTYPE, "/etc/passwd"),
    ("ln", tarfile.SYMTYPE, "../../x"),
    ("hard", tarfile.LNKTYPE, "x"),
    ("dev", tarfile.CHRTYPE, ""),
])
def test_hostile_archives_refused(tmp_path: Path, name: str, kind: bytes, link: str) -> None:
    m = tarfile.TarInfo(name)
    m.type, m.linkname = kind, link
    m.size = 1 if kind == tarfile.REGTYPE else 0
    with pytest.raises(AgentboxError):
        untar_safely(_tar(m), tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_archive_extracts(tmp_path: Path) -> None:
    d = tarfile.TarInfo("d")
    d.type = tarfile.DIRTYPE
    f = tarfile.TarInfo("d/f")
    f.size = 3
    s = tarfile.TarInfo("d/s")
    s.type, s.linkname = tarfile.SYMTYPE, "f"
    assert untar_safely(_tar(d, f, s), tmp_path) == 3
    assert (tmp_path / "d" / "s").read_bytes() == b"xxx"


def test_errors_map() -> None:
    e = error_from_response(404, b'{"error":{"code":"file_not_found","message":"gone"}}')
    assert isinstance(e, NotFound) and (e.code, e.message, e.status) == ("file_not_found", "gone", 404)
    assert isinstance(error_from_response(409, b'{"error":{"code":"sandbox_not_running","message":""}}'), SandboxNotRunning)
    assert isinstance(error_from_response(409, b'{"error":{"code":"file_exists","message":""}}'), Conflict)
    assert error_from_response(502, b"bad gateway").code == "http_error"


def test_bodies() -> None:
    assert argv("echo hi") == ["sh", "-c", "echo hi"]
    assert argv(["ls", 1]) == ["ls", "1"]  # type: ignore[list-item]
    assert exec_body("x", "/tmp", {"A": "1"}, "in", 1.5) == {"cmd": ["sh", "-c", "x"], "cwd": "/tmp", "env": {"A": "1"}, "stdin": "in", "timeout_s": 2}


def test_exec_output_not_utf8() -> None:
    # Output that is not UTF-8 (a byte 0xff, a rune cut across two events)
    # comes back exact in stdout_bytes; stdout is its text with U+FFFD, and
    # the callback gets the text as it goes (issue 38 #11).
    got = []
    r = ExecReader(on_stdout=got.append)
    for line in (
        {"type": "start", "exec_id": "e1"},
        {"type": "stdout", "data": base64.b64encode(b"\x00bin\xff\xe2\x82").decode()},
        {"type": "stdout", "data": base64.b64encode(b"\xac").decode()},
        {"type": "stderr", "data": base64.b64encode("w\u00e4rn".encode()).decode()},
        {"type": "exit", "exit_code": 0},
    ):
        r.feed(json.dumps(line))
    res = r.result()
    assert res.stdout_bytes == b"\x00bin\xff\xe2\x82\xac"
    assert res.stdout == "\x00bin\ufffd\u20ac" and "".join(got) == res.stdout
    assert (res.stderr, res.stderr_bytes) == ("w\u00e4rn", "w\u00e4rn".encode())
