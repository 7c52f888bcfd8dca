"""The store's schema: atomic migrations, version checks for readers, the m004 columns."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stress import cli
from stress.errors import UsageError
from stress.store import db, summary

_JOB = {"index": 4, "program": "p", "pattern": "per-call", "seed": 1, "invocations": 10}
_RESULT = {"invocations": 10, "ok": 10, "miscompare": 0, "errors": 0, "nondeterministic": 0,
           "devices_created": 3, "latency_sum_us": 5.0, "latency_max_us": 1.0,
           "latency_hist": [0] * 22, "failures": [], "counts": {}}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return db.schema_version(conn)
    finally:
        conn.close()


def _store_at(path: Path, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store as an older iree-stress left it: only the first `version` migrations."""
    with monkeypatch.context() as m:
        m.setattr(db, "MIGRATIONS", db.MIGRATIONS[:version])
        m.setattr(db, "SCHEMA_VERSION", version)
        db.connect(path).close()


def test_a_failure_mid_migration_leaves_the_previous_version_and_no_partial_columns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / db.DB_NAME
    _store_at(path, 3, monkeypatch)
    conn = sqlite3.connect(path)

    def deny_workers_alter(action: int, arg1: str | None, *_: object) -> int:
        # m004 alters failures, windows and jobs first: this fails it two thirds of the way in
        if action == sqlite3.SQLITE_ALTER_TABLE and arg1 == "main" and _[0] == "workers":
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(deny_workers_alter)
    with pytest.raises(sqlite3.DatabaseError):
        db.migrate(conn)
    conn.close()
    assert _version(path) == 3
    plain = sqlite3.connect(path)
    assert "native_tid" not in _columns(plain, "failures")
    assert "full_teardowns" not in _columns(plain, "jobs")
    plain.close()
    db.connect(path).close()  # the next clean start applies it whole
    assert _version(path) == db.SCHEMA_VERSION


def test_a_process_killed_mid_migration_leaves_the_previous_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / db.DB_NAME
    _store_at(path, 3, monkeypatch)
    killer = textwrap.dedent(f"""
        import os
        from stress.store import db
        def half(conn):
            conn.execute("CREATE TABLE half_done (x INTEGER)")
            conn.execute("ALTER TABLE jobs ADD COLUMN half_col INTEGER")
            os._exit(9)  # as if SIGKILLed here
        db.MIGRATIONS = db.MIGRATIONS[:3] + [(4, "m004_half", half)]
        db.connect({str(path)!r})
        """)
    proc = subprocess.run([sys.executable, "-c", killer], capture_output=True, text=True,
                          cwd=Path(__file__).parents[2])
    assert proc.returncode == 9, proc.stderr
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "half_done" not in tables and "half_col" not in _columns(conn, "jobs")
    assert db.schema_version(conn) == 3
    conn.close()


def test_a_store_from_a_newer_iree_stress_is_refused_with_one_clear_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / db.DB_NAME
    db.connect(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (7, 'm007_future', 0)")
    conn.close()
    with pytest.raises(db.StoreVersionError) as err:
        db.connect(path, readonly=True)
    assert isinstance(err.value, UsageError)
    assert f"written by a newer iree-stress (schema 7 > {db.SCHEMA_VERSION})" in str(err.value)
    with pytest.raises(db.StoreVersionError):
        db.connect(path)  # nor written to: its columns are unknown here
    monkeypatch.setattr(sys, "argv", ["iree-stress", "report", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and "schema 7 >" in err_lines[0]


def test_a_store_written_before_m004_is_still_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:
        m.setattr(db, "MIGRATIONS", db.MIGRATIONS[:3])
        m.setattr(db, "SCHEMA_VERSION", 3)
        conn = db.connect(tmp_path / db.DB_NAME)
        conn.execute("INSERT INTO runs (run_id, started_at, status, seed, command, manifest, "
                     "config) VALUES ('old', 1.0, 'passed', 3, 'iree-stress soak', '{}', '{}')")
        conn.commit()
        conn.close()
    ro = db.connect(tmp_path / db.DB_NAME, readonly=True)
    assert db.schema_version(ro) == 3
    ro.close()
    s = summary.build(tmp_path)
    assert s["run_id"] == "old" and s["seed"] == 3


def test_writers_store_the_m004_facts_and_keep_old_positional_calls_working(
        tmp_path: Path) -> None:
    store = db.RunStore(tmp_path)
    store.start_run("r", 1, "iree-stress soak", {}, {})
    store.add_job("r", 0, {"job": _JOB, "result": _RESULT, "started": 1.0, "ended": 2.0},
                  "ok")  # an old-style payload: no pid, no teardown counts
    store.add_job("r", 1, {"job": _JOB, "started": 1.0, "ended": 2.0, "pid": 4321,
                           "exit_path": "os._exit",
                           "result": {**_RESULT, "full_teardowns": 3, "handle_releases": 5}},
                  "ok")
    store.add_failure("r", {"class": "crash", "native_tid": 777, "exposure": "process_exit",
                            "evidence": {"core": "w0/core.txt"}})
    store.add_failure("r", {"class": "hang"})
    store.add_window("r", "healthy", "shared", ["a"], [], 0)
    store.add_window("r", "healthy", "shared", ["b"], [], 1, [{"step": "invoke", "seq": 9}])
    row = store.add_worker("r", 0, 0, 99)
    store.end_worker(row, 0, None, "stop", {"driver": "local-task"}, outcome="clean",
                     device_used=True, exit_path="exit", job_index=4, pattern="per-call",
                     batch=2, exit_order=1, bye_at=12.5)
    store.end_worker(row, -11, "SIGSEGV", "crash")  # later: keywords left out stay as they were
    store.close()
    conn = db.connect(tmp_path / db.DB_NAME, readonly=True)
    jobs = [tuple(r) for r in conn.execute(
        "SELECT full_teardowns, handle_releases, exit_path, pid FROM jobs ORDER BY worker")]
    assert jobs == [(0, 0, None, None), (3, 5, "os._exit", 4321)]
    fails = [tuple(r) for r in conn.execute(
        "SELECT native_tid, evidence, exposure FROM failures ORDER BY id")]
    assert fails == [(777, '{"core": "w0/core.txt"}', "process_exit"), (None, "{}", None)]
    wins = [r[0] for r in conn.execute("SELECT steps FROM windows ORDER BY id")]
    assert wins == ["[]", '[{"step": "invoke", "seq": 9}]']
    w = dict(conn.execute("SELECT * FROM workers").fetchone())
    conn.close()
    assert (w["exit_code"], w["signal"], w["end_reason"]) == (-11, "SIGSEGV", "crash")
    assert (w["outcome"], w["device_used"], w["exit_path"], w["job_index"], w["pattern"],
            w["batch"], w["exit_order"], w["bye_at"]) == (
        "clean", 1, "exit", 4, "per-call", 2, 1, 12.5)
    assert w["facts"] == '{"driver": "local-task"}'
