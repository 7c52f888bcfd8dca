"""Evidence before the kill: every thread's state and stack, the kernel log, GPU telemetry.

Hangs (the process is alive): `collect_many` samples every stuck process's threads (busy or
blocked) over one shared window, with telemetry and the kernel log read in that same window,
then takes all their stacks concurrently, all before anything is killed (a GPU-wide stall:
several workers hung at once). Crashes (the process is gone): `collect_crash` reads the core
(`postmortem.native_stacks`) and the kernel log. Each returns `files()` for the failure folder.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stress.engine import callstacks, kernellog, postmortem, procstate, telemetry
from stress.engine.callstacks import Stacks, StackSource, find_pyspy
from stress.fs import atomic_write
from stress.stacktext import ThreadStack, parse_gdb, parse_pyspy

if TYPE_CHECKING:
    from stress.engine.config import SoakConfig
    from stress.engine.jobs import Job

__all__ = ["Stacks", "StackSource", "ThreadStack", "find_pyspy", "dump_stacks",
           "collect_many", "collect_crash", "HangEvidence", "ProcessEvidence",
           "CrashEvidence", "repro_command", "write_folder"]

_PYSPY_TIMEOUT_S: float = 15.0  # attaching + unwinding natively takes ~0.05-1 s; more under load
_GDB_TIMEOUT_S: float = 20.0  # gdb attach loads every library's symbols first: seconds
_FAULTHANDLER_WAIT_S: float = 0.5  # for the worker's SIGUSR1 handler to write its stacks
STACKS_TIMEOUT_S: float = _PYSPY_TIMEOUT_S + _GDB_TIMEOUT_S + _FAULTHANDLER_WAIT_S  # worst
#   case of `dump_stacks`: every tool tried in turn and each one stalled
_MAX_PARALLEL_STACKS: int = 8  # py-spy/gdb processes at once in a GPU-wide stall: each uses
#   a core for ~1 s; more only queues on the CPUs and delays the kill
_KERNEL_LOG_LOOKBACK_S: float = 300.0  # without a start time: the last five minutes
_D_STATE_RECHECK_S: float = 0.1  # a D state seen twice this far apart is a stuck wait (a
#   driver ioctl), not a disk read passing by


def dump_stacks(pid: int, stderr_path: Path | None = None,
                timeout_s: float = STACKS_TIMEOUT_S, *,
                nonblocking: bool | None = None) -> Stacks:
    """Every thread's stack of *live* process `pid`, by tools that read it without changing
    it, first that works: `py-spy dump --native` (native and Python frames), else `gdb -p`
    with `thread apply all bt` (native frames) when that gdb is plain gdb or the process has
    no GPU runtime mapped (`callstacks.live_attach_hazard`: cuda-gdb injects into a CUDA
    process and killed it on the H200; rocgdb takes GPU debug control of a HIP one), else
    SIGUSR1 to the worker's faulthandler, whose Python frames are read from the new end of
    `stderr_path` (None: not our worker, never signalled), and only while the process has a
    SIGUSR1 handler (past interpreter finalization it has none, and SIGUSR1 would kill it).
    `Stacks.tool` says which gave the stacks, `Stacks.tried` what every tool gave or why it
    was skipped, `Stacks.died` the tool during which the process died, if it did (a hang's
    verdict stands: the caller records that death inside the hang). Where no live reader
    gave native frames, the caller reads a core taken after the verdict
    (`capture`: the kill itself dumps it).

    A thread in uninterruptible wait (D: a driver ioctl that never returns) cannot be
    stopped, so every native unwinder would block until its bound: then only
    `py-spy dump --nonblocking` (Python frames, the process not paused) and faulthandler are
    tried; the D thread's kernel stack is in `procstate`'s samples. `nonblocking=None`
    decides that from two reads of the thread states 0.1 s apart; `collect_many` passes what
    its sampling window saw.

    Each tool is killed at its own bound and the whole call at about `timeout_s`; never
    raises. The process is paused while a native tool reads it: sample busy/blocked
    (procstate.sample) first."""
    t_end = time.monotonic() + timeout_s
    tried: list[str] = []

    def left(cap: float) -> float:
        return max(0.5, min(cap, t_end - time.monotonic()))

    def died(tool: str) -> Stacks | None:
        if not procstate.is_dead(pid):
            return None
        tried.append(f"stopped: the process died during {tool}")
        return Stacks(StackSource.NONE, "", tried=tried, died=tool)

    if nonblocking is None:
        nonblocking = bool(_stuck_in_d(pid))
    pyspy = find_pyspy()
    if nonblocking:
        note = ("a thread is in uninterruptible wait (D): native stacks would block, "
                "Python frames only; see threads.json for kernel stacks")
        tried.append("py-spy dump --native, gdb attach: skipped: a thread is in D state")
        if pyspy:
            run = procstate.run_bounded([pyspy, "dump", "--nonblocking", "--pid", str(pid)],
                                        left(_PYSPY_TIMEOUT_S))
            threads = parse_pyspy(run.stdout).threads
            if run.rc == 0 and threads:
                tried.append(f"py-spy dump --nonblocking: {len(threads)} threads")
                return Stacks(StackSource.PYSPY_NONBLOCKING, run.stdout, threads=threads,
                              note=note, tried=tried)
            tried.append(f"py-spy dump --nonblocking: {_why(run)}")
            gone = died("py-spy dump --nonblocking")
            if gone:
                return gone
        else:
            tried.append("py-spy: not found")
        return _faulthandler(pid, stderr_path, tried, note)
    if pyspy:
        run = procstate.run_bounded([pyspy, "dump", "--native", "--pid", str(pid)],
                                    left(_PYSPY_TIMEOUT_S))
        threads = parse_pyspy(run.stdout).threads
        if run.rc == 0 and threads:
            tried.append(f"py-spy dump --native: {len(threads)} threads")
            return Stacks(StackSource.PYSPY, run.stdout, threads=threads, tried=tried)
        tried.append(f"py-spy dump --native: {_why(run)}")
        gone = died("py-spy dump --native")
        if gone:
            return gone
    else:
        tried.append(f"py-spy: not found{_pyspy_hint()}")
    gdb = callstacks.find_gdb()
    if gdb:
        name = os.path.basename(gdb)
        hazard = callstacks.live_attach_hazard(gdb, pid)
        if hazard:
            tried.append(f"{name} attach: skipped: {hazard}")
        else:
            run = procstate.run_bounded(
                [gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off", "-iex",
                 "set auto-load python-scripts off", "-ex", "set pagination off", "-ex",
                 "thread apply all bt", "-p", str(pid)], left(_GDB_TIMEOUT_S))
            threads = parse_gdb(run.stdout).threads
            if threads:
                tried.append(f"{name} attach: {len(threads)} threads")
                dead = procstate.is_dead(pid)
                return Stacks(StackSource.GDB_ATTACH, run.stdout, threads=threads,
                              tried=tried, died=f"{name} attach" if dead else None)
            tried.append(f"{name} attach: {run.error or 'no threads'}")
            gone = died(f"{name} attach")
            if gone:
                return gone
    else:
        tried.append("gdb, cuda-gdb, rocgdb: not found")
    return _faulthandler(pid, stderr_path, tried)


def _why(run: procstate.ToolRun) -> str:
    """What a tool that gave no stacks said, in one short line."""
    if run.error:
        return run.error[:200]
    lines = run.stderr.strip().splitlines()
    return (lines[-1] if lines else run.describe())[:200]


def _pyspy_hint() -> str:
    return f" ({callstacks.PYSPY_ENV} says none)" if os.environ.get(callstacks.PYSPY_ENV) \
        is not None else ""


def _stuck_in_d(pid: int) -> set[int]:
    """Threads of `pid` in D state in two reads 0.1 s apart (a passing disk wait is not)."""
    first = {t.tid for t in procstate.thread_states(pid) if t.state == "D"}
    if not first:
        return set()
    time.sleep(_D_STATE_RECHECK_S)
    return first & {t.tid for t in procstate.thread_states(pid) if t.state == "D"}


def _faulthandler(pid: int, stderr_path: Path | None, tried: list[str],
                  note: str = "") -> Stacks:
    """faulthandler's Python frames via SIGUSR1, only to our worker (`stderr_path`) and only
    while it has a SIGUSR1 handler: SIGUSR1's default action terminates the process."""
    if stderr_path is None:
        tried.append("faulthandler (SIGUSR1): not sent: not an iree-stress worker past its "
                     "hello (no handler known)")
        return Stacks(StackSource.NONE, "", note=note, tried=tried)
    caught = procstate.caught_signals(pid)
    if caught is None:
        tried.append("faulthandler (SIGUSR1): the process was gone")
        return Stacks(StackSource.NONE, "", note=note, tried=tried)
    if signal.SIGUSR1 not in caught:
        tried.append("faulthandler (SIGUSR1): not sent: the process has no SIGUSR1 handler "
                     "(past interpreter finalization), and SIGUSR1 would kill it")
        return Stacks(StackSource.NONE, "", note=note, tried=tried)
    before = stderr_path.stat().st_size if stderr_path.exists() else 0
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        tried.append("faulthandler (SIGUSR1): the process was gone")
        return Stacks(StackSource.NONE, "", note=note, tried=tried)
    time.sleep(_FAULTHANDLER_WAIT_S)
    text = ""
    if stderr_path.exists():
        with open(stderr_path, "rb") as f:
            f.seek(before)
            text = f.read().decode(errors="replace")
    tried.append("faulthandler (SIGUSR1): Python frames from stderr" if text.strip() else
                 "faulthandler (SIGUSR1): nothing written")
    if procstate.is_dead(pid):  # the handler went away between the check and the signal
        tried.append("stopped: the process died when SIGUSR1 arrived")
        return Stacks(StackSource.FAULTHANDLER, text, note=note, tried=tried,
                      died="faulthandler's SIGUSR1")
    return Stacks(StackSource.FAULTHANDLER, text, note=note, tried=tried)


