"""bench/bisect_frontier.py's alternative posteriors (issue 27), checked against sums written
out by hand, and the rule at bisect's default confidence against the real bisect."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bisect_frontier import favoured, first_of, plug_in, trajectory  # noqa: E402
from bisect_simulation import one_run  # noqa: E402

from stress.analysis.changepoint import PRIOR, FirstRise, Prior, first_rise  # noqa: E402
from stress.verdicts.bisect import CONFIDENCE  # noqa: E402


def _lik(f: int, m: int, r: float) -> float:
    return float(r ** f * (1 - r) ** (m - f))


def test_plug_in_is_the_one_rise_likelihood_at_the_posterior_mean_rates_ends_weighted() -> None:
    f, m = [0, 0, 2, 3], [5, 4, 4, 4]
    prior = Prior(end_weight=0.5)
    fr = first_rise(f, m, prior)
    g, b = fr.rates()
    w = [math.prod(_lik(f[i], m[i], g if i < k else b) for i in range(4)) for k in range(5)]
    w[0] *= 0.5
    w[4] *= 0.5
    want = [x / sum(w) for x in w]
    assert list(plug_in(fr, f, m, prior)) == pytest.approx(want, rel=1e-9)
    assert int(np.argmax(want)) == 2  # the data say so: a check the sums above are not flat


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
    for run in (0, 1, 2, 14):  # run 14 of 2% -> 50%: the first bad stack is the list's last
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
