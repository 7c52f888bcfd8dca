"""`runs` and `clean` (stress/housekeeping.py, issue 28 item 8): what goes under each cap."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stress import housekeeping as hk
from stress.runtimes import provision
from tests.conftest import REPO

DAY = 86400.0


def entry(name: str, age_days: float, size: int = 10, kind: str = "run",
          status: str = "completed") -> hk.Entry:
    return hk.Entry(kind, Path(name), 1000 * DAY - age_days * DAY, size, status)


ENTRIES = [entry("old", 30, 100), entry("mid", 10, 100), entry("new", 1, 100),
           entry("live", 40, 500, status="running")]


def names(chosen: list[hk.Entry]) -> list[str]:
    return [str(e.path) for e in chosen]


def test_older_than_removes_by_age_and_never_a_running_run() -> None:
    assert names(hk.choose(ENTRIES, 7 * DAY, None, None, False, now=1000 * DAY)) == \
        ["old", "mid"]


def test_keep_counts_the_newest_running_ones_included() -> None:
    assert names(hk.choose(ENTRIES, None, 2, None, False, now=1000 * DAY)) == ["old"]
    assert names(hk.choose(ENTRIES, None, 0, None, False, now=1000 * DAY)) == \
        ["old", "mid", "new"]


def test_max_size_removes_the_oldest_until_the_rest_fits() -> None:
    # 800 in all; the running run's 500 stays whatever the cap
    assert names(hk.choose(ENTRIES, None, None, 750, False, now=1000 * DAY)) == ["old"]
    assert names(hk.choose(ENTRIES, None, None, 650, False, now=1000 * DAY)) == ["old", "mid"]
    assert names(hk.choose(ENTRIES, None, None, 0, False, now=1000 * DAY)) == \
        ["old", "mid", "new"]


def test_all_removes_everything_not_running_and_empty_folders_always_go() -> None:
    empty = entry("empty", 0, 0, kind="empty")
    assert names(hk.choose([*ENTRIES, empty], None, None, None, True)) == \
        ["old", "mid", "new", "empty"]
    assert names(hk.choose([*ENTRIES, empty], 99 * DAY, None, None, False,
                           now=1000 * DAY)) == ["empty"]


@pytest.mark.parametrize("text,n", [("500M", 500_000_000), ("10G", 10**10), ("2.5GB", 2.5e9),
                                    ("4096", 4096), ("1k", 1000)])
def test_sizes_parse(text: str, n: float) -> None:
    assert hk.parse_size(text) == n


def test_the_cache_layout_is_the_one_stacks_builds() -> None:
    assert (hk.STACKS_DIR, hk.LAST_USED) == (provision.STACKS_DIR, provision.LAST_USED)


def stack_folder(cache: Path, name: str, size: int = 1000) -> Path:
    d = cache / hk.STACKS_DIR / name
    (d / "bin").mkdir(parents=True)
    (d / "bin" / "python").write_text("x" * size)
    (d / ".built.json").write_text("{}")
    return d


def test_max_size_says_when_a_stack_in_use_keeps_the_cache_over_the_cap(tmp_path: Path) -> None:
    """issue 28 review: `clean --cache --max-size` skipped a chosen stack in use and said
    only that it kept it; what is left may still be over the cap."""
    cache = tmp_path / "cache"
    busy, other = stack_folder(cache, "a-busy"), stack_folder(cache, "b-idle")
    os.utime(busy, (1, 1))  # the oldest: the first the cap chooses
    lease = provision._lease(busy, busy / ".built.json", lambda: None)  # a compare uses it
    try:
        lines = list(hk.clean(tmp_path / "none", cache, None, None, 10, False, False))
    finally:
        lease.close()
    assert lines == [f"kept stack {busy}: in use by a running compare or bisect",
                     f"removed stack {other} (1.0 kB)",
                     "1 chosen entry in use stayed: what is left may be over --max-size 10 B",
                     "freed 1.0 kB (1 entry)"], lines


def test_a_builder_waiting_while_clean_removes_the_stack_builds_it_again_under_the_new_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race `clean --cache` has with a compare starting on the same stack: clean holds
    the stack's lock exclusive and removes the folder and its lock file while the compare
    waits for the lock; the compare then finds the folder gone, builds it again and holds
    the lock file now at the path (a lease on the removed file would guard nothing)."""
    venv = stack_folder(tmp_path / "cache", "s")
    lock = provision.lock_path(venv)
    builds: list[int] = []
    leases: list[Any] = []

    def make() -> None:
        builds.append(1)
        stack_folder(tmp_path / "cache", "s")

    def builder() -> None:
        leases.append(provision._lease(venv, venv / ".built.json", make))

    real_rmtree = hk.shutil.rmtree
    waiter = threading.Thread(target=builder)

    def rmtree(path: Path) -> None:  # clean holds the exclusive lock now: the builder waits
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not builds
        real_rmtree(path)

    monkeypatch.setattr(hk.shutil, "rmtree", rmtree)
    assert hk.remove(hk.Entry("stack", venv, 0.0, 0))
    waiter.join(timeout=30)
    assert not waiter.is_alive() and builds == [1] and (venv / ".built.json").exists()
    assert os.fstat(leases[0].fileno()).st_ino == os.stat(lock).st_ino  # the new lock file
    assert hk.stack_in_use(venv)  # held: a second clean keeps it
    leases[0].close()
    assert not hk.stack_in_use(venv)


ANOTHER_USER = """import sys
from pathlib import Path
from stress import housekeeping as hk
from stress.runtimes import provision
venv = Path(sys.argv[1])
print(hk.stack_in_use(venv), flush=True)
lease = provision._lease(venv, venv / ".built.json", lambda: None)
print("leased", flush=True)
"""


def test_a_lock_file_of_another_user_is_no_obstacle_to_a_dry_run_or_a_compare() -> None:
    """issue 28 review: a cache a group shares holds lock files another user made (0644);
    `clean --dry-run` and a compare opened them for writing and crashed (EACCES). flock
    needs only a read-only file. (As root, the check runs as nobody; as anyone else, on a
    lock file even its owner may not write.)"""
    root = Path(tempfile.mkdtemp(prefix="iree-stress-shared-"))
    try:
        os.chmod(root, 0o755)
        venv = stack_folder(root, "s")
        for d in (root / hk.STACKS_DIR, venv):
            os.chmod(d, 0o755)
        lock = provision.lock_path(venv)
        lock.touch(mode=0o644)
        os.chmod(lock, 0o644 if os.geteuid() == 0 else 0o444)
        user = {"user": 65534, "group": 65534} if os.geteuid() == 0 else {}
        res = subprocess.run([sys.executable, "-c", ANOTHER_USER, str(venv)], **user,
                             capture_output=True, text=True, timeout=60, cwd="/",
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        assert (res.returncode, res.stdout) == (0, "False\nleased\n"), res.stderr[-2000:]
    finally:
        shutil.rmtree(root)
