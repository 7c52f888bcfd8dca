"""Synthetic run folders for the gate's tests: real SQLite stores written with the store's own
migrations, shaped like a soak's (jobs in worker processes, crash and error rows)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stress.store.db import DB_NAME, connect

PROGRAM = "unary.exp.f32.64x64"


PATTERNS = ("shared", "per-call")


def plan_config(seed: int = 7, shard: tuple[int, int] = (0, 1), **extra: Any) -> dict[str, Any]:
    return {"target": "cpu", "driver": "local-task", "programs": [PROGRAM],
            "patterns": list(PATTERNS), "workers": 2, "threads": 2, "seed": seed,
            "invocations": None, "inject": [], "shard": list(shard), "job_seed": None,
            "job_scale": 1.0, **extra}


def make_store(run_dir: Path, run_id: str, jobs: Iterable[int], *, jobs_per_process: int = 20,
               crash_jobs: Iterable[int] = (), error_jobs: Iterable[int] = (),
               status: str = "completed", config: dict[str, Any] | None = None,
               runtime: str = "3.13.0", folders: bool = False) -> Path:
    """Jobs `jobs` (job indices), each in process 1000 + index // jobs_per_process; crash rows
    (SIGSEGV at invoke, pinned on the job: it has no job row) and error jobs (IREE status)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    db = connect(run_dir / DB_NAME)
    now = time.time()
    crash = set(crash_jobs)
    errors = set(error_jobs)
    db.execute("INSERT INTO runs (run_id, started_at, ended_at, status, seed, command, manifest,"
               " config, stop_reason) VALUES (?,?,?,?,?,?,?,?,?)",
               (run_id, now - 100, now, status, (config or plan_config())["seed"], "soak",
                json.dumps({"iree_runtime": runtime, "iree_compiler": "3.13.0",
                            "tool_version": "0.1.0"}),
                json.dumps(config or plan_config()), "duration reached"))
    for n, i in enumerate(jobs):
        pid = 1000 + i // jobs_per_process
        pattern = PATTERNS[i % 2]
        if i in crash:
            folder = None
            if folders:
                f = run_dir / "failures" / f"{n:04d}-crash-w{i % 2}"
                f.mkdir(parents=True)
                (f / "failure.json").write_text(json.dumps({"native_tid": 0}))
                folder = str(f)
            db.execute("INSERT INTO failures (run_id, class, signal, job_index, program, "
                       "pattern, seed, worker, pid, last_step, in_flight, steps, artifacts, "
                       "message, attribution, detected_at, elapsed_s) VALUES "
                       "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (run_id, "crash", "SIGSEGV", i, PROGRAM, pattern, i, i % 2, pid,
                        "invoke", "[]", "[]", folder, "worker died by SIGSEGV", "journal",
                        now - 90 + n * 0.01, 10.0))
            continue
        err = 1 if i in errors else 0
        db.execute("INSERT INTO jobs (run_id, job_index, program, pattern, seed, worker, planned,"
                   " invocations, ok, miscompare, errors, nondeterministic, devices_created, "
                   "started_at, ended_at, latency_sum_us, latency_max_us, latency_hist, outcome, "
                   "pid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (run_id, i, PROGRAM, pattern, i, i % 2, 10, 10, 10 - err, 0, err, 0, 1,
                    now - 91 + n * 0.01, now - 90 + n * 0.01, 100.0, 20.0, "[]",
                    "failed" if err else "ok", pid))
        if err:
            db.execute("INSERT INTO failure_counts VALUES (?,?,?,?,?,?)",
                       (run_id, i, PROGRAM, pattern, "error|invoke|INTERNAL; out of memory", 1))
            db.execute("INSERT INTO failures (run_id, class, job_index, program, pattern, "
                       "worker, pid, last_step, in_flight, steps, message, attribution, "
                       "detected_at, elapsed_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (run_id, "error", i, PROGRAM, pattern, i % 2, pid, "invoke", "[]", "[]",
                        "INTERNAL; out of memory", "worker-report", now - 90 + n * 0.01, 10.0))
    db.commit()
    db.close()
    return run_dir
