"""One repro story (issue 28, item 7): every engine's repro.sh runs `iree-stress repro`, which
reads the run's config from the store that holds the failure and uses the same artifact cache
as soak (XDG_CACHE_HOME included)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stress.engine import evidence
from stress.engine.config import SoakConfig
from stress.engine.jobs import Job
from stress.programs import targets
from stress.soak.repro import repro_options, run_config, store_of
from stress.store.db import RunStore


def config(engine: str) -> SoakConfig:
    return SoakConfig(target=targets.parse("cpu"), driver="local-task",
                      device_uri="local-task", programs=[], artifacts={},
                      patterns=["shared"], workers=2, threads=2, seed=7, engine=engine)


@pytest.mark.parametrize("engine", ["python", "exec", "native"])
def test_every_engines_repro_sh_runs_iree_stress_repro_on_its_own_folder(engine: str) -> None:
    job = Job(3, "unary.exp.f32.64x64", "shared", 99, 100)
    line = evidence.repro_command(config(engine), job)
    assert line.startswith("exec ") and " -m stress repro " in line and line.endswith('"$@"')
    assert "soak" not in line and "--duration" not in line  # not a 60 s soak into ./results


@pytest.mark.parametrize("source_checkout", [False, True])
def test_repro_sh_runs_without_iree_stress_on_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source_checkout: bool) -> None:
    """issue 36 item 12: the script said `exec iree-stress repro ...` ("iree-stress: not
    found" outside the venv); it names the interpreter that made the run (and the checkout
    it imported through PYTHONPATH, when it did)."""
    if source_checkout:
        monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    else:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    job = Job(3, "unary.exp.f32.64x64", "shared", 99, 100)
    evidence.write_folder(tmp_path, config("exec"), "", "", job, "", {})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no venv, no PYTHONPATH
    res = subprocess.run(["sh", str(tmp_path / "repro.sh"), "--help"], capture_output=True,
                         text=True, env=env, cwd="/", timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Usage:" in res.stdout and "repro" in res.stdout


FAILURE_CFG = {"engine": "python", "target": "cpu", "threads": 2, "seed": 7,
               "timeout_s": 30.0, "teardown_timeout_s": 15.0}


def job() -> dict[str, object]:
    return {"index": 3, "program": "unary.exp.f32.64x64", "pattern": "churn", "seed": 99,
            "invocations": 24}


def test_repro_uses_xdg_cache_home_like_soak_when_no_cache_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IREE_STRESS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    opts = repro_options(tmp_path / "f", 5, FAILURE_CFG, job(), "crash", False)
    assert opts.cache_dir == tmp_path / "xdg" / "iree-stress"
    monkeypatch.setenv("IREE_STRESS_CACHE", str(tmp_path / "named"))
    assert repro_options(tmp_path / "f", 5, FAILURE_CFG, job(), "crash", False).cache_dir == \
        tmp_path / "named"


def test_repro_reruns_exactly_the_job_alone_and_writes_under_the_failure_folder(
        tmp_path: Path) -> None:
    folder = tmp_path / "run" / "failures" / "0001-crash-w0"
    folder.mkdir(parents=True)
    opts = repro_options(folder, 5, FAILURE_CFG, job(), "crash", True)
    assert (opts.programs, opts.patterns, opts.job_seed) == (["unary.exp.f32.64x64"],
                                                            ["churn"], 99)
    assert opts.invocations == 5 * 24 and opts.workers == 1 and opts.seed == 7
    assert opts.results is not None and opts.results.parent == folder
    assert opts.repro_class == "crash" and opts.repro_runs == 5
    opts.results.mkdir()
    assert repro_options(folder, 5, FAILURE_CFG, job(), "crash", True).results != opts.results


def test_the_failure_of_a_resumed_run_is_rerun_with_its_own_runs_config(
        tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    store = RunStore(root)
    for run_id, seed in (("run", 1), ("run-resume-2", 2)):
        store.start_run(run_id, seed, "", {}, {**FAILURE_CFG, "seed": seed})
    folder = root / "resume-2" / "failures" / "0001-crash-w0"
    folder.mkdir(parents=True)
    store.add_failure("run-resume-2", {"class": "crash", "artifacts": str(folder)})
    store.close()
    assert store_of(folder) == root.resolve()
    assert run_config(root, folder)["seed"] == 2
    moved = tmp_path / "elsewhere"
    root.rename(moved)  # CI artifacts: read where they were downloaded
    assert run_config(moved, moved / "resume-2" / "failures" / "0001-crash-w0")["seed"] == 2
    assert json.loads(json.dumps(run_config(moved, moved / "failures" / "x")))["seed"] == 1
