"""Job supply (stress/engine/scheduler.py): what a pool worker is given, exit-family waves, and
jobs given back."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from stress.engine.jobs import Job
from stress.engine.scheduler import JobSupply, Queue
from tests.helpers.engine import soak_config


def supply(tmp_path: Path, jobs: list[Job], patterns: list[str]) -> JobSupply:
    plan: Callable[[], list[Job]] = lambda: list(jobs)  # noqa: E731
    return JobSupply(soak_config(tmp_path, patterns=patterns), plan)


def test_a_pool_worker_is_given_jobs_up_to_its_room_in_plan_order(tmp_path: Path) -> None:
    s = supply(tmp_path, [Job(i, "p", "shared", i, 10) for i in range(5)], ["shared"])
    assert [j.index for j in s.for_pool(in_hand=1, room=4)] == [0, 1, 2]
    assert s.for_pool(in_hand=4, room=4) == []
    assert [j.index for j in s.for_pool(in_hand=0, room=4)] == [3, 4]  # the plan's end
    assert s.done and s.drained()


def test_an_exit_job_waits_for_the_running_wave_and_other_one_job_processes_do_not(
        tmp_path: Path) -> None:
    jobs = [Job(0, "p", "exit-clean", 0, 1), Job(1, "p", "process-per-job", 1, 10)]
    s = supply(tmp_path, jobs, ["exit-clean", "process-per-job"])
    assert s.next_process(wave_running=True) is None  # held back, first again in its queue
    first = s.next_process(wave_running=False)
    assert first is not None and first.index == 0
    second = s.next_process(wave_running=True)
    assert second is not None and second.index == 1


def test_jobs_given_back_run_first_in_plan_order(tmp_path: Path) -> None:
    s = supply(tmp_path, [Job(i, "p", "shared", i, 10) for i in range(4)], ["shared"])
    taken = s.for_pool(in_hand=0, room=3)
    s.give_back(reversed(taken[1:]))
    assert [j.index for j in s.for_pool(in_hand=0, room=3)] == [1, 2, 3]
    assert s.queued(Queue.POOL) == 0


def _plan_prefix(jobs: list[Job], limit: int) -> list[int]:
    out, total = [], 0
    for j in jobs:
        if total >= limit:
            break
        out.append(j.index)
        total += j.invocations
    return out


def test_an_invocations_plan_runs_the_same_jobs_whichever_queue_asks_first(
        tmp_path: Path) -> None:
    """--invocations 300 over the core family (one block of its 7 patterns is 288
    invocations): every pattern runs, process-per-job included, whether the pool's workers or
    the one-job processes start first (which depends on speed)."""
    from stress.engine.jobs import schedule
    from stress.programs import corpus
    from stress.vocab import Family, family

    patterns = list(family(Family.CORE))
    programs = [corpus.by_name()["unary.neg.f32.64x64"]]
    cfg = soak_config(tmp_path, patterns=patterns)
    cfg.invocations, cfg.programs, cfg.seed = 300, programs, 37
    plan = list(itertools.islice(schedule(37, programs, patterns), 40))
    want = _plan_prefix(plan, 300)
    for first, second in ((Queue.POOL, Queue.ONE_JOB), (Queue.ONE_JOB, Queue.POOL)):
        s = JobSupply(cfg)
        drawn = []
        for q in (first, second):
            while (job := s.next(q)) is not None:
                drawn.append(job)
        assert sorted(j.index for j in drawn) == want, first
        assert {j.pattern for j in drawn} == set(patterns), first
        assert s.done and s.drained()


def test_a_resumed_plan_that_ran_all_its_invocations_runs_no_more(tmp_path: Path) -> None:
    cfg = soak_config(tmp_path, patterns=["shared"])
    cfg.invocations, cfg.planned_before, cfg.first_job = 30, 30, 3
    s = JobSupply(cfg, lambda: [Job(i, "p", "shared", i, 10) for i in range(3, 9)])
    assert s.for_pool(in_hand=0, room=4) == [] and s.done
