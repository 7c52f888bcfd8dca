"""`iree-stress runs` and `iree-stress clean`: what the run folders and the shared cache hold,
and removing the old or the excess (a run folder can reach hundreds of MB with native inputs
and cores, a runtime stack's venv ~145 MB).

Only what iree-stress made is ever removed: folders holding a run store (stress.db), empty
folders under the results folder, and the cache's artifacts and stack folders. A run that is
still writing (its folder is held: store/rundir.py) is listed as running and never removed."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stress.errors import UsageError
from stress.store.db import DB_NAME, connect
from stress.vocab import RunStatus

STACKS_DIR: str = "stacks"  # = stress.runtimes.provision.STACKS_DIR (not imported: this module
#   stays light; tests/unit/test_housekeeping.py checks they agree)
LAST_USED: str = ".last-used"  # touched in a stack folder each time a run uses it
_SEARCH_DEPTH: int = 3  # results/RUN, results/compare-X/STACK/trial-N: run stores this deep
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", re.I)
_SIZE_UNITS: dict[str, int] = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
    """`500M`, `10G`, `2.5GB`, `1e6` is not: plain bytes, or K/M/G/T (powers of 1000)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a size like 500M, 10G")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def size_text(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def du(path: Path) -> int:
    """Bytes on disk under `path` (files' sizes; links not followed)."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass  # removed meanwhile
    return total


def is_live(folder: Path) -> bool:
    """A soak holds the folder now (rundir's flock)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _hold_stack(folder: Path) -> int | None:
    """The stack folder's lock (stress/runtimes/provision.py: `<folder>.lock`, held shared
    by each run using the stack) taken exclusive, without waiting: its fd, or None when a
    compare or bisect uses the stack now."""
    lock = folder.parent / f"{folder.name}.lock"
    while True:
        # (read-only: flock needs no write access, and in a cache a group shares the lock
        #   file may be another user's 0644 one; made only when missing)
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:  # another clean removed it meanwhile: lock the new one
            pass
        os.close(fd)


def stack_in_use(folder: Path) -> bool:
    """Whether a compare or bisect uses the stack now (a dry run asks: no lock file made)."""
    if not (folder.parent / f"{folder.name}.lock").exists():
        return False  # (a run takes its lock before it uses the stack)
    fd = _hold_stack(folder)
    if fd is None:
        return True
    os.close(fd)
    return False


@dataclass
class Entry:
    """One thing `clean` may remove: a run folder, an empty folder, a cached stack, or an
    artifact."""

    kind: str  # run | empty | stack | artifact
    path: Path
    when: float  # run: its last start; cache: its last use
    size: int
    status: str = ""
    runs: int = 0
    invocations: int = 0
    failures: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}

    def describe(self) -> str:
        date = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.when)) if self.when else "-"
        if self.kind == "run":
            runs = f"{self.runs} runs" if self.runs > 1 else "1 run"
            return (f"{str(self.path):<48} {self.status:<11} {date}  {runs:>7}  "
                    f"{self.invocations:>11,} invocations  {self.failures:>5,} failures  "
                    f"{size_text(self.size):>9}")
        return f"{str(self.path):<48} {self.kind:<11} {date}  {size_text(self.size):>9}"


def _run_entry(folder: Path) -> Entry:
    status, started, runs, inv, fails = "unreadable", 0.0, 0, 0, 0
    try:
        db = connect(folder / DB_NAME, readonly=True)
        try:
            rows = db.execute("SELECT status, started_at FROM runs ORDER BY started_at"
                              ).fetchall()
            inv = int(db.execute("SELECT COALESCE(SUM(invocations), 0) FROM jobs").fetchone()[0])
            # as summary.json counts them: errors and miscompares from the job rows (a worker's
            # own reports of them are rows of `failures` too), the rest from `failures`
            fails = int(db.execute(
                "SELECT (SELECT COUNT(*) FROM failures WHERE attribution != 'worker-report') + "
                "(SELECT COALESCE(SUM(errors + miscompare), 0) FROM jobs)").fetchone()[0])
        finally:
            db.close()
        runs = len(rows)
        if rows:
            status, started = str(rows[-1][0]), float(rows[-1][1])
    except (sqlite3.Error, UsageError):
        pass
    live = is_live(folder)
    if live:
        status = RunStatus.RUNNING.value
    elif status == RunStatus.RUNNING:  # its soak is gone without ending the run (SIGKILL, power)
        status = "unfinished"
    if not started:
        started = folder.stat().st_mtime
    return Entry("run", folder, started, du(folder), status, runs, inv, fails)


def _walk(root: Path, depth: int) -> Iterator[Path]:
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return
    for child in children:
        yield child
        if depth > 1 and not (child / DB_NAME).is_file():
            yield from _walk(child, depth - 1)


def run_folders(root: Path) -> list[Entry]:
    """The run folders under `root` (root itself when it is one), oldest first, and the empty
    folders right under it (failed starts of older versions left them)."""
    if (root / DB_NAME).is_file():
        return [_run_entry(root)]
    out = []
    for d in _walk(root, _SEARCH_DEPTH):
        if (d / DB_NAME).is_file():
            out.append(_run_entry(d))
        elif d.parent == root and not any(d.iterdir()):
            out.append(Entry("empty", d, d.stat().st_mtime, 0))
    return sorted(out, key=lambda e: e.when)


