"""Noisy bisection (issue 11) on fake stacks: names the first bad one, resumes from cached
trials, says inconclusive when an end or a midpoint does not behave."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from stress.cli import cli
from stress.verdicts.bisect import Judgement, Outcome, bisect, render
from stress.verdicts.compare import Cached, Trial, TrialCache


class Stacks:
    def __init__(self, rates: dict[str, float], seed: int = 1, stop_after: int | None = None):
        self.rates, self.rng = rates, random.Random(seed)
        self.stop_after, self.ran = stop_after, 0

    def run(self, stack: str, index: int, seed: int) -> Trial:
        if self.stop_after is not None and self.ran >= self.stop_after:
            raise KeyboardInterrupt  # the user's ^C midway
        self.ran += 1
        return Trial(stack, index, seed, self.rng.random() < self.rates[stack])


def line(n: int, first_bad: int, good: float = 0.0, bad: float = 0.5) -> dict[str, float]:
    return {f"n{i:02d}": bad if i >= first_bad else good for i in range(n)}


@pytest.mark.parametrize("first_bad", [1, 5, 11, 15])
def test_bisect_over_16_stacks_names_the_first_bad_one(first_bad: int) -> None:
    rates = line(16, first_bad)
    r = bisect(Stacks(rates, seed=first_bad), list(rates), seed=0)
    assert r.outcome is Outcome.FOUND
    assert r.first_bad == f"n{first_bad:02d}"
    assert r.last_good == f"n{first_bad - 1:02d}"
    assert 0.9 <= r.confidence < 1.0
    assert "<- first bad" in render(r)
    tested = [row for row in r.rows if row.judgement is not Judgement.UNTESTED]
    assert len(tested) <= 2 + 4  # the ends, then log2(16) midpoints


def test_an_interrupted_bisect_resumes_from_its_cached_trials(tmp_path: Path) -> None:
    rates = line(16, 9)
    names = list(rates)
    cache = TrialCache(tmp_path, "plan")
    with pytest.raises(KeyboardInterrupt):
        bisect(Cached(Stacks(rates, stop_after=25), cache), names, seed=0)
    resumed = Cached(Stacks(rates, seed=2), cache)
    r = bisect(resumed, names, seed=0)
    assert r.first_bad == "n09"
    assert resumed.reused == 25  # every trial of the first attempt, none run twice
    again = Cached(Stacks(rates, seed=3), cache)
    assert bisect(again, names, seed=0).first_bad == "n09" and again.ran == 0


def test_a_good_end_that_fails_is_inconclusive_and_says_so() -> None:
    rates = line(8, 0)
    r = bisect(Stacks(rates), list(rates), seed=0)
    assert r.outcome is Outcome.INCONCLUSIVE and r.outcome.exit_code == 3
    assert "the good end n00 is bad" in r.reason


class OneInNine(Stacks):
    """n03 fails trials 0, 9, 18, ...: a rate (11%) whose likelihood ratio between 2% and 30%
    never leaves the SPRT's bounds."""

    def run(self, stack: str, index: int, seed: int) -> Trial:
        if stack == "n03":
            return Trial(stack, index, seed, index % 9 == 0)
        return super().run(stack, index, seed)


def test_a_midpoint_between_the_hypotheses_is_inconclusive_with_the_range() -> None:
    rates = line(8, 6, bad=1.0)
    r = bisect(OneInNine(rates), list(rates), seed=0, max_trials=30)
    assert r.outcome is Outcome.INCONCLUSIVE
    assert r.reason.startswith("n03 is undecided: undecided after 30 trials: 4/30")
    assert "first bad stack lies in n01 .. n07" in r.reason


def test_bisect_wants_good_before_bad_in_the_file(tmp_path: Path) -> None:
    f = tmp_path / "stacks.toml"
    f.write_text("[stacks.a]\n\n[stacks.b]\n")
    res = CliRunner().invoke(cli, ["bisect", "--stacks", str(f), "--good", "b", "--bad", "a"],
                             standalone_mode=False)
    assert "must come before" in str(res.exception)
