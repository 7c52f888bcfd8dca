"""Job supply (stress/engine/scheduler.py): what a pool worker is given, exit-family waves, and
jobs given back."""

from __future__ import annotations

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
