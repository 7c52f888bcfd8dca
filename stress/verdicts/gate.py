"""`iree-stress gate`: PASS / FAIL / INCONCLUSIVE on a soak (or on merged shards), with error
rates that hold although the run stops as soon as it is decided.

Unit and clusters. The unit is the job: a job fails when it had an error or miscompare, or a
crash or hang was pinned on it, by a signature that is not in `--known`. Jobs share fate within
their worker process (one crash ends the process's remaining jobs, a process in a bad state
fails in runs), so the worker process (pid) is the cluster, as in `stress.analysis.stats`.

Sequential design. Wald's sequential probability ratio test (`sequential.BernoulliSprt`) of
H0: p = R/4 against H1: p = R, where R is `--max-rate`, alpha = beta = 1 - `--confidence`.
The log likelihood ratio is divided by the design effect of the data so far (Kish: n units
that cluster are worth n/deff independent ones; deff from the cluster jackknife of
`stats.cluster_design_effect`). Why the error rates hold under early stopping: under H0 the
likelihood ratio is a non-negative martingale, so by Ville's inequality the chance that it
*ever* reaches 1/alpha is at most alpha, however often and whenever it is looked at (every
second while the run goes, once more at the end on everything the store holds); the same holds
for 1/LR under H1. Wald's thresholds log((1-beta)/alpha) and log(beta/(1-alpha)) are within
a hair of those. By the monotone likelihood ratio of the Bernoulli family, P(PASS) <= beta for
every true rate >= R and P(FAIL) <= alpha for every rate <= R/4; between R/4 and R (the
indifference zone) either answer may come, and that is where the test takes longest.
bench/gate_simulation.py checks both error rates and the savings over a fixed-size design
under clustered failures (committed output in bench/results/gate_simulation.txt).

So PASS means "the failure rate is below R" (at most a beta chance of passing a rate >= R);
FAIL means "the rate is not below R/4" (at most an alpha chance of failing a rate <= R/4);
the clustered interval of the rate is reported beside the verdict either way.

Fatal classes (default crash, hang, teardown_hang, miscompare): any failure of a fatal class
whose signature is not known FAILs the gate at once, whatever the rate. INCONCLUSIVE: the
budget ended first, or the run cannot be trusted (a shard missing, an interrupted run, workers
that could not start, harness errors). The verdict is always computed from the store (the
truth); the live observer only decides when to stop.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.analysis import header, rundata, signatures, upstream
from stress.analysis import known as known_mod
from stress.analysis.exposure import failing_exits, job_clusters
from stress.analysis.sequential import BernoulliSprt, Decision
from stress.analysis.signatures import Signature
from stress.analysis.stats import (
    Rate,
    Unit,
    cluster_design_effect_of_shapes,
    clustered_rate,
    episode_design_effect,
    fmt_level,
)
from stress.errors import UsageError
from stress.vocab import FailureClass, RunStatus, WorkerOutcome

# p0 = R / 4: a quarter of the bound is "clearly fine". A narrower zone (R/2) needs ~2.5x the
# jobs to decide; a wider one (R/10) passes only stacks far below the bound. The target
# (false FAIL <= 5% at R/4) names the same point.
INDIFFERENCE_RATIO: float = 4.0
DEFAULT_FATAL: tuple[FailureClass, ...] = (FailureClass.CRASH, FailureClass.HANG,
                                           FailureClass.TEARDOWN_HANG, FailureClass.MISCOMPARE)
DEFAULT_BUDGET_S: float = 600.0  # 10 min: a CI step; at R = 1% a clean cpu run passes in ~10 s
SIGNATURES_SHOWN: int = 5  # top signatures in the step summary
_EPISODE_GAP: int = 8  # failures of one process this few jobs apart are one burst: a pool
#   worker runs 2 x threads jobs at a time, so a burst of one cause spans about that many
DESIGN_EFFECT_PRIOR: float = 3.0  # assumed until the data show a larger one: with few or no
#   failures clustering cannot be seen, and bursts (bench: 2-4 failures per episode) made 15-28%
#   of simulated gates PASS at the bound with 1; issue 9's simulated soaks had deff 3.5-7.5.
#   --design-effect 1 for independent jobs (process-per-job only)
GATE_JOBS_PER_WORKER: int = 100  # a gate's pool workers retire after this many jobs: many
#   bounded clusters, so that processes worse than others average out and the design effect
#   is estimated from many of them (bench/results/gate_simulation.txt, per-process model:
#   false PASS at the bound 17.3-18.2% with processes that live until they crash, 0.3-1.9%
#   with 100; false FAIL at a quarter of the bound up to 7.2%, over the 5% goal)
_DEFF_REFRESH: int = 64  # units between design-effect refreshes in a replay (O(clusters) each)


class Verdict(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"

    @property
    def exit_code(self) -> int:
        return {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.INCONCLUSIVE: 3}[self]

    def describe(self) -> str:
        return {Verdict.PASS: "the failure rate is below the bound",
                Verdict.FAIL: "a new fatal failure, or a failure rate not below a quarter of "
                              "the bound",
                Verdict.INCONCLUSIVE: "not decided: the budget ended first, or the run cannot "
                                      "be trusted"}[self]


@dataclass(frozen=True)
class GateSpec:
    """What the gate decides: rate bound, confidence, fatal classes, known failures."""

    max_rate: float
    confidence: float = 0.95
    design_effect: float = DESIGN_EFFECT_PRIOR
    fatal: frozenset[FailureClass] = frozenset(DEFAULT_FATAL)
    known: known_mod.KnownFailures = known_mod.EMPTY

    def __post_init__(self) -> None:
        if not 0.0 < self.max_rate < 1.0:
            raise UsageError(f"--max-rate must be between 0 and 1 (exclusive), got "
                             f"{self.max_rate:g}")
        if not 0.5 <= self.confidence < 1.0:
            raise UsageError(f"--confidence must be in [0.5, 1), got {self.confidence:g}")
        if self.design_effect < 1.0:
            raise UsageError(f"--design-effect must be >= 1, got {self.design_effect:g}")

    @property
    def p0(self) -> float:
        return self.max_rate / INDIFFERENCE_RATIO

    @property
    def error_rate(self) -> float:
        return 1.0 - self.confidence

    def sprt(self) -> BernoulliSprt:
        """Wald's test with its thresholds moved to Ville's, log(1/e) and log(e): alpha' and
        beta' solve (1-beta')/alpha' = 1/e and beta'/(1-alpha') = e, so the error bounds are
        exact (Wald's own are e/(1-e): 5.3% for 5%)."""
        e = self.error_rate
        adjusted = e * (1 - e) / (1 - e * e)
        return BernoulliSprt(self.p0, self.max_rate, adjusted, adjusted)


def failed_jobs(sig: Signature) -> set[tuple[str, int]]:
    """The jobs a signature failed (`Signature.jobs`: the job of each of its failures, one
    rated per process exit included: a crash after the work was done still ends its job as
    failed), the same set the report, JSON, JUnit and HTML count. The live observer and the
    final verdict both count these, so they agree."""
    return set(sig.jobs)


def parse_fatal(text: str) -> frozenset[FailureClass]:
    """`crash,hang` -> classes; `none` (or empty) -> no fatal class."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names in ([], ["none"]):
        return frozenset()
    try:
        return frozenset(FailureClass(n) for n in names)
    except ValueError:
        raise UsageError(f"--fatal wants a comma list of {', '.join(c.value for c in FailureClass)}"
                         f" (or none), got {text!r}") from None


class SequentialTest:
    """The clustered SPRT on running totals per cluster. Units come in the order they ended;
    `step()` after each one gives the decision at that point (the design effect is refreshed
    on each failure and every _DEFF_REFRESH units: between, it barely moves), `decision()`
    the decision on everything so far. Every look is valid (module doc: Ville's inequality).

    The design effect is the larger of the cluster jackknife's (spread between processes) and
    the episode one's (bursts within a process: failures of one process less than
    _EPISODE_GAP units apart are one episode)."""

    def __init__(self, spec: GateSpec):
        self.spec = spec
        self.per_cluster: dict[Hashable, list[int]] = {}  # cluster -> [failed, units, last]
        self.shapes: Counter[tuple[int, int]] = Counter()  # (failed, units) -> clusters
        self.episodes: list[int] = []  # failures per episode
        self.open_episode: dict[Hashable, int] = {}  # cluster -> index into episodes
        self.failures = 0
        self.units = 0
        self.deff = spec.design_effect
        self._refreshed_at = 0

    def add(self, cluster: Hashable, failed: bool) -> None:
        c = self.per_cluster.setdefault(cluster, [0, 0, -_EPISODE_GAP - 1])
        if c[1]:
            self.shapes[(c[0], c[1])] -= 1
        self.shapes[(c[0] + int(failed), c[1] + 1)] += 1
        c[1] += 1
        self.units += 1
        if failed:
            c[0] += 1
            self.failures += 1
            if c[1] - c[2] <= _EPISODE_GAP and cluster in self.open_episode:
                self.episodes[self.open_episode[cluster]] += 1
            else:
                self.open_episode[cluster] = len(self.episodes)
                self.episodes.append(1)
            c[2] = c[1]
            self._refresh()
        elif self.units - self._refreshed_at >= _DEFF_REFRESH:
            self._refresh()

    def _refresh(self) -> None:
        self._refreshed_at = self.units
        jack, _ = cluster_design_effect_of_shapes(+self.shapes)
        self.deff = max(self.spec.design_effect, jack, episode_design_effect(self.episodes))

    def sprt(self) -> BernoulliSprt:
        test = self.spec.sprt()
        test.update(self.failures, self.units, self.deff)
        return test

    def step(self) -> Decision:
        """The decision now, with the design effect as last refreshed."""
        return self.sprt().decision

    def decision(self) -> Decision:
        self._refresh()
        return self.sprt().decision


def first_decision(spec: GateSpec, units: Iterable[tuple[Hashable, bool]]) -> tuple[
        Decision, SequentialTest]:
    """Replays units in the order they ended and stops at the first crossing (what a test
    that looked after every job would have decided); CONTINUE when none crossed. The
    returned test holds the data up to the decision."""
    test = SequentialTest(spec)
    for cluster, failed in units:
        test.add(cluster, failed)
        d = test.step()
        if d is not Decision.CONTINUE:
            return d, test
    return test.decision(), test


# --- the verdict from the store --------------------------------------------------------------

@dataclass
class GateResult:
    verdict: Verdict
    reason: str
    spec: GateSpec
    rate: Rate
    sprt: dict[str, float | int | str]
    invocations: int
    failures: dict[str, int]
    new: list[Signature]
    known: list[Signature]
    shards_seen: list[int]  # 1-based
    shards_expected: int
    runs: list[dict[str, Any]] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)
    job_patterns: dict[tuple[str, int], str] = field(default_factory=dict)
    exits: Rate | None = None  # process exits hit by a failure pinned on an exit, when any

    @property
    def header(self) -> list[tuple[str, str]]:
        """What was tested (analysis/header.py): the same lines `report` prints on these
        folders, first in every output of the gate (issue 28 item 4)."""
        return header.of_runs(self.runs)

    def as_dict(self) -> dict[str, Any]:
        """The `--json` object (keys named by the issue, then details)."""
        return {"verdict": self.verdict.value, "reason": self.reason, "unit": self.rate.unit,
                "rate": round(self.rate.rate, 6), "ci_low": round(self.rate.low, 6),
                "ci_high": round(self.rate.high, 6), "confidence": self.spec.confidence,
                "max_rate": self.spec.max_rate, "jobs": self.rate.units,
                "invocations": self.invocations, "failures": self.failures,
                "new_signatures": [_sig_dict(s) for s in self.new],
                "known_signatures": [_sig_dict(s) for s in self.known],
                "shards": {"seen": len(self.shards_seen), "expected": self.shards_expected,
                           "indices": self.shards_seen},
                "fatal": sorted(c.value for c in self.spec.fatal),
                "design": {"test": "Wald SPRT, log LR / design effect", "p0": self.spec.p0,
                           "p1": self.spec.max_rate, **self.sprt},
                "rate_detail": self.rate.as_dict(),
                "failing_exits": self.exits.as_dict() if self.exits else None,
                "runs": [{k: r.get(k) for k in ("run_id", "status", "stop_reason", "dir")}
                         for r in self.runs],
                "exit_code": self.verdict.exit_code, "header": header.as_dict(self.header)}


def _sig_dict(s: Signature) -> dict[str, Any]:
    return {"id": s.id, "class": s.cls, "description": s.describe(), "count": s.count,
            "jobs_hit": len(s.jobs), "evidence": s.example,
            "known": s.known.as_dict() if s.known else None}


def _shards(runs: Sequence[dict[str, Any]]) -> tuple[list[int], int, list[str]]:
    """(1-based shard indices seen, shards expected, problems): runs of one plan must agree on
    the shard count; the same shard twice would count its jobs twice."""
    seen: dict[int, str] = {}
    counts: set[int] = set()
    problems: list[str] = []
    for r in runs:
        index, count = (r["config"].get("shard") or [0, 1])[:2]
        counts.add(int(count))
        if int(index) in seen and int(count) > 1:  # unsharded repeats are replicates
            problems.append(f"shard {int(index) + 1}/{count} appears twice ({seen[int(index)]}, "
                            f"{r['run_id']})")
        seen[int(index)] = r["run_id"]
    if len(counts) > 1:
        problems.append(f"runs split the plan differently: {sorted(counts)} shards")
    return sorted(i + 1 for i in seen), max(counts) if counts else 1, problems


def _trust_problems(data: rundata.RunData) -> list[str]:
    out: list[str] = []
    for r in data.runs:
        if r["status"] != RunStatus.COMPLETED:
            out.append(f"run {r['run_id']} {r['status']}: {r.get('stop_reason') or '?'}")
    harness = [w for w in data.workers if w.get("outcome") == WorkerOutcome.HARNESS]
    if harness:
        out.append(f"{len(harness)} worker(s) failed in iree-stress's own code (harness)")
    if data.runs and not data.jobs and not data.failures:
        out.append("no job ran (workers could not start?)")
    return out


def evaluate(dirs: Sequence[Path], spec: GateSpec, budget_ended: bool = False) -> GateResult:
    """The verdict on what the stores in `dirs` hold (module doc). `budget_ended`: the run
    stopped because its time was up (an undecided test is then INCONCLUSIVE, not 'stopped
    early')."""
    data = rundata.load(list(dirs))
    sigs = signatures.build(data)
    for s in sigs:
        s.known = spec.known.lookup_signature(s)
    new = [s for s in sigs if s.known is None]
    known = [s for s in sigs if s.known is not None]
    hit: set[tuple[str, int]] = set().union(*(failed_jobs(s) for s in new)) if new else set()
    clusters = job_clusters(data)
    ends: dict[tuple[str, int], float] = {}
    for j in data.jobs:
        ends[(j["run_id"], int(j["job_index"]))] = float(j["ended_at"])
    for f in data.failures:  # jobs that died with their process have no job row
        if f.get("job_index") is not None:
            ends.setdefault((f["run_id"], int(f["job_index"])), float(f["detected_at"]))
    order = sorted(clusters, key=lambda k: (ends.get(k, 0.0), k))
    decision, test = first_decision(spec, ((clusters[k], k in hit) for k in order))
    rate = clustered_rate([Unit(clusters[k], int(k in hit)) for k in order], "job",
                          spec.confidence)
    sprt = test.sprt()
    failures: dict[str, int] = {c.value: 0 for c in FailureClass}
    for s in sigs:
        failures[s.cls] = failures.get(s.cls, 0) + s.count
    seen, expected, shard_problems = _shards(data.runs)
    problems = shard_problems + _trust_problems(data)
    missing = [i for i in range(1, expected + 1) if i not in seen]
    if missing:
        problems.insert(0, f"{len(missing)} of {expected} shards missing "
                           f"({', '.join(map(str, missing))})")
    fatal = [s for s in new if FailureClass(s.cls) in spec.fatal]
    if fatal:
        verdict, reason = Verdict.FAIL, (
            f"new {fatal[0].cls} {fatal[0].id} ({fatal[0].describe()})"
            + (f" and {len(fatal) - 1} more new fatal signature(s)" if len(fatal) > 1 else ""))
    elif decision is Decision.ACCEPT_H1:
        verdict, reason = Verdict.FAIL, (
            f"failing jobs {rate.describe()}: not below {spec.p0:.3g} (a quarter of the bound "
            f"{spec.max_rate:g}) at {fmt_level(spec.confidence)}")
    elif problems:
        verdict, reason = Verdict.INCONCLUSIVE, "; ".join(problems)
    elif decision is Decision.ACCEPT_H0:
        verdict, reason = Verdict.PASS, (
            f"failing jobs {rate.describe()}: below the bound {spec.max_rate:g} at "
            f"{fmt_level(spec.confidence)}")
    else:
        why = "the budget ended" if budget_ended else "the data ended"
        verdict, reason = Verdict.INCONCLUSIVE, (
            f"{why} before the test decided: {rate.describe()}; needs about "
            f"{jobs_to_pass(spec):,} clean jobs to pass at this bound")
    exits = failing_exits(data)
    if exits is not None and exits.failures:  # the worst thing first (issue 24 item 5)
        reason = f"process exits failing {exits.describe()}; {reason}"
    patterns = {(f["run_id"], int(f["job_index"])): str(f["pattern"]) for f in data.failures
                if f.get("job_index") is not None and f.get("pattern")}
    patterns.update({(j["run_id"], int(j["job_index"])): str(j["pattern"]) for j in data.jobs})
    return GateResult(verdict, reason, spec, rate, sprt.state(), data.invocations, failures,
                      new, known, seen, expected, data.runs, list(dirs), patterns, exits)


def jobs_to_pass(spec: GateSpec) -> int:
    """Clean jobs the test needs to PASS with no failure at all: design effect x
    log(beta') / log((1 - p1) / (1 - p0)) (1,191 at R = 1% with the default prior of 3)."""
    test = spec.sprt()
    lo, _ = test.bounds
    test.update(0, 1, spec.design_effect)
    return int(lo / test.llr) + 1


def load_known(paths: Iterable[Path]) -> known_mod.KnownFailures:
    paths = list(paths)
    return upstream.checked(known_mod.load_all(paths)) if paths else known_mod.EMPTY
