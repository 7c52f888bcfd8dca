"""compare (issue 11) on fake trials: verdicts, early stopping, live state, per-signature news,
harness failures inconclusive, trials cached on disk."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stress.cli import cli
from stress.soak.options import SoakOptions
from stress.verdicts.compare import SoakTrials, Verdict, compare, render
from stress.verdicts.trials import Cached, Trial, TrialCache


class Arms:
    """Each arm fails with its rate (seeded); optional signatures and harness failures."""

    def __init__(self, rates: dict[str, float], seed: int = 1,
                 sigs: dict[str, tuple[tuple[str, str], ...]] | None = None,
                 harness: dict[str, str] | None = None):
        self.rates, self.rng = rates, random.Random(seed)
        self.sigs, self.harness = sigs or {}, harness or {}
        self.calls: list[tuple[str, int, int]] = []

    def run(self, stack: str, index: int, seed: int) -> Trial:
        self.calls.append((stack, index, seed))
        if stack in self.harness:
            return Trial(stack, index, seed, False, harness=self.harness[stack])
        failed = self.rng.random() < self.rates[stack]
        return Trial(stack, index, seed, failed, signatures=self.sigs.get(stack, ())
                     if failed else ())


def test_a_b_that_fails_half_its_trials_is_b_worse_before_the_fixed_budget() -> None:
    lines: list[str] = []
    runs = [compare(Arms({"a": 0.0, "b": 0.5}, seed=s), "a", "b", seed=10,
                    on_progress=lines.append) for s in range(20)]
    assert all(r.verdict is Verdict.B_WORSE for r in runs)
    assert sum(len(r.trials) for r in runs) / len(runs) < 40
    assert all(r.decided_by == "sequential" for r in runs)
    assert lines[0].startswith("pair 1: A 0/1 failed")  # the live state, one line a pair


def test_pairs_run_a_then_b_with_the_same_seed() -> None:
    arms = Arms({"a": 0.0, "b": 0.0})
    compare(arms, "a", "b", seed=100, max_pairs=3)
    assert arms.calls == [("a", 0, 100), ("b", 0, 100), ("a", 1, 101), ("b", 1, 101),
                          ("a", 2, 102), ("b", 2, 102)]


def test_a_worse_is_told_apart_from_b_worse() -> None:
    r = compare(Arms({"a": 0.6, "b": 0.0}, seed=3), "a", "b", seed=0)
    assert r.verdict is Verdict.A_WORSE
    assert r.verdict.exit_code == 0


def test_no_failures_on_either_side_is_no_difference_shown_at_the_budget() -> None:
    r = compare(Arms({"a": 0.0, "b": 0.0}), "a", "b", seed=0, max_pairs=5)
    assert r.verdict is Verdict.NO_DIFFERENCE
    assert len(r.trials) == 10
    assert "Fisher p(B worse) = 1" in r.reason
    assert "no difference shown" in render(r)


@pytest.mark.parametrize(("rates", "seed"), [({"a": 0.0, "b": 0.5}, 1),
                                              ({"a": 0.3, "b": 0.3}, 2),
                                              ({"a": 0.5, "b": 0.1}, 3)])
def test_the_posterior_of_b_worse_is_shown_beside_the_fisher_p(rates: dict[str, float],
                                                               seed: int) -> None:
    from stress.analysis.bayes import prob_greater

    r = compare(Arms(rates, seed=seed), "a", "b", seed=0, max_pairs=8)
    fa, fb = (sum(t.failed for t in r.arm(x)) for x in ("a", "b"))
    want = prob_greater(fb, len(r.arm("b")), fa, len(r.arm("a")))
    assert r.rates["posterior_b_worse"] == round(want, 4)
    assert r.as_dict()["rates"]["posterior_prior"].startswith("Beta(1, 1)")
    assert f"Fisher p(B worse) = {r.rates['p_b_worse']:.3g}, posterior P(B worse) = " \
           f"{want:.1%} (uniform priors)" in render(r)


def test_the_trial_cache_records_its_plan_family_for_a_later_bisect(tmp_path: Path) -> None:
    cache = TrialCache(tmp_path, "plan1", {"a": "k1"}, family="fam1")
    cache.put(Trial("a", 0, 7, True))
    cache.put(Trial("a", 3, 10, False))
    meta = json.loads((tmp_path / "trials" / "plan1" / "plan.json").read_text())
    assert meta == {"plan": "plan1", "family": "fam1"}
    assert [t.index for t in cache.stored("a")] == [0, 3]  # what bisect reads back


def test_a_stack_that_cannot_start_its_workers_is_inconclusive_with_the_reason() -> None:
    arms = Arms({"a": 0.0, "b": 0.0},
                harness={"b": "cannot start: No module named 'numpy'"})
    r = compare(arms, "a", "b", seed=0)
    assert r.verdict is Verdict.INCONCLUSIVE
    assert r.verdict.exit_code == 3
    assert "No module named 'numpy'" in r.reason
    assert len(arms.calls) == 2  # stopped at once
    assert r.arm("b") == []  # never counted as a failure of b


def test_a_signature_seen_only_under_b_is_news_even_at_equal_rates() -> None:
    sigs = {"a": (("S1", "crash|SIGSEGV|invoke"),),
            "b": (("S1", "crash|SIGSEGV|invoke"), ("S2", "teardown_hang|device-release"))}
    r = compare(Arms({"a": 0.3, "b": 0.3}, seed=5, sigs=sigs), "a", "b", seed=0)
    assert ("S2", "teardown_hang|device-release") in r.new_in_b
    assert all(i != "S1" for i, _ in r.new_in_b)
    assert "new in B" in render(r)


def test_cached_trials_are_reused_and_harness_failures_are_not_kept(tmp_path: Path) -> None:
    cache = TrialCache(tmp_path, "plan1", {"a": "k1"})
    first = Cached(Arms({"a": 1.0, "b": 0.0}), cache)
    t = first.run("a", 0, 7)
    assert first.ran == 1 and t.failed
    again = Cached(Arms({"a": 0.0, "b": 0.0}), cache)
    assert again.run("a", 0, 7) == t and again.reused == 1 and again.ran == 0
    broken = Cached(Arms({"b": 0.0}, harness={"b": "cannot start"}), cache)
    broken.run("b", 0, 7)
    assert cache.get("b", 0) is None
    other_plan = TrialCache(tmp_path, "plan2", {"a": "k1"})
    assert other_plan.get("a", 0) is None  # another plan never reuses these


def test_compare_refuses_a_stack_file_error_with_exit_2_before_running(tmp_path: Path) -> None:
    f = tmp_path / "stacks.toml"
    f.write_text('[stacks.a]\n\n[stacks.b]\nrequirements = ["iree-base-runtime"]\n')
    res = CliRunner().invoke(cli, ["compare", "a", "b", "--stacks", str(f), "--results",
                                   str(tmp_path / "out")], standalone_mode=False)
    assert res.exception is not None
    assert f"{f}:4:" in str(res.exception) and "has no version" in str(res.exception)
    assert not (tmp_path / "out").exists()


def test_compare_names_an_unknown_stack(tmp_path: Path) -> None:
    f = tmp_path / "stacks.toml"
    f.write_text("[stacks.a]\n\n[stacks.b]\n")
    res = CliRunner().invoke(cli, ["compare", "a", "c", "--stacks", str(f)],
                             standalone_mode=False)
    assert "no stack named 'c'" in str(res.exception)


class FakeSoak:
    """Stands in for run_soak: returns a summary as a soak under the stack would."""

    def __init__(self, summary: dict[str, Any]):
        self.summary = summary
        self.opts: list[Any] = []

    def __call__(self, opts: Any) -> dict[str, Any]:
        self.opts.append(opts)
        opts.results.mkdir(parents=True, exist_ok=True)
        return self.summary


def soak_trials(tmp_path: Path, summary: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                venv: str = "") -> tuple[SoakTrials, FakeSoak]:
    import stress.soak.run
    from stress.runtimes.provision import Built
    from stress.runtimes.spec import Stack

    fake = FakeSoak(summary)
    monkeypatch.setattr(stress.soak.run, "run_soak", fake)
    st = Stack("b", requirements=("iree-base-runtime==3.12.0",), env=(("K", "v"),))
    built = Built(st, sys.executable, {"K": "v"}, ["iree-base-runtime==3.12.0"], venv)
    base = SoakOptions(
        target="cpu", device=None, workers=1, threads=1, patterns=[], programs=[],
        program_files=[], duration_s=None, invocations=4, seed=None, env={"A": "1"},
        max_failures=None, results=None, timeout_s=30.0, teardown_timeout_s=15.0,
        max_worker_restarts=1, inject=[], python=None, shard=(0, 1), job_seed=None,
        cache_dir=tmp_path / "cache", compile_jobs=1, progress=True)
    return SoakTrials(base, {"b": built}, tmp_path), fake


def summary_of(runtime: str, path: str, **kw: Any) -> dict[str, Any]:
    return {"failed": False, "jobs": 4, "failures": {"crash": 0}, "signatures": [],
            "harness_errors": 0, "manifest": {"iree_runtime": runtime,
                                              "iree_runtime_path": path}, **kw}


def test_a_trial_runs_the_soak_under_the_stacks_interpreter_env_and_seed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "venv"
    summary = summary_of("3.12.0rc1", str(venv / "lib" / "iree" / "runtime"))
    trials, fake = soak_trials(tmp_path, summary, monkeypatch, str(venv))
    t = trials.run("b", 3, 42)
    assert t.harness == "" and not t.failed and t.runtime == "3.12.0rc1"
    opts = fake.opts[0]
    assert opts.python == sys.executable and opts.seed == 42
    assert opts.env == {"A": "1", "K": "v"}
    manifest = json.loads((tmp_path / "b" / "trial-0003" / "stack.json").read_text())
    assert manifest["freeze"] == ["iree-base-runtime==3.12.0"]
    assert manifest["iree_runtime"] == "3.12.0rc1"


def test_a_trial_whose_workers_ran_another_runtime_is_not_a_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "venv"
    summary = summary_of("3.13.0", "/usr/lib/python3/iree/runtime", failed=True)
    trials, _ = soak_trials(tmp_path, summary, monkeypatch, str(venv))
    t = trials.run("b", 0, 1)
    assert "3.13.0" in t.harness and "not from the stack's venv" in t.harness


def test_a_trial_with_harness_errors_is_not_a_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "venv"
    summary = summary_of("", "", harness_errors=2, jobs=0)
    trials, _ = soak_trials(tmp_path, summary, monkeypatch, str(venv))
    assert "2 worker(s) could not start" in trials.run("b", 0, 1).harness


def test_a_stack_whose_interpreter_cannot_start_says_why_in_its_own_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trials, fake = soak_trials(tmp_path, summary_of("", ""), monkeypatch, str(tmp_path / "v"))
    trials.built["b"].env["PYTHONHOME"] = str(tmp_path / "nowhere")
    t = trials.run("b", 0, 1)
    assert t.harness.startswith(f"cannot start: {sys.executable} exited 1:")
    assert "encodings" in t.harness  # Python's own message about its missing stdlib
    assert fake.opts == []  # no soak was started


def test_each_signature_is_compared_by_the_trials_it_occurred_in() -> None:
    s1, s2 = ("S1", "crash|SIGSEGV|invoke"), ("S2", "teardown_hang|device-release")
    ta = [Trial("a", i, i, i % 2 == 0, signatures=(s1,) if i % 2 == 0 else ())
          for i in range(12)]
    tb = [Trial("b", i, i, True, signatures=(s1, s2) if i % 2 == 0 else (s2,))
          for i in range(12)]

    class Replay:
        def run(self, stack: str, index: int, seed: int) -> Trial:
            return (ta if stack == "a" else tb)[index]

    r = compare(Replay(), "a", "b", seed=0, max_pairs=12)
    first, second = r.signatures
    assert (first["id"], first["a_trials"], first["b_trials"]) == ("S2", 0, 12)
    assert first["new_in_b"] and first["p_b_more"] < 0.001 and first["q"] < 0.01
    assert (second["id"], second["a_trials"], second["b_trials"]) == ("S1", 6, 6)
    assert second["p_b_more"] > 0.5
    assert "signatures by trials" in render(r)


def test_a_stack_compiler_that_fails_is_one_line_naming_the_stack_file_and_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 28 review: compare's own compile (a stack that pins a compiler) still said the
    failure in describe()'s lines, its argv through the cache's copy of the file."""
    import dataclasses

    from stress.programs import compiler

    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                   "  return %nope : tensor<4xf32>\n}\n")
    trials, _ = soak_trials(tmp_path, summary_of("3.12.0", ""), monkeypatch)
    trials.base = dataclasses.replace(trials.base, program_files=[str(bad)])
    iree_compile = compiler.find_compiler()
    trials.built["b"].compiler = iree_compile  # (as a stack that pins one: its own binary)
    said = trials.run("b", 0, 1).harness  # (what compare shows of a stack that cannot start)
    assert "\n" not in said and "argv" not in said and "/src/" not in said, said
    assert said.startswith(f"cannot start: stack b: 1 program(s) failed to compile for "
                           f"cpu:generic: user.bad: {bad}:2:10: error: "), said
    assert said.endswith(f"(`iree-stress compile --verbose --target cpu:generic --mlir {bad}` "
                         f"with {iree_compile} in place of the tool's iree-compile shows each "
                         f"in full)"), said


