"""`soak --engine native` end to end on cpu (issue 12): iree-run-module jobs with checked
outputs, a native fault preloaded into them (tests/native/libfault.c), recorded HAL replays in
the failure folders, `repro` counting exactly the faults that fired, `repro --replay`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psutil
import pytest

from tests.conftest import run_cli
from tests.helpers.files import unreadable

pytestmark = pytest.mark.system

PROGRAMS = "unary.exp.f32*,binary.add.f32*"


def native_soak(run: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, object]:
    args = ["soak", "--engine", "native", "--target", "cpu", "--programs", PROGRAMS,
            "--parallel", "2", "--results", str(run), "--json", "-q", *extra]
    for k, v in (env or {}).items():
        args += ["--env", f"{k}={v}"]
    res = run_cli(*args, timeout=300)
    assert res.rc in (0, 1), res.stderr[-3000:]
    out: dict[str, object] = res.json()
    return out


def tool_processes() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["name"]):
        if (p.info["name"] or "").startswith("iree-run-modul"):
            out.append(p)
    return out


def test_a_clean_native_soak_checks_every_output_and_leaves_nothing_behind(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "run"
    s = native_soak(run, "-n", "24")
    assert s["failed"] == 0 and s["jobs"] == 24 and s["invocations"] == 24, s
    cpu = s["phases"]["parent_cpu"]  # the harness's own cost, per job (bench reads it)
    assert cpu["count"] == 24 and 0 < cpu["seconds"] < s["duration_s"] * 2  # mostly 1 thread
    db = sqlite3.connect(run / "stress.db")
    assert db.execute("SELECT SUM(ok), COUNT(*), COUNT(DISTINCT program) FROM jobs"
                      ).fetchone()[:2] == (24, 24)
    assert {r[0] for r in db.execute("SELECT pattern FROM jobs")} == {"native-run"}
    logs = sorted(p.name for p in (run / "workers").iterdir())
    assert len(logs) <= 16 and all(n.startswith("slot") for n in logs)  # 2 pairs per slot,
    #   at most 2 slots per copy (Slots), reused: no file per job
    assert tool_processes() == []


@pytest.mark.slow  # ~40 s: a core read per crash, then 8 reruns
def test_a_native_crash_in_teardown_keeps_its_replay_and_repro_counts_each_fault(
        tmp_path: Path, cpu_artifacts: dict[str, Path], fault_lib: Path) -> None:
    run, count = tmp_path / "run", tmp_path / "fired.txt"
    fault = {"LD_PRELOAD": str(fault_lib), "IREE_FAULT_JOIN": "segv", "IREE_FAULT_LIMIT": "5",
             "IREE_FAULT_JOIN_CALLER": "iree-run-module", "IREE_FAULT_COUNT_FILE": str(count)}
    # the first five tool processes segfault in their first join, the other seven end clean
    native_soak(run, "-n", "12", "--record", "--teardown-timeout", "5s", "--evidence-budget", "0",
                env=fault)  # every crash in full: the evidence is what is checked
    fired = count.read_text().splitlines() if count.exists() else []
    db = sqlite3.connect(run / "stress.db")
    rows = list(db.execute("SELECT class, signal, last_step, artifacts FROM failures"))
    assert len(rows) == len(fired) == 5  # every fault fired is one failure, no more
    without: list[str] = []
    for cls, sig, step, folder in rows:
        assert (cls, sig, step) == ("crash", "SIGSEGV", "worker-exit")
        f = Path(folder)
        assert "iree_hal_task_device_destroy" in (f / "stacks.txt").read_text()
        if not list(f.glob("*.ireereplay")):
            # a 2048x4096 job's replay is ~100 MiB: past the run's cap it is not kept, and
            # the folder says so
            note = json.loads((f / "replay.json").read_text())["replay_note"]
            assert "reached the 256 MiB cap" in note, note
            without.append(note)
            continue
        tail = [json.loads(x) for x in (f / "hal_tail.jsonl").read_text().splitlines()]
        assert tail[-1]["payload"]["name"] == "deinit"  # the recorder's last scope: teardown
        assert json.loads((f / "replay.json").read_text())["hal_records"] >= len(tail)
    assert len(without) < len(rows), without
    healthy = sorted((run / "native" / "replays").glob("*.ireereplay"))
    assert healthy  # the first healthy replay of each program at least

    count.write_text("")  # repro reruns with the recorded environment: five faults again
    res = run_cli("repro", rows[0][3], "--times", "8", "-q", timeout=300)
    assert len(count.read_text().splitlines()) == 5
    assert res.rc == 1, res.stderr[-2000:]
    assert "crash again in 5/8 runs" in res.stdout
    res = run_cli("repro", "--replay", "--times", "2", str(healthy[0]), timeout=120)
    assert res.rc == 0 and "exited 0 in 2/2 runs" in res.stdout, res.stdout + res.stderr


def test_every_file_of_a_recorded_native_run_with_a_crash_is_readable_by_the_group(
        tmp_path: Path, cpu_artifacts: dict[str, Path], fault_lib: Path,
        usual_umask: None) -> None:
    """issue 28 item 8: iree-run-module writes its HAL replays 0640 (others could not read
    them: a shared results folder, a CI artifact upload); the run keeps them as readable as
    the rest of its files."""
    run = tmp_path / "run"
    s = native_soak(run, "-n", "6", "--record", env={
        "LD_PRELOAD": str(fault_lib), "IREE_FAULT_JOIN": "segv", "IREE_FAULT_LIMIT": "2",
        "IREE_FAULT_COUNT_FILE": str(tmp_path / "fired.txt"),
        "IREE_FAULT_JOIN_CALLER": "iree-run-module"})  # two jobs crash, four end clean
    assert s["failures"]["crash"] == 2, s["failures"]  # type: ignore[index]
    replays = list(run.rglob("*.ireereplay"))  # a crash's, in its failure folder, and healthy
    assert replays, sorted(run.rglob("*"))
    assert unreadable(run) == {}


def test_a_native_job_that_blocks_in_teardown_after_its_output_is_a_teardown_hang(
        tmp_path: Path, cpu_artifacts: dict[str, Path], fault_lib: Path) -> None:
    run = tmp_path / "run"
    native_soak(run, "-n", "2", "--parallel", "1", "--teardown-timeout", "1s",
                env={"LD_PRELOAD": str(fault_lib), "IREE_FAULT_JOIN": "block",
                     "IREE_FAULT_JOIN_CALLER": "iree-run-module"})
    db = sqlite3.connect(run / "stress.db")
    rows = list(db.execute("SELECT class, last_step, artifacts FROM failures"))
    assert [r[:2] for r in rows] == [("teardown_hang", "worker-exit")] * 2
    stacks = (Path(rows[0][2]) / "stacks.txt").read_text()
    assert "pthread_join" in stacks and "iree_hal_task_device_destroy" in stacks
    assert tool_processes() == []
