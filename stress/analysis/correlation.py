"""Which HAL steps and step sequences come before failures more often than in healthy
operation, and which run factors raise the failure rate.

A window is a thread's last steps (`begin:invoke`, `end:upload`, ...) plus what was in flight on
it and on other threads. Failure windows are taken at the failure; healthy windows are sampled
from running threads of the same run(s). Features: each step token, each 2-/3-gram, the last
token, the step in flight on the thread, and each step in flight on another thread. Lift =
P(feature | failure window) / P(feature | healthy window), both Laplace-smoothed; features are
ranked by a conservative lift (Wilson lower bound in failures over Wilson upper bound in healthy
windows) so that a feature seen once in three failures and never in health does not outrank one
seen in every failure. Only features of a majority of a signature's windows are listed.

Healthy windows are sampled per unit of thread time, failures arrive per invocation; patterns
spend their time very differently (per-call threads mostly create devices). So the healthy
frequency of a feature is stratified: each pattern's healthy frequency, weighted by that
pattern's share of the signature's failure windows. Without it, steady-state invoke loops look
"over-represented" before any failure of the shared pattern.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stress.analysis.rundata import RunData
from stress.analysis.rundata import trials as job_trials
from stress.analysis.signatures import Signature, failing_slot
from stress.analysis.stats import rate_per_1k, wilson
from stress.engine.attribution import window_tokens

MIN_FAILURE_WINDOWS: int = 5  # fewer: the table is printed, flagged as anecdotal
MIN_HEALTHY_WINDOWS: int = 30
MIN_INVOCATIONS_PER_VALUE: int = 1000  # fewer: a factor's rate is flagged as too few data
STRATUM_PRIOR: float = 20.0  # pseudo-windows of the pooled rate mixed into each pattern's rate
TOP_FEATURES: int = 8


def features(tokens: list[str], in_flight: list[str], own_prefix: str | None) -> set[str]:
    feats = set(tokens)
    for n in (2, 3):
        for i in range(len(tokens) - n + 1):
            feats.add(" > ".join(tokens[i:i + n]))
    if tokens:
        feats.add(f"last: {tokens[-1]}")
    own = [e.split(":", 1)[1] for e in in_flight if own_prefix and e.startswith(own_prefix)]
    if own:
        feats.add(f"in flight: {own[-1]}")
    for e in in_flight:
        if own_prefix is None or not e.startswith(own_prefix):
            feats.add(f"other thread in flight: {e.split(':', 1)[1]}")
    return feats


@dataclass
class Lift:
    feature: str
    in_failures: int
    failures: int
    in_healthy: int
    healthy: int
    lift: float
    conservative: float  # Wilson low (failures) / Wilson high (healthy): the ranking key

    def as_dict(self) -> dict[str, Any]:
        return {"feature": self.feature, "in_failures": self.in_failures,
                "failure_windows": self.failures, "in_healthy": self.in_healthy,
                "healthy_windows": self.healthy, "lift": round(self.lift, 2),
                "conservative_lift": round(self.conservative, 2)}


@dataclass
class SignatureCorrelation:
    signature: str
    lifts: list[Lift]
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"signature": self.signature, "note": self.note,
                "features": [x.as_dict() for x in self.lifts]}


def failure_window(row: dict[str, Any]) -> tuple[list[str], list[str], str | None]:
    slot = failing_slot(row["steps"])
    prefix = f"t{slot}:" if slot is not None else None
    if row["class"] in ("error", "miscompare"):
        tokens = window_tokens(row["steps"])
        # the worker's window ends just after the failed step: recover what was in flight
        flight = [f"tX:{row['last_step']}"] if row["last_step"] else []
        return tokens, flight, "tX:"
    return window_tokens(row["steps"]), row["in_flight"], prefix


@dataclass
class Healthy:
    """Healthy windows' features, all together and per pattern."""

    all: list[set[str]]
    by_pattern: dict[str, list[set[str]]]

    def __len__(self) -> int:
        return len(self.all)


def healthy_features(data: RunData) -> Healthy:
    out = Healthy([], defaultdict(list))
    for w in data.windows:
        if w["kind"] != "healthy":
            continue
        prefix = w["in_flight"][0].split(":", 1)[0] + ":" if w["in_flight"] else None
        feats = features(w["tokens"], w["in_flight"], prefix)
        out.all.append(feats)
        if w.get("pattern"):
            out.by_pattern[w["pattern"]].append(feats)
    return out


