"""The header every output begins with (issue 28 item 4): what was tested, read from a run's
manifest; its rerun line reproduces the run (a gate's run by the gate); numerics say when a
program is checked for repeatability only (item 10)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from stress.analysis import header
from stress.soak.plan import recorded_command

CUDA: dict[str, Any] = {
    "tool_version": "0.1.0", "iree_compiler": "3.13.0rc20261016 @ 89ece87b89852100c0a4ac3d515e"
    "14842d090967 (prebuilt: /cache/cuda)", "iree_runtime": "3.13.0rc20261016",
    "iree_revisions": {"IREE": "89ece87b89852100c0a4ac3d515e14842d090967"},
    "driver": "cuda", "device_uri": "cuda", "devices": [{"name": "NVIDIA H200"}],
    "loaded_gpu_libraries": ["/usr/local/nvidia/lib64/libcuda.so.580.159.04"],
    "worker_python": "3.12.3", "iree_runtime_path": "/site/iree/runtime", "host": "vm",
    "os": "Linux-6.18", "cpu": "Xeon", "cores": 16, "seed": 1,
    "command": "iree-stress soak --target cuda --seed 1 --results /tmp/soak -q",
    "config": {"engine": "python", "target": "cuda:sm_90", "programs": ["unary.exp.f32.1"],
               "repeatability_only": []}}


def test_a_gpu_runs_header_names_runtime_build_device_and_driver_library() -> None:
    h = dict(header.rows([CUDA]))
    assert h["runtime"] == ("3.13.0rc20261016 (IREE 89ece87b8985) from /site/iree/runtime, "
                            "Python 3.12.3")
    assert h["compiler"] == "3.13.0rc20261016 @ 89ece87b8985 (prebuilt: /cache/cuda)"
    assert h["target"] == "cuda:sm_90" and h["device"] == "cuda: NVIDIA H200"
    assert h["driver"] == "cuda, library /usr/local/nvidia/lib64/libcuda.so.580.159.04"
    assert h["host"] == "vm, Linux-6.18, Xeon, 16 cores" and h["seed"] == "1"
    assert h["rerun"] == "iree-stress soak --target cuda --seed 1 -q"  # a fresh folder


@pytest.mark.parametrize("command,rerun", [
    ("iree-stress soak --results=/r --seed 3", "iree-stress soak --seed 3"),
    ("iree-stress soak --engine exec --results /r -- ./t --results x",
     "iree-stress soak --engine exec -- ./t --results x"),  # the command's own is kept
])
def test_the_rerun_line_leaves_out_only_our_results_folder(command: str, rerun: str) -> None:
    assert header.rerun_command(command) == rerun


def test_numerics_say_which_programs_are_checked_for_repeatability_only() -> None:
    cfg = {**CUDA["config"], "programs": ["user.a", "user.b", "unary.exp.f32.1"],
           "repeatability_only": ["user.a", "user.b"]}
    assert header.numerics({"config": cfg}) == (
        "repeatability only (no reference): user.a, user.b (each result against the first); "
        "numpy reference for the other 1")
    old = {"config": {"programs": ["user.a"]}}  # a store from before the key
    assert header.numerics(old).startswith("repeatability only (no reference): user.a")
    assert header.numerics({"config": {"engine": "exec"}}).startswith("not checked")


def test_a_drawn_seed_goes_before_an_exec_command_not_into_it() -> None:
    """A seed the run drew is added to its rerun line among our options: after `--` it was an
    argument of the user's command, and the rerun drew another seed."""
    from pathlib import Path

    from stress.soak.options import SoakOptions
    from stress.soak.plan import command_line

    opts = SoakOptions(target=None, device=None, workers=1, threads=1, patterns=[],
                       programs=[], program_files=[], duration_s=None, invocations=4,
                       seed=None, env={}, max_failures=None, results=None, timeout_s=1.0,
                       teardown_timeout_s=1.0, max_worker_restarts=1, inject=[], python=None,
                       shard=(0, 1), job_seed=None, cache_dir=Path("."), compile_jobs=1,
                       progress=False, argv=["--engine", "exec", "--", "./t", "{seed}"],
                       from_env=["--workers", "2"])
    assert command_line(opts, 77).endswith(
        "--engine exec --workers 2 --seed 77 -- ./t '{seed}'")


