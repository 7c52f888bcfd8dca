"""Beta-Bernoulli posteriors for trials that fail or not: two rates (compare's P(B worse)) and
the first rise of the rate along an ordered list of stacks (bisect's posterior).

Two rates. Each stack's trial failure rate has a uniform prior, Beta(1, 1), independently;
after f failures in n trials its posterior is Beta(1 + f, 1 + n - f), and P(rate B > rate A)
is a finite sum (exact for the integer parameters a uniform prior gives).

The first rise. Stacks 0 .. n-1 in order. Hypothesis (k1, k2): stacks before k1 fail a trial
with rate g, stacks k1 .. k2-1 with rate b1, stacks from k2 on with rate b2, where each rise
adds at least RISE to the rate (g + RISE <= b1, b1 + RISE <= b2); k2 = "none" is a single
rise (g, then b1 from k1 on), k1 = 0 says the list's first stack is already bad. The answer
is k1, the first bad stack: a rate that rises twice (a nightly that broke it, a later one
that made it worse) is one of the hypotheses, not a misfit that drags the answer to the
bigger step. Priors: k1 uniform over the n stacks; a second rise with probability
SECOND_RISE, its stack uniform after k1; each rate Beta(RATE_PRIOR) (Jeffreys), the rates
taken in that order (the independent priors truncated to the ordered region and renormalised).
The rates are integrated out: with f/p the failing and passing trials of a segment, its
likelihood is g^f (1 - g)^p, and the evidence of a hypothesis is the integral of the product
over the ordered region, a sum over a grid uniform in logit(rate) (cumulative sums give the
ordering). Every trial on every stack enters, the ends too, as ordinary evidence. The same
sums give each segment's posterior mean rate: the chance that one more trial on a stack
fails, which the choice of the next stack needs (expected_entropy).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

RATE_PRIOR: tuple[float, float] = (0.5, 0.5)  # Beta(a, b) of every rate in bisect: Jeffreys'
#   prior, nothing assumed about how often a stack fails (its mass near 0 and 1 is where
#   flake rates of good stacks sit); the rates are then taken in order, bad > good
RISE: float = 0.1  # a rise adds at least 10 points to the chance that a trial fails: a
#   smaller one is out of reach of a bisection's few hundred trials (telling p from p + d at
#   one stack takes ~ 10 p (1 - p) / d^2 trials), and without a floor the first rise could
#   hide anywhere before the real one as a rise too small to see
SECOND_RISE: float = 0.5  # prior chance that the rate rises a second time after the first
GRID_POINTS: int = 128  # grid in logit(rate), spacing 0.17: the posterior's width in logit,
#   1/sqrt(n p (1 - p)), stays above it up to ~130 trials on a segment at 50%; the posterior
#   differs from a 1,024-point grid's by < 0.002 (a test checks it). The [k1, k2, grid]
#   tensor is the cost: 64 stacks take ~20 ms a trial on one core
LOGIT_SPAN: float = 11.0  # rates from 1.7e-5 to 1 - 1.7e-5 (the prior mass beyond is lost)

Array = Any  # numpy arrays (numpy's own generics add nothing a reader needs here)


def prob_greater(fb: int, nb: int, fa: int, na: int) -> float:
    """P(rate B > rate A) after fb/nb and fa/na failed trials, uniform priors on both: the
    closed form for Beta posteriors with an integer first parameter (a sum of 1 + fb terms)."""
    a1, b1 = 1 + fa, 1 + na - fa  # A's posterior
    a2, b2 = 1 + fb, 1 + nb - fb  # B's posterior
    total = 0.0
    for i in range(a2):
        total += math.exp(_lbeta(a1 + i, b1 + b2) - math.log(b2 + i) - _lbeta(1 + i, b2)
                          - _lbeta(a1, b1))
    return min(1.0, max(0.0, total))


def _lbeta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


# --- the first rise in an ordered list (bisect) ------------------------------------------------

def _grid() -> tuple[Array, Array, Array]:
    z = np.linspace(-LOGIT_SPAN, LOGIT_SPAN, GRID_POINTS)
    p = 1.0 / (1.0 + np.exp(-z))
    return p, -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)  # p, log p, log(1 - p)


_P, _LOG_P, _LOG_Q = _grid()


def _log_weights(prior: tuple[float, float]) -> Array:
    """A Beta prior's density on the logit grid: the pdf times dp/dz = p(1 - p), normalised
    to sum to 1 on the grid."""
    w = prior[0] * _LOG_P + prior[1] * _LOG_Q
    return w - (w.max() + np.log(np.sum(np.exp(w - w.max()))))


def _edges(gap: float, reverse: bool) -> tuple[Array, Array]:
    return _edges_on(gap, reverse, GRID_POINTS)


@functools.lru_cache(maxsize=16)
def _edges_on(gap: float, reverse: bool, _points: int) -> tuple[Array, Array]:
    """For each grid point j, where the rate `gap` below it (above it, `reverse`) falls on
    the grid: (the point i before it, the fraction of the way to i + 1); i = -1 or GRID_POINTS
    when it falls off the grid."""
    t = _P + gap if reverse else _P - gap
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log(t) - np.log1p(-t)
    pos = (z + LOGIT_SPAN) / (2 * LOGIT_SPAN / (GRID_POINTS - 1))
    pos = np.where(t <= 0, -1.0, np.where(t >= 1, float(GRID_POINTS), pos))
    pos = np.clip(np.nan_to_num(pos, nan=-1.0), -1.0, float(GRID_POINTS))
    i = np.floor(pos).astype(int)
    return i, pos - i


def _logcumsum(a: Array, reverse: bool = False, gap: float = 0.0) -> Array:
    """[., j]: log of the sum of exp(a[., i]) over the rates `gap` or more below point j's
    (above it, `reverse`): the ordered integral on the grid. Each point holds the mass of
    the cell around it, so the running sum up to a point counts that point half, and a bound
    between two points interpolates between their running sums."""
    if reverse:
        return _logcumsum(a[:, ::-1])[:, ::-1] if not gap else \
            _reverse_gap(a, gap)
    s = a.max(axis=1, keepdims=True)
    s = np.where(np.isfinite(s), s, 0.0)
    e = np.exp(a - s)
    run = np.cumsum(e, axis=1) - 0.5 * e  # the mass below each point
    if gap:
        i, frac = _edges(gap, False)
        padded = np.concatenate([np.zeros((len(a), 1)), run, run[:, -1:] + 0.5 * e[:, -1:]],
                                axis=1)  # index -1 -> 0, GRID_POINTS -> all
        run = padded[:, i + 1] + frac * (padded[:, np.minimum(i + 2, GRID_POINTS + 1)]
                                         - padded[:, i + 1])
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(run, 0.0)) + s


def _reverse_gap(a: Array, gap: float) -> Array:
    s = a.max(axis=1, keepdims=True)
    s = np.where(np.isfinite(s), s, 0.0)
    e = np.exp(a - s)
    run = np.cumsum(e[:, ::-1], axis=1)[:, ::-1] - 0.5 * e  # the mass above each point
    i, frac = _edges(gap, True)
    padded = np.concatenate([run[:, :1] + 0.5 * e[:, :1], run, np.zeros((len(a), 1))],
                            axis=1)  # index -1 -> all, GRID_POINTS -> 0
    out = padded[:, i + 1] + frac * (padded[:, np.minimum(i + 2, GRID_POINTS + 1)]
                                     - padded[:, i + 1])
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(out, 0.0)) + s


@dataclass(frozen=True)
class ChangePoint:
    """The posterior after the counts. `joint[k1, k2]`: P(the rate first rises at stack k1
    and rises again at k2), column n meaning no second rise; `posterior[k]` = P(first bad
    stack = k) (the sum over k2); `rate[s][k1, k2]` the posterior mean rate of segment s
    (0: before k1, 1: k1 .. k2-1, 2: from k2 on) under that hypothesis."""

    joint: Array
    rate: tuple[Array, Array, Array]

    @property
    def posterior(self) -> Array:
        return self.joint.sum(axis=1)

    @property
    def top(self) -> int:
        return int(np.argmax(self.posterior))

    def p_bad(self) -> Array:
        """P(stack i is bad) = P(first bad <= i)."""
        return np.cumsum(self.posterior)

    def second_rise(self) -> float:
        """P(the rate rises again after the first bad stack)."""
        return float(self.joint[:, :-1].sum())

    def rates(self) -> tuple[float, float]:
        """The good side's and the first bad stack's posterior mean rates."""
        return (float(np.sum(self.joint * self.rate[0])),
                float(np.sum(self.joint * self.rate[1])))

    def entropy(self) -> float:
        return entropy(self.posterior)


def entropy(p: Array) -> float:
    """Shannon entropy in bits."""
    q = np.asarray(p, dtype=float)
    q = q[q > 0]
    return float(-np.sum(q * np.log2(q)))


def change_point(failures: Any, trials: Any, second_rise: float = SECOND_RISE,
                 rate_prior: tuple[float, float] = RATE_PRIOR,
                 rise: float = RISE) -> ChangePoint:
    """The posterior over where the failure rate first rises, from per-stack counts
    (failures[i] of trials[i] failed on stack i)."""
    f = np.asarray(failures, dtype=float)
    m = np.asarray(trials, dtype=float)
    if f.shape != m.shape or f.ndim != 1 or len(f) < 1 or np.any(f > m) or np.any(f < 0):
        raise ValueError("need failures <= trials, one count per stack")
    n = len(f)
    cf = np.concatenate(([0.0], np.cumsum(f)))  # failures before k, k = 0 .. n
    cp = np.concatenate(([0.0], np.cumsum(m - f)))
    u = cf[:, None] * _LOG_P + cp[:, None] * _LOG_Q  # [k, j]: log lik of stacks < k at p_j
    w = _log_weights(rate_prior)
    # the good side (stacks < k1) at rate g, integrated up to `rise` below each point j of
    # the next rate: bounded (a plateau at the good side's evidence), safe to exponentiate
    a0 = u[:n] + w
    left = _logcumsum(a0, gap=rise) + w
    left_p = _logcumsum(a0 + _LOG_P, gap=rise) + w
    # the last segment (stacks >= k2) at rate b2, from `rise` above j; k2 = n: none
    a2 = u[n][None, :] - u[:n] + w
    c2 = _logcumsum(a2, reverse=True, gap=rise)
    with np.errstate(invalid="ignore"):
        c2_mean = np.exp(_logcumsum(a2 + _LOG_P, reverse=True, gap=rise) - c2)  # E[b2 | > j]
    tail = np.concatenate([u[:n] + c2, u[n][None, :]])  # [k2, j], k2 = 0 .. n
    # the middle segment k1 .. k2-1 at rate b1 = p_j: its log lik is u[k2] - u[k1]. The
    # (hypothesis, grid) array is the costly part: float32, each row scaled to max 1
    k1 = np.arange(n)[:, None]
    k2 = np.arange(n + 1)[None, :]
    valid = k2 > k1  # k2 = n (no second rise) included
    h1, h2 = np.nonzero(valid)
    mid = tail.astype(np.float32)[h2] - u[:n].astype(np.float32)[h1]
    top = mid.max(axis=1)
    e_mid = np.exp(mid - top[:, None])
    sl = left.max(axis=1)
    e_left = np.exp(left - sl[:, None])
    c2m = np.clip(np.nan_to_num(np.concatenate([c2_mean, np.ones((1, GRID_POINTS))])),
                  0.0, 1.0)
    weights = [e_left, np.exp(left_p - sl[:, None]), e_left * _P]
    sums = [np.einsum("hj,hj->h", e_mid, v.astype(np.float32)[h1]).astype(float)
            for v in weights]
    sums.append(np.einsum("hj,hj,hj->h", e_mid, e_left.astype(np.float32)[h1],
                          c2m.astype(np.float32)[h2]).astype(float))
    log_z, r0, r1, r2 = (np.full((n, n + 1), np.nan) for _ in range(4))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = sums[0]
        log_z[h1, h2] = np.log(z) + sl[h1] + top
        r0[h1, h2], r1[h1, h2], r2[h1, h2] = sums[1] / z, sums[2] / z, sums[3] / z
    # the prior of (k1, k2); the ordered region's prior mass normalises each rate prior
    room = np.maximum(n - 1 - k1, 1)
    with np.errstate(divide="ignore"):
        log_prior = np.where(k2 == n, np.log(np.where(k1 == n - 1, 1.0, 1.0 - second_rise)),
                             np.where(k2 > k1, np.log(second_rise / room), -np.inf))
    order = np.where(k2 == n, -_log_ordered(w, rise, 2), -_log_ordered(w, rise, 3))
    lp = np.where(valid & np.isfinite(log_prior), log_z + order + log_prior, -np.inf)
    lp = np.where(np.isnan(lp), -np.inf, lp)
    joint = np.exp(lp - lp.max())
    joint /= joint.sum()
    safe = [np.where(np.isfinite(r), r, 0.5) for r in (r0, r1, r2)]
    r2s = np.where(k2 == n, safe[1], safe[2])
    return ChangePoint(joint, (safe[0], safe[1], r2s))


def _log_ordered(w: Array, gap: float, levels: int) -> float:
    """log P(independent draws from the prior come out rising, each by the gap)."""
    row = w[None, :]
    below = _logcumsum(row, gap=gap)
    if levels == 2:
        return float(np.logaddexp.reduce((row + below)[0]))
    above = _logcumsum(row, reverse=True, gap=gap)
    return float(np.logaddexp.reduce((row + below + above)[0]))


def expected_entropy(cp: ChangePoint) -> Array:
    """For each stack x, the expected entropy (bits) of the first-bad posterior after one
    more trial on x: under each hypothesis x fails with the posterior mean rate of its
    segment, and the posterior after that outcome is the sequential Bayes update of this."""
    n = cp.joint.shape[0]
    j0, j1, j2 = (cp.joint * r for r in cp.rate)
    # P(first bad = k1 and x fails), [x, k1]: x < k1 is on the good side; else x is in the
    # middle segment when k2 > x (k2 = n included), in the last one when k2 <= x
    mid = np.cumsum(j1[:, ::-1], axis=1)[:, ::-1][:, 1:n + 1]  # [k1, x]: sum over k2 > x
    last = np.cumsum(j2, axis=1)[:, :n]  # [k1, x]: sum over k2 <= x
    x = np.arange(n)[:, None]
    fail = np.where(x < np.arange(n)[None, :], j0.sum(axis=1)[None, :], (mid + last).T)
    out = np.zeros(n)
    for joint in (fail, cp.posterior[None, :] - fail):
        joint = np.clip(joint, 0.0, None)
        mass = joint.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            jl = np.where(joint > 0, joint * np.log2(joint), 0.0)
            ml = np.where(mass > 0, mass * np.log2(mass), 0.0)
        out += ml - jl.sum(axis=1)
    return out
