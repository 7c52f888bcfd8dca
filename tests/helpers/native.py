"""Small native programs the system tests build from tests/native/ (skipped without a C
compiler)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build_flaky(folder: Path) -> Path:
    """tests/native/flaky.c built into `folder` (skips the test without a C compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = folder / "flaky"
    subprocess.run([cc, "-O0", "-g", "-pthread", "-o", str(out),
                    str(REPO / "tests" / "native" / "flaky.c")], check=True)
    return out
