"""Waits on something a test can observe (a file, a store row), instead of fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from stress.store import db

_POLL_S: float = 0.05  # how often a condition is looked at again


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """True once `condition()` holds; False when `timeout_s` passed first (the caller asserts,
    so a test still fails when the thing never happens)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def stored_jobs(run: Path) -> int:
    """Job rows committed to the run's store so far (0 before the store exists)."""
    try:
        conn = db.connect(run / db.DB_NAME, readonly=True)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
        finally:
            conn.close()
    except Exception:  # not created yet, or its first migration still under way
        return 0