@dataclass
class ProcessEvidence:
    """One hung process's evidence: its threads' busy/blocked samples (taken before any tool
    attached) and every thread's stack. `busy_tids`/`blocked_tids` for failure.json and the
    signature; `files()` for the failure folder."""

    pid: int
    samples: dict[int, procstate.ThreadSample]
    stacks: Stacks
    seconds: float = 0.0

    def in_d_state(self) -> bool:
        """A thread stayed in uninterruptible wait (D) across the sampling window: no core
        can be written until that wait ends, and no ptrace stop lands."""
        return any(s.first_state == "D" == s.last_state for s in self.samples.values())

    def tids(self, activity: procstate.Activity) -> list[int]:
        return sorted(t for t, s in self.samples.items() if s.activity is activity)

    def activity_of(self, tid: int | None) -> procstate.Activity | None:
        """BUSY/BLOCKED/... of thread `tid` (e.g. the journal's native tid of the stuck step),
        None when it was not sampled."""
        s = self.samples.get(tid) if tid is not None else None
        return s.activity if s else None

    def process_activity(self) -> procstate.Activity | None:
        """BUSY when any thread burned a core in the window (the CPU analogue of the
        incident's stuck GPU clock: the step's own thread may wait on a runtime thread that
        spins), else BLOCKED when any thread was blocked, else None (nothing sampled)."""
        found = {s.activity for s in self.samples.values()}
        for activity in (procstate.Activity.BUSY, procstate.Activity.BLOCKED,
                         procstate.Activity.MIXED):
            if activity in found:
                return activity
        return None

    def summary(self, stuck_tid: int | None = None) -> dict[str, Any]:
        """For failure.json and the signature: stack tool, the stuck thread's activity
        (`stuck_tid`: the journal's native tid of the step past its deadline; None when
        unknown or not sampled) and the process's, busy and blocked tids, timing."""
        return {"stack_source": self.stacks.tool.value, "stuck_tid": stuck_tid,
                "activity": getattr(self.activity_of(stuck_tid), "value", None),
                "process_activity": getattr(self.process_activity(), "value", None),
                "busy_tids": self.tids(procstate.Activity.BUSY),
                "blocked_tids": self.tids(procstate.Activity.BLOCKED),
                "evidence_s": round(self.seconds, 3), "stacks_tried": self.stacks.tried}

    def threads_json(self) -> str:
        """threads.json: one entry per thread: sample (tid, name, activity, states, CPU over
        the window, wchan, kernel stack) joined with its frames from the stack tool."""
        out = []
        for tid in sorted(set(self.samples) | {t.tid for t in self.stacks.threads
                                               if t.tid is not None}):
            s = self.samples.get(tid)
            st = self.stacks.thread(tid)
            entry: dict[str, Any] = s.as_dict() if s else {"tid": tid, "activity": None}
            entry["frames"] = st.labels() if st else None
            out.append(entry)
        return json.dumps({"pid": self.pid, "stack_source": self.stacks.tool.value,
                           "threads": out}, indent=1)

    def files(self) -> dict[str, str]:
        return {"stacks.txt": self.stacks.render(), "threads.json": self.threads_json()}


