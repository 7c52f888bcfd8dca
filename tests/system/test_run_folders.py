"""Run folders as a user meets them (issue 28, items 1, 2 and 8): a folder that holds a run is
never rewritten (refused, or resumed beside it), a finished run leaves no side files and is
readable by the group, --duration counts from the first job, `runs` and `clean`."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stress import housekeeping as hk
from stress.runtimes import spec
from stress.store.db import RunStore
from tests.conftest import REPO, run_cli
from tests.helpers.files import unreadable

pytestmark = pytest.mark.system

UNLIMITED_CORES = ("sh", "-c", 'ulimit -c unlimited 2>/dev/null; exec "$@"', "sh")  # cores,
#   where the host's core_pattern writes them, are read into the evidence (then deleted)
SMALL = ["soak", "-t", "cpu", "-w", "1", "--threads", "1", "--programs", "unary.exp.f32.64x64",
         "--patterns", "shared,per-thread"]


def contents(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def rows(db: Path, run_id: str) -> dict[str, list[tuple[object, ...]]]:
    con = sqlite3.connect(db)
    try:
        return {t: sorted(con.execute(f"SELECT * FROM {t} WHERE run_id = ?", (run_id,)))
                for t in ("runs", "jobs", "failures", "workers", "phases")}
    finally:
        con.close()


def test_a_folder_that_holds_a_run_is_refused_in_one_line_and_not_a_byte_changes(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "run"
    first = run_cli(*SMALL, "-n", "200", "--seed", "5", "-q", "--results", str(run))
    assert first.rc == 0, first.stderr[-2000:]
    before = contents(run)
    again = run_cli(*SMALL, "-n", "200", "--seed", "6", "-q", "--results", str(run))
    assert again.rc == 2, again.stderr[-2000:]  # (was 1, "failures found", and a traceback)
    assert len(again.stderr.strip().splitlines()) == 1
    assert "already holds a run (run, completed" in again.stderr
    assert contents(run) == before  # worker-config.json kept its seed


def test_resume_with_nothing_to_resume_is_refused_in_one_line_and_starts_no_run(
        tmp_path: Path) -> None:
    for where, said in ((["--results", str(tmp_path / "new")], "holds no run to continue"),
                        ([], "--resume needs --results DIR")):
        res = run_cli(*SMALL, "-n", "20", "-q", "--resume", *where, cwd=tmp_path)
        assert res.rc == 2, res.stderr[-2000:]
        assert len(res.stderr.strip().splitlines()) == 1 and said in res.stderr
    assert not (tmp_path / "new").exists() and not (tmp_path / "results").exists()


def test_resume_continues_the_plan_as_a_new_run_beside_the_old_one(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "run"
    first = run_cli(*SMALL, "-d", "2s", "--seed", "5", "-q", "--json", "--results", str(run))
    assert first.rc == 0, first.stderr[-2000:]
    before, first_rows = contents(run), rows(run / "stress.db", "run")
    assert first_rows["jobs"]

    other = run_cli(*SMALL, "-d", "2s", "--seed", "6", "-q", "--results", str(run), "--resume")
    assert other.rc == 2 and "seed is 5, not 6" in other.stderr

    resumed = run_cli("soak", "--results", str(run), "--resume", "-d", "2s", "-q", "--json")
    assert resumed.rc == 0, resumed.stderr[-2000:]
    after = contents(run)
    derived = ("summary.json", "stress.db")  # rebuilt from the store / appended to: rows below
    assert {k: v for k, v in after.items() if k in before and k not in derived} == \
        {k: v for k, v in before.items() if k not in derived}  # no file rewritten
    assert any(k.startswith("resume-1/") for k in after)
    assert rows(run / "stress.db", "run") == first_rows
    con = sqlite3.connect(run / "stress.db")
    (new_min,), = con.execute("SELECT MIN(job_index) FROM jobs WHERE run_id = 'run-resume-1'")
    (old_max,), = con.execute("SELECT MAX(job_index) FROM jobs WHERE run_id = 'run'")
    configs = [json.loads(c) for (c,) in con.execute("SELECT config FROM runs")]
    con.close()
    assert new_min > old_max  # the plan goes on: the next jobs of the same schedule
    assert [c["seed"] for c in configs] == [5, 5]
    assert [c["programs"] for c in configs] == [["unary.exp.f32.64x64"]] * 2
    s = resumed.json()
    assert s["jobs"] == first.json()["jobs"] + len(rows(run / "stress.db",
                                                         "run-resume-1")["jobs"])


def test_a_finished_run_leaves_no_side_files_and_every_file_is_readable_by_the_group(
        tmp_path: Path, cpu_artifacts: dict[str, Path], usual_umask: None) -> None:
    """issue 28 item 8: summary.json and evidence were 0600. The whole folder of a run with a
    crash (its evidence, cores' folders, the reports written into it, a repro's reruns under
    the failure folder) is read by other users and CI artifact uploads."""
    run = tmp_path / "run"
    res = run_cli(*SMALL, "-d", "20s", "-q", "--inject", "segv@invoke:0.2", "--max-failures",
                  "1", "--results", str(run), prefix=UNLIMITED_CORES)
    assert res.rc == 1, res.stderr[-2000:]
    names = {p.name for p in run.iterdir()}
    assert not names & {"stress.db-wal", "stress.db-shm", "worker-path"}, names
    report = run_cli("report", str(run), "--format", "html", "-o", str(run / "report.html"),
                     "--junit", str(run / "junit.xml"))
    assert report.rc == 1, report.stderr[-2000:]
    failure = next((run / "failures").iterdir())
    repro = run_cli("repro", str(failure), "--times", "1", "-q", prefix=UNLIMITED_CORES)
    assert repro.rc in (0, 1), repro.stderr[-2000:]
    assert (failure / "stacks.txt").is_file() and list(failure.glob("repro-*/summary.json"))
    assert unreadable(run) == {}


def test_a_native_soak_keeps_no_inputs_of_programs_that_did_not_fail(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "run"
    res = run_cli("soak", "--engine", "native", "-t", "cpu", "--programs",
                  "unary.exp.f32*,binary.add.f32*", "-w", "1", "-n", "4", "-q",
                  "--results", str(run))
    assert res.rc == 0, res.stderr[-2000:]
    assert not (run / "native" / "inputs").exists()


def test_duration_counts_from_the_first_job_not_from_worker_start_up(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    import sys

    slow = tmp_path / "slow-python"  # an interpreter that takes 3 s to start
    slow.write_text(f"#!/bin/sh\nsleep 3\nexec {sys.executable} \"$@\"\n")
    slow.chmod(0o755)
    res = run_cli("soak", "-t", "cpu", "-w", "1", "--programs", "unary.exp.f32.64x64",
                  "--patterns", "shared", "-d", "1s", "--python", str(slow), "-q", "--json",
                  "--results", str(tmp_path / "run"))
    assert res.rc == 0, res.stderr[-2000:]
    assert res.json()["jobs"] >= 1  # (it stopped before the worker had started: 0 jobs)


def a_run(folder: Path, started: float, status: str = "completed") -> None:
    folder.mkdir(parents=True)
    store = RunStore(folder)
    store.start_run(folder.name, 1, "", {}, {})
    store.end_run(folder.name, status)
    store.db.execute("UPDATE runs SET started_at = ?", (started,))
    store.close()


def test_runs_lists_run_folders_and_clean_removes_by_its_caps_never_a_running_one(
        tmp_path: Path) -> None:
    results, now = tmp_path / "results", time.time()
    a_run(results / "old", now - 30 * 86400)
    a_run(results / "new", now - 3600)
    a_run(results / "live", now - 40 * 86400, status="running")
    (results / "empty").mkdir()
    (results / "mine").mkdir()
    (results / "mine" / "notes.txt").write_text("not a run")
    held = os.open(results / "live", os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)  # a soak is writing there
    try:
        listing = run_cli("runs", str(results))
        assert listing.rc == 0, listing.stderr
        lines = {ln.split()[0]: ln for ln in listing.stdout.splitlines() if ln.startswith("/")}
        assert "running" in lines[str(results / "live")]
        assert "completed" in lines[str(results / "old")]
        assert "3 run folder(s)" in listing.stdout
        assert run_cli("clean", str(results)).rc == 2  # no cap: nothing goes by accident
        dry = run_cli("clean", str(results), "--older-than", "7d", "--dry-run")
        assert "would remove run " + str(results / "old") in dry.stdout
        assert (results / "old").exists()
        done = run_cli("clean", str(results), "--all")
        assert done.rc == 0, done.stderr
        assert sorted(p.name for p in results.iterdir()) == ["live", "mine"]
    finally:
        os.close(held)


def test_clean_cache_removes_stacks_by_last_use(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for name, age in (("old-stack", 20 * 86400), ("fresh-stack", 0)):
        d = cache / "stacks" / name
        (d / "bin").mkdir(parents=True)
        (d / "bin" / "python").write_text("x" * 1000)
        (d / ".last-used").touch()
        t = time.time() - age
        os.utime(d / ".last-used", (t, t))
    res = run_cli("clean", str(tmp_path / "no-results"), "--cache", "--cache-dir", str(cache),
                  "--older-than", "7d")
    assert res.rc == 0, res.stderr
    assert sorted(p.name for p in (cache / "stacks").iterdir()) == ["fresh-stack"]
    listing = run_cli("runs", str(tmp_path), "--cache-dir", str(cache))
    assert "fresh-stack" in listing.stdout and "1 stack(s)" in listing.stdout


USES_A_STACK = """import sys
from pathlib import Path
from stress.runtimes import provision, spec
built = provision.build(spec.load(Path(sys.argv[1]))["held"], Path(sys.argv[2]))
print(built.venv, flush=True)
sys.stdin.read()  # in use (as by a compare's trials) until the test closes stdin
"""


def test_clean_cache_skips_a_stack_a_running_compare_uses_and_says_so_in_one_line(
        tmp_path: Path) -> None:
    """issue 28 item 8: `clean --cache` removed a stack's venv under a running compare."""
    cache, f = tmp_path / "cache", tmp_path / "stacks.toml"
    f.write_text('[stacks.held]\nrequirements = ["iree-base-runtime==3.12.0"]\n')
    venv = cache / "stacks" / f"held-{spec.load(f)['held'].key()}"
    (venv / "bin").mkdir(parents=True)  # built by an earlier compare
    (venv / ".built.json").write_text('{"stack": "held", "freeze": []}')
    user = subprocess.Popen([sys.executable, "-c", USES_A_STACK, str(f), str(cache)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert user.stdin is not None and user.stdout is not None
    try:
        assert user.stdout.readline().strip() == str(venv)  # the other process uses it now
        clean = ["clean", str(tmp_path / "no-results"), "--cache", "--cache-dir", str(cache),
                 "--all"]
        dry = run_cli(*clean, "--dry-run")
        assert f"would keep stack {venv}: in use by a running compare or bisect" in \
            dry.stdout.splitlines(), dry.stdout
        res = run_cli(*clean)
        assert res.rc == 0, res.stderr
        said = [ln for ln in res.stdout.splitlines() if str(venv) in ln]
        assert said == [f"kept stack {venv}: in use by a running compare or bisect"], res.stdout
        assert (venv / ".built.json").exists()
    finally:
        user.stdin.close()
        user.wait(timeout=60)
    res = run_cli(*clean)  # no longer in use: it goes
    assert f"removed stack {venv}" in res.stdout and not venv.exists(), res.stdout


ASKS_CLEAN = """import os
import sys
from pathlib import Path
from stress import housekeeping as hk
name = os.environ["STACK_NAME"]  # (the stack's env says which stack this trial runs under)
venv = next(p for p in Path(sys.argv[1]).glob(f"{name}-*") if p.is_dir())
with open(sys.argv[2], "a") as f:
    f.write(f"{name}:{hk.stack_in_use(venv)}\\n")
"""


def test_a_compare_holds_its_stacks_lock_while_a_trial_runs(tmp_path: Path) -> None:
    """What `clean --cache` relies on: each trial's command asks, as clean would, whether
    the stack it runs under is in use; it must be (the stack's lease is held over its
    trials), and free once the compare has ended."""
    cache, f = tmp_path / "cache", tmp_path / "stacks.toml"
    f.write_text('[stacks.held]\nrequirements = ["iree-base-runtime==3.12.0"]\n'
                 'env = { STACK_NAME = "held" }\n'
                 '[stacks.other]\nrequirements = ["iree-base-runtime==3.11.0"]\n'
                 'env = { STACK_NAME = "other" }\n')
    venvs = [cache / "stacks" / f"{name}-{stack.key()}" for name, stack in spec.load(f).items()]
    for venv in venvs:  # built by an earlier compare
        (venv / "bin").mkdir(parents=True)
        (venv / ".built.json").write_text('{"stack": "x", "freeze": []}')
    answers = tmp_path / "answers.txt"
    res = run_cli("compare", "held", "other", "--stacks", str(f), "--engine", "exec",
                  "-n", "1", "--trials", "2", "--cache-dir", str(cache), "--results",
                  # (through sh: the stacks' venvs here are folders without a python, and
                  #   a stack's setup check refuses another venv's interpreter)
                  str(tmp_path / "cmp"), "--", "sh", "-c", 'exec "$0" -c "$@"',
                  sys.executable, ASKS_CLEAN, str(cache / "stacks"), str(answers),
                  timeout=300, cwd=tmp_path)
    said = answers.read_text().split() if answers.exists() else []
    assert sorted(set(said)) == ["held:True", "other:True"], (said, res.stdout,
                                                                res.stderr[-3000:])
    assert not any(hk.stack_in_use(v) for v in venvs)
