"""Run folders: a new (or empty) folder for every run, never one that already holds a run,
except to resume its plan: then the new run is added to the folder's store and its own files
go to a sub-folder (`resume-K/`), so that nothing recorded before is rewritten. A run that
cannot start leaves no folder behind; a finished one leaves no SQLite side files.

A folder is held (flock) while a run writes into it: a second soak resuming the same folder
at the same time is refused instead of interleaving two continuations of one plan."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.errors import UsageError
from stress.store.db import DB_NAME, connect

RESUME_PREFIX = "resume-"  # a resumed run's own files: RUN_DIR/resume-K/
WORKER_PATH = "worker-path"  # the package copy a run's workers import (removed at its end)
_KEEP_NATIVE_INPUTS_OF_FAILURES: bool = True  # a failure's inputs stay beside its evidence


@dataclass
class RunFolder:
    """Where one run writes: `root` holds the store (and summary.json), `files` the run's own
    files (root itself, or root/resume-K for a resumed run)."""

    root: Path
    files: Path
    run_id: str
    created: list[Path] = field(default_factory=list)  # made by us: removed if the start fails
    previous: list[dict[str, Any]] = field(default_factory=list)  # earlier runs (resume)
    lock_fd: int | None = None

    @property
    def resumed(self) -> bool:
        return bool(self.previous)

    def discard(self) -> None:
        """The run did not start (a usage error before its first record): the folders made
        for it go, with what was written into them; a folder the user made stays, emptied
        of our files only when nothing else is in it."""
        self.release()
        for folder in reversed(self.created):
            shutil.rmtree(folder, ignore_errors=True)
        if not self.created and not self.resumed:
            for child in list(self.files.iterdir()) if self.files.is_dir() else []:
                if child.name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm",
                                  "worker-config.json"):
                    child.unlink(missing_ok=True)

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing the descriptor drops the flock
            self.lock_fd = None


def holds_run(folder: Path) -> bool:
    return (folder / DB_NAME).is_file()


def runs_in(folder: Path) -> list[dict[str, Any]]:
    """The runs of a folder's store, oldest first: run_id, status, started_at, config."""
    db = connect(folder / DB_NAME, readonly=True)
    try:
        rows = [dict(r) for r in db.execute(
            "SELECT run_id, status, started_at, ended_at, config FROM runs ORDER BY started_at")]
    finally:
        db.close()
    for r in rows:
        r["config"] = json.loads(r["config"] or "{}")
    return rows


def next_job_index(folder: Path) -> int:
    """The first job index no run of the folder reached (jobs and failures pinned on jobs)."""
    db = connect(folder / DB_NAME, readonly=True)
    try:
        row = db.execute("SELECT MAX(i) FROM (SELECT MAX(job_index) AS i FROM jobs UNION ALL "
                         "SELECT MAX(job_index) FROM failures)").fetchone()
    finally:
        db.close()
    return 0 if row[0] is None else int(row[0]) + 1


def _lock(folder: Path) -> int:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(f"{folder} is in use by a soak that is still running; wait for it, "
                         "or choose another --results folder") from None
    return fd


def _describe(run: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(run["started_at"])))
    return f"{run['run_id']}, {run['status']}, started {when}"


