"""Simulated TheRock nightlies with a real fault (issue 38's end to end): each nightly's
libamdhip64.so.7 built from tests/native/nightlyhip.c (from FIRST_BAD on it segfaults at the
exit of FAULT_PCT% of the processes that used it; SAME are one build, byte-identical), and
tests/native/fusilli_like.c, a small fusilli-shaped test program linked to it with no rpath
(the stack's ROCm tree gives it one). Served by tests/helpers/nightly_index.py."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from tests.helpers.nightly_index import Nightly

REPO = Path(__file__).resolve().parents[2]
BUILDS: list[str] = ["7.11.0a20251124", "7.11.0a20251125", "7.11.0a20251125+bkc.20251126",
                     "7.11.0a20251126", "10.0.0a20251127", "10.0.0a20251128", "10.0.0a20251201",
                     "10.0.0a20251202", "10.0.0a20251203"]
NIGHTLIES: list[str] = [b for b in BUILDS if "bkc" not in b]  # 8, in build-date order
FIRST_BAD: str = "10.0.0a20251201"  # K
SAME: tuple[str, str] = ("10.0.0a20251127", "10.0.0a20251128")  # one build, just before K
FAULT_PCT: int = 40  # processes whose exit segfaults under K and after


def cc() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def build_library(folder: Path, build_id: str, fault_pct: int) -> bytes:
    """nightlyhip.c as one nightly's libamdhip64.so.7 (its own bytes per build id)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "libamdhip64.so"
    subprocess.run([cc() or "cc", "-shared", "-fPIC", "-O1", "-Wl,-soname,libamdhip64.so.7",
                    f"-DEXIT_FAULT_PCT={fault_pct}", f'-DBUILD_ID="{build_id}"', "-o",
                    str(out), str(REPO / "tests" / "native" / "nightlyhip.c"), "-lpthread"],
                   check=True)
    return out.read_bytes()


def is_bad(version: str) -> bool:
    return NIGHTLIES.index(version.split("+")[0]) >= NIGHTLIES.index(FIRST_BAD)


def simulated_nightlies(work: Path) -> list[Nightly]:
    """BUILDS as nightlies: libraries built under `work`, TheRock manifests whose
    rocm-systems pin moves at FIRST_BAD."""
    out = []
    for v in BUILDS:
        source = SAME[0] if v in SAME else v  # the identical pair: one build id, one library
        pins = {"TheRock": hashlib.sha1(f"rock {source}".encode()).hexdigest(),
                "rocm-systems": hashlib.sha1(f"systems bad={is_bad(v)}".encode()).hexdigest(),
                "rocm-libraries": hashlib.sha1(b"libraries").hexdigest()}
        lib = build_library(work / "builds" / source, source, FAULT_PCT if is_bad(v) else 0)
        out.append(Nightly(v, library=lib, pins=pins))
    return out


def program(work: Path, library: bytes) -> Path:
    """fusilli_like.c linked against libamdhip64.so.7 with no rpath."""
    (work / "link").mkdir(parents=True, exist_ok=True)
    (work / "link" / "libamdhip64.so").write_bytes(library)
    out = work / "fusilli_like"
    subprocess.run([cc() or "cc", "-O1", "-o", str(out),
                    str(REPO / "tests" / "native" / "fusilli_like.c"), "-L",
                    str(work / "link"), "-lamdhip64"], check=True)
    return out
