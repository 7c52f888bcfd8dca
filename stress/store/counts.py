"""The counts of a store: one definition of every number a report shows (jobs, invocations,
process exits, teardowns, devices, failures by class, duration), read by SQL from the store
and used by summary.json, the terminal summary and every report format (issue 28 item 3).

* a **job** is one that started: it has a job row (it finished) or a failure row naming it
  (it died with its process before its row was written); a requeued job counts once;
* a **process exit** (the exposure of the driver's exit path) is a worker process that ended
  after finishing a job (`device_used`), or whose exit a failure is pinned on; harness
  errors and processes that never ran a job are not exposures;
* **full teardowns** and **handle releases** are the jobs' own plus those a process did on its
  way out (its `bye`: the last device released, or devices left alive at exit);
* **tests** (exec runs): the test runner's own counts, summed over the jobs whose output had
  its summary (a clean job's row, else its failure's evidence), with the tests each ran;
  jobs that ran none are counted apart (`no_test_jobs`: flagged, never clean);
* **command processes** (exec runs): each job's process of the user's command, by how it
  ended (exited 0, exited non-zero, killed by a signal, killed by us at a deadline);
* the **duration** of several runs (a merged folder) is the wall-clock time their intervals
  cover: shards that ran side by side count once, gaps between them not at all.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stress.vocab import ALL_CLASSES, Engine, FailureClass, RunStatus, driver_teardowns

EXIT_OUTCOMES: tuple[str, ...] = ("clean", "crash", "hang", "error")
_CASE_LIMIT: int = 100_000  # program x pattern cases kept (JUnit); a corpus has ~800


@dataclass
class PatternCounts:
    """One pattern's share of a run: the rows of every per-pattern table."""

    pattern: str
    jobs: int = 0
    invocations: int = 0
    exits: Counter[str] = field(default_factory=Counter)  # process exits by outcome
    full_teardowns: int = 0
    handle_releases: int = 0
    driver_teardowns: int = 0  # HAL drivers its finished jobs created and destroyed

    @property
    def process_exits(self) -> int:
        return sum(self.exits.values())

    def add(self, other: PatternCounts) -> None:
        self.jobs += other.jobs
        self.invocations += other.invocations
        self.exits.update(other.exits)
        self.full_teardowns += other.full_teardowns
        self.handle_releases += other.handle_releases
        self.driver_teardowns += other.driver_teardowns


@dataclass
class CaseCounts:
    """A program x pattern (a JUnit testcase): jobs started, invocations, seconds of its jobs."""

    jobs: int = 0
    invocations: int = 0
    seconds: float = 0.0