def test_a_trial_that_is_not_a_result_says_so_in_its_progress_line_not_ok(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during a trial: its line read `ok 0 failure(s), 0 jobs; interrupted by SIGINT:
    not a result ...` (issue 38: setup is never a verdict, not even in the progress)."""
    venv = tmp_path / "venv"
    summary = summary_of("3.12.0rc1", str(venv / "lib" / "iree" / "runtime"),
                         status="interrupted", stop_reason="interrupted by SIGINT", jobs=0)
    trials, _ = soak_trials(tmp_path, summary, monkeypatch, str(venv))
    lines: list[str] = []
    trials.log = lines.append
    t = trials.run("b", 0, 1)
    assert t.harness.startswith("interrupted by SIGINT: not a result")
    assert lines == [f"  b trial 0 (seed 1): 0 jobs, not counted: {t.harness}"], lines


def test_a_trial_whose_workers_all_crashed_before_reporting_their_runtime_is_a_failure(
        tmp_path: Path) -> None:
    """What a real soak on the stand-in with cleanup-segv recorded (summary.json, trimmed):
    every facts worker died in its driver release, so no runtime was reported; the crashes
    are the stack's, never 'no result'."""
    from stress.verdicts.compare import trial_problem
    from stress.vocab import Engine

    crashed = {"jobs": 0, "failed": True, "status": "completed", "harness_errors": 0,
               "failures": {"crash": 2, "hang": 0, "teardown_hang": 0, "error": 0,
                            "miscompare": 0, "failed": 0},
               "manifest": {"iree_runtime": None, "hip_library": None, "driver": "hip"}}
    assert trial_problem(Engine.PYTHON, crashed, tmp_path) == ""
    assert trial_problem(Engine.PYTHON, {**crashed, "jobs": 288}, tmp_path) == ""
    nothing = {**crashed, "failed": False, "failures": {"crash": 0}}
    assert trial_problem(Engine.PYTHON, nothing, tmp_path).startswith(
        "no worker reported its runtime or ran a job")
