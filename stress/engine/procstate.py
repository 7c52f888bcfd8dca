"""What the kernel can tell about a process without stopping it, and bounded tool runs.

Read from /proc and the kernel log only: nothing here attaches to, pauses or signals the
process, so it can run before (and while) stacks are taken. Busy-or-blocked sampling must come
*before* py-spy or gdb attach: an attached process is stopped, and a spinning thread would look
idle while the debugger holds it.

Everything here is Linux-only and safe to call on a process that may die at any moment: a thread
or process that vanishes mid-read is skipped, never raised.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

# Busy or blocked (issue 17 item 5).
DEFAULT_SAMPLE_WINDOW_S: float = 0.5  # 50 ticks at 100 Hz: a spinning thread and a waiting one
#   differ by ~50 ticks, far past tick noise; short enough to fit the hang evidence budget
_BUSY_CORE_FRACTION: float = 0.5  # the line: burning >= half a core over the window.
#   A spinning thread on a loaded 2-core machine still gets well over half a core
_BLOCKED_CORE_FRACTION: float = 0.05  # a thread parked in a wait still wakes for timers or a
#   GIL hand-off now and then; a few percent of a core is still "no CPU"
_WAITING_STATES: frozenset[str] = frozenset("SDIt")  # sleeping, disk wait (a driver ioctl),
#   idle kernel wait, and traced-stop (py-spy/gdb attached between samples)

# Bounded tool runs.
_REAP_AFTER_KILL_S: float = 2.0  # SIGKILL of a tool's group then this long for its pipes to
#   close; a grandchild stuck in an uninterruptible driver call may never close them
_TOOL_OUTPUT_MAX_CHARS: int = 4_000_000  # gdb on a process with hundreds of threads: ~1 MB

_PR_SET_PTRACER: int = 0x59616D61  # linux prctl (Yama): name a process allowed to ptrace us
_CLK_TCK: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Loaded at import so that helpers called between fork and exec (preexec_fn) never dlopen.
_LIBC: ctypes.CDLL | None
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # not Linux, or a libc-less interpreter: prctl helpers become no-ops
    _LIBC = None


class Activity(Enum):
    """What a stuck thread was doing across the sampling window."""

    BUSY = "busy"
    BLOCKED = "blocked"
    MIXED = "mixed"
    GONE = "gone"

    def describe(self) -> str:
        return {
            Activity.BUSY: "burning a core (running, or >= half a core of CPU over the window)",
            Activity.BLOCKED: "waiting (sleeping or in disk wait, almost no CPU)",
            Activity.MIXED: "some CPU while mostly waiting (polling or a slow loop)",
            Activity.GONE: "exited during the window",
        }[self]


@dataclass
class ThreadState:
    """One thread, read once from /proc/PID/task/TID. `cpu_ticks` is utime+stime in clock
    ticks (`os.sysconf('SC_CLK_TCK')` per second); `cpu_ns` is the scheduler's run time in
    nanoseconds when /proc exposes schedstat (finer), else None. `wchan` is the kernel function
    the thread sleeps in ("0" or None when running or hidden); `kernel_stack` is
    /proc/PID/task/TID/stack, readable only with CAP_SYS_ADMIN (root), else None."""

    tid: int
    name: str
    state: str
    cpu_ticks: int
    cpu_ns: int | None = None
    wchan: str | None = None
    kernel_stack: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"tid": self.tid, "name": self.name, "state": self.state,
                "cpu_ticks": self.cpu_ticks, "cpu_ns": self.cpu_ns, "wchan": self.wchan,
                "kernel_stack": self.kernel_stack}


@dataclass
class ThreadSample:
    """One thread seen twice, `window_s` apart. `cpu_s` is the CPU time it used in between
    (scheduler nanoseconds when available, else ticks); `activity` classifies it."""

    tid: int
    name: str
    first_state: str
    last_state: str | None
    cpu_s: float
    window_s: float
    activity: Activity
    wchan: str | None = None
    kernel_stack: str | None = None

    @property
    def core_fraction(self) -> float:
        return self.cpu_s / self.window_s if self.window_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"tid": self.tid, "name": self.name, "activity": self.activity.value,
                "first_state": self.first_state, "last_state": self.last_state,
                "cpu_s": round(self.cpu_s, 4), "window_s": round(self.window_s, 4),
                "core_fraction": round(self.core_fraction, 3), "wchan": self.wchan,
                "kernel_stack": self.kernel_stack}


def read_proc(path: Path) -> str | None:
    """A /proc file's text; None when it is gone or not readable."""
    try:
        return path.read_text(errors="replace")
    except OSError:  # gone, or not permitted (stack without CAP_SYS_ADMIN)
        return None


