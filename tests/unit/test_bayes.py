"""analysis.bayes (issue 27): the posterior over the first rise on hand-made counts, checked
against a direct integral; the choice of the next stack; compare's P(B worse)."""

from __future__ import annotations

import numpy as np
import pytest

from stress.analysis import bayes
from stress.analysis.bayes import change_point, expected_entropy, prob_greater
from stress.analysis.stats import betainc


def test_a_clean_split_puts_the_posterior_on_the_first_failing_stack() -> None:
    cp = change_point([0] * 5 + [5] * 5, [10] * 10)
    assert cp.top == 5 and cp.posterior[5] > 0.95
    assert cp.p_bad()[4] < 0.05 and cp.p_bad()[5] > 0.95
    good, bad = cp.rates()
    assert good < 0.05 and 0.35 < bad < 0.65


def test_identical_rates_leave_the_posterior_flat() -> None:
    cp = change_point([2] * 10, [10] * 10)
    assert cp.posterior.max() < 0.5  # no answer
    assert cp.posterior[1:-1].max() < 0.1  # and no stack inside the list stands out


def test_a_rate_that_rises_twice_is_answered_by_its_first_rise() -> None:
    counts = [0] * 6 + [3] * 6 + [15] * 6  # 0/30, then 3/30 (10%), then 15/30 (50%)
    cp = change_point(counts, [30] * 18)
    assert cp.top == 6 and cp.posterior[6] > 0.95
    assert cp.second_rise() > 0.99
    # a one-rise model names the bigger step: what the second rise is there for
    assert change_point(counts, [30] * 18, second_rise=1e-12).top == 12


def _direct(f: list[int], m: list[int], second_rise: float) -> np.ndarray:
    """The joint posterior by brute force: uniform priors, no least rise, a fine midpoint
    grid in the rate itself (not logit), the ordering by explicit cumulative sums."""
    n, grid = len(f), 400
    x = (np.arange(grid) + 0.5) / grid

    def lik(a: int, b: int) -> np.ndarray:
        k, t = sum(f[a:b]), sum(m[a:b])
        return np.asarray(np.exp(k * np.log(x) + (t - k) * np.log1p(-x)))

    def above(v: np.ndarray) -> np.ndarray:
        return np.asarray(np.cumsum(v[::-1])[::-1] - 0.5 * v)

    joint = np.zeros((n, n + 1))
    for k1 in range(n):
        two = np.sum(lik(0, k1) * above(lik(k1, n))) / grid ** 2 * 2
        joint[k1, n] = two * ((1 - second_rise) if k1 < n - 1 else 1.0) / n
        for k2 in range(k1 + 1, n):
            three = np.sum(lik(0, k1) * above(lik(k1, k2) * above(lik(k2, n)))) / grid ** 3 * 6
            joint[k1, k2] = three * second_rise / (n - 1 - k1) / n
    return joint / joint.sum()


def test_the_posterior_is_the_integral_it_claims_to_be() -> None:
    f, m = [0, 1, 3, 2, 4], [5, 6, 6, 3, 5]
    cp = change_point(f, m, rate_prior=(1.0, 1.0), rise=0.0)
    assert np.abs(cp.joint - _direct(f, m, bayes.SECOND_RISE)).max() < 2e-3


def test_the_grid_is_fine_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    m = rng.integers(0, 40, 20)
    f = rng.binomial(m, np.where(np.arange(20) >= 9, 0.5, 0.02))
    coarse = change_point(f, m)
    monkeypatch.setattr(bayes, "GRID_POINTS", 1024)
    monkeypatch.setattr(bayes, "_P", bayes._grid()[0])
    monkeypatch.setattr(bayes, "_LOG_P", bayes._grid()[1])
    monkeypatch.setattr(bayes, "_LOG_Q", bayes._grid()[2])
    fine = change_point(f, m)
    assert np.abs(coarse.posterior - fine.posterior).max() < 2e-3


def test_the_next_trial_goes_to_the_stacks_still_undecided() -> None:
    # 0..3 clean in 10 trials each, 7..9 failing half of 10: the rise is at 4, 5, 6 or 7
    cp = change_point([0, 0, 0, 0, 0, 0, 0, 5, 5, 5], [10, 10, 10, 10, 0, 0, 0, 10, 10, 10])
    e = expected_entropy(cp)
    assert int(np.argmin(e)) in (4, 5, 6)
    assert e[[0, 1, 2, 8, 9]].min() > e[[4, 5, 6]].max()  # settled stacks tell nothing new


def test_with_no_trials_yet_the_first_goes_to_the_middle() -> None:
    e = expected_entropy(change_point([0] * 16, [0] * 16))
    assert 5 <= int(np.argmin(e)) <= 10


def test_expected_entropy_is_the_average_over_the_two_outcomes() -> None:
    f, m = [0, 0, 1, 3, 2], [4, 3, 4, 5, 3]
    cp = change_point(f, m)
    x = 2
    p_fail = sum(cp.joint[k1, k2] * (cp.rate[0][k1, k2] if x < k1 else cp.rate[1][k1, k2]
                                      if x < k2 else cp.rate[2][k1, k2])
                 for k1 in range(5) for k2 in range(6))
    after_fail = change_point([0, 0, 2, 3, 2], [4, 3, 5, 5, 3]).entropy()
    after_pass = change_point(f, [4, 3, 5, 5, 3]).entropy()
    want = p_fail * after_fail + (1 - p_fail) * after_pass
    assert expected_entropy(cp)[x] == pytest.approx(want, abs=0.01)


@pytest.mark.parametrize(("fb", "nb", "fa", "na"), [(5, 10, 0, 10), (3, 10, 3, 10),
                                                    (1, 20, 4, 20), (0, 0, 0, 0)])
def test_p_b_worse_is_the_beta_posteriors_chance_of_b_above_a(fb: int, nb: int, fa: int,
                                                               na: int) -> None:
    # P(B > A) = the integral of A's density times P(B > x), by the midpoint rule
    from math import lgamma

    x = (np.arange(2000) + 0.5) / 2000
    a1, b1 = 1 + fa, 1 + na - fa
    pdf = np.exp((a1 - 1) * np.log(x) + (b1 - 1) * np.log1p(-x)
                 - (lgamma(a1) + lgamma(b1) - lgamma(a1 + b1)))
    tail = np.array([1 - betainc(1 + fb, 1 + nb - fb, float(v)) for v in x])
    assert prob_greater(fb, nb, fa, na) == pytest.approx(float(np.mean(pdf * tail)), abs=2e-3)
