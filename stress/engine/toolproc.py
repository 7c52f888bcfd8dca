"""The tool-process kit every engine that runs external processes shares (exec's user command,
native's IREE tools): a job process started in its own session with core dumps on, by
subprocess or by os.posix_spawn for processes started hundreds of times a second; the core
limit raised around a spawn (or held raised); an fd that becomes readable at a process's exit,
so the session wakes on it as on a worker's pipe; the slots of the copies running at once.
Carved out of execrunner.py (issue 25), so native.py need not import the exec engine."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stress.engine import postmortem
from stress.engine.workermanage import LaunchSpec, Proc, State, WorkerHandle


def is_elf(path: Path) -> bool:
    """`path` is an ELF file (a native tool, not a wrapper script); False when unreadable."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def exit_fd(proc: Proc) -> tuple[int, int | None]:
    """(fd, spare): an fd that becomes readable when `proc` exits and never before (a pidfd):
    the session selects on it as on a worker's message pipe, so an exit wakes it at once;
    reading it fails, which the handle takes as the end of its messages. Without pidfds (Linux
    < 5.3) the read end of a pipe whose write end (`spare`, for the caller to close once the
    process is gone) stays open: never readable, so the exit is seen by the next tick's poll."""
    try:
        return os.pidfd_open(proc.pid), None
    except (AttributeError, OSError):
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        return read_fd, write_fd


_CORE_LIMIT_BYTES: int = 4 << 30  # as postmortem.prepare_child: a core keeps every thread
_YAMA_SCOPE: Path = Path("/proc/sys/kernel/yama/ptrace_scope")


def _needs_ptracer() -> bool:
    """Yama ptrace_scope 1: only a process the child names may attach (our gdb and py-spy are
    the parent's children, not the tool's ancestors), which only the child itself can say."""
    try:
        return int(_YAMA_SCOPE.read_text().strip()) == 1
    except (OSError, ValueError):
        return False


NEEDS_PTRACER: bool = _needs_ptracer()


def spawn(argv: Sequence[str], *, stdout: Any, stderr: Any, env: Mapping[str, str], cwd: Path,
          parent_pid: int, popen: Callable[..., Any] = subprocess.Popen) -> Any:
    """Starts a job's process in its own session with core dumps on. Under Yama scope 1 that
    takes `postmortem.prepare_child` between fork and exec (a full fork of the parent: ~10 ms
    here); elsewhere the child is spawned by vfork (~3 ms) and inherits the core limit the
    parent raises for the spawn."""
    if NEEDS_PTRACER:
        return popen(list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                     env=dict(env), cwd=cwd, start_new_session=True,
                     preexec_fn=lambda: postmortem.prepare_child(parent_pid))
    limit = resource.getrlimit(resource.RLIMIT_CORE)
    _set_core_limit(_core_limit(*limit), limit[1])
    try:
        return popen(list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                     env=dict(env), cwd=cwd, start_new_session=True)
    finally:
        _set_core_limit(*limit)


_WAIT_POLL_S: float = 0.01  # SpawnedProcess.wait's poll period (kill waits: seconds)
_RESTORED_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, n) for n in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, n))
#   ignored by Python, reset for the child as subprocess's restore_signals does


class SpawnedProcess:
    """A process started by os.posix_spawn, with the part of subprocess.Popen the session
    uses (pid, returncode, poll, wait raising subprocess.TimeoutExpired)."""

    def __init__(self, pid: int, argv: Sequence[str]):
        self.pid = pid
        self.args = list(argv)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rc = self.poll()
            if rc is not None:
                return rc
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(_WAIT_POLL_S)


