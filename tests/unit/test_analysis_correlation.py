"""Correlation (issue 9 item 3): failure windows against healthy windows aligned at the same
step, other threads' steps as features, exact stratified tests with an FDR correction."""

from __future__ import annotations

import random
from typing import Any

from stress.analysis import correlation, signatures
from stress.analysis.rundata import RunData

STEP = "device-release"
OWN = [("begin", "upload"), ("end", "upload"), ("begin", "invoke"), ("end", "invoke"),
       ("begin", "readback"), ("end", "readback"), ("begin", STEP)]


def _steps(other: str | None, own: list[tuple[str, str]] = OWN,
           fail: bool = True) -> list[dict[str, Any]]:
    """The failing (or sampled) thread's entries at t = 1..n (begin:STEP last), plus one other
    thread that began `other` at t = n - 1 and had not finished it (None: it was idle)."""
    out = [{"t": i + 1, "slot": 0, "tid": 10, "step": s, "phase": p, "failing": True}
           for i, (p, s) in enumerate(own)]
    if fail:
        out.append({"t": len(own) + 1, "slot": 0, "tid": 10, "step": STEP, "phase": "fail",
                    "failing": True})
    n = len(own)
    out += [{"t": 0.5, "slot": 1, "tid": 11, "step": "job", "phase": "begin", "failing": False},
            {"t": 0.6, "slot": 1, "tid": 11, "step": "upload", "phase": "begin",
             "failing": False},
            {"t": 0.7, "slot": 1, "tid": 11, "step": "upload", "phase": "end", "failing": False}]
    if other:
        out.append({"t": n - 1, "slot": 1, "tid": 11, "step": other, "phase": "begin",
                    "failing": False})
    return out


def _failure(other: str | None, pattern: str) -> dict[str, Any]:
    return {"run_id": "r", "class": "crash", "signal": "SIGSEGV", "job_index": 1,
            "program": "unary.exp.f32.4", "pattern": pattern, "pid": 1, "worker": 0,
            "last_step": STEP, "in_flight": [], "steps": _steps(other), "artifacts": None,
            "message": "", "elapsed_s": 1.0, "evidence": {}, "native_tid": 10}


def _healthy(other: str | None, pattern: str) -> dict[str, Any]:
    return {"kind": "healthy", "pattern": pattern, "tokens": [], "in_flight": [],
            "steps": _steps(other, fail=False)}


def _draw(rng: random.Random, p_create: float) -> str | None:
    x = rng.random()
    return "device-create" if x < p_create else "invoke" if x < p_create + 0.5 else None


def _correlate(data: RunData) -> correlation.SignatureCorrelation:
    sigs = signatures.build(data)
    assert len(sigs) == 1
    return correlation.correlate(sigs[0], data)


def test_a_fault_that_needs_another_thread_creating_a_device_puts_that_on_top() -> None:
    rng = random.Random(3)
    data = RunData([])
    data.failures = [_failure("device-create", "churn") for _ in range(12)]
    data.windows = [_healthy(_draw(rng, 0.15), "churn") for _ in range(150)]
    c = _correlate(data)
    top = c.features[0]
    assert top.feature == "other thread in flight: device-create"
    assert top.stands_out and top.in_failures == 12
    assert c.verdict().startswith("stands out: other thread in flight: device-create")


def test_an_independent_fault_gets_nothing_stands_out_despite_the_pattern_mix() -> None:
    # churn threads often have another thread creating a device, shared threads rarely; the
    # failures come mostly from churn. Within each pattern the fault ignores other threads.
    quiet = 0
    for seed in range(10):
        rng = random.Random(seed)
        data = RunData([])
        probs = {"churn": 0.7, "shared": 0.05}
        data.failures = [_failure(_draw(rng, probs[p]), p)
                         for p in ["churn"] * 16 + ["shared"] * 4]
        data.windows = [_healthy(_draw(rng, probs[p]), p)
                        for p in ["churn"] * 60 + ["shared"] * 140]
        c = _correlate(data)
        quiet += not c.standing_out
        assert c.failure_windows == 20 and c.healthy_windows == 200
    assert quiet >= 9


def test_features_implied_by_the_signature_key_are_left_out() -> None:
    feats = correlation.aligned_features(_steps("invoke"), STEP)
    assert isinstance(feats, frozenset)
    assert not any(STEP in f for f in feats)  # no begin/fail/in-flight of the failing step
    assert "this thread just before: end:readback" in feats
    assert "other thread in flight: invoke" in feats


def test_a_window_with_another_threads_state_unknown_is_left_out_on_both_sides() -> None:
    """A healthy sample is taken long after its thread began the step; another thread's
    kept entries may all come later. Counting that thread as idle would make every other
    thread's step look rarer in health than in failures (recorded at the failing moment)."""
    late = _steps(None)
    for e in late:
        if not e["failing"]:
            e["t"] += 100
    assert correlation.aligned_features(late, STEP) is correlation.Unaligned.UNKNOWN_OTHERS
    idle = correlation.aligned_features(_steps(None), STEP)
    assert isinstance(idle, frozenset) and "other threads: none in flight" in idle
    data = RunData([])
    data.failures = [_failure("invoke", "shared") for _ in range(6)]
    data.windows = [_healthy("invoke", "shared") for _ in range(35)] + \
        [{"kind": "healthy", "pattern": "shared", "tokens": [], "in_flight": [], "steps": late}
         for _ in range(10)]
    c = _correlate(data)
    assert c.healthy_windows == 35
    assert "10 healthy window(s) left out: another thread's state" in c.note


def test_healthy_windows_that_never_began_the_step_are_not_compared() -> None:
    data = RunData([])
    data.failures = [_failure("invoke", "shared") for _ in range(6)]
    other_step = [("begin", "upload"), ("end", "upload"), ("begin", "invoke")]
    data.windows = [_healthy("invoke", "shared") for _ in range(40)] + \
        [{"kind": "healthy", "pattern": "shared", "tokens": [], "in_flight": [],
          "steps": _steps("invoke", own=other_step, fail=False)} for _ in range(25)]
    c = _correlate(data)
    assert c.healthy_windows == 40
    assert c.verdict().startswith("nothing stands out")


def test_too_few_windows_are_said_plainly() -> None:
    data = RunData([])
    data.failures = [_failure("invoke", "shared")]
    c = _correlate(data)
    assert "anecdotal" in c.note and "healthy" in c.note
    assert c.features == [] and c.verdict().startswith("cannot tell: 1 failure and 0 healthy")


def test_windows_from_older_stores_still_align_on_their_tokens() -> None:
    w = {"kind": "healthy", "pattern": "shared", "steps": [],
         "tokens": ["begin:invoke", "end:invoke", f"begin:{STEP}"],
         "in_flight": [f"t0:{STEP}", "t1:device-create"]}
    data = RunData([], windows=[w])
    got = correlation.healthy_windows(data, STEP)
    assert len(got) == 1
    assert "other thread in flight: device-create" in got[0].features
    assert "this thread just before: end:invoke" in got[0].features
