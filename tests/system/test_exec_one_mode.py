"""Issue 36: a pytest suite of the user's whose runtime teardown segfaults in `pthread_join`
(tests/native/libfault.c preloaded), run as two copies in one folder with core_pattern `core`:
one crash mode, led by the native frames, every crash counted in it whatever the evidence
budget read; and each crash's stacks are its own process's, or say that they could not be
read, never another copy's."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from stress.engine.corenotes import read_core_notes
from stress.engine.postmortem import read_core_pattern
from tests.conftest import run_cli

pytestmark = pytest.mark.system

# Each test makes and destroys its own cpu driver and device (local-task: its executor's worker
# threads are joined when they are destroyed), as the real suite does with its system.
# The driver is made uncached and all of it is collected within its test: a device left to a
# later collection, or a driver left in iree.runtime's cache, is destroyed at the interpreter's
# exit, after the suite's summary line, and a crash there is a teardown crash at worker-exit: a
# second mode by design (test_exec_answer.py). CI saw that in 1 of 34 jobs, in a process whose
# core the budget had turned off, so nothing of its step was read to join (its answer then names
# the mode read while running: `not joined`).
_SUITE = '''
import gc

import iree.runtime as rt
import pytest
from iree._runtime_libs import _runtime


@pytest.mark.parametrize("n", range(6))
def test_device_comes_and_goes(n):
    driver = _runtime.create_hal_driver("local-task")
    device = driver.create_default_device()
    config = rt.Config(device=device)
    del config, device, driver
    gc.collect()
'''

_FAULT = {"IREE_FAULT_JOIN": "segv", "IREE_FAULT_JOIN_PROB": "0.5"}  # per join: most jobs
#   crash, in one test or another
LEADING = ["iree_fault_segv", "fire", "pthread_join"]  # libfault's frames, innermost first


def soak_suite(tmp_path: Path, fault_lib: Path, jobs: int, *options: str
               ) -> tuple[Path, dict[str, Any], int]:
    """`soak --engine exec --workers 2 -- python -m pytest -q test_suite.py` from the suite's
    folder (2 copies in one folder); (run folder, summary, faults fired by libfault)."""
    proj, run, fired = tmp_path / "proj", tmp_path / "run", tmp_path / "fired"
    proj.mkdir()
    (proj / "test_suite.py").write_text(_SUITE)
    env = {**_FAULT, "LD_PRELOAD": str(fault_lib), "IREE_FAULT_COUNT_FILE": str(fired)}
    res = run_cli("soak", "--engine", "exec", "-n", str(jobs), "--workers", "2",
                  "--timeout", "120s", "--json", "-q", "--results", str(run), *options,
                  *[f"--env={k}={v}" for k, v in env.items()],
                  "--", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  "test_suite.py", timeout=900, cwd=proj)
    assert res.rc == 1, res.stdout[-2000:] + res.stderr[-3000:]
    lines = fired.read_text().splitlines() if fired.exists() else []
    return run, json.loads(res.stdout), len(lines)


def check_one_mode(run: Path, summary: dict[str, Any], fired: int) -> None:
    sigs = summary["signatures"]
    crashes = [s for s in sigs if s["class"] == "crash"]
    assert len(crashes) == 1, [(s["key"], s["count"]) for s in sigs]
    assert crashes[0]["frames"][:3] == LEADING, crashes[0]["key"]
    assert crashes[0]["count"] == fired == summary["failures"]["crash"], (crashes[0], fired)
    full = run_cli("report", str(run), "--format", "json", timeout=300).json()
    evidence = full["signatures"][0]["evidence"]  # stacks read, and only counted
    assert evidence["full"] + evidence["counted"] == fired and evidence["full"] >= 1
    report = run_cli("report", str(run), timeout=300)
    answer = report.stdout.split("ANSWER", 1)[1].split("\nrun ", 1)[0]
    assert "1 failure mode(s)" in answer, answer
    assert "iree_fault_segv" in answer and "runpy" not in answer, answer


def test_a_suite_whose_teardown_segfaults_is_one_mode_led_by_its_native_frames(
        tmp_path: Path, fault_lib: Path) -> None:
    """The short variant (the default budget reads the first 5 of the mode)."""
    run, summary, fired = soak_suite(tmp_path, fault_lib, 6)
    assert fired >= 4  # (p = 0.5 per join, six devices a job: a job without a crash is rare)
    check_one_mode(run, summary, fired)


@pytest.mark.slow  # ~3 minutes here: 34 pytest processes, 2 at once, on 2 loaded cores
def test_thirty_teardown_crashes_under_the_default_budget_are_one_mode_counting_each(
        tmp_path: Path, fault_lib: Path) -> None:
    """Issue 36's done-when: >= 30 crashes under the default evidence budget, 2 copies in one
    folder: exactly one crash signature, led by the native frames, counting every crash."""
    run, summary, fired = soak_suite(tmp_path, fault_lib, 34)
    assert fired >= 30
    check_one_mode(run, summary, fired)
    full = run_cli("report", str(run), "--format", "json", timeout=300).json()
    assert full["signatures"][0]["evidence"]["counted"] >= 20  # most were only counted


# --- each core its own process's ------------------------------------------------------------

_TOGETHER = '''
import ctypes, os, sys, time
from pathlib import Path

# the two copies of a round meet here, then both segfault within milliseconds: their cores
#   are written into the one `core` of the shared folder at once
meet = Path(sys.argv[1])
job = int(os.environ["IREE_STRESS_JOB"])
(meet / f"{job}").write_text(str(os.getpid()))
deadline = time.monotonic() + 20
while not (meet / f"{job ^ 1}").exists() and time.monotonic() < deadline:
    time.sleep(0.005)
print("pid", os.getpid(), flush=True)
ctypes.string_at(0)
'''


def test_copies_crashing_at_once_in_one_folder_read_only_their_own_cores(
        tmp_path: Path) -> None:
    """Issue 36's done-when: copies in one folder crash within the same second with
    core_pattern `core`-style cores (this host's pattern, when it names no pid): every
    failure's stacks are its own pid's or say they could not be read; never another's."""
    proj, run, meet = tmp_path / "proj", tmp_path / "run", tmp_path / "meet"
    proj.mkdir()
    meet.mkdir()
    (proj / "together.py").write_text(_TOGETHER)
    res = run_cli("soak", "--engine", "exec", "-n", "8", "--workers", "2", "--timeout", "60s",
                  "--evidence-budget", "0", "--json", "-q", "--results", str(run),
                  "--", sys.executable, "together.py", str(meet), timeout=600, cwd=proj)
    assert res.rc == 1, res.stdout[-2000:] + res.stderr[-3000:]
    db = sqlite3.connect(run / "stress.db")
    db.row_factory = sqlite3.Row
    rows = list(db.execute("SELECT * FROM failures ORDER BY job_index"))
    assert len(rows) == 8
    read = 0
    for row in rows:
        stacks = (Path(row["artifacts"]) / "stacks.txt").read_text()
        meta = json.loads((Path(row["artifacts"]) / "failure.json").read_text())
        if meta["stack_source"] == "core+gdb":
            read += 1  # the thread that took the signal is the process's own main thread
            assert f"# thread {row['pid']} took SIGSEGV" in stacks, (row["pid"], stacks[:300])
        else:
            assert "no core of" in meta["note"] or "overwritten" in meta["note"], meta
    assert read >= 1
    leftover = [p for p in [*proj.rglob("*"), *run.rglob("*")]
                if p.is_file() and read_core_notes(p) is not None]
    assert leftover == []


# --- two modes at one step, told apart by where they faulted ------------------------------------

@pytest.mark.skipif(read_core_pattern()[0].startswith(("|", "/")),
                    reason="cores go to a pipe handler or one folder here: no notes-only cores")
def test_counted_crashes_of_two_modes_at_one_step_join_the_mode_that_faulted_where_they_did(
        tmp_path: Path, two_faults: Path) -> None:
    """A native command that segfaults in one of two functions (by its job's parity), with
    the same output and no Python dump: past the evidence budget its processes dump only
    their cores' notes, and each counted crash joins the mode read where it faulted, so both
    modes count exactly their own jobs (the most read mode took them all before). One copy:
    copies sharing a folder under this host's `core` pattern dump no notes (`notes_cores`)."""
    proj, run = tmp_path / "proj", tmp_path / "run"
    proj.mkdir()
    res = run_cli("soak", "--engine", "exec", "-n", "16", "--workers", "1", "--timeout", "60s",
                  "--evidence-budget", "2", "--json", "-q", "--results", str(run),
                  "--", str(two_faults), "{job}", timeout=600, cwd=proj)
    assert res.rc == 1, res.stdout[-2000:] + res.stderr[-3000:]
    sigs = [s for s in json.loads(res.stdout)["signatures"] if s["class"] == "crash"]
    by_frame = {s["frames"][0]: s for s in sigs}
    assert set(by_frame) == {"fault_reading", "fault_writing"}, [s["key"] for s in sigs]
    assert [by_frame[f]["count"] for f in ("fault_reading", "fault_writing")] == [8, 8]
    full = run_cli("report", str(run), "--format", "json", timeout=300).json()["signatures"]
    assert sum(s["evidence"]["counted"] for s in full) >= 8  # most were only counted
    merged = [why for s in full for why in s["merged"]]
    assert merged and all("and its fault site, fault_" in why for why in merged), merged
    with closing(sqlite3.connect(run / "stress.db")) as db:
        sites = [json.loads(e).get("fault_site", {}).get("function")
                 for (e,) in db.execute("SELECT evidence FROM failures ORDER BY job_index")]
    assert sites == ["fault_reading", "fault_writing"] * 8, sites
    # the same run's records without the sites: the counted crashes all join one mode
    bare = tmp_path / "bare"
    shutil.copytree(run, bare)
    with closing(sqlite3.connect(bare / "stress.db")) as edit:
        for row, text in edit.execute("SELECT id, evidence FROM failures").fetchall():
            ev = json.loads(text)
            ev.pop("fault_site", None)
            edit.execute("UPDATE failures SET evidence=? WHERE id=?", (json.dumps(ev), row))
        edit.commit()
    blind = run_cli("report", str(bare), "--format", "json", timeout=300).json()["signatures"]
    counts = sorted(s["count"] for s in blind)
    assert len(counts) == 2 and counts[0] < 8 and sum(counts) == 16, counts
    leftover = [p for p in [*proj.rglob("*"), *run.rglob("*")]
                if p.is_file() and read_core_notes(p) is not None]
    assert leftover == []