def correlate(sig: Signature, healthy: Healthy | list[set[str]]) -> SignatureCorrelation:
    if isinstance(healthy, list):
        healthy = Healthy(healthy, {})
    windows = []
    patterns: Counter[str] = Counter()
    for row in sig.rows:
        tokens, flight, prefix = failure_window(row)
        if tokens or flight:
            windows.append(features(tokens, flight, prefix))
            patterns[row.get("pattern") or ""] += 1
    f, h = len(windows), len(healthy)
    notes = []
    if f < MIN_FAILURE_WINDOWS:
        notes.append(f"only {f} failure window(s): anecdotal")
    if h < MIN_HEALTHY_WINDOWS:
        notes.append(f"only {h} healthy window(s) to compare with")
    # strata: each failure pattern's healthy windows, shrunk toward the pooled rate so that a
    # pattern with few healthy windows borrows strength from all of them
    pooled = Counter(x for win in healthy.all for x in win)
    strata = [(n / f, healthy.by_pattern.get(p, [])) for p, n in patterns.items()]
    counts = [(w, len(pool), Counter(x for win in pool for x in win)) for w, pool in strata]
    in_fail: Counter[str] = Counter(x for w in windows for x in w)
    lifts = []
    for feat, a in in_fail.items():
        if 2 * a < f:  # features of a minority of the windows do not characterise them
            continue
        base = pooled.get(feat, 0) / h if h else 0.0
        share = sum(w * (c.get(feat, 0) + STRATUM_PRIOR * base) / (n + STRATUM_PRIOR)
                    for w, n, c in counts) if h else 0.0
        b = int(round(share * h))
        lift = ((a + 0.5) / (f + 1)) / ((share * h + 0.5) / (h + 1))
        conservative = wilson(a, f)[0] / max(wilson(b, h)[1], 1e-9)
        lifts.append(Lift(feat, a, f, b, h, lift, conservative))
    lifts.sort(key=lambda x: (-x.conservative, -x.in_failures, x.feature))
    return SignatureCorrelation(sig.id, lifts[:TOP_FEATURES], "; ".join(notes))


@dataclass
class FactorRate:
    factor: str
    value: str
    failures: int
    invocations: int
    rate_per_1k: float
    ci_low: float
    ci_high: float
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "value": self.value, "failures": self.failures,
                "invocations": self.invocations, "rate_per_1k": round(self.rate_per_1k, 4),
                "ci_low": round(self.ci_low, 4), "ci_high": round(self.ci_high, 4),
                "note": self.note}


def _size_bucket(program: str) -> str:
    shape = program.rsplit(".", 1)[-1]
    n = 1
    for part in shape.split("+")[0].split("x"):
        n *= int(part) if part.isdigit() else (64 if part == "N" else 1)
    return "tiny (<100)" if n < 100 else "small (<64K)" if n < 65536 else \
        "medium (<1M)" if n < (1 << 20) else "large (>=1M)"


def factor_rates(data: RunData) -> list[FactorRate]:
    """Failure rate per value of: pattern, program kind, dtype, size, concurrency."""
    conc = {r["run_id"]: f"{r['config']['workers']}x{r['config']['threads']}" for r in data.runs}
    getters: dict[str, Callable[[dict[str, Any]], str]] = {
        "pattern": lambda r: r["pattern"] or "?",
        "kind": lambda r: (r["program"] or "?").split(".")[0],
        "dtype": lambda r: (r["program"] or "?.?.?").split(".")[2]
        if (r["program"] or "").count(".") >= 3 else "?",
        "size": lambda r: _size_bucket(r["program"] or "x.x.x.1"),
        "concurrency (workers x threads)": lambda r: conc.get(r["run_id"], "?"),
    }
    out = []
    for factor, get in getters.items():
        fails: Counter[str] = Counter()
        trials: defaultdict[str, int] = defaultdict(int)
        for j in data.jobs:
            v = get(j)
            fails[v] += int(j["errors"]) + int(j["miscompare"])
            trials[v] += job_trials(j)
        for row in data.failures:
            if row["class"] in ("crash", "hang", "teardown_hang") and row["program"]:
                v = get(row)
                fails[v] += 1
                trials[v] += 1  # the invocation that died never reported itself
        for v in sorted(trials):
            rate, lo, hi = rate_per_1k(fails[v], trials[v])
            note = "too few invocations" if trials[v] < MIN_INVOCATIONS_PER_VALUE else ""
            out.append(FactorRate(factor, v, fails[v], trials[v], rate, lo, hi, note))
    return out
