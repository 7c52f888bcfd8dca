"""stress.analysis.stats: the numbers report, gate and compare print (issue 9)."""

from __future__ import annotations

import math
import random

import pytest

from stress.analysis.sequential import BernoulliSprt, Decision, PairedSprt
from stress.analysis.stats import (
    Alternative,
    Unit,
    benjamini_hochberg,
    clustered_rate,
    compare_rates,
    design_effect,
    fisher_exact,
    fisher_exact_stratified,
    fmt_rate,
    independent_rate,
    median_interval,
    multiple_comparisons_note,
    standardized_rate,
    t_quantile,
    wilson,
)


def test_wilson_interval_matches_known_values() -> None:
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and math.isclose(hi, 0.2775, abs_tol=1e-4)
    lo, hi = wilson(5, 10)
    assert math.isclose(lo, 0.2366, abs_tol=1e-4) and math.isclose(hi, 0.7634, abs_tol=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (4, 2.7764), (10, 2.2281),
                                              (30, 2.0423), (1e9, 1.95996)])
def test_t_quantile_matches_tables(df: float, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)


def test_jobs_in_separate_processes_get_the_plain_wilson_interval() -> None:
    units = [Unit(i, int(i % 10 == 0)) for i in range(500)]
    r = clustered_rate(units)
    lo, hi = wilson(50, 500)
    assert r.design_effect < 1.05
    assert r.low == pytest.approx(lo, abs=0.01) and r.high == pytest.approx(hi, abs=0.01)


def test_failures_bunched_in_one_process_widen_the_interval() -> None:
    # 20 processes of 25 jobs; all 25 failures in process 0 (a bad process, not a 5% rate)
    units = [Unit(p, int(p == 0)) for p in range(20) for _ in range(25)]
    r = clustered_rate(units)
    naive = independent_rate(25, 500)
    assert r.rate == pytest.approx(0.05)
    assert r.design_effect > 10
    assert r.high - r.low > 2 * (naive.high - naive.low)
    assert r.low <= r.rate <= r.high


def test_no_failure_gives_the_wilson_upper_bound_and_no_design_effect() -> None:
    units = [Unit(p, 0) for p in range(10) for _ in range(30)]
    r = clustered_rate(units)
    assert r.failures == 0 and r.design_effect == 1.0
    assert r.high == pytest.approx(wilson(0, 300)[1])
    assert design_effect([]) == (1.0, 0)


def test_rate_describe_names_the_unit_and_the_processes() -> None:
    r = clustered_rate([Unit(p, int(p < 2)) for p in range(8)], unit="process exit")
    text = r.describe()
    assert "2/8 process exits" in text and "25%" in text and "8 processes" in text


def test_fisher_exact_matches_the_tea_tasting_table() -> None:
    assert fisher_exact(3, 1, 1, 3, Alternative.GREATER) == pytest.approx(0.24286, abs=1e-4)
    assert fisher_exact(3, 1, 1, 3, Alternative.TWO_SIDED) == pytest.approx(0.48571, abs=1e-4)
    assert fisher_exact(3, 1, 1, 3, Alternative.LESS) == pytest.approx(0.98571, abs=1e-4)


def test_stratified_exact_test_is_not_fooled_by_the_pattern_mix() -> None:
    # rows: failure windows, healthy windows; columns: with the feature, without. Within each
    # pattern the feature is as common in failures as in health (90% and 10%), but most
    # failures come from the pattern where it is common (Simpson): pooled, it looks decisive
    strata = [(45, 5, 9, 1), (1, 9, 20, 180)]
    pooled = tuple(sum(t[i] for t in strata) for i in range(4))
    assert fisher_exact(*pooled) < 1e-3
    assert fisher_exact_stratified(strata) > 0.2
    assert fisher_exact_stratified([(3, 1, 1, 3)]) == pytest.approx(fisher_exact(3, 1, 1, 3))


def test_benjamini_hochberg_adjusts_in_rank_order() -> None:
    q = benjamini_hochberg([0.01, 0.04, 0.03, 0.005])
    assert q == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert benjamini_hochberg([]) == []


def test_sprt_accepts_the_low_rate_after_many_clean_units_and_the_high_after_failures() -> None:
    s = BernoulliSprt(0.01, 0.05)
    assert s.update(0, 10) is Decision.CONTINUE
    assert s.update(0, 200) is Decision.ACCEPT_H0
    s = BernoulliSprt(0.01, 0.05)
    assert s.update(8, 60) is Decision.ACCEPT_H1
    assert s.state()["decision"] == "accept H1"
    with pytest.raises(ValueError):
        BernoulliSprt(0.05, 0.01)


