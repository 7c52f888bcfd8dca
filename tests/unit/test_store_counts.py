"""One source of counts (issue 28 item 3): the store's counts (store/counts.py) read by
summary.json and by the report, on a real store written through RunStore: per-pattern rows
add up to their totals, a job that died with its process is a job, a process that never ran a
job is no exposure, a merged store's duration is the wall clock its runs cover."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stress.analysis import report
from stress.store import counts, summary
from stress.store.db import DB_NAME, RunStore, connect


def _result(inv: int, full: int = 0, handle: int = 0) -> dict[str, Any]:
    return {"invocations": inv, "ok": inv, "miscompare": 0, "errors": 0,
            "nondeterministic": 0, "devices_created": 1, "latency_sum_us": 5.0,
            "latency_max_us": 1.0, "latency_hist": [0] * 22, "full_teardowns": full,
            "handle_releases": handle}


def write_run(run_dir: Path, run_id: str = "r1", t0: float = 1000.0, span: float = 10.0,
              engine: str = "python") -> Path:
    """A pool worker (3 jobs, then a bye with its own last teardown), a process-per-job
    worker, a pool worker that crashed mid-job (its job has no row), and a worker that never
    ran a job (no exposure)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    store = RunStore(run_dir)
    store.start_run(run_id, 1, "iree-stress soak --seed 1 --results " + str(run_dir), {},
                    {"engine": engine, "workers": 2, "threads": 1})

    def job(i: int, pattern: str, pid: int, full: int = 0, handle: int = 0) -> None:
        store.add_job(run_id, 0, {"job": {"index": i, "program": "unary.abs.f32.1",
                                          "pattern": pattern, "seed": i, "invocations": 10},
                                  "started": t0 + i, "ended": t0 + i + 1, "pid": pid,
                                  "result": _result(10, full, handle)}, "ok")

    job(0, "churn", 100, handle=4)
    job(1, "shared", 100)
    job(2, "per-call", 100, handle=2)
    pool = store.add_worker(run_id, 0, 0, 100)
    store.end_worker(pool, 0, None, "exit", {"bye": {"full_teardowns": 1, "handle_releases": 1,
                                                     "devices_alive": 0}},
                     outcome="clean", device_used=1, pattern="pool")
    job(3, "process-per-job", 101, full=1)
    ppj = store.add_worker(run_id, 1, 0, 101)
    store.end_worker(ppj, 0, None, "exit", {"bye": {"full_teardowns": 0, "handle_releases": 0,
                                                    "devices_alive": 1}},
                     outcome="clean", device_used=1, pattern="process-per-job", job_index=3)
    crashed = store.add_worker(run_id, 0, 1, 102)
    store.add_failure(run_id, {"class": "crash", "signal": "SIGSEGV", "job_index": 4,
                               "program": "unary.abs.f32.1", "pattern": "churn", "pid": 102,
                               "worker": 0, "last_step": "device-release",
                               "detected_at": t0 + 5})
    store.end_worker(crashed, -11, "SIGSEGV", "SIGSEGV", outcome="crash", device_used=1,
                     pattern="pool")
    idle = store.add_worker(run_id, 1, 1, 103)
    store.end_worker(idle, 0, None, "exit", outcome="clean", device_used=0, pattern="pool")
    store.flush()
    store.db.execute("UPDATE runs SET started_at=?, ended_at=?, status='completed'",
                     (t0, t0 + span))
    store.db.commit()
    store.close()
    return run_dir


def test_every_pattern_row_adds_up_to_the_totals_and_a_died_job_counts(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    db = connect(run / DB_NAME, readonly=True)
    c = counts.of_store(db)
    db.close()

    assert (c.jobs, c.jobs_finished, c.invocations) == (5, 4, 40)
    assert c.patterns["churn"].jobs == 2  # the crashed job, known only by its failure row
    assert sum(p.jobs for p in c.patterns.values()) == c.jobs
    # exits: the pool worker, the one-job process and the crashed worker; not the idle one
    assert dict(c.process_exits) == {"clean": 2, "crash": 1}
    assert dict(c.patterns["pool"].exits) == {"clean": 1, "crash": 1}
    # teardowns: jobs' own (1) + the pool's bye (1) + devices left alive at an exit (1)
    assert (c.full_teardowns, c.handle_releases) == (3, 7)
    assert c.patterns["pool"].full_teardowns == 1 and c.patterns["pool"].handle_releases == 1
    assert c.duration_s == 10.0 and c.devices_created == 4


def test_summary_json_and_the_report_show_the_store_counts(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    s = summary.build(run)
    r = report.build([run])
    d = r.as_dict()

    assert s["jobs"] == d["jobs"] == r.overall.units == 5
    assert s["exposures"]["process_exits"]["total"] == \
        sum(e["process_exits"] for e in d["exposures"]) == 3
    assert s["exposures"]["full_teardowns"]["by_pattern"] == \
        {e["pattern"]: e["full_teardowns"] for e in d["exposures"]}
    text = report.render_text(r)
    assert "in 5 jobs" in text and "5 jobs (4 reported, 1 ended with their process)" in text
    total = next(line for line in text.splitlines() if line.strip().startswith("total"))
    assert total.split()[1:4] == ["5", "40", "3"]


def test_a_merged_store_counts_the_wall_clock_its_runs_cover(tmp_path: Path) -> None:
    from stress.store import merge

    # two shards side by side (overlapping 5 s), a third after a 20 s gap
    shards = [write_run(tmp_path / "a", "a", 1000.0), write_run(tmp_path / "b", "b", 1005.0),
              write_run(tmp_path / "c", "c", 1035.0)]
    out = tmp_path / "merged"
    merge.merge(shards, out)
    s = summary.build(out)

    assert s["duration_s"] == 25.0  # 1000-1015 and 1035-1045, not 30 s summed nor 45 s span
    assert s["jobs"] == 15 and s["invocations_per_s"] == round(120 / 25.0, 1)
    assert s["exposures"]["process_exits"]["per_s"] == round(9 / 25.0, 3)
    assert [r["duration_s"] for r in s["runs"]] == [10.0, 10.0, 10.0]


def test_merge_writes_the_merged_folders_summary(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    shards = [write_run(tmp_path / "a", "a", 1000.0), write_run(tmp_path / "b", "b", 1005.0)]
    res = run_cli("merge", *map(str, shards), "-o", str(tmp_path / "m"))
    assert res.rc == 0, res.stderr
    s = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert (s["jobs"], s["duration_s"]) == (10, 15.0) and len(s["runs"]) == 2


def test_an_exec_run_says_its_devices_are_the_commands_own(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", engine="exec")
    s = summary.build(run)
    assert s["devices_created"] is None and s["engine"] == "exec"
    from stress.analysis.text import summary_table

    text = summary_table({**s, "manifest": {"config": {"engine": "exec"}}})
    # (issue 36 item 7) its jobs and its processes by how they ended: no invocations, no
    #   devices (the header says they are the command's own), no worker processes
    assert "command processes  4: exited 0 3, killed by a signal 1" in text
    assert "device: the command's own" in text
    body = text.split("\n\n", 1)[1]
    assert "invocations" not in body and "worker processes" not in body
    assert "process exits after device use" not in text
    assert json.dumps(s)