@dataclass
class HangEvidence:
    """Evidence of one or several hung processes taken together before any kill: per-process
    evidence, one telemetry snapshot and one kernel log read in the sampling window."""

    processes: dict[int, ProcessEvidence]
    telemetry: dict[str, Any]
    kernel_log: kernellog.KernelLog
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    def files(self, pid: int, own: Collection[int] = ()) -> dict[str, str]:
        """The failure folder's files for process `pid`: stacks.txt, threads.json,
        kernel.log (the faults of its own threads and of `own`, the other processes' threads
        of its job, kept: another process's are not its evidence), telemetry_before.json."""
        tids = {pid, *self.processes[pid].samples, *own}
        return {**self.processes[pid].files(), "kernel.log": self.kernel_log.only(tids).text,
                "telemetry_before.json": json.dumps(self.telemetry, indent=1)}


def collect_many(pids: Sequence[int], *, stderr_paths: Mapping[int, Path] | None = None,
                 backend: str | None = None, since_wall: float | None = None,
                 window_s: float = procstate.DEFAULT_SAMPLE_WINDOW_S,
                 timeout_s: float = STACKS_TIMEOUT_S) -> HangEvidence:
    """Evidence of every hung process in `pids`, all taken before anything is killed:

    1. one shared window of `window_s`: every thread of every pid sampled twice (busy or
       blocked), while the telemetry snapshot of `backend` (None: skipped) and the kernel log
       since `since_wall` (None: the last five minutes) are read in background threads;
    2. then every pid's stacks (`dump_stacks`) concurrently, at most 8 tools at once.

    Returns within about `window_s` + `timeout_s` (+ the telemetry bound, 10 s, when that is
    longer than the window) whatever the processes or tools do; a process whose stacks did
    not arrive in time gets `Stacks(NONE, note="timed out")`. Never raises; never signals a
    process except through dump_stacks's faulthandler fallback (SIGUSR1)."""
    t0 = time.monotonic()
    paths = stderr_paths or {}
    snap: dict[str, Any] = {}
    klog: list[kernellog.KernelLog] = []
    since = since_wall if since_wall is not None else time.time() - _KERNEL_LOG_LOOKBACK_S

    def read_telemetry() -> None:
        if backend is not None:
            snap.update(telemetry.snapshot(backend))

    side = [threading.Thread(target=lambda: klog.append(kernellog.kernel_log_tail(since)),
                             name="evidence-kernel-log", daemon=True),
            threading.Thread(target=read_telemetry, name="evidence-telemetry", daemon=True)]
    for th in side:
        th.start()
    samples = procstate.sample_many(list(pids), window_s)
    t_sampled = time.monotonic()
    stacks: dict[int, Stacks] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(pids), _MAX_PARALLEL_STACKS)),
                              thread_name_prefix="stacks")
    try:
        futures = {pid: pool.submit(dump_stacks, pid, paths.get(pid), timeout_s,
                                    nonblocking=any(s.first_state == "D" == s.last_state
                                                    for s in samples.get(pid, {}).values()))
                   for pid in pids}
        deadline = time.monotonic() + timeout_s + 2 * _FAULTHANDLER_WAIT_S
        for pid, fut in futures.items():
            try:
                stacks[pid] = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                stacks[pid] = Stacks(StackSource.NONE, "",
                                     note=f"stacks timed out after {timeout_s:g} s")
            except Exception as exc:  # a bug in a parser must not lose the other evidence
                stacks[pid] = Stacks(StackSource.NONE, "", note=f"stacks failed: {exc!r}")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    t_stacks = time.monotonic()
    side_deadline = t0 + telemetry.SNAPSHOT_TIMEOUT_S + 5.0  # both reads are bounded below it
    for th in side:
        th.join(timeout=max(0.0, side_deadline - time.monotonic()))
    kernel = klog[0] if klog else kernellog.KernelLog(None, [], "kernel log read timed out",
                                                      since)
    if backend is not None and not snap:
        snap = {"backend": backend, "error": "telemetry snapshot did not finish"}
    done = time.monotonic()
    procs = {pid: ProcessEvidence(pid, samples.get(pid, {}), stacks[pid], done - t0)
             for pid in pids}
    return HangEvidence(procs, dict(snap), kernel, done - t0,
                        {"sample_s": t_sampled - t0, "stacks_s": t_stacks - t_sampled})


