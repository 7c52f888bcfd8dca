"""Where the failure rate first rises along an ordered list of stacks: bisect's posterior.

Stacks 0 .. n-1 in order, f_i of m_i trials failed on stack i. The hypotheses:
- k = 1 .. n-1: stack k is the first bad one. Stacks before it fail a trial with the good
  rate g, stacks from it on with the bad rate b (one rise); or (prior SECOND_RISE) with b1
  from k to a second rise at k2 (uniform over k+1 .. n-1) and b2 from k2 on. The answer is k,
  the first rise, whichever the case: a nightly that broke it and a later one that made it
  worse is one of the hypotheses, not a misfit that drags the answer to the bigger step.
- k = 0: the list's first stack (the --good end) is already bad: one rate from end to end
  (END_WEIGHT times one inner stack's prior); k = n: no stack is bad (the --bad end fails like
  the good one; prior NO_RISE, whatever n).
The rates are unknown and integrated out: g ~ Beta(GOOD_RATE) or, with weight WIDE_GOOD,
a wider Beta (two rises: Beta(SECOND_GOOD) instead); each bad rate ~ Beta(BAD_RATE), in
order, each rise at least RISE (the priors truncated to that region and renormalised). A
second model (off by default) has every bad rate ~ Beta(FAINT); the posterior is then the
two models' mixture, each weighed by its prior weight times its evidence. A hypothesis'
evidence is the product of its segments' Beta-Bernoulli marginal likelihoods (closed form:
B(a + F, b + P) / B(a, b), a weighed sum for the good rate's mixture), times the posterior
chance that the segments' rates come out in order, over the prior chance: the one integral
without a closed form, a ratio of two sums on the same grid in logit(rate) (so the grid's
error cancels to first order). Every trial on every stack, the ends' too, is evidence.

Cost: n^2 / 2 hypotheses with a second rise, per model. The closed forms cost nothing; the
ordering integral depends on the segments' counts only, so it is computed once per pair of
tested-stack states (a bisection leaves most stacks untested), only for pairs whose bound
(the chance is <= 1) is within PRUNE_NATS of the best. A posterior takes a few ms.

What limits it (issues 27, 40). The posterior is exact for this model: where the truth is
drawn from the prior it is right as often as it prints (tests/unit/test_bisect.py checks it);
at one fixed setting it need not be. bench/results/bisect_peer.txt measures that beside
git-bayesect, on the prior and off it. The trade: a clear fault's answer waits until the stack
before the rise is shown not to be a faint first rise, which costs trials at every clear fault.
Earlier priors and their numbers: this file's history, bench/results/bisect_simulation.txt.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

GOOD_RATE: tuple[float, float] = (1.0, 20.0)  # Beta(a, b) of the good stacks' failure rate:
#   mean 5%, P(g > 15%) = 4%: a good stack's background flakes are rare ...
WIDE_GOOD: tuple[float, tuple[float, float]] = (0.3, (1.0, 3.0))  # ... but not always: with
#   this weight, Beta(1, 3) (mean 25%): without it good stacks failing 20% were answered in 5%
#   of 100 runs over 20 stacks (bench/results/bisect_peer.txt's history)
BAD_RATE: tuple[float, float] = (1.0, 2.0)  # of each bad rate: density falling linearly from
#   0 to 1, mean 1/3: a fault hit in 15% of the soaks is commoner than one hit in every soak
FAINT: tuple[float, tuple[float, float]] = (0.0, (1.0, 10.0))  # weight of a second model
#   whose bad rates are all faint (Beta(1, 10), mean 9%), weighed against the first by its
#   evidence; off by default. At 0.5 (bench/results/bisect_peer.txt's third part) it kept
#   2% -> 15% right as often as printed, but a flat 5% named a stack in 4.7% of runs and it
#   cost trials at clear faults (0.91x the peer's at 2% -> 50%) and elsewhere
RISE: float = 0.1  # each rise adds at least 10 points to the chance that a trial fails: a
#   smaller one is out of reach of a bisection (telling p from p + d at one stack takes
#   ~ 10 p (1 - p) / d^2 trials); without a floor a first rise could hide anywhere
SECOND_RISE: float = 0.3  # prior chance that the rate rises again after the first rise: more
#   costs trials at each clear fault, less answers a rate that rose twice by its second rise:
#   no value from 0 to 0.9 meets both (bench/results/bisect_peer-second-rise.txt)
SECOND_GOOD: tuple[float, float] | None = None  # the good rate's prior where the rate rises
#   twice (None: as with one rise). Beta(1, 50) with P 0.2 (bisect_peer.txt parts 6, 7) cut a
#   20% good side's trials from 1.70x the peer's to 1.20x, but over 64 stacks two rises went
#   17.8 -> 22.7 points over and a falling rate named a stack in 2.3% of runs (0.3%): not shipped
END_WEIGHT: float = 1.0  # prior of "the --good end is bad" relative to one stack inside the
#   list (the user's ends are claims, tested like the rest): then one rate throughout
NO_RISE: float = 0.1  # prior chance that no stack is bad (the --bad end fails like the good
#   one), whatever the list's length: at 1 / (n + 1) (before issue 40) a flat 5% over 64
#   stacks named a stack at 97.5% in 3 of 60 runs (bench/results/bisect_peer.txt's history)
GRID_POINTS: int = 160  # logit grid of the ordering integral (spacing 0.13): within 2e-3 of a
#   1,024-point grid's posterior where 300 trials make the rates' posteriors narrow (a test)
LOGIT_RANGE: tuple[float, float] = (-11.0, 9.0)  # rates 1.7e-5 .. 1 - 1.2e-4
PRUNE_NATS: float = 30.0  # hypotheses whose bound is this far below the best are dropped
_FIRST_BATCH: int = 64  # second-rise hypotheses computed before the threshold is known

Array = Any  # numpy arrays (numpy's own generics add nothing a reader needs here)


@dataclass(frozen=True)
class Prior:
    """The model's prior (module constants by default; tests and the simulation vary it)."""

    good: tuple[float, float] = GOOD_RATE
    bad: tuple[float, float] = BAD_RATE
    rise: float = RISE
    second_rise: float = SECOND_RISE
    end_weight: float = END_WEIGHT
    wide: float = WIDE_GOOD[0]  # weight of a second, wide component of the good rate's prior
    wide_good: tuple[float, float] = WIDE_GOOD[1]  # ... Beta(a, b) of that component
    no_rise: float = NO_RISE  # > 0: the prior chance that no stack is bad (0: end_weight's)
    faint: float = FAINT[0]  # weight of a second model whose bad rates are faint: Beta(faint_bad)
    faint_bad: tuple[float, float] = FAINT[1]
    second_good: tuple[float, float] | None = SECOND_GOOD  # g's prior under two rises

    def __post_init__(self) -> None:
        top = 0.45 if self.second_rise > 0 else 1.0  # two rises must fit under 1: past it the
        #   second-rise hypotheses' ordering integral is empty (log 0)
        if not 0.0 <= self.rise < top:
            raise ValueError(f"the least rise must be in [0, {top:g}), got {self.rise}")
        for name in ("wide", "no_rise", "faint"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} is a weight in [0, 1), got {getattr(self, name)}")
        if self.second_good and (len(self.second_good) != 2 or min(self.second_good) <= 0):
            raise ValueError(f"second_good is Beta(a, b), a, b > 0, got {self.second_good}")

    @property
    def goods(self) -> tuple[tuple[float, float, float], ...]:
        """The good rate's prior as (weight, a, b) Beta components."""
        if self.wide <= 0.0:
            return ((1.0, *self.good),)
        return ((1.0 - self.wide, *self.good), (self.wide, *self.wide_good))

    @property
    def goods2(self) -> tuple[tuple[float, float, float], ...]:  # where the rate rises twice
        return ((1.0, *self.second_good),) if self.second_good else self.goods

    def describe(self) -> str:
        good = f"Beta{self.good}" + (f" ({1 - self.wide:.0%}) or Beta{self.wide_good} "
                                     f"({self.wide:.0%})" if self.wide > 0 else "")
        bad = f"Beta{self.bad}" + (f" ({1 - self.faint:.0%}; all of them) or Beta"
                                   f"{self.faint_bad} ({self.faint:.0%})" if self.faint > 0 else "")
        none = (f"P(no stack is bad) = {self.no_rise:.0%}" if self.no_rise > 0
                else f"no stack bad {self.end_weight:g}x a stack")
        two = (f" (the good rate then ~ Beta{self.second_good})"
               if self.second_good and self.second_rise > 0 else "")
        return (f"good rate ~ {good}, each bad rate ~ {bad}, in order, each rise >= "
                f"{self.rise:.0%}; P(a second rise) = {self.second_rise:.0%}{two}; the good "
                f"end bad {self.end_weight:g}x a stack; {none}")

    def as_dict(self) -> dict[str, Any]:
        return {"good_rate": [[w, f"Beta{(a, b)}"] for w, a, b in self.goods],
                "bad_rate": [[1 - self.faint, f"Beta{self.bad}"]]
                + ([[self.faint, f"Beta{self.faint_bad}"]] if self.faint > 0 else []),
                "least_rise": self.rise, "second_rise": self.second_rise,
                "second_rise_good_rate": f"Beta{self.second_good}" if self.second_good else None,
                "end_weight": self.end_weight, "no_stack_bad": self.no_rise or None}


