"""What a user sees on a terminal while a soak starts from nothing (issue 28 item 2 and its
done-when: progress within 2 s of a command's start): a cold compile printed nothing for 52 s
and the driver check was a still line. Here a soak with an empty artifact cache, under a
pseudo-terminal: something within 2 s, then never 2 s without a redraw until it ends (the
driver check's seconds, the compile's count and time left, the soak's live line)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers.terminal import run_on_terminal, screen

pytestmark = pytest.mark.system

_PROMISE_S: float = 2.0  # the issue's: progress within 2 s; redraws come every 0.5 s
# the suite's heartbeat redraws every second; a 2-core machine running other tests can hold the
#   pytest under test back for a second or so (a silence of a whole 5 s test still fails)
_LOADED_SLACK_S: float = 1.5


def test_a_cold_soak_on_a_terminal_says_something_within_2_s_and_is_never_silent_for_2_s(
        tmp_path: Path) -> None:
    env = {**os.environ, "IREE_STRESS_CACHE": str(tmp_path / "cold-cache"),
           "PYTHONPATH": str(REPO)}
    drawn = run_on_terminal([sys.executable, "-m", "stress", "soak", "-t", "cpu", "--programs",
                             "binary.add.*", "-w", "1", "-d", "2s", "--results",
                             str(tmp_path / "run")], env, tmp_path)
    timeline = "\n".join(f"{t:6.2f} {text[:100]}" for t, text in drawn.events)
    assert drawn.rc == 0, timeline
    assert drawn.first_s < _PROMISE_S, timeline
    gap, at = drawn.longest_silence()
    assert gap < _PROMISE_S, f"silent {gap:.1f} s from {at:.1f} s\n{timeline}"
    texts = drawn.texts()
    # each long step says it is alive: the driver check's seconds, the compile's count
    assert any(t.startswith("soak: checking the driver") and t.endswith(", 0 s") for t in texts)
    assert sum(t.startswith("compiling for cpu:generic: ") for t in texts) >= 2, timeline
    assert texts[-1] == "no failures", timeline


# (this suite run by CI: the pytest under test is on a terminal of its own, not in a CI log)
_NOT_CI = {k: v for k, v in os.environ.items() if k != "CI"}

LONG_TESTS = """import time

from stress.ui import Status
from tests.helpers import heartbeat


def test_quick():
    pass


def test_waits_on_a_child():  # a system test: pytest draws its letter when it ends
    time.sleep(5)


def test_shows_its_own_progress(pytestconfig):  # as the corpus compile in a fixture does
    with heartbeat.live(pytestconfig) as stream:
        status = Status(True, stream=stream)
        for i in range(3):
            status.update(f"compiling {i}/3", force=True)
            time.sleep(1)
        status.done("compiled 3/3")


def test_quick_after():
    pass
"""


def test_the_suite_on_a_terminal_names_a_long_test_while_it_runs_and_leaves_pytests_lines(
        tmp_path: Path) -> None:
    """issue 28 item 2: the first `dev.py test` on a fresh clone drew nothing for 115 s
    (bench/results/quickstart_latency.txt): a long test (or a session fixture compiling the
    corpus) is silent in pytest's output. This suite's conftest (loaded with -p, as
    `dev.py test` loads it from tests/) shows the running test's name and seconds, and a
    block's own progress gets a line of its own."""
    (tmp_path / "test_long.py").write_text(LONG_TESTS)
    drawn = run_on_terminal([sys.executable, "-m", "pytest", "-p", "tests.conftest",
                             "--rootdir", str(tmp_path), "-c", os.devnull, "test_long.py"],
                            {**_NOT_CI, "PYTHONPATH": str(REPO)}, tmp_path, timeout=120)
    timeline = "\n".join(f"{t:6.2f} {text[:100]}" for t, text in drawn.events)
    assert drawn.rc == 0, timeline
    gap, at = drawn.longest_silence()
    assert gap < _PROMISE_S + _LOADED_SLACK_S, f"silent {gap:.1f} s from {at:.1f} s\n{timeline}"
    # (the seconds a loaded machine gets to: any count shows it was drawn while the test ran)
    assert any(re.search(r"test_waits_on_a_child [1-9]\d* s$", t) for t in drawn.texts()), \
        timeline
    lines = screen(drawn.raw)  # the heartbeat is gone: pytest's lines are pytest's alone
    first = next(i for i, line in enumerate(lines) if line.startswith("test_long.py"))
    assert lines[first:first + 2] == ["test_long.py ..", "compiled 3/3"], lines
    last = lines[first + 2]  # pytest still knows where its line is: [100%] at its edge
    assert last.startswith("..  ") and last.endswith("[100%]") and len(last) < 160, lines


ONE_LONG_TEST = """import time


def test_sleeps_under_a_name_longer_than_the_terminal_is_wide_by_a_good_margin():
    time.sleep(3)
"""
_HEARTBEAT = re.compile(r" [1-9]\d* s$")  # what the heartbeat draws ends so (pytest: "in 3.05s")


def _pytest_on_terminal(tmp_path: Path, env: dict[str, str], *args: str,
                        columns: int = 160, columns_env: bool = True) -> tuple[list[str], str]:
    (tmp_path / "test_one.py").write_text(ONE_LONG_TEST)
    drawn = run_on_terminal([sys.executable, "-m", "pytest", "-p", "tests.conftest",
                             "--rootdir", str(tmp_path), "-c", os.devnull, *args,
                             "test_one.py"], {**_NOT_CI, "PYTHONPATH": str(REPO), **env},
                            tmp_path, timeout=120, columns=columns, columns_env=columns_env)
    timeline = "\n".join(f"{t:6.2f} {text[:100]}" for t, text in drawn.events)
    assert drawn.rc == 0, timeline
    return screen(drawn.raw, width=columns), timeline


def test_the_heartbeat_fits_a_narrow_terminal_whose_width_only_the_terminal_knows(
        tmp_path: Path) -> None:
    """A 50-column terminal, COLUMNS unset (pytest's writer says 80 under fd capture): the
    heartbeat stays within the line (its name cut to fit), so its erase leaves pytest's line
    as pytest drew it, with nothing of the heartbeat wrapped onto the screen."""
    lines, timeline = _pytest_on_terminal(tmp_path, {}, columns=50, columns_env=False)
    assert any(_HEARTBEAT.search(line) for line in timeline.splitlines()), timeline  # drawn
    assert not any("test_sleeps" in line or "margin" in line or _HEARTBEAT.search(line)
                   for line in lines), lines
    assert any(line.startswith("test_one.py .") for line in lines), lines


@pytest.mark.parametrize(("env", "args"), [
    ({"CI": "true"}, ()),  # a CI runner's pseudo-terminal is a log
    ({}, ("-o", "log_cli=true")),  # live logging: log lines would cut into the heartbeat's
    ({}, ("--log-cli-level", "INFO")),
], ids=["CI", "log_cli", "log-cli-level"])
def test_the_heartbeat_draws_nothing_where_its_escapes_would_land_in_a_log(
        tmp_path: Path, env: dict[str, str], args: tuple[str, ...]) -> None:
    lines, timeline = _pytest_on_terminal(tmp_path, env, *args)
    assert not any(_HEARTBEAT.search(line) for line in timeline.splitlines()), timeline
    assert any("1 passed" in line for line in lines), lines
