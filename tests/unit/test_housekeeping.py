"""`runs` and `clean` (stress/housekeeping.py, issue 28 item 8): what goes under each cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress import housekeeping as hk
from stress.runtimes import provision

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
