"""Job supply of a soak: the seeded plan split into two named queues, the pool's and the
one-job processes', each drawn only as its workers take jobs, and jobs given back.

The session asks (`next`, `peek`), the supply answers; it never starts a process. A queue
that is the bottleneck never makes the other one grow: each draws from its own filtered copy
of the same seeded stream.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from stress import vocab
from stress.engine.config import SoakConfig
from stress.engine.jobs import Job, schedule


def is_ephemeral(pattern: str, engine: str = vocab.Engine.PYTHON.value) -> bool:
    """Patterns whose every job is a process of its own (one job, then exit): process-per-job,
    the exit family, and every job of a non-Python engine (a tool or a user's command)."""
    return vocab.one_job_process(pattern, engine)


def is_exit_job(job: Job) -> bool:
    """A job of the exit family: its processes start in waves whose exits overlap."""
    return vocab.exit_path_of(job.pattern) is not None


class Queue(enum.Enum):
    """Which workers a job goes to."""

    POOL = "pool"  # long-lived pool workers (--workers), many jobs each
    ONE_JOB = "one-job"  # a process per job (process-per-job, exit family, tool engines)

    def describe(self) -> str:
        return {Queue.POOL: "the worker pool",
                Queue.ONE_JOB: "one-job processes"}[self]


def queue_of(pattern: str, engine: str) -> Queue:
    return Queue.ONE_JOB if is_ephemeral(pattern, engine) else Queue.POOL


def _only(stream: Iterator[Job], q: Queue, engine: str) -> Iterator[Job]:
    """The jobs of one queue: a filtered copy of the seeded stream (one per queue, so each
    queue draws only what it runs)."""
    return (j for j in stream if queue_of(j.pattern, engine) is q)


class JobSupply:
    """The plan's jobs, queue by queue, up to --invocations; `close()` (the run is stopping)
    ends every draw from the plan, while jobs already queued or given back still come out.

    --invocations cuts the plan in plan order: the jobs run are the plan's first ones up to
    that many invocations, whichever queue asks first (the pool's workers and the one-job
    processes ask as fast as they run; counted in the order they asked, a slow start of one
    queue let the other take the whole budget, and which patterns ran depended on speed)."""

    def __init__(self, config: SoakConfig,
                 stream: Callable[[], Iterable[Job]] | None = None):
        """`stream`: makes the plan (a fresh copy per call); default: the seeded schedule."""
        self.engine = config.engine
        self.limit = config.invocations
        self.planned_invocations = config.planned_before  # a resumed plan's earlier runs
        self.done = False  # the plan is used up (or --invocations reached) in every queue
        self.closed = False
        self.spent: set[Queue] = set()  # queues whose part of the plan is used up
        self.cutoff: int | None = None  # the first job index past --invocations (plan order)
        self.counted_to = config.first_job  # plan jobs before this index are counted
        if self.limit is not None and self.planned_invocations >= self.limit:
            self.cutoff = config.first_job  # a resumed plan that had run them all

        def plan() -> Iterator[Job]:
            if stream is not None:
                return iter(stream())
            return schedule(config.seed, config.programs, config.patterns, config.shard,
                            config.job_scale, config.job_seed, start=config.first_job)

        self.streams: dict[Queue, Iterator[Job]] = {
            q: _only(plan(), q, config.engine) for q in Queue}
        self.ledger: Iterator[Job] = iter(plan())  # the whole plan, counted for the cutoff
        self.queues: dict[Queue, deque[Job]] = {q: deque() for q in Queue}
        self.enabled: dict[Queue, bool] = {
            q: any(queue_of(p, config.engine) is q for p in config.patterns) for q in Queue}

    def close(self) -> None:
        self.closed = True

    def _pull(self, q: Queue) -> bool:
        """Moves one job of the seeded plan into its queue. False when the queue's part of
        the plan is done."""
        if self.done or self.closed or q in self.spent:
            return False
        job = next(self.streams[q], None)
        if job is None or not self._within_limit(job):  # (a finite plan: the seeded one
            self.spent.add(q)                              #   never ends)
            self.done = all(x in self.spent for x in Queue if self.enabled[x])
            return False
        self.queues[q].append(job)
        return True

    def _within_limit(self, job: Job) -> bool:
        """Whether `job` is among the plan's jobs up to --invocations, counted in plan order
        (the job that reaches the limit is the last one in)."""
        if self.limit is None:
            return True
        while self.cutoff is None and job.index >= self.counted_to:
            counted = next(self.ledger, None)
            if counted is None:
                break
            self.planned_invocations += counted.invocations
            self.counted_to = counted.index + 1
            if self.planned_invocations >= self.limit:
                self.cutoff = self.counted_to
        return self.cutoff is None or job.index < self.cutoff

    def exhausted(self, q: Queue) -> bool:
        """No more of the plan for queue `q`: what is queued is the last of it."""
        return self.done or q in self.spent

    def next(self, q: Queue) -> Job | None:
        """The next job for queue `q`, or None (nothing queued and nothing more planned)."""
        queue = self.queues[q]
        if not self.enabled[q]:
            return None
        if not queue and not self._pull(q):
            return None
        return queue.popleft()

    def for_pool(self, in_hand: int, room: int) -> list[Job]:
        """Jobs for a running pool worker that holds `in_hand` and may hold `room`."""
        batch: list[Job] = []
        while in_hand + len(batch) < room:
            job = self.next(Queue.POOL)
            if job is None:
                break
            batch.append(job)
        return batch

    def next_process(self, wave_running: bool) -> Job | None:
        """The next one-job process's job, or None. An exit-family job waits while a wave of
        them runs: a batch starts together and exits together (it waits for the wave's last)."""
        job = self.next(Queue.ONE_JOB)
        if job is not None and wave_running and is_exit_job(job):
            self.put_back(job)
            return None
        return job

    def peek(self, q: Queue) -> bool:
        """Whether `next(q)` would give a job (one is drawn into the queue if needed)."""
        if self.queues[q]:
            return True
        job = self.next(q)
        if job is None:
            return False
        self.queues[q].appendleft(job)
        return True

    def put_back(self, job: Job) -> None:
        """A job taken but not started (a wave that must wait): first again in its queue."""
        self.queues[queue_of(job.pattern, self.engine)].appendleft(job)

    def give_back(self, jobs: Iterable[Job]) -> None:
        """Jobs of a dead worker that another worker runs again: to the front of their queues,
        in plan order."""
        for job in sorted(jobs, key=lambda j: -j.index):
            self.put_back(job)

    def queued(self, q: Queue) -> int:
        return len(self.queues[q])

    def drained(self) -> bool:
        """The plan is used up and no job waits in any queue."""
        return self.done and not any(self.queues.values())
