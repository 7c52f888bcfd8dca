"""The session loop (stress/engine/session.py) driven by a fake runner and a fake clock, without
subprocesses (issue 25): scheduling, a failed worker's jobs requeued, restarts, retirement,
and the stop reasons."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stress.engine import session as session_module
from stress.engine.invocation import JobResult
from stress.engine.jobs import Job
from stress.engine.session import Session
from stress.engine.workermanage import LaunchSpec, State, WorkerHandle
from stress.store.db import RunStore
from tests.helpers.engine import soak_config

_FAKE_PID_BASE: int = 1 << 30  # above any pid_max: a signal to such a group reaches nobody
_RUN_NEVER_ENDS_S: float = 600.0  # fake seconds: every run here ends within a few


class FakeClock:
    """time.monotonic/sleep for the session: a sleep advances the clock and lets the fake
    processes take one step."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.on_sleep: Callable[[], None] = lambda: None

    def monotonic(self) -> float:
        return self.now

    def monotonic_ns(self) -> int:
        return int(self.now * 1e9)

    def sleep(self, dt: float) -> None:
        self.now += dt
        if self.now > 1000.0 + _RUN_NEVER_ENDS_S:  # the loop fails (status "failed")
            raise AssertionError("the run never ended")
        self.on_sleep()

    def process_time(self) -> float:
        return 0.0

    def time(self) -> float:
        return self.now


class FakeProc:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = -signal.SIGKILL
        return self.returncode


class FakeRunner:
    """Launches fake workers that answer every job with a clean job_done one step later, say
    bye and exit 0 once told to stop; `crash(h)` says whether a process dies by SIGSEGV (holding
    its jobs) at its next step."""

    name = "fake"

    def __init__(self, clock: FakeClock, crash: Callable[[WorkerHandle], bool] = lambda h: False,
                 job_seconds: float = 0.0) -> None:
        self.clock = clock
        self.crash = crash
        self.job_seconds = job_seconds
        self.handles: list[WorkerHandle] = []
        self.ran: list[int] = []  # job indices, in the order their job_done was sent
        self.answered: set[tuple[int, int]] = set()  # (id(handle), job index)
        clock.on_sleep = self.step

    def launch(self, spec: LaunchSpec) -> WorkerHandle:
        journal, out, err, _cwd = spec.paths()
        h = WorkerHandle(spec.worker_id, spec.generation,
                         FakeProc(_FAKE_PID_BASE + len(self.handles)), -1, journal, out, err,
                         spec.ephemeral, started=self.clock.now)
        h.messages, h.eof = False, True  # no pipe: messages go straight into the inbox
        h.inbox.append(("hello", {}))
        self.handles.append(h)
        return h

    def step(self) -> None:
        for h in self.handles:
            proc = h.proc
            assert isinstance(proc, FakeProc)
            if proc.returncode is not None or h.state is State.EXITED:
                continue
            if self.crash(h):
                proc.returncode = -signal.SIGSEGV
                continue
            if self.clock.now - h.started < self.job_seconds:
                continue
            for job in list(h.outstanding.values()):
                if (id(h), job.index) in self.answered:
                    continue
                self.answered.add((id(h), job.index))
                self.ran.append(job.index)
                result = JobResult(invocations=job.invocations, ok=job.invocations)
                h.inbox.append(("job_done", {"job": job.as_dict(), "pid": h.pid,
                                             "started": self.clock.now,
                                             "ended": self.clock.now,
                                             "result": result.as_dict()}))
            if h.state is State.STOPPING:
                h.inbox.append(("bye", {}))
                proc.returncode = 0

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


def jobs(n: int, pattern: str = "shared") -> Callable[[], list[Job]]:
    return lambda: [Job(i, "p", pattern, i, 10) for i in range(n)]


def endless(pattern: str = "shared") -> Callable[[], Iterator[Job]]:
    def gen() -> Iterator[Job]:
        i = 0
        while True:
            yield Job(i, "p", pattern, i, 10)
            i += 1
    return gen


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(session_module, "time", c)
    return c


def soak(tmp_path: Path, runner: FakeRunner, stream: Callable[[], Any],
         **cfg: Any) -> tuple[Session, str]:
    config = soak_config(tmp_path, **cfg)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    s = Session(config, "r1", run_dir, RunStore(run_dir), runner=runner, stream=stream)
    return s, s.run()


