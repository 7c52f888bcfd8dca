"""`soak --engine exec -- CMD` end to end (issue 14): a real C program that sometimes crashes
and sometimes hangs after printing "done", classified job by job, with native stacks of the
hang, the crash's frame from its core, and no process left behind."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import run_cli
from tests.helpers.native import build_flaky

pytestmark = pytest.mark.system

_CRASH_PCT, _HANG_PCT = 30, 30  # the program's own rule (tests/native/flaky.c)


@pytest.fixture(scope="module")
def flaky(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_flaky(tmp_path_factory.mktemp("flaky"))


def mode_of(seed: int) -> str:
    """flaky.c's choice for SEED, computed the same way (unsigned long arithmetic)."""
    r = ((seed * 2654435761) % 2**64 >> 7) % 100
    return "crash" if r < _CRASH_PCT else "hang" if r < _CRASH_PCT + _HANG_PCT else "ok"


def survivors(binary: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["exe", "cmdline"]):
        try:
            if p.info["exe"] == str(binary) or str(binary) in (p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            pass
    return out


def test_each_job_of_a_flaky_command_ends_as_its_seed_says_with_stacks_and_no_orphans(
        tmp_path: Path, flaky: Path) -> None:
    run = tmp_path / "run"
    # one copy at a time: copies crashing at once in one folder share the core name `core`
    # where core_pattern is `core` and core_uses_pid 0 (docs/exec.md)
    res = run_cli("soak", "--engine", "exec", "--done-regex", "^done$",
                  "--timeout", "20s", "--teardown-timeout", "1s", "-n", "10", "--seed", "3",
                  "--results", str(run), "--json", "-q", "--env", "FLAKY_CHILD=1",
                  "--", str(flaky), "{seed}", str(_CRASH_PCT), str(_HANG_PCT),
                  timeout=300, cwd=tmp_path)
    assert res.rc in (0, 1), res.stderr[-3000:]
    db = sqlite3.connect(run / "stress.db")
    db.row_factory = sqlite3.Row
    fails = {r["job_index"]: r for r in db.execute("SELECT * FROM failures")}
    jobs = {r["job_index"]: r for r in db.execute("SELECT * FROM jobs")}
    workers = list(db.execute("SELECT job_index, outcome FROM workers"))
    assert {w["job_index"] for w in workers} == set(fails) | set(jobs)
    assert len(set(fails) | set(jobs)) == 10
    for index in set(fails) | set(jobs):
        f = fails.get(index)
        seed = json.loads((Path(f["artifacts"]) / "job.json").read_text())["seed"] if f \
            else jobs[index]["seed"]
        want = mode_of(seed)
        if want == "ok":
            assert f is None and jobs[index]["ok"] == 1, index
            continue
        assert f is not None, (index, want)
        assert f["program"] == "exec:flaky" and f["pattern"] == "exec"
        assert f["last_step"] == "worker-exit"  # it printed done: its exit failed
        folder = Path(f["artifacts"])
        assert "done" in (folder / "stdout.tail").read_text()
        stacks = (folder / "stacks.txt").read_text()
        if want == "crash":
            assert f["class"] == "crash" and f["signal"] == "SIGSEGV"
            assert "teardown_crash" in stacks  # from the core
        else:
            assert f["class"] == "teardown_hang"
            assert "teardown_join" in stacks and "device_thread" in stacks  # every thread
    assert {mode_of(jobs[i]["seed"]) for i in jobs} <= {"ok", "crash", "hang"}
    assert survivors(flaky) == []  # FLAKY_CHILD's children died with their groups
    summary = json.loads(res.stdout)
    descs = " ".join(s["description"] for s in summary["signatures"])
    if any(f["class"] == "crash" for f in fails.values()):
        assert "teardown_crash" in descs


def test_a_command_that_exits_non_zero_before_its_work_is_done_is_failed_while_running(
        tmp_path: Path, flaky: Path) -> None:
    run = tmp_path / "run"
    res = run_cli("soak", "--engine", "exec", "--done-regex", "^done$", "-n", "2",
                  "--results", str(run), "--json", "-q", "--env", "FLAKY_MODE=fail",
                  "--", str(flaky), "{seed}", timeout=120, cwd=tmp_path)
    assert res.rc == 1, res.stderr[-3000:]
    db = sqlite3.connect(run / "stress.db")
    rows = list(db.execute("SELECT class, last_step, message, evidence FROM failures"))
    assert len(rows) == 2
    for cls, step, message, ev in rows:
        # its own verdict (issue 27 item 5): not a crash, no process of it had a signal
        assert cls == "failed" and step == "run" and "exited with status 1" in message
        assert json.loads(ev)["output_key"][-1] == "assertion failed: result # != # at <path>:#"
    keys = [s["key"] for s in json.loads(res.stdout)["signatures"]]
    assert keys == ["failed||run|||running job with seed # (pid #) / assertion failed: "
                    "result # != # at <path>:#"]  # no runner's summary: its last lines


_SLOT_SCRIPT = """
import os, sys, time
t0 = time.time()
time.sleep(0.4)
open(sys.argv[1] + "/" + sys.argv[2], "w").write(f"{sys.argv[3]} {t0} {time.time()}")
"""


def test_parallel_copies_run_at_once_each_with_its_own_gpu_slot(tmp_path: Path) -> None:
    import sys

    script = tmp_path / "slot.py"
    script.write_text(_SLOT_SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    res = run_cli("soak", "--engine", "exec", "--parallel", "2", "-n", "6", "--json", "-q",
                  "--results", str(tmp_path / "run"), "--", sys.executable, str(script),
                  str(marks), "{job}", "{gpu}", timeout=120, cwd=tmp_path)
    assert res.rc == 0, res.stderr[-3000:]
    runs = sorted((float(t0), float(t1), int(gpu)) for f in marks.iterdir()
                  for gpu, t0, t1 in [f.read_text().split()])
    assert len(runs) == 6 and {g for _, _, g in runs} == {0, 1}
    overlapping = [(a, b) for a, b in zip(runs, runs[1:], strict=False) if b[0] < a[1]]
    assert overlapping and all(a[2] != b[2] for a, b in overlapping)
    assert json.loads(res.stdout)["invocations"] == 6


def test_an_exec_soak_started_in_an_empty_folder_keeps_that_folder_and_runs_every_job(
        tmp_path: Path) -> None:
    here = tmp_path / "empty"  # the command runs where iree-stress was started
    here.mkdir()
    res = run_cli("soak", "--engine", "exec", "-n", "3", "--json", "-q",
                  "--results", str(tmp_path / "run"), "--", "true", cwd=here, timeout=120)
    assert res.rc == 0, res.stderr[-3000:]
    assert here.is_dir()  # tidying a clean job once removed the user's (empty) folder
    assert json.loads(res.stdout)["jobs"] == 3


def test_the_repro_sh_of_an_exec_failure_reruns_its_command_from_a_moved_run_folder(
        tmp_path: Path, flaky: Path) -> None:
    run, moved = tmp_path / "run", tmp_path / "elsewhere" / "run"
    res = run_cli("soak", "--engine", "exec", "--done-regex", "^done$", "-n", "2", "-q",
                  "--results", str(run), "--", str(flaky), "{seed}", "100", "0", timeout=120,
                  cwd=tmp_path)
    assert res.rc == 1, res.stderr[-3000:]
    shutil.copytree(run, moved)  # CI artifacts are read where they were downloaded
    folder = sorted((moved / "failures").iterdir())[0]
    seed = json.loads((folder / "job.json").read_text())["seed"]
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    rerun = run_cli_sh(folder / "repro.sh", "--times", "2", "-q", env=env)
    assert rerun.returncode == 1, rerun.stderr[-3000:]  # it failed again
    assert "crash again in 2/2 runs" in rerun.stdout
    out = next(folder.glob("repro-*"))
    db = sqlite3.connect(out / "stress.db")
    rows = list(db.execute("SELECT class, signal FROM failures"))
    assert rows == [("crash", "SIGSEGV")] * 2
    reran = {json.loads((Path(a) / "job.json").read_text())["seed"]
             for (a,) in db.execute("SELECT artifacts FROM failures")}
    assert reran == {seed}  # the failing job's own input seed, in its own argv
    assert f"running job with seed {seed} " in (Path(next(iter(
        db.execute("SELECT artifacts FROM failures")))[0]) / "stdout.tail").read_text()


def run_cli_sh(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`sh SCRIPT ARGS` from another folder, as a user runs a failure's repro.sh."""
    return subprocess.run(["sh", str(script), *args], capture_output=True, text=True,
                          timeout=120, cwd="/", env={**os.environ, **env})
