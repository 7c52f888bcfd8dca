"""Loads one or more run folders (complete, or killed midway) into plain rows."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.errors import UsageError
from stress.store.db import DB_NAME, connect


@dataclass
class RunData:
    dirs: list[Path]
    runs: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    counts: list[dict[str, Any]] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def invocations(self) -> int:
        return sum(int(j["invocations"]) for j in self.jobs)

    @property
    def trials(self) -> int:
        """Denominator of failure rates: invocations, except that a job failing before its
        first invocation (device create, module load) counts its failed attempts."""
        return sum(trials(j) for j in self.jobs)


def trials(job: dict[str, Any]) -> int:
    return max(int(job["invocations"]), int(job["errors"]) + int(job["miscompare"]))


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
            data.jobs += _rows(db, "SELECT * FROM jobs")
            for f in _rows(db, "SELECT * FROM failures ORDER BY id"):
                f["in_flight"] = json.loads(f["in_flight"])
                f["steps"] = json.loads(f["steps"])
                data.failures.append(f)
            data.counts += _rows(db, "SELECT * FROM failure_counts")
            for w in _rows(db, "SELECT * FROM windows"):
                w["tokens"] = json.loads(w["tokens"])
                w["in_flight"] = json.loads(w["in_flight"])
                data.windows.append(w)
        finally:
            db.close()
    return data
