"""Parent side of one worker process: spawn, feed jobs, read messages, stop, kill.

Each worker runs in its own process group (start_new_session), so stopping it takes every
process it started. Messages come over a dedicated pipe, read without blocking.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from stress.engine import postmortem
from stress.engine.jobs import Job
from stress.engine.journal import JournalReader

if TYPE_CHECKING:
    from stress.engine.children import ChildCrash, GroupWatch
    from stress.engine.watchdog import Stuck

_TERMINATE_GRACE_S: float = 2.0  # a worker gets this long after SIGTERM before SIGKILL
_KILL_WAIT_S: float = 5.0  # after SIGKILL: longer means the process is stuck in the kernel
_READ_CHUNK: int = 1 << 16
_RECENT_JOBS: int = 64  # enough to cover every thread's last job


class Proc(Protocol):
    """What the session needs of a worker process: subprocess.Popen, or a process forked by
    the fork server (forkclient.ForkedProcess)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class Judge(Protocol):
    """The runner's own judgement of a process that has neither our journal nor our message
    pipe (an IREE tool, the user's command): its deadlines, its results, its evidence. The
    session and capture ask it; a Python worker has none (its journal and messages say it)."""

    @property
    def exe(self) -> str:
        """The executable its core belongs to."""

    @property
    def step(self) -> str:
        """The step blamed when no journal names one (`invoke`, `run`)."""

    @property
    def group(self) -> GroupWatch | None:
        """Its process group's other processes and their cores (an exec job); None: alone."""

    def watch(self, now_ns: int) -> Stuck | None:
        """Whether it is past one of its deadlines now (the journal watchdog's place)."""

    def finish(self, rc: int) -> list[tuple[str, dict[str, Any]]]:
        """What it printed, as messages (job_done, bye) handled before its exit is judged."""

    def facts(self) -> dict[str, Any]:
        """Facts read off the process for any failure's evidence (its last output lines)."""

    def add_evidence(self, folder: Path) -> None:
        """Its runner's own files (a native job's HAL replay) into a failure folder of it."""

    def child_crash(self) -> ChildCrash | None:
        """The process of its group that died by a signal, if one did (exec)."""


class State(enum.Enum):
    RUNNING = "running"
    STOPPING = "stopping"  # `stop` sent, waiting for bye and exit
    EXITED = "exited"


