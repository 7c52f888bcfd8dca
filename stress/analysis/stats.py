"""Small, dependency-free statistics: Wilson score intervals for rates."""

from __future__ import annotations

import math

Z95: float = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval for k successes out of n trials (0..1). Honest at k = 0 and
    for small n, unlike the normal approximation."""
    if n <= 0:
        return 0.0, 1.0
    k = min(max(k, 0), n)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_per_1k(k: int, n: int) -> tuple[float, float, float]:
    """(rate, low, high) per 1,000 trials."""
    lo, hi = wilson(k, n)
    return (1000.0 * k / n if n else 0.0), 1000.0 * lo, 1000.0 * hi
