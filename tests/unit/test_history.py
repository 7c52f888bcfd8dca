"""History without new trials (issue 38): nightly gate runs already on disk, grouped by the
stack each ran on and ordered by build date, give bisect's change-point posterior; a rise is
named without a trial, and `bisect --history` counts the runs and adds trials only where it is
still unsure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stress.cli import cli
from stress.verdicts.history import By, read_runs, stack_of
from tests.helpers.nightly_index import Nightly, stand_in_trials, write_index

NIGHTLIES = [f"7.11.0a202511{d}" for d in (24, 25, 26, 27, 28)] + \
    ["10.0.0a20251201", "10.0.0a20251202", "10.0.0a20251203"]
ROSE_AT = 4  # 7.11.0a20251128: the rate rises from 0 to 3 runs in 8


def gate_run(folder: Path, failed: bool, manifest: dict[str, Any] | None = None,
             status: str = "completed") -> None:
    """A gate's run folder as CI keeps it: its summary.json (the keys history reads)."""
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({
        "status": status, "jobs": 40, "failed": 3 if failed else 0,
        "failures": {"crash": 3} if failed else {}, "harness_errors": 0,
        "manifest": manifest or {"iree_runtime": "3.10.0", "hip_library": None}}))


def nightly_gates(root: Path, runs: int, rose_at: int = ROSE_AT) -> None:
    """`runs` gate runs a nightly under root/NIGHTLY/shard-K (the version in the path only),
    3 of 8 failing from `rose_at` on, none before; listed by name (10.0 before 7.11)."""
    for v in sorted(NIGHTLIES):
        at = NIGHTLIES.index(v)
        for k in range(runs):
            gate_run(root / v / f"shard-{k}", at >= rose_at and k % 8 in (1, 4, 6))


def test_a_rise_in_nightly_gate_runs_on_disk_is_named_without_a_new_trial(
        tmp_path: Path) -> None:
    nightly_gates(tmp_path / "gates", runs=24)  # 16: 97.2% (a faint first rise
    #   on the last stack that passed 16 runs is not ruled out yet)
    res = CliRunner().invoke(cli, ["history", str(tmp_path / "gates")])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith(f"HISTORY  found: first bad stack: {NIGHTLIES[ROSE_AT]} (last good: "
                          f"{NIGHTLIES[ROSE_AT - 1]}); posterior 9")
    assert "from 192 trials (0 run now, 192 from disk)" in out
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("  7.") or
            line.startswith("  10.")]
    assert rows == NIGHTLIES  # by build date, not by name
    js = json.loads(CliRunner().invoke(cli, ["history", str(tmp_path / "gates"),
                                             "--json"]).stdout)
    assert js["first_bad"] == NIGHTLIES[ROSE_AT] and js["ran"] == 0 and len(js["runs"]) == 192


def test_too_few_runs_say_unsure_and_where_a_trial_would_tell_most(tmp_path: Path) -> None:
    nightly_gates(tmp_path / "gates", runs=2)
    res = CliRunner().invoke(cli, ["history", str(tmp_path / "gates")])
    assert res.exit_code == 3, res.output
    assert "HISTORY  inconclusive: not sure from the 16 runs on disk (no stack at 97.5%)" \
        in res.stdout
    assert f"still unsure: `iree-stress bisect --stacks F --good {NIGHTLIES[0]} --bad " \
           f"{NIGHTLIES[-1]} --history RUN...` adds trials only where it is" in res.stdout


def test_runs_that_show_no_stack_bad_say_so_without_asking_for_more_trials(
        tmp_path: Path) -> None:
    # no nightly fails in 32 runs: "no stack is bad" past 97.5%; a bisect over the same runs
    # would stop before its first trial, so no "still unsure" line sends the user there
    nightly_gates(tmp_path / "gates", runs=32, rose_at=len(NIGHTLIES))
    res = CliRunner().invoke(cli, ["history", str(tmp_path / "gates")])
    assert res.exit_code == 3, res.output
    assert res.stdout.startswith(f"HISTORY  inconclusive: the bad end {NIGHTLIES[-1]} fails "
                                 f"like the stacks before it")
    assert "still unsure" not in res.stdout


