"""analysis.bayes (issue 27): compare's P(B worse), checked against a direct integral. (Bisect's
posterior is tested in test_changepoint.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from stress.analysis.bayes import prob_greater
from stress.analysis.stats import betainc


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
