"""The units failures are counted against (exposures) and the clusters they share fate in.

* job: every finished job, plus every job that died with its process (it has a failure row
  but no job row); its cluster is the worker process that ran it (`pid`; stores from before
  m004 have no job pid: the worker slot then stands for all its processes, coarser clusters,
  wider intervals).
* process exit: every worker process that ended (workers table); failures at `worker-exit`
  (or with exposure `process_exit`) are rated per exit. Processes are independent clusters.
* full teardown: the last device of a process released (jobs.full_teardowns); failures with
  exposure `full_teardown` are rated per full teardown, clustered by process.
* driver teardown (issue 39): a HAL driver a job created and destroyed (driver-churn one per
  job, instance-churn one per chunk; the registry's `driver_teardowns`); failures of those
  patterns at driver-release or the gc pass after it are rated per driver teardown, clustered
  by process.

Issue 17 item 6, the exit-path ablation, is `exit_paths`: the teardown failure rate per
process exit of each exit path, and the control arm (`os._exit`, which skips the driver's exit
handlers) against the rest.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from stress.analysis.rundata import RunData
from stress.analysis.stats import (
    Comparison,
    Rate,
    Unit,
    benjamini_hochberg,
    clustered_rate,
    compare_rates,
)
from stress.vocab import CONTROL_EXIT_PATHS, driver_teardowns

ABLATION_FDR: float = 0.05  # a path "fails more than the control" at this false-discovery rate
_TEARDOWN_CLASSES: frozenset[str] = frozenset({"crash", "teardown_hang", "error"})


class Exposure(str, enum.Enum):
    JOB = "job"
    PROCESS_EXIT = "process exit"
    FULL_TEARDOWN = "full teardown"
    DRIVER_TEARDOWN = "driver teardown"

    def describe(self) -> str:
        return {Exposure.JOB: "per job", Exposure.PROCESS_EXIT: "per process exit",
                Exposure.FULL_TEARDOWN: "per full driver teardown",
                Exposure.DRIVER_TEARDOWN: "per HAL driver destroyed"}[self]


_DRIVER_STEPS: frozenset[str] = frozenset({"driver-release", "gc"})  # a job's driver destroy


JobKey = tuple[str, int]
ProcKey = tuple[str, int]


def exposure_of(row: dict[str, Any]) -> Exposure:
    """What a failure row is an exposure of: its recorded `exposure` (m004), else a failure at
    worker-exit is a process exit's, else the job's (rows without a job add to the count but
    hit no job)."""
    e = (row.get("exposure") or "").replace("_", " ")
    if e in ("process exit", "full teardown"):
        return Exposure(e)
    if row.get("last_step") == "worker-exit":
        return Exposure.PROCESS_EXIT
    if row.get("last_step") in _DRIVER_STEPS and row.get("job_index") is not None and \
            driver_teardowns(str(row.get("pattern") or "")):
        return Exposure.DRIVER_TEARDOWN
    return Exposure.JOB  # a job-less failure (a worker's start-up) counts as an occurrence only


def job_clusters(data: RunData) -> dict[JobKey, Hashable]:
    out: dict[JobKey, Hashable] = {}
    for j in data.jobs:
        out[(j["run_id"], int(j["job_index"]))] = _cluster(j)
    for f in data.failures:
        if f.get("job_index") is None:
            continue
        key = (f["run_id"], int(f["job_index"]))
        if key not in out:
            out[key] = _cluster(f)
    return out


def _cluster(row: dict[str, Any]) -> Hashable:
    """The worker process of a job or failure row; the worker slot for stores without pids."""
    if row.get("pid") is not None:
        return ("pid", row["run_id"], row["pid"])
    return ("worker", row["run_id"], row.get("worker"))


def process_exits(data: RunData) -> dict[ProcKey, dict[str, Any]]:
    """The process exits that are exposures (store/counts.py says which), by (run, pid)."""
    return {k: w for w in data.workers if w.get("ended_at")
            for k in [(w["run_id"], int(w["pid"]))]
            if data.exit_keys is None or k in data.exit_keys}


def job_rate(data: RunData, hit: set[JobKey], clusters: dict[JobKey, Hashable] | None = None,
             where: set[JobKey] | None = None) -> Rate:
    """Share of jobs (restricted to `where`) among `hit`, clustered by process."""
    clusters = clusters if clusters is not None else job_clusters(data)
    units = [Unit(c, int(k in hit)) for k, c in clusters.items() if where is None or k in where]
    return clustered_rate(units, "job")


def exit_rate(data: RunData, hit: set[ProcKey], where: set[ProcKey] | None = None) -> Rate:
    exits = process_exits(data)
    keys = set(exits) | hit if where is None else set(where)
    units = [Unit(k, int(k in hit)) for k in keys]
    return clustered_rate(units, "process exit")


def failing_exits(data: RunData) -> Rate | None:
    """Process exits hit by any failure pinned on an exit; None when none was."""
    hit = {k for row in data.failures if exposure_of(row) is Exposure.PROCESS_EXIT
           for k in [proc_key(row)] if k}
    return exit_rate(data, hit) if hit else None


def full_teardown_rate(data: RunData, hit: Counter[JobKey]) -> Rate:
    """Failures per full teardown: each job contributes its full_teardowns units."""
    clusters = job_clusters(data)
    units: list[Unit] = []
    for j in data.jobs:
        key = (j["run_id"], int(j["job_index"]))
        m = int(j.get("full_teardowns") or 0)
        fails = min(m, hit.get(key, 0))
        units += [Unit(clusters[key], int(i < fails)) for i in range(m)]
    return clustered_rate(units, "full teardown")


def driver_teardown_rate(data: RunData, hit: Counter[JobKey]) -> Rate:
    """Failures per HAL driver destroyed in a job: each finished job contributes its pattern's
    driver teardowns; a job that died in one (no job row) one failed teardown."""
    clusters = job_clusters(data)
    units: list[Unit] = []
    done: set[JobKey] = set()
    for j in data.jobs:
        key = (j["run_id"], int(j["job_index"]))
        m = driver_teardowns(str(j.get("pattern") or ""))
        done.add(key)
        fails = min(m, hit.get(key, 0))
        units += [Unit(clusters[key], int(i < fails)) for i in range(m)]
    units += [Unit(clusters.get(k, k), 1) for k in hit if k not in done]
    return clustered_rate(units, "driver teardown")


def proc_key(row: dict[str, Any]) -> ProcKey | None:
    return (row["run_id"], int(row["pid"])) if row.get("pid") is not None else None


def job_key(row: dict[str, Any]) -> JobKey | None:
    return (row["run_id"], int(row["job_index"])) if row.get("job_index") is not None else None


@dataclass(frozen=True)
class ExitPathRow:
    exit_path: str
    rate: Rate  # teardown failures per process exit
    control: bool
    p: float | None = None  # this path against the control arm (one-sided Fisher)
    q: float | None = None  # Benjamini-Hochberg across the paths

    @property
    def worse_than_control(self) -> bool:
        return self.q is not None and self.q < ABLATION_FDR


@dataclass(frozen=True)
class ExitPathAblation:
    rows: list[ExitPathRow]
    comparison: Comparison | None  # every other path together (B) against the control (A)

    def verdict(self) -> str:
        c = self.comparison
        if c is None:
            return "no control arm (os._exit) in these runs: cannot say whether teardown is " \
                   "where the failures live"
        worse = [r for r in self.rows if r.worse_than_control]
        if worse:
            return "teardown is where the failures live: " + "; ".join(
                f"{r.exit_path} {r.rate.failures}/{r.rate.units} vs the os._exit control "
                f"(q = {r.q:.2g})" for r in worse)
        if c.p_b_worse < ABLATION_FDR:
            return (f"teardown is where the failures live: the exit paths through the driver's "
                    f"exit handlers together fail more than the os._exit control (Fisher p = "
                    f"{c.p_b_worse:.2g})")
        return f"no difference shown between the exit paths and the os._exit control " \
               f"(Fisher p = {c.p_b_worse:.2g} together; no single path at q < " \
               f"{ABLATION_FDR:g})"

    def as_dict(self) -> dict[str, Any]:
        return {"rows": [{"exit_path": r.exit_path, "control": r.control, "p": r.p, "q": r.q,
                          "worse_than_control": r.worse_than_control, **r.rate.as_dict()}
                         for r in self.rows],
                "comparison": self.comparison.as_dict() if self.comparison else None,
                "verdict": self.verdict()}


def exit_paths(data: RunData) -> ExitPathAblation | None:
    """Teardown failure rate per process exit of each exit path (workers.exit_path); each path
    against the control arm (Fisher, one-sided, Benjamini-Hochberg across paths), and all of
    them together against it."""
    exits = process_exits(data)
    by_path: dict[str, set[ProcKey]] = defaultdict(set)
    for k, w in exits.items():
        if w.get("exit_path"):
            by_path[str(w["exit_path"])].add(k)
    if not by_path:
        return None
    failed = {k for f in data.failures if f["class"] in _TEARDOWN_CLASSES
              and exposure_of(f) is Exposure.PROCESS_EXIT for k in [proc_key(f)] if k}
    ctrl = set().union(*(ks for p, ks in by_path.items() if p in CONTROL_EXIT_PATHS))
    rest = set().union(*(ks for p, ks in by_path.items() if p not in CONTROL_EXIT_PATHS))
    rates = {p: exit_rate(data, failed & ks, ks) for p, ks in sorted(by_path.items())}
    if not ctrl or not rest:
        return ExitPathAblation([ExitPathRow(p, r, p in CONTROL_EXIT_PATHS)
                                 for p, r in rates.items()], None)
    control = exit_rate(data, failed & ctrl, ctrl)
    tested = [p for p in rates if p not in CONTROL_EXIT_PATHS]
    pvals = [compare_rates(control, rates[p]).p_b_worse for p in tested]
    qvals = dict(zip(tested, benjamini_hochberg(pvals), strict=True))
    pmap = dict(zip(tested, pvals, strict=True))
    rows = [ExitPathRow(p, r, p in CONTROL_EXIT_PATHS, pmap.get(p), qvals.get(p))
            for p, r in rates.items()]
    return ExitPathAblation(rows, compare_rates(control, exit_rate(data, failed & rest, rest)))
