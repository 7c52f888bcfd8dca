"""The other processes of an exec job's group: a compiler the test runs (iree-compile through
iree.compiler), a test binary under ctest, a helper tool. When one of them dies by a signal,
the command usually only exits non-zero ("1 failed"): that death, not the exit, is the event.

**Where their cores go.** The command runs with core dumps on (`toolproc.spawn` raises its
RLIMIT_CORE; every process it starts inherits the limit), and a relative `core_pattern` (`core`,
the container default) makes the kernel write a core in the *crashing process's* working
directory: the user's folder. Without root neither the pattern nor a process's cwd can be
chosen for it, so `GroupWatch` takes the cores out of the user's folders instead:

* every watch tick (10 a second) it lists the group's live processes (the command's
  descendants, from /proc/PID/task/TID/children) and remembers their working directories,
  names and thread ids;
* every SWEEP_PERIOD_S, and once more when the job ends, it looks in those directories (the
  command's own first; the pattern's folder when it is absolute) for core files; a core whose
  ELF notes name a process of this job's session (pr_sid: the command was started with
  setsid, so the session id is its pid), other than the command itself (the session reads
  that one where it is: `capture.on_exit`), is renamed into the run folder,
  `RUN/cores/children/core.PID`, once its process has finished dumping it (gone or a zombie);
* when the command failed and no core was found but the output or the kernel says a process
  died by a signal, the command's folder is searched (TREE_DEPTH levels, TREE_ENTRIES
  entries) for such a core: ctest runs each test in its own build folder, where short-lived
  tests are never seen alive.

A core on another filesystem than the run folder is read where it is. Every core is then read
by gdb and deleted (`postmortem.native_stacks`) or deleted unread (`discard`), and what is
left is swept at the end of the run (`postmortem.sweep_cores`).

**Which one crashed** (`crashed`): the first core of the group, read; else a kernel fault line
of a thread seen in the group, or of a process the output names as killed by a signal; else
the output's own line (`testlog.signal_deaths`: no native frames then).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.engine import kernellog, postmortem, procstate
from stress.engine.testlog import SignalDeath

CHILD_CORES: str = "children"  # RUN/cores/children/: one folder for every job's (a folder per
#   job would leave thousands of empty ones; a core's name has its pid)
SWEEP_PERIOD_S: float = 0.25  # cores looked for while the job runs: a core moved within this
#   of its writing is out of the user's folder before a second crash of the group replaces it
#   (a `core` without a pid in its name), at a directory listing per folder per sweep
DIRS_KEPT: int = 16  # working directories of the group's processes looked at per sweep
SEEN_KEPT: int = 4096  # thread ids of the group remembered (kernel log lines name a thread)
TREE_DEPTH: int = 4  # the search under the command's folder: build/bin/tests/core is depth 3
TREE_ENTRIES: int = 20_000  # ...and its bound: 0.08 s here (200 folders x 100 files, a
#   loaded 2-core VM), paid only by a failed job whose output or kernel log says a child died
#   and whose core was not found elsewhere
_RUN_STORE: str = "stress.db"  # what marks a run folder (skipped by the end-of-run sweep)
_CLOCK_SLACK_S: float = 2.0  # a core's mtime may precede the job's start by this (coarse clocks)
_KERNEL_SLACK_S: float = 0.2  # a kernel line this far before the job's start may be its own
#   (printk's clock drifts from the wall clock by milliseconds); more would take the line of
#   the previous job, which may have ended moments before this one started
_KERNEL_FAULT = re.compile(r"(?:^|\s)(\S+)\[(\d+)\]:? (segfault at|general protection|"
                           r"trap (divide error|invalid opcode|int3))")
_COMM_LEN: int = 15  # the kernel's comm: a process name cut to TASK_COMM_LEN - 1
_KERNEL_SIGNALS: dict[str, str] = {"divide error": "SIGFPE", "invalid opcode": "SIGILL",
                                   "int3": "SIGTRAP"}  # else SIGSEGV (segfault, GP fault)


@dataclass
class ChildCrash:
    """A process of the job's group that died by a signal, and how it was found: `core`
    (`core_path` read by gdb against `exe`), `kernel log` (`line`), `output` (`line`; no pid)."""

    name: str
    signal: str
    source: str
    pid: int | None = None
    core_path: Path | None = None
    exe: str | None = None
    line: str = ""
    tids: list[int] = field(default_factory=list)
    command: str = ""  # its whole command line, when it was seen alive

    def describe(self) -> str:
        who = self.name or "a process"
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"its child {who}{pid} was killed by {self.signal} (found by its {self.source})"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "signal": self.signal, "source": self.source,
                "pid": self.pid, "exe": self.exe, "line": self.line or None,
                "command": self.command or None}


def recent_cores(top: Path, globs: list[str], since_wall: float) -> list[Path]:
    """Regular files under `top` (TREE_DEPTH levels, TREE_ENTRIES entries; hidden folders,
    other filesystems, symbolic links and run folders skipped) named like a core (`globs`:
    core_name_globs) and written since `since_wall`."""
    found: list[Path] = []
    seen = 0
    base_depth = len(top.parts)
    names = [g for g in globs if not g.startswith("/")]
    try:
        device = top.stat().st_dev
    except OSError:
        return found
    for root, dirs, files in os.walk(top):
        seen += len(dirs) + len(files)
        if seen > TREE_ENTRIES:
            break
        if _RUN_STORE in files and root != str(top):  # a run folder: its cores are its own
            dirs[:] = []
            continue
        deep = len(Path(root).parts) - base_depth >= TREE_DEPTH
        dirs[:] = [] if deep else [d for d in dirs if not d.startswith(".") and
                                   _on(os.path.join(root, d), device)]
        for name in files:
            if any(fnmatch.fnmatchcase(name, g) for g in names):
                path = Path(root) / name
                try:
                    st = path.lstat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_mtime >= since_wall - _CLOCK_SLACK_S:
                    found.append(path)
    return found


def _on(path: str, device: int) -> bool:
    try:
        return os.lstat(path).st_dev == device
    except OSError:
        return False


def sweep_leftovers(top: Path, sessions: Mapping[int, tuple[float, float | None]],
                    pattern: tuple[str, bool]) -> list[Path]:
    """At the run's end: cores under `top` (`recent_cores`) of processes of the run's exec
    jobs, which no job's sweep found (a child that crashed in a folder never seen while it
    ran, in a job that then passed). A core is the run's when its ELF notes name one of
    `sessions` (each command was started in a session of its own: its pid -> (started,
    ended or None), wall clock) and this user, and it was written while that session lived
    (a pid used again later, by anyone, is another session). Deleted; returns them."""
    uid = os.getuid()
    now = time.time()

    def ours(path: Path, notes: postmortem.CoreNotes) -> bool:
        span = sessions.get(notes.sid) if notes.sid is not None else None
        if span is None or notes.uid != uid:
            return False
        try:
            written = path.lstat().st_mtime
        except OSError:
            return False
        end = span[1] if span[1] is not None else now
        return span[0] - _CLOCK_SLACK_S <= written <= end + _CLOCK_SLACK_S

    since = min((start for start, _ in sessions.values()), default=now)
    return postmortem.delete_cores(recent_cores(top, core_name_globs(*pattern), since), ours)


def core_name_globs(pattern: str, uses_pid: bool) -> list[str]:
    """File-name globs of the cores `core_pattern` gives any process (a relative pattern's
    name; the whole path of an absolute one): %p a number, other specifiers anything,
    core_uses_pid's `.PID` suffix; `core` and `core.PID` always (all there is to look for
    under a `|pipe` pattern, which writes no file itself). Pure."""
    out: list[str] = []
    if pattern and not pattern.startswith("|"):
        text, i, has_pid = "", 0, False
        while i < len(pattern):
            c = pattern[i]
            if c == "%" and i + 1 < len(pattern):
                spec = pattern[i + 1]
                text += "%" if spec == "%" else "[0-9]*" if spec in "pP" else "*"
                has_pid = has_pid or spec in "pP"
                i += 2
                continue
            text += glob.escape(c)
            i += 1
        out.append(text + (".[0-9]*" if uses_pid and not has_pid else ""))
    for name in ("core", "core.[0-9]*"):
        if name not in out:
            out.append(name)
    return out


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid` (children of each of its threads, recursively); [] where
    /proc/PID/task/TID/children is not there (a kernel without CONFIG_PROC_CHILDREN)."""
    out: list[int] = []
    todo, seen = [pid], {pid}
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
            for k in kids:
                if k not in seen:
                    seen.add(k)
                    out.append(k)
                    todo.append(k)
    return out


