"""The soak's options (stress/soak/options.py) and the plan they define: compare and bisect
find a stack's earlier trials by the plan's key, so the key of a given plan must not change
when the options' code does (trials on disk would stop counting)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from stress.soak.options import SoakOptions
from stress.verdicts.compare import base_plan_key, family_key


def options() -> SoakOptions:
    return SoakOptions(target="cpu", device=None, workers=2, threads=2, patterns=["shared"],
                       programs=["unary.*"], program_files=[], duration_s=3.0, invocations=None,
                       seed=None, env={"A": "1"}, max_failures=None, results=Path("/r"),
                       timeout_s=30.0, teardown_timeout_s=15.0, max_worker_restarts=50,
                       inject=[], python=None, shard=(0, 1), job_seed=None,
                       cache_dir=Path("/c"), compile_jobs=2, progress=False)


def test_a_plans_key_is_the_one_its_trials_were_stored_under() -> None:
    assert base_plan_key(options(), 7) == "c6c86ed2354a"  # (as before the options moved: checked)
    assert family_key(options()) == "426ca848222c"


def test_where_and_how_a_soak_runs_is_not_part_of_its_plan() -> None:
    base = options()
    moved = replace(base, results=Path("/elsewhere"), python="/venv/bin/python",
                    cache_dir=Path("/other"), compile_jobs=8, progress=True, seed=3)
    assert moved.plan_parts() == base.plan_parts()
    assert replace(base, threads=4).plan_parts() != base.plan_parts()
    assert replace(base, engine="exec", command=["t"]).plan_parts() != base.plan_parts()
