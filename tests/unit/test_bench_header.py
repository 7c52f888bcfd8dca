"""bench/_common.header: a committed output names the commit it measured, and says when the
code it measured differs from that commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import _common  # noqa: E402


def test_a_changed_native_library_source_marks_the_header_uncommitted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The HIP fault matrix measures the stand-in built from tests/native/fakehip.c: a header
    naming a clean commit while that file was edited names code that was not measured."""
    src = tmp_path / "tests" / "native" / "fakehip.c"
    src.parent.mkdir(parents=True)
    src.write_text("int x;\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    monkeypatch.setattr(_common, "ROOT", tmp_path)
    assert "uncommitted" not in _common.header()
    src.write_text("int y;\n")
    assert "+ uncommitted changes" in _common.header()
