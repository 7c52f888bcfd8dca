"""stress/store/readers.py: the few store facts repro reads (issue 25: repro ran raw SQL)."""

from __future__ import annotations

from pathlib import Path

from stress.store import readers
from stress.store.db import RunStore

CFG = {"engine": "python", "target": "cpu", "timeout_s": 30.0, "teardown_timeout_s": 15.0}


def job(index: int) -> dict[str, object]:
    result = {"invocations": 4, "ok": 4, "miscompare": 0, "errors": 0, "nondeterministic": 0,
              "devices_created": 1, "latency_sum_us": 0, "latency_max_us": 0,
              "latency_hist": []}
    return {"job": {"index": index, "program": "p", "pattern": "shared", "seed": index,
                    "invocations": 4}, "result": result, "started": 0.0, "ended": 1.0}


def test_a_repro_counts_every_job_that_ran_or_failed_and_those_failing_in_its_class(
        tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.start_run("run", 1, "", {}, CFG)
    store.add_job("run", 0, job(0), "ok")
    store.add_job("run", 0, job(1), "ok")
    store.add_failure("run", {"class": "crash", "job_index": 2})  # died: no job row
    store.add_failure("run", {"class": "error", "job_index": 1})
    store.add_failure("run", {"class": "crash"})  # pinned on no job
    store.close()
    assert readers.job_outcomes(tmp_path, "crash") == ({0, 1, 2}, {2})
    assert readers.job_outcomes(tmp_path, "hang") == ({0, 1, 2}, set())


def test_the_config_is_the_recording_runs_else_the_first_runs_else_none(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.flush()
    assert readers.run_config(tmp_path, lambda a: True) is None
    store.start_run("run", 1, "", {}, {**CFG, "seed": 1})
    store.start_run("run-resume-2", 2, "", {}, {**CFG, "seed": 2})
    store.add_failure("run-resume-2", {"class": "crash", "artifacts": "/x/failures/0001"})
    store.close()
    picked = readers.run_config(tmp_path, lambda a: a == "/x/failures/0001")
    assert picked is not None and picked["seed"] == 2
    first = readers.run_config(tmp_path, lambda a: False)
    assert first is not None and first["seed"] == 1
