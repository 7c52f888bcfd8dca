"""Evidence before the kill: telemetry, then every thread's native + Python stack, then
SIGTERM -> grace -> SIGKILL of the process group, then telemetry again."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stress.programs.cache import atomic_write

if TYPE_CHECKING:
    from stress.engine.config import SoakConfig
    from stress.engine.jobs import Job

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


def repro_command(cfg: SoakConfig, job: Job | None) -> str:
    """The soak command that reruns a failing job's program, pattern and input seed."""
    argv = ["iree-stress", "soak", "--target", cfg.target.name, "--device", cfg.device_uri,
            "--workers", "1", "--threads", str(cfg.threads), "--seed", str(cfg.seed)]
    if job is not None:
        argv += ["--programs", job.program, "--patterns", job.pattern,
                 "--job-seed", str(job.seed), "--duration", "60s"]
    for spec in cfg.inject:
        argv += ["--inject", spec]
    for k, v in cfg.env.items():
        argv += ["--env", f"{k}={v}"]
    return shlex.join(argv)


def write_folder(folder: Path, cfg: SoakConfig, stderr_tail: str, stdout_tail: str,
                 job: Job | None, journal_text: str, extra: dict[str, str]) -> None:
    """One failure's folder: output tails, journal, job, repro script, plus `extra` files."""
    files = {"stderr.tail": stderr_tail, "stdout.tail": stdout_tail,
             "journal.txt": journal_text,
             "job.json": json.dumps(job.as_dict() if job else None, indent=1),
             "repro.sh": "#!/bin/sh\n# Reruns the failing job's program, pattern and input "
                         "seed.\n" + repro_command(cfg, job) + "\n", **extra}
    for name, text in files.items():
        atomic_write(folder / name, text.encode())