def _mkdirs(path: Path) -> list[Path]:
    """Makes `path` and its missing parents; returns the ones made, outermost first."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".writable"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"results dir {path} is not writable: {exc.strerror}") from None
    return list(reversed(missing))


def check_free(results: Path | None, resume: bool = False) -> list[dict[str, Any]]:
    """Refuses (one line) a --results folder a new run may not write into: a file, a folder
    holding a run (unless `resume`), a non-empty folder holding none. Returns the runs of a
    folder to resume (else [])."""
    if resume:
        if results is None:
            raise UsageError("--resume needs --results DIR, the folder of the run to continue")
        if not holds_run(results):
            raise UsageError(f"--resume: {results} holds no run to continue")
    if results is None:
        return []
    if results.exists() and not results.is_dir():
        raise UsageError(f"--results {results} is a file, not a folder")
    if results.is_dir() and holds_run(results):
        runs = runs_in(results)
        if not resume:
            last = f" ({_describe(runs[-1])})" if runs else ""
            # gate, compare and bisect have no --resume: name the command that has it
            raise UsageError(f"{results} already holds a run{last}: choose a new --results "
                             "folder (`iree-stress soak --resume` continues a soak's plan "
                             "there as a new run)")
        return runs
    if results.is_dir() and any(results.iterdir()):
        raise UsageError(f"{results} is not empty and holds no run: --results needs a new or "
                         "empty folder")
    return []


def prepare(results: Path | None, seed: int, resume: bool = False) -> RunFolder:
    """The folder of a new run (module doc). `results` None: results/RUN_ID. An existing
    folder must be empty, or hold a run and `resume` be set; anything else is refused in one
    line, before anything is written."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-s{seed}-{os.getpid()}"
    root = results if results is not None else Path("results") / run_id
    if results is not None:
        run_id = results.name or run_id
    runs = check_free(results, resume)
    if runs:
        return _resume(root, runs)
    created = _mkdirs(root)
    return RunFolder(root, root, run_id, created, lock_fd=_lock(root))


def _resume(root: Path, runs: list[dict[str, Any]]) -> RunFolder:
    if not runs:
        raise UsageError(f"{root} holds a store with no run; nothing to resume")
    fd = _lock(root)
    taken = {r["run_id"] for r in runs}
    k = 1  # the first resume is resume-1 (the first run's files are the folder itself)
    while True:
        files = root / f"{RESUME_PREFIX}{k}"
        run_id = f"{runs[0]['run_id']}-{RESUME_PREFIX}{k}"
        if run_id not in taken:
            try:
                files.mkdir()  # claims K (the flock already keeps other soaks out)
                break
            except FileExistsError:
                pass
        k += 1
    return RunFolder(root, files, run_id, [files], runs, fd)


def finish(folder: RunFolder) -> None:
    """A run's end, once its summary is written: the store leaves WAL mode (no -wal, -shm
    files stay; readers need no write access), the workers' package copy goes, native inputs
    stay only for programs with a failure, and the folder is released."""
    try:
        end_wal(folder.root / DB_NAME)
    except sqlite3.Error:
        pass  # a store another process still reads: its side files stay, nothing is lost
    shutil.rmtree(folder.files / WORKER_PATH, ignore_errors=True)
    tidy_native_inputs(folder)
    folder.release()


def end_wal(path: Path) -> None:
    """Checkpoints the WAL into the database and switches to a rollback journal, which
    removes stress.db-wal and stress.db-shm (a writer that resumes the run turns WAL on
    again)."""
    if not path.exists():
        return
    db = sqlite3.connect(path, timeout=5)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA journal_mode=DELETE")
    finally:
        db.close()


def tidy_native_inputs(folder: RunFolder) -> None:
    """The native engine writes each program's inputs once (`native/inputs/PROGRAM/`, up to
    ~100 MB for the corpus); they derive from a fixed seed (`repro` writes them again), so
    only those of programs that failed stay, beside the evidence that names them."""
    inputs = folder.files / "native" / "inputs"
    if not inputs.is_dir():
        return
    keep: set[str] = set()
    if _KEEP_NATIVE_INPUTS_OF_FAILURES and holds_run(folder.root):
        db = connect(folder.root / DB_NAME, readonly=True)
        try:
            keep = {r[0] for r in db.execute("SELECT DISTINCT program FROM failures WHERE "
                                             "run_id=? AND program IS NOT NULL",
                                             (folder.run_id,))}
        finally:
            db.close()
    for child in inputs.iterdir():
        if child.name not in keep:
            shutil.rmtree(child, ignore_errors=True)
    if not any(inputs.iterdir()):
        inputs.rmdir()