def test_sprt_error_rates_hold_under_early_stopping() -> None:
    rng = random.Random(5)

    def run(p: float) -> Decision:
        s = BernoulliSprt(0.1, 0.3, alpha=0.05, beta=0.05)
        while s.decision is Decision.CONTINUE:
            s.update(int(rng.random() < p), 1)
        return s.decision

    false_h1 = sum(run(0.1) is Decision.ACCEPT_H1 for _ in range(400)) / 400
    false_h0 = sum(run(0.3) is Decision.ACCEPT_H0 for _ in range(400)) / 400
    assert false_h1 <= 0.08 and false_h0 <= 0.08


def test_design_effect_makes_the_sprt_ask_for_more_data() -> None:
    plain = BernoulliSprt(0.01, 0.05)
    clustered = BernoulliSprt(0.01, 0.05)
    assert plain.update(8, 60) is Decision.ACCEPT_H1
    assert clustered.update(8, 60, design_effect=4.0) is Decision.CONTINUE


def test_paired_sprt_decides_b_worse_when_b_fails_alone() -> None:
    s = PairedSprt()
    decisions = [s.update(False, True) for _ in range(20)]
    assert decisions[-1] is Decision.ACCEPT_H1
    assert s.update(True, True) is Decision.ACCEPT_H1  # concordant pairs change nothing
    assert s.state()["discordant_pairs"] == 20


def test_compare_rates_finds_the_worse_arm_and_not_a_difference_at_equal_rates() -> None:
    a = independent_rate(2, 200)
    b = independent_rate(30, 200)
    c = compare_rates(a, b)
    assert c.p_b_worse < 1e-4 and c.low > 0 and c.p_a_worse > 0.99
    same = compare_rates(a, independent_rate(2, 200))
    assert same.p_two_sided > 0.5 and same.low < 0 < same.high


def test_standardized_rate_removes_the_pattern_mix() -> None:
    # the value ran mostly the risky pattern; its rate within each pattern equals the others'
    strata = {"per-call": [Unit(i, int(i % 5 == 0)) for i in range(100)],
              "shared": [Unit(1000 + i, int(i % 50 == 0)) for i in range(10)]}
    weights = {"per-call": 0.2, "shared": 0.8}
    r = standardized_rate(strata, weights)
    assert r.rate == pytest.approx(0.2 * 0.2 + 0.8 * 0.1)
    assert r.low <= r.rate <= r.high


def test_rates_print_as_people_read_them() -> None:
    assert fmt_rate(0) == "0" and fmt_rate(0.123) == "12%" and fmt_rate(0.0041) == "0.41%"
    assert "Benjamini-Hochberg" in multiple_comparisons_note(25)
    assert multiple_comparisons_note(1) == ""


def test_large_stratified_tables_use_mantel_haenszel_close_to_the_exact_test() -> None:
    from stress.analysis.stats import _mantel_haenszel

    mid = [(30, 70, 100, 300), (20, 30, 50, 100)]
    assert _mantel_haenszel(mid, Alternative.GREATER) == \
        pytest.approx(fisher_exact_stratified(mid), abs=0.01)
    huge = [(300, 700, 1000, 3000)] * 7  # 2,100 failing jobs: the exact convolution is slow
    assert fisher_exact_stratified(huge) < 1e-10
    assert fisher_exact_stratified([(250, 750, 1000, 3000)] * 7) > 0.4


def test_median_interval_uses_the_binomial_order_statistics() -> None:
    # n = 20 at 95%: the 6th and 15th of the sorted values (the textbook ranks); n = 6: the
    # extremes (coverage 1 - 2/64); n = 5: no pair of order statistics reaches 95%
    assert median_interval(list(range(20, 0, -1))) == (6, 15)
    assert median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None


def test_median_interval_covers_the_median_of_a_skewed_distribution() -> None:
    rng = random.Random(7)
    true_median = math.log(2)  # of the exponential distribution with rate 1
    for n in (9, 33, 120):
        trials, covered = 2000, 0
        for _ in range(trials):
            interval = median_interval([rng.expovariate(1.0) for _ in range(n)])
            assert interval is not None
            covered += interval[0] <= true_median <= interval[1]
        assert covered / trials >= 0.94, (n, covered / trials)