PRIOR = Prior()


@dataclass(frozen=True)
class FirstRise:
    """The posterior. `joint[k, k2]`: P(first bad = k, second rise at k2), column n = no
    second rise; `none`: P(no stack is bad). `rate[0][k, k2]`, `rate[1][k, k2]`,
    `rate[2][k, k2]`: the posterior mean failure rate before k, from k (to k2), from k2 on,
    under that hypothesis; `rate_none` under "no stack is bad"; `log_evidence`: log P(the
    counts) under the whole model (to weigh it against another model of the same counts)."""

    joint: Array
    none: float
    rate: tuple[Array, Array, Array]
    rate_none: float
    log_evidence: float = 0.0

    @property
    def n(self) -> int:
        return int(self.joint.shape[0])

    @property
    def posterior(self) -> Array:
        """P(first bad = k), k = 0 .. n-1, and at index n P(no stack is bad)."""
        return np.append(self.joint.sum(axis=1), self.none)

    @property
    def top(self) -> int:
        return int(np.argmax(self.posterior))

    def p_bad(self) -> Array:
        """P(stack i is bad) = P(first bad <= i), i = 0 .. n-1."""
        return np.cumsum(self.posterior[:-1])

    def second_rise(self) -> float:
        """P(the rate rises again after the first bad stack)."""
        return float(self.joint[:, :-1].sum())

    def rates(self) -> tuple[float, float]:
        """The posterior mean failure rate of a good stack and of the first bad one."""
        bad = self.joint.sum()
        return (float(np.sum(self.joint * self.rate[0]) + self.none * self.rate_none),
                float(np.sum(self.joint * self.rate[1]) / bad) if bad > 0 else 0.0)

    def entropy(self) -> float:
        return entropy(self.posterior)