def parse_stat(text: str) -> tuple[str, str, int]:
    """(comm, state letter, utime+stime ticks) of a /proc/.../stat line. comm may hold spaces
    and parentheses, so it is cut at the *last* ')'."""
    open_at, close_at = text.index("("), text.rindex(")")
    rest = text[close_at + 2:].split()
    # rest[0] is field 3 (state); field n is rest[n - 3]: utime 14, stime 15
    return text[open_at + 1:close_at], rest[0], int(rest[11]) + int(rest[12])


def read_thread(pid: int, tid: int, *, details: bool = True) -> ThreadState | None:
    """One thread of `pid`, or None if it is gone. `details=False` skips wchan and the kernel
    stack (cheaper, for the first of two samples)."""
    base = Path(f"/proc/{pid}/task/{tid}")
    stat = read_proc(base / "stat")
    if stat is None:
        return None
    try:
        comm, state, ticks = parse_stat(stat)
    except (ValueError, IndexError):
        return None
    cpu_ns = None
    sched = read_proc(base / "schedstat")
    if sched:
        try:
            cpu_ns = int(sched.split()[0])
        except (ValueError, IndexError):
            cpu_ns = None
    wchan = stack = None
    if details:
        wchan = read_proc(base / "wchan")
        stack = read_proc(base / "stack")
        stack = stack.strip() if stack and stack.strip() else None
    return ThreadState(tid, comm, state, ticks, cpu_ns, wchan, stack)


def thread_ids(pid: int) -> list[int]:
    """Native thread ids of `pid` (empty if it is gone)."""
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def parse_sigmask(hex_mask: str) -> set[int]:
    """Signal numbers set in a /proc/PID/status mask (`SigCgt: 0000000180004a02`): bit n-1 is
    signal n. Pure."""
    try:
        bits = int(hex_mask, 16)
    except ValueError:
        return set()
    return {n + 1 for n in range(64) if bits >> n & 1}


def caught_signals(pid: int) -> set[int] | None:
    """Signals process `pid` has a handler for (its status's SigCgt), None when it is gone or
    unreadable. A Python worker with faulthandler registered catches SIGUSR1; past interpreter
    finalization it no longer does, and SIGUSR1's default action would kill it."""
    text = read_proc(Path(f"/proc/{pid}/status"))
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("SigCgt:"):
            return parse_sigmask(line.split(":", 1)[1].strip())
    return None


_DEFAULT_IGNORED: frozenset[int] = frozenset({signal.SIGCHLD, signal.SIGCONT, signal.SIGURG,
                                              signal.SIGWINCH})
_STOPPING: frozenset[int] = frozenset({signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN,
                                       signal.SIGTTOU})


def is_dead(pid: int) -> bool:
    """True once `pid` is dead or on its way: gone, a zombie (our child stays one until
    reaped, so its pid is not reused meanwhile), writing its core (`CoreDumping: 1`), or with
    a fatal signal pending that it has no handler for (a tool's `kill` has queued it, the
    process has not run yet). Reads /proc only."""
    text = read_proc(Path(f"/proc/{pid}/status"))
    if text is None:
        return True
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    state = fields.get("State", "").strip()[:1]
    if state in ("Z", "X") or fields.get("CoreDumping", "0").strip() == "1":
        return True
    pending = parse_sigmask(fields.get("ShdPnd", "0").strip()) | \
        parse_sigmask(fields.get("SigPnd", "0").strip())
    handled = parse_sigmask(fields.get("SigCgt", "0").strip()) | \
        parse_sigmask(fields.get("SigIgn", "0").strip()) | \
        parse_sigmask(fields.get("SigBlk", "0").strip())  # blocked: may never arrive
    if any(n not in handled and n not in _DEFAULT_IGNORED and n not in _STOPPING
           for n in pending):
        return True
    # A fatal signal the kernel has already taken off the queue: the process is in its exit
    # (the kernel's PF_EXITING), neither pending nor yet a zombie. Read after the status so
    # that a signal dequeued between the two reads is still seen.
    return _exit_under_way(pid)


