"""The statistics of iree-stress, in one place: report, gate and compare use only this module.

Unit and design. A soak's failures are not independent invocations: one crash ends its
process's remaining jobs, a churn helper fails in bursts, a cross-thread job fails as a whole.
So every rate here is a share of *units* (a job, a process exit, a trial) that failed, the
units grouped into *clusters* that share fate (the worker process that ran the jobs). The
interval is a Wilson score interval on the effective sample size n / deff (Kish), where the
design effect deff comes from the delete-one-cluster jackknife variance of the rate, with a
Student t quantile on clusters - 1 degrees of freedom instead of z: with few clusters the
variance estimate itself is uncertain. deff is never taken below 1 (clustering
that looks helpful is noise in the variance estimate), and is 1 when there is no failure (no
information on clustering; the interval is then the plain Wilson one, which under-covers when
failures cluster: bench/interval_coverage.py shows how much). With few processes the t quantile
makes intervals wide on purpose: 500 jobs in 2 long-lived processes are worth little more than
2 observations of "this process's rate"; more workers (or process-per-job) tighten them.
bench/interval_coverage.py simulates clustered, bursty failures and checks the 95% interval
covers the true per-job rate (committed output in bench/results/interval_coverage.txt).

Also here: Fisher's exact test (plain and stratified, the exact conditional test of a common
odds ratio of 1), Benjamini-Hochberg false-discovery-rate adjustment, directly standardised
rates (factor rates adjusted for the pattern mix), Wald's sequential probability ratio test for
a Bernoulli rate (the gate: stop as soon as decided) and a two-sample comparison (compare).
Everything is pure Python: scipy would add 40 MB for a handful of closed forms.
"""

from __future__ import annotations

import enum
import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

Z95: float = 1.959963984540054
_ROUNDING: float = 1e-12  # interval ends closer than this to 0 or 1 are rounding noise
CONFIDENCE: float = 0.95  # every interval in the reports; the gate passes its own
SHOWN_DESIGN_EFFECT: float = 1.05  # below, "design effect 1" would be noise worth no words
FEW_CLUSTERS: int = 5  # fewer processes: the t quantile (df = processes - 1) is large; say so
_BISECT_STEPS: int = 80  # t quantile by bisection: 2^-80 of the bracket, far below print
_CF_ITERATIONS: int = 300  # continued fraction of the incomplete beta (converges in < 100)
_CF_EPS: float = 1e-14
_EXACT_WORK: int = 200_000  # convolution steps of the exact stratified test (~0.1 s); beyond,
#   the Mantel-Haenszel normal approximation (thousands of failing jobs: it is accurate there)


# --- elementary pieces -----------------------------------------------------------------------

