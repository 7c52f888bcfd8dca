"""bench/bisect_frontier.py's alternative posteriors (issue 27), checked against sums written
out by hand, and the rule at bisect's default confidence against the real bisect, its
same-rate stop included."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bisect_frontier import (  # noqa: E402
    RULES,
    SAME,
    View,
    answer,
    check,
    favoured,
    first_of,
    plug_in,
    trajectory,
)
from bisect_simulation import FROM_PRIOR, one_run  # noqa: E402

from stress.analysis.changepoint import PRIOR, FirstRise, Prior, first_rise  # noqa: E402
from stress.verdicts.bisect import CONFIDENCE, Stop  # noqa: E402


def _lik(f: int, m: int, r: float) -> float:
    return float(r ** f * (1 - r) ** (m - f))


def test_plug_in_is_the_one_rise_likelihood_at_the_posterior_mean_rates_ends_weighted() -> None:
    f, m = [0, 0, 2, 3], [5, 4, 4, 4]
    prior = Prior(end_weight=0.5, no_rise=0.2)
    fr = first_rise(f, m, prior)
    g, b = fr.rates()
    w = [math.prod(_lik(f[i], m[i], g if i < k else b) for i in range(4)) for k in range(5)]
    for k in range(4):  # the good end half a stack; no stack bad 20% of the whole
        w[k] *= 0.8 * (0.5 if k == 0 else 1.0) / 3.5
    w[4] *= 0.2
    want = [x / sum(w) for x in w]
    assert list(plug_in(fr, f, m, prior)) == pytest.approx(want, rel=1e-9)
    assert int(np.argmax(want)) == 2  # the data say so: a check the sums above are not flat


@pytest.mark.parametrize("n", [3, 20])
@pytest.mark.parametrize("prior", [PRIOR, Prior(end_weight=0.5, no_rise=0.0)],
                         ids=["no_rise", "end_weight"])
def test_plug_in_weighs_no_stack_bad_as_the_model_prior_does(n: int, prior: Prior) -> None:
    # with no trials the likelihood is flat: what is left is the prior, which the model's
    # posterior on no trials is too (P(no stack bad) stays no_rise however long the list)
    zeros = [0] * n
    fr = first_rise(zeros, zeros, prior)
    assert list(plug_in(fr, zeros, zeros, prior)) == pytest.approx(list(fr.posterior), rel=1e-6)


def _fr(joint: list[list[float]], none: float) -> FirstRise:
    j = np.asarray(joint, dtype=float)
    z = np.zeros_like(j)
    return FirstRise(j / (j.sum() + none), none / (j.sum() + none), (z, z, z), 0.0)


def test_favoured_takes_one_rise_unless_a_second_is_more_likely_than_not() -> None:
    # rows: first bad k = 0 .. 2; columns: second rise at 1 .. 2, last column none
    one = _fr([[0.0, 0.1, 0.1, 0.2], [0.0, 0.0, 0.1, 0.3], [0.0, 0.0, 0.0, 0.1]], 0.1)
    assert list(favoured(one)) == pytest.approx([0.2 / 0.7, 0.3 / 0.7, 0.1 / 0.7, 0.1 / 0.7])
    two = _fr([[0.0, 0.25, 0.1, 0.2], [0.0, 0.0, 0.2, 0.15], [0.0, 0.0, 0.0, 0.1]], 0.0)
    assert two.second_rise() == pytest.approx(0.55)  # just past even: two rises favoured
    assert list(favoured(two)) == pytest.approx([0.35 / 0.55, 0.2 / 0.55, 0.0, 0.0])


@pytest.mark.parametrize("setting", [(0.02, 0.5), (0.02, 0.2, 0.5)])
def test_the_rule_at_the_default_confidence_stops_where_the_real_bisect_does(
        setting: tuple[float, ...]) -> None:
    n, seen = 8, set()
    for run in (0, 1, 2, 3, 14):  # run 14 of 2% -> 50%: the first bad stack is the list's last
        trials, stop, printed, right, _ = one_run((setting, n, 5, run, PRIOR))
        rule = f"stop at {100 * CONFIDENCE:g}%"
        mine, k, shown = trajectory((setting, n, 5, run, PRIOR))[rule]
        assert mine == trials
        assert (stop == "confident") == (1 <= k <= n - 1)
        if stop == "confident":
            assert shown == pytest.approx(printed)
            assert right == (k == first_of(setting, n, 5, run, PRIOR))
            seen.add(k)
    assert len(seen) >= 3  # different answers: not one stack named every time


def _view(post: list[float], plug: list[float], fav: list[float], tried: bool = True) -> View:
    return View(np.asarray(post), np.asarray(plug), np.asarray(fav), tried)


def test_each_rule_stops_same_rate_on_the_posterior_it_stops_on() -> None:
    ends, spread = [0.5, 0.01, 0.01, 0.48], [0.3, 0.2, 0.2, 0.3]  # ends 98%; ends 60%
    stops = {name: rule(_view(ends, spread, spread)) for name, rule in RULES.items()}
    assert stops == {"stop at 95%": (SAME, pytest.approx(0.98)),
                     "stop at 97.5%": (SAME, pytest.approx(0.98)),
                     "plug-in printed": None,  # it waits for the plug-in posterior too
                     "plug-in": None,
                     "one rise printed": (SAME, pytest.approx(0.6)),  # printed: the favoured ends
                     "one rise": None}
    stops = {name: rule(_view(spread, ends, ends)) for name, rule in RULES.items()}
    assert [name for name, hit in stops.items() if hit] == ["plug-in", "one rise"]
    assert all(rule(_view(ends, ends, ends, tried=False)) is None for rule in RULES.values())
    top = [0.98, 0.0, 0.0, 0.02]  # top and ends both past every level: the top stop first
    assert [rule(_view(top, top, top)) for rule in RULES.values()] == [(0, 0.98)] * len(RULES)


def test_a_same_rate_stop_is_an_answer_only_from_the_prior() -> None:
    n = 8
    assert answer((0.02, 0.5), n, 3, SAME, 0.98) is None
    assert answer((0.02, 0.5), n, 3, 3, 0.98) == (0.98, True)
    assert answer(FROM_PRIOR, n, n, SAME, 0.98) == (0.98, True)  # no stack bad
    assert answer(FROM_PRIOR, n, 0, SAME, 0.98) == (0.98, True)  # the good end bad
    assert answer(FROM_PRIOR, n, 3, SAME, 0.98) == (0.98, False)


def test_check_agrees_with_the_real_bisect_where_it_stops_same_rate() -> None:
    n, seed, runs = 4, 5, 4
    real = [one_run((FROM_PRIOR, n, seed, r, PRIOR)) for r in range(runs)]
    rights = {right for _, stop, _, right, _ in real if stop == Stop.SAME_RATE.value}
    assert rights == {True, False}  # same-rate stops here: right (one rate) and wrong (a rise)
    assert check(FROM_PRIOR, n, seed, PRIOR, runs) == runs
