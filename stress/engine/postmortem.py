"""Native stacks of a worker that died by a signal, read from its core dump.

faulthandler gives the Python frames of a crash, but for "SIGSEGV during cleanup" the native
frame that crashed (a thread join inside the runtime's teardown, a driver's exit handler) *is*
the report. Workers run with core dumps on (`prepare_child`) in a folder of their own
(`core_dir`, their cwd); after a signal death the parent finds the core, reads every thread's
stack from it (gdb, else pystack, else py-spy for the Python frames), names the thread that took
the signal (from the core's own notes), and deletes the core: a Python + IREE process's core is
hundreds of MiB. When there is no core the kernel log's segfault line, then faulthandler's text,
stand in; `Stacks.tool` always says which path produced the stack.

The stack types live in `callstacks` (shared with live-hang stacks), the parsers in
`stress.stacktext`.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import resource
import shutil
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from stress.engine import kernellog, procstate
from stress.engine.callstacks import Stacks, StackSource, find_gdb, find_pyspy
from stress.engine.corenotes import (
    CLAIM_WAIT_S,
    claimed,
    default_filter,
    dumped_since,
    pattern_collides,
    set_filter,
)
from stress.engine.corenotes import NOTES_CORE_BYTES as NOTES_CORE_BYTES
from stress.engine.corenotes import CoreNotes as CoreNotes  # (re-exported: its readers)
from stress.engine.corenotes import claim as claim  # (re-exported: children.py)
from stress.engine.corenotes import fault_site as fault_site  # (re-exported: capture)
from stress.engine.corenotes import listdir as listdir
from stress.engine.corenotes import notes_only as notes_only  # (re-exported: recorder)
from stress.engine.corenotes import read_core_notes as read_core_notes
from stress.stacktext import (
    faulthandler_text,
    kernel_fault_lines,
    parse_gdb,
    parse_pyspy,
    parse_pystack,
)

_CORE_LIMIT_BYTES: int = 4 << 30  # measured: a Python + IREE local-task process's core is
#   107 MiB here; a Python process holding a CUDA context (torch) 901 MiB on the H200. The cap
#   keeps a runaway heap from filling the run's disk; a truncated core still holds every
#   thread's registers (the notes come first)
NATIVE_STACKS_TIMEOUT_S: float = 30.0  # measured: gdb + py-spy read the 107 MiB core in 0.7 s
#   here, cuda-gdb + py-spy the 901 MiB CUDA one in 9.4 s on the H200; 3x that for a loaded box
_LOAD_SCALE_MAX: float = 4.0  # a post mortem's budget grows with the host's load, up to this
#   factor: gdb over the 159 MiB core of a pytest process with IREE's compiler loaded took
#   4.8 s of CPU and 28 s of wall time at a load of 8.5 per core here (issue 36's second real
#   suite: every read timed out at 30 s, so no crash had native frames)


def stacks_timeout_s(base: float = NATIVE_STACKS_TIMEOUT_S) -> float:
    """The budget of one post-mortem read: `base` times the host's load per core (1-minute
    load average over the cores; at least 1, at most _LOAD_SCALE_MAX). A soak loads its host
    by design: a budget measured on an idle one runs out before gdb has read the symbols."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        per_core = 1.0
    return base * min(_LOAD_SCALE_MAX, max(1.0, per_core))


_PIPE_CORE_WAIT_S: float = 5.0  # a |pipe handler (systemd-coredump) stores the core after the
#   process is gone: give it this long to appear in `coredumpctl`
_MIN_TOOL_S: float = 1.0  # never start a tool with less than this left of the budget
_PR_SET_DUMPABLE: int = 4  # linux prctl
CORES_FOLDER: str = "cores"  # under the run folder: one subfolder per worker, its cwd


# ---- the worker side ----------------------------------------------------------------------
def core_dir(run_dir: Path, worker_name: str) -> Path:
    """The folder a worker runs in (its cwd), so a relative core_pattern such as `core` lands
    its core there and nowhere else: RUN_DIR/cores/WORKER_NAME, created. A restarted worker of
    the same name reuses it (its predecessor's core was read and deleted)."""
    d = run_dir / CORES_FOLDER / worker_name
    d.mkdir(parents=True, exist_ok=True)
    return d


