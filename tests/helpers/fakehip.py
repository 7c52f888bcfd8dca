"""The stand-in libamdhip64 (tests/native/fakehip.c): built, found, and pointed at. Standard
library only: `python3 dev.py fakehip` uses it before .venv exists.

The stand-in is for the tests: IREE's real hip driver loads it and runs its whole host side on
host memory, with kernels counted, not run (see the C file for what it is and is not)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "native" / "fakehip.c"
LIBRARY = "libamdhip64.so"
DEVICE_NAME = "iree-stress stand-in HIP device (kernels not run)"
ENV_DYLIB = "IREE_HIP_DYLIB_PATH"
# where builds go (one folder per source hash: a stale library is never reused)
CACHE = Path(os.environ.get("IREE_STRESS_FAKEHIP_DIR", REPO / ".cache" / "fakehip"))


class NoCompiler(RuntimeError):
    """No C compiler on PATH (the tests skip; dev.py says so)."""


def build(folder: Path | None = None) -> Path:
    """libamdhip64.so built from the C file into `folder` (default: CACHE/<source hash>/);
    reused when already built from the same source."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = (folder or CACHE / digest) / LIBRARY
    if out.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise NoCompiler("no C compiler (cc or gcc) on PATH to build the stand-in HIP library")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{LIBRARY}.{os.getpid()}")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-g", "-fvisibility=hidden", "-o", str(tmp),
                    str(SOURCE), "-lpthread"], check=True, capture_output=True)
    tmp.rename(out)  # atomic: a concurrent build of the same source finds a whole file
    return out


def dylib_env(library: Path) -> str:
    """IREE_HIP_DYLIB_PATH's value binding exactly `library` (a bare path is taken for a
    folder to search)."""
    return f"file:{library}"
