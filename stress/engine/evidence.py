"""Evidence before the kill: telemetry, then every thread's native + Python stack, then
SIGTERM -> grace -> SIGKILL of the process group, then telemetry again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_PYSPY_TIMEOUT_S: float = 15.0  # attaching + unwinding natively takes ~1 s; more under load
_GDB_TIMEOUT_S: float = 20.0
_FAULTHANDLER_WAIT_S: float = 0.5  # for the worker's SIGUSR1 handler to write its stacks


@dataclass
class Stacks:
    tool: str
    text: str


def find_pyspy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def dump_stacks(pid: int, stderr_path: Path | None = None) -> Stacks:
    """py-spy --native, else gdb batch, else the worker's faulthandler (SIGUSR1)."""
    pyspy = find_pyspy()
    if pyspy:
        try:
            out = subprocess.run([pyspy, "dump", "--native", "--pid", str(pid)],
                                 capture_output=True, text=True, timeout=_PYSPY_TIMEOUT_S)
            if out.returncode == 0 and out.stdout.strip():
                return Stacks("py-spy dump --native", out.stdout)
        except (subprocess.TimeoutExpired, OSError):
            pass
    gdb = shutil.which("gdb")
    if gdb:
        try:
            out = subprocess.run([gdb, "-batch", "-nx", "-ex", "thread apply all bt", "-p",
                                  str(pid)], capture_output=True, text=True,
                                 timeout=_GDB_TIMEOUT_S)
            if "Thread" in out.stdout:
                return Stacks("gdb thread apply all bt", out.stdout)
        except (subprocess.TimeoutExpired, OSError):
            pass
    before = stderr_path.stat().st_size if stderr_path and stderr_path.exists() else 0
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return Stacks("none", "process gone before stacks could be taken")
    time.sleep(_FAULTHANDLER_WAIT_S)
    text = ""
    if stderr_path and stderr_path.exists():
        with open(stderr_path, "rb") as f:
            f.seek(before)
            text = f.read().decode(errors="replace")
    return Stacks("faulthandler (Python frames only)", text)