def prepare_child(parent_pid: int | None = None) -> None:
    """In the worker, as early as possible (or as Popen's preexec_fn): raise the soft core size
    limit to at least min(4 GiB, hard limit) and mark the process dumpable, so a fatal signal
    leaves a core in the cwd (`core_dir`). With `parent_pid`, also `procstate.allow_parent_ptrace`.
    Cost: the kernel writes the core before the parent can reap the process, which delays the
    death notice by ~0.05 s for a cpu worker here and ~1 s for a CUDA process on the H200.
    Never raises: a worker must start even where cores cannot be enabled. Safe between fork
    and exec (setrlimit and prctl only, no imports or allocation-heavy work)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
        if soft != resource.RLIM_INFINITY:  # never below what the user set
            cap = _CORE_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(
                hard, _CORE_LIMIT_BYTES)
            resource.setrlimit(resource.RLIMIT_CORE, (max(soft, cap), hard))
    except (OSError, ValueError):
        pass
    procstate.prctl(_PR_SET_DUMPABLE, 1)
    if parent_pid is not None:
        procstate.allow_parent_ptrace(parent_pid)
    _default_kill_signals()


# The signals the harness kills and cores a process with. A shell's `nohup`, a CI runner or a
# job launcher may leave them ignored or blocked, and both survive exec: the watchdog's SIGTERM
# or a core kill's SIGQUIT would then do nothing, and a queued one would never count as fatal.
_KILL_SIGNALS = (signal.SIGTERM, signal.SIGQUIT, signal.SIGABRT, signal.SIGHUP)


def _default_kill_signals() -> None:
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _KILL_SIGNALS)
        for sig in _KILL_SIGNALS:
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):  # not the main thread: the dispositions stay as they were
        pass


def allow_core(pid: int) -> str:
    """Raises live process `pid`'s soft core limit to what prepare_child gives (up to its hard
    limit), and gives back its coredump_filter (`notes_only` cleared it), before a kill that
    should leave a core; "" or why it could not."""
    restored = set_filter(pid, default_filter())
    try:
        soft, hard = resource.prlimit(pid, resource.RLIMIT_CORE)
        cap = _CORE_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(hard,
                                                                              _CORE_LIMIT_BYTES)
        if soft != resource.RLIM_INFINITY and soft < cap:
            resource.prlimit(pid, resource.RLIMIT_CORE, (cap, hard))
        if cap <= 0:
            return "its hard core limit is 0: no core"
        return "" if restored else "its coredump_filter not restored: its core may hold no memory"
    except (OSError, ValueError) as exc:
        return f"core limit not raised: {exc}"


# ---- finding the core -------------------------------------------------------------------
def read_core_pattern() -> tuple[str, bool]:
    """/proc/sys/kernel/core_pattern and core_uses_pid (read only, never written)."""
    try:
        pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    except OSError:
        pattern = "core"
    try:
        uses_pid = Path("/proc/sys/kernel/core_uses_pid").read_text().strip() == "1"
    except OSError:
        uses_pid = False
    return pattern, uses_pid


def core_globs(pattern: str, pid: int, cwd: Path, *, uses_pid: bool = False) -> list[str]:
    """Glob patterns where the kernel writes the core of process `pid` (whose cwd was `cwd`)
    under `core_pattern`, most specific first. %p/%P become the pid, %% a '%', every other
    template (%e %E %t %h %u %g %s %i %I %c %d) a wildcard; a relative pattern is under `cwd`;
    core_uses_pid appends .PID when the pattern has no %p. A `|pipe` pattern gives []: the core
    went to a program (see `find_core`). `cwd/core` and `cwd/core.PID` are always included.
    Pure."""
    out: list[str] = []
    if pattern and not pattern.startswith("|"):
        parts, i, has_pid = [], 0, False
        while i < len(pattern):
            c = pattern[i]
            if c == "%" and i + 1 < len(pattern):
                spec = pattern[i + 1]
                if spec in "pP":
                    parts.append(str(pid))
                    has_pid = True
                elif spec == "%":
                    parts.append("%")
                else:
                    parts.append("*")
                i += 2
                continue
            parts.append(glob.escape(c))
            i += 1
        expanded = "".join(parts)
        if uses_pid and not has_pid:
            expanded += f".{pid}"
        base = expanded if expanded.startswith("/") else os.path.join(glob.escape(str(cwd)),
                                                                      expanded)
        out.append(base)
    for name in (f"core.{pid}", "core"):
        g = os.path.join(glob.escape(str(cwd)), name)
        if g not in out:
            out.append(g)
    return out


def _coredumpctl(pid: int, dest: Path, budget_s: float) -> tuple[Path | None, str]:
    tool = shutil.which("coredumpctl")
    if tool is None:
        return None, "core_pattern pipes cores to a program and coredumpctl is not here"
    deadline = time.monotonic() + min(budget_s, _PIPE_CORE_WAIT_S)
    out = dest / f"core.{pid}"
    while True:
        run = procstate.run_bounded([tool, "--no-pager", "-q", "-o", str(out), "dump", str(pid)],
                                    max(_MIN_TOOL_S, deadline - time.monotonic()))
        if run.rc == 0 and out.exists() and out.stat().st_size > 0:
            return out, ""
        if time.monotonic() >= deadline:
            return None, f"coredumpctl has no core of {pid}: {run.describe()}"
        time.sleep(0.2)


def find_core(pid: int, cwd: Path, budget_s: float = _PIPE_CORE_WAIT_S,
              claim_dir: Path | None = None, since_wall: float | None = None
              ) -> tuple[Path | None, CoreNotes | None, str]:
    """The core of dead process `pid` whose cwd was `cwd`, its notes, and a note when none was
    found. Only a core whose notes name `pid` is taken (a stale `core` from another process is
    left alone). `claim_dir`: `cwd` is shared with other processes that may crash (copies of
    one command): every core found there is claimed into it (`claim`) before its notes are
    trusted, another pid's is left there for its own reader, and when no core of `pid` is
    left but another process dumped into the same place after `since_wall`, the note says
    the core was overwritten. A `|systemd-coredump` pattern is asked through coredumpctl
    (bounded); other pipe handlers (apport, ...) keep cores where this tool cannot reach
    them."""
    pattern, uses_pid = read_core_pattern()
    rivals: list[int] = []
    if claim_dir is not None:
        got = claimed(pid, claim_dir)
        if got is not None:
            return got[0], got[1], ""
        got, rivals = claim_cores(pid, cwd, claim_dir)
        if got is not None:
            return got[0], got[1], ""
    for g in core_globs(pattern, pid, cwd, uses_pid=uses_pid) if claim_dir is None else []:
        for hit in sorted(glob.glob(g), key=lambda p: -_mtime(p)):
            notes = read_core_notes(Path(hit))
            if notes is not None and notes.pid == pid:
                return Path(hit), notes, ""
    if claim_dir is not None:
        got = claimed(pid, claim_dir, CLAIM_WAIT_S)  # taken by another reader meanwhile
        if got is not None:
            return got[0], got[1], ""
        rivals += dumped_since(claim_dir, pid, since_wall)
        if rivals and pattern_collides(pattern, uses_pid):
            return None, None, (f"core overwritten by another process: no core of {pid} is "
                                f"left, pid {rivals[0]} dumped its core into the same folder "
                                f"after {pid} started (core_pattern {pattern!r} names no pid)")
    if pattern.startswith("|"):
        if "systemd-coredump" in pattern:
            core, why = _coredumpctl(pid, cwd, budget_s)
            if core is not None:
                return core, read_core_notes(core), ""
            return None, None, why
        return None, None, f"core_pattern pipes cores to {pattern[1:].split()[0]!r}"
    return None, None, (f"no core of {pid} (core_pattern {pattern!r}; the core size limit, "
                        "a full disk or an unwritable cwd prevent one)")


def claim_cores(pid: int, cwd: Path, claim_dir: Path
                ) -> tuple[tuple[Path, CoreNotes] | None, list[int]]:
    """Every core in `cwd` (a folder copies share) claimed into `claim_dir` (`claim`): (the
    core of `pid`, if one was there, the pids of the others). Milliseconds (renames and
    notes): done as a crash is recorded, before its read waits for a free reader, since the
    next copy's crash overwrites a core left there (issue 36)."""
    pattern, uses_pid = read_core_pattern()
    mine: tuple[Path, CoreNotes] | None = None
    rivals: list[int] = []
    if pattern.startswith("|"):
        return None, rivals
    for g in core_globs(pattern, pid, cwd, uses_pid=uses_pid):
        for hit in sorted(glob.glob(g), key=lambda p: -_mtime(p)):
            got = claim(Path(hit), claim_dir)
            if got is not None and got[1].pid == pid and mine is None:
                mine = got
            elif got is not None:
                rivals.append(got[1].pid)
    return mine, rivals