_PF_EXITING = 0x4  # include/linux/sched.h


def _exit_under_way(pid: int) -> bool:
    text = read_proc(Path(f"/proc/{pid}/stat"))
    if text is None:
        return True
    fields = text[text.rindex(")") + 2:].split()
    try:
        return fields[0] in ("Z", "X") or int(fields[6]) & _PF_EXITING != 0  # field 9: flags
    except (IndexError, ValueError):
        return False


def exiting(pid: int) -> bool:
    """True when `pid` is gone, a zombie, or writing its core: its death is under way and
    its exit status will say what it was (stricter than is_dead: no pending signal counts)."""
    text = read_proc(Path(f"/proc/{pid}/status"))
    if text is None:
        return True
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return fields.get("State", "").strip()[:1] in ("Z", "X") or \
        fields.get("CoreDumping", "0").strip() == "1" or _exit_under_way(pid)


def maps_library(pid: int, needles: Sequence[str]) -> str | None:
    """The first mapped file of `pid` whose path contains one of `needles` (e.g. the CUDA
    driver, `libcuda.so`), None when none (or unreadable)."""
    text = read_proc(Path(f"/proc/{pid}/maps"))
    if text is None:
        return None
    for line in text.splitlines():
        path = line.rsplit(None, 1)[-1] if "/" in line else ""
        name = path.rsplit("/", 1)[-1]
        if any(n in name for n in needles):
            return path
    return None


def thread_states(pid: int) -> list[ThreadState]:
    """Every thread of `pid` now: tid, comm, state letter, CPU ticks, wchan, kernel stack when
    readable. Empty if the process is gone. Never blocks: reads /proc only."""
    out = []
    for tid in thread_ids(pid):
        t = read_thread(pid, tid)
        if t is not None:
            out.append(t)
    return out


def classify(first: ThreadState, last: ThreadState | None, window_s: float) -> ThreadSample:
    """Busy, blocked or mixed from two reads of one thread `window_s` apart (pure)."""
    if last is None or last.state in ("Z", "X"):
        return ThreadSample(first.tid, first.name, first.state, None if last is None
                            else last.state, 0.0, window_s, Activity.GONE, first.wchan,
                            first.kernel_stack)
    if first.cpu_ns is not None and last.cpu_ns is not None:
        cpu_s = max(0, last.cpu_ns - first.cpu_ns) / 1e9
    else:
        cpu_s = max(0, last.cpu_ticks - first.cpu_ticks) / _CLK_TCK
    fraction = cpu_s / window_s if window_s > 0 else 0.0
    running = first.state == "R" and last.state == "R"
    # the first read may catch a thread on its way into the wait: the CPU it used and where
    # it is at the end of the window decide
    if fraction >= _BUSY_CORE_FRACTION or running:
        activity = Activity.BUSY
    elif last.state in _WAITING_STATES and fraction <= _BLOCKED_CORE_FRACTION:
        activity = Activity.BLOCKED
    else:
        activity = Activity.MIXED
    return ThreadSample(last.tid, last.name, first.state, last.state, cpu_s, window_s,
                        activity, last.wchan, last.kernel_stack)


def _first_reads(pids: Iterable[int]) -> dict[int, dict[int, ThreadState]]:
    out: dict[int, dict[int, ThreadState]] = {}
    for pid in pids:
        reads = {}
        for tid in thread_ids(pid):
            t = read_thread(pid, tid, details=False)
            if t is not None:
                reads[tid] = t
        out[pid] = reads
    return out


