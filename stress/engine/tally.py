"""What a soak counts as it goes (invocations, jobs, failures, restarts): kept by the session,
read by the live progress line, the stop conditions and the summary."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from stress.vocab import FailureClass


@dataclass
class RunTally:
    started: float = field(default_factory=time.monotonic)
    # --duration counts from the first job, not from worker start-up (interpreters and the
    # runtime import take seconds; a 3 s soak ran 20 invocations when they counted)
    soak_started: float | None = None
    invocations: int = 0
    invocations_by_pattern: Counter[str] = field(default_factory=Counter)
    jobs_ended: int = 0  # job_done messages (the parent_cpu phase is per job)
    failed_jobs: int = 0  # job_done messages of jobs with an error or miscompare
    failure_count: int = 0  # what --max-failures counts: process failures + failed jobs
    failures_by_class: Counter[str] = field(default_factory=Counter)
    restarts: int = 0
    jobs_not_started: int = 0  # given back unrun by workers told to stop (jobs_dropped)
    processes_ended: int = 0  # worker (exec: command) processes whose end was recorded

    def job_ended(self, pattern: str, invocations: int, errors: int, miscompares: int) -> bool:
        """One job_done message; returns whether the job failed. --max-failures counts failed
        jobs, not each error: 1,000 errors of one known failure must not end a soak before a
        hang shows up."""
        failed = bool(errors or miscompares)
        self.jobs_ended += 1
        self.failed_jobs += failed
        self.failure_count += failed
        self.invocations += invocations
        self.invocations_by_pattern[pattern] += invocations
        self.failures_by_class[FailureClass.ERROR.value] += errors
        self.failures_by_class[FailureClass.MISCOMPARE.value] += miscompares
        return failed

    def process_failed(self, cls: FailureClass) -> None:
        """A process-level failure (crash, hang, ...): one failure of its class."""
        self.failures_by_class[cls.value] += 1
        self.failure_count += 1

    def at_max_failures(self, limit: int | None) -> bool:
        """Whether --max-failures (None: no limit) is reached."""
        return limit is not None and self.failure_count >= limit

    def soak_clock(self, now: float, startup_timeout_s: float) -> float:
        """When --duration began: the first job's start, or (no worker ever started a job)
        the end of the start-up allowance, so that a runtime that cannot start still ends."""
        if self.soak_started is not None:
            return self.soak_started
        if now - self.started > startup_timeout_s:
            self.soak_started = self.started + startup_timeout_s
            return self.soak_started
        return now