def _finished_dumping(pid: int) -> bool:
    """The kernel has written the whole core of `pid`: the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


class GroupWatch:
    """The cores and processes of one exec job's group (module doc). Driven by its runner:
    `tick` from the job's watch, `sweep(final=True)` when it ends, then `crashed` or
    `discard`."""

    def __init__(self, leader: int, cwd: Path, dest: Path, started_wall: float,
                 core_pattern: tuple[str, bool] | None = None,
                 claimed: dict[int, None] | None = None) -> None:
        self.leader = leader
        self.cwd = cwd
        self.dest = dest  # created at the first core moved (a clean job leaves no folder)
        self.started_wall = started_wall
        pattern, uses_pid = core_pattern or postmortem.read_core_pattern()
        self.globs = core_name_globs(pattern, uses_pid)
        self.dirs: dict[Path, None] = {cwd: None}
        self.absolute = bool(self.globs) and self.globs[0].startswith("/")
        self.names: dict[int, str] = {}  # pid -> comm of the group's processes seen
        self.cmdlines: dict[int, str] = {}  # pid -> its whole command line, as last seen
        #   (a core's psargs keeps 80 bytes of it)
        self.tids: dict[int, int] = {}  # tid -> its process, for kernel log lines
        self.cores: dict[int, tuple[Path, postmortem.CoreNotes]] = {}  # pid -> where, notes
        self.waiting: dict[Path, int] = {}  # cores still being written: path -> pid
        self.foreign: dict[Path, tuple[float, int]] = {}  # cores not ours (another session's,
        #   the command's own), by mtime and size: not read again while they stay the same
        self.last_sweep = 0.0
        self.claimed = claimed if claimed is not None else {}  # kernel lines' tids already
        #   blamed by a job (shared by its runner's jobs: copies running at once, of one
        #   command, each take a line of their own)

    # ---- while it runs ---------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        """The group's live processes noted; its cores swept every SWEEP_PERIOD_S."""
        now = time.monotonic() if now is None else now
        self._sample()
        if now - self.last_sweep >= SWEEP_PERIOD_S:
            self.last_sweep = now
            self.sweep()

    def _sample(self) -> None:
        for pid in [self.leader, *descendants(self.leader)]:
            try:
                cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                continue
            if cwd not in self.dirs and len(self.dirs) < DIRS_KEPT:
                self.dirs[cwd] = None
            if pid == self.leader:
                continue
            try:  # every tick: a forked child execs its program, a compiler starts its
                #   thread pool, after their first sample
                self.names[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
                if len(self.cmdlines) < SEEN_KEPT or pid in self.cmdlines:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0")
                    self.cmdlines[pid] = shlex.join(a.decode(errors="replace")
                                                    for a in argv.split(b"\0"))
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for t in tasks:
                if len(self.tids) < SEEN_KEPT:
                    self.tids[int(t)] = pid

    def _candidates(self) -> list[Path]:
        # cores another reader claimed out of a shared folder wait in dest under their pid
        out = [p for p in postmortem.listdir(self.dest) if p.name.startswith("core.")]
        if self.absolute:
            return out + [Path(p) for p in glob.glob(self.globs[0])]
        for d in self.dirs:
            for g in self.globs:
                if not g.startswith("/"):
                    out += [Path(p) for p in glob.glob(os.path.join(glob.escape(str(d)), g))]
        return out

    def sweep(self, final: bool = False, paths: list[Path] | None = None) -> None:
        """Cores of the group's processes (not the command's own) moved out of the user's
        folders (module doc). `final`: the job has ended (its group is dead): a core whose
        process seems alive is taken too (its pid was reused)."""
        for path in paths if paths is not None else self._candidates():
            try:
                st = path.stat()
            except OSError:
                continue
            if self.foreign.get(path) == (st.st_mtime, st.st_size):
                continue
            if st.st_mtime < self.started_wall - _CLOCK_SLACK_S:  # before this job began: not
                self.foreign[path] = (st.st_mtime, st.st_size)  # its group's (a reused pid)
                continue
            notes = postmortem.read_core_notes(path)
            if notes is None or notes.sid != self.leader or notes.pid == self.leader:
                self.foreign[path] = (st.st_mtime, st.st_size)  # (one being written grows)
                continue
            if notes.pid in self.cores:
                continue
            if not final and not _finished_dumping(notes.pid):
                self.waiting[path] = notes.pid
                continue
            self.waiting.pop(path, None)
            got = postmortem.claim(path, self.dest)  # moved first, its notes read again
            if got is None and path.exists():  # another filesystem: read where it is
                got = (path, notes)
            if got is None:
                continue
            moved, notes = got
            if notes.sid != self.leader or notes.pid == self.leader:  # replaced in between:
                continue  # not this group's (its own reader finds it in dest)
            self.cores[notes.pid] = (moved, notes)

    # ---- when it has ended -------------------------------------------------------------------
    def search_tree(self) -> None:
        """Cores of the group under the command's folder (module doc), bounded."""
        self.sweep(final=True, paths=recent_cores(self.cwd, self.globs, self.started_wall))

    def crashed(self, deaths: list[SignalDeath], kernel: kernellog.KernelLog | None = None
                ) -> ChildCrash | None:
        """The process of the group that died by a signal (module doc), or None. `deaths`:
        what the output says; `kernel`: the kernel log since the job started (None: read
        here when no core answers)."""
        self.sweep(final=True)
        hits: list[tuple[str, int, str, str]] = []
        if not self.cores:
            if kernel is None:
                kernel = kernellog.kernel_log_tail(self.started_wall)
            hits = self._kernel_hits(kernel.stamped(), deaths)
            if deaths or hits:
                self.search_tree()
        if self.cores:
            pid, (path, notes) = next(iter(self.cores.items()))
            sig = procstate.signal_name(notes.signal) or f"signal {notes.signal}"
            return ChildCrash(notes.name or self.names.get(pid, ""), sig, "core", pid, path,
                              notes.executable(), self.cmdlines.get(pid) or notes.args,
                              notes.tids, self.cmdlines.get(pid, ""))
        if hits:
            comm, tid, sig, line = hits[0]
            self.claimed[tid] = None
            while len(self.claimed) > SEEN_KEPT:
                del self.claimed[next(iter(self.claimed))]
            pid = self.tids.get(tid, tid)
            seen = self.names.get(pid, comm)  # its full name, unless it exec'd after its last
            #   sample (python's forked child became iree-compile): a main thread's comm is
            #   its process's name at the crash (another thread's comm is the thread's own)
            name = comm if tid == pid and seen[:_COMM_LEN] != comm[:_COMM_LEN] else seen
            return ChildCrash(name, sig, "kernel log", pid, None, None, line.strip(), [tid],
                              self.cmdlines.get(pid, ""))
        if deaths:
            d = deaths[0]
            return ChildCrash(d.name, d.signal, "output", line=d.line)
        return None

    def _kernel_hits(self, lines: list[tuple[float | None, str]], deaths: list[SignalDeath]
                     ) -> list[tuple[str, int, str, str]]:
        """(comm, tid, signal, line) of the kernel's fault lines logged since the job started
        (unstamped ones too) of a thread seen in the group, or of a process the output names
        as killed by that signal (a kernel comm is 15 characters), not blamed already."""
        named = {(d.name[:_COMM_LEN], d.signal) for d in deaths if d.name}
        out = []
        for when, line in lines:
            m = _KERNEL_FAULT.search(line)
            if m is None or when is not None and when < self.started_wall - _KERNEL_SLACK_S:
                continue
            comm, tid = m.group(1), int(m.group(2))
            sig = _KERNEL_SIGNALS.get(m.group(4) or "", "SIGSEGV")
            if tid == self.leader or tid in self.claimed:
                continue
            if tid in self.tids or (comm[:_COMM_LEN], sig) in named:
                out.append((comm, tid, sig, line))
        return out

    def discard(self, keep: int | None = None) -> list[Path]:
        """Deletes the group's cores (all but `keep`'s: its reader deletes that one), those
        still being written when the job ended, and those written since the last sweep in
        the folders its processes were seen in. Returns what was deleted."""
        self.sweep(final=True, paths=list(self.waiting))
        self.sweep(final=True)
        gone = []
        for pid, (path, _) in list(self.cores.items()):
            if pid == keep:
                continue
            try:
                path.unlink()
                gone.append(path)
            except OSError:
                pass
            del self.cores[pid]
        return gone

    def summary(self) -> dict[str, Any]:
        """For the failure's evidence: what the watch saw of the group."""
        return {"processes_seen": len(self.names), "cores": len(self.cores),
                "folders": [str(d) for d in self.dirs]}
