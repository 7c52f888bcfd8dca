"""Call stacks the engine takes: which tool produced a stack (`StackSource`), every thread's
frames with the crashed thread (`Stacks`, parsed by `stress.stacktext`), and the tools
(gdb, cuda-gdb, rocgdb, py-spy) found and judged safe to attach. Shared by live-hang stacks
(`evidence.dump_stacks`) and post-mortem ones (`postmortem.native_stacks`)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from stress.engine import procstate
from stress.stacktext import ThreadStack


class StackSource(str, Enum):
    """Which path produced a stack, best first; a str, so it serializes to JSON as its value.
    Post-mortem (a dead process): core+gdb, core+pystack, core+py-spy (Python frames only),
    kernel-log (the faulting library and offset), faulthandler (Python frames from stderr).
    Live (a hung process): py-spy --native, gdb attach, faulthandler via SIGUSR1; py-spy
    --nonblocking (Python frames only) when a thread is in uninterruptible wait (D), where
    every ptrace stop, and so every native unwinder, blocks until the wait ends."""

    CORE_GDB = "core+gdb"
    CORE_PYSTACK = "core+pystack"
    CORE_PYSPY = "core+py-spy"
    KERNEL_LOG = "kernel-log"
    FAULTHANDLER = "faulthandler"
    PYSPY = "py-spy dump --native"
    PYSPY_NONBLOCKING = "py-spy dump --nonblocking"
    GDB_ATTACH = "gdb attach"
    NONE = "none"

    def __str__(self) -> str:
        return self.value

    def describe(self) -> str:
        native = self in (StackSource.CORE_GDB, StackSource.CORE_PYSTACK, StackSource.PYSPY,
                          StackSource.GDB_ATTACH)
        return f"{self.value} ({'native frames' if native else 'no native frames'})"


@dataclass
class Stacks:
    """Every thread's stack from one tool. `tool` says which path produced it; `text` is the
    raw tool output (several tools' outputs under `# <tool>` headers when more than one
    contributed, e.g. gdb's native frames then py-spy's Python frames of the same core);
    `threads` is that output parsed; `crashed_tid` the native id of the thread that took the
    fatal signal (from the core's notes, gdb, or the kernel's segfault line) and `signal` its
    number, both None for live stacks or when unknown; `core` the core file when kept;
    `note` why better paths were not taken."""

    tool: StackSource
    text: str
    crashed_tid: int | None = None
    core: Path | None = None
    core_bytes: int | None = None  # size of the core read (the kernel wrote it before the
    #   death was visible: a large core delays noticing the crash)
    threads: list[ThreadStack] = field(default_factory=list)
    signal: int | None = None
    note: str = ""
    tried: list[str] = field(default_factory=list)  # every tool tried, what it gave or why
    #   it was skipped (stacks.txt says them all)
    died: str | None = None  # the evidence step during which the process died
    fault_site: dict[str, Any] | None = None  # where it faulted, from its core's notes
    #   (`postmortem.fault_site`)

    def thread(self, tid: int | None) -> ThreadStack | None:
        for t in self.threads:
            if tid is not None and t.tid == tid:
                return t
        return None

    def crash_frames(self) -> list[str]:
        """The crashed thread's frames from the one that faulted outward: when the thread
        died re-raising from a handler (faulthandler's, then libc's raise/pthread_kill above
        gdb's "<signal handler called>"), those frames are cut off, so `crash_frames()[0]` is
        the function that took the signal. [] when unknown."""
        t = self.thread(self.crashed_tid)
        if t is None:
            return []
        frames = t.labels()
        for i, frame in enumerate(frames):
            if "signal handler called" in frame:
                if any(_RERAISE.search(f) for f in frames[:i]):
                    return frames[i + 1:]
                break  # it faulted inside a handler: the handler's frames are the crash
        return frames

    def summary(self) -> dict[str, Any]:
        """For failure.json: tool, crashed thread, signal, the crashing frames (top 12)."""
        return {"tool": self.tool.value, "crashed_tid": self.crashed_tid,
                "signal": procstate.signal_name(self.signal),
                "crash_frames": self.crash_frames()[:12], "note": self.note or None,
                "threads": len(self.threads), "core_bytes": self.core_bytes,
                **({"fault_site": self.fault_site} if self.fault_site else {})}

    def render(self) -> str:
        """stacks.txt: a header naming the tool and the crashed thread, then the raw text."""
        head = [f"# {self.tool.value}"]
        if self.crashed_tid is not None:
            sig = procstate.signal_name(self.signal) or (
                f"signal {self.signal}" if self.signal else "a signal")
            head.append(f"# thread {self.crashed_tid} took {sig}; crashing frames: "
                        + " < ".join(self.crash_frames()[:6]))
        if self.note:
            head.append(f"# note: {self.note}")
        head += [f"# tried: {t}" for t in self.tried]
        if self.died:
            head.append(f"# the process died during {self.died}")
        return "\n".join(head) + "\n" + self.text + ("" if self.text.endswith("\n") else "\n")


# Frames of a fatal-signal handler that re-raises (faulthandler, then libc's raise/kill).
_RERAISE = re.compile(r"faulthandler|raise|pthread_kill|^kill$|tgkill")


# ---- tools ------------------------------------------------------------------------------
PYSPY_ENV: str = "IREE_STRESS_PYSPY"  # a py-spy to use instead of the one found, or "none"


def find_gdb() -> str | None:
    """gdb, else cuda-gdb (a full gdb for host code too: the only one on the CUDA image of
    the H200 machines), else rocgdb, on PATH."""
    return shutil.which("gdb") or shutil.which("cuda-gdb") or shutil.which("rocgdb")


def find_pyspy() -> str | None:
    """$IREE_STRESS_PYSPY when set ("none" or empty: no py-spy), else py-spy beside this
    interpreter (a venv's bin), else on PATH."""
    chosen = os.environ.get(PYSPY_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "none") else chosen
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Debugger(str, Enum):
    """What a gdb found on PATH is, for live attaching: plain gdb reads a process through
    ptrace and nothing else; cuda-gdb attached to a process with the CUDA driver loaded injects
    its debugger library into it (seen on the H200: SIGSEGV in libcudadebugger.so
    `InitializeInjection`, killing the process); rocgdb takes AMD GPU debug control of a
    process with the ROCm runtime loaded (ROCdbgapi's process attach: the KFD debug trap, wave
    control), which changes the process under study. Both read core files safely."""

    GDB = "gdb"
    CUDA_GDB = "cuda-gdb"
    ROCGDB = "rocgdb"

    @property
    def gpu_libraries(self) -> tuple[str, ...]:
        """Mapped libraries that make a live attach by this debugger unsafe."""
        return {Debugger.GDB: (), Debugger.CUDA_GDB: ("libcuda.so",),
                Debugger.ROCGDB: ("libamdhip64.so", "libhsa-runtime64.so")}[self]


_KINDS: dict[str, Debugger] = {}


def debugger_kind(path: str) -> Debugger:
    """Which debugger `path` is: by its name, else by the first line of its `--version`
    (a `gdb` that is really cuda-gdb says "NVIDIA (R) CUDA Debugger"; rocgdb names ROCm).
    Memoised per path."""
    if path in _KINDS:
        return _KINDS[path]
    name = os.path.basename(path).lower()
    kind = Debugger.CUDA_GDB if "cuda" in name else Debugger.ROCGDB if "roc" in name else None
    if kind is None:
        run = procstate.run_bounded([path, "--version"], _VERSION_TIMEOUT_S)
        banner = (run.stdout.splitlines() or [""])[0].lower()
        kind = Debugger.CUDA_GDB if "cuda" in banner or "nvidia" in banner else \
            Debugger.ROCGDB if "rocm" in banner or "rocgdb" in banner else Debugger.GDB
    _KINDS[path] = kind
    return kind


_VERSION_TIMEOUT_S: float = 10.0  # `gdb --version` prints at once; a wrapper may be slower


def live_attach_hazard(gdb: str, pid: int) -> str | None:
    """Why attaching `gdb` to live process `pid` could change or kill it (None: safe): a GPU
    debugger on a process that has its GPU runtime mapped."""
    kind = debugger_kind(gdb)
    lib = procstate.maps_library(pid, kind.gpu_libraries) if kind.gpu_libraries else None
    if lib is None:
        return None
    verb = "injects its debugger into" if kind is Debugger.CUDA_GDB else \
        "takes GPU debug control of"
    return f"{kind.value} {verb} a process with {os.path.basename(lib)} loaded"