@dataclass
class WorkerHandle:
    worker_id: int
    generation: int
    proc: Proc
    msg_fd: int
    journal_path: Path
    stdout_path: Path
    stderr_path: Path
    ephemeral: bool  # process-per-job: one job, then exit
    started: float = field(default_factory=time.monotonic)
    state: State = State.RUNNING
    outstanding: dict[int, Job] = field(default_factory=dict)
    jobs_sent: int = 0  # every job ever sent (--max-jobs-per-worker)
    job_failed: bool = False  # a job it ran reported an error or miscompare
    job_limit: int | None = None  # jobs this pool worker runs before it retires (None: no limit)
    recent: dict[int, Job] = field(default_factory=dict)  # finished jobs, for teardown blame
    hello_at: float | None = None
    bye_at: float | None = None
    exited_at: float | None = None
    killed_by_us: bool = False
    unkillable: bool = False  # still there after SIGKILL: stuck in the kernel (D state)
    stop_sent_at: float | None = None
    expected_rc: int = 0  # a clean end (exit-sigterm jobs end by SIGTERM on purpose)
    facts_worker: bool = False  # asked to report the runtime facts
    eof: bool = False  # its message pipe is closed: leave it out of select()
    messages: bool = True  # False: msg_fd is an exit fd (toolproc.exit_fd), never read (a
    #   failed read of a pidfd raised an OSError per process: ~5% of the parent's time)
    batch: int | None = None  # exit-family wave this process belongs to
    judge: Judge | None = None  # a tool process's or a command's (None: our journal and
    #   messages say what the process did)
    bye: dict[str, Any] | None = None
    stdin: IO[bytes] | None = None
    facts: dict[str, Any] | None = None
    db_row: int = 0
    cwd: Path | None = None  # where a core of this worker lands
    cores: bool = True  # may dump a core (the evidence budget turns cores off for most new
    #   processes once every crash mode seen has its evidence)
    started_wall: float = field(default_factory=time.time)
    log_from: int = 0  # where this process's output starts in its logs (shared by turns)
    _buf: bytes = b""
    _journal: JournalReader | None = None
    inbox: deque[tuple[str, dict[str, Any]]] = field(default_factory=deque)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def name(self) -> str:
        return f"w{self.worker_id}" + (f".{self.generation}" if self.generation else "")

    def journal(self) -> JournalReader | None:
        if self._journal is None:
            try:
                self._journal = JournalReader(self.journal_path)
            except (OSError, ValueError):
                return None  # not written yet
        return self._journal

    def send(self, name: str, payload: dict[str, Any]) -> bool:
        if self.stdin is None or self.state is State.EXITED:
            return False
        try:
            self.stdin.write((json.dumps([name, payload]) + "\n").encode())
            self.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def finished(self, index: int) -> None:
        job = self.outstanding.pop(index, None)
        if job is not None:
            self.recent[index] = job
            if len(self.recent) > _RECENT_JOBS:
                del self.recent[next(iter(self.recent))]

    @property
    def retiring(self) -> bool:
        """It has had all its jobs (--max-jobs-per-worker): it finishes them and leaves, and
        the session starts its successor on the same worker id (the same device) then."""
        return self.job_limit is not None and self.jobs_sent >= self.job_limit

    def room(self, most: int) -> int:
        """How many jobs it may hold: `most`, fewer near its job limit."""
        if self.job_limit is None:
            return most
        return min(most, self.job_limit - self.jobs_sent + len(self.outstanding))

    def send_job(self, job: Job) -> bool:
        return self.send_jobs([job])

    def send_jobs(self, jobs: list[Job]) -> bool:
        """One write (one wake-up of the worker) for a batch of jobs."""
        if not jobs:
            return True
        for job in jobs:
            self.outstanding[job.index] = job
        self.jobs_sent += len(jobs)
        if self.stdin is None or self.state is State.EXITED:
            return False
        data = "".join(json.dumps(["job", j.as_dict()]) + "\n" for j in jobs)
        try:
            self.stdin.write(data.encode())
            self.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def stop(self, drop_queued: bool = False) -> None:
        """Tells the worker to exit once its jobs are done; with `drop_queued`, the jobs it
        holds but has not begun are given back unrun (`jobs_dropped`): the run is ending, and
        a pool worker holds 2 x threads jobs, so a stop would otherwise run twice what is in
        flight (a gate's jobs past its decision)."""
        if self.state is State.RUNNING:
            self.send("stop", {"drop_queued": True} if drop_queued else {})
            self.state = State.STOPPING
            self.stop_sent_at = time.monotonic()

    def pump(self) -> bool:
        """Reads what the worker wrote; queues parsed messages in `inbox`. False at EOF."""
        if self.eof or not self.messages:
            return False
        try:
            chunk = os.read(self.msg_fd, _READ_CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            self.eof = True
            return False
        if not chunk:
            self.eof = True
            return False
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if line.strip():
                try:
                    name, payload = json.loads(line)
                except ValueError:  # a garbled line: our protocol broke, not the runtime
                    name, payload = "garbled", {"line": line[:200].decode(errors="replace")}
                self.inbox.append((name, payload))
        return True

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if rc is not None and self.exited_at is None:
            self.exited_at = time.monotonic()
        return rc

    def kill_group(self, grace_s: float = _TERMINATE_GRACE_S) -> int | None:
        """SIGTERM to the process group, a grace period, then SIGKILL to the whole group even
        when the leader already left (members that ignore SIGTERM must not survive it).
        Returns the leader's exit code, or None when it is still there after SIGKILL (stuck
        in the kernel, e.g. a GPU ioctl: `unkillable`; the session keeps polling it)."""
        self.killed_by_us = True
        signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        signal_group(self.proc.pid, signal.SIGKILL)
        try:
            return self.proc.wait(timeout=_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self.unkillable = True
            return None

    def close(self) -> None:
        self.state = State.EXITED
        for f in (self.stdin,):
            try:
                if f:
                    f.close()
            except OSError:
                pass
        try:
            os.close(self.msg_fd)
        except OSError:
            pass
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    def tail(self, path: Path, max_bytes: int = 16_384) -> str:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(self.log_from if size >= self.log_from else 0, size - max_bytes))
                return f.read().decode(errors="replace")
        except OSError:
            return ""


def kill_groups(handles: list[WorkerHandle],
                grace_s: float = _TERMINATE_GRACE_S) -> dict[int, int | None]:
    """kill_group for several workers at once: SIGTERM to every group, one shared grace
    period, SIGKILL to every group, one shared wait (serially, 8 stuck workers could hold the
    parent for a minute). pid -> exit code (None: unkillable)."""
    for h in handles:
        h.killed_by_us = True
        signal_group(h.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(h.proc.poll() is None for h in handles):
        time.sleep(0.02)
    for h in handles:
        signal_group(h.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + _KILL_WAIT_S
    while time.monotonic() < deadline and any(h.proc.poll() is None for h in handles):
        time.sleep(0.02)
    codes: dict[int, int | None] = {}
    for h in handles:
        codes[h.pid] = h.proc.poll()
        h.unkillable = codes[h.pid] is None
    return codes


def signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class LaunchSpec:
    """One worker process to start: what every Runner needs to know."""

    worker_id: int
    generation: int
    python: str
    config_path: Path
    run_dir: Path
    env: dict[str, str]
    ephemeral: bool  # one job, then exit
    facts: bool  # report runtime/device facts in hello
    job: Job | None = None  # an ephemeral worker's job (runners without stdin take it here)
    timeout_s: float = 30.0  # the run's deadlines, for runners that judge their own processes
    teardown_timeout_s: float = 15.0

    @property
    def name(self) -> str:
        return f"w{self.worker_id}.{self.generation}"

    def paths(self) -> tuple[Path, Path, Path, Path]:
        """(journal, stdout, stderr, cwd) of this worker; the cwd is where a core lands."""
        run_dir = self.run_dir.resolve()
        journal = run_dir / "journal" / f"{self.name}.bin"
        logs = run_dir / "workers"
        for d in (journal.parent, logs):
            d.mkdir(parents=True, exist_ok=True)
        return journal, logs / f"{self.name}.stdout", logs / f"{self.name}.stderr", \
            postmortem.core_dir(run_dir, self.name)

    def worker_argv(self, journal: Path, msg_fd: int, parent_pid: int) -> list[str]:
        """Arguments of stress.engine.worker.main (after `python -m stress.engine.worker`).
        The tracer is always the session: py-spy and gdb run as its children, also for
        processes forked by the fork server (parent_pid 0: their parent is the server)."""
        argv = ["--config", str(self.config_path.resolve()), "--worker-id", str(self.worker_id),
                "--journal", str(journal), "--msg-fd", str(msg_fd),
                "--parent-pid", str(parent_pid), "--tracer-pid", str(os.getpid())]
        return argv + (["--facts"] if self.facts else [])


class Runner(Protocol):
    """Starts the processes the session watches (the seam between the session and what it
    runs): a spawned Python worker, a process forked by the fork server, ..."""

    name: str

    def launch(self, spec: LaunchSpec) -> WorkerHandle: ...

    def ready(self) -> bool:
        """Whether a launch may start now (False: the runner holds launches back a while)."""

    def close(self) -> None: ...


class SpawnRunner:
    """A fresh interpreter per worker (subprocess + exec): always safe, pays start-up each time."""

    name = "spawn"

    def launch(self, spec: LaunchSpec) -> WorkerHandle:
        journal, out_path, err_path, cwd = spec.paths()
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        argv = [spec.python, "-m", "stress.engine.worker",
                *spec.worker_argv(journal, write_fd, os.getpid())]
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                        pass_fds=[write_fd], env=spec.env, cwd=cwd,
                                        start_new_session=True)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        h = WorkerHandle(spec.worker_id, spec.generation, proc, read_fd, journal, out_path,
                         err_path, spec.ephemeral)
        h.stdin, h.cwd = proc.stdin, cwd
        return h

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        pass