def entropy(p: Array) -> float:
    """Shannon entropy in bits."""
    q = np.asarray(p, dtype=float)
    q = q[q > 0]
    return float(-np.sum(q * np.log2(q)))


# --- closed forms --------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _lgamma(a: float, size: int) -> Array:
    """lgamma(a + i), i = 0 .. size-1."""
    return np.array([math.lgamma(a + i) for i in range(size)])


def _table_size(n: int) -> int:
    return 1 << max(9, int(n).bit_length())  # powers of two: few tables, reused


def _log_marginal(ab: tuple[float, float], fails: Array, passes: Array) -> Array:
    """log B(a + F, b + P) / B(a, b): the Beta-Bernoulli marginal likelihood of a segment."""
    a, b = ab
    fi = fails.astype(np.int64)
    pi = passes.astype(np.int64)
    size = _table_size(int(max(fi.max(initial=0), pi.max(initial=0))) * 2 + 2)
    la, lb, lab = _lgamma(a, size), _lgamma(b, size), _lgamma(a + b, size)
    return la[fi] + lb[pi] - lab[fi + pi] - (la[0] + lb[0] - lab[0])


def _mean(ab: tuple[float, float], fails: Array, passes: Array) -> Array:
    return (ab[0] + fails) / (ab[0] + ab[1] + fails + passes)


