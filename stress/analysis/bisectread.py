"""Reading bisect's posterior (analysis.changepoint): where the next trial tells the most, and
whether the counts read better as a rate that falls along the list than as bisect's rises."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from stress.analysis.changepoint import PRIOR, Array, FirstRise, Prior, first_rise


@dataclass(frozen=True)
class Fall:
    """The counts read as a rate that falls along the list: `chance` P(a fall rather than
    what bisect's model allows: rises or none) at even odds; the rates before and after the
    fall (where it falls is left out: bisect's trials do not look for it)."""

    chance: float
    before: float
    after: float


def fall(failures: Any, trials: Any, fr: FirstRise, prior: Prior = PRIOR) -> Fall:
    """bisect's model read backwards (a rise from the last stack towards the first is a fall),
    its proper rises only, weighed against `fr` (the forward posterior of the same counts)."""
    rev = first_rise(np.asarray(failures)[::-1], np.asarray(trials)[::-1], prior)
    n = fr.n
    inner = rev.posterior[1:n]
    mass = float(inner.sum())
    if n < 2 or mass <= 0.0:
        return Fall(0.0, 0.0, 0.0)
    odds = fr.log_evidence - rev.log_evidence - math.log(mass)
    low, high = rev.rates()
    return Fall(1.0 / (1.0 + math.exp(min(odds, 700.0))), high, low)


def expected_entropy(fr: FirstRise) -> Array:
    """For each stack x, the expected entropy (bits) of the first-bad posterior after one more
    trial on x: under each hypothesis x fails with its segment's posterior mean rate (the
    Beta-Bernoulli predictive), and the posterior after either outcome is the Bayes update."""
    n = fr.n
    j0, j1, j2 = (fr.joint * r for r in fr.rate)
    # P(first bad = k and x fails), [x, k]: x < k on the good side; else in the middle
    # segment when k2 > x (k2 = n included), in the last one when k2 <= x
    mid = np.cumsum(j1[:, ::-1], axis=1)[:, ::-1][:, 1:n + 1]  # [k, x]: sum over k2 > x
    last = np.cumsum(j2[:, :n], axis=1)  # [k, x]: sum over k2 <= x
    x = np.arange(n)[:, None]
    fail = np.where(x < np.arange(n)[None, :], j0.sum(axis=1)[None, :], (mid + last).T)
    fail = np.concatenate([fail, np.full((n, 1), fr.none * fr.rate_none)], axis=1)
    out = np.zeros(n)
    for joint in (fail, fr.posterior[None, :] - fail):
        joint = np.clip(joint, 0.0, None)
        mass = joint.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            jl = np.where(joint > 0, joint * np.log2(joint), 0.0)
            ml = np.where(mass > 0, mass * np.log2(mass), 0.0)
        out += ml - jl.sum(axis=1)
    return out
