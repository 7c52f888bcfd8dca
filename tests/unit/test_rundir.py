"""Run folders (stress/store/rundir.py, issue 28 items 1 and 8): never one that holds a run
unless resumed, nothing rewritten, nothing left after a failed start, no side files after
the end."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from stress.errors import UsageError
from stress.fs import atomic_write
from stress.store import rundir
from stress.store.db import RunStore


def a_run(folder: Path, run_id: str = "r", status: str = "completed") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    store = RunStore(folder)
    store.start_run(run_id, 5, "iree-stress soak --seed 5", {}, {"seed": 5})
    store.end_run(run_id, status)
    store.close()


def test_a_folder_that_holds_a_run_is_refused_in_one_line_naming_it(tmp_path: Path) -> None:
    a_run(tmp_path / "r")
    with pytest.raises(UsageError) as err:
        rundir.prepare(tmp_path / "r", 6)
    assert "already holds a run (r, completed" in str(err.value)
    # the way out a gate's, compare's or bisect's user can take comes first; --resume is
    #   soak's alone, and says so (before: "--resume continues its plan", for every command)
    said = str(err.value).split(": ", 1)[1]
    assert said.startswith("choose a new --results folder"), said
    assert "soak --resume" in said and "\n" not in said


def test_a_non_empty_folder_without_a_run_and_a_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my own file")
    with pytest.raises(UsageError, match="is not empty and holds no run"):
        rundir.prepare(tmp_path / "mine", 1)
    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match="is a file"):
        rundir.prepare(tmp_path / "f", 1)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "my own file"


def test_a_resumed_run_gets_its_own_sub_folder_and_id(tmp_path: Path) -> None:
    a_run(tmp_path / "r")
    first = rundir.prepare(tmp_path / "r", 5, resume=True)
    assert (first.files, first.run_id) == (tmp_path / "r" / "resume-1", "r-resume-1")
    first.release()
    second = rundir.prepare(tmp_path / "r", 5, resume=True)
    assert second.files.name == "resume-2" and second.previous[0]["run_id"] == "r"
    second.release()


def test_a_folder_in_use_by_a_running_soak_cannot_be_resumed_meanwhile(tmp_path: Path) -> None:
    a_run(tmp_path / "r", status="running")
    held = rundir.prepare(tmp_path / "r", 5, resume=True)
    with pytest.raises(UsageError, match="in use by a soak that is still running"):
        rundir.prepare(tmp_path / "r", 5, resume=True)
    held.release()


def test_a_failed_start_leaves_no_folder_and_empties_a_given_empty_one(tmp_path: Path) -> None:
    made = rundir.prepare(tmp_path / "a" / "b", 1)
    (made.files / "worker-config.json").write_text("{}")
    made.discard()
    assert not (tmp_path / "a").exists()
    (tmp_path / "given").mkdir()
    given = rundir.prepare(tmp_path / "given", 1)
    RunStore(given.files).close()
    given.discard()
    assert (tmp_path / "given").is_dir() and not any((tmp_path / "given").iterdir())


def test_the_end_of_a_run_leaves_no_wal_files_no_package_copy_and_only_failing_inputs(
        tmp_path: Path) -> None:
    folder = rundir.prepare(tmp_path / "r", 1)
    store = RunStore(folder.root)
    store.start_run(folder.run_id, 1, "", {}, {})
    store.add_failure(folder.run_id, {"class": "error", "program": "bad.prog"})
    store.close()
    for name in ("bad.prog", "good.prog"):
        (folder.files / "native" / "inputs" / name).mkdir(parents=True)
        (folder.files / "native" / "inputs" / name / "in0.npy").write_bytes(b"x" * 100)
    (folder.files / "worker-path" / "stress").mkdir(parents=True)
    reader = sqlite3.connect(f"file:{folder.root / 'stress.db'}?mode=ro", uri=True)
    reader.execute("SELECT COUNT(*) FROM runs").fetchone()
    reader.close()
    rundir.finish(folder)
    left = sorted(p.name for p in folder.root.iterdir())
    assert left == ["native", "stress.db"]
    assert sorted(p.name for p in (folder.root / "native" / "inputs").iterdir()) == ["bad.prog"]


def test_files_are_written_readable_by_the_group_as_the_umask_says(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "summary.json", b"{}")
        mode = stat.S_IMODE((tmp_path / "summary.json").stat().st_mode)
        assert mode == 0o644
        os.umask(0o077)
        atomic_write(tmp_path / "private.json", b"{}")
        assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)