def test_an_exec_rerun_line_with_relative_paths_says_where_it_ran(tmp_path: Path) -> None:
    """issue 36: `rerun: iree-stress soak ... -- python -m pytest tests` dropped the folder,
    so the line reproduced nothing from anywhere else; an absolute command needs no cd."""
    from stress.soak.options import SoakOptions
    from stress.soak.plan import command_line

    (tmp_path / "tests").mkdir()

    def line(*command: str) -> str:
        opts = SoakOptions(target=None, device=None, workers=1, threads=1, patterns=[],
                           programs=[], program_files=[], duration_s=None, invocations=4,
                           seed=3, env={}, max_failures=None, results=None, timeout_s=1.0,
                           teardown_timeout_s=1.0, max_worker_restarts=1, inject=[],
                           python=None, shard=(0, 1), job_seed=None, cache_dir=Path("."),
                           compile_jobs=1, progress=False, engine="exec", cwd=tmp_path,
                           argv=["--engine", "exec", "--seed", "3", "--", *command])
        return command_line(opts, 3)

    assert line("python", "-m", "pytest", "-q", "tests") == \
        f"cd {tmp_path} && iree-stress soak --engine exec --seed 3 -- python -m pytest -q tests"
    assert line("/opt/bin/t", "--rng-seed", "{seed}").startswith("iree-stress soak ")
    assert line("python", "-c", "print(1)\n" * 40).startswith("iree-stress soak ")  # (a name
    #   too long for a path is no path: it raised ENAMETOOLONG)


def test_runs_that_differ_list_each_value_once() -> None:
    other = {**CUDA, "iree_runtime": "3.12.0"}
    h = dict(header.rows([CUDA, CUDA, other]))
    assert h["runtime"].count("3.13.0rc20261016") == 1 and " | 3.12.0" in h["runtime"]
    assert h["host"] == "vm, Linux-6.18, Xeon, 16 cores"


def test_a_compare_header_says_each_stacks_runtime_and_what_they_share_once() -> None:
    older = {**CUDA, "iree_runtime": "3.12.0", "iree_revisions": {}}
    h = header.of_arms([("A old", [older, older]), ("B new", [CUDA]), ("C none", [])],
                       "iree-stress compare old new --stacks s.toml", "5 (pair i: 5 + i)")
    keys = [k for k, _ in h]
    assert keys[:3] == ["iree-stress", "runtime (A old)", "runtime (B new)"]
    assert dict(h)["runtime (A old)"].startswith("3.12.0 from /site/iree/runtime")
    assert dict(h)["target"] == "cuda:sm_90"  # the same for both: one line
    assert h[-3:] == [("not run", "C none"), ("seed", "5 (pair i: 5 + i)"),
                      ("rerun", "iree-stress compare old new --stacks s.toml")]


def test_a_bisect_header_labels_what_only_some_stacks_reported_and_lists_the_untried_once(
        ) -> None:
    """issue 28 review: a bisect whose first stacks never ran showed the shared runtime of
    the others unlabelled (as if every stack had it), a `not reported` line per untried
    stack, and only the facts of the first arm that ran (a driver library reported by a
    later arm alone was left out)."""
    bare = {k: v for k, v in CUDA.items() if k != "loaded_gpu_libraries"}
    h = header.of_arms([("one", []), ("two", []), ("three", [bare]), ("four", [CUDA])],
                       "iree-stress bisect one four --stacks s.toml", "7")
    said = dict(h)
    runtime = said["runtime (three, four)"]
    assert runtime.startswith("3.13.0rc20261016 (IREE 89ece87b8985)"), h
    assert "runtime" not in said and not any(v.startswith("not reported") for v in said.values())
    assert said["not run"] == "one, two" and [k for k, _ in h].count("not run") == 1
    assert said["driver (four)"] == "cuda, library /usr/local/nvidia/lib64/libcuda.so.580.159.04"
    assert said["driver (three)"] == "cuda, library none loaded (built into the runtime)"
    assert said["target"] == "cuda:sm_90" and said["host"] == "vm, Linux-6.18, Xeon, 16 cores"