def discard_core(pid: int, cwd: Path, claim_dir: Path | None = None) -> Path | None:
    """Delete the core of dead process `pid` without reading its stacks (past the
    evidence-folder cap, or a worker that died while being killed): its path, or None when
    there was none. Never waits for a pipe handler; never touches another process's core
    (`claim_dir`: a shared `cwd`, see `find_core`)."""
    got = _take_core(pid, cwd, claim_dir)
    return got[0] if got is not None else None


def site_and_discard(pid: int, cwd: Path, claim_dir: Path | None = None
                     ) -> dict[str, Any] | None:
    """`discard_core`, the core's fault site read first (`fault_site`): what is known of a
    crash the evidence budget only counts, from the notes of its notes-only core
    (`corenotes.notes_only`). None when there was no core or it names no site."""
    got = _take_core(pid, cwd, claim_dir)
    return fault_site(got[1]) if got is not None else None


def _take_core(pid: int, cwd: Path, claim_dir: Path | None) -> tuple[Path, CoreNotes] | None:
    """The core of dead process `pid` and its notes, deleted (None: none, or not deleted)."""
    got = _own_core(pid, cwd, claim_dir)
    if got is None:
        return None
    try:
        os.unlink(got[0])
    except OSError:
        return None
    return got


def _own_core(pid: int, cwd: Path, claim_dir: Path | None) -> tuple[Path, CoreNotes] | None:
    """The core of dead process `pid` and its notes, without waiting (see `discard_core`)."""
    if claim_dir is not None:
        core, notes, _ = find_core(pid, cwd, 0.0, claim_dir)
        return (core, notes) if core is not None and notes is not None else None
    pattern, uses_pid = read_core_pattern()
    for g in core_globs(pattern, pid, cwd, uses_pid=uses_pid):
        for hit in glob.glob(g):
            notes = read_core_notes(Path(hit))
            if notes is not None and notes.pid == pid:
                return Path(hit), notes
    return None


