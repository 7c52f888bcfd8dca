"""summary.json: the run's outcome, rebuilt from the database at any time (even after the
parent was SIGKILLed midway), so the file and the database can never disagree for long."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from stress.programs.cache import atomic_write
from stress.store.db import DB_NAME, connect
from stress.vocab import ALL_CLASSES, FailureClass

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
    # errors the parent saw (a non-zero exit after the worker's goodbye, a probe's exit):
    # not counted in any job's errors
    failures[FailureClass.ERROR.value] += int(db.execute(
        "SELECT COUNT(*) FROM failures WHERE run_id=? AND class='error' AND "
        "attribution != 'worker-report'", (run_id,)).fetchone()[0])
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
    exposures = _exposures(db, run_id, duration)
    harness = _scalar(db, "SELECT COUNT(*) FROM workers WHERE run_id=? AND outcome='harness'",
                      run_id)
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
        "exposures": exposures, "harness_errors": harness, "manifest": manifest,
    }


_STATUS_ORDER: tuple[str, ...] = ("failed", "interrupted", "running", "completed")


def _build_merged(db: sqlite3.Connection, run_dir: Path,
                  runs: list[sqlite3.Row]) -> dict[str, Any]:
    """Every key of a one-run summary, summed over the runs of a merged store (`status`: the
    worst; `run_id`: the runs joined by '+'; times: first start to last end), plus `runs`
    (each run's own id, status, stop reason and shard)."""
    per = []
    for r in runs:
        one = db.execute("SELECT * FROM runs WHERE run_id=?", (r["run_id"],)).fetchone()
        per.append(_build_one(db, run_dir, one))
    first = dict(per[0])
    out: dict[str, Any] = {**first}
    for key in ("invocations", "ok", "jobs", "nondeterministic", "devices_created",
                "worker_processes", "harness_errors"):
        out[key] = sum(int(p.get(key) or 0) for p in per)
    out["failures"] = {c: sum(p["failures"].get(c, 0) for p in per) for c in first["failures"]}
    out["failed"] = sum(out["failures"].values()) > 0
    patterns: dict[str, int] = {}
    for p in per:
        for k, v in p["patterns"].items():
            patterns[k] = patterns.get(k, 0) + v
    out["patterns"] = dict(sorted(patterns.items()))
    out["failures_detail"] = [d for p in per for d in p["failures_detail"]][:_DETAIL_LIMIT]
    out["exposures"] = _sum_numbers([p["exposures"] for p in per])  # per_s: shards in parallel
    out["phases"] = _sum_numbers([p["phases"] for p in per])
    out["status"] = min((p["status"] for p in per), key=lambda st: _STATUS_ORDER.index(st)
                        if st in _STATUS_ORDER else 0)
    out["stop_reason"] = "; ".join(sorted({p["stop_reason"] or "" for p in per}))
    out["run_id"] = "+".join(p["run_id"] for p in per)
    started = min(float(r["started_at"]) for r in runs)
    ended = max(float(r["ended_at"] or r["started_at"]) for r in runs)
    out["duration_s"] = round(max(0.0, ended - started), 3)
    out["invocations_per_s"] = round(out["invocations"] / out["duration_s"], 1) \
        if out["duration_s"] else 0.0
    out["runs"] = [{"run_id": p["run_id"], "status": p["status"], "stop_reason":
                    p["stop_reason"], "shard": json.loads(r["config"] or "{}").get("shard"),
                    "invocations": p["invocations"], "jobs": p["jobs"]}
                   for p, r in zip(per, runs, strict=True)]
    return out


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


def _scalar(db: sqlite3.Connection, sql: str, *args: Any) -> int:
    try:
        return int(db.execute(sql, args).fetchone()[0] or 0)
    except sqlite3.OperationalError:  # a store from before the column existed
        return 0


_OUTCOMES = ("clean", "crash", "hang", "error")


def _exposures(db: sqlite3.Connection, run_id: str, duration: float) -> dict[str, Any]:
    """How often the run reached the code where teardown failures live: process exits after
    device use (by outcome), full driver-context teardowns (the process's last device
    released, or a process exit with devices alive) and handle-only releases; per pattern
    ("pool" for long-lived workers running mixed patterns) and per second."""
    exits: dict[str, dict[str, int]] = {}
    full: dict[str, int] = {}
    handle: dict[str, int] = {}
    try:
        rows = db.execute("SELECT COALESCE(pattern, '?'), outcome, facts FROM workers "
                          "WHERE run_id=? AND device_used=1 AND ended_at IS NOT NULL",
                          (run_id,)).fetchall()
        jobs = db.execute("SELECT pattern, SUM(full_teardowns), SUM(handle_releases) FROM jobs "
                          "WHERE run_id=? GROUP BY pattern", (run_id,)).fetchall()
    except sqlite3.OperationalError:  # a store from before m004
        return {"available": False}
    for pattern, outcome, facts_text in rows:
        if outcome not in _OUTCOMES:
            continue
        per = exits.setdefault(pattern, dict.fromkeys(("total", *_OUTCOMES), 0))
        per["total"] += 1
        per[outcome] += 1
        bye = (json.loads(facts_text) if facts_text else {}).get("bye") or {}
        full[pattern] = full.get(pattern, 0) + int(bye.get("full_teardowns", 0)) + \
            int(int(bye.get("devices_alive", 0)) > 0)
        handle[pattern] = handle.get(pattern, 0) + int(bye.get("handle_releases", 0))
    for pattern, f, h in jobs:
        full[pattern] = full.get(pattern, 0) + int(f or 0)
        handle[pattern] = handle.get(pattern, 0) + int(h or 0)

    def rate(n: int) -> float:
        return round(n / duration, 3) if duration else 0.0

    totals = dict.fromkeys(("total", *_OUTCOMES), 0)
    for per in exits.values():
        for k in totals:
            totals[k] += per[k]
    return {
        "process_exits": {**totals, "per_s": rate(totals["total"]),
                          "by_pattern": dict(sorted(exits.items()))},
        "full_teardowns": {"total": sum(full.values()), "per_s": rate(sum(full.values())),
                           "by_pattern": dict(sorted(full.items()))},
        "handle_releases": {"total": sum(handle.values()), "per_s": rate(sum(handle.values())),
                            "by_pattern": dict(sorted(handle.items()))},
    }


def write(run_dir: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rebuilds summary.json; `extra` adds keys computed by higher stages (signatures)."""
    summary = build(run_dir)
    summary.update(extra or {})
    atomic_write(run_dir / SUMMARY_NAME, (json.dumps(summary, indent=1) + "\n").encode())
    return summary