@dataclass
class CrashEvidence:
    """A dead process's evidence: its post-mortem stacks and the kernel log."""

    stacks: Stacks
    kernel_log: kernellog.KernelLog
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """For failure.json: stack tool, crashed thread, signal, crashing frames."""
        return {**self.stacks.summary(), "stack_source": self.stacks.tool.value,
                "evidence_s": round(self.seconds, 3)}

    def files(self) -> dict[str, str]:
        """The failure folder's files: stacks.txt, kernel.log."""
        return {"stacks.txt": self.stacks.render(), "kernel.log": self.kernel_log.text}


def collect_crash(pid: int, exe: str, core_dir: Path, stderr_text: str, *,
                  since_wall: float | None = None, tids: Collection[int] = (),
                  keep_core: bool = False,
                  timeout_s: float | None = None,
                  claim_dir: Path | None = None) -> CrashEvidence:
    """Evidence of process `pid`, dead by a signal: `postmortem.native_stacks` (core + gdb,
    ...; the core deleted unless `keep_core`) and the kernel log since `since_wall` (None: the
    last five minutes). `tids` are native thread ids the caller knows (the journal's), used to
    match the kernel's segfault line; `claim_dir`: `core_dir` is shared (`postmortem.find_core`).
    Bounded by about `timeout_s` + 5 s; never raises."""
    t0 = time.monotonic()
    since = since_wall if since_wall is not None else time.time() - _KERNEL_LOG_LOOKBACK_S
    stacks = postmortem.native_stacks(pid, exe, core_dir, stderr_text, timeout_s,
                                      keep=keep_core, since_wall=since, tids=tids,
                                      claim_dir=claim_dir)
    kernel = kernellog.kernel_log_tail(since)
    return CrashEvidence(stacks, kernel, time.monotonic() - t0)