def sample_many(pids: Sequence[int], window_s: float = DEFAULT_SAMPLE_WINDOW_S
                ) -> dict[int, dict[int, ThreadSample]]:
    """`sample` for several processes over one shared window (a GPU-wide stall: every worker
    is sampled in the same `window_s`, not one after another). Returns {pid: {tid: sample}};
    a process gone before the first read maps to {}. Takes `window_s` plus a few ms of /proc
    reads per hundred threads."""
    first = _first_reads(pids)
    t0 = time.monotonic()
    time.sleep(max(0.0, window_s))
    out: dict[int, dict[int, ThreadSample]] = {}
    for pid, reads in first.items():
        elapsed = time.monotonic() - t0
        samples = {}
        for tid, a in reads.items():
            samples[tid] = classify(a, read_thread(pid, tid), elapsed)
        out[pid] = samples
    return out


def sample(pid: int, window_s: float = DEFAULT_SAMPLE_WINDOW_S) -> dict[int, ThreadSample]:
    """Each thread of `pid` read twice, `window_s` apart: {tid: ThreadSample} whose `activity`
    is BUSY (running in both reads, or used >= half a core over the window), BLOCKED
    (sleeping, disk wait or traced at the end, and <= 5% of a core), MIXED (between) or GONE
    (exited in the window). Threads born inside the window are not included. Call it *before*
    attaching py-spy or gdb (an attached process is stopped). Costs `window_s` of wall time and
    no CPU to speak of; never raises for a vanished process (returns {})."""
    return sample_many([pid], window_s)[pid]


def allow_parent_ptrace(parent_pid: int | None = None) -> bool:
    """In the worker: let `parent_pid` (default: our parent) *and its descendants* ptrace us,
    so the parent's py-spy or gdb can take stacks under Yama ptrace_scope=1 (non-root CI,
    where only ancestors may attach and the tool is a sibling of the worker, not an ancestor).
    Returns True when the kernel accepted it; False without Yama (then nothing is needed) or
    on any error. Safe between fork and exec: calls only prctl through a handle loaded at
    import."""
    return prctl(_PR_SET_PTRACER, os.getppid() if parent_pid is None else parent_pid)


def prctl(option: int, arg: int) -> bool:
    """prctl(option, arg, 0, 0, 0) through libc; True when it returned 0. Never raises."""
    if _LIBC is None:
        return False
    try:
        return int(_LIBC.prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


# ---- bounded tool runs ------------------------------------------------------------------
@dataclass
class ToolRun:
    """What a bounded tool run gave: `rc` None when it was killed at its timeout or could not
    start (then `error` says which)."""

    argv: list[str]
    rc: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    error: str | None = None
    seconds: float = 0.0

    def describe(self) -> str:
        if self.error:
            return f"{self.argv[0]}: {self.error}"
        return f"{self.argv[0]}: exit {self.rc}"


def run_bounded(argv: Sequence[str], timeout_s: float, *, env: dict[str, str] | None = None,
                cwd: Path | None = None, new_group: bool = True) -> ToolRun:
    """Run `argv` in its own process group, capture its output, and return within about
    `timeout_s` + 2 s whatever it does: at the timeout the whole group gets SIGKILL (a tool's
    own children too: `subprocess.run(timeout=...)` would wait forever on a grandchild that
    holds the pipe). `new_group=False` keeps the tool in the caller's group (so a kill of the
    caller's group reaches it; at the timeout only the tool itself is killed). Never raises
    for a missing or failing tool."""
    t0 = time.monotonic()
    args = list(argv)
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace", env=env,
                                cwd=cwd, start_new_session=new_group)
    except OSError as exc:
        return ToolRun(args, None, error=f"could not start: {exc}")
    try:
        out, err = proc.communicate(timeout=max(0.0, timeout_s))
        return ToolRun(args, proc.returncode, out[-_TOOL_OUTPUT_MAX_CHARS:],
                       err[-_TOOL_OUTPUT_MAX_CHARS:], seconds=time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        pass
    try:
        if new_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except OSError:
        pass
    out = err = ""
    try:
        out, err = proc.communicate(timeout=_REAP_AFTER_KILL_S)
    except subprocess.TimeoutExpired:  # a grandchild in D state holds the pipe: let it be
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
    return ToolRun(args, None, out or "", err or "", timed_out=True,
                   error=f"timed out after {timeout_s:g} s", seconds=time.monotonic() - t0)


def signal_name(signum: int | None) -> str | None:
    """SIGSEGV for 11; None for None or an unknown number."""
    if signum is None:
        return None
    try:
        return signal.Signals(signum).name
    except ValueError:
        return None