Mix = tuple[tuple[float, float, float], ...]  # (weight, a, b) Beta components


def _log_marginal_mix(mix: Mix, fails: Array, passes: Array) -> Array:
    """The marginal likelihood under a mixture of Betas (one component: _log_marginal)."""
    if len(mix) == 1:
        return _log_marginal(mix[0][1:], fails, passes)
    parts = [math.log(w) + _log_marginal((a, b), fails, passes) for w, a, b in mix]
    return np.logaddexp.reduce(np.stack(parts), axis=0)


def _mean_mix(mix: Mix, fails: Array, passes: Array) -> Array:
    """The posterior mean rate under a mixture: each component's, weighted by its share of
    the marginal likelihood."""
    if len(mix) == 1:
        return _mean(mix[0][1:], fails, passes)
    logs = np.stack([math.log(w) + _log_marginal((a, b), fails, passes) for w, a, b in mix])
    share = np.exp(logs - logs.max(axis=0))
    share /= share.sum(axis=0)
    return sum(share[i] * _mean((a, b), fails, passes) for i, (_, a, b) in enumerate(mix))


# --- the grid of the ordering integral -----------------------------------------------------

@dataclass(frozen=True)
class _Grid:
    p: Array
    log_p: Array
    log_q: Array
    w_good: Array  # log of each prior's weight at each point (density x dp/dz), normalised
    w_bad: Array
    below: tuple[Array, Array]  # where p - rise falls on the grid: (point before, fraction)
    above: tuple[Array, Array]  # where p + rise falls
    log_order1: float  # log P(g + rise <= b) under the independent priors
    log_order2: float  # log P(g + rise <= b1, b1 + rise <= b2)


def _shift(p: Array, z: Array, d: float) -> tuple[Array, Array]:
    t = p + d
    with np.errstate(divide="ignore", invalid="ignore"):
        zt = np.log(t) - np.log1p(-t)
    pos = (zt - z[0]) / (z[1] - z[0])
    points = len(z)
    pos = np.where(t <= 0, -1.0, np.where(t >= 1, float(points), pos))
    pos = np.clip(np.nan_to_num(pos, nan=-1.0), -1.0, float(points))
    i = np.floor(pos).astype(np.int64)
    return i, pos - i


def _norm(w: Array) -> Array:
    """Rows of log weights -> rows of weights summing to 1."""
    e = np.exp(w - w.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _mass_below(e: Array, at: tuple[Array, Array]) -> Array:
    """[., j]: the mass of the rows' weights at rates up to `at` (p_j - rise): each point holds
    the cell around it, so the running sum counts a point half, and a bound between two points
    interpolates between their running sums."""
    i, frac = at
    run = np.cumsum(e, axis=-1) - 0.5 * e
    rows = e.shape[:-1]
    pad = np.concatenate([np.zeros((*rows, 1)), run, run[..., -1:] + 0.5 * e[..., -1:]],
                         axis=-1)
    lo = pad[..., i + 1]
    return lo + frac * (pad[..., np.minimum(i + 2, pad.shape[-1] - 1)] - lo)


def _mass_above(e: Array, at: tuple[Array, Array]) -> Array:
    """[., j]: the mass at rates from `at` (p_j + rise) up."""
    i, frac = at
    run = np.cumsum(e[..., ::-1], axis=-1)[..., ::-1] - 0.5 * e
    rows = e.shape[:-1]
    pad = np.concatenate([run[..., :1] + 0.5 * e[..., :1], run, np.zeros((*rows, 1))],
                         axis=-1)
    lo = pad[..., i + 1]
    return lo + frac * (pad[..., np.minimum(i + 2, pad.shape[-1] - 1)] - lo)


@functools.lru_cache(maxsize=16)
def _grid(good: Mix, bad: tuple[float, float], rise: float, points: int) -> _Grid:
    z = np.linspace(LOGIT_RANGE[0], LOGIT_RANGE[1], points)
    p = 1.0 / (1.0 + np.exp(-z))
    log_p, log_q = -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)
    w_good = np.logaddexp.reduce(np.stack([math.log(w) + a * log_p + b * log_q
                                           - math.lgamma(a) - math.lgamma(b) + math.lgamma(a + b)
                                           for w, a, b in good]), axis=0)
    w_bad = bad[0] * log_p + bad[1] * log_q
    below, above = _shift(p, z, -rise), _shift(p, z, rise)
    eg, eb = _norm(w_good), _norm(w_bad)
    lower = _mass_below(eg, below)
    upper = _mass_above(eb, above)
    with np.errstate(divide="ignore"):  # a sharp prior's weight underflows to 0 far out
        log_eg, log_eb = np.log(eg), np.log(eb)
    return _Grid(p, log_p, log_q, log_eg, log_eb, below, above,
                 math.log(float(np.sum(eb * lower))), math.log(float(np.sum(eb * lower * upper))))


