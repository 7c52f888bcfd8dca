"""Exposures and the exit-path ablation (issue 17 items 1 and 6): teardown failures rated per
process exit, each exit path against the os._exit control arm."""

from __future__ import annotations

from typing import Any

from stress.analysis import exposure
from stress.analysis.rundata import RunData


def _worker(pid: int, path: str, outcome: str = "clean") -> dict[str, Any]:
    return {"run_id": "r", "pid": pid, "ended_at": 1.0, "exit_path": path, "outcome": outcome,
            "pattern": "exit-normal" if path != "os-exit" else "exit-os"}


def _exit_hang(pid: int) -> dict[str, Any]:
    return {"run_id": "r", "class": "teardown_hang", "pid": pid, "job_index": None,
            "last_step": "worker-exit", "exposure": "process_exit"}


def _data(failing: list[int]) -> RunData:
    data = RunData([])
    data.workers = [_worker(p, "release-then-exit") for p in range(100)] + \
        [_worker(p, "exit-with-devices") for p in range(100, 200)] + \
        [_worker(p, "os-exit") for p in range(200, 300)]
    data.failures = [_exit_hang(p) for p in failing]
    return data


def test_teardown_failures_in_the_exit_handlers_are_told_apart_from_the_control_arm() -> None:
    # 1 in 10 normal exits hangs; the os._exit control arm never does
    ablation = exposure.exit_paths(_data(list(range(0, 200, 10))))
    assert ablation is not None
    rows = {r.exit_path: r for r in ablation.rows}
    assert rows["os-exit"].control and rows["os-exit"].rate.failures == 0
    normal = rows["release-then-exit"].rate
    assert (normal.failures, normal.units, normal.unit) == (10, 100, "process exit")
    assert normal.low <= 0.1 <= normal.high
    assert ablation.verdict().startswith("teardown is where the failures live")


def test_failures_spread_over_every_path_show_no_difference_from_the_control() -> None:
    ablation = exposure.exit_paths(_data([5, 105, 205, 15, 115, 215]))
    assert ablation is not None
    assert ablation.verdict().startswith("no difference shown")


def test_without_a_control_arm_the_ablation_says_it_cannot_tell() -> None:
    data = _data([3])
    data.workers = [w for w in data.workers if w["exit_path"] != "os-exit"]
    ablation = exposure.exit_paths(data)
    assert ablation is not None and ablation.comparison is None
    assert "no control arm" in ablation.verdict()
    assert exposure.exit_paths(RunData([])) is None


def test_one_bad_path_among_many_clean_ones_is_named() -> None:
    """A real run: exit-thread crashed on every exit, five other paths never did. Pooled, the
    paths were 13/65 against 0/13 for the control (p = 0.07); path by path it is plain."""
    data = RunData([])
    paths = ["exit-alive", "exit-clean", "exit-inflight", "exit-sigterm", "exit-thread",
             "exit-os-exit"]
    data.workers = [_worker(100 * i + n, p) for i, p in enumerate(paths) for n in range(13)]
    data.failures = [_exit_hang(400 + n) for n in range(13)]
    ablation = exposure.exit_paths(data)
    assert ablation is not None and ablation.comparison is not None
    assert ablation.comparison.p_b_worse > 0.05
    assert [r.exit_path for r in ablation.rows if r.worse_than_control] == ["exit-thread"]
    assert ablation.verdict().startswith("teardown is where the failures live: exit-thread 13/13")
