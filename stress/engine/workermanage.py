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
from typing import Any

from stress.engine.jobs import Job
from stress.engine.journal import JournalReader

_TERMINATE_GRACE_S: float = 2.0  # a worker gets this long after SIGTERM before SIGKILL
_READ_CHUNK: int = 1 << 16
_RECENT_JOBS: int = 64  # enough to cover every thread's last job


class State(enum.Enum):
    RUNNING = "running"
    STOPPING = "stopping"  # `stop` sent, waiting for bye and exit
    EXITED = "exited"


@dataclass
class WorkerHandle:
    worker_id: int
    generation: int
    proc: subprocess.Popen[bytes]
    msg_fd: int
    journal_path: Path
    stdout_path: Path
    stderr_path: Path
    ephemeral: bool  # process-per-job: one job, then exit
    started: float = field(default_factory=time.monotonic)
    state: State = State.RUNNING
    outstanding: dict[int, Job] = field(default_factory=dict)
    recent: dict[int, Job] = field(default_factory=dict)  # finished jobs, for teardown blame
    bye_at: float | None = None
    exited_at: float | None = None
    killed_by_us: bool = False
    facts: dict[str, Any] | None = None
    db_row: int = 0
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
        if self.proc.stdin is None or self.state is State.EXITED:
            return False
        try:
            self.proc.stdin.write((json.dumps([name, payload]) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def finished(self, index: int) -> None:
        job = self.outstanding.pop(index, None)
        if job is not None:
            self.recent[index] = job
            if len(self.recent) > _RECENT_JOBS:
                del self.recent[next(iter(self.recent))]

    def send_job(self, job: Job) -> bool:
        return self.send_jobs([job])

    def send_jobs(self, jobs: list[Job]) -> bool:
        """One write (one wake-up of the worker) for a batch of jobs."""
        if not jobs:
            return True
        for job in jobs:
            self.outstanding[job.index] = job
        if self.proc.stdin is None or self.state is State.EXITED:
            return False
        data = "".join(json.dumps(["job", j.as_dict()]) + "\n" for j in jobs)
        try:
            self.proc.stdin.write(data.encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def stop(self) -> None:
        if self.state is State.RUNNING:
            self.send("stop", {})
            self.state = State.STOPPING

    def pump(self) -> bool:
        """Reads what the worker wrote; queues parsed messages in `inbox`. False at EOF."""
        try:
            chunk = os.read(self.msg_fd, _READ_CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if line.strip():
                name, payload = json.loads(line)
                self.inbox.append((name, payload))
        return True

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if rc is not None and self.exited_at is None:
            self.exited_at = time.monotonic()
        return rc

    def kill_group(self, grace_s: float = _TERMINATE_GRACE_S) -> int | None:
        """SIGTERM to the process group, a grace period, then SIGKILL. Returns the exit code."""
        self.killed_by_us = True
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                return self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
        return self.proc.poll()

    def close(self) -> None:
        self.state = State.EXITED
        for f in (self.proc.stdin,):
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
                f.seek(max(0, size - max_bytes))
                return f.read().decode(errors="replace")
        except OSError:
            return ""


def spawn(worker_id: int, generation: int, *, python: str, config_path: Path, run_dir: Path,
          env: dict[str, str], ephemeral: bool, facts: bool) -> WorkerHandle:
    """Starts one worker in its own session (process group)."""
    journal = run_dir / "journal" / f"w{worker_id}.{generation}.bin"
    logs = run_dir / "workers"
    journal.parent.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    out_path = logs / f"w{worker_id}.{generation}.stdout"
    err_path = logs / f"w{worker_id}.{generation}.stderr"
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    argv = [python, "-m", "stress.engine.worker", "--config", str(config_path),
            "--worker-id", str(worker_id), "--journal", str(journal), "--msg-fd", str(write_fd)]
    if facts:
        argv.append("--facts")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                pass_fds=[write_fd], env=env, start_new_session=True)
    os.close(write_fd)
    return WorkerHandle(worker_id, generation, proc, read_fd, journal, out_path, err_path,
                        ephemeral)
