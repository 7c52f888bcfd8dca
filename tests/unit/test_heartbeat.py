"""tests/helpers/heartbeat.py, the suite's own line of the running test (issue 28 item 2): it
draws nothing while pytest's debugger has the terminal or while the suite is in the
terminal's background (a review of the first version: it drew over a pdb prompt and from a
background job)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import termios
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from tests.helpers import heartbeat

_SETTLE_S: float = 3 * heartbeat._TICK_S + 0.3  # the thread has looked at least twice


class FakeReporter:
    verbosity = 0

    def __init__(self) -> None:
        self._tw = SimpleNamespace(width_of_current_line=len("test_x.py "))

    def flush(self) -> None:
        pass


@pytest.fixture
def on_pty() -> Iterator[tuple[heartbeat.Heartbeat, int]]:
    """A heartbeat drawing on a 60-column pseudo-terminal, a test running silently for 2 s;
    and the terminal's other side, where what it drew is read."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    beat = heartbeat.Heartbeat(FakeReporter(), slave, color=False)
    beat.test, beat.started = "test_slow", time.monotonic() - 2
    beat.quiet_since = time.monotonic() - 2
    yield beat, master
    beat.close()
    os.close(master)


def drawn(master: int) -> str:
    time.sleep(_SETTLE_S)
    out = b""
    while select.select([master], [], [], 0)[0]:
        out += os.read(master, 4096)
    return out.decode()


def test_nothing_is_drawn_while_the_suite_is_in_the_terminals_background(
        on_pty: tuple[heartbeat.Heartbeat, int], monkeypatch: pytest.MonkeyPatch) -> None:
    beat, master = on_pty
    monkeypatch.setattr(heartbeat.os, "tcgetpgrp", lambda fd: os.getpgrp() + 1)  # (another job)
    assert drawn(master) == ""
    monkeypatch.setattr(heartbeat.os, "tcgetpgrp", lambda fd: os.getpgrp())  # fg again
    assert re.search(r"test_slow \d+ s", drawn(master))


def test_a_debugger_prompt_is_never_drawn_over(
        on_pty: tuple[heartbeat.Heartbeat, int], monkeypatch: pytest.MonkeyPatch) -> None:
    beat, master = on_pty
    monkeypatch.setattr(heartbeat.os, "tcgetpgrp", lambda fd: os.getpgrp())
    pm = pytest.PytestPluginManager()
    pm.register(beat)
    assert re.search(r"test_slow \d+ s", drawn(master))
    pm.hook.pytest_enter_pdb(config=None, pdb=None)  # (pytest's hook, as --pdb calls it)
    assert drawn(master) == "\x1b[K"  # the line erased, then nothing while the prompt waits
    time.sleep(heartbeat._QUIET_S)
    assert drawn(master) == ""
    pm.hook.pytest_leave_pdb(config=None, pdb=None)
    time.sleep(heartbeat._QUIET_S)
    assert "test_slow" in drawn(master)
