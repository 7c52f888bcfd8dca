"""Sequential decisions (gate, compare): Wald's SPRT on units that fail or not, and its
paired form on two arms run in pairs. Decides as soon as the evidence allows, with error
bounds that hold under that optional stopping."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Decision(enum.Enum):
    CONTINUE = "continue"
    ACCEPT_H0 = "accept H0"
    ACCEPT_H1 = "accept H1"

    def describe(self) -> str:
        return {Decision.CONTINUE: "not decided yet",
                Decision.ACCEPT_H0: "rate at or below the lower hypothesis",
                Decision.ACCEPT_H1: "rate at or above the upper hypothesis"}[self]


@dataclass
class BernoulliSprt:
    """Wald's sequential probability ratio test of H0: p = p0 against H1: p = p1 (p1 > p0) on
    units that fail or not. Decides as soon as the log likelihood ratio leaves
    [log(beta/(1-alpha)), log((1-beta)/alpha)]; Wald's bounds keep the error rates at or
    below alpha (false H1) and beta (false H0) under this optional stopping, which a repeated
    fixed-size test would not. For a gate with bound R: p0 = R/2 ... R, p1 = R (or p0 = R,
    p1 = 2R): the indifference zone between them is where it takes longest.

    Clustering: pass the current design effect with each update; the log likelihood ratio is
    divided by it (the data are worth n/deff independent units)."""

    p0: float
    p1: float
    alpha: float = 0.05
    beta: float = 0.05
    failures: int = 0
    units: int = 0
    design_effect: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.p0 < self.p1 < 1.0:
            raise ValueError(f"need 0 < p0 < p1 < 1, got p0={self.p0} p1={self.p1}")

    @property
    def bounds(self) -> tuple[float, float]:
        return math.log(self.beta / (1 - self.alpha)), math.log((1 - self.beta) / self.alpha)

    @property
    def llr(self) -> float:
        k, n = self.failures, self.units
        raw = k * math.log(self.p1 / self.p0) + (n - k) * math.log((1 - self.p1) / (1 - self.p0))
        return raw / max(1.0, self.design_effect)

    def update(self, failures: int, units: int, design_effect: float | None = None) -> Decision:
        self.failures += failures
        self.units += units
        if design_effect is not None:
            self.design_effect = design_effect
        return self.decision

    @property
    def decision(self) -> Decision:
        lo, hi = self.bounds
        llr = self.llr
        return Decision.ACCEPT_H1 if llr >= hi else Decision.ACCEPT_H0 if llr <= lo \
            else Decision.CONTINUE

    def state(self) -> dict[str, float | int | str]:
        lo, hi = self.bounds
        return {"p0": self.p0, "p1": self.p1, "alpha": self.alpha, "beta": self.beta,
                "failures": self.failures, "units": self.units, "llr": round(self.llr, 4),
                "lower_bound": round(lo, 4), "upper_bound": round(hi, 4),
                "design_effect": round(self.design_effect, 3),
                "decision": self.decision.value}


@dataclass
class PairedSprt:
    """Sequential comparison of two arms run in pairs (compare: A B A B with the same seeds).
    Only discordant pairs (one arm failed, the other not) carry information; among them B is
    the one that failed with probability theta: H0 theta = 0.5 (no difference) against H1
    theta = theta1 (B worse). Run a second instance with the arms swapped for "A worse". A
    BernoulliSprt on the discordant pairs, so Wald's error bounds hold under early stopping."""

    theta1: float = 0.75
    alpha: float = 0.05
    beta: float = 0.1

    def __post_init__(self) -> None:
        self._sprt = BernoulliSprt(0.5, self.theta1, self.alpha, self.beta)

    def update(self, a_failed: bool, b_failed: bool) -> Decision:
        if a_failed != b_failed:
            self._sprt.update(int(b_failed), 1)
        return self._sprt.decision

    @property
    def decision(self) -> Decision:
        return self._sprt.decision

    def state(self) -> dict[str, float | int | str]:
        return {"discordant_pairs": self._sprt.units, "b_failed_alone": self._sprt.failures,
                **{k: v for k, v in self._sprt.state().items() if k not in ("failures", "units")}}
