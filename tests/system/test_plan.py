"""The seeded plan across machines: `--shard I/N` splits it without overlap or loss, and
`--artifacts DIR` (from `compile --export`) runs a soak where no compiler is usable (issue 8).
The plan checks are pure (no worker); the soaks are marked `system`."""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from stress.engine.jobs import Job, schedule
from stress.engine.patterns import ALL_PATTERNS
from stress.programs import corpus
from stress.soak.plan import choose_programs
from tests.conftest import REPO, run_cli

_SEED = 2026
_PROGRAMS = "unary.abs.f32.*,binary.add.f32.*"  # few programs: a cold compile stays short
_PATTERNS = "shared,per-call"  # pool patterns only: one job queue, drawn in plan order
_SHARDS = 3
_PLAN_JOBS: int = 2000  # how far the unit checks follow the endless plan


def _plan(shard: tuple[int, int] = (0, 1), programs: str = _PROGRAMS,
          patterns: list[str] | None = None) -> list[Job]:
    progs = choose_programs(programs.split(","), [])
    stream = schedule(_SEED, progs, patterns or _PATTERNS.split(","), shard)
    return list(itertools.takewhile(lambda j: j.index < _PLAN_JOBS, stream))


@pytest.mark.parametrize("count", [2, 3, 5, 8])
def test_the_shards_of_a_seeded_plan_are_disjoint_and_together_are_the_whole_plan(
        count: int) -> None:
    whole = _plan(programs="*", patterns=list(ALL_PATTERNS))
    shards = [_plan((i, count), programs="*", patterns=list(ALL_PATTERNS))
              for i in range(count)]
    indices = [{j.index for j in s} for s in shards]
    for a, b in itertools.combinations(indices, 2):
        assert not a & b
    assert sorted(itertools.chain.from_iterable(shards), key=lambda j: j.index) == whole
    assert all(len(s) > len(whole) / count / 2 for s in shards)  # roughly even, none starved


def _recorded(run: Path) -> list[tuple[int, str, str, int, int]]:
    db = sqlite3.connect(run / "stress.db")
    try:
        return sorted((int(r[0]), r[1], r[2], int(r[3]), int(r[4])) for r in db.execute(
            "SELECT job_index, program, pattern, seed, planned FROM jobs"))
    finally:
        db.close()


@pytest.mark.system
def test_real_sharded_soaks_run_disjoint_jobs_of_the_one_unsharded_plan(
        tmp_path: Path, cache_dir: Path) -> None:
    whole = {j.index: (j.index, j.program, j.pattern, j.seed, j.invocations) for j in _plan()}
    runs = []
    for i in range(_SHARDS):
        res = run_cli("soak", "--target", "cpu", "--seed", str(_SEED), "--shard",
                      f"{i + 1}/{_SHARDS}", "--programs", _PROGRAMS, "--patterns", _PATTERNS,
                      "--invocations", "400", "--workers", "1", "-q",
                      "--results", str(tmp_path / f"shard{i}"))
        assert res.rc == 0, res.stderr[-3000:]
        runs.append(_recorded(tmp_path / f"shard{i}"))
    for i, jobs in enumerate(runs):
        assert jobs, f"shard {i} ran no job"
        indices = [j[0] for j in jobs]
        assert len(indices) == len(set(indices)), f"shard {i} ran a job twice"
        own = [j.index for j in _plan((i, _SHARDS))]
        assert set(indices) <= set(own), f"shard {i} ran jobs of another shard"
        # drawn in plan order: what a shard ran is the start of its own slice of the plan
        assert indices == own[:len(indices)]
        for job in jobs:
            assert whole[job[0]] == job  # the same program, pattern, seed and size
    for a, b in itertools.combinations(runs, 2):
        assert not {j[0] for j in a} & {j[0] for j in b}


def _no_compiler_env(tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    """argv prefix and environment of an iree-stress with no usable compiler: an interpreter in
    a venv without iree-compile beside it, and on PATH a fake one that records each call."""
    venv = tmp_path / "nocompiler"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    calls = tmp_path / "compiler-calls"
    fake = venv / "bin" / "iree-compile"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                    "echo 'iree-compile: unusable on this machine' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    real_dirs = {str(Path(p).parent) for p in (shutil.which("iree-compile"),) if p}
    real_dirs.add(str(Path(sys.executable).parent))
    path = [str(venv / "bin")] + [d for d in os.environ.get("PATH", "").split(os.pathsep)
                                  if d and d not in real_dirs]
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "PATH": os.pathsep.join(path), "PYTHONPATH": os.pathsep.join([str(REPO), *deps]),
           "IREE_STRESS_CACHE": str(tmp_path / "untouched-cache")}
    return [str(venv / "bin" / "python"), "-m", "stress"], env, calls


@pytest.mark.system
def test_a_soak_from_exported_artifacts_runs_where_no_compiler_is_usable(
        tmp_path: Path, cache_dir: Path) -> None:
    export = tmp_path / "export"
    res = run_cli("compile", "--target", "cpu", "--programs", _PROGRAMS, "--export", str(export))
    assert res.rc == 0, res.stderr[-2000:]
    argv, env, calls = _no_compiler_env(tmp_path)
    soak = [*argv, "soak", "--target", "cpu", "--programs", _PROGRAMS, "--invocations", "200",
            "--workers", "1", "-q", "--json"]
    control = subprocess.run([*soak, "--results", str(tmp_path / "control")],
                             env={**env, "IREE_STRESS_CACHE": str(tmp_path / "control-cache")},
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert control.returncode == 2 and calls.exists(), control.stderr[-2000:]  # no compiler
    calls.unlink()
    proc = subprocess.run([*soak, "--artifacts", str(export), "--results", str(tmp_path / "r")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not calls.exists()  # no compiler call, not even `--version`
    ran = {j[1] for j in _recorded(tmp_path / "r")}
    assert ran and ran <= {p.name for p in corpus.select(_PROGRAMS.split(","))}
    cache = tmp_path / "untouched-cache"
    assert not cache.exists() or not any(cache.iterdir())