def spawn_fast(argv: Sequence[str], *, stdout_fd: int, stderr_fd: int,
               env: Mapping[str, str], cwd: Path | str, parent_pid: int,
               limit_raised: bool = False) -> Any:
    """`spawn` for processes started hundreds of times a second (native jobs): os.posix_spawn
    (vfork + exec in C: no Python-level encoding of the environment, no fd walk) into a new
    session, stdin from /dev/null, output to the given fds; the core limit inherited, raised.
    Under Yama scope 1 (the child must name its tracer itself) it falls back to `spawn`.
    posix_spawn takes no cwd (`cwd` is where the child's core lands): the parent steps into
    it for the spawn and back (argv must hold absolute paths). Only the session's thread
    spawns, and no other thread of the parent runs while it does (evidence threads are joined
    before the session goes on). `limit_raised`: the caller holds a CoreLimit (no raise and
    restore per spawn)."""
    if NEEDS_PTRACER:
        return spawn(argv, stdout=stdout_fd, stderr=stderr_fd, env=env, cwd=Path(cwd),
                     parent_pid=parent_pid)
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, stdout_fd, 1), (os.POSIX_SPAWN_DUP2, stderr_fd, 2)]
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    limit = None if limit_raised else resource.getrlimit(resource.RLIMIT_CORE)
    try:
        os.chdir(cwd)
        if limit is not None:
            _set_core_limit(_core_limit(*limit), limit[1])
        pid = os.posix_spawn(argv[0], list(argv), env, file_actions=actions, setsid=True,
                             setsigdef=_RESTORED_SIGNALS)
    finally:
        if limit is not None:
            _set_core_limit(*limit)
        os.fchdir(here)
        os.close(here)
    return SpawnedProcess(pid, argv)


class CoreLimit:
    """The parent's soft core limit raised (as spawn_fast does per spawn) until `close`, for a
    runner that spawns hundreds of processes a second: two setrlimit calls fewer per spawn.
    The parent's own core, should it crash meanwhile, may then be as large as a job's."""

    def __init__(self) -> None:
        self.saved = resource.getrlimit(resource.RLIMIT_CORE)
        _set_core_limit(_core_limit(*self.saved), self.saved[1])
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            _set_core_limit(*self.saved)


def _core_limit(soft: int, hard: int) -> int:
    """The soft core limit for a job: at least our cap (within the hard limit), never below
    what the user set (`ulimit -c unlimited` stays unlimited: a CUDA process's core is big)."""
    if soft == resource.RLIM_INFINITY:
        return soft
    cap = _CORE_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(hard, _CORE_LIMIT_BYTES)
    return max(soft, cap)


def _set_core_limit(soft: int, hard: int) -> None:
    """The parent's own soft core limit, which posix_spawn's child inherits. Raised for the
    spawn and put back: raising the child's by prlimit after the spawn lost the race to a
    short program that crashed first (CI: `no core of 455`, a crash at exit with no stack)."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    except (OSError, ValueError):
        pass  # not allowed: the crash then has the kernel log line only


def job_paths(spec: LaunchSpec) -> tuple[Path, Path, Path]:
    """(journal, stdout, stderr) of a job process: LaunchSpec.paths without its core folder
    per process (thousands of empty folders; removing each costs ~2 ms here)."""
    run_dir = spec.run_dir.resolve()
    logs = run_dir / "workers"
    logs.mkdir(parents=True, exist_ok=True)
    return (run_dir / "journal" / f"{spec.name}.bin", logs / f"{spec.name}.stdout",
            logs / f"{spec.name}.stderr")


class Slots:
    """The places of the copies running at once. `on_exit`: a slot is free again once its
    process has been reaped, so N copies use 0..N-1 (exec's `{gpu}`). Else once the session
    has handled the exit (it starts a replacement first): a slot that is a core folder must
    not get a second crashing process while the first one's core is read (the kernel
    replaces a `core` of the same name), so N copies may use up to 2N slots."""

    def __init__(self, on_exit: bool = True, busy: Callable[[int], bool] | None = None
                 ) -> None:
        self.held: dict[int, WorkerHandle] = {}
        self.on_exit = on_exit
        self.busy = busy  # a slot whose last process is handled but still busy (its core
        #   not read yet: the session reads cores in the background)

    def take(self) -> int:
        for s, h in list(self.held.items()):
            done = h.state is State.EXITED or (self.on_exit and h.proc.returncode is not None)
            if done and not (self.busy is not None and self.busy(s)):
                del self.held[s]
        return next(i for i in range(len(self.held) + 1) if i not in self.held)

    def hold(self, slot: int, h: WorkerHandle) -> None:
        self.held[slot] = h

    def live(self) -> list[WorkerHandle]:
        return [h for h in self.held.values() if h.state is not State.EXITED]
