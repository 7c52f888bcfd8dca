"""The gate's verdicts (issue 10 item 1) on synthetic stores and the sequential test itself:
PASS below the bound, FAIL on a new fatal failure or a rate not below a quarter of it,
INCONCLUSIVE when undecided or untrustworthy; known signatures reported apart."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from stress.analysis.known import load as load_known
from stress.analysis.sequential import Decision
from stress.errors import UsageError
from stress.verdicts.gate import (
    GateSpec,
    SequentialTest,
    Verdict,
    evaluate,
    first_decision,
    jobs_to_pass,
    parse_fatal,
)
from stress.vocab import FailureClass
from tests.conftest import run_cli
from tests.helpers.gate_stores import make_store

RATE = 0.05  # jobs_to_pass(0.05) = 233 with the default design effect: small stores decide


def test_a_clean_run_long_enough_passes_and_a_short_one_is_inconclusive(tmp_path: Path) -> None:
    spec = GateSpec(RATE)
    need = jobs_to_pass(spec)
    long = evaluate([make_store(tmp_path / "long", "a", range(need + 20))], spec)
    short = evaluate([make_store(tmp_path / "short", "b", range(need // 2))], spec)
    assert long.verdict is Verdict.PASS and long.verdict.exit_code == 0
    assert short.verdict is Verdict.INCONCLUSIVE and short.verdict.exit_code == 3
    assert f"{need:,} clean jobs" in short.reason


def test_one_new_crash_fails_the_gate_at_once_whatever_the_rate(tmp_path: Path) -> None:
    g = evaluate([make_store(tmp_path / "r", "a", range(2000), crash_jobs=[700])],
                 GateSpec(RATE))
    assert g.verdict is Verdict.FAIL and g.verdict.exit_code == 1
    assert "new crash" in g.reason
    assert [s.cls for s in g.new] == ["crash"] and not g.known


def test_a_known_crash_is_listed_as_known_and_does_not_fail_the_gate(tmp_path: Path) -> None:
    run = make_store(tmp_path / "r", "a", range(400), crash_jobs=[100])
    sig = evaluate([run], GateSpec(RATE)).new[0].id
    known = tmp_path / "known.toml"
    known.write_text(f'[[known]]\nsignature = "{sig}"\nnote = "filed as #1"\n')
    g = evaluate([run], GateSpec(RATE, known=load_known(known)))
    assert g.verdict in (Verdict.PASS, Verdict.INCONCLUSIVE)
    assert [s.id for s in g.known] == [sig] and not g.new
    assert g.as_dict()["known_signatures"][0]["known"]["note"] == "filed as #1"


def test_errors_are_not_fatal_by_default_but_a_high_error_rate_fails(tmp_path: Path) -> None:
    errors = list(range(0, 400, 8))  # 12.5% of jobs, above the bound 5%
    g = evaluate([make_store(tmp_path / "r", "a", range(400), error_jobs=errors,
                             jobs_per_process=1)], GateSpec(RATE))
    assert g.verdict is Verdict.FAIL and "not below" in g.reason
    assert g.failures["error"] == len(errors)


def test_errors_become_fatal_when_named_in_fatal(tmp_path: Path) -> None:
    run = make_store(tmp_path / "r", "a", range(400), error_jobs=[10])
    spec = GateSpec(RATE, fatal=parse_fatal("error"))
    assert evaluate([run], spec).verdict is Verdict.FAIL
    assert evaluate([run], GateSpec(RATE, fatal=parse_fatal("none"))).verdict is not Verdict.FAIL


def test_an_interrupted_run_cannot_pass(tmp_path: Path) -> None:
    g = evaluate([make_store(tmp_path / "r", "a", range(1000), status="interrupted")],
                 GateSpec(RATE))
    assert g.verdict is Verdict.INCONCLUSIVE and "interrupted" in g.reason


def test_the_json_has_every_key_the_issue_names(tmp_path: Path) -> None:
    d = evaluate([make_store(tmp_path / "r", "a", range(300), crash_jobs=[5])],
                 GateSpec(RATE)).as_dict()
    for key in ("verdict", "reason", "unit", "rate", "ci_low", "ci_high", "max_rate", "jobs",
                "invocations", "failures", "new_signatures", "known_signatures", "shards"):
        assert key in d, key
    assert d["verdict"] == "FAIL" and d["unit"] == "job" and d["shards"]["seen"] == 1
    assert d["ci_low"] <= d["rate"] <= d["ci_high"]
    json.dumps(d)


@pytest.mark.parametrize("bad", [{"max_rate": 0.0}, {"max_rate": 1.0}, {"max_rate": 0.1,
                                                                      "confidence": 1.0},
                                 {"max_rate": 0.1, "design_effect": 0.5}])
def test_impossible_gate_settings_are_usage_errors(bad: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        GateSpec(**bad)


def test_fatal_classes_parse_and_unknown_ones_are_refused() -> None:
    assert parse_fatal("crash, hang") == {FailureClass.CRASH, FailureClass.HANG}
    with pytest.raises(UsageError, match="--fatal"):
        parse_fatal("crash,segfault")


def test_the_sequential_test_passes_clean_independent_jobs_after_the_computed_count() -> None:
    spec = GateSpec(0.01, design_effect=1.0)
    d, test = first_decision(spec, ((i, False) for i in range(10_000)))
    assert d is Decision.ACCEPT_H0 and test.units == jobs_to_pass(spec)


def test_a_burst_in_one_process_is_worth_less_than_the_same_failures_spread_out() -> None:
    spec = GateSpec(0.01, design_effect=1.0)
    burst, spread = SequentialTest(spec), SequentialTest(spec)
    for i in range(400):
        burst.add(i // 100, 100 <= i < 104)  # four failures in a row in process 1
        spread.add(i // 100, i in (50, 150, 250, 350))
    assert burst.decision() is Decision.CONTINUE
    assert burst.deff > spread.deff
    assert burst.sprt().llr < spread.sprt().llr


def test_error_rates_hold_on_simulated_independent_jobs() -> None:
    """A small version of bench/gate_simulation.py: 200 gates at the bound and at a quarter."""
    rng = random.Random(3)
    spec = GateSpec(0.05, design_effect=1.0)
    wrong = {0.05: 0, 0.0125: 0}
    for p in wrong:
        for _ in range(200):
            d, _ = first_decision(spec, ((i, rng.random() < p) for i in range(20_000)))
            bad = Decision.ACCEPT_H0 if p == 0.05 else Decision.ACCEPT_H1
            wrong[p] += d is bad
    assert wrong[0.05] <= 20 and wrong[0.0125] <= 20  # 5% of 200 = 10, with binomial room


def test_gate_without_max_rate_is_a_one_line_usage_error() -> None:
    res = run_cli("gate", "--from", ".")
    assert res.rc == 2 and "--max-rate" in res.stderr


def test_gate_from_a_folder_prints_the_verdict_and_exits_with_its_code(tmp_path: Path) -> None:
    run = make_store(tmp_path / "r", "a", range(300), crash_jobs=[10])
    res = run_cli("gate", "--from", str(run), "--max-rate", "0.05", "--json")
    assert res.rc == 1, res.stderr
    assert res.json()["verdict"] == "FAIL"


def test_the_live_observer_stops_the_soak_once_enough_clean_jobs_ended(tmp_path: Path) -> None:
    from stress.engine.jobs import Job
    from stress.engine.session import Outcome
    from stress.verdicts.gate_live import GateObserver

    spec = GateSpec(RATE)
    obs = GateObserver(spec, tmp_path)
    need = jobs_to_pass(spec)
    for i in range(need - 1):
        assert obs.job(Outcome(Job(i, "p", "shared", i, 10), 1000 + i // 20, False, ())) is None
    assert obs.should_stop() is None
    # the job that decides says so itself: the run stops then, not at the next second's look
    said = obs.job(Outcome(Job(need, "p", "shared", need, 10), 2000, False, ()))
    assert "gate decided: PASS" in (said or "")
    assert "gate decided: PASS" in (obs.should_stop() or "")


def test_a_job_that_decides_fail_stops_at_once_only_when_no_failure_can_be_known(
        tmp_path: Path) -> None:
    """Each job's end counts its failures as new: a FAIL there is sound without a --known
    list; with one, the FAIL waits for the look that reads the store (the failures may be
    known)."""
    from stress.engine.jobs import Job
    from stress.engine.session import Outcome
    from stress.verdicts.gate_live import GateObserver

    known = tmp_path / "known.toml"
    known.write_text('[[known]]\nmatch = "error|*nothing like this*"\nnote = "filed"\n')
    plain = GateObserver(GateSpec(RATE, fatal=frozenset()), tmp_path)
    with_known = GateObserver(GateSpec(RATE, fatal=frozenset(), known=load_known(known)),
                              tmp_path)
    said: dict[str, int | None] = {"plain": None, "with_known": None}
    for i in range(400):  # every other job fails, spread over many processes
        out = Outcome(Job(i, "p", "shared", i, 10), 1000 + i // 10, i % 2 == 0,
                      ("error",) if i % 2 == 0 else ())
        for name, obs in (("plain", plain), ("with_known", with_known)):
            reason = obs.job(out)
            if reason and said[name] is None:
                assert "gate decided: FAIL" in reason
                said[name] = i
    assert said["plain"] is not None and said["plain"] < 60
    assert said["with_known"] is None


def test_a_job_that_would_pass_waits_while_a_fatal_failure_is_not_in_the_store(
        tmp_path: Path) -> None:
    """A fatal failure told by its job's end may be new (a FAIL) or known: until the store
    shows it, neither the per-job look nor the once-a-second one may PASS."""
    from stress.engine.jobs import Job
    from stress.engine.session import Outcome
    from stress.verdicts.gate_live import GateObserver

    spec = GateSpec(RATE)
    need = jobs_to_pass(spec)
    obs = GateObserver(spec, make_store(tmp_path / "r", "a", range(5)))  # no failure rows
    obs.job(Outcome(Job(0, "p", "shared", 0, 10), 999, True, ("miscompare",)))
    said = [obs.job(Outcome(Job(i, "p", "shared", i, 10), 1000 + i // 20, False, ()))
            for i in range(1, 3 * need)]
    assert not any(said)
    assert obs.should_stop() is None  # the store has no fatal row yet: still waiting


def test_a_job_seen_again_waits_for_the_look_that_rebuilds_the_test(tmp_path: Path) -> None:
    """A failure pinned on a job after its end changes a unit already counted clean: the
    running test is dropped and the once-a-second look rebuilds it."""
    from stress.engine.jobs import Job
    from stress.engine.session import Outcome
    from stress.verdicts.gate_live import GateObserver

    spec = GateSpec(RATE, fatal=frozenset())
    obs = GateObserver(spec, tmp_path)
    need = jobs_to_pass(spec)
    obs.job(Outcome(Job(0, "p", "shared", 0, 10), 1000, False, ()))
    obs.job(Outcome(Job(0, "p", "shared", 0, 10), 1000, True, ("error",)))  # pinned later
    assert obs.live is None and obs.units[0] == (1000, True)
    said = [obs.job(Outcome(Job(i, "p", "shared", i, 10), 1000 + i // 20, False, ()))
            for i in range(1, need + 50)]
    assert not any(said)  # no running test until the look
    assert obs.should_stop() is not None and obs.live is not None


def test_the_live_observer_stops_at_a_new_fatal_failure_it_reads_from_the_store(
        tmp_path: Path) -> None:
    from stress.engine.jobs import Job
    from stress.engine.session import Outcome
    from stress.verdicts.gate_live import GateObserver

    run = make_store(tmp_path / "r", "a", range(50), crash_jobs=[7])
    obs = GateObserver(GateSpec(RATE), run)
    obs.job(Outcome(Job(7, "p", "shared", 7, 10), 1000, True, ("crash",)))
    assert "FAIL (new crash" in (obs.should_stop() or "")
    sig = evaluate([run], GateSpec(RATE)).new[0].id
    known = tmp_path / "known.toml"
    known.write_text(f'[[known]]\nsignature = "{sig}"\nnote = "filed"\n')
    quiet = GateObserver(GateSpec(RATE, known=load_known(known)), run)
    quiet.job(Outcome(Job(7, "p", "shared", 7, 10), 1000, True, ("crash",)))
    assert quiet.should_stop() is None  # known: neither fatal nor counted


def add_failed_jobs(run: Path, run_id: str, indices: list[int]) -> None:
    """Exec jobs whose command exited non-zero (`failed`: no job row, one failure row each,
    keyed on the failing test), as capture.on_exit writes them."""
    import sqlite3

    db = sqlite3.connect(run / "stress.db")
    for i in indices:
        db.execute("INSERT INTO failures (run_id, class, job_index, program, pattern, worker, "
                   "pid, last_step, in_flight, steps, message, attribution, detected_at, "
                   "elapsed_s, evidence) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (run_id, "failed", i, "exec:pytest", "exec", 0, 5000 + i, "run", "[]",
                    "[]", "worker w0 exited with status 1 while running ...", "none",
                    0.0, 1.0, json.dumps({"tests": {"runner": "pytest",
                                                    "failed": ["t.py::test_flaky"]}})))
    db.commit()
    db.close()


def test_failed_tests_are_rated_not_fatal_by_default_and_fatal_when_named(
        tmp_path: Path) -> None:
    run = make_store(tmp_path / "r", "a", range(2000), jobs_per_process=1)
    add_failed_jobs(run, "a", [2000, 2001])  # 2 of 2002 jobs: far below a quarter of 5%
    g = evaluate([run], GateSpec(RATE))
    assert g.verdict is Verdict.PASS, g.reason
    assert g.failures["failed"] == 2 and [s.cls for s in g.new] == ["failed"]
    assert g.rate.failures == 2
    fatal = evaluate([run], GateSpec(RATE, fatal=parse_fatal("crash,failed")))
    assert fatal.verdict is Verdict.FAIL and "new failed" in fatal.reason


def test_a_confidence_asked_is_printed_as_asked_not_rounded(tmp_path: Path) -> None:
    spec = GateSpec(RATE, 0.995)
    g = evaluate([make_store(tmp_path / "long", "a", range(jobs_to_pass(spec) + 20))], spec)
    assert g.verdict is Verdict.PASS
    assert g.reason.endswith("at 99.5%") and "(99.5%" in g.reason and "100%" not in g.reason


def test_a_crash_at_exit_pinned_on_its_job_fails_that_job_in_the_report_as_in_the_gate(
        tmp_path: Path) -> None:
    """issue 36 item 9: a user's command that segfaults at exit after its done marker: the
    report said "Process exits failing: 3/12 ... Jobs failing: 0/12" where the gate said
    "failing jobs 3/12" (and the HTML's failing-jobs plots 0%). One definition: such a job
    failed, in every output."""
    import sqlite3

    from stress.analysis import html, report

    run = make_store(tmp_path / "r", "a", range(12), jobs_per_process=1)
    db = sqlite3.connect(run / "stress.db")
    for i in range(3):  # as capture records it: after job_done, at worker-exit
        db.execute("INSERT INTO failures (run_id, class, signal, job_index, program, pattern, "
                   "worker, pid, last_step, in_flight, steps, message, attribution, "
                   "detected_at, elapsed_s, exposure) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   ("a", "crash", "SIGSEGV", i, "exec:t", "exec", 0, 1000 + i, "worker-exit",
                    "[]", "[]", "worker w0 killed by SIGSEGV after its work was done", "none",
                    0.0, 1.0, "process_exit"))
    db.commit()
    db.close()
    r = report.build([run])
    g = evaluate([run], GateSpec(RATE))
    assert (r.overall.failures, r.overall.units) == (g.rate.failures, g.rate.units) == (3, 12)
    assert "Jobs failing: 3/12 = 25%" in r.headline()
    assert r.as_dict()["failing_jobs"]["failures"] == 3
    assert sum(failed for _, _, failed in html._job_ends(r)) == 3  # the HTML's plots
