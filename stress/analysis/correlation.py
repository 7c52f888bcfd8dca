"""What was different about the moments things failed: each signature's failure windows against
healthy windows, compared like with like.

* Aligned at the same step: a failure at step X is looked at from the moment its thread began X
  (the last `begin:X` of the failing thread); healthy windows are sampled threads that also began
  X, looked at from that moment. Healthy windows whose thread never began X are not compared.
* Features implied by the signature key are left out: nothing at or after `begin:X` of the
  failing thread enters (no `fail:X`, no "in flight: X"); the thread's own features are the steps
  it did just before X.
* What the *other* threads of the process were doing at that moment is a feature of its own
  ("other thread in flight: device-create"), reconstructed from their journal entries up to that
  moment. A window in which some other thread's kept entries all come later is left out, on
  both sides (never guessed, and never counted as "idle": see `aligned_features`).
* Ranked by an exact test that holds up: per feature, the exact conditional (Fisher) test
  stratified by pattern (healthy windows are sampled per thread-time, failures per occurrence;
  patterns differ in what other threads do), then Benjamini-Hochberg over the features tested.
  A feature "stands out" at a 5% false-discovery rate; when none does, the report says so.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stress.analysis.rundata import RunData
from stress.analysis.signatures import Signature
from stress.analysis.stats import Alternative, benjamini_hochberg, fisher_exact_stratified

FDR: float = 0.05  # false-discovery rate of "stands out"
OWN_STEPS_BEFORE: int = 6  # the failing thread's steps before X taken as features
MIN_TOTAL: int = 3  # a feature seen fewer times in failure + healthy windows is not tested
MIN_FAILURE_WINDOWS: int = 5  # fewer: flagged as anecdotal (the test is still exact)
MIN_HEALTHY_WINDOWS: int = 30  # fewer aligned healthy windows: flagged
TOP_FEATURES: int = 8
_BOOKKEEPING: frozenset[str] = frozenset({"job", "inject", "thread-start"})
_BEGIN, _END, _FAIL = "begin", "end", "fail"


# --- windows ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """One aligned moment: the features of a thread that began step X, and its pattern."""

    features: frozenset[str]
    pattern: str


def _hal(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("step") not in _BOOKKEEPING
            and e.get("phase") in (_BEGIN, _END, _FAIL)]


def _in_flight_at(entries: Sequence[dict[str, Any]], t: float) -> list[str] | None:
    """Steps one thread had begun and not finished at time t; None when its kept entries start
    after t (its state then is unknown)."""
    ordered = sorted(entries, key=lambda e: float(e.get("t") or 0))
    if not ordered or float(ordered[0].get("t") or 0) > t:
        return None
    stack: list[str] = []
    for e in ordered:
        if float(e.get("t") or 0) > t:
            break
        if e.get("step") in _BOOKKEEPING:
            continue
        if e["phase"] == _BEGIN:
            stack.append(e["step"])
        elif e["phase"] in (_END, _FAIL) and e["step"] in stack:
            del stack[len(stack) - 1 - stack[::-1].index(e["step"])]
    return stack


class Unaligned(enum.Enum):
    """Why a window cannot be compared at a step."""

    NO_STEP = "its thread never began the step in the window"
    UNKNOWN_OTHERS = "another thread's state at that moment is not in the window"


def aligned_features(steps: Sequence[dict[str, Any]], step: str) -> frozenset[str] | Unaligned:
    """Features of a window aligned at the failing (or sampled) thread's last `begin:step`.

    Unaligned.UNKNOWN_OTHERS when some other thread's kept entries all come after that moment:
    such windows are left out on both sides. Keeping them would be unfair: a failure is
    recorded at the failing moment (every other thread's recent entries cover it), a healthy
    sample often long after its thread began the step (~40% of other threads unknown in real
    runs), so other threads' steps would look rarer in health than they are."""
    own = [e for e in steps if e.get("failing")]
    own_hal = sorted(_hal(own), key=lambda e: float(e.get("t") or 0))
    idx = next((i for i in range(len(own_hal) - 1, -1, -1)
                if own_hal[i]["step"] == step and own_hal[i]["phase"] == _BEGIN), None)
    if idx is None:
        return Unaligned.NO_STEP
    t = float(own_hal[idx].get("t") or 0)
    others: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in steps:
        if not e.get("failing"):
            others[e.get("tid") or ("slot", e.get("slot"))].append(e)
    busy: set[str] = set()
    for entries in others.values():
        flight = _in_flight_at(entries, t)
        if flight is None:
            return Unaligned.UNKNOWN_OTHERS
        busy.update(flight)
    feats = {f"other thread in flight: {s}" for s in busy}
    if others and not busy:
        feats.add("other threads: none in flight")
    before = own_hal[max(0, idx - OWN_STEPS_BEFORE):idx]
    for e in before:
        feats.add(f"this thread before: {e['phase']}:{e['step']}")
    if before:
        feats.add(f"this thread just before: {before[-1]['phase']}:{before[-1]['step']}")
    return frozenset(feats)


def _legacy_healthy(w: dict[str, Any], step: str) -> frozenset[str] | Unaligned:
    """Windows from before m004 (tokens and an in-flight snapshot, no raw entries): the own
    thread's tokens aligned at `begin:step`; other threads from the snapshot."""
    tokens = list(w.get("tokens") or [])
    target = f"begin:{step}"
    if target not in tokens:
        return Unaligned.NO_STEP
    idx = len(tokens) - 1 - tokens[::-1].index(target)
    before = tokens[max(0, idx - OWN_STEPS_BEFORE):idx]
    feats = {f"this thread before: {x}" for x in before}
    if before:
        feats.add(f"this thread just before: {before[-1]}")
    flight = list(w.get("in_flight") or [])
    own = flight[0].split(":", 1)[0] + ":" if flight else None
    others = {e.split(":", 1)[1] for e in flight[1:] if ":" in e and not e.startswith(own or "")}
    feats |= {f"other thread in flight: {s}" for s in others}
    return frozenset(feats)


def healthy_windows(data: RunData, step: str) -> list[Window]:
    return healthy_alignment(data, step)[0]


def healthy_alignment(data: RunData, step: str) -> tuple[list[Window], Counter[Unaligned]]:
    """Healthy windows aligned at `step`, and how many were left out for which reason."""
    out: list[Window] = []
    dropped: Counter[Unaligned] = Counter()
    for w in data.windows:
        if w.get("kind") != "healthy":
            continue
        feats = aligned_features(w["steps"], step) if w.get("steps") else \
            _legacy_healthy(w, step)
        if isinstance(feats, Unaligned):
            dropped[feats] += 1
        else:
            out.append(Window(feats, w.get("pattern") or ""))
    return out, dropped


def failure_windows(sig: Signature) -> tuple[list[tuple[str, Window]], Counter[Unaligned]]:
    """([(step, aligned window)], rows left out by reason). Each failure is aligned at its own
    step (a teardown signature's failures may be at device or driver release)."""
    out = []
    dropped: Counter[Unaligned] = Counter()
    for row in sig.rows:
        step = row.get("step") or row.get("last_step") or ""
        feats = aligned_features(row.get("steps") or [], step)
        if isinstance(feats, Unaligned):
            dropped[feats] += 1
        else:
            out.append((step, Window(feats, row.get("pattern") or "")))
    return out, dropped


# --- tests -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class FeatureTest:
    feature: str
    in_failures: int
    failures: int
    in_healthy: int  # in healthy windows of the patterns the failures came from
    healthy: int
    lift: float  # share in failures / share in healthy (0.5-smoothed)
    p: float  # stratified exact test, one-sided (more frequent in failures)
    q: float  # Benjamini-Hochberg adjusted

    @property
    def stands_out(self) -> bool:
        return self.q < FDR

    def as_dict(self) -> dict[str, Any]:
        return {"feature": self.feature, "in_failures": self.in_failures,
                "failure_windows": self.failures, "in_healthy": self.in_healthy,
                "healthy_windows": self.healthy, "lift": round(self.lift, 2),
                "p": float(f"{self.p:.3g}"), "q": float(f"{self.q:.3g}"),
                "stands_out": self.stands_out}


@dataclass
class SignatureCorrelation:
    signature: str
    step: str
    failure_windows: int
    healthy_windows: int
    tested: int
    features: list[FeatureTest] = field(default_factory=list)  # best first, TOP_FEATURES
    notes: list[str] = field(default_factory=list)
    aligned_at: str = ""

    @property
    def standing_out(self) -> list[FeatureTest]:
        return [f for f in self.features if f.stands_out]

    @property
    def note(self) -> str:
        return "; ".join(self.notes)

    def verdict(self) -> str:
        out = self.standing_out
        if out:
            return "stands out: " + ", ".join(
                f"{f.feature} ({f.in_failures}/{f.failures} failures vs "
                f"{f.in_healthy}/{f.healthy} healthy, q={f.q:.2g})" for f in out[:3])
        if not self.tested:
            return (f"cannot tell: {self.failure_windows} failure and {self.healthy_windows} "
                    f"healthy window(s) comparable at {self.aligned_at or 'begin:' + self.step}")
        return (f"nothing stands out ({self.tested} features tested at "
                f"{self.aligned_at or 'begin:' + self.step}, none at a {FDR:.0%} "
                f"false-discovery rate)")

    def as_dict(self) -> dict[str, Any]:
        return {"signature": self.signature, "aligned_at": self.aligned_at or f"begin:{self.step}",
                "failure_windows": self.failure_windows,
                "healthy_windows": self.healthy_windows, "features_tested": self.tested,
                "verdict": self.verdict(), "note": self.note,
                "features": [f.as_dict() for f in self.features]}


def correlate(sig: Signature, data: RunData,
              healthy: dict[str, tuple[list[Window], Counter[Unaligned]]] | None = None
              ) -> SignatureCorrelation:
    """`healthy`: healthy_alignment per step (computed here when not given)."""
    aligned, unaligned = failure_windows(sig)
    steps = Counter(step for step, _ in aligned) or Counter(
        {r.get("step") or r.get("last_step") or "": 1 for r in sig.rows}) or \
        Counter({sig.last_step or "": 1})
    main = steps.most_common(1)[0][0]
    healthy = dict(healthy or {})
    for step in steps:
        if step not in healthy:
            healthy[step] = healthy_alignment(data, step)
    # strata: (step, pattern) of the failures; healthy windows of the same step and pattern
    by_f: dict[tuple[str, str], list[Window]] = defaultdict(list)
    for step, w in aligned:
        by_f[(step, w.pattern)].append(w)
    by_h: dict[tuple[str, str], list[Window]] = defaultdict(list)
    h_dropped: Counter[Unaligned] = Counter()
    for step in steps:
        h_dropped.update(healthy[step][1])
        for w in healthy[step][0]:
            if (step, w.pattern) in by_f:
                by_h[(step, w.pattern)].append(w)
    fails = [w for _, w in aligned]
    comparable = [w for ws in by_h.values() for w in ws]
    res = SignatureCorrelation(sig.id, main, len(fails), len(comparable), 0)
    where = f"begin:{main}" if len(steps) == 1 else "each failure's own step"
    res.aligned_at = where
    for why, n in sorted(unaligned.items(), key=lambda x: x[0].name):
        res.notes.append(f"{n} failure window(s) left out: {why.value}")
    if h_dropped[Unaligned.UNKNOWN_OTHERS]:
        res.notes.append(f"{h_dropped[Unaligned.UNKNOWN_OTHERS]} healthy window(s) left out: "
                         f"{Unaligned.UNKNOWN_OTHERS.value}")
    if len(fails) < MIN_FAILURE_WINDOWS:
        res.notes.append(f"only {len(fails)} failure window(s): anecdotal")
    if len(comparable) < MIN_HEALTHY_WINDOWS:
        res.notes.append(f"only {len(comparable)} healthy window(s) aligned at {where} "
                         f"in the same patterns")
    if not fails or not comparable:
        return res
    in_f: Counter[str] = Counter(x for w in fails for x in w.features)
    in_h: Counter[str] = Counter(x for w in comparable for x in w.features)
    cands = sorted(x for x in in_f if in_f[x] + in_h[x] >= MIN_TOTAL)
    pvals = []
    for x in cands:
        tables = []
        for stratum, fw in by_f.items():
            hw = by_h.get(stratum, [])
            a = sum(x in w.features for w in fw)
            c = sum(x in w.features for w in hw)
            tables.append((a, len(fw) - a, c, len(hw) - c))
        pvals.append(fisher_exact_stratified(tables, Alternative.GREATER))
    qvals = benjamini_hochberg(pvals)
    f, h = len(fails), len(comparable)
    tests = [FeatureTest(x, in_f[x], f, in_h[x], h,
                         ((in_f[x] + 0.5) / (f + 1)) / ((in_h[x] + 0.5) / (h + 1)), p, q)
             for x, p, q in zip(cands, pvals, qvals, strict=True)]
    tests.sort(key=lambda t: (t.q, t.p, -t.lift, t.feature))
    res.tested = len(tests)
    res.features = tests[:TOP_FEATURES]
    return res


def correlate_all(data: RunData, sigs: Sequence[Signature]) -> list[SignatureCorrelation]:
    cache: dict[str, tuple[list[Window], Counter[Unaligned]]] = {}
    out = []
    for s in sigs:
        for step in {r.get("step") or r.get("last_step") or "" for r in s.rows}:
            if step not in cache:
                cache[step] = healthy_alignment(data, step)
        out.append(correlate(s, data, cache))
    return out
