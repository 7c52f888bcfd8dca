"""summary.json: the run's outcome, rebuilt from the database at any time (even after the
parent was SIGKILLed midway), so the file and the database can never disagree for long."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from stress.engine.failures import ALL_CLASSES, FailureClass
from stress.programs.cache import atomic_write
from stress.store.db import DB_NAME, connect

SUMMARY_NAME = "summary.json"
_DETAIL_LIMIT: int = 500  # failures listed in failures_detail; counts always cover all


def build(run_dir: Path) -> dict[str, Any]:
    db = connect(run_dir / DB_NAME, readonly=True)
    try:
        return _build(db, run_dir)
    finally:
        db.close()


def _build(db: sqlite3.Connection, run_dir: Path) -> dict[str, Any]:
    run = db.execute("SELECT * FROM runs ORDER BY started_at LIMIT 1").fetchone()
    if run is None:
        raise ValueError(f"{run_dir} holds no run")
    run_id = run["run_id"]
    totals = db.execute(
        "SELECT COUNT(*) AS jobs, COALESCE(SUM(invocations),0) AS inv, COALESCE(SUM(ok),0) AS ok,"
        " COALESCE(SUM(errors),0) AS err, COALESCE(SUM(miscompare),0) AS mis,"
        " COALESCE(SUM(nondeterministic),0) AS nondet, COALESCE(SUM(devices_created),0) AS devs,"
        " MAX(ended_at) AS last_end FROM jobs WHERE run_id=?", (run_id,)).fetchone()
    failures = {c: 0 for c in ALL_CLASSES}
    failures[FailureClass.ERROR.value] = int(totals["err"])
    failures[FailureClass.MISCOMPARE.value] = int(totals["mis"])
    for row in db.execute("SELECT class, COUNT(*) FROM failures WHERE run_id=? AND class IN "
                          "('crash','hang','teardown_hang') GROUP BY class", (run_id,)):
        failures[row[0]] = int(row[1])
    patterns = {r[0]: int(r[1]) for r in db.execute(
        "SELECT pattern, SUM(invocations) FROM jobs WHERE run_id=? GROUP BY pattern ORDER BY 1",
        (run_id,))}
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
    ended = run["ended_at"] or totals["last_end"] or run["started_at"]
    duration = max(0.0, ended - run["started_at"])
    workers = db.execute("SELECT COUNT(*), COUNT(DISTINCT worker) FROM workers WHERE run_id=?",
                         (run_id,)).fetchone()
    manifest = json.loads(run["manifest"])
    phases = {r[0]: {"seconds": round(r[1], 3), "count": r[2]} for r in db.execute(
        "SELECT phase, seconds, count FROM phases WHERE run_id=?", (run_id,))}
    inv = int(totals["inv"])
    return {
        "run_id": run_id, "results_dir": str(run_dir), "status": run["status"],
        "stop_reason": run["stop_reason"],
        "seed": run["seed"], "invocations": inv, "ok": int(totals["ok"]),
        "failures": failures, "failed": sum(failures.values()) > 0,
        "patterns": patterns, "jobs": int(totals["jobs"]),
        "nondeterministic": int(totals["nondet"]), "devices_created": int(totals["devs"]),
        "worker_processes": int(workers[0]), "duration_s": round(duration, 3),
        "invocations_per_s": round(inv / duration, 1) if duration else 0.0,
        "failures_detail": detail, "command": run["command"], "phases": phases,
        "manifest": manifest,
    }


def write(run_dir: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rebuilds summary.json; `extra` adds keys computed by higher stages (signatures)."""
    summary = build(run_dir)
    summary.update(extra or {})
    atomic_write(run_dir / SUMMARY_NAME, (json.dumps(summary, indent=1) + "\n").encode())
    return summary
