"""dev.py, the README's quick start (issue 28, item 2): it says what it does at once and shows
the install as it goes (the first `dev.py soak` was silent for ~90 s while pip ran). Here in
a copy of the checkout whose .venv python is a stand-in that prints what pip prints."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.system

FAKE_PYTHON = """#!/bin/sh
if [ "$2" = pip ]; then
  echo "Obtaining file://$PWD"
  echo "Collecting numpy>=1.24"
  echo "Collecting click>=8.1"
  echo "Installing collected packages: numpy, click"
  echo "Successfully installed click numpy"
  exit 0
fi
echo "ran: $*"
"""


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "stress").mkdir(parents=True)
    for name in ("dev.py", "pyproject.toml", "stress/__init__.py", "stress/ui.py"):
        shutil.copy(REPO / name, root / name)
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return root


def test_dev_py_says_what_it_does_before_and_while_pip_installs(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    res = subprocess.run([sys.executable, str(root / "dev.py"), "test", "-k", "x"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0].startswith("dev.py: pyproject.toml changed: reinstalling")
    assert any(ln.startswith("dev.py: installing into .venv, ") and "package step(s): " in ln
               for ln in lines)  # pip's progress, said while it runs
    assert any(ln.startswith("dev.py: .venv ready in") for ln in lines)
    assert lines[-1] == "dev.py: python -m pytest -m 'not slow' -k x"  # the command, then it
    assert res.stdout.strip() == "ran: -m pytest -m not slow -k x"
    again = subprocess.run([sys.executable, str(root / "dev.py"), "lint"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "installing" not in again.stderr  # installed once: only the command is said
    assert again.stderr.startswith("dev.py: python -m ruff check")
