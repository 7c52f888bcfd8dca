"""Which run factors go with failing jobs: pattern, program kind, dtype, size, concurrency.

The unit is the job (a job failed when any failure hit it), clustered by worker process. Raw
rates are confounded by the pattern mix (per-call jobs create devices, shared jobs do not), so
every factor but the pattern itself also gets a pattern-standardised rate (each pattern's rate
for that value, weighted by the whole run's pattern mix) and its test is stratified by
pattern. A value "stands out" when its jobs fail more than the other values' (exact
stratified test, one-sided) at a 5% false-discovery rate across every row of the table:
with 25 rows at 95%, one interval or so misses by chance alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stress.analysis import exposure as exp
from stress.analysis.rundata import RunData
from stress.analysis.signatures import Signature
from stress.analysis.stats import (
    Alternative,
    Rate,
    Unit,
    benjamini_hochberg,
    clustered_rate,
    fisher_exact_stratified,
    multiple_comparisons_note,
    standardized_rate,
)

FDR: float = 0.05
MIN_JOBS_PER_VALUE: int = 30  # fewer: flagged "few jobs"


@dataclass(frozen=True)
class FactorRate:
    factor: str
    value: str
    rate: Rate
    adjusted: Rate | None  # pattern-standardised (None for the pattern factor itself)
    p: float
    q: float
    note: str

    @property
    def stands_out(self) -> bool:
        return self.q < FDR

    def as_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "value": self.value, **self.rate.as_dict(),
                "adjusted": self.adjusted.as_dict() if self.adjusted else None,
                "p": float(f"{self.p:.3g}"), "q": float(f"{self.q:.3g}"),
                "stands_out": self.stands_out, "note": self.note}


@dataclass(frozen=True)
class FactorTable:
    rows: list[FactorRate]
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"rows": [r.as_dict() for r in self.rows], "note": self.note}


def _size_bucket(program: str) -> str:
    shape = program.rsplit(".", 1)[-1]
    n = 1
    for part in shape.split("+")[0].split("x"):
        n *= int(part) if part.isdigit() else (64 if part == "N" else 1)
    return "tiny (<100)" if n < 100 else "small (<64K)" if n < 65536 else \
        "medium (<1M)" if n < (1 << 20) else "large (>=1M)"


def _job_attrs(data: RunData) -> dict[exp.JobKey, dict[str, Any]]:
    out: dict[exp.JobKey, dict[str, Any]] = {}
    for row in [*data.failures, *data.jobs]:  # job rows win
        k = exp.job_key(row)
        if k is not None:
            out[k] = {"run_id": row["run_id"], "pattern": row.get("pattern") or "?",
                      "program": row.get("program") or "?"}
    return out


def factor_rates(data: RunData, sigs: Sequence[Signature]) -> FactorTable:
    conc = {r["run_id"]: f"{r['config'].get('workers', '?')}x{r['config'].get('threads', '?')}"
            for r in data.runs}
    getters: dict[str, Callable[[dict[str, Any]], str]] = {
        "pattern": lambda r: r["pattern"],
        "kind": lambda r: r["program"].split(".")[0],
        "dtype": lambda r: r["program"].split(".")[2] if r["program"].count(".") >= 3 else "?",
        "size": lambda r: _size_bucket(r["program"]) if r["program"] != "?" else "?",
        "concurrency (workers x threads)": lambda r: conc.get(r["run_id"], "?"),
    }
    clusters = exp.job_clusters(data)
    attrs = _job_attrs(data)
    failed = set().union(*(s.jobs for s in sigs)) if sigs else set()
    mix = Counter(a["pattern"] for a in attrs.values())
    weights = {p: n / max(1, sum(mix.values())) for p, n in mix.items()}
    rows: list[tuple[str, str, Rate, Rate | None, float, str]] = []
    for factor, get in getters.items():
        groups: dict[str, dict[str, list[Unit]]] = defaultdict(lambda: defaultdict(list))
        for k, a in attrs.items():
            groups[get(a)][a["pattern"]].append(Unit(clusters.get(k, k), int(k in failed)))
        if len(groups) < 2 and factor != "pattern":
            continue  # one value: nothing to compare
        for v in sorted(groups):
            units = [u for us in groups[v].values() for u in us]
            rate = clustered_rate(units)
            adjusted = None if factor == "pattern" else standardized_rate(groups[v], weights)
            p = _test(groups, v, stratified=factor != "pattern")
            note = "few jobs" if len(units) < MIN_JOBS_PER_VALUE else ""
            rows.append((factor, v, rate, adjusted, p, note))
    qs = benjamini_hochberg([r[4] for r in rows])
    out = [FactorRate(f, v, r, a, p, q, n) for (f, v, r, a, p, n), q in zip(rows, qs, strict=True)]
    return FactorTable(out, multiple_comparisons_note(len(out), FDR))


def _test(groups: dict[str, dict[str, list[Unit]]], value: str, stratified: bool) -> float:
    """One-sided exact test: jobs with `value` fail more than jobs with the other values."""
    def counts(units: list[Unit]) -> tuple[int, int]:
        k = sum(u.failed for u in units)
        return k, len(units) - k

    patterns = {p for g in groups.values() for p in g} if stratified else {"all"}
    tables = []
    for p in patterns:
        mine = groups[value].get(p, []) if stratified else \
            [u for us in groups[value].values() for u in us]
        rest = [u for v, g in groups.items() if v != value
                for u in (g.get(p, []) if stratified else [u for us in g.values() for u in us])]
        a, b = counts(mine)
        c, d = counts(rest)
        tables.append((a, b, c, d))
    return fisher_exact_stratified(tables, Alternative.GREATER)
