from __future__ import annotations

import math

import pytest

from stress.analysis import correlation, signatures
from stress.analysis.rundata import RunData
from stress.analysis.stats import rate_per_1k, wilson


def test_wilson_interval_matches_known_values() -> None:
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and math.isclose(hi, 0.2775, abs_tol=1e-4)
    lo, hi = wilson(5, 10)
    assert math.isclose(lo, 0.2366, abs_tol=1e-4) and math.isclose(hi, 0.7634, abs_tol=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


def test_rate_per_1k_contains_the_point_estimate() -> None:
    rate, lo, hi = rate_per_1k(3, 10_000)
    assert rate == pytest.approx(0.3) and lo < rate < hi


def _crash(step: str, pattern: str, others: list[str]) -> dict:  # type: ignore[type-arg]
    steps = [{"slot": 1, "phase": "begin", "step": "upload", "failing": True},
             {"slot": 1, "phase": "end", "step": "upload", "failing": True},
             {"slot": 1, "phase": "begin", "step": step, "failing": True}]
    return {"class": "crash", "signal": "SIGSEGV", "last_step": step, "artifacts": None,
            "program": "unary.exp.f32.64x64", "pattern": pattern, "message": "x",
            "in_flight": [f"t1:{step}"] + [f"t2:{o}" for o in others], "steps": steps,
            "elapsed_s": 1.0, "run_id": "r", "detected_at": 0.0}


def test_signatures_group_by_step_not_by_what_other_threads_happened_to_do() -> None:
    data = RunData([], jobs=[{"invocations": 1000, "errors": 0, "miscompare": 0,
                              "pattern": "shared", "program": "unary.exp.f32.64x64",
                              "run_id": "r"}])
    data.failures = [_crash("invoke", "shared", ["invoke"]), _crash("invoke", "churn", []),
                     _crash("device-release", "churn", ["invoke"])]
    sigs = signatures.build(data)
    assert [(s.last_step, s.count) for s in sigs] == [("invoke", 2), ("device-release", 1)]
    assert sigs[0].others_share() == {"invoke": 0.5}
    assert sigs[0].rate_per_1k == pytest.approx(2000 / 1003)  # 3 invocations died


def test_correlation_ranks_the_in_flight_step_of_failures_first() -> None:
    data = RunData([])
    data.failures = [_crash("device-release", "churn", []) for _ in range(6)]
    data.windows = [{"kind": "healthy", "tokens": ["begin:upload", "end:upload",
                                                   "begin:invoke"], "in_flight": ["t1:invoke"]}
                    for _ in range(40)]
    sig = signatures.build(data)[0]
    corr = correlation.correlate(sig, correlation.healthy_features(data))
    assert "device-release" in corr.lifts[0].feature
    assert corr.lifts[0].lift > 10
    assert corr.note == ""


def test_correlation_says_plainly_when_data_are_too_few() -> None:
    data = RunData([])
    data.failures = [_crash("invoke", "shared", [])]
    corr = correlation.correlate(signatures.build(data)[0], [])
    assert "anecdotal" in corr.note and "healthy" in corr.note
