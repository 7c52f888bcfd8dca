"""Loads one or more run folders (complete, or killed midway) into plain rows."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.errors import UsageError
from stress.store import counts as store_counts
from stress.store.db import DB_NAME, connect


@dataclass
class RunData:
    dirs: list[Path]
    runs: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    counts: list[dict[str, Any]] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)
    telemetry: list[dict[str, Any]] = field(default_factory=list)  # GPU time line (m005)
    marks: list[dict[str, Any]] = field(default_factory=list)  # phase marks on it
    # the store's counts (store/counts.py), the one source of every number a report shows
    totals: store_counts.Counts = field(default_factory=store_counts.Counts)
    # the process exits that are exposures; None (rows not read from a store): every ended one
    exit_keys: set[tuple[str, int]] | None = None

    @property
    def invocations(self) -> int:
        if self.totals.runs:  # read from stores
            return self.totals.invocations
        return sum(int(j["invocations"]) for j in self.jobs)  # rows made by hand (tests)

    @property
    def trials(self) -> int:
        """Denominator of failure rates: invocations, except that a job failing before its
        first invocation (device create, module load) counts its failed attempts."""
        return sum(trials(j) for j in self.jobs)


def trials(job: dict[str, Any]) -> int:
    return max(int(job["invocations"]), int(job["errors"]) + int(job["miscompare"]))


def _json(text: Any, default: Any) -> Any:
    """A JSON column; missing (an older store), NULL or unreadable gives `default`."""
    if text is None or text == "":
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


# Columns added by m004 (and later): older stores lack them; rows get these defaults.
_FAILURE_DEFAULTS: dict[str, Any] = {"native_tid": None, "exposure": None}
_JOB_DEFAULTS: dict[str, Any] = {"pid": None, "full_teardowns": 0, "handle_releases": 0,
                                 "exit_path": None}
_WORKER_DEFAULTS: dict[str, Any] = {"pattern": None, "outcome": None, "exit_path": None,
                                    "device_used": None, "device": None}


def _rows(db: sqlite3.Connection, sql: str) -> list[dict[str, Any]]:
    try:
        return [dict(r) for r in db.execute(sql)]
    except sqlite3.OperationalError:  # a store from before a migration: table missing
        return []


def load(dirs: list[Path]) -> RunData:
    data = RunData(dirs)
    for d in dirs:
        path = d / DB_NAME
        if not path.exists():
            raise UsageError(f"{d} is not a run folder (no {DB_NAME})")
        db = connect(path, readonly=True)
        try:
            for r in _rows(db, "SELECT * FROM runs"):
                r["manifest"] = json.loads(r["manifest"])
                r["config"] = json.loads(r["config"])
                r["dir"] = str(d)
                data.runs.append(r)
            data.jobs += [{**_JOB_DEFAULTS, **j} for j in _rows(db, "SELECT * FROM jobs")]
            for f in _rows(db, "SELECT * FROM failures ORDER BY id"):
                f = {**_FAILURE_DEFAULTS, **f}
                f["in_flight"] = _json(f["in_flight"], [])
                f["steps"] = _json(f["steps"], [])
                f["evidence"] = _json(f.get("evidence"), {})
                data.failures.append(f)
            data.counts += _rows(db, "SELECT * FROM failure_counts")
            for w in _rows(db, "SELECT * FROM windows"):
                w["tokens"] = _json(w["tokens"], [])
                w["in_flight"] = _json(w["in_flight"], [])
                w["steps"] = _json(w.get("steps"), [])
                data.windows.append(w)
            workers = [{**_WORKER_DEFAULTS, **w} for w in _rows(db, "SELECT * FROM workers")]
            data.workers += workers
            # a failure's device is its worker's (set on runs over several devices)
            device = {(w["run_id"], w["pid"]): w["device"] for w in workers}
            for f in data.failures:
                if "device" not in f:
                    f["device"] = device.get((f["run_id"], f.get("pid")))
            data.telemetry += _rows(db, "SELECT * FROM telemetry ORDER BY t")
            data.marks += _rows(db, "SELECT * FROM timeline_marks ORDER BY t")
            ids = [r[0] for r in db.execute("SELECT run_id FROM runs ORDER BY started_at")]
            data.totals.add(store_counts.of_store(db, ids))
            data.exit_keys = (data.exit_keys or set()) | store_counts.exit_keys(db, ids)
        finally:
            db.close()
    return data