def wilson(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (proportions). Honest at k = 0 and
    for small n, unlike the normal approximation; accepts effective (fractional) counts."""
    if n <= 0:
        return 0.0, 1.0
    k = min(max(k, 0.0), n)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(max(0.0, p * (1 - p) / n + z * z / (4 * n * n))) / denom
    lo, hi = centre - half, centre + half
    if k == 0 or lo < _ROUNDING:  # centre - half is float noise (6e-17) at k = 0: it is 0
        lo = 0.0
    if k == n or hi > 1.0 - _ROUNDING:
        hi = 1.0
    return lo, hi


def median_interval(values: Sequence[float],
                    confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Distribution-free interval for the median: the order statistics x(j) and x(n+1-j), j the
    largest rank with P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2, so the interval covers the
    true median with probability >= confidence whatever the distribution (independent samples).
    None when n is too small for any such pair (n < 6 at 95%)."""
    xs = sorted(values)
    n = len(xs)
    tail = (1 - confidence) / 2
    cdf, j = 0.0, 0  # cdf = P(B < j + 1) as j grows
    while j < n // 2:
        cdf += math.comb(n, j) / 2.0 ** n
        if cdf > tail:
            break
        j += 1
    if j == 0:
        return None
    return xs[j - 1], xs[n - j]


def _betacf(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, _CF_ITERATIONS + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / (c if abs(c) > 1e-300 else 1e-300)
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / (c if abs(c) > 1e-300 else 1e-300)
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student t distribution function."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student t quantile (bisection on t_cdf); the normal quantile beyond 10^6 df."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    lo, hi = -1e4, 1e4
    for _ in range(_BISECT_STEPS):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _z(confidence: float) -> float:
    return Z95 if confidence == CONFIDENCE else t_quantile(0.5 + confidence / 2, 1e9)


# --- rates with clustering -------------------------------------------------------------------

@dataclass(frozen=True)
class Unit:
    """One exposure to failure: a job, a process exit, a trial. `failed` is 0 or 1."""

    cluster: Hashable  # units sharing fate (the worker process that ran the job)
    failed: int


@dataclass(frozen=True)
class Rate:
    """A failure rate per unit with its interval. `effective_n` = units / design effect: the
    number of independent units the data are worth (what compare and the gate test with)."""

    failures: int
    units: int
    clusters: int
    rate: float
    low: float
    high: float
    design_effect: float
    unit: str = "job"
    confidence: float = CONFIDENCE
    method: str = "Wilson on n/deff, t(clusters-1)"

    @property
    def effective_n(self) -> float:
        return self.units / self.design_effect if self.units else 0.0

    def describe(self) -> str:
        pct = fmt_level(self.confidence)
        shown = self.design_effect >= SHOWN_DESIGN_EFFECT
        clu = f"; {self.clusters} processes, design effect {self.design_effect:.2g}" \
            if shown else f"; {self.clusters} processes"
        if shown and self.clusters < FEW_CLUSTERS:
            clu += ": few processes, wide on purpose"
        return (f"{self.failures}/{self.units} {self.unit}s = {fmt_rate(self.rate)} "
                f"[{fmt_rate(self.low)}, {fmt_rate(self.high)}] ({pct}{clu})")

    def as_dict(self) -> dict[str, float | int | str]:
        return {"unit": self.unit, "failures": self.failures, "units": self.units,
                "clusters": self.clusters, "rate": round(self.rate, 6),
                "ci_low": round(self.low, 6), "ci_high": round(self.high, 6),
                "confidence": self.confidence, "design_effect": round(self.design_effect, 3),
                "method": self.method}


def fmt_level(p: float) -> str:
    """A level the user asked for, as asked: 0.95 -> 95%, 0.975 -> 97.5%, 0.995 -> 99.5%."""
    return f"{100 * p:g}%"


def fmt_rate(p: float) -> str:
    """A proportion as people read it: 12%, 0.41%, 0.003%."""
    if p == 0:
        return "0"
    pct = 100 * p
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%" if pct >= 0.01 else f"{pct:.1g}%"


def design_effect(units: Sequence[Unit]) -> tuple[float, int]:
    """(deff, clusters): the delete-one-cluster jackknife variance of the share failed over its
    binomial variance, floored at 1. The jackknife rather than the linearised (sandwich)
    variance: with a few or very unequal clusters (one long-lived process, many short ones
    ended by crashes) the sandwich is too small and intervals under-cover (the simulation
    showed 89-91% for a nominal 95%)."""
    per: dict[Hashable, list[int]] = defaultdict(lambda: [0, 0])
    for u in units:
        c = per[u.cluster]
        c[0] += u.failed
        c[1] += 1
    return cluster_design_effect([(y, m) for y, m in per.values()])


def cluster_design_effect(per_cluster: Sequence[tuple[int, int]]) -> tuple[float, int]:
    """design_effect from (failed, units) per cluster."""
    shapes: Counter[tuple[int, int]] = Counter(per_cluster)
    return cluster_design_effect_of_shapes(shapes)


def cluster_design_effect_of_shapes(shapes: Mapping[tuple[int, int], int]) -> tuple[float, int]:
    """design_effect from how many clusters have each (failed, units) shape: what a caller that
    keeps running totals (the gate's sequential test, thousands of looks) passes; clusters of
    one shape share one leave-one-out value, so the cost is the number of distinct shapes."""
    n = sum(m * c for (_, m), c in shapes.items())
    k = sum(y * c for (y, _), c in shapes.items())
    clusters = sum(shapes.values())
    if n == 0 or k in (0, n) or clusters < 2:
        return 1.0, clusters
    r = k / n
    loo = {s: (k - s[0]) / (n - s[1]) if n > s[1] else r for s in shapes}
    mean = sum(v * shapes[s] for s, v in loo.items()) / clusters
    # the jackknife variance times C/(C-1), a small-sample correction: +10% width, and the
    # simulation's worst setting goes from ~93% to ~95% coverage
    var_cluster = sum(shapes[s] * (v - mean) ** 2 for s, v in loo.items())
    var_binom = r * (1 - r) / n
    return max(1.0, var_cluster / var_binom), clusters


def clustered_rate(units: Sequence[Unit], unit: str = "job",
                   confidence: float = CONFIDENCE) -> Rate:
    """Share of units that failed, with an interval that accounts for clustering (module
    doc). With one cluster the between-cluster spread cannot be estimated: deff = 1."""
    n = len(units)
    k = sum(u.failed for u in units)
    deff, clusters = design_effect(units)
    if n == 0:
        return Rate(0, 0, 0, 0.0, 0.0, 1.0, 1.0, unit, confidence)
    z = t_quantile(0.5 + confidence / 2, clusters - 1) if deff > 1.0 else _z(confidence)
    n_eff = n / deff
    lo, hi = wilson(k / n * n_eff, n_eff, z)
    return Rate(k, n, clusters, k / n, lo, hi, deff, unit, confidence)


def independent_rate(k: int, n: int, unit: str = "job",
                     confidence: float = CONFIDENCE) -> Rate:
    """Plain Wilson for units known to be independent (each its own cluster)."""
    lo, hi = wilson(k, n, _z(confidence))
    return Rate(k, n, n, k / n if n else 0.0, lo, hi, 1.0, unit, confidence, "Wilson")


def standardized_rate(strata: Mapping[str, Sequence[Unit]], weights: Mapping[str, float],
                      unit: str = "job", confidence: float = CONFIDENCE) -> Rate:
    """Directly standardised rate: each stratum's (clustered) rate weighted by `weights` (the
    whole run's mix, e.g. each pattern's share of jobs), over the strata present. Compares a
    factor's values as if each had run the same pattern mix. Variance = sum w^2 var_s."""
    present = {s: u for s, u in strata.items() if u and weights.get(s, 0) > 0}
    total_w = sum(weights[s] for s in present)
    if not present or total_w <= 0:
        return Rate(0, 0, 0, 0.0, 0.0, 1.0, 1.0, unit, confidence, "standardised")
    rate = var = 0.0
    k = n = 0
    clusters: set[Hashable] = set()
    for s, units in present.items():
        w = weights[s] / total_w
        r = clustered_rate(units, unit, confidence)
        # a stratum with no failure still carries uncertainty: 0.5 failure (Agresti-Coull-like)
        p = (r.failures + 0.5) / (r.units + 1)
        rate += w * r.rate
        var += w * w * r.design_effect * p * (1 - p) / r.units
        k += r.failures
        n += r.units
        clusters |= {u.cluster for u in units}
    n_eff = rate * (1 - rate) / var if var > 0 and 0 < rate < 1 else float(n)
    n_eff = min(max(n_eff, 1.0), float(n))
    lo, hi = wilson(rate * n_eff, n_eff, _z(confidence))
    return Rate(k, n, len(clusters), rate, lo, hi, max(1.0, n / n_eff), unit, confidence,
                "direct standardisation")


# --- tests -----------------------------------------------------------------------------------

class Alternative(enum.Enum):
    GREATER = "greater"  # the first group (row 1) fails more often
    LESS = "less"
    TWO_SIDED = "two-sided"


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _hypergeom(row1: int, col1: int, total: int) -> tuple[int, list[float]]:
    """Support start and pmf of the top-left cell of a 2x2 table with fixed margins."""
    lo, hi = max(0, row1 + col1 - total), min(row1, col1)
    logs = [_log_comb(col1, x) + _log_comb(total - col1, row1 - x) - _log_comb(total, row1)
            for x in range(lo, hi + 1)]
    return lo, [math.exp(v) for v in logs]


def fisher_exact(a: int, b: int, c: int, d: int,
                 alternative: Alternative = Alternative.GREATER) -> float:
    """Fisher's exact test of the 2x2 table [[a, b], [c, d]] (rows: groups, columns: failed,
    not failed). GREATER: the first group's share of failures is higher."""
    return fisher_exact_stratified([(a, b, c, d)], alternative)


def fisher_exact_stratified(tables: Sequence[tuple[int, int, int, int]],
                            alternative: Alternative = Alternative.GREATER) -> float:
    """Exact conditional test of a common odds ratio of 1 across strata (each table
    [[a, b], [c, d]] with its margins fixed; the statistic is the sum of the a's, whose null
    distribution is the convolution of the strata's hypergeometrics). One stratum: Fisher's
    exact test. Strata whose margins leave no freedom add a constant and change nothing.
    When the exact convolution would be large (thousands of failing jobs per stratum), the
    Cochran-Mantel-Haenszel normal approximation with continuity correction is used: it is
    accurate exactly where the exact one is expensive."""
    work, size = 0, 1
    for a, b, c, _d in tables:
        span = min(a + b, a + c) + 1
        work += size * span
        size += span - 1
    if work > _EXACT_WORK:
        return _mantel_haenszel(tables, alternative)
    dist = {0: 1.0}
    observed = 0
    for a, b, c, d in tables:
        row1, col1, total = a + b, a + c, a + b + c + d
        observed += a
        lo, pmf = _hypergeom(row1, col1, total)
        new: dict[int, float] = defaultdict(float)
        for s, ps in dist.items():
            for i, px in enumerate(pmf):
                if px > 0:
                    new[s + lo + i] += ps * px
        dist = dict(new)
    eps = 1e-7  # ties of floating pmf values
    if alternative is Alternative.GREATER:
        p = sum(v for s, v in dist.items() if s >= observed)
    elif alternative is Alternative.LESS:
        p = sum(v for s, v in dist.items() if s <= observed)
    else:
        ref = dist.get(observed, 0.0)
        p = sum(v for v in dist.values() if v <= ref * (1 + eps))
    return min(1.0, p)


def _mantel_haenszel(tables: Sequence[tuple[int, int, int, int]],
                     alternative: Alternative) -> float:
    obs = mean = var = 0.0
    for a, b, c, d in tables:
        n = a + b + c + d
        if n < 2:
            continue
        r1, r2, c1, c2 = a + b, c + d, a + c, b + d
        obs += a
        mean += r1 * c1 / n
        var += r1 * r2 * c1 * c2 / (n * n * (n - 1))
    if var <= 0:
        return 1.0
    sd = math.sqrt(var)

    def upper(x: float) -> float:  # P(Z >= x)
        return 0.5 * math.erfc(x / math.sqrt(2))

    greater = upper((obs - mean - 0.5) / sd)
    less = upper((mean - obs - 0.5) / sd)
    if alternative is Alternative.GREATER:
        return min(1.0, greater)
    if alternative is Alternative.LESS:
        return min(1.0, less)
    return min(1.0, 2 * min(greater, less))


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), same order as given: a feature with
    q < 0.05 is a discovery at a 5% false-discovery rate across all features tested."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    q = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, pvalues[i] * m / rank)
        q[i] = running
    return q


# --- two-sample decisions (compare) -------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """B against A: difference of rates (B - A) with a Newcombe interval, and Fisher's exact
    p-values on effective counts (each rate's units / design effect)."""

    a: Rate
    b: Rate
    difference: float
    low: float
    high: float
    p_b_worse: float
    p_a_worse: float
    p_two_sided: float

    def as_dict(self) -> dict[str, object]:
        return {"a": self.a.as_dict(), "b": self.b.as_dict(),
                "difference": round(self.difference, 6), "ci_low": round(self.low, 6),
                "ci_high": round(self.high, 6), "p_b_worse": self.p_b_worse,
                "p_a_worse": self.p_a_worse, "p_two_sided": self.p_two_sided}


def _effective(r: Rate) -> tuple[int, int]:
    n = max(1, round(r.effective_n)) if r.units else 0
    return min(n, round(r.rate * n)), n


def compare_rates(a: Rate, b: Rate) -> Comparison:
    """Two-sample comparison (fixed size; for sequential use PairedSprt). Newcombe's hybrid
    score interval (method 10) for the difference, from the two Wilson intervals."""
    ka, na = _effective(a)
    kb, nb = _effective(b)
    d = b.rate - a.rate
    low = d - math.sqrt((b.rate - b.low) ** 2 + (a.high - a.rate) ** 2)
    high = d + math.sqrt((b.high - b.rate) ** 2 + (a.rate - a.low) ** 2)
    table = (kb, nb - kb, ka, na - ka)
    return Comparison(a, b, d, max(-1.0, low), min(1.0, high),
                      fisher_exact(*table, alternative=Alternative.GREATER),
                      fisher_exact(*table, alternative=Alternative.LESS),
                      fisher_exact(*table, alternative=Alternative.TWO_SIDED))


def multiple_comparisons_note(tests: int, alpha: float = 1 - CONFIDENCE) -> str:
    """The sentence printed under any table of many intervals."""
    if tests <= 1:
        return ""
    return (f"{tests} intervals at {1 - alpha:.0%}: about {tests * alpha:.1f} would miss the "
            f"true rate by chance alone; 'stands out' marks values that pass a "
            f"Benjamini-Hochberg false-discovery-rate test at {alpha:.0%} across all of them.")


def units_from(rows: Iterable[tuple[Hashable, bool]]) -> list[Unit]:
    return [Unit(c, int(f)) for c, f in rows]


# --- gate support (issue 10): failures in episodes -------------------------------------------

def episode_design_effect(sizes: Sequence[int]) -> float:
    """Design effect of failures that come in episodes (a burst: one cause, several failing
    jobs of one process in a row): for a compound Poisson count the variance over the mean is
    E[C^2] / E[C], C the episode size. 1 when every failure stands alone. The cluster
    jackknife (design_effect) sees spread *between* processes; this sees bursts *within* one,
    which the jackknife underestimates while there are few failures (the gate simulation:
    20% false FAIL at a quarter of the bound without it)."""
    total = sum(sizes)
    return max(1.0, sum(c * c for c in sizes) / total) if total else 1.0
