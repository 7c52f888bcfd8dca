"""`iree-stress --version`: ours, and the runtime and compiler a soak started here would use
(the runtime of this interpreter, the iree-compile that `compile` would find)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from stress import __version__
from stress.analysis.header import short_revision
from stress.errors import UsageError

_COMPILER_TIMEOUT_S: float = 20.0  # `iree-compile --version` answers in well under a second


def runtime() -> str:
    """This interpreter's IREE runtime, from its version file (read, not imported: importing
    loads the native binding)."""
    try:
        spec = importlib.util.find_spec("iree._runtime_libs")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return "not installed in this interpreter (pip install iree-base-runtime)"
    folder = Path(next(iter(spec.submodule_search_locations)))
    from stress.engine.nativetools import NativeTools, tool_facts

    facts = tool_facts(NativeTools(folder))
    revs = ", ".join(f"{k} {short_revision(str(v))}"
                     for k, v in sorted((facts.get("iree_revisions") or {}).items()))
    return (f"{facts.get('iree_runtime', 'unknown version')}"
            f"{f' ({revs})' if revs else ''} from {folder}")


def compiler() -> str:
    from stress.programs.compiler import find_compiler

    try:
        path = find_compiler()
    except UsageError:
        return "not found (pip install iree-base-compiler; soaks can use --artifacts)"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=_COMPILER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path} (--version failed: {exc})"
    text = out.stdout + out.stderr
    marker = "IREE compiler version "
    line = next((x.strip() for x in text.splitlines() if marker in x), "")
    version = line.split(marker, 1)[1] if line else "unknown version"
    v, _, rev = version.partition(" @ ")
    return f"{v}{f' @ {short_revision(rev)}' if rev else ''} ({path})"


def describe() -> str:
    return "\n".join([f"iree-stress {__version__} (Python {sys.version.split()[0]}, "
                      f"{sys.executable})", f"runtime: {runtime()}", f"compiler: {compiler()}"])
