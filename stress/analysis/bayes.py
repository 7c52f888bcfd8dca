"""Beta-Bernoulli posterior for trials that fail or not, two rates: compare's P(B worse). (The
first rise of the rate along an ordered list of stacks, bisect's posterior, is in
analysis.changepoint.)

Each stack's trial failure rate has a uniform prior, Beta(1, 1), independently;
after f failures in n trials its posterior is Beta(1 + f, 1 + n - f), and P(rate B > rate A)
is a finite sum (exact for the integer parameters a uniform prior gives).
"""

from __future__ import annotations

import math


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