_THIS_FOLDER: str = '"$(cd "$(dirname -- "$0")" && pwd)"'  # the failure folder, wherever the
#   run folder was moved or copied to (CI artifacts): `repro` finds the run's store above it


def repro_command(cfg: SoakConfig, job: Job | None) -> str:
    """The shell line of a failure folder's repro.sh, the same for every engine: `iree-stress
    repro FOLDER` on the script's own folder, which reruns exactly its job (program, pattern,
    input seed; or the user's command, IREE's tool; env, cwd, deadlines: all from the run's
    store) and writes the reruns under the folder (options after `sh repro.sh`, such as
    `--times 5`, are passed on). The tool is named by the interpreter that ran it (absolute,
    `-m stress`: issue 36 item 12, `iree-stress` need not be on PATH), and by the folder it
    was imported from when that came through PYTHONPATH (a source checkout)."""
    return f'exec {tool_command()} repro {_THIS_FOLDER} "$@"'


def tool_command() -> str:
    """A shell command that runs this very iree-stress from anywhere: its interpreter's
    absolute path with `-m stress`, `env PYTHONPATH=...` before it when the package was found
    through PYTHONPATH."""
    import shlex

    home = str(Path(__file__).resolve().parents[2])  # the folder that holds `stress/`
    given = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p]
    path = f"env PYTHONPATH={shlex.quote(home)} " if home in given else ""
    return f"{path}{shlex.quote(os.path.abspath(sys.executable))} -m stress"


def _repro_comment(cfg: SoakConfig, job: Job | None = None) -> str:
    if job is None:
        return ("# This failure was pinned on no job (driver probe, worker start-up or exit): "
                "repro says so;\n# rerun the whole run with the command in its summary.json.\n")
    return ("# Reruns the failing job alone (its program, pattern and input seed, or its "
            "command; its\n# environment and deadlines) and says how often it fails the same "
            "way, as a rate:\n# iree-stress repro, e.g. sh repro.sh --times 5 (reruns in "
            "./repro-TIME/)\n")


def write_folder(folder: Path, cfg: SoakConfig, stderr_tail: str, stdout_tail: str,
                 job: Job | None, journal_text: str, extra: dict[str, str]) -> None:
    """One failure's folder: output tails, journal, job, repro script, plus `extra` files."""
    files = {"stderr.tail": stderr_tail, "stdout.tail": stdout_tail,
             "journal.txt": journal_text,
             "job.json": json.dumps(job.as_dict() if job else None, indent=1),
             "repro.sh": "#!/bin/sh\n" + _repro_comment(cfg, job) + repro_command(cfg, job) + "\n",
             **extra}
    for name, text in files.items():
        atomic_write(folder / name, text.encode())