def test_every_planned_job_runs_once_and_the_run_ends_when_the_plan_is_done(
        tmp_path: Path, clock: FakeClock) -> None:
    runner = FakeRunner(clock)
    s, status = soak(tmp_path, runner, jobs(12), workers=2, invocations=120)
    assert status == "completed"
    assert s.stop_reason == "all planned invocations done"
    assert sorted(runner.ran) == list(range(12))
    assert s.tally.invocations == 120 and s.tally.jobs_ended == 12
    assert {h.worker_id for h in runner.handles} == {0, 1}  # both pool workers took jobs


def test_the_jobs_of_a_crashed_pool_worker_are_run_again_by_its_replacement(
        tmp_path: Path, clock: FakeClock) -> None:
    """w0's first process dies holding its jobs (no journal pins the crash on one of them):
    the restarted w0.1 runs them, so every planned job still ends once."""
    runner = FakeRunner(clock, crash=lambda h: h.generation == 0 and len(h.outstanding) == 4)
    s, status = soak(tmp_path, runner, jobs(6), threads=2, invocations=60)
    assert status == "completed", s.stop_reason
    assert sorted(runner.ran) == list(range(6))  # the 4 it held ran once, on w0.1
    assert s.tally.restarts == 1 and s.tally.failures_by_class["crash"] == 1
    assert [h.name for h in runner.handles] == ["w0", "w0.1"]


def test_the_crashed_job_of_a_one_job_process_is_not_run_again(
        tmp_path: Path, clock: FakeClock) -> None:
    """A process-per-job crash is pinned on its job: that job is recorded, not rerun."""
    runner = FakeRunner(clock, crash=lambda h: h.worker_id == 0)
    s, _ = soak(tmp_path, runner, jobs(4, "process-per-job"), workers=1,
                patterns=["process-per-job"], invocations=40)
    assert s.stop_reason == "all planned invocations done"
    assert sorted(runner.ran) == [1, 2, 3] and s.tally.failures_by_class["crash"] == 1


def test_a_worker_that_keeps_crashing_stops_the_run_past_max_worker_restarts(
        tmp_path: Path, clock: FakeClock) -> None:
    runner = FakeRunner(clock, crash=lambda h: True)
    s, status = soak(tmp_path, runner, endless(), max_worker_restarts=3)
    assert status == "completed"
    assert s.stop_reason.startswith("more than 3 worker restarts within 60 s")
    assert s.tally.restarts == 3 and len(runner.handles) == 4


def test_a_pool_worker_retires_after_max_jobs_per_worker_and_its_successor_keeps_its_id(
        tmp_path: Path, clock: FakeClock) -> None:
    runner = FakeRunner(clock)
    s, _ = soak(tmp_path, runner, jobs(6), max_jobs_per_worker=2, invocations=60)
    assert s.stop_reason == "all planned invocations done"
    assert sorted(runner.ran) == list(range(6))
    names = [h.name for h in runner.handles]
    assert names[:3] == ["w0", "w0.1", "w0.2"]  # 2 jobs each, then a successor on id 0
    assert {h.worker_id for h in runner.handles} == {0}


def test_the_run_stops_when_its_duration_is_reached(tmp_path: Path, clock: FakeClock) -> None:
    runner = FakeRunner(clock)
    start = clock.now
    s, status = soak(tmp_path, runner, endless(), duration_s=2.0)
    assert status == "completed" and s.stop_reason == "duration reached"
    assert 2.0 <= clock.now - start < 3.0 and s.tally.jobs_ended > 10


def test_the_run_stops_at_max_failures(tmp_path: Path, clock: FakeClock) -> None:
    runner = FakeRunner(clock, crash=lambda h: True)
    s, _ = soak(tmp_path, runner, endless(), max_failures=2)
    assert s.stop_reason == "--max-failures 2 reached"
    assert s.tally.failure_count >= 2  # (the replacement started before the stop may crash)


def test_an_interrupt_stops_every_worker_and_the_run_says_interrupted(
        tmp_path: Path, clock: FakeClock) -> None:
    runner = FakeRunner(clock)
    sessions: list[Session] = []
    step = runner.step

    def step_then_interrupt() -> None:
        step()
        if len(runner.ran) >= 5 and sessions:
            sessions[0].interrupts.note(signal.SIGINT, None)

    clock.on_sleep = step_then_interrupt
    original = Session.run

    def run(self: Session) -> str:
        sessions.append(self)
        return original(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Session, "run", run)
        s, status = soak(tmp_path, runner, endless())
    assert status == "interrupted" and s.stop_reason == "interrupted by SIGINT"
    assert not s.workers
