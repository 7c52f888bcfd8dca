"""Known-failures files (issue 9 item 2): read, matched by id or key pattern, bad files told
with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.analysis import known
from stress.errors import UsageError

GOOD = '''# filed upstream
[[known]]
signature = "S1a2b3c4d"
note = "TheRock stall in hipDeviceReset"
link = "https://example.invalid/issue/1"

[[known]]
match = "teardown_hang|*|worker-exit|busy|*"   # any busy stall at exit
note = "spins at exit"
'''


def test_entries_match_by_id_or_by_a_glob_over_the_key(tmp_path: Path) -> None:
    f = tmp_path / "known.toml"
    f.write_text(GOOD)
    k = known.load(f)
    assert len(k.entries) == 2
    hit = k.lookup("S1a2b3c4d", "crash|SIGSEGV|invoke||x|")
    assert hit is not None and hit.link.endswith("/1")
    spin = k.lookup("Sffffffff", "teardown_hang||worker-exit|busy|iree_fault_spin|")
    assert spin is not None and spin.note == "spins at exit"
    assert k.lookup("Sffffffff", "teardown_hang||worker-exit|blocked|x|") is None


def test_the_small_reader_for_python_3_10_reads_the_same_entries(tmp_path: Path) -> None:
    tables, lines = known._tiny_toml(GOOD, tmp_path / "k.toml")
    assert [t.get("note") for t in tables] == ["TheRock stall in hipDeviceReset",
                                               "spins at exit"]
    assert lines == [2, 7]
    with pytest.raises(UsageError, match=r"k.toml:3"):
        known._tiny_toml("[[known]]\nnote = 'x'\nsignature = 12\n", tmp_path / "k.toml")


@pytest.mark.parametrize(("text", "why"), [
    ('[[known]]\nsignature = "S1"\n', "needs a `note`"),
    ('[[known]]\nsignature = "S1"\nmatch = "*"\nnote = "n"\n', "exactly one of"),
    ('[[known]]\nsignature = "S1"\nnote = "n"\nurl = "u"\n', "unknown key"),
    ('[[known]]\nsignature = "S1"\nnote = "n"\n[other]\n', "unknown top-level"),
    ('[[known]\n', "known.toml"),
])
def test_a_bad_file_is_one_clear_usage_error(tmp_path: Path, text: str, why: str) -> None:
    f = tmp_path / "known.toml"
    f.write_text(text)
    with pytest.raises(UsageError, match=why) as err:
        known.load(f)
    assert str(f) in str(err.value)


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        known.load(tmp_path / "nope.toml")
