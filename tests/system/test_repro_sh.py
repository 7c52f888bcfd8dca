"""One repro story (issue 28, item 7): a python-engine failure's repro.sh runs `iree-stress
repro` on its own folder, like the exec and native engines' do; the reruns land under the
failure folder (not a results/ folder wherever the script runs); the answer says a rate; the
artifact cache is the one soak uses (XDG_CACHE_HOME without IREE_STRESS_CACHE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.system


def test_a_python_engine_failures_repro_sh_reruns_its_job_with_iree_stress_repro(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "run"
    res = run_cli("soak", "-t", "cpu", "-w", "1", "--threads", "1", "--programs",
                  "unary.exp.f32.64x64", "--patterns", "shared", "--inject", "segv@invoke:0.5",
                  "--max-failures", "1", "-d", "30s", "-q", "--results", str(run))
    assert res.rc == 1, res.stderr[-2000:]
    folder = next((run / "failures").iterdir())
    script = (folder / "repro.sh").read_text()
    assert "iree-stress repro" in script and "soak" not in script.splitlines()[-1]
    bin_dir = tmp_path / "bin"  # `iree-stress` on PATH: this checkout's
    bin_dir.mkdir()
    (bin_dir / "iree-stress").write_text(f"#!/bin/sh\nexec {sys.executable} -m stress \"$@\"\n")
    (bin_dir / "iree-stress").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "IREE_STRESS_CACHE"}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", PYTHONPATH=str(REPO),
               XDG_CACHE_HOME=str(tmp_path / "xdg"))
    rerun = subprocess.run(["sh", str(folder / "repro.sh"), "--times", "2", "-q"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert rerun.returncode == 1, rerun.stderr[-3000:]  # it crashed again
    assert "crash again in 2/2 runs: rate 100%" in rerun.stdout
    assert not (tmp_path / "results").exists() and not (folder / "results").exists()
    reruns = list(folder.glob("repro-*"))
    assert len(reruns) == 1 and (reruns[0] / "stress.db").is_file()
    # what the reruns tested comes first, and its rerun line is this repro, not a soak
    #   (before: no header, and the reruns' store said `rerun: iree-stress soak`)
    head = rerun.stdout.split("\n\n", 1)[0].splitlines()
    assert head[0].startswith("iree-stress: ") and head[1].startswith("runtime: "), head
    again = f"rerun: iree-stress repro {folder.resolve()} --times 2"
    assert head[-1] == again, head
    report = run_cli("report", str(reruns[0]))
    assert again in report.stdout.splitlines(), report.stdout[:2000]
    assert list((tmp_path / "xdg" / "iree-stress" / "vmfb").glob("*/*.vmfb"))  # soak's cache