# --- the posterior -------------------------------------------------------------------------

def first_rise(failures: Any, trials: Any, prior: Prior = PRIOR) -> FirstRise:
    """The posterior over where the failure rate first rises, from per-stack counts
    (failures[i] of trials[i] failed on stack i): with `prior.faint` > 0, the mixture of two
    models that differ in the bad rates' prior (Beta(bad) and Beta(faint_bad)), each weighed by
    its prior weight times its evidence."""
    f = np.asarray(failures, dtype=np.int64)
    m = np.asarray(trials, dtype=np.int64)
    if f.shape != m.shape or f.ndim != 1 or len(f) < 1 or (f > m).any() or (f < 0).any():
        raise ValueError("need 0 <= failures <= trials, one count per stack")
    if prior.faint <= 0.0:
        return _first_rise(f, m, prior)
    loud = _first_rise(f, m, dataclasses.replace(prior, faint=0.0))
    faint = _first_rise(f, m, dataclasses.replace(prior, bad=prior.faint_bad, faint=0.0))
    return _mixed(loud, faint, 1.0 - prior.faint, prior.faint)


def _mixed(a: FirstRise, b: FirstRise, wa: float, wb: float) -> FirstRise:
    """Two models' posteriors as one: each hypothesis' probability is the models' sum weighed
    by weight x evidence, its mean rates the models' weighed by their share of it."""
    la, lb = math.log(wa) + a.log_evidence, math.log(wb) + b.log_evidence
    top = max(la, lb)
    ea, eb = math.exp(la - top), math.exp(lb - top)
    z = ea + eb
    ja, jb = a.joint * ea / z, b.joint * eb / z
    joint = ja + jb
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = tuple(np.where(joint > 0, (ja * ra + jb * rb) / joint, (ra + rb) / 2)
                     for ra, rb in zip(a.rate, b.rate, strict=True))
    none = a.none * ea / z + b.none * eb / z
    rate_none = ((a.none * ea * a.rate_none + b.none * eb * b.rate_none) / (none * z)
                 if none > 0 else a.rate_none)
    return FirstRise(joint, none, (rate[0], rate[1], rate[2]), rate_none, top + math.log(z))


