from __future__ import annotations

import sqlite3
from pathlib import Path

from stress.store import db, summary


def test_migrations_build_the_final_schema_and_are_idempotent(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "s.db")
    db.migrate(conn)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"schema_migrations", "runs", "jobs", "failures", "workers", "phases",
                      "failure_counts", "windows"}
    versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
    assert versions == [v for v, _, _ in db.MIGRATIONS] and versions[-1] == db.SCHEMA_VERSION
    run_cols = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    assert {"run_id", "manifest", "config", "stop_reason", "seed"} <= run_cols
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_summary_is_rebuilt_from_the_database(tmp_path: Path) -> None:
    store = db.RunStore(tmp_path)
    store.start_run("r1", 5, "iree-stress soak", {"x": 1}, {})
    payload = {"job": {"index": 0, "program": "p", "pattern": "shared", "seed": 1,
                       "invocations": 10},
               "started": 1.0, "ended": 2.0,
               "result": {"invocations": 10, "ok": 9, "miscompare": 1, "errors": 0,
                          "nondeterministic": 0, "devices_created": 1, "latency_sum_us": 5.0,
                          "latency_max_us": 1.0, "latency_hist": [0] * 22, "failures": [],
                          "counts": {}}}
    store.add_job("r1", 0, payload, "failed")
    store.add_failure("r1", {"class": "crash", "signal": "SIGSEGV", "last_step": "invoke",
                             "in_flight": ["t1:invoke"], "program": "p", "pattern": "shared"})
    store.flush()  # the run never ended: as if the parent was killed here
    s = summary.build(tmp_path)
    assert s["invocations"] == 10 and s["failures"]["crash"] == 1
    assert s["failures"]["miscompare"] == 1 and s["status"] == "running"
    assert s["failures_detail"][0]["last_step"] == "invoke"
    assert db.integrity_ok(tmp_path / db.DB_NAME)
    assert isinstance(sqlite3.connect(tmp_path / db.DB_NAME), sqlite3.Connection)
