"""The run database: one SQLite file per run folder, written only by the parent.

WAL mode with synchronous=NORMAL: a SIGKILLed parent loses at most the last uncommitted batch,
never the file's integrity. The schema changes only through the numbered migrations below.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

DB_NAME = "stress.db"


def _m001_initial(db: sqlite3.Connection) -> None:
    db.executescript("""
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY, started_at REAL NOT NULL, ended_at REAL,
        status TEXT NOT NULL, seed INTEGER NOT NULL, command TEXT NOT NULL,
        manifest TEXT NOT NULL, config TEXT NOT NULL);
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, job_index INTEGER NOT NULL,
        program TEXT NOT NULL, pattern TEXT NOT NULL, seed INTEGER NOT NULL,
        worker INTEGER NOT NULL, planned INTEGER NOT NULL, invocations INTEGER NOT NULL,
        ok INTEGER NOT NULL, miscompare INTEGER NOT NULL, errors INTEGER NOT NULL,
        nondeterministic INTEGER NOT NULL, devices_created INTEGER NOT NULL,
        started_at REAL NOT NULL, ended_at REAL NOT NULL, latency_sum_us REAL NOT NULL,
        latency_max_us REAL NOT NULL, latency_hist TEXT NOT NULL, outcome TEXT NOT NULL);
    CREATE INDEX jobs_by_run ON jobs(run_id, job_index);
    CREATE TABLE failures (
        id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, class TEXT NOT NULL, signal TEXT,
        job_index INTEGER, program TEXT, pattern TEXT, seed INTEGER, worker INTEGER,
        pid INTEGER, last_step TEXT, in_flight TEXT NOT NULL, steps TEXT NOT NULL,
        artifacts TEXT, message TEXT NOT NULL, attribution TEXT NOT NULL,
        detected_at REAL NOT NULL, elapsed_s REAL NOT NULL);
    CREATE INDEX failures_by_run ON failures(run_id);
    CREATE TABLE workers (
        id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, worker INTEGER NOT NULL,
        generation INTEGER NOT NULL, pid INTEGER NOT NULL, started_at REAL NOT NULL,
        ended_at REAL, exit_code INTEGER, signal TEXT, end_reason TEXT, facts TEXT);
    """)


def _m002_phases(db: sqlite3.Connection) -> None:
    db.executescript("""
    CREATE TABLE phases (
        run_id TEXT NOT NULL, phase TEXT NOT NULL, seconds REAL NOT NULL, count INTEGER NOT NULL,
        PRIMARY KEY (run_id, phase));
    ALTER TABLE runs ADD COLUMN stop_reason TEXT;
    """)


def _m003_windows(db: sqlite3.Connection) -> None:
    db.executescript("""
    CREATE TABLE failure_counts (
        run_id TEXT NOT NULL, job_index INTEGER NOT NULL, program TEXT NOT NULL,
        pattern TEXT NOT NULL, key TEXT NOT NULL, count INTEGER NOT NULL);
    CREATE INDEX failure_counts_by_run ON failure_counts(run_id);
    CREATE TABLE windows (
        id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, kind TEXT NOT NULL, t REAL NOT NULL,
        pattern TEXT, tokens TEXT NOT NULL, in_flight TEXT NOT NULL);
    CREATE INDEX windows_by_run ON windows(run_id, kind);
    """)


MIGRATIONS: list[tuple[int, str, Callable[[sqlite3.Connection], None]]] = [
    (1, "m001_initial", _m001_initial),
    (2, "m002_phases", _m002_phases),
    (3, "m003_windows", _m003_windows),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    else:
        db = sqlite3.connect(path, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        migrate(db)
    db.row_factory = sqlite3.Row
    return db


def migrate(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
               "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)")
    done = {r[0] for r in db.execute("SELECT version FROM schema_migrations")}
    for version, name, fn in MIGRATIONS:
        if version in done:
            continue
        with db:
            fn(db)
            db.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)",
                       (version, name, time.time()))


def integrity_ok(path: Path) -> bool:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return bool(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    finally:
        db.close()


class RunStore:
    """Parent-side writer; batches commits (every `flush()` or when `_BATCH` rows wait)."""

    _BATCH: int = 200  # rows per transaction at most; jobs arrive ~100/s on cpu

    def __init__(self, run_dir: Path):
        self.path = run_dir / DB_NAME
        self.db = connect(self.path)
        self._pending = 0

    def start_run(self, run_id: str, seed: int, command: str, manifest: dict[str, Any],
                  config: dict[str, Any]) -> None:
        with self.db:
            self.db.execute("INSERT INTO runs (run_id, started_at, status, seed, command, "
                            "manifest, config) VALUES (?, ?, 'running', ?, ?, ?, ?)",
                            (run_id, time.time(), seed, command, json.dumps(manifest),
                             json.dumps(config)))

    def update_manifest(self, run_id: str, manifest: dict[str, Any]) -> None:
        self.db.execute("UPDATE runs SET manifest=? WHERE run_id=?",
                        (json.dumps(manifest), run_id))
        self._bump()

    def end_run(self, run_id: str, status: str, stop_reason: str = "") -> None:
        self.db.execute("UPDATE runs SET ended_at=?, status=?, stop_reason=? WHERE run_id=?",
                        (time.time(), status, stop_reason, run_id))
        self.flush()

    def add_job(self, run_id: str, worker: int, payload: dict[str, Any], outcome: str) -> None:
        job, res = payload["job"], payload["result"]
        self.db.execute(
            "INSERT INTO jobs (run_id, job_index, program, pattern, seed, worker, planned, "
            "invocations, ok, miscompare, errors, nondeterministic, devices_created, started_at,"
            " ended_at, latency_sum_us, latency_max_us, latency_hist, outcome) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, job["index"], job["program"], job["pattern"], job["seed"], worker,
             job["invocations"], res["invocations"], res["ok"], res["miscompare"], res["errors"],
             res["nondeterministic"], res["devices_created"], payload["started"],
             payload["ended"], res["latency_sum_us"], res["latency_max_us"],
             json.dumps(res["latency_hist"]), outcome))
        self._bump()

    def add_failure(self, run_id: str, f: dict[str, Any]) -> int:
        cur = self.db.execute(
            "INSERT INTO failures (run_id, class, signal, job_index, program, pattern, seed, "
            "worker, pid, last_step, in_flight, steps, artifacts, message, attribution, "
            "detected_at, elapsed_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, f["class"], f.get("signal"), f.get("job_index"), f.get("program"),
             f.get("pattern"), f.get("seed"), f.get("worker"), f.get("pid"), f.get("last_step"),
             json.dumps(f.get("in_flight", [])), json.dumps(f.get("steps", [])),
             f.get("artifacts"), f.get("message", ""), f.get("attribution", ""),
             f.get("detected_at", time.time()), f.get("elapsed_s", 0.0)))
        self.flush()  # failures are rare and precious: commit now
        return int(cur.lastrowid or 0)

    def add_failure_counts(self, run_id: str, job: dict[str, Any], counts: dict[str, int]) -> None:
        self.db.executemany("INSERT INTO failure_counts VALUES (?,?,?,?,?,?)",
                            [(run_id, job["index"], job["program"], job["pattern"], k, n)
                             for k, n in counts.items()])
        self._bump()

    def add_window(self, run_id: str, kind: str, pattern: str | None, tokens: list[str],
                   in_flight: list[str], slot: int) -> None:
        """Stores reservoir slot `slot` of the run's windows (replacing what it held)."""
        self.db.execute("DELETE FROM windows WHERE run_id=? AND kind=? AND id=?",
                        (run_id, kind, slot))
        self.db.execute("INSERT INTO windows (id, run_id, kind, t, pattern, tokens, in_flight) "
                        "VALUES (?,?,?,?,?,?,?)", (slot, run_id, kind, time.time(), pattern,
                                                   json.dumps(tokens), json.dumps(in_flight)))
        self._bump()

    def add_worker(self, run_id: str, worker: int, gen: int, pid: int) -> int:
        cur = self.db.execute(
            "INSERT INTO workers (run_id, worker, generation, pid, started_at) VALUES (?,?,?,?,?)",
            (run_id, worker, gen, pid, time.time()))
        self._bump()
        return int(cur.lastrowid or 0)

    def end_worker(self, row: int, exit_code: int | None, signal_name: str | None,
                   reason: str, facts: dict[str, Any] | None = None) -> None:
        self.db.execute("UPDATE workers SET ended_at=?, exit_code=?, signal=?, end_reason=?, "
                        "facts=COALESCE(?, facts) WHERE id=?",
                        (time.time(), exit_code, signal_name, reason,
                         json.dumps(facts) if facts else None, row))
        self._bump()

    def set_phases(self, run_id: str, phases: Iterable[tuple[str, float, int]]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO phases VALUES (?,?,?,?)",
                            [(run_id, p, s, c) for p, s, c in phases])
        self._bump()

    def _bump(self) -> None:
        self._pending += 1
        if self._pending >= self._BATCH:
            self.flush()

    def flush(self) -> None:
        self.db.commit()
        self._pending = 0

    def close(self) -> None:
        self.flush()
        self.db.close()