def _first_rise(f: Array, m: Array, prior: Prior) -> FirstRise:
    """One model's posterior (first_rise without the mixture)."""
    n = len(f)
    g = _grid(prior.goods, prior.bad, prior.rise, GRID_POINTS)
    g2 = _grid(prior.goods2, prior.bad, prior.rise, GRID_POINTS)  # two rises' good prior
    # Everything but the prior depends on the segments' counts only: hypotheses whose bounds
    # fall between the same two tested stacks share it (a bisection leaves most stacks
    # untested). State t of a bound between stacks = the number of tested stacks before it;
    # a hypothesis is a pair of states (t1, t2), t2 = S + 1 meaning no second rise.
    state = np.concatenate(([0], np.cumsum(m > 0)))
    last = int(state[n])
    at = np.searchsorted(state, np.arange(last + 1))  # a bound in each state
    cf = np.concatenate(([0], np.cumsum(f)))[at]  # failures before state t
    cp = np.concatenate(([0], np.cumsum(m - f)))[at]
    s1_ = np.arange(last + 1)[:, None]
    s2_ = np.minimum(np.arange(last + 2), last)[None, :]  # S + 1: the middle runs to the end
    f1, p1 = cf[s2_] - cf[s1_], cp[s2_] - cp[s1_]
    ok = s2_ >= s1_
    f1, p1 = np.where(ok, f1, 0), np.where(ok, p1, 0)
    two = np.arange(last + 2)[None, :] <= last
    tail = _log_marginal(prior.bad, cf[last] - cf, cp[last] - cp)  # [t2]: stacks from t2
    evidence = np.where(ok, np.where(two, _log_marginal_mix(prior.goods2, cf, cp)[:, None],
                                     _log_marginal_mix(prior.goods, cf, cp)[:, None])
                        + _log_marginal(prior.bad, f1, p1)
                        + np.where(two, np.append(tail, 0.0)[None, :], 0.0)
                        - np.where(two, g2.log_order2, g.log_order1), -np.inf)
    closed = (np.where(two, _mean_mix(prior.goods2, cf, cp)[:, None],
                       _mean_mix(prior.goods, cf, cp)[:, None]),
              _mean(prior.bad, f1, p1),
              np.broadcast_to(np.append(_mean(prior.bad, cf[last] - cf, cp[last] - cp),
                                        0.0)[None, :], f1.shape))
    # the ordering's chance, for the state pairs that can matter: every one-rise pair and the
    # best second-rise ones first, then the rest whose bound (the chance is <= 1) is within
    # PRUNE_NATS of the best found (a pair's prior is within a factor n of its group's)
    q = prior.second_rise
    with np.errstate(divide="ignore"):
        bound = evidence + np.where(two, math.log(q) if q > 0 else -np.inf, math.log1p(-q))
    order = _Ordering(g, g2, cf, cp)
    order.apply(np.arange(last + 1), None, bound)
    rest = bound[:, :-1].ravel().copy()
    finite = int(np.isfinite(rest).sum())
    if finite:
        best = np.argsort(-rest)[:min(_FIRST_BATCH, finite)]
        order.apply(*np.divmod(best, last + 1), bound)
        rest[best] = -np.inf
        more = np.flatnonzero(rest > order.best - PRUNE_NATS - math.log(n))
        order.apply(*np.divmod(more, last + 1), bound)
    # back to hypotheses (k1, k2)
    log_prior, valid = _log_prior(n, prior)
    t1 = state[:n, None]
    t2 = np.where(np.arange(n + 1) == n, last + 1, state[np.minimum(np.arange(n + 1), n)])
    t2 = t2[None, :]
    log_state = np.where(order.done, evidence + order.log_chance, -np.inf)
    log_joint = np.where(valid, log_state[t1, t2] + log_prior, -np.inf)
    log_none = (float(_log_marginal_mix(prior.goods, cf[last:], cp[last:])[0])
                + _log_prior_none(n, prior))
    top = max(float(log_joint.max()), log_none)
    joint = np.exp(log_joint - top)
    none = math.exp(log_none - top)
    z = joint.sum() + none
    r0, r1, r2 = (np.where(order.done, r, c)[t1, t2] for r, c in zip(order.rates, closed,
                                                                       strict=True))
    return FirstRise(joint / z, none / z, (r0, r1, r2),
                     float(_mean_mix(prior.goods, cf[last:], cp[last:])[0]), top + math.log(z))


