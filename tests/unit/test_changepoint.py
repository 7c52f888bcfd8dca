"""analysis.changepoint (issue 27): bisect's posterior over the first rise, checked by hand on
two stacks, against a brute-force integral on five, against a finer grid and against no
pruning; the answer when the rate rises twice; the choice of the next stack."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from stress.analysis import changepoint
from stress.analysis.bayes import prob_greater
from stress.analysis.bisectread import expected_entropy
from stress.analysis.changepoint import Prior, first_rise


def _lbeta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def test_two_stacks_by_hand() -> None:
    # uniform priors and no least rise: every factor has a closed form. Stack 0 failed 1 of
    # 6, stack 1 failed 4 of 5. Hypotheses: stack 1 is the first bad one (g = stack 0's
    # rate, b = stack 1's, b >= g), the good end is bad already (one rate b for both, and a
    # good rate with no data below it), no stack is bad (one rate g for both).
    prior = Prior(good=(1.0, 1.0), bad=(1.0, 1.0), rise=0.0, second_rise=0.0, end_weight=0.5,
                  wide=0.0, no_rise=0.0, faint=0.0)
    split = math.exp(_lbeta(2, 6) + _lbeta(5, 2)) * prob_greater(4, 5, 1, 6) / 0.5
    pooled = math.exp(_lbeta(6, 7))  # 5 of 11, one rate
    first_bad = pooled * (6 / 13) / 0.5  # P(g <= b) with g uniform: E[b] = 6 / 13
    none = pooled
    weights = np.array([0.5 * first_bad, 1.0 * split, 0.5 * none])
    want = weights / weights.sum()
    got = first_rise([1, 4], [6, 5], prior).posterior
    assert got == pytest.approx(want, abs=2e-3)
    assert got[1] == pytest.approx(0.90, abs=0.01)  # the figure a reader can redo


def _brute_weights(f: list[int], m: list[int], prior: Prior,
                   grid: int = 160) -> np.ndarray:
    """P(counts, first bad = k) for k = 0 .. n-1 and no stack bad (n), by brute force: a
    midpoint grid in the rate itself (not logit), the ordered region as an explicit mask, the
    priors as densities (the good rate's own where the rate rises twice); the faint model as
    a second model added with its weight."""
    if prior.faint > 0:
        loud = dataclasses.replace(prior, faint=0.0)
        faint = dataclasses.replace(loud, bad=prior.faint_bad)
        return ((1 - prior.faint) * _brute_weights(f, m, loud, grid)
                + prior.faint * _brute_weights(f, m, faint, grid))
    n = len(f)
    x = (np.arange(grid) + 0.5) / grid

    def dens(ab: tuple[float, float]) -> np.ndarray:
        d = np.exp((ab[0] - 1) * np.log(x) + (ab[1] - 1) * np.log1p(-x))
        return np.asarray(d / d.sum())

    def lik(a: int, b: int) -> np.ndarray:
        k, t = sum(f[a:b]), sum(m[a:b])
        return np.asarray(np.exp(k * np.log(x) + (t - k) * np.log1p(-x)))

    dg = sum(w * dens((a, b)) for w, a, b in prior.goods)
    dg2 = sum(w * dens((a, b)) for w, a, b in prior.goods2)
    db, d = dens(prior.bad), prior.rise
    two = x[:, None] + d <= x[None, :]
    three = two[:, :, None] & (x[None, :, None] + d <= x[None, None, :])
    p2 = float((dg[:, None] * db[None, :] * two).sum())
    p3 = float((dg2[:, None, None] * db[None, :, None] * db[None, None, :] * three).sum())
    w = np.ones(n)
    w[0] = prior.end_weight
    total = w.sum() / (1 - prior.no_rise) if prior.no_rise else w.sum() + prior.end_weight
    post = np.zeros(n + 1)
    q = prior.second_rise
    for k in range(n):
        g0 = lik(0, k) * dg
        one = float((g0[:, None] * (lik(k, n) * db)[None, :] * two).sum()) / p2
        post[k] += one * (1.0 if k in (0, n - 1) else 1.0 - q) * w[k] / total
        for k2 in range(k + 1, n) if k > 0 else ():  # the good end bad: one rate
            b1, b2 = lik(k, k2) * db, lik(k2, n) * db
            t = float(((lik(0, k) * dg2)[:, None, None] * b1[None, :, None] * b2[None, None, :]
                       * three).sum()) / p3
            post[k] += t * q / (n - 1 - k) * w[k] / total
    none = prior.no_rise if prior.no_rise else prior.end_weight / total
    post[n] = float((lik(0, n) * dg).sum()) * none
    return post


def _brute(f: list[int], m: list[int], prior: Prior) -> np.ndarray:
    w = _brute_weights(f, m, prior)
    return w / w.sum()


@pytest.mark.parametrize(("f", "m"), [([0, 1, 3, 2, 4], [5, 6, 6, 3, 5]),
                                      ([0, 0, 1, 2, 5], [10, 4, 8, 3, 9]),
                                      ([0, 0, 0, 4, 0], [3, 0, 2, 5, 0])])
def test_the_posterior_is_the_integral_it_claims_to_be(f: list[int], m: list[int]) -> None:
    got = first_rise(f, m).posterior
    assert np.abs(got - _brute(f, m, changepoint.PRIOR)).max() < 2e-3


@pytest.mark.parametrize(("f", "m"), [([0, 1, 3, 2, 4], [5, 6, 6, 3, 5]),
                                      ([3, 2, 3, 6, 7], [10, 10, 10, 10, 10])])
def test_each_mixture_of_the_prior_is_the_integral_it_claims_to_be(f: list[int],
                                                                  m: list[int]) -> None:
    # a wide good component, a faint model and a fixed chance of no rise, each off the
    # defaults: the brute force adds them up its own way
    for prior in (Prior(wide=0.4, wide_good=(1.0, 3.0)), Prior(faint=0.6, faint_bad=(1.0, 8.0)),
                  Prior(no_rise=0.2), Prior(wide=0.3, faint=0.5, no_rise=0.1),
                  Prior(second_good=(1.0, 50.0), second_rise=0.2)):  # two rises' own good
        got = first_rise(f, m, prior).posterior
        assert np.abs(got - _brute(f, m, prior)).max() < 4e-3, prior  # 160 points, 30% rates


def test_each_hypothesis_mean_rates_and_the_evidence_mix_the_two_models_as_claimed() -> None:
    # the next trial's choice reads each hypothesis' mean rates, the fall reading the evidence:
    # here by brute force on a grid in the rate, each model's truncated prior weighed by its
    # weight and by its own evidence for that hypothesis (a faint rise: both models count)
    f, m = [0, 1, 0, 1, 2, 3], [9] * 6
    prior, n = changepoint.PRIOR, 6
    fr = first_rise(f, m, prior)
    assert fr.log_evidence == pytest.approx(math.log(_brute_weights(f, m, prior).sum()),
                                            abs=0.01)
    x = (np.arange(800) + 0.5) / 800

    def dens(ab: tuple[float, float]) -> np.ndarray:
        return np.asarray(np.exp((ab[0] - 1) * np.log(x) + (ab[1] - 1) * np.log1p(-x)
                                 - _lbeta(*ab)))

    def lik(a: int, b: int) -> np.ndarray:
        return np.asarray(x ** sum(f[a:b]) * (1 - x) ** (sum(m[a:b]) - sum(f[a:b])))

    dg = sum(w * dens((a, b)) for w, a, b in prior.goods)
    order = x[:, None] + prior.rise <= x[None, :]
    for k in range(1, n):  # one rise at k: (good rate, bad rate) averaged over both models
        num, den = np.zeros(2), 0.0
        for w, bad in ((1 - prior.faint, prior.bad), (prior.faint, prior.faint_bad)):
            both = dg[:, None] * dens(bad)[None, :] * order
            j = both * (lik(0, k)[:, None] * lik(k, n)[None, :]) * w / both.sum()
            den += j.sum()
            num += ((j * x[:, None]).sum(), (j * x[None, :]).sum())
        got = (fr.rate[0][k, n], fr.rate[1][k, n])
        assert got == pytest.approx(tuple(num / den), abs=1e-3), k
    none = lik(0, n) * dg
    assert fr.rate_none == pytest.approx(float((none * x).sum() / none.sum()), abs=1e-4)


def test_the_grid_is_fine_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    m = rng.integers(0, 40, 20)
    f = rng.binomial(m, np.where(np.arange(20) >= 9, 0.5, 0.02))
    coarse = first_rise(f, m).posterior
    monkeypatch.setattr(changepoint, "GRID_POINTS", 1024)
    assert np.abs(coarse - first_rise(f, m).posterior).max() < 2e-3


def test_pruning_drops_only_hypotheses_that_carry_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    m = np.where(rng.random(40) < 0.4, rng.integers(1, 12, 40), 0)
    f = rng.binomial(m, np.where(np.arange(40) >= 17, 0.4, 0.03))
    pruned = first_rise(f, m)
    monkeypatch.setattr(changepoint, "PRUNE_NATS", math.inf)
    full = first_rise(f, m)
    assert np.abs(pruned.joint - full.joint).max() < 1e-9
    assert pruned.top == full.top


def test_a_clean_split_puts_the_posterior_on_the_first_failing_stack() -> None:
    fr = first_rise([0] * 5 + [5] * 5, [10] * 10)
    assert fr.top == 5 and fr.posterior[5] > 0.95
    assert fr.p_bad()[4] < 0.05 and fr.p_bad()[5] > 0.95
    good, bad = fr.rates()
    assert good < 0.05 and 0.35 < bad < 0.65


def test_identical_rates_leave_no_stack_inside_the_list_standing_out() -> None:
    fr = first_rise([2] * 10, [10] * 10)  # 20% everywhere: all bad, or none, or anywhere
    assert fr.posterior[1:-1].max() < 0.1


def test_a_bad_end_that_fails_like_the_rest_puts_the_posterior_on_no_stack_bad() -> None:
    fr = first_rise([0] * 8, [12] * 8)
    assert fr.top == 8 and fr.none > 0.8  # index n: no stack of the list is bad


def test_a_rate_that_rises_twice_is_answered_by_its_first_rise() -> None:
    counts = [0] * 6 + [4] * 6 + [15] * 6  # 0/30, then 4/30 (13%), then 15/30 (50%)
    fr = first_rise(counts, [30] * 18)
    assert fr.top == 6 and fr.posterior[6] > 0.95
    assert fr.second_rise() > 0.99
    # a one-rise model names the bigger step: what the second rise is there for
    one = first_rise(counts, [30] * 18, Prior(second_rise=0.0))
    assert one.top == 12


def test_the_next_trial_goes_to_the_stacks_still_undecided() -> None:
    # 0..3 clean in 10 trials each, 7..9 failing half of 10: the rise is at 4, 5, 6 or 7
    fr = first_rise([0, 0, 0, 0, 0, 0, 0, 5, 5, 5], [10, 10, 10, 10, 0, 0, 0, 10, 10, 10])
    e = expected_entropy(fr)
    assert int(np.argmin(e)) in (4, 5, 6)
    assert e[[0, 1, 2, 8, 9]].min() > e[[4, 5, 6]].max()  # settled stacks tell nothing new


def test_with_no_trials_yet_the_first_goes_to_the_middle() -> None:
    e = expected_entropy(first_rise([0] * 16, [0] * 16))
    assert 5 <= int(np.argmin(e)) <= 10


def test_expected_entropy_is_the_average_over_the_two_outcomes() -> None:
    f, m = [0, 0, 1, 3, 2], [4, 3, 4, 5, 3]
    fr = first_rise(f, m)
    x = 2
    n = len(f)
    p_fail = sum(fr.joint[k1, k2] * (fr.rate[0][k1, k2] if x < k1 else fr.rate[1][k1, k2]
                                      if x < k2 else fr.rate[2][k1, k2])
                 for k1 in range(n) for k2 in range(k1 + 1, n + 1))
    p_fail += fr.none * fr.rate_none
    after_fail = first_rise([0, 0, 2, 3, 2], [4, 3, 5, 5, 3]).entropy()
    after_pass = first_rise(f, [4, 3, 5, 5, 3]).entropy()
    want = p_fail * after_fail + (1 - p_fail) * after_pass
    assert expected_entropy(fr)[x] == pytest.approx(want, abs=0.01)


def test_the_mean_rates_are_the_next_trials_chance_to_fail() -> None:
    # the predictive chance that stack 2 fails, summed over the hypotheses, is the change of
    # the posterior's normaliser when one failure is added there
    f, m = [0, 1, 3, 4], [6, 5, 6, 5]
    fr = first_rise(f, m)
    x, n = 2, len(f)
    p_fail = sum(fr.joint[k1, k2] * (fr.rate[0][k1, k2] if x < k1 else fr.rate[1][k1, k2]
                                      if x < k2 else fr.rate[2][k1, k2])
                 for k1 in range(n) for k2 in range(k1 + 1, n + 1)) + fr.none * fr.rate_none
    want = math.exp(_log_evidence([0, 1, 4, 4], [6, 5, 7, 5]) - _log_evidence(f, m))
    assert p_fail == pytest.approx(want, abs=2e-3)


def _log_evidence(f: list[int], m: list[int]) -> float:
    """log P(counts) under the prior, by brute force."""
    return math.log(float(_brute_weights(f, m, changepoint.PRIOR).sum()))


def test_counts_must_be_counts() -> None:
    with pytest.raises(ValueError, match="failures <= trials"):
        first_rise([3], [2])
