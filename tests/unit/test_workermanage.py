"""Stopping a worker's process group (issue 8)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from stress.engine.workermanage import WorkerHandle

_CHILD = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
          "print('ready', flush=True); time.sleep(120)")
_LEADER = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {_CHILD!r}],"
           " stdout=subprocess.PIPE); p.stdout.readline(); print(p.pid, flush=True); "
           "time.sleep(120)")


def test_kill_group_also_kills_members_that_ignore_sigterm_after_the_leader_left(
        tmp_path: Path) -> None:
    """Before: kill_group returned when the leader exited on SIGTERM, so a member that
    ignores SIGTERM never got SIGKILL and outlived the run."""
    proc = subprocess.Popen([sys.executable, "-c", _LEADER], stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    member = psutil.Process(child)  # made now: is_running() tells a reused pid apart later
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    h = WorkerHandle(0, 0, proc, read_fd, tmp_path / "j", tmp_path / "o", tmp_path / "e",
                     ephemeral=False)
    rc = h.kill_group(grace_s=1.0)
    assert rc is not None and rc < 0  # the leader died by SIGTERM
    deadline = time.monotonic() + 5
    while _alive(member) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(member)
    assert not alive, "a SIGTERM-ignoring member of the group survived"
    h.close()


def _alive(p: psutil.Process) -> bool:
    """Running (the same process: a reused pid is not it) and not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_worker_near_its_job_limit_has_room_only_for_the_jobs_it_has_left(
        tmp_path: Path) -> None:
    from stress.engine.jobs import Job
    from tests.helpers.procs import ended_handle

    h = ended_handle(tmp_path, tmp_path / "j.bin")
    assert h.room(4) == 4  # no limit
    h.job_limit = 5
    h.send_jobs([Job(i, "p", "shared", i, 1) for i in range(3)])
    assert h.room(4) == 4  # holds 3, may be sent 2 more
    h.finished(0)
    assert h.room(4) == 4 and h.room(2) == 2
    h.finished(1)
    h.finished(2)
    assert h.room(4) == 2 and not h.retiring
    h.close()
