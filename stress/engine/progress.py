"""Live progress of a soak on stderr (stress.ui.Status: a redrawn line on a terminal, plain
periodic lines in CI, nothing under -q). Counts say what they count: a share of the plan done
is "done 40%", never a bare percentage that reads as a failure rate."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from stress.ui import Status, duration_text, red
from stress.vocab import ALL_CLASSES, Engine, FailureClass

if TYPE_CHECKING:
    from stress.engine.attribution import Attribution
    from stress.engine.config import SoakConfig
    from stress.engine.jobs import Job
    from stress.engine.tally import RunTally
    from stress.engine.workermanage import WorkerHandle

_RATE_SMOOTHING: float = 0.3  # weight of the newest interval in the invocations/s shown
_PROCESS_CLASSES: tuple[FailureClass, ...] = (FailureClass.CRASH, FailureClass.HANG)
#   a job ends with one of these instead of its job_done message


class _Process(Protocol):
    @property
    def ephemeral(self) -> bool: ...


class Progress:
    """Reads the run's tally and its running processes (`workers`, the session's own map)."""

    def __init__(self, config: SoakConfig, tally: RunTally, workers: Mapping[int, _Process],
                 status: Status | None = None):
        self.cfg = config
        self.s = tally
        self.workers = workers
        self.status = status or Status(config.progress)  # (the orchestrator may swap in
        #   its own, so that one live line goes from compile to the soak's end)
        self.last_invocations = 0
        self.last_time = time.monotonic()
        self.rate = 0.0
        self.ticked = False

    @property
    def enabled(self) -> bool:
        return self.status.enabled

    def processes(self) -> str:
        """Processes running now: the pool (--workers) and one-job processes apart, so that
        `--workers 2` never reads as "workers 3"."""
        pool = sum(1 for h in self.workers.values() if not h.ephemeral)
        one_job = len(self.workers) - pool
        if not one_job:
            return f"processes {pool}"
        if not pool:
            return f"processes {one_job} (one job each)"
        return f"processes {pool + one_job} ({pool} pool + {one_job} one-job)"

    def remaining(self, elapsed: float) -> str:
        if self.cfg.duration_s:
            return f"{duration_text(max(0.0, self.cfg.duration_s - elapsed))} left"
        if self.cfg.invocations:
            done = min(1.0, self.s.invocations / self.cfg.invocations)
            return f"done {done:.0%} of {self.cfg.invocations:,} invocations"
        return ""

    def line(self) -> str:
        s = self.s
        now = time.monotonic()
        dt = now - self.last_time
        if dt > 0:
            inst = (s.invocations - self.last_invocations) / dt
            self.rate = inst if self.rate == 0 else \
                (1 - _RATE_SMOOTHING) * self.rate + _RATE_SMOOTHING * inst
        self.last_invocations, self.last_time = s.invocations, now
        if s.soak_started is None:
            return (f"[{now - s.started:6.1f}s] starting {self.processes()} "
                    f"(soak clock starts at the first job)")
        elapsed = now - s.soak_started
        if self.cfg.repro_class:
            return self.repro_line(elapsed)
        if self.cfg.engine == Engine.EXEC.value:
            return self.exec_line(elapsed)
        fails = " ".join(f"{c}={s.failures_by_class[c]}" for c in ALL_CLASSES
                         if s.failures_by_class[c])
        total = sum(s.failures_by_class.values())
        return (f"[{elapsed:6.1f}s] {s.invocations:>9,} invocations  {self.rate:8,.0f}/s  "
                f"jobs {s.jobs_ended:,}  {self.processes()}  restarts {s.restarts}  "
                f"failures {total}{' (' + fails + ')' if fails else ''}  "
                f"{self.remaining(elapsed)}")

    def exec_line(self, elapsed: float) -> str:
        """An exec run's: runs of the command ended and running, failures, what is left (no
        invocations: one job is one run of the command)."""
        s = self.s
        fails = ", ".join(f"{c} {s.failures_by_class[c]}" for c in ALL_CLASSES
                          if s.failures_by_class[c])
        running = sum(1 for p in self.workers.values() if p.ephemeral)
        left = self.remaining(elapsed) if self.cfg.duration_s else \
            f"of {self.cfg.invocations:,} planned" if self.cfg.invocations else ""
        left = f" {left}" if left else ""
        return (f"[{elapsed:6.1f}s] command runs: {s.processes_ended:,} ended{left}, "
                f"{running} running  failures {sum(s.failures_by_class.values())}"
                f"{' (' + fails + ')' if fails else ''}")

    def repro_line(self, elapsed: float) -> str:
        """`iree-stress repro`: runs of the one job done, and how many failed the same way
        again, said as a count and a rate."""
        s = self.s
        cls = self.cfg.repro_class
        process_ends = sum(s.failures_by_class[c.value] for c in _PROCESS_CLASSES)
        done = s.jobs_ended + process_ends
        again = s.failures_by_class[cls] if cls in {c.value for c in _PROCESS_CLASSES} or \
            cls == FailureClass.TEARDOWN_HANG.value else s.failed_jobs
        planned = self.cfg.repro_runs or 0
        rate = f" (rate {again / done:.0%})" if done else ""
        return (f"[{elapsed:6.1f}s] repro: {min(done, planned) if planned else done}"
                f"{'/' + str(planned) if planned else ''} runs done, {cls} again in "
                f"{again}{rate}")

    def tick(self) -> None:
        if not self.ticked:  # the session's first line comes at once (a new phase)
            self.ticked = True
            self.status.update(self.line(), force=True)
        elif self.status.due():
            self.status.update(self.line())

    def failure(self, cls: FailureClass, h: WorkerHandle, job: Job | None,
                attr: Attribution, sig: str | None, folder: Path | None) -> None:
        if not self.enabled or cls in (FailureClass.ERROR, FailureClass.MISCOMPARE):
            return
        what = {FailureClass.CRASH: f"crashed ({sig or 'non-zero exit'})",
                FailureClass.HANG: "hung", FailureClass.TEARDOWN_HANG: "hung in teardown",
                FailureClass.FAILED: "failed its tests (or ran none)"}[cls]
        job_text = f"{job.program} [{job.pattern}]" if job else "no job"
        where = f" -> {folder}" if folder else ""
        if self.cfg.engine == Engine.EXEC.value:  # no workers nor steps: the command's run
            when = " at its exit" if attr.last_step == "worker-exit" else ""
            self.status.say(f"{red('FAIL', self.status.stream)} job "
                            f"{job.index if job else '?'} (copy {h.name}) {what}{when}{where}")
            return
        self.status.say(f"{red('FAIL', self.status.stream)} worker {h.name} {what} while "
                        f"running {job_text}, last step {attr.last_step}{where}")

    def done(self) -> None:
        if self.enabled:
            self.status.done(self.line())
