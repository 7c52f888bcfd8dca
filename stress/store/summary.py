"""summary.json: the run's outcome, rebuilt from the database at any time (even after the
parent was SIGKILLed midway), so the file and the database can never disagree for long."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from stress.fs import atomic_write
from stress.store import counts
from stress.store.db import DB_NAME, connect
from stress.store.rundir import RESUME_PREFIX
from stress.vocab import STATUS_ORDER, RunStatus

SUMMARY_NAME = "summary.json"
_DETAIL_LIMIT: int = 500  # failures listed in failures_detail; counts always cover all


def build(run_dir: Path) -> dict[str, Any]:
    db = connect(run_dir / DB_NAME, readonly=True)
    try:
        return _build(db, run_dir)
    finally:
        db.close()


def _build(db: sqlite3.Connection, run_dir: Path) -> dict[str, Any]:
    all_runs = db.execute("SELECT * FROM runs ORDER BY started_at").fetchall()
    if not all_runs:
        raise ValueError(f"{run_dir} holds no run")
    run = all_runs[0]
    if len(all_runs) > 1:  # a merged store (store/merge.py): the totals cover every run
        return _build_merged(db, run_dir, all_runs)
    return _build_one(db, run_dir, run)


def _build_one(db: sqlite3.Connection, run_dir: Path, run: sqlite3.Row) -> dict[str, Any]:
    run_id = run["run_id"]
    detail = []
    for r in db.execute("SELECT * FROM failures WHERE run_id=? ORDER BY id LIMIT ?",
                        (run_id, _DETAIL_LIMIT)):
        detail.append({"class": r["class"], "signal": r["signal"],
                       "job": {"index": r["job_index"], "program": r["program"],
                               "pattern": r["pattern"], "seed": r["seed"]},
                       "worker": r["worker"], "last_step": r["last_step"],
                       "in_flight": json.loads(r["in_flight"]), "artifacts": r["artifacts"],
                       "message": r["message"][:500], "attribution": r["attribution"],
                       "elapsed_s": round(r["elapsed_s"], 3)})
    phases = {r[0]: {"seconds": round(r[1], 3), "count": r[2]} for r in db.execute(
        "SELECT phase, seconds, count FROM phases WHERE run_id=?", (run_id,))}
    return {
        "run_id": run_id, "results_dir": str(run_dir), "status": run["status"],
        "stop_reason": run["stop_reason"], "seed": run["seed"],
        **counts.of_store(db, [run_id]).as_dict(),
        "failures_detail": detail, "command": run["command"], "phases": phases,
        "manifest": json.loads(run["manifest"]),
    }


_STATUS_ORDER: tuple[str, ...] = tuple(st.value for st in STATUS_ORDER)


def _build_merged(db: sqlite3.Connection, run_dir: Path,
                  runs: list[sqlite3.Row]) -> dict[str, Any]:
    """The counts of every run of a merged store together (store/counts.py: the duration is
    the wall clock the runs cover), `status` the worst, `run_id` the runs joined by '+',
    phases summed, plus `runs` (each run's own id, status, stop reason, shard and counts)."""
    per = [_build_one(db, run_dir, r) for r in runs]
    out: dict[str, Any] = {**per[0], **counts.of_store(db, [r["run_id"] for r in runs]).as_dict()}
    out["failures_detail"] = [d for p in per for d in p["failures_detail"]][:_DETAIL_LIMIT]
    out["phases"] = _sum_numbers([p["phases"] for p in per])
    out["status"] = min((p["status"] for p in per), key=lambda st: _STATUS_ORDER.index(st)
                        if st in _STATUS_ORDER else 0)
    out["stop_reason"] = "; ".join(sorted({p["stop_reason"] or "" for p in per}))
    if _resumed_chain([p["run_id"] for p in per]) and out["status"] != RunStatus.FAILED:
        out["status"] = per[-1]["status"]  # an interrupted run whose plan a resume took up
        out["stop_reason"] = per[-1]["stop_reason"]  # and finished: the plan ran to its end
    out["run_id"] = "+".join(p["run_id"] for p in per)
    out["runs"] = [{"run_id": p["run_id"], "status": p["status"], "stop_reason":
                    p["stop_reason"], "shard": json.loads(r["config"] or "{}").get("shard"),
                    "invocations": p["invocations"], "jobs": p["jobs"],
                    "duration_s": p["duration_s"], "invocations_per_s": p["invocations_per_s"]}
                   for p, r in zip(per, runs, strict=True)]
    return out


def _resumed_chain(run_ids: list[str]) -> bool:
    """The runs are one plan's: a first run and its `--resume` runs (`FIRST-resume-K`, the
    oldest first), not the shards of a merge."""
    return len(run_ids) > 1 and all(r.startswith(f"{run_ids[0]}-{RESUME_PREFIX}")
                                    for r in run_ids[1:])


def _sum_numbers(dicts: list[Any]) -> Any:
    """Nested dicts with numbers summed key by key (the first one's other values kept)."""
    first = dicts[0]
    if isinstance(first, dict):
        keys = [k for d in dicts if isinstance(d, dict) for k in d]
        return {k: _sum_numbers([d[k] for d in dicts if isinstance(d, dict) and k in d])
                for k in dict.fromkeys(keys)}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        total = sum(v for v in dicts if isinstance(v, (int, float)))
        return round(total, 3) if isinstance(total, float) else total
    return first


def write(run_dir: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rebuilds summary.json; `extra` adds keys computed by higher stages (signatures)."""
    summary = build(run_dir)
    summary.update(extra or {})
    atomic_write(run_dir / SUMMARY_NAME, (json.dumps(summary, indent=1) + "\n").encode())
    return summary
