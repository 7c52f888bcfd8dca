"""Small readers of one run store for the commands that need a few facts of it, not the whole
of it (analysis/rundata.py loads everything for reports): which run recorded a failure and its
config, which jobs ran and which failed in a class. Read-only connections (the schema version
checked: a store newer than this code is refused in one line)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stress.store.db import DB_NAME, connect


def run_config(run_dir: Path, recorded_here: Callable[[str | None], bool]) -> dict[str, Any] | None:
    """The config of the run that recorded a failure whose evidence folder passes
    `recorded_here` (a store may hold several runs: resumed or merged), else of the store's
    first run; None when the store holds no run."""
    db = connect(run_dir / DB_NAME, readonly=True)
    try:
        rows = db.execute("SELECT run_id, artifacts FROM failures WHERE artifacts IS NOT NULL"
                          ).fetchall()
        run_id = next((r for r, a in rows if recorded_here(a)), None)
        row = db.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone() \
            if run_id is not None else None
        row = row or db.execute("SELECT config FROM runs ORDER BY started_at LIMIT 1").fetchone()
    finally:
        db.close()
    if row is None:
        return None
    config: dict[str, Any] = json.loads(row[0])
    return config


def job_outcomes(run_dir: Path, cls: str) -> tuple[set[int], set[int]]:
    """(every job index that ran or failed, the job indices with a failure of class `cls`);
    failures pinned on no job are left out of both."""
    db = connect(run_dir / DB_NAME, readonly=True)
    try:
        jobs = {r[0] for r in db.execute("SELECT job_index FROM jobs")}
        jobs |= {r[0] for r in db.execute("SELECT job_index FROM failures")}
        failing = {r[0] for r in db.execute("SELECT job_index FROM failures WHERE class = ?",
                                            (cls,))}
    finally:
        db.close()
    jobs.discard(None)
    failing.discard(None)
    return jobs, failing
