"""Teardown failures side by side, per exposure of each teardown (issue 39): failures whose
lifecycle phase is device-release per device released, driver-destroy per HAL driver destroyed
in a job (driver-churn, instance-churn), process-exit per process exit. The exit-path table
says which way out fails; this one says which teardown does. The units are counted, not
clustered (a process's teardowns share its fate; the signatures' own rates are clustered)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stress.analysis.lifecycle import Phase
from stress.analysis.signatures import Signature
from stress.analysis.stats import Rate, Unit, clustered_rate, fmt_rate
from stress.store.counts import Counts

TEARDOWN_CLASSES: frozenset[str] = frozenset({"crash", "teardown_hang", "error"})
HEAD: tuple[str, ...] = ("teardown", "exposures", "failures", "per exposure", "95% CI")


@dataclass(frozen=True)
class TeardownRow:
    phase: Phase
    unit: str
    rate: Rate

    def cells(self) -> tuple[str, ...]:
        r = self.rate
        return (f"{self.phase.value} (per {self.unit})", f"{r.units:,}", f"{r.failures:,}",
                fmt_rate(r.rate), f"[{fmt_rate(r.low)}, {fmt_rate(r.high)}]")

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase.value, "unit": self.unit, **self.rate.as_dict()}


def rows(sigs: Sequence[Signature], totals: Counts) -> list[TeardownRow]:
    """One row per teardown that had exposures in these runs (none where nothing was counted:
    an exec run's device releases are the command's own)."""
    failed: Counter[str] = Counter()
    for s in sigs:
        if s.cls in TEARDOWN_CLASSES:
            failed.update(s.phases)
    units = {Phase.DEVICE_RELEASE: ("device released",
                                    totals.full_teardowns + totals.handle_releases),
             Phase.DRIVER_DESTROY: ("driver destroyed", totals.driver_teardowns),
             Phase.PROCESS_EXIT: ("process exit", sum(totals.process_exits.values()))}
    out = []
    for phase, (unit, n) in units.items():
        k = failed.get(phase.value, 0)
        if n <= 0:
            continue
        n = max(n, k)  # a failure's own teardown never finished: it is an exposure too
        out.append(TeardownRow(phase, unit, clustered_rate(
            [Unit(i, int(i < k)) for i in range(n)], unit)))
    return out