def cache_entries(cache: Path) -> list[Entry]:
    """The cache's stacks (one folder each, by last use) and artifacts (.vmfb with its .json;
    sources), oldest first."""
    out = []
    stacks = cache / STACKS_DIR
    if stacks.is_dir():
        for d in sorted(p for p in stacks.iterdir() if p.is_dir()):
            used = d / LAST_USED
            when = (used if used.exists() else d).stat().st_mtime
            out.append(Entry("stack", d, when, du(d)))
    for sub, pattern in (("vmfb", "*/*.vmfb"), ("src", "*.mlir")):
        for f in sorted((cache / sub).glob(pattern)) if (cache / sub).is_dir() else []:
            meta = f.with_suffix(".json")
            size = f.stat().st_size + (meta.stat().st_size if meta.exists() else 0)
            out.append(Entry("artifact", f, f.stat().st_mtime, size))
    return sorted(out, key=lambda e: e.when)


def choose(entries: list[Entry], older_than_s: float | None, keep: int | None,
           max_size: int | None, everything: bool, now: float | None = None) -> list[Entry]:
    """What to remove of one kind's entries (oldest first): everything (never a running
    run), or the union of what each cap removes: older than the age, beyond the `keep`
    newest, the oldest until the rest fits in `max_size`. Empty folders always go."""
    now = time.time() if now is None else now
    removable = [e for e in entries if e.status != RunStatus.RUNNING]
    if everything:
        return removable
    out: dict[Path, Entry] = {e.path: e for e in removable if e.kind == "empty"}
    if older_than_s is not None:
        out.update({e.path: e for e in removable if now - e.when > older_than_s})
    if keep is not None:
        ranked = sorted((e for e in entries if e.kind != "empty"), key=lambda e: e.when,
                        reverse=True)
        kept = {e.path for e in ranked[:keep]}
        out.update({e.path: e for e in removable if e.path not in kept})
    if max_size is not None:
        total = sum(e.size for e in entries if e.path not in out)
        for e in removable:  # oldest first
            if total <= max_size:
                break
            if e.path not in out:
                out[e.path] = e
                total -= e.size
    return [e for e in removable if e.path in out]


def remove(entry: Entry) -> bool:
    """Removes one entry; False when it is in use (a soak took the run folder meanwhile, a
    compare or bisect runs on the stack)."""
    if entry.kind == "run":
        fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held while it goes: no resume
        except BlockingIOError:
            os.close(fd)
            return False
        try:
            shutil.rmtree(entry.path)
        finally:
            os.close(fd)
        return True
    if entry.kind == "artifact":
        entry.path.unlink(missing_ok=True)
        entry.path.with_suffix(".json").unlink(missing_ok=True)
        return True
    if entry.kind == "stack":
        held = _hold_stack(entry.path)
        if held is None:
            return False
        try:  # (a run that waits for the lock meanwhile builds the stack again)
            shutil.rmtree(entry.path)
            (entry.path.parent / f"{entry.path.name}.lock").unlink(missing_ok=True)
        finally:
            os.close(held)
        return True
    entry.path.rmdir()
    return True


def listing(folder: Path, cache: Path, as_json: bool = False) -> str:
    """`iree-stress runs`: the run folders under `folder`, then what the cache holds."""
    found = run_folders(folder) if folder.is_dir() else []
    cached = cache_entries(cache)
    if as_json:
        return json.dumps([e.as_dict() for e in found + cached])
    stacks = [e for e in cached if e.kind == "stack"]
    arts = [e for e in cached if e.kind == "artifact"]
    lines = [e.describe() for e in found]
    lines.append(f"{sum(e.kind == 'run' for e in found)} run folder(s) in {folder}, "
                 f"{size_text(sum(e.size for e in found))}")
    lines += [e.describe() for e in stacks]
    lines.append(f"cache {cache}: {len(arts)} artifact file(s) "
                 f"{size_text(sum(e.size for e in arts))}, {len(stacks)} stack(s) "
                 f"{size_text(sum(e.size for e in stacks))}")
    return "\n".join(lines)


def clean(folder: Path, cache: Path | None, older_than_s: float | None, keep: int | None,
          max_size: int | None, everything: bool, dry_run: bool) -> Iterator[str]:
    """`iree-stress clean`: removes (or, dry, names) what the caps choose, one line each,
    then what that freed. Caps apply to run folders and, with a cache, to its stacks and
    its artifacts apart (`keep` counts run folders and stacks, not artifact files)."""
    chosen = choose(run_folders(folder) if folder.is_dir() else [], older_than_s, keep,
                    max_size, everything)
    if cache is not None:
        cached = cache_entries(cache)
        for kind, k in (("stack", keep), ("artifact", None)):
            chosen += choose([e for e in cached if e.kind == kind], older_than_s, k, max_size,
                             everything)
    freed, gone, kept = 0, 0, 0
    for e in chosen:
        busy = stack_in_use(e.path) if dry_run and e.kind == "stack" else \
            not dry_run and not remove(e)
        if busy:
            kept += 1
            yield f"{'would keep' if dry_run else 'kept'} {e.kind} {e.path}: {_IN_USE[e.kind]}"
            continue
        freed, gone = freed + e.size, gone + 1
        yield (f"{'would remove' if dry_run else 'removed'} {e.kind} {e.path} "
               f"({size_text(e.size)})")
    if kept and max_size is not None:  # (nothing newer is removed in its place)
        stay = "would stay" if dry_run else "stayed"
        yield (f"{kept} chosen entr{'y' if kept == 1 else 'ies'} in use {stay}: what is left "
               f"may be over --max-size {size_text(max_size)}")
    yield (f"{'would free' if dry_run else 'freed'} {size_text(freed)} "
           f"({gone} entr{'y' if gone == 1 else 'ies'})")


_IN_USE: dict[str, str] = {"run": "a soak took it meanwhile",
                           "stack": "in use by a running compare or bisect"}