def test_bisect_history_counts_the_runs_on_disk_and_adds_trials_only_where_unsure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stress.verdicts.compare as compare_mod

    trials = stand_in_trials(NIGHTLIES, NIGHTLIES[ROSE_AT], 0.4)
    monkeypatch.setattr(compare_mod, "SoakTrials", trials)
    write_index(tmp_path / "index", [Nightly(v) for v in NIGHTLIES])
    stacks = tmp_path / "stacks.toml"
    common = ["--cache-dir", str(tmp_path / "cache")]
    assert CliRunner().invoke(cli, ["stacks", "--index", str(tmp_path / "index" / "bucket"),
                                    "--from", NIGHTLIES[0], "--to", NIGHTLIES[-1], "-o",
                                    str(stacks), "-q", *common]).exit_code == 0
    nightly_gates(tmp_path / "gates", runs=8)
    alone = CliRunner().invoke(cli, ["history", str(tmp_path / "gates")])
    assert alone.exit_code == 3, alone.output  # not enough on their own
    res = CliRunner().invoke(cli, [
        "bisect", "--stacks", str(stacks), "--good", NIGHTLIES[0], "--bad", NIGHTLIES[-1],
        "-n", "3", "-t", "cpu", "--seed", "11", *common, "--json", "--results",
        str(tmp_path / "bis"), "--history", str(tmp_path / "gates")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["first_bad"] == NIGHTLIES[ROSE_AT] and out["confidence"] >= 0.975
    assert out["from_disk"] == 64 and out["ran"] == len(trials.runs) >= 1
    # where it was unsure: the two stacks around the rise, nowhere else
    assert set(trials.runs) <= set(NIGHTLIES[ROSE_AT - 1:ROSE_AT + 1])


def test_a_runs_stack_is_read_from_its_libraries_its_tree_or_its_folder(
        tmp_path: Path) -> None:
    tree = tmp_path / "opt" / "rocm"
    (tree / "lib").mkdir(parents=True)
    (tree / ".info").mkdir()
    (tree / ".info" / "version").write_text("7.11.0a20251126\n")
    cases = [
        ({"hip_library": "/opt/rocm-7.11.0a20251124/lib/libamdhip64.so.7"}, "7.11.0a20251124"),
        ({"loaded_gpu_libraries": [str(tree / "lib" / "libamdhip64.so.7")]}, "7.11.0a20251126"),
        ({}, "10.0.0a20251201+bkc.20251204"),
    ]
    for i, (manifest, want) in enumerate(cases):
        folder = tmp_path / "gates" / "10.0.0a20251201+bkc.20251204" / f"run-{i}"
        assert stack_of(folder, {"manifest": manifest}, By.ROCM) == want
    assert stack_of(tmp_path, {"manifest": {"iree_runtime": "3.12.0"}}, By.RUNTIME) == "3.12.0"


def test_runs_that_are_not_results_are_left_out_with_the_reason(tmp_path: Path) -> None:
    gate_run(tmp_path / "7.11.0a20251124" / "ok", False)
    gate_run(tmp_path / "7.11.0a20251125" / "broken", False, status="interrupted")
    gate_run(tmp_path / "somewhere" / "unnamed", True)
    runs, skipped = read_runs([tmp_path])
    assert [r.stack for r in runs] == ["7.11.0a20251124"]
    assert any("interrupted without a failure (not a result)" in s for s in skipped)
    assert any("no stack version found" in s for s in skipped)


def test_nightlies_whose_workers_loaded_the_same_hip_bytes_are_one_stack(
        tmp_path: Path) -> None:
    for i, v in enumerate(NIGHTLIES):
        hip = "same" if i in (1, 2) else f"hip {i}"
        for k in range(24):
            gate_run(tmp_path / v / f"shard-{k}", i >= ROSE_AT and k % 8 in (1, 4, 6), {
                "library_hashes": {f"/opt/rocm-{v}/lib/libamdhip64.so.7": hip}})
    res = CliRunner().invoke(cli, ["history", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert f"identical stacks (their workers loaded the same HIP, HSA and IREE runtime " \
           f"bytes): {NIGHTLIES[1]} = {NIGHTLIES[2]}: tested once" in res.output
    assert f"  {NIGHTLIES[1]:<32}      0/48" in res.stdout  # both nightlies' runs, one row


def test_a_sharded_gate_is_one_run_and_a_merged_folder_beside_its_shards_counts_once(
        tmp_path: Path) -> None:
    def shard(folder: Path, k: int, failed: bool) -> None:
        gate_run(folder, failed, {"config": {"shard": [k, 2], "seed": 7}})
        s = json.loads((folder / "summary.json").read_text())
        s.update(run_id=f"{folder.parent.name}-{k}", seed=7)
        (folder / "summary.json").write_text(json.dumps(s))

    for v in NIGHTLIES[:3]:
        shard(tmp_path / v / "shard-1", 0, False)
        shard(tmp_path / v / "shard-2", 1, v == NIGHTLIES[1])
    merged = tmp_path / NIGHTLIES[2] / "merged"
    gate_run(merged, False)
    s = json.loads((merged / "summary.json").read_text())
    s.update(run_id=f"{NIGHTLIES[2]}-0+{NIGHTLIES[2]}-1", runs=[{}, {}])
    (merged / "summary.json").write_text(json.dumps(s))
    shard(tmp_path / NIGHTLIES[3] / "shard-1", 0, False)  # its other shard never came back
    runs, skipped = read_runs([tmp_path])
    assert sorted((r.stack, r.failed) for r in runs) == sorted(
        [(NIGHTLIES[0], False), (NIGHTLIES[1], True), (NIGHTLIES[2], False)])
    assert sum("counted in the merged" in s for s in skipped) == 2
    assert any("1 of 2 shards, none failed (not a result)" in s for s in skipped)


def test_iree_releases_and_their_dated_rcs_are_in_version_order_under_by_runtime() -> None:
    from stress.verdicts.history import order

    assert order(["3.11.0", "3.12.0rc20251120", "3.11.0rc20251016", "3.10.0"]) == \
        ["3.10.0", "3.11.0rc20251016", "3.11.0", "3.12.0rc20251120"]
    assert order(NIGHTLIES[::-1]) == NIGHTLIES  # all dated: by date (7.11 -> 10.0)


def test_a_run_whose_workers_reported_no_runtime_names_no_stack_under_by_runtime(
        tmp_path: Path) -> None:
    for i, reported in enumerate(("", "?", None, "3.12.0 (abc)")):
        gate_run(tmp_path / f"run-{i}", False, {"iree_runtime": reported})
    runs, skipped = read_runs([tmp_path], By.RUNTIME)
    assert [r.stack for r in runs] == ["3.12.0"]
    assert sum("no stack version found" in s for s in skipped) == 3


def test_nightlies_with_the_same_hip_bytes_under_another_iree_runtime_are_two_stacks(
        tmp_path: Path) -> None:
    for i, v in enumerate(NIGHTLIES[:3]):
        gate_run(tmp_path / v / "run", False, {"library_hashes": {
            f"/opt/rocm-{v}/lib/libamdhip64.so.7": "same hip",
            "/venv/iree/_runtime_libs/_runtime.so": "iree a" if i < 2 else "iree b"}})
    runs, _skipped = read_runs([tmp_path])
    digests = {r.stack: r.digest for r in runs}
    assert digests[NIGHTLIES[0]] == digests[NIGHTLIES[1]] != digests[NIGHTLIES[2]]