def test_a_fact_only_later_stacks_report_is_in_the_compare_header(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """of_arms took its lines from the first arm's facts only: a fact its runs did not report
    (a row that rows() gives only when a run has it) was missing for every arm."""
    real = header.rows

    def rows(manifests: Any, commands: Any = ()) -> list[tuple[str, str]]:
        extra = [("gpu clocks", str(m["clocks"])) for m in manifests[:1] if "clocks" in m]
        return [*real(manifests, commands), *extra]

    monkeypatch.setattr(header, "rows", rows)
    h = dict(header.of_arms([("A", [CUDA]), ("B", [{**CUDA, "clocks": "1980 MHz"}]),
                             ("C", [{**CUDA, "clocks": "1980 MHz"}])], "", "7"))
    assert h["gpu clocks (B, C)"] == "1980 MHz", h


def test_a_gate_runs_recorded_command_is_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["iree-stress", "gate", "--max-rate", "0.01"])
    assert recorded_command(["--max-rate", "0.01"]) == ["iree-stress", "gate", "--max-rate",
                                                         "0.01"]
    # arguments that are not this process's own (repro builds its own): a soak
    assert recorded_command(["--seed", "4"])[:2] == ["iree-stress", "soak"]


def test_version_names_the_runtime_and_the_compiler_a_soak_here_would_use() -> None:
    from tests.conftest import run_cli

    res = run_cli("--version")
    lines = res.stdout.splitlines()
    assert res.rc == 0 and lines[0].startswith("iree-stress 0.") and "Python 3." in lines[0]
    # both are dependencies of the package: here each must name its version and build
    assert re.match(r"runtime: \d+\.\d+\S* \(IREE \w+\) from \S*_runtime_libs", lines[1]), lines
    assert re.match(r"compiler: \d+\.\d+\S* @ \w+ \(\S*iree-compile\)", lines[2]), lines


def test_a_vulkan_runs_driver_line_names_the_loader_and_each_icd_it_mapped() -> None:
    """issue 37: the Vulkan loader and the ICDs it mapped, each said as what it is (an ICD by
    its manifest's library name, wherever the loader found it)."""
    lib = "/usr/lib/x86_64-linux-gnu"
    vulkan = {**CUDA, "driver": "vulkan", "device_uri": "vulkan",
              "loaded_gpu_libraries": [f"{lib}/libvulkan.so.1.3.239", f"{lib}/libvulkan_lvp.so",
                                       "/opt/nv/libGLX_nvidia.so.0"],
              "vulkan_icds": [f"{lib}/libvulkan_lvp.so", "libGLX_nvidia.so.0"]}
    assert dict(header.rows([vulkan]))["driver"] == (
        f"vulkan, library {lib}/libvulkan.so.1.3.239 (Vulkan loader), {lib}/libvulkan_lvp.so "
        "(Vulkan ICD), /opt/nv/libGLX_nvidia.so.0 (Vulkan ICD)")


def test_copies_sharing_a_folder_under_a_pattern_without_pid_are_told_what_helps() -> None:
    """Issue 36 item 3: with core_pattern `core` several copies in one folder write one core
    file; the header says so and offers what keeps them apart."""
    def lines(pattern: list[Any], workers: int, engine: str = "exec") -> dict[str, str]:
        return dict(header.rows([{"core_pattern": pattern, "config": {
            "engine": engine, "workers": workers, "exec_cwd": "/home/u/suite"}}]))

    text = lines(["core", False], 2)["cores"]
    assert "names no pid" in text and "2 copies run in /home/u/suite" in text
    assert "copy{gpu}" in text and "core_uses_pid" in text
    for quiet in (lines(["core", False], 1), lines(["core.%p", False], 2),
                  lines(["core", True], 2), lines(["|/usr/lib/systemd-coredump %P", False], 2),
                  lines(["core", False], 2, "python")):
        assert "cores" not in quiet
