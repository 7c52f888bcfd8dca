"""`soak --resume` (stress/soak/resume.py, issue 28 item 1): the folder's plan goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.engine.config import SoakConfig
from stress.errors import UsageError
from stress.programs import corpus, targets
from stress.soak.options import SoakOptions
from stress.soak.resume import continue_plan, planned_before

PLAN = {"seed": 5, "target": "cpu", "programs": ["unary.exp.f32.64x64"],
        "patterns": ["shared", "churn"], "shard": [0, 1], "job_seed": None, "inject": [],
        "engine": "python", "invocations": None, "duration_s": 20.0, "workers": 2,
        "threads": 2, "env": {"A": "1"}, "timeout_s": 30.0, "teardown_timeout_s": 15.0,
        "max_worker_restarts": 50, "python": None, "max_failures": None,
        "device_uri": "local-task", "exec_argv": [], "done_regex": None, "record": False,
        "max_jobs_per_worker": None}


def options(given: dict[str, object]) -> SoakOptions:
    base = SoakOptions(target=None, device=None, workers=None, threads=2, patterns=[],
                       programs=[], program_files=[], duration_s=None, invocations=None,
                       seed=None, env={}, max_failures=None, results=Path("r"),
                       timeout_s=30.0, teardown_timeout_s=15.0, max_worker_restarts=50,
                       inject=[], python=None, shard=(0, 1), job_seed=None,
                       cache_dir=Path("c"), compile_jobs=2, progress=False, resume=True)
    fields = {"seed": "seed", "duration": "duration_s", "workers": "workers",
              "patterns": "patterns"}
    for k, v in given.items():
        setattr(base, fields[k], v)
    base.given = frozenset(given)
    return base


def test_options_left_out_are_the_plans_and_given_run_conditions_win() -> None:
    opts = continue_plan(options({"duration": 5.0, "workers": 4}), [{"config": PLAN}])
    assert (opts.seed, opts.programs, opts.patterns, opts.env) == \
        (5, ["unary.exp.f32.64x64"], ["shared", "churn"], {"A": "1"})
    assert (opts.duration_s, opts.workers) == (5.0, 4)


def test_a_given_option_that_changes_the_plan_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError) as err:
        continue_plan(options({"seed": 6}), [{"config": PLAN}])
    assert "seed is 5, not 6" in str(err.value) and "new --results folder" in str(err.value)
    assert continue_plan(options({"seed": 5}), [{"config": PLAN}]).seed == 5


def test_a_plan_bounded_by_invocations_resumes_with_what_it_has_left() -> None:
    progs = corpus.select(["unary.exp.f32.64x64"])
    cfg = SoakConfig(target=targets.parse("cpu"), driver="local-task", device_uri="",
                     programs=progs, artifacts={}, patterns=["shared"], workers=1, threads=1,
                     seed=5, invocations=1000, first_job=4)
    assert planned_before(cfg, Path("r")) == 400  # 4 shared jobs of 100 invocations
    cfg.first_job = 10
    with pytest.raises(UsageError, match="is done"):
        planned_before(cfg, Path("r"))


def test_a_resume_that_completes_an_interrupted_plan_exits_by_what_it_found(
        tmp_path: Path) -> None:
    """issue 36 item 11: the folder's summary said "interrupted" (the first run's status) and
    soak exited 3 though the resumed run finished the plan; a merge of shards, one of them
    interrupted, still cannot vouch for its result."""
    from stress.cli import soak_exit_code
    from stress.store import rundir, summary
    from stress.store.db import RunStore

    folder = tmp_path / "run"
    folder.mkdir()
    store = RunStore(folder)
    store.start_run("run", 5, "iree-stress soak --seed 5", {}, {"seed": 5})
    store.end_run("run", "interrupted", "duration reached; interrupted by SIGINT")
    store.close()
    resumed = rundir.prepare(folder, 5, resume=True)
    assert resumed.files.name == "resume-1"  # the first resume (was resume-2)
    store = RunStore(folder)
    store.start_run(resumed.run_id, 5, "iree-stress soak --resume", {}, {"seed": 5})
    store.end_run(resumed.run_id, "completed", "duration reached")
    store.close()
    resumed.release()
    done = summary.build(folder)
    assert (done["status"], done["stop_reason"]) == ("completed", "duration reached")
    assert soak_exit_code(done) == 0

    shards = tmp_path / "merged"  # not one plan's runs: the worst status stands
    shards.mkdir()
    store = RunStore(shards)
    for run_id, status in (("a", "interrupted"), ("b", "completed")):
        store.start_run(run_id, 5, "iree-stress soak", {}, {"seed": 5})
        store.end_run(run_id, status, "duration reached")
    store.close()
    assert soak_exit_code(summary.build(shards)) == 3