def sweep_cores(run_dir: Path) -> list[Path]:
    """Delete every ELF core file left under RUN_DIR/cores (at the end of a run: cores of
    crashes nobody read). Returns what was deleted; other files are left alone."""
    return delete_cores(p for p in sorted((run_dir / CORES_FOLDER).glob("*/*")) if p.is_file())


def delete_cores(paths: Iterable[Path],
                 whose: Callable[[Path, CoreNotes], bool] = lambda _, __: True) -> list[Path]:
    """Deletes each of `paths` that is a core (its notes read) for which `whose(path,
    notes)`; returns them."""
    gone = []
    for path in paths:
        notes = read_core_notes(path)
        if notes is not None and whose(path, notes):
            try:
                path.unlink()
                gone.append(path)
            except OSError:
                pass
    return gone


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


# ---- reading it -------------------------------------------------------------------------
def gdb_core_argv(gdb: str, exe: str, core: Path) -> list[str]:
    """gdb over a core, batch mode, no init files, no network symbol lookups. Pure."""
    return [gdb, "-batch", "-nx", "-iex", "set debuginfod enabled off", "-iex",
            "set auto-load python-scripts off", "-ex", "set pagination off", "-ex",
            "thread apply all bt", exe, str(core)]


def pystack_available() -> bool:
    return importlib.util.find_spec("pystack") is not None


