from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stress.store import db, summary

_PAYLOAD = {"job": {"index": 0, "program": "p", "pattern": "shared", "seed": 1, "invocations": 10},
            "started": 1.0, "ended": 2.0,
            "result": {"invocations": 10, "ok": 10, "miscompare": 0, "errors": 0,
                       "nondeterministic": 0, "devices_created": 1, "latency_sum_us": 5.0,
                       "latency_max_us": 1.0, "latency_hist": [0] * 22, "failures": [],
                       "counts": {}}}


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _committed_jobs(run_dir: Path) -> int:
    """Job rows another process (report, a post-mortem reader) would see now."""
    conn = db.connect(run_dir / db.DB_NAME, readonly=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
    finally:
        conn.close()


def test_migrations_build_the_final_schema_and_are_idempotent(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "s.db")
    db.migrate(conn)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"schema_migrations", "runs", "jobs", "failures", "workers", "phases",
                      "failure_counts", "windows", "telemetry", "timeline_marks"}
    versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
    assert versions == [v for v, _, _ in db.MIGRATIONS] and versions[-1] == db.SCHEMA_VERSION
    run_cols = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    assert {"run_id", "manifest", "config", "stop_reason", "seed"} <= run_cols
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    columns = {t: {r[1]: (r[2], r[3], r[4]) for r in conn.execute(f"PRAGMA table_info({t})")}
               for t in ("failures", "windows", "jobs", "workers")}
    # m004_evidence_exposures: (type, not null, default) of each column it adds
    assert {c: columns["failures"][c] for c in ("native_tid", "evidence", "exposure")} == {
        "native_tid": ("INTEGER", 0, None), "evidence": ("TEXT", 1, "'{}'"),
        "exposure": ("TEXT", 0, None)}
    assert columns["windows"]["steps"] == ("TEXT", 1, "'[]'")
    assert {c: columns["jobs"][c] for c in ("full_teardowns", "handle_releases", "exit_path",
                                            "pid")} == {
        "full_teardowns": ("INTEGER", 1, "0"), "handle_releases": ("INTEGER", 1, "0"),
        "exit_path": ("TEXT", 0, None), "pid": ("INTEGER", 0, None)}
    assert {c: columns["workers"][c] for c in ("pattern", "device_used", "exit_path", "outcome",
                                               "job_index", "batch", "exit_order",
                                               "bye_at")} == {
        "pattern": ("TEXT", 0, None), "device_used": ("INTEGER", 1, "0"),
        "exit_path": ("TEXT", 0, None), "outcome": ("TEXT", 0, None),
        "job_index": ("INTEGER", 0, None), "batch": ("INTEGER", 0, None),
        "exit_order": ("INTEGER", 0, None), "bye_at": ("REAL", 0, None)}
    assert columns["jobs"]["tests"] == ("TEXT", 0, None)  # m006_job_tests
    assert db.SCHEMA_VERSION == 6


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


def test_job_rows_older_than_the_flush_period_are_committed_by_tick(tmp_path: Path) -> None:
    clock = _Clock()
    store = db.RunStore(tmp_path, clock=clock)
    store.start_run("r", 1, "iree-stress soak", {}, {})
    store.add_job("r", 0, _PAYLOAD, "ok")
    store.add_job("r", 0, _PAYLOAD, "ok")
    store.tick()
    assert _committed_jobs(tmp_path) == 0  # still batched: younger than the period
    clock.now += db.FLUSH_PERIOD_S * 1.2
    store.tick()
    assert _committed_jobs(tmp_path) == 2  # a SIGKILL now would lose neither
    store.tick()
    store.close()


def test_a_job_row_arriving_after_the_period_commits_the_waiting_ones_without_a_tick(
        tmp_path: Path) -> None:
    clock = _Clock()
    store = db.RunStore(tmp_path, clock=clock)
    store.start_run("r", 1, "iree-stress soak", {}, {})
    store.add_job("r", 0, _PAYLOAD, "ok")
    clock.now += db.FLUSH_PERIOD_S / 2
    store.add_job("r", 0, _PAYLOAD, "ok")
    assert _committed_jobs(tmp_path) == 0
    clock.now += db.FLUSH_PERIOD_S
    store.add_job("r", 0, _PAYLOAD, "ok")
    assert _committed_jobs(tmp_path) == 3
    store.add_job("r", 0, _PAYLOAD, "ok")  # a new batch starts its own period
    assert _committed_jobs(tmp_path) == 3
    store.close()
    assert _committed_jobs(tmp_path) == 4


def test_an_error_the_parent_saw_counts_as_a_failure_of_the_run(tmp_path: Path) -> None:
    """A non-zero exit after the worker's goodbye is an error no job reported: it must make
    the run failed (before, it showed in failures_detail only, and soak exited 0)."""
    store = db.RunStore(tmp_path)
    store.start_run("r", 1, "cmd", {}, {})
    store.add_failure("r", {"class": "error", "last_step": "worker-exit",
                            "attribution": "latest-record", "message": "exited with status 3"})
    store.add_failure("r", {"class": "error", "last_step": "invoke",
                            "attribution": "worker-report", "message": "counted by its job"})
    store.end_run("r", "completed")
    store.close()
    s = summary.build(tmp_path)
    assert s["failures"]["error"] == 1 and s["failed"]


