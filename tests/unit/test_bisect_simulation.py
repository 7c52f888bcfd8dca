"""bench/bisect_simulation.py's "if rates known" reference (issue 27): the posterior a model
that knew the setting's rates would print, checked against sums written out by hand."""

from __future__ import annotations

import itertools
import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bisect_simulation import from_prior, known_rates, parse_prior  # noqa: E402

from stress.analysis.changepoint import PRIOR, Prior, first_rise  # noqa: E402


def _lik(f: int, m: int, r: float) -> float:
    return float(r ** f * (1 - r) ** (m - f))


def test_one_rise_with_known_rates_is_the_likelihood_over_the_inner_stacks() -> None:
    f, m = [0, 1, 2, 3], [4, 3, 3, 4]
    g, b = 0.1, 0.6
    w = [math.prod(_lik(f[i], m[i], g if i < k else b) for i in range(4)) for k in (1, 2, 3)]
    want = [0.0] + [x / sum(w) for x in w]  # the first rise is never the good end
    assert list(known_rates((g, b), f, m)) == pytest.approx(want, abs=1e-12)


def test_two_rises_with_known_rates_sum_over_the_second_rise_uniform_after_the_first() -> None:
    f, m, n = [0, 1, 1, 3, 4], [5, 4, 5, 4, 5], 5
    rates = (0.02, 0.2, 0.7)
    post = [0.0] * n
    for k1, k2 in itertools.product(range(1, n), range(1, n)):
        if k2 > k1:
            lik = math.prod(_lik(f[i], m[i], rates[(i >= k1) + (i >= k2)]) for i in range(n))
            post[k1] += lik / (n - 1 - k1)
    want = [x / sum(post) for x in post]
    assert list(known_rates(rates, f, m)) == pytest.approx(want, abs=1e-12)


def test_a_failure_on_a_stack_that_cannot_fail_rules_out_every_rise_after_it() -> None:
    got = known_rates((0.0, 0.5), [0, 0, 1, 1], [3, 3, 1, 2])
    assert got[3] == 0.0 and got[1] + got[2] == pytest.approx(1.0)


@pytest.mark.parametrize("prior", [PRIOR, Prior(second_good=(1.0, 50.0), second_rise=0.2)])
def test_a_truth_drawn_from_the_prior_is_drawn_from_the_prior_bisect_computes_with(
        prior: Prior) -> None:
    # with no trial, first_rise's posterior is its prior: where the first rise is, how often
    # the rate rises twice, and each hypothesis' mean rates (the Beta priors, mixed and
    # truncated to rising order); the simulation's "from the prior" truths must agree
    n, runs = 6, 20_000
    fr = first_rise([0] * n, [0] * n, prior)
    rng = random.Random(40)
    firsts = [0] * (n + 1)
    rates: dict[str, list[float]] = {"good, one rise": [], "good, two rises": [],
                                     "good end bad": [], "none": []}
    twice = 0
    for _ in range(runs):
        r, first = from_prior(prior, n, rng)
        firsts[first] += 1
        two = 0 < first < n - 1 and r[-1] != r[first]
        twice += two
        if first == n:
            rates["none"].append(r[0])
        elif first == 0:
            rates["good end bad"].append(r[0])
        else:  # the good rate has a prior of its own where the rate rises twice
            rates["good, two rises" if two else "good, one rise"].append(r[0])
    assert [x / runs for x in firsts] == pytest.approx(list(fr.posterior), abs=0.012)
    assert twice / runs == pytest.approx(fr.second_rise(), abs=0.01)
    one, two_ = fr.joint[1:, -1], fr.joint[1:, :-1]
    want = {"good, one rise": float((one * fr.rate[0][1:, -1]).sum() / one.sum()),
            "good, two rises": float((two_ * fr.rate[0][1:, :-1]).sum() / two_.sum()),
            "good end bad": float(fr.rate[1][0, n]), "none": fr.rate_none}
    got = {k: sum(v) / len(v) for k, v in rates.items()}
    assert got == pytest.approx(want, abs=0.015), (got, want)


def test_every_field_of_the_prior_can_be_replaced_from_the_command_line() -> None:
    got = parse_prior(["faint_bad=1,8", "wide_good=1,4", "no_rise=0.2", "bad=1,1"])
    assert (got.faint_bad, got.wide_good, got.no_rise, got.bad) == ((1.0, 8.0), (1.0, 4.0), 0.2,
                                                                    (1.0, 1.0))
    assert parse_prior(["second_good=1,30"]).second_good == (1.0, 30.0)
    old = parse_prior(["second_good=none", "second_rise=0.3"])  # the prior before f3abd5a
    assert old.second_good is None and old.goods2 == old.goods
    with pytest.raises(ValueError, match="second_good is Beta"):
        parse_prior(["second_good=0,30"])