def native_stacks(pid: int, exe: str, core_dir: Path, stderr_text: str,
                  timeout_s: float | None = None, *, keep: bool = False,
                  since_wall: float | None = None, tids: Collection[int] = (),
                  claim_dir: Path | None = None) -> Stacks:
    """Every thread's stack of process `pid`, dead by a signal, whose executable was `exe`
    (the worker's sys.executable) and whose cwd was `core_dir`. Paths, first that works:

    1. core+gdb: the core (see `find_core`) read by `gdb thread apply all bt` (or cuda-gdb);
       when py-spy is here its Python frames of the same core are appended
       (`# py-spy dump --core`);
    2. core+pystack (when `pystack` is importable): native and Python frames;
    3. core+py-spy: Python frames only (no gdb, e.g. on the H200);
    4. kernel-log: the kernel's `segfault at ... in LIB[...]` line of one of the process's
       threads (`pid`, `tids`, or the core's crashed thread) logged since `since_wall`
       (default: a minute ago); absent when the worker handled the signal (faulthandler);
    5. faulthandler: its "Fatal Python error" text in `stderr_text` (Python frames only);
    6. none.

    `crashed_tid` and `signal` come from the core's notes whenever a core was found, whatever
    read it. The whole call is bounded by about `timeout_s` (each tool is killed at the
    budget left). The core is deleted afterwards unless `keep` (then `Stacks.core` is its
    path); a core that is not this process's is never touched."""
    timeout_s = stacks_timeout_s() if timeout_s is None else timeout_s
    t_end = time.monotonic() + timeout_s
    notes_text: list[str] = []

    def left() -> float:
        return max(_MIN_TOOL_S, t_end - time.monotonic())

    core, notes, why = find_core(pid, core_dir, min(_PIPE_CORE_WAIT_S, timeout_s / 3),
                                 claim_dir, since_wall)
    if why:
        notes_text.append(why)
    crashed = notes.crashed_tid if notes else None
    signum = notes.signal if notes else None
    core_bytes = _size(core) if core is not None else None
    result: Stacks | None = None
    cut = core is not None and notes is not None and not notes.memory
    if cut:
        notes_text.append("its core holds no stack memory (a notes-only core: the evidence "
                          "budget's, or cut at its size limit)")
    try:
        if core is not None and not cut:
            result = _read_core(core, exe, crashed, left, notes_text)
        if result is None:
            result = _from_kernel_log(pid, tids, crashed, since_wall, notes_text)
        if result is None:
            fh = faulthandler_text(stderr_text)
            if fh:
                result = Stacks(StackSource.FAULTHANDLER, fh)
            else:
                notes_text.append("no faulthandler report in stderr")
                result = Stacks(StackSource.NONE, "")
    finally:
        if core is not None and not keep:
            try:
                core.unlink()
            except OSError as exc:
                notes_text.append(f"could not delete {core}: {exc}")
    if result.crashed_tid is None:
        result.crashed_tid = crashed
    result.signal = signum if signum else result.signal
    result.core = core if keep else None
    result.core_bytes = core_bytes
    result.fault_site = fault_site(notes)
    result.note = "; ".join(notes_text)
    return result


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _read_core(core: Path, exe: str, crashed: int | None, left: Callable[[], float],
               notes_text: list[str]) -> Stacks | None:
    gdb = find_gdb()
    pyspy = find_pyspy()
    if gdb:
        run = procstate.run_bounded(gdb_core_argv(gdb, exe, core), left())
        dump = parse_gdb(run.stdout)
        threads, current = dump.threads, dump.current_tid
        if threads:
            text = (f"# {os.path.basename(gdb)} thread apply all bt ({exe} {core.name})\n"
                    f"{run.stdout}")
            if pyspy:
                py = procstate.run_bounded([pyspy, "dump", "--core", str(core)], left())
                if py.rc == 0 and py.stdout.strip():
                    text += f"\n# py-spy dump --core (Python frames)\n{py.stdout}"
            return Stacks(StackSource.CORE_GDB, text, crashed if crashed else current,
                          threads=threads)
        notes_text.append(f"gdb gave no threads ({run.describe()})")
    else:
        notes_text.append("gdb or cuda-gdb not found")
    if pystack_available():
        run = procstate.run_bounded([sys.executable, "-m", "pystack", "core", str(core), exe,
                                     "--native"], left())
        threads = parse_pystack(run.stdout).threads
        if run.rc == 0 and run.stdout.strip():
            return Stacks(StackSource.CORE_PYSTACK, run.stdout, crashed, threads=threads)
        notes_text.append(f"pystack gave nothing ({run.describe()})")
    if pyspy:
        run = procstate.run_bounded([pyspy, "dump", "--core", str(core)], left())
        if run.rc == 0 and run.stdout.strip():
            return Stacks(StackSource.CORE_PYSPY, run.stdout, crashed,
                          threads=parse_pyspy(run.stdout).threads)
        notes_text.append(f"py-spy gave nothing ({run.describe()})")
    return None


def _from_kernel_log(pid: int, tids: Collection[int], crashed: int | None,
                     since_wall: float | None, notes_text: list[str]) -> Stacks | None:
    since = since_wall if since_wall is not None else time.time() - 60.0
    log = kernellog.kernel_log_tail(since)
    if log.source is None:
        notes_text.append(f"kernel log: {log.note}")
        return None
    wanted = {pid, *tids} | ({crashed} if crashed else set())
    hits, tid = kernel_fault_lines(log.lines, wanted)
    if not hits:
        notes_text.append(f"no fault line of pid {pid} in the kernel log")
        return None
    return Stacks(StackSource.KERNEL_LOG, "\n".join(hits) + "\n", tid)
