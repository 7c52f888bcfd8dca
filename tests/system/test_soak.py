"""iree-stress soak end to end on cpu (issue #3)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from stress.engine.patterns import ALL_PATTERNS
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.system


def test_a_30s_cpu_soak_completes_10k_invocations_over_every_pattern_without_failures(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    res = run_cli("soak", "--target", "cpu", "--duration", "30s", "--json", "--results",
                  str(tmp_path / "run"))
    assert res.rc == 0, res.stderr[-3000:]
    s = res.json()
    assert s["invocations"] >= 10_000
    assert set(s["patterns"]) == set(ALL_PATTERNS) and all(s["patterns"].values())
    assert s["failures"] == {"crash": 0, "hang": 0, "teardown_hang": 0, "error": 0,
                             "miscompare": 0, "failed": 0}
    assert s["duration_s"] >= 30 and s["seed"] == int(s["seed"])
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk == s
    m = s["manifest"]
    assert m["iree_runtime"] and m["iree_compiler"] and m["kernel"] and m["host"]
    assert m["config"]["patterns"] == list(ALL_PATTERNS) and m["seed"] == s["seed"]
    assert "--seed" in s["command"]  # the command that reproduces the run


def job_sequence(run: Path) -> list[tuple[int, str, str, int, int]]:
    db = sqlite3.connect(run / "stress.db")
    return sorted(tuple(r) for r in db.execute(  # type: ignore[misc]
        "SELECT job_index, program, pattern, seed, planned FROM jobs"))


def test_the_same_seed_runs_the_same_jobs(tmp_path: Path,
                                          cpu_artifacts: dict[str, Path]) -> None:
    args = ["soak", "--target", "cpu", "--invocations", "400", "--workers", "2", "-q",
            "--programs", "unary.*.f32.*,binary.*.f32.*"]
    runs = []
    for name, seed in (("a", "11"), ("b", "11"), ("c", "12")):
        res = run_cli(*args, "--seed", seed, "--results", str(tmp_path / name))
        assert res.rc == 0, res.stderr[-2000:]
        runs.append(job_sequence(tmp_path / name))
    assert runs[0] == runs[1] and len(runs[0]) > 10
    assert runs[0] != runs[2]


def test_a_fusilli_style_torch_program_soaks_with_generated_inputs(tmp_path: Path) -> None:
    examples = REPO / "stress" / "programs" / "mlir" / "examples"
    res = run_cli("soak", "--target", "cpu", "--program",
                  str(examples / "fusilli_bias_relu.torch.mlir"), "--program",
                  str(examples / "scale_shift.mlir"), "--invocations", "300",
                  "--workers", "1", "--json", "-q", "--results", str(tmp_path / "r"))
    assert res.rc == 0, res.stderr[-2000:]
    s = res.json()
    assert s["invocations"] >= 300 and not s["failed"]
    db = sqlite3.connect(tmp_path / "r" / "stress.db")
    programs = {r[0] for r in db.execute("SELECT DISTINCT program FROM jobs")}
    assert programs == {"user.fusilli_bias_relu.torch", "user.scale_shift"}


@pytest.mark.parametrize("args,message", [
    (["--target", "tpu"], "unknown target 'tpu'; known targets"),
    (["--programs", "nothing.*"], "no corpus program matches 'nothing.*'"),
    (["--patterns", "sometimes"], "unknown pattern(s) sometimes; known: all, exit, driver, shared"),
    (["--duration", "0s"], "must be positive"),
    (["--duration", "-3s"], "not a duration"),
    (["--program", "/missing.mlir"], "program file not found: /missing.mlir"),
    (["--results", "/proc/forbidden"], "is not writable"),
    (["--inject", "segv@nowhere"], "bad --inject 'segv@nowhere'"),
    (["--env", "NOEQUALS"], "--env wants KEY=VALUE"),
    (["--cache-dir", "/proc/no-cache-here", "--results", "/tmp/iree-stress-cache-test"],
     "cache dir /proc/no-cache-here is not writable"),
    (["--engine", "exec", "--", "/nonexistent/prog"],
     "cannot run the command: '/nonexistent/prog' is not an executable file"),
    (["--engine", "exec", "--", "no-such-command-here"], "is not an executable file on PATH"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    res = run_cli("soak", "-q", "--duration", "5s", *args)
    assert res.rc == 2
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_an_unusable_gpu_driver_names_the_library_and_the_usable_drivers() -> None:
    env = {k: v for k, v in os.environ.items() if k != "IREE_HIP_DYLIB_PATH"}
    res = run_cli("soak", "--target", "rocm", "--duration", "5s", env=env)
    assert res.rc == 2
    line = res.stderr.strip().splitlines()[-1]
    assert "driver 'hip' cannot load here" in line
    assert "libamdhip64" in line and "IREE_HIP_DYLIB_PATH" in line
    assert "usable drivers: " in line and "local-task" in line
    assert "Traceback" not in res.stderr


def _pool_overlap(db: sqlite3.Connection) -> int:
    """The most pool workers alive at once (from their start and end times)."""
    events = sorted(e for s_, e_ in db.execute(
        "SELECT started_at, ended_at FROM workers WHERE pattern = 'pool'")
        for e in ((s_, 1), (e_, -1)))
    alive = most = 0
    for _, d in events:
        alive += d
        most = max(most, alive)
    return most


@pytest.mark.parametrize("inject", [[], ["--inject", "segv@worker-exit:1"]],
                         ids=["clean", "every-exit-crashes"])
def test_max_jobs_per_worker_retires_pool_workers_and_never_runs_more_than_asked(
        tmp_path: Path, cpu_artifacts: dict[str, Path], inject: list[str]) -> None:
    run = tmp_path / "run"
    res = run_cli("soak", "--target", "cpu", "--programs", "binary.add.f32.3x5x7+3x5x7",
                  "--patterns", "shared,churn", "--workers", "2", "-n", "4000",
                  "--max-jobs-per-worker", "5", "--json", "-q", "--results", str(run), *inject)
    s = res.json()
    assert s["manifest"]["config"]["max_jobs_per_worker"] == 5
    db = sqlite3.connect(run / "stress.db")
    per_pid = [n for (n,) in db.execute("SELECT COUNT(*) FROM jobs GROUP BY pid")]
    assert max(per_pid) <= 5 and len(per_pid) >= 8  # retired every <= 5 jobs, replaced
    assert _pool_overlap(db) <= 2  # a successor starts when its predecessor has gone
    crashes = s["failures"]["crash"]
    if inject:  # each retiree's exit crashes: recorded, and no restart budget spent on them
        assert res.rc == 1 and crashes >= 8, res.stderr[-2000:]
        assert "restarts" not in (s.get("stop_reason") or "")
    else:
        assert res.rc == 0, res.stderr[-3000:]
        assert crashes == 0 and sum(per_pid) == s["jobs"]
        assert {o for (o,) in db.execute("SELECT outcome FROM workers")} == {"clean"}


def test_a_stop_gives_back_the_queued_jobs_a_worker_has_not_begun(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """A pool worker holds 2 x threads jobs; at the end of a timed run (or a gate's decision)
    the ones not begun are not run: the run ends after the jobs in flight, and says how many
    it left (before, a stop ran them all: a second 2048x4096 job here)."""
    import re

    run = tmp_path / "run"
    res = run_cli("soak", "--target", "cpu", "--programs", "unary.relu.f32.2048x4096",
                  "--patterns", "shared", "--workers", "2", "--threads", "1", "--duration",
                  "3s", "--json", "-q", "--results", str(run))
    assert res.rc == 0, res.stderr[-3000:]
    s = res.json()
    # each worker holds a queued job but for the ~ms between a job's end and its refill
    m = re.search(r"(\d+) queued job\(s\) not started", s["stop_reason"])
    assert m and int(m.group(1)) >= 1, s["stop_reason"]
    assert "harness errors" not in s["stop_reason"] and "unreported" not in s["stop_reason"]
    db = sqlite3.connect(run / "stress.db")
    rows = db.execute("SELECT COUNT(*), SUM(ended_at IS NOT NULL) FROM jobs").fetchone()
    assert rows[0] == (rows[1] or 0) == s["jobs"]


def test_a_worker_gives_back_only_what_no_thread_took_and_the_parent_forgets_those() -> None:
    import queue
    from types import SimpleNamespace

    from stress.engine.jobs import Job
    from stress.engine.session import Session
    from stress.engine.tally import RunTally
    from stress.engine.worker import Worker

    sent: list[tuple[str, dict[str, object]]] = []
    w = SimpleNamespace(jobs=queue.Queue(), msg=SimpleNamespace(
        send=lambda name, payload: sent.append((name, payload))))
    jobs = [Job(i, "p", "shared", i, 10) for i in range(4)]
    for j in jobs:
        w.jobs.put(j)
    assert w.jobs.get() is jobs[0]  # a thread began job 0
    Worker.drop_queued(w)  # type: ignore[arg-type]
    assert sent == [("jobs_dropped", {"jobs": [1, 2, 3]})] and w.jobs.empty()
    h = SimpleNamespace(outstanding={j.index: j for j in jobs})
    s = SimpleNamespace(tally=RunTally())
    Session.on_jobs_dropped(s, h, sent[0][1])  # type: ignore[arg-type]
    assert list(h.outstanding) == [0] and s.tally.jobs_not_started == 3
    Worker.drop_queued(w)  # type: ignore[arg-type]
    assert len(sent) == 1  # nothing left: no message


def test_workers_started_after_the_package_changed_still_run_the_parents_code(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """A long soak outlives `git pull` or `pip install -U`: the run's workers import the copy
    of the package taken at its start, not the live one (on the H200 a worker started after
    the checkout was replaced died on an ImportError). Here a module of the package the soak
    was started from is deleted while one-job processes keep starting."""
    import shutil
    import subprocess
    import sys

    from tests.conftest import TEST_CACHE
    from tests.helpers.waits import stored_jobs, wait_until

    root = tmp_path / "pkg"
    shutil.copytree(REPO / "stress", root / "stress",
                    ignore=shutil.ignore_patterns("__pycache__"))
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stress", "soak", "--target", "cpu", "--programs",
         "binary.add.f32.3x5x7+3x5x7", "--patterns", "process-per-job", "--workers", "2",
         "--duration", "6s", "--json", "-q", "--results", str(run)],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "IREE_STRESS_CACHE": str(TEST_CACHE), "PYTHONPATH": str(root)})
    # the update lands mid-run: once workers started from the run's copy have stored a job
    assert wait_until(lambda: (run / "worker-path" / "stress").is_dir() and
                      stored_jobs(run) >= 1, 60), "no job stored within 60 s"
    (root / "stress" / "engine" / "procstate.py").unlink()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    s = json.loads(out)
    assert "harness errors" not in s["stop_reason"], s["stop_reason"]
    assert s["jobs"] >= 4 and s["failed"] is False
    assert not (run / "worker-path" / "stress").is_symlink()