@functools.lru_cache(maxsize=8)
def _log_prior(n: int, prior: Prior) -> tuple[Array, Array]:
    """log P(first bad = k1, second rise at k2) ([n, n + 1], k2 = n: none), and which pairs
    are hypotheses at all."""
    k1 = np.arange(n)[:, None]
    k2 = np.arange(n + 1)[None, :]
    valid = (k2 > k1) & ((k1 > 0) | (k2 == n))  # the good end bad: one rate, no rise inside
    weight = np.ones(n)
    weight[0] = prior.end_weight
    total = (weight.sum() / (1.0 - prior.no_rise) if prior.no_rise > 0
             else weight.sum() + prior.end_weight)
    room = np.maximum(n - 1 - k1, 1)
    q = prior.second_rise
    with np.errstate(divide="ignore"):
        structure = np.where(k2 == n, np.log(np.where((k1 == n - 1) | (k1 == 0), 1.0, 1.0 - q)),
                             np.where(valid, np.log(q / room), -np.inf))
        out = np.where(valid, np.log(weight / total)[:, None] + structure, -np.inf)
    out.flags.writeable = False
    valid.flags.writeable = False
    return out, valid


def _log_prior_none(n: int, prior: Prior) -> float:
    if prior.no_rise > 0:
        return math.log(prior.no_rise)
    return math.log(prior.end_weight / (n - 1 + 2 * prior.end_weight))


class _Ordering:
    """The posterior chance that a hypothesis' rates come out in order, on the grid, for
    pairs of states (t1, t2): the good rate's posterior mass below each point less the rise
    (and its first moment) for the stacks before t1; the last rate's mass above each point
    plus the rise for the stacks from t2 on (none when t2 = S + 1: no second rise); their
    product averaged over the middle rate's posterior. Also the ordered posterior mean rates
    (the next trial's chance to fail, which the choice of the next stack needs)."""

    def __init__(self, g: _Grid, g2: _Grid, cf: Array, cp: Array):
        self.g = g
        s = len(cf)  # states 0 .. S
        self.u = cf[:, None] * g.log_p + cp[:, None] * g.log_q  # [t, j]: log lik before t
        low = [(_mass_below(e, g.below), _mass_below(e * g.p, g.below))  # [t1, j]: one rise,
               for e in (_norm(self.u + x.w_good) for x in ((g,) if g2 is g else (g, g2)))]
        self.low, self.low_p = zip(low[0], low[-1], strict=True)  # two (once if the same prior)
        e2 = _norm(self.u[-1] - self.u + g.w_bad)
        self.high = np.vstack([_mass_above(e2, g.above), np.ones(len(g.p))])  # [t2, j]
        self.high_p = np.vstack([_mass_above(e2 * g.p, g.above), np.zeros(len(g.p))])
        self.u = np.vstack([self.u, self.u[-1:]])  # t2 = S + 1: the middle runs to the end
        self.log_chance = np.full((s, s + 1), -np.inf)
        self.done = np.zeros((s, s + 1), dtype=bool)
        self.rates = tuple(np.full((s, s + 1), 0.5) for _ in range(3))
        self.best = -np.inf

    def apply(self, a: Array, b: Array | None, bound: Array) -> None:
        """State pairs (a[i], b[i]) (b None: no second rise): their chance and mean rates;
        `bound` (per pair) updates the best log posterior seen."""
        if b is None:
            b = np.full(len(a), len(self.u) - 1)
        keep = np.isfinite(bound[a, b])
        a, b = a[keep], b[keep]
        if not len(a):
            return
        g = self.g
        e1 = _norm(self.u[b] - self.u[a] + g.w_bad)  # the middle rate's posterior on the grid
        one = (b == len(self.u) - 1)[:, None]
        low = np.where(one, self.low[0][a], self.low[1][a])
        both = e1 * self.high[b]
        chance = np.einsum("hj,hj->h", both, low)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.log_chance[a, b] = np.log(chance)
            self.done[a, b] = True
            r0, r1, r2 = self.rates
            r0[a, b] = np.einsum("hj,hj->h", both,
                                 np.where(one, self.low_p[0][a], self.low_p[1][a])) / chance
            r1[a, b] = np.einsum("hj,hj->h", both * g.p, low) / chance
            r2[a, b] = np.einsum("hj,hj,hj->h", e1, low, self.high_p[b]) / chance
        for r in self.rates:
            r[a, b] = np.nan_to_num(r[a, b], nan=0.5)
        self.best = max(self.best, float(np.max(bound[a, b] + self.log_chance[a, b])))
