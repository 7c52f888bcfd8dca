"""The live side of `iree-stress gate`: the observer that stops a soak once the gate is
decided (the verdict itself is decided from the store afterwards: stress.verdicts.gate), and
the soak that feeds it."""

from __future__ import annotations

import time
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING

from stress.analysis import rundata, signatures
from stress.analysis.sequential import Decision
from stress.engine.session import Outcome
from stress.verdicts.gate import (
    GATE_JOBS_PER_WORKER,
    GateResult,
    GateSpec,
    SequentialTest,
    Verdict,
    evaluate,
    failed_jobs,
)
from stress.vocab import Engine, FailureClass, StopReason

if TYPE_CHECKING:
    from stress.soak.options import SoakOptions


class GateObserver:
    """Stops the soak as soon as the gate is decided (session.Observer). Job outcomes feed the
    sequential test; failures are classified against `--known` from the store (the observer
    cannot tell a known crash from a new one by its class), at most once a second.

    Every job's end is a look (`job` returns the decision): a look costs one unit added to a
    running test, and the session, which looks once a second, would add a second of jobs
    (50-100 on cpu) past every decision. The per-job look counts every failure as new, so it
    may only PASS (a known failure counted as new only makes PASS harder), or, when there is
    no `--known` list (every failure is new), also FAIL; a FAIL that depends on which failures
    are known waits for the once-a-second look, which reads the store and rebuilds the
    test. A job seen again (a failure pinned on it after it ended) also waits for that look."""

    def __init__(self, spec: GateSpec, run_dir: Path):
        self.spec = spec
        self.run_dir = run_dir
        self.units: dict[Hashable, tuple[Hashable, bool]] = {}  # job key -> (cluster, failed)
        self.failed_outcomes = 0
        self.classified_at = 0  # failed_outcomes when the store was last read
        self.known_only: set[Hashable] = set()  # failed jobs whose failures are all known
        self.fatal_new: str | None = None
        self._orphans = 0
        self.live: SequentialTest | None = SequentialTest(spec)  # None: rebuild at next look
        self._fail_live = not spec.known.entries  # no known list: a per-job FAIL is sound too
        self._fatal_pending = False  # a fatal-class failure not yet classified from the store
        self.fatal_outcomes = 0
        self._fatal_values = frozenset(c.value for c in spec.fatal)

    def job(self, outcome: Outcome) -> str | None:
        """Every job's end; crashes and hangs pinned on no job count as a failed unit. A stop
        reason when this job decided the gate (class doc), else None."""
        if outcome.job is not None:
            key: Hashable = outcome.job.index
        else:
            self._orphans += 1
            key = ("process", outcome.pid, self._orphans)
        seen = key in self.units
        cluster, failed = self.units.get(key, (outcome.pid, False))
        self.units[key] = (cluster, failed or outcome.failed)
        if outcome.failed:
            self.failed_outcomes += 1
        if self._fatal_values.intersection(outcome.classes):
            self.fatal_outcomes += 1  # new or known: only the store can tell
            self._fatal_pending = True
        if seen:
            self.live = None
        if self.live is None or outcome.job is None:  # a failure pinned on no job: the
            return None  # verdict counts none (rates are per job): the once-a-second look
        self.live.add(cluster, failed or outcome.failed)
        if self.live.step() is Decision.CONTINUE:
            return None
        decision = self.live.decision()  # the design effect refreshed, as the replay has it
        if decision is Decision.CONTINUE or self._fatal_pending:
            return None  # a fatal failure not yet classified: the once-a-second look
        if self.failed_outcomes and not self._fail_live:
            return None  # which failures are known decides it: the once-a-second look
        return _stop_reason(decision)

    def _classify(self) -> None:
        """Which failed jobs only had known failures; whether a new fatal one exists."""
        try:
            data = rundata.load([self.run_dir])
        except Exception:  # the store mid-write: try again next second
            return
        self.classified_at = self.failed_outcomes
        fatal_rows = sum(1 for r in data.failures if r["class"] in self._fatal_values)
        if fatal_rows >= self.fatal_outcomes:  # every fatal failure told is in the store
            self._fatal_pending = False
        sigs = signatures.build(data)
        new_jobs: set[Hashable] = set()
        known_jobs: set[Hashable] = set()
        for s in sigs:
            k = self.spec.known.lookup_signature(s)
            (known_jobs if k else new_jobs).update(i for _, i in failed_jobs(s))
            if k is None and FailureClass(s.cls) in self.spec.fatal and self.fatal_new is None:
                self.fatal_new = f"new {s.cls} {s.id}: {s.describe()}"
        self.known_only = known_jobs - new_jobs

    def should_stop(self) -> str | None:
        if self.failed_outcomes != self.classified_at:
            self._classify()
        if self.fatal_new:
            return f"gate decided: FAIL ({self.fatal_new})"
        test = SequentialTest(self.spec)
        for key, (cluster, failed) in self.units.items():
            test.add(cluster, failed and key not in self.known_only)
        self.live = test  # later jobs add to what the store says now
        decision = test.decision()
        if decision is Decision.CONTINUE or (decision is Decision.ACCEPT_H0
                                             and self._fatal_pending):
            return None  # a PASS waits until every fatal failure told is in the store
        return _stop_reason(decision)


def _stop_reason(decision: Decision) -> str:
    verdict = Verdict.PASS if decision is Decision.ACCEPT_H0 else Verdict.FAIL
    return StopReason.GATE.text(f"{verdict.value} ({decision.describe()})")


def gate_run_dir(results: Path | None) -> Path:
    """The gate's run folder: the observer reads it while the soak writes it."""
    if results is not None:
        return results
    return Path("results") / f"gate-{time.strftime('%Y%m%d-%H%M%S')}-{_pid()}"


def _pid() -> int:
    import os

    return os.getpid()


def run_gate(opts: SoakOptions, spec: GateSpec) -> GateResult:
    """Runs a soak (its duration is the budget) that stops as soon as the gate is decided,
    then decides from its store."""
    from stress.soak.run import run_soak

    opts.results = gate_run_dir(opts.results)
    if opts.max_jobs_per_worker is None and Engine.of(opts.engine) is Engine.PYTHON:
        opts.max_jobs_per_worker = GATE_JOBS_PER_WORKER
    observer = GateObserver(spec, opts.results)
    summary = run_soak(opts, observer=observer)
    stopped = StopReason.of(summary.get("stop_reason"))
    return evaluate([opts.results], spec, budget_ended=stopped is StopReason.DURATION)
