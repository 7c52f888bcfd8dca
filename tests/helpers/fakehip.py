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


def build(folder: Path | None = None, fault: str = "", prob: float = 1.0) -> Path:
    """libamdhip64.so built from the C file into `folder` (default: CACHE/<source hash>/);
    reused when already built from the same source. `fault`: one of the stand-in's faults
    compiled in, on with probability `prob` unless the environment says otherwise (a library
    that is bad by itself, as a broken nightly is; its bytes differ from a clean build's)."""
    defines = [f'-DFAKEHIP_DEFAULT_FAULT="{fault}"', f'-DFAKEHIP_DEFAULT_PROB="{prob:g}"'] \
        if fault else []
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(defines).encode()).hexdigest()[:16]
    out = (folder or CACHE / digest) / LIBRARY
    if out.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise NoCompiler("no C compiler (cc or gcc) on PATH to build the stand-in HIP library")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{LIBRARY}.{os.getpid()}")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-g", "-fvisibility=hidden", *defines, "-o",
                    str(tmp), str(SOURCE), "-lpthread"], check=True, capture_output=True)
    tmp.rename(out)  # atomic: a concurrent build of the same source finds a whole file
    return out


def rocm_tarball(library: Path, out: Path) -> Path:
    """A TheRock-like tarball holding `library` as lib/libamdhip64.so.7 with the usual
    unversioned link beside it (what a stack's `rocm = "...tar.gz"` unpacks)."""
    import tarfile
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "lib"
        lib.mkdir()
        shutil.copy(library, lib / f"{LIBRARY}.7")
        (lib / LIBRARY).symlink_to(f"{LIBRARY}.7")
        with tarfile.open(out, "w:gz") as tf:
            tf.add(lib, arcname="lib")
    return out


def dylib_env(library: Path) -> str:
    """IREE_HIP_DYLIB_PATH's value binding exactly `library` (a bare path is taken for a
    folder to search)."""
    return f"file:{library}"


def runtime_library() -> Path:
    """The installed iree-base-runtime's native library (where its hip driver lives)."""
    import iree._runtime_libs as libs

    found = sorted(Path(libs.__file__).parent.glob("_runtime*.so"))
    if not found:
        raise FileNotFoundError("no _runtime*.so in the installed iree._runtime_libs")
    return found[0]


def required_symbols(runtime: Path) -> list[str]:
    """The HIP entry points the runtime's hip driver resolves by name: the `hip*` function
    names in its strings (its error-code names, hipError*/hipSuccess, are no symbols)."""
    import re

    names = set(re.findall(rb"(?<![A-Za-z0-9_])(hip[A-Z][A-Za-z0-9_]+)\x00", runtime.read_bytes()))
    return sorted(n.decode() for n in names if not n.startswith((b"hipError", b"hipSuccess")))


def missing_symbols(library: Path, runtime: Path) -> list[str]:
    """One line per HIP symbol the runtime's driver resolves that `library` does not export
    (empty: IREE's driver can load it)."""
    import ctypes

    lib = ctypes.CDLL(str(library))
    return [f"missing HIP symbol {name} (resolved by {runtime.name}'s hip driver)"
            for name in required_symbols(runtime) if not hasattr(lib, name)]