def _workers(run_dir: Path) -> list[dict[str, object]]:
    conn = db.connect(run_dir / db.DB_NAME, readonly=True)
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM workers ORDER BY id")]
    finally:
        conn.close()


def test_worker_rows_keep_every_column_whether_they_end_before_or_after_their_commit(
        tmp_path: Path) -> None:
    """Worker rows are written at the commit (one insert for a row that ended before it);
    a reader sees the same rows as when each call was its own statement."""
    clock = _Clock()
    store = db.RunStore(tmp_path, clock=clock)
    store.start_run("r", 1, "cmd", {}, {})
    quick = store.add_worker("r", 0, 0, 101)
    store.set_worker_device(quick, "cuda://0")
    store.end_worker(quick, 0, None, "exit", {"native_tool": "t"}, outcome="clean",
                     device_used=True, pattern="native-run", job_index=7, bye_at=5.0)
    slow = store.add_worker("r", 1, 0, 102)
    assert _workers(tmp_path) == []  # nothing committed yet
    store.flush()
    assert [w["pid"] for w in _workers(tmp_path)] == [101, 102]
    store.set_worker_device(slow, "cuda://1")
    store.end_worker(slow, None, "SIGKILL", "hang", {"bye": {"x": [1]}}, outcome="hang")
    store.end_worker(slow, -9, "SIGKILL", "reaped after SIGKILL")  # facts given before stay
    later = store.add_worker("r", 2, 1, 103)
    store.close()
    rows = {w["pid"]: w for w in _workers(tmp_path)}
    assert len({w["id"] for w in rows.values()}) == 3 and rows[103]["id"] == later
    q = rows[101]
    assert (q["id"], q["device"], q["exit_code"], q["end_reason"], q["outcome"],
            q["device_used"], q["pattern"], q["job_index"], q["bye_at"]) == \
        (quick, "cuda://0", 0, "exit", "clean", 1, "native-run", 7, 5.0)
    assert q["facts"] == '{"native_tool": "t"}'
    s = rows[102]
    assert (s["device"], s["exit_code"], s["end_reason"], s["outcome"], s["facts"]) == \
        ("cuda://1", -9, "reaped after SIGKILL", "hang", '{"bye": {"x": [1]}}')
    assert rows[103]["ended_at"] is None  # still running when the store closed


def test_a_reopened_store_numbers_new_workers_after_the_old_ones(tmp_path: Path) -> None:
    store = db.RunStore(tmp_path)
    store.start_run("r", 1, "cmd", {}, {})
    first = store.add_worker("r", 0, 0, 1)
    store.close()
    again = db.RunStore(tmp_path)
    assert again.add_worker("r", 1, 0, 2) == first + 1
    again.close()
    assert [w["pid"] for w in _workers(tmp_path)] == [1, 2]


def test_a_row_that_cannot_be_stored_raises_once_and_the_rest_of_its_batch_is_kept(
        tmp_path: Path) -> None:
    """A job row sqlite cannot bind fails its flush, as its own INSERT failed before rows were
    batched; the other rows of the batch are stored once, and later flushes and the run's end
    work (the bad row is not retried)."""
    store = db.RunStore(tmp_path, clock=_Clock())
    store.start_run("r", 1, "cmd", {}, {})
    bad = {**_PAYLOAD, "job": {**_PAYLOAD["job"], "index": 1, "seed": 2**64}}  # > INT64
    for payload in (_PAYLOAD, bad, {**_PAYLOAD, "job": {**_PAYLOAD["job"], "index": 2}}):
        store.add_job("r", 0, payload, "ok")
    store.add_worker("r", 0, 0, 7)
    with pytest.raises(OverflowError):
        store.flush()
    store.add_job("r", 0, {**_PAYLOAD, "job": {**_PAYLOAD["job"], "index": 3}}, "ok")
    store.end_run("r", "completed")
    store.close()
    conn = db.connect(tmp_path / db.DB_NAME, readonly=True)
    try:
        indexes = [r[0] for r in conn.execute("SELECT job_index FROM jobs ORDER BY job_index")]
        status = conn.execute("SELECT status FROM runs").fetchone()[0]
    finally:
        conn.close()
    assert indexes == [0, 2, 3] and status == "completed"
    assert [w["pid"] for w in _workers(tmp_path)] == [7]


def test_stored_facts_keep_their_json_type() -> None:
    assert db._facts_json({"x": True}) == '{"x": true}'
    assert db._facts_json({"x": 1}) == '{"x": 1}'  # equal to True as a key, not as JSON
