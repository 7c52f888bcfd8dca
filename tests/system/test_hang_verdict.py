"""Issue 24: a stall after the work is recorded as a stall, whatever the evidence does to it.

On the H200 every stalled exit became `crash SIGSEGV` (cuda-gdb's live attach killed the
process and the death became the verdict) or `crash SIGUSR1` (the faulthandler fallback
signalled a process past finalization). Here a stand-in `gdb` does what cuda-gdb does (kills
whatever it attaches to live, reads core files normally), and a bare PATH has no stack tool at
all; the runtime's process exit spins (tests/native/libfault.c)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.system

PROGRAMS = "unary.*.f32.*"
# kills what it attaches to (`-p PID`), as cuda-gdb's injection does to a CUDA process; a core
# file it hands to the real gdb
KILLER_GDB = """#!/bin/sh
prev=""
for a in "$@"; do
  if [ "$prev" = "-p" ]; then kill -SEGV "$a"; echo "attach failed" >&2; exit 1; fi
  prev="$a"
done
exec {real} "$@"
"""


def spin_soak(tmp_path: Path, fault_lib: Path, path_dirs: list[Path],
              name: str) -> tuple[dict[str, Any], Path]:
    run = tmp_path / name
    count = tmp_path / f"{name}.fired"
    env = {"PATH": os.pathsep.join(str(d) for d in path_dirs), "IREE_STRESS_PYSPY": "none"}
    res = run_cli("soak", "--target", "cpu", "--patterns", "exit-clean", "--programs", PROGRAMS,
                  "--duration", "8s", "--teardown-timeout", "1s", "--timeout", "5s",
                  "--workers", "2", "--json", "-q", "--results", str(run),
                  "--env", f"LD_PRELOAD={fault_lib}", "--env", "IREE_FAULT_EXIT=spin",
                  "--env", "IREE_FAULT_EXIT_PROB=1", "--env", f"IREE_FAULT_COUNT_FILE={count}",
                  env=env, timeout=300)
    assert res.rc == 1, (res.rc, res.stderr[-2000:])
    return res.json(), count


def failure_meta(f: dict[str, Any]) -> dict[str, Any]:
    return json.loads((Path(f["artifacts"]) / "failure.json").read_text())


def test_a_debugger_that_kills_what_it_attaches_never_turns_a_stall_into_a_crash(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    real = shutil.which("gdb")
    if real is None:
        pytest.skip("no gdb to read the cores with")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gdb = bin_dir / "gdb"
    gdb.write_text(KILLER_GDB.format(real=real))
    gdb.chmod(gdb.stat().st_mode | stat.S_IXUSR)
    s, fired = spin_soak(tmp_path, fault_lib, [bin_dir], "killer")
    spins = fired.read_text().count("exit spin")
    failures = s["failures_detail"]
    assert spins >= 2 and failures
    assert {f["class"] for f in failures} == {"teardown_hang"}, [f["message"] for f in failures]
    workers = [f for f in failures if f["job"]["program"]]
    assert workers and all(f["last_step"] == "worker-exit" for f in workers)
    for f in failures:
        meta = failure_meta(f)
        assert meta["process_activity"] == "busy", meta
        assert "died by SIGSEGV during gdb attach" in meta["after_verdict"], meta
        text = (Path(f["artifacts"]) / "stacks.txt").read_text()
        assert "iree_fault_spin" in text, text[:3000]
        assert "# tried: gdb attach" in text and "core of its death by SIGSEGV" in text
    rep = run_cli("report", s["results_dir"], "--format", "json").json()
    sigs = [g for g in rep["signatures"] if g["class"] == "teardown_hang"]
    assert len(sigs) == 1 and sigs[0]["thread_state"] == "busy", sigs
    assert any("iree_fault_spin" in f for f in sigs[0]["frames"]), sigs[0]["frames"]
    assert not [g for g in rep["signatures"] if g["class"] == "crash"]


def test_with_no_stack_tool_at_all_a_stall_is_a_busy_teardown_hang_not_a_sigusr1_crash(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    s, fired = spin_soak(tmp_path, fault_lib, [empty], "bare")
    failures = s["failures_detail"]
    assert fired.read_text().count("exit spin") >= 2 and failures
    assert {f["class"] for f in failures} == {"teardown_hang"}, [f["message"] for f in failures]
    for f in failures:
        meta = failure_meta(f)
        assert meta["process_activity"] == "busy", meta
        assert meta["exit_code"] != -10, meta  # never SIGUSR1's default action
        tried = meta["stacks_tried"]
        assert any(t.startswith("py-spy: not found") for t in tried), tried
        assert "gdb, cuda-gdb, rocgdb: not found" in tried, tried
    workers = [f for f in failures if f["job"]["program"]]
    assert any("no SIGUSR1 handler" in " ".join(failure_meta(f)["stacks_tried"])
               for f in workers), [failure_meta(f)["stacks_tried"] for f in workers]


def test_a_hang_keeps_its_core_when_the_evidence_budget_turned_cores_off(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Review of issue 24 item 4: once exit-alive's crash mode has its budget (1 here), new
    processes start without core dumps; a stall in one of them must still leave the core its
    kill dumps (the kill raises the limit again), so every stall keeps its frame and one
    signature."""
    real = shutil.which("gdb")
    if real is None:
        pytest.skip("no gdb to read the cores with")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gdb = bin_dir / "gdb"
    gdb.write_text(KILLER_GDB.format(real=real))
    gdb.chmod(gdb.stat().st_mode | stat.S_IXUSR)
    run = tmp_path / "mixed"
    res = run_cli("soak", "--target", "cpu", "--patterns", "exit-alive,exit-clean",
                  "--programs", PROGRAMS, "--duration", "15s", "--teardown-timeout", "1s",
                  "--timeout", "10s", "--workers", "2", "--json", "-q", "--results", str(run),
                  "--evidence-budget", "1", "--max-worker-restarts", "1000",
                  "--env", f"LD_PRELOAD={fault_lib}", "--env", "IREE_FAULT_EXIT=spin",
                  "--env", "IREE_FAULT_EXIT_PROB=1",
                  env={"PATH": str(bin_dir), "IREE_STRESS_PYSPY": "none"}, timeout=300)
    assert res.rc == 1, res.stderr[-2000:]
    hangs = [f for f in res.json()["failures_detail"] if f["class"] == "teardown_hang"]
    assert len(hangs) >= 3, [f["message"] for f in res.json()["failures_detail"]]
    for f in hangs:
        text = (Path(f["artifacts"]) / "stacks.txt").read_text()
        assert "iree_fault_spin" in text, text[:2000]
    rep = run_cli("report", str(run), "--format", "json").json()
    assert len([g for g in rep["signatures"] if g["class"] == "teardown_hang"]) == 1
