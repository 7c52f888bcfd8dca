"""Synthetic run folders for the report tests: real SQLite stores written with the store's own
migrations (or an older schema), shaped like a soak's."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from stress.store.db import DB_NAME, MIGRATIONS, RunStore, connect

STACKS = Path(__file__).resolve().parents[1] / "data" / "stacks"


RUN = "r-test"


def _store(run_dir: Path, latest: bool = True) -> sqlite3.Connection:
    run_dir.mkdir(parents=True)
    if latest:
        return connect(run_dir / DB_NAME)
    db = sqlite3.connect(run_dir / DB_NAME)  # a store from before m004
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
               " applied_at REAL NOT NULL)")
    for version, name, fn in MIGRATIONS[:3]:
        fn(db)
        db.execute("INSERT INTO schema_migrations VALUES (?,?,?)", (version, name, time.time()))
    db.commit()
    return db


def make_run(run_dir: Path, latest: bool = True) -> Path:
    """60 jobs in 6 worker processes; 3 jobs crash with the same stalled-join SIGSEGV (a core
    file's stack each), 2 jobs get an error 4 times each; healthy windows at device-release."""
    db = _store(run_dir, latest)
    now = time.time()
    db.execute("INSERT INTO runs (run_id, started_at, ended_at, status, seed, command, manifest,"
               " config) VALUES (?,?,?,?,?,?,?,?)", (RUN, now - 30, now, "completed", 7, "soak",
                                                    "{}", json.dumps({"workers": 3,
                                                                      "threads": 2})))
    pid_col = ", pid" if latest else ""
    for i in range(60):
        pattern = "per-call" if i % 2 else "shared"
        db.execute(f"INSERT INTO jobs (run_id, job_index, program, pattern, seed, worker, "
                   f"planned, invocations, ok, miscompare, errors, nondeterministic, "
                   f"devices_created, started_at, ended_at, latency_sum_us, latency_max_us, "
                   f"latency_hist, outcome{pid_col}) VALUES "
                   f"(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?{',?' if latest else ''})",
                   (RUN, i, "unary.exp.f32.64x64", pattern, i, i % 3, 10, 10, 10, 0,
                    4 if i in (10, 11) else 0, 0, 1, now - 20, now - 19, 100.0, 20.0,
                    json.dumps([0] * 22), "ok", *([1000 + i // 10] if latest else [])))
    for n, job in enumerate((3, 25, 47)):
        folder = run_dir / "failures" / f"crash-{n}"
        folder.mkdir(parents=True)
        (folder / "stacks.txt").write_text((STACKS / "gdb_core_segv.txt").read_text())
        (folder / "failure.json").write_text(json.dumps({"native_tid": 5365}))
        steps = [{"t": 1, "slot": 0, "step": "invoke", "phase": "begin", "failing": True},
                 {"t": 2, "slot": 0, "step": "invoke", "phase": "end", "failing": True},
                 {"t": 3, "slot": 0, "step": "device-release", "phase": "begin",
                  "failing": True},
                 {"t": 0.5, "slot": 1, "step": "device-create", "phase": "begin",
                  "failing": False}]
        db.execute("INSERT INTO failures (run_id, class, signal, job_index, program, pattern, "
                   "seed, worker, pid, last_step, in_flight, steps, artifacts, message, "
                   "attribution, detected_at, elapsed_s) VALUES "
                   "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (RUN, "crash", "SIGSEGV", job, "unary.exp.f32.64x64", "per-call", job,
                    job % 3, 1000 + job // 10, "device-release",
                    json.dumps(["t0:device-release", "t1:device-create"]), json.dumps(steps),
                    str(folder), "worker crashed", "watchdog", now, 5.0 + n))
    for job in (10, 11):
        db.execute("INSERT INTO failures (run_id, class, job_index, program, pattern, worker, "
                   "pid, last_step, in_flight, steps, message, attribution, detected_at, "
                   "elapsed_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (RUN, "error", job, "unary.exp.f32.64x64", "shared", job % 3, 1001,
                    "module-load", "[]", "[]", f"CUDA_ERROR_INVALID_CONTEXT ({job})", "worker",
                    now, 2.0))
        db.execute("INSERT INTO failure_counts VALUES (?,?,?,?,?,?)",
                   (RUN, job, "unary.exp.f32.64x64", "shared",
                    "error|module-load|CUDA_ERROR_INVALID_CONTEXT (#)", 4))
    for slot in range(40):
        db.execute("INSERT INTO windows (id, run_id, kind, t, pattern, tokens, in_flight) "
                   "VALUES (?,?,?,?,?,?,?)",
                   (slot, RUN, "healthy", now, "per-call" if slot % 2 else "shared",
                    json.dumps(["begin:invoke", "end:invoke", "begin:device-release"]),
                    json.dumps(["t0:device-release", "t1:invoke"])))
    for p in range(6):
        db.execute("INSERT INTO workers (run_id, worker, generation, pid, started_at, ended_at,"
                   " exit_code, end_reason) VALUES (?,?,?,?,?,?,?,?)",
                   (RUN, p % 3, p // 3, 1000 + p, now - 30, now, 0, "exit"))
    db.commit()
    db.close()
    return run_dir


DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry"


def store_run(run_dir: Path, line: str, devices: tuple[str, ...] = ("cuda",)) -> None:
    """A small run whose GPU time line is the recorded `line`."""
    doc: dict[str, Any] = json.loads((DATA / line).read_text())
    store = RunStore(run_dir)
    store.start_run("r1", 1, "iree-stress soak", {"driver": "cuda"},
                    {"workers": len(devices), "threads": 1})
    for i, (t0, t1) in enumerate(doc["jobs"]):
        store.add_job("r1", i % len(devices), {
            "job": {"index": i, "program": "binary.add", "pattern": "shared", "seed": i,
                    "invocations": 10},
            "started": t0, "ended": t1, "pid": 100 + i % len(devices),
            "result": {"invocations": 10, "ok": 10, "miscompare": 0, "errors": 0,
                       "nondeterministic": 0, "devices_created": 1, "latency_sum_us": 5.0,
                       "latency_max_us": 1.0, "latency_hist": [0] * 22, "failures": []}},
            "ok")
    for w, dev in enumerate(devices):
        row = store.add_worker("r1", w, 0, 100 + w)
        if len(devices) > 1:
            store.set_worker_device(row, dev)
        store.end_worker(row, 0, None, "done")
    store.flush()  # (worker rows are written at the commit; this SQL goes around the store)
    store.db.execute("UPDATE workers SET ended_at=?", (doc["workers_done"],))
    store.add_failure("r1", {"class": "hang", "pid": 100 + len(devices) - 1, "worker": 0,
                             "message": "step past deadline", "last_step": "invoke",
                             "detected_at": doc["jobs"][3][0]})
    store.add_telemetry("r1", [{**s, "logical": 0, "source": "amd-smi"}
                               for s in doc["samples"]])
    store.add_mark("r1", doc["samples"][0]["t"], "phase-start", "soak")
    store.add_mark("r1", doc["workers_done"], "phase-start", "cooldown")
    store.end_run("r1", "completed")
    store.close()


def exit_run(run_dir: Path, exits: int = 20, failing: int = 8) -> Path:
    """`exits` one-job processes whose jobs all finished cleanly; `failing` of them then hung
    in their exit (teardown_hang at worker-exit, rated per process exit)."""
    run_dir.mkdir(parents=True)
    store = RunStore(run_dir)
    store.start_run("r1", 1, "iree-stress soak --patterns exit", {},
                    {"engine": "python", "workers": 4, "threads": 1})
    for i in range(exits):
        pid = 500 + i
        store.add_job("r1", i % 4, {
            "job": {"index": i, "program": "unary.abs.f32.1", "pattern": "exit-clean",
                    "seed": i, "invocations": 5},
            "started": 1000.0 + i, "ended": 1000.5 + i, "pid": pid,
            "result": {"invocations": 5, "ok": 5, "miscompare": 0, "errors": 0,
                       "nondeterministic": 0, "devices_created": 1, "latency_sum_us": 5.0,
                       "latency_max_us": 1.0, "latency_hist": [0] * 22}}, "ok")
        row = store.add_worker("r1", i % 4, i, pid)
        if i < failing:
            store.add_failure("r1", {"class": "teardown_hang", "pid": pid, "worker": i % 4,
                                     "last_step": "worker-exit", "exposure": "process_exit",
                                     "message": "exit past --teardown-timeout",
                                     "detected_at": 1001.0 + i})
        store.end_worker(row, -9 if i < failing else 0, None, "exit",
                         outcome="hang" if i < failing else "clean", device_used=1,
                         pattern="exit-clean", job_index=i)
    store.end_run("r1", "completed")
    store.close()
    return run_dir
