"""The run database: one SQLite file per run folder, written only by the parent.

WAL mode with synchronous=NORMAL: a SIGKILLed parent loses at most the rows of the last
FLUSH_PERIOD_S (healthy job rows are batched; failures commit at once), never the file's
integrity. The schema changes only through the numbered migrations below, each applied in one
transaction together with its `schema_migrations` row.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from stress.errors import UsageError

DB_NAME = "stress.db"
# A SIGKILLed parent loses job rows younger than this; healthy rows are batched to keep the
# parent's commit cost small at ~100 jobs/s, failures are committed at once. Half a second keeps
# the loss well under the 1 s the issue allows while still batching ~50 rows per commit.
FLUSH_PERIOD_S: float = 0.5


_HIST_JSON: dict[tuple[int, ...], str] = {}  # a job's latency histogram as stored, by value


def _hist_json(hist: list[int]) -> str:
    """json.dumps of a latency histogram, memoized: most jobs have one of a few (a native job's
    single invocation lands in one of a handful of buckets); encoding each took ~10 us."""
    key = tuple(hist)
    text = _HIST_JSON.get(key)
    if text is None:
        text = json.dumps(hist)
        if len(_HIST_JSON) < 4096:
            _HIST_JSON[key] = text
    return text


class StoreVersionError(UsageError):
    """The store was written by a newer iree-stress than this one (its schema is unknown here)."""


def _script(db: sqlite3.Connection, script: str) -> None:
    """Runs a migration's SQL statement by statement inside the caller's transaction.
    (`executescript` would commit first, breaking the migration's atomicity.)"""
    stmt = ""
    for line in script.splitlines(keepends=True):
        stmt += line
        if sqlite3.complete_statement(stmt):
            db.execute(stmt)
            stmt = ""
    if stmt.strip():
        raise ValueError(f"incomplete SQL statement in a migration: {stmt.strip()[:80]}")


def _m001_initial(db: sqlite3.Connection) -> None:
    _script(db, """
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
    _script(db, """
    CREATE TABLE phases (
        run_id TEXT NOT NULL, phase TEXT NOT NULL, seconds REAL NOT NULL, count INTEGER NOT NULL,
        PRIMARY KEY (run_id, phase));
    ALTER TABLE runs ADD COLUMN stop_reason TEXT;
    """)


def _m003_windows(db: sqlite3.Connection) -> None:
    _script(db, """
    CREATE TABLE failure_counts (
        run_id TEXT NOT NULL, job_index INTEGER NOT NULL, program TEXT NOT NULL,
        pattern TEXT NOT NULL, key TEXT NOT NULL, count INTEGER NOT NULL);
    CREATE INDEX failure_counts_by_run ON failure_counts(run_id);
    CREATE TABLE windows (
        id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, kind TEXT NOT NULL, t REAL NOT NULL,
        pattern TEXT, tokens TEXT NOT NULL, in_flight TEXT NOT NULL);
    CREATE INDEX windows_by_run ON windows(run_id, kind);
    """)


def _m004_evidence_exposures(db: sqlite3.Connection) -> None:
    """Raw facts the engine records for analysis: the crashing thread, evidence paths (a JSON
    object), the exposure a failure belongs to; the journal steps of healthy windows; how jobs
    and workers ended (teardowns, handle releases, exit path) and which process ran each job."""
    _script(db, """
    ALTER TABLE failures ADD COLUMN native_tid INTEGER;
    ALTER TABLE failures ADD COLUMN evidence TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE failures ADD COLUMN exposure TEXT;
    ALTER TABLE windows ADD COLUMN steps TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE jobs ADD COLUMN full_teardowns INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN handle_releases INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN exit_path TEXT;
    ALTER TABLE jobs ADD COLUMN pid INTEGER;
    ALTER TABLE workers ADD COLUMN pattern TEXT;
    ALTER TABLE workers ADD COLUMN device_used INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE workers ADD COLUMN exit_path TEXT;
    ALTER TABLE workers ADD COLUMN outcome TEXT;
    ALTER TABLE workers ADD COLUMN job_index INTEGER;
    ALTER TABLE workers ADD COLUMN batch INTEGER;
    ALTER TABLE workers ADD COLUMN exit_order INTEGER;
    ALTER TABLE workers ADD COLUMN bye_at REAL;
    """)


def _m005_telemetry(db: sqlite3.Connection) -> None:
    """The GPU telemetry time line (one row per GPU in use per sample; a failed read is a row
    with gpu NULL and its error), marks drawn on it (phase starts and ends), and the device
    each worker was given (several GPUs: a failure's GPU is its worker's)."""
    _script(db, """
    CREATE TABLE telemetry (
        run_id TEXT NOT NULL, t REAL NOT NULL, gpu INTEGER, logical INTEGER, source TEXT,
        sm_clock_mhz REAL, mem_clock_mhz REAL, power_w REAL, gpu_util_pct REAL,
        mem_used_mib REAL, temp_c REAL, error TEXT);
    CREATE INDEX telemetry_by_run ON telemetry(run_id, t);
    CREATE TABLE timeline_marks (
        run_id TEXT NOT NULL, t REAL NOT NULL, kind TEXT NOT NULL, label TEXT NOT NULL);
    ALTER TABLE workers ADD COLUMN device TEXT;
    """)


def _m006_job_tests(db: sqlite3.Connection) -> None:
    """An exec job's test runner's own counts (`{"runner", "counts", "ran"}`: passed, failed,
    skipped, tests run), so a clean job keeps what it tested (issue 36)."""
    _script(db, "ALTER TABLE jobs ADD COLUMN tests TEXT;")


# Each migration runs inside migrate()'s transaction: it must use `_script` or `db.execute`,
# never `executescript` or `commit`.
MIGRATIONS: list[tuple[int, str, Callable[[sqlite3.Connection], None]]] = [
    (1, "m001_initial", _m001_initial),
    (2, "m002_phases", _m002_phases),
    (3, "m003_windows", _m003_windows),
    (4, "m004_evidence_exposures", _m004_evidence_exposures),
    (5, "m005_telemetry", _m005_telemetry),
    (6, "m006_job_tests", _m006_job_tests),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """The run database. Read-only connections check the schema version (older stores are
    fine: readers handle missing columns); a store newer than this code raises
    StoreVersionError, as does opening one for writing."""
    if readonly:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            _check_version(db, path)
        except BaseException:
            db.close()
            raise
    else:
        db = sqlite3.connect(path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            migrate(db, path)
        except BaseException:
            db.close()
            raise
    db.row_factory = sqlite3.Row
    return db


def schema_version(db: sqlite3.Connection) -> int:
    """The newest migration applied to this store (0: none, or not a store)."""
    has = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                     "name='schema_migrations'").fetchone()
    if has is None:
        return 0
    row = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


def _check_version(db: sqlite3.Connection, path: Path | str) -> None:
    found = schema_version(db)
    if found > SCHEMA_VERSION:
        raise StoreVersionError(f"{path} was written by a newer iree-stress (schema {found} > "
                                f"{SCHEMA_VERSION}); read it with that version or newer")


def migrate(db: sqlite3.Connection, path: Path | str = "the store") -> None:
    """Applies the missing migrations, each atomically with its schema_migrations row: a failure
    (or a kill) mid-migration leaves the store at the previous version, with no partial tables.
    BEGIN IMMEDIATE takes the write lock first, so two processes never apply the same one."""
    saved = db.isolation_level
    if db.in_transaction:
        db.commit()
    db.isolation_level = None  # explicit BEGIN/COMMIT below; no implicit ones from the module
    try:
        db.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                   "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)")
        _check_version(db, path)
        done = {r[0] for r in db.execute("SELECT version FROM schema_migrations")}
        for version, name, fn in MIGRATIONS:
            if version in done:
                continue
            db.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have applied it since `done` was read.
                applied = db.execute("SELECT 1 FROM schema_migrations WHERE version=?",
                                     (version,)).fetchone()
                if applied is None:
                    fn(db)
                    db.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)",
                               (version, name, time.time()))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
    finally:
        db.isolation_level = saved


def integrity_ok(path: Path) -> bool:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return bool(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    finally:
        db.close()


_FACTS_JSON: dict[tuple[tuple[str, type, Any], ...], str] = {}  # a worker's facts as stored


def _facts_json(facts: dict[str, Any]) -> str:
    """json.dumps of a worker's facts, memoized when they are flat (a native job's are one of
    a few: its tool, whether it wrote its output)."""
    try:
        key = tuple((k, type(v), v) for k, v in facts.items())  # True == 1, but not as JSON
        text = _FACTS_JSON.get(key)
    except TypeError:  # a nested value: not memoized
        return json.dumps(facts)
    if text is None:
        text = json.dumps(facts)
        if len(_FACTS_JSON) < 1024:
            _FACTS_JSON[key] = text
    return text


_JOB_COLUMNS = ("run_id, job_index, program, pattern, seed, worker, planned, invocations, ok, "
                "miscompare, errors, nondeterministic, devices_created, started_at, ended_at, "
                "latency_sum_us, latency_max_us, latency_hist, outcome, full_teardowns, "
                "handle_releases, exit_path, pid, tests")


class RunStore:
    """Parent-side writer; batches commits: at `flush()`, when `_BATCH` rows wait, or when the
    oldest waiting row is older than FLUSH_PERIOD_S (checked on each write and by `tick()`,
    which the session loop calls often so a quiet spell still commits).

    Job rows and new worker rows are also written at the commit, in one executemany each (a
    statement per row cost ~10% of the parent's time per native job): a worker row that ends
    before its commit is inserted whole, never inserted then updated. Worker row ids are
    assigned here, so `add_worker` can name its row before it is written. Nothing reads this
    connection; readers open their own and see committed rows only, as before."""

    _BATCH: int = 200  # rows per transaction at most; jobs arrive ~100/s on cpu

    def __init__(self, run_dir: Path, clock: Callable[[], float] = time.monotonic):
        self.path = run_dir / DB_NAME
        self.db = connect(self.path)
        self._pending = 0
        self._clock = clock
        self._oldest = 0.0  # clock() when the oldest uncommitted row was written
        self._jobs: list[tuple[Any, ...]] = []  # job rows not yet written
        self._new_workers: dict[int, dict[str, Any]] = {}  # id -> columns, not yet written
        self._next_worker = int(self.db.execute(
            "SELECT COALESCE(MAX(id), 0) FROM workers").fetchone()[0]) + 1
        self._window_base = 0  # windows.id of slot 0 (start_run sets it)

    def start_run(self, run_id: str, seed: int, command: str, manifest: dict[str, Any],
                  config: dict[str, Any]) -> None:
        # window rows are keyed by reservoir slot: a later run of the same store (resumed)
        # numbers its slots after the earlier runs' rows
        self._window_base = int(self.db.execute(
            "SELECT COALESCE(MAX(id), 0) FROM windows").fetchone()[0])
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
        self._jobs.append(
            (run_id, job["index"], job["program"], job["pattern"], job["seed"], worker,
             job["invocations"], res["invocations"], res["ok"], res["miscompare"], res["errors"],
             res["nondeterministic"], res["devices_created"], payload["started"],
             payload["ended"], res["latency_sum_us"], res["latency_max_us"],
             _hist_json(res["latency_hist"]), outcome, res.get("full_teardowns", 0),
             res.get("handle_releases", 0), payload.get("exit_path"), payload.get("pid"),
             json.dumps(payload["tests"]) if payload.get("tests") else None))
        self._bump()

    def add_failure(self, run_id: str, f: dict[str, Any]) -> int:
        cur = self.db.execute(
            "INSERT INTO failures (run_id, class, signal, job_index, program, pattern, seed, "
            "worker, pid, last_step, in_flight, steps, artifacts, message, attribution, "
            "detected_at, elapsed_s, native_tid, evidence, exposure) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, f["class"], f.get("signal"), f.get("job_index"), f.get("program"),
             f.get("pattern"), f.get("seed"), f.get("worker"), f.get("pid"), f.get("last_step"),
             json.dumps(f.get("in_flight", [])), json.dumps(f.get("steps", [])),
             f.get("artifacts"), f.get("message", ""), f.get("attribution", ""),
             f.get("detected_at", time.time()), f.get("elapsed_s", 0.0), f.get("native_tid"),
             json.dumps(f.get("evidence") or {}), f.get("exposure")))
        self.flush()  # failures are rare and precious: commit now
        return int(cur.lastrowid or 0)

    def update_failure(self, row: int, evidence: dict[str, Any],
                       native_tid: int | None = None) -> None:
        """Completes a failure's evidence once its post-mortem stacks are read (the row was
        committed at once, without them); the native tid only where none was known."""
        self.db.execute("UPDATE failures SET evidence=?, native_tid=COALESCE(native_tid, ?) "
                        "WHERE id=?", (json.dumps(evidence), native_tid, row))
        self.flush()

    def add_failure_counts(self, run_id: str, job: dict[str, Any], counts: dict[str, int]) -> None:
        self.db.executemany("INSERT INTO failure_counts VALUES (?,?,?,?,?,?)",
                            [(run_id, job["index"], job["program"], job["pattern"], k, n)
                             for k, n in counts.items()])
        self._bump()

    def add_window(self, run_id: str, kind: str, pattern: str | None, tokens: list[str],
                   in_flight: list[str], slot: int, steps: list[Any] | None = None) -> None:
        """Stores reservoir slot `slot` of the run's windows (replacing what it held); `steps`
        are the raw journal entries the tokens came from."""
        row = self._window_base + slot
        self.db.execute("DELETE FROM windows WHERE run_id=? AND kind=? AND id=?",
                        (run_id, kind, row))
        self.db.execute("INSERT INTO windows (id, run_id, kind, t, pattern, tokens, in_flight, "
                        "steps) VALUES (?,?,?,?,?,?,?,?)",
                        (row, run_id, kind, time.time(), pattern, json.dumps(tokens),
                         json.dumps(in_flight), json.dumps(steps or [])))
        self._bump()

    def add_worker(self, run_id: str, worker: int, gen: int, pid: int) -> int:
        row = self._next_worker
        self._next_worker += 1
        self._new_workers[row] = {"id": row, "run_id": run_id, "worker": worker,
                                  "generation": gen, "pid": pid, "started_at": time.time()}
        self._bump()
        return row

    def _update_worker(self, row: int, columns: dict[str, Any]) -> None:
        """Sets columns of a worker row, in its pending insert when it has not been written."""
        pending = self._new_workers.get(row)
        if pending is not None:
            pending.update(columns)
        else:  # column names are literals of this module
            self.db.execute(f"UPDATE workers SET {'=?, '.join(columns)}=? WHERE id=?",
                            (*columns.values(), row))
        self._bump()

    def set_worker_device(self, row: int, device: str) -> None:
        """The device URI a worker was given (runs over several devices)."""
        self._update_worker(row, {"device": device})

    _TELEMETRY_COLUMNS: tuple[str, ...] = (
        "t", "gpu", "logical", "source", "sm_clock_mhz", "mem_clock_mhz", "power_w",
        "gpu_util_pct", "mem_used_mib", "temp_c", "error")

    def add_telemetry(self, run_id: str, rows: Iterable[dict[str, Any]]) -> None:
        """Time line rows (timeline.rows): batched like job rows."""
        cols = self._TELEMETRY_COLUMNS
        self.db.executemany(
            f"INSERT INTO telemetry (run_id, {', '.join(cols)}) "
            f"VALUES (?, {', '.join('?' * len(cols))})",
            [(run_id, *(r.get(c) for c in cols)) for r in rows])
        self._bump()

    def add_mark(self, run_id: str, t: float, kind: str, label: str) -> None:
        self.db.execute("INSERT INTO timeline_marks VALUES (?,?,?,?)", (run_id, t, kind, label))
        self._bump()

    def end_worker(self, row: int, exit_code: int | None, signal_name: str | None,
                   reason: str, facts: dict[str, Any] | None = None, *,
                   outcome: str | None = None, device_used: bool | int | None = None,
                   exit_path: str | None = None, job_index: int | None = None,
                   pattern: str | None = None, batch: int | None = None,
                   exit_order: int | None = None, bye_at: float | None = None) -> None:
        """Records how a worker ended; each keyword updates its column only when given (facts
        too: facts given earlier stay when none are given now)."""
        columns: dict[str, Any] = {"ended_at": time.time(), "exit_code": exit_code,
                                   "signal": signal_name, "end_reason": reason}
        optional: dict[str, Any] = {
            "facts": _facts_json(facts) if facts else None,
            "outcome": outcome, "device_used": None if device_used is None else int(device_used),
            "exit_path": exit_path, "job_index": job_index, "pattern": pattern, "batch": batch,
            "exit_order": exit_order, "bye_at": bye_at}
        for column, value in optional.items():
            if value is not None:
                columns[column] = value
        self._update_worker(row, columns)

    def set_phases(self, run_id: str, phases: Iterable[tuple[str, float, int]]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO phases VALUES (?,?,?,?)",
                            [(run_id, p, s, c) for p, s, c in phases])
        self._bump()

    def _bump(self) -> None:
        now = self._clock()
        if not self._pending:
            self._oldest = now
        self._pending += 1
        if self._pending >= self._BATCH or now - self._oldest > FLUSH_PERIOD_S:
            self.flush()

    def tick(self) -> None:
        """Commits when rows have waited longer than FLUSH_PERIOD_S (call it from the parent's
        loop: a kill then loses at most about that period of job rows)."""
        if self._pending and self._clock() - self._oldest > FLUSH_PERIOD_S:
            self.flush()

    def _write_pending(self) -> None:
        """The batched job and worker rows, in one statement per shape. The lists are taken
        first, so a failed write is never retried: a row that cannot be stored (a value
        sqlite cannot bind, a full disk) raises as it did when each row had its own INSERT,
        and the other rows of its batch are still stored, one by one."""
        statements: list[tuple[str, list[tuple[Any, ...]]]] = []
        if self._jobs:
            jobs, self._jobs = self._jobs, []
            statements.append((f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES "
                               f"({', '.join('?' * 24)})", jobs))
        if self._new_workers:
            workers, self._new_workers = self._new_workers, {}
            shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
            for cols in workers.values():
                shapes.setdefault(tuple(cols), []).append(tuple(cols.values()))
            for names, rows in shapes.items():  # names: literals of this module
                statements.append((f"INSERT INTO workers ({', '.join(names)}) VALUES "
                                   f"({', '.join('?' * len(names))})", rows))
        first: Exception | None = None
        for sql, rows in statements:
            self.db.execute("SAVEPOINT pending_rows")
            try:
                self.db.executemany(sql, rows)
            except (sqlite3.Error, ValueError, TypeError, OverflowError):
                self.db.execute("ROLLBACK TO pending_rows")
                for row in rows:  # the batch again, row by row: only the bad rows are lost
                    try:
                        self.db.execute(sql, row)
                    except (sqlite3.Error, ValueError, TypeError, OverflowError) as exc:
                        first = first or exc
            finally:
                self.db.execute("RELEASE pending_rows")
        if first is not None:
            raise first

    def flush(self) -> None:
        self._write_pending()
        self.db.commit()
        self._pending = 0

    def close(self) -> None:
        self.flush()
        self.db.close()