@dataclass
class Counts:
    runs: int = 0
    engines: set[str] = field(default_factory=set)
    intervals: list[tuple[float, float]] = field(default_factory=list)  # (start, end) per run
    jobs: int = 0
    jobs_finished: int = 0
    invocations: int = 0
    ok: int = 0
    nondeterministic: int = 0
    devices_created: int = 0
    worker_processes: int = 0
    harness_errors: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALL_CLASSES, 0))
    patterns: dict[str, PatternCounts] = field(default_factory=dict)
    cases: dict[tuple[str, str], CaseCounts] = field(default_factory=dict)
    exposures_known: bool = True  # False: a store from before m004 (no exit facts)
    tests: Counter[str] = field(default_factory=Counter)  # the runners' counts, and "ran"
    jobs_with_tests: int = 0  # jobs whose runner's summary was read
    no_test_jobs: int = 0  # ... of which ran no test
    command_processes: Counter[str] = field(default_factory=Counter)  # exec: how they ended

    @property
    def duration_s(self) -> float:
        """Seconds of wall clock the runs cover (overlaps once, gaps not at all)."""
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.intervals):
            if b <= end:
                continue
            total += b - max(a, end)
            end = b
        return total

    def per_s(self, n: int) -> float:
        d = self.duration_s
        return round(n / d, 3) if d else 0.0

    @property
    def process_exits(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for p in self.patterns.values():
            out.update(p.exits)
        return out

    @property
    def full_teardowns(self) -> int:
        return sum(p.full_teardowns for p in self.patterns.values())

    @property
    def handle_releases(self) -> int:
        return sum(p.handle_releases for p in self.patterns.values())

    @property
    def driver_teardowns(self) -> int:
        return sum(p.driver_teardowns for p in self.patterns.values())

    @property
    def knows_devices(self) -> bool:
        """False when a run's jobs bring their own devices (exec: the user's command)."""
        return all(Engine.of(e).knows_devices for e in self.engines)

    @property
    def failed(self) -> bool:
        return sum(self.failures.values()) > 0

    def add(self, other: Counts) -> None:
        for name in ("runs", "jobs", "jobs_finished", "invocations", "ok", "nondeterministic",
                     "devices_created", "worker_processes", "harness_errors"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.engines |= other.engines
        self.intervals += other.intervals
        for c, n in other.failures.items():
            self.failures[c] = self.failures.get(c, 0) + n
        for name, p in other.patterns.items():
            self.patterns.setdefault(name, PatternCounts(name)).add(p)
        for key, case in other.cases.items():
            mine = self.cases.setdefault(key, CaseCounts())
            mine.jobs += case.jobs
            mine.invocations += case.invocations
            mine.seconds += case.seconds
        self.exposures_known = self.exposures_known and other.exposures_known
        self.tests.update(other.tests)
        self.jobs_with_tests += other.jobs_with_tests
        self.no_test_jobs += other.no_test_jobs
        self.command_processes.update(other.command_processes)

    def exposures(self) -> dict[str, Any]:
        """summary.json's `exposures` (docs/reports.md)."""
        if not self.exposures_known:
            return {"available": False}
        exits = self.process_exits
        totals = {"total": sum(exits.values()), **{k: exits.get(k, 0) for k in EXIT_OUTCOMES}}
        pats = sorted(self.patterns.values(), key=lambda p: p.pattern)
        return {
            "process_exits": {**totals, "per_s": self.per_s(totals["total"]), "by_pattern": {
                p.pattern: {"total": p.process_exits, **{k: p.exits.get(k, 0)
                                                         for k in EXIT_OUTCOMES}}
                for p in pats if p.process_exits}},
            "full_teardowns": {"total": self.full_teardowns,
                               "per_s": self.per_s(self.full_teardowns),
                               "by_pattern": {p.pattern: p.full_teardowns for p in pats}},
            "handle_releases": {"total": self.handle_releases,
                                "per_s": self.per_s(self.handle_releases),
                                "by_pattern": {p.pattern: p.handle_releases for p in pats}},
            "driver_teardowns": {"total": self.driver_teardowns,
                                 "per_s": self.per_s(self.driver_teardowns),
                                 "by_pattern": {p.pattern: p.driver_teardowns for p in pats
                                                if p.driver_teardowns}},
        }

    def as_dict(self) -> dict[str, Any]:
        """The keys of summary.json these counts own."""
        d = self.duration_s
        return {"invocations": self.invocations, "ok": self.ok, "failures": dict(self.failures),
                "failed": self.failed, "jobs": self.jobs, "jobs_finished": self.jobs_finished,
                # invocations per job pattern ("pool", the long-lived workers' own exits and
                #   teardowns, runs no job of its own)
                "patterns": {p: c.invocations for p, c in sorted(self.patterns.items())
                             if c.jobs},
                "jobs_by_pattern": {p: c.jobs for p, c in sorted(self.patterns.items())},
                "nondeterministic": self.nondeterministic,
                "devices_created": self.devices_created if self.knows_devices else None,
                "worker_processes": self.worker_processes, "duration_s": round(d, 3),
                "invocations_per_s": round(self.invocations / d, 1) if d else 0.0,
                "exposures": self.exposures(), "harness_errors": self.harness_errors,
                "engine": "+".join(sorted(self.engines)) or None,
                **({"tests": {"jobs_with_counts": self.jobs_with_tests,
                              "jobs_without_a_test": self.no_test_jobs,
                              **dict(sorted(self.tests.items()))}}
                   if self.jobs_with_tests else {}),
                **({"command_processes": {"total": sum(self.command_processes.values()),
                                          **dict(self.command_processes)}}
                   if Engine.EXEC.value in self.engines else {})}


_ROW_CLASSES: str = ", ".join(f"'{c.value}'" for c in (
    FailureClass.CRASH, FailureClass.HANG, FailureClass.TEARDOWN_HANG, FailureClass.FAILED))
#   classes counted by their failure rows (one per process); errors and miscompares are
#   counted by the jobs that saw them (their rows are examples)
_JOB = "run_id || '/' || job_index"  # a job's identity across the runs of a merged store


def _in(run_ids: Sequence[str]) -> str:
    return f"run_id IN ({', '.join('?' * len(run_ids))})"


# The process exits that are exposures (module doc); a row value IN over the failures pinned
# on an exit, computed once by SQLite (not per worker row).
_EXIT_WHERE = ("ended_at IS NOT NULL AND outcome IN ('clean', 'crash', 'hang', 'error') AND "
               "(device_used = 1 OR (run_id, pid) IN (SELECT run_id, pid FROM failures WHERE "
               "pid IS NOT NULL AND (exposure = 'process_exit' OR last_step = 'worker-exit')))")


def exit_keys(db: sqlite3.Connection, run_ids: Sequence[str]) -> set[tuple[str, int]]:
    """(run_id, pid) of every process exit that is an exposure: the units of per-exit rates."""
    try:
        rows = db.execute(f"SELECT run_id, pid FROM workers WHERE {_in(run_ids)} AND "
                          f"{_EXIT_WHERE}", tuple(run_ids)).fetchall()
    except sqlite3.OperationalError:  # a store from before m004: every ended worker
        rows = db.execute(f"SELECT run_id, pid FROM workers WHERE {_in(run_ids)} AND "
                          "ended_at IS NOT NULL", tuple(run_ids)).fetchall()
    return {(str(r[0]), int(r[1])) for r in rows}


def of_store(db: sqlite3.Connection, run_ids: Iterable[str] | None = None) -> Counts:
    """The counts of the runs `run_ids` of a store (default: every run in it)."""
    if run_ids is None:
        run_ids = [r[0] for r in db.execute("SELECT run_id FROM runs ORDER BY started_at")]
    ids = list(run_ids)
    c = Counts()
    if not ids:
        return c
    where, args = _in(ids), tuple(ids)
    c.runs = len(ids)
    last_end = {r[0]: r[1] for r in db.execute(
        f"SELECT run_id, MAX(ended_at) FROM jobs WHERE {where} GROUP BY run_id", args)}
    for run_id, started, ended, config in db.execute(
            f"SELECT run_id, started_at, ended_at, config FROM runs WHERE {where}", args):
        end = ended or last_end.get(run_id) or started
        c.intervals.append((float(started), max(float(started), float(end))))
        c.engines.add(str(json.loads(config or "{}").get("engine") or Engine.PYTHON.value))
    t = db.execute(
        f"SELECT COUNT(DISTINCT {_JOB}), COALESCE(SUM(invocations),0), COALESCE(SUM(ok),0), "
        f"COALESCE(SUM(errors),0), COALESCE(SUM(miscompare),0), "
        f"COALESCE(SUM(nondeterministic),0), COALESCE(SUM(devices_created),0) FROM jobs "
        f"WHERE {where}", args).fetchone()
    c.jobs_finished, c.invocations, c.ok = int(t[0]), int(t[1]), int(t[2])
    c.nondeterministic, c.devices_created = int(t[5]), int(t[6])
    c.failures[FailureClass.ERROR.value] = int(t[3])
    c.failures[FailureClass.MISCOMPARE.value] = int(t[4])
    for cls, n in db.execute(f"SELECT class, COUNT(*) FROM failures WHERE {where} AND class IN "
                             f"({_ROW_CLASSES}) GROUP BY class", args):
        c.failures[cls] = int(n)
    # errors the parent saw (a non-zero exit after the worker's goodbye, a probe's exit): in
    # no job's error count
    c.failures[FailureClass.ERROR.value] += int(db.execute(
        f"SELECT COUNT(*) FROM failures WHERE {where} AND class = 'error' AND "
        "attribution != 'worker-report'", args).fetchone()[0])
    _jobs(db, where, args, c)
    c.worker_processes = int(db.execute(f"SELECT COUNT(*) FROM workers WHERE {where}",
                                        args).fetchone()[0])
    try:
        c.harness_errors = int(db.execute(f"SELECT COUNT(*) FROM workers WHERE {where} AND "
                                          "outcome = 'harness'", args).fetchone()[0])
        _exits(db, where, args, c)
    except sqlite3.OperationalError:  # a store from before m004
        c.exposures_known = False
    if Engine.EXEC.value in c.engines:
        _tests(db, where, args, c)
        _command_processes(db, where, args, c)
    return c


def _tests(db: sqlite3.Connection, where: str, args: tuple[str, ...], c: Counts) -> None:
    """The test runners' counts of exec jobs: a finished job's row, else the evidence of the
    failure that ended it (one per job)."""
    seen: set[tuple[str, int]] = set()
    try:
        rows = db.execute(f"SELECT run_id, job_index, tests FROM jobs WHERE {where} AND "
                          "tests IS NOT NULL", args).fetchall()
    except sqlite3.OperationalError:  # a store from before m006
        rows = []
    rows += db.execute(f"SELECT run_id, job_index, json_extract(evidence, '$.tests') FROM "
                       f"failures WHERE {where} AND job_index IS NOT NULL AND "
                       "json_extract(evidence, '$.tests') IS NOT NULL ORDER BY id",
                       args).fetchall()
    for run_id, index, text in rows:
        key = (str(run_id), int(index))
        if key in seen:
            continue
        seen.add(key)
        found = json.loads(text)
        counts = {k: int(v) for k, v in (found.get("counts") or {}).items()}
        ran = found.get("ran")
        ran = int(ran) if ran is not None else sum(
            counts.get(k, 0) for k in ("passed", "failed", "errors", "xfailed", "xpassed"))
        c.tests.update(counts)
        c.tests["ran"] += ran
        c.jobs_with_tests += 1
        c.no_test_jobs += int(ran == 0)


def _command_processes(db: sqlite3.Connection, where: str, args: tuple[str, ...],
                       c: Counts) -> None:
    """How each process of the user's command ended (exec runs: one per job)."""
    for code, sig, reason, n in db.execute(
            f"SELECT exit_code, signal, end_reason, COUNT(*) FROM workers WHERE {where} AND "
            "ended_at IS NOT NULL GROUP BY 1, 2, 3", args):
        c.command_processes[_ending(code, sig, reason)] += int(n)


def _ending(code: int | None, sig: str | None, reason: str | None) -> str:
    if reason in (FailureClass.HANG.value, FailureClass.TEARDOWN_HANG.value,
                  "unkillable (D state)", "reaped after SIGKILL"):
        return "killed at a deadline"  # (hangs.py: the class, or unkillable; then reaped)
    if reason in (RunStatus.INTERRUPTED.value, "store error", "internal error"):
        return "stopped with the run"  # (session._kill_all)
    if reason == "harness error":
        return "harness error"
    if sig or (code is not None and code < 0):
        return "killed by a signal"
    return "exited 0" if code == 0 else "exited non-zero"


def _jobs(db: sqlite3.Connection, where: str, args: tuple[str, ...], c: Counts) -> None:
    """Jobs started, per pattern and per program x pattern: job rows, and jobs known only by a
    failure row (they died with their process)."""
    try:
        teardowns = ", COALESCE(SUM(full_teardowns),0), COALESCE(SUM(handle_releases),0)"
        rows = db.execute(
            f"SELECT program, pattern, COUNT(DISTINCT {_JOB}), COALESCE(SUM(invocations),0),"
            f" COALESCE(SUM(ended_at - started_at),0){teardowns} FROM jobs WHERE {where} "
            "GROUP BY program, pattern", args).fetchall()
    except sqlite3.OperationalError:  # a store from before m004: no teardown columns
        rows = [(*r, 0, 0) for r in db.execute(
            f"SELECT program, pattern, COUNT(DISTINCT {_JOB}), COALESCE(SUM(invocations),0),"
            f" COALESCE(SUM(ended_at - started_at),0) FROM jobs WHERE {where} "
            "GROUP BY program, pattern", args)]
    for program, pattern, jobs, inv, secs, full, handle in rows:
        p = c.patterns.setdefault(pattern, PatternCounts(pattern))
        p.jobs += int(jobs)
        p.invocations += int(inv)
        p.full_teardowns += int(full)
        p.handle_releases += int(handle)
        p.driver_teardowns += int(jobs) * driver_teardowns(pattern)  # finished jobs: each
        #   destroyed the drivers its pattern creates before its row was written
        if len(c.cases) < _CASE_LIMIT:
            c.cases[(program, pattern)] = CaseCounts(int(jobs), int(inv), float(secs))
    # a requeued job that finished has both rows: counted above only
    for program, pattern, n in db.execute(
            f"SELECT COALESCE(program, '?'), COALESCE(pattern, '?'), COUNT(*) FROM (SELECT "
            f"DISTINCT run_id, job_index, program, pattern FROM failures WHERE {where} AND "
            "job_index IS NOT NULL AND (run_id, job_index) NOT IN (SELECT run_id, job_index "
            "FROM jobs)) GROUP BY 1, 2", args):
        c.patterns.setdefault(pattern, PatternCounts(pattern)).jobs += int(n)
        c.cases.setdefault((program, pattern), CaseCounts()).jobs += int(n)
    c.jobs = sum(p.jobs for p in c.patterns.values())


def _exits(db: sqlite3.Connection, where: str, args: tuple[str, ...], c: Counts) -> None:
    """Process exits by pattern and outcome, with the teardowns each did on its way out."""
    for pattern, outcome, n, full, handle in db.execute(
            "SELECT COALESCE(pattern, '?'), outcome, COUNT(*), "
            "COALESCE(SUM(COALESCE(json_extract(facts, '$.bye.full_teardowns'), 0) + "
            "(COALESCE(json_extract(facts, '$.bye.devices_alive'), 0) > 0)), 0), "
            "COALESCE(SUM(COALESCE(json_extract(facts, '$.bye.handle_releases'), 0)), 0) "
            f"FROM workers WHERE {where} AND {_EXIT_WHERE} GROUP BY 1, 2", args):
        p = c.patterns.setdefault(pattern, PatternCounts(pattern))
        p.exits[outcome] += int(n)
        p.full_teardowns += int(full)
        p.handle_releases += int(handle)
