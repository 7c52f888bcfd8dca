"""The test suite on a terminal is never silent for long (issue 28, item 2: the first
`dev.py test` on a fresh clone drew nothing for 115 s). pytest draws a test's letter when the
test ends, so a 30 s system test, or a session fixture that compiles the corpus, left the
screen still. Like cargo-nextest's line of running tests: once a test has run for
_QUIET_S without pytest drawing anything, its name and seconds are drawn after the cursor on
pytest's own line, redrawn every second, and erased before pytest draws again, so what stays
on screen (and in a log) is pytest's output alone. Only on a terminal with pytest's default
fd capture (with `-s` a test's own output goes there), and never where its cursor escapes
would land in a log or fight another writer: with CI set (a CI runner's pseudo-terminal is a
log), live logging (log_cli: pytest's log lines would interleave), pytest-xdist (`-n`: workers
report through the controller), at a debugger's prompt, or while the suite is in the
terminal's background (a shell job after Ctrl-Z and `bg`).

A fixture or test that shows a child's progress on the terminal (a cold compile) does it
inside `live(config)`: the heartbeat stands aside and the progress gets a line of its own."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

_QUIET_S: float = 1.0  # pytest silent this long: the running test is shown (under the 2 s promise)
_TICK_S: float = 0.25  # how often the thread looks; the drawn seconds change once a second
_MIN_ROOM: int = 6  # columns left on pytest's line below which nothing is drawn (" 12 s")
_DIM, _RESET = "\x1b[2m", "\x1b[0m"
_NAME = "iree-stress-heartbeat"


class Heartbeat:
    """Draws `name N s` after pytest's cursor while a test runs silently; pytest's hooks that
    draw erase it first (tryfirst) and restart the quiet time after (trylast)."""

    def __init__(self, reporter: Any, fd: int, color: bool):
        self.reporter = reporter  # pytest's TerminalReporter (its writer knows the line width)
        self.fd = fd  # the terminal itself: fd 1 points into a capture file while a test runs
        self.color = color
        self.lock = threading.Lock()
        self.test: str | None = None  # the running test's name, as drawn
        self.started = 0.0
        self.quiet_since: float | None = None  # None: pytest is drawing or no test runs
        self.drawn = 0  # columns of heartbeat text on screen after the cursor
        self.shown = ""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="test-heartbeat", daemon=True)
        self.thread.start()

    def _write(self, data: str) -> None:
        try:
            os.write(self.fd, data.encode())
        except OSError:  # the terminal went away: nothing to keep alive
            self.stop.set()

    def _erase(self) -> None:
        if self.drawn:
            self._write("\x1b[K")
            self.drawn, self.shown = 0, ""

    def _width(self) -> int:
        """The terminal's own width (pytest's writer says 80 under fd capture, whatever the
        terminal: a line drawn past the edge wraps, and the cursor-left erase cannot undo that)."""
        try:
            return os.get_terminal_size(self.fd).columns
        except OSError:
            return 0

    def _foreground(self) -> bool:
        """The terminal is this process's to draw on: its foreground process group is ours
        (in the background a write would stop the suite with SIGTTOU, or land in the middle of
        what the foreground job draws)."""
        try:
            return os.tcgetpgrp(self.fd) == os.getpgrp()
        except OSError:  # not our controlling terminal: no way to know who draws on it
            return False

    def _text(self, now: float) -> str:
        seconds = f" {now - self.started:.0f} s"
        # (from pytest's column, at most width - 1: the last column is where a terminal wraps)
        room = self._width() - self.reporter._tw.width_of_current_line - 1
        if room < _MIN_ROOM:
            return ""
        name = f"  {self.test}" if self.test else ""
        if len(name) + len(seconds) > room:
            keep = room - len(seconds) - 3
            name = f"  …{self.test[-keep:]}" if keep > 4 and self.test else ""
        return name + seconds if len(name) + len(seconds) <= room else ""

    def _run(self) -> None:
        while not self.stop.wait(_TICK_S):
            with self.lock:
                now = time.monotonic()
                if self.quiet_since is None or now - self.quiet_since < _QUIET_S:
                    continue
                if not self._foreground():
                    continue
                text = self._text(now)
                if not text or text == self.shown:
                    continue
                styled = f"{_DIM}{text}{_RESET}" if self.color else text
                # (the cursor goes back where pytest left it: its next letter lands there;
                #   `room` keeps the text off the last column, where a terminal would wrap)
                self._write(f"{styled}\x1b[K\x1b[{len(text)}D")
                self.drawn, self.shown = len(text), text

    def hold(self) -> None:
        """pytest (or a live block) is about to draw: the heartbeat's text goes first."""
        with self.lock:
            self._erase()
            self.quiet_since = None

    def resume(self) -> None:
        """pytest drew (flushed now, so nothing of it lands after the heartbeat's text)."""
        self.reporter.flush()
        with self.lock:
            if self.test is not None:
                self.quiet_since = time.monotonic()

    def close(self) -> None:
        self.hold()
        self.stop.set()
        self.thread.join()
        os.close(self.fd)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.hold()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self) -> None:
        self.hold()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logfinish(self) -> None:
        self.hold()
        self.test = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_exception_interact(self) -> None:
        self.hold()

    @pytest.hookimpl(tryfirst=True)
    def pytest_enter_pdb(self) -> None:
        self.hold()  # (the debugger's prompt is on the line: nothing drawn over it)

    def pytest_leave_pdb(self) -> None:
        self.resume()

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self) -> None:
        self.hold()
        self.test = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_internalerror(self) -> None:
        self.hold()
        self.test = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self.hold()
        self.test = None


class _After:
    """pytest's hooks that draw, seen after they drew (trylast): the quiet time starts."""

    def __init__(self, beat: Heartbeat):
        self.beat = beat

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        beat = self.beat
        with beat.lock:
            # (the file is at the start of pytest's line; verbose: the whole node id is)
            beat.test = "" if beat.reporter.verbosity > 0 else nodeid.split("::", 1)[-1]
            beat.started = time.monotonic()
        beat.resume()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self) -> None:
        self.beat.resume()


def _stands_aside(config: pytest.Config) -> bool:
    """Runs where the heartbeat must draw nothing at all (see the module's docstring)."""
    return bool(os.environ.get("CI")
                or config.getini("log_cli") or config.getoption("log_cli_level", None)
                or getattr(config.option, "numprocesses", None)
                or hasattr(config, "workerinput"))


def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or config.getoption("capture") != "fd" or _stands_aside(config):
        return
    fd = reporter._tw._file.fileno() if hasattr(reporter._tw._file, "fileno") else -1
    if fd < 0 or not os.isatty(fd) or os.environ.get("TERM") == "dumb":
        return
    beat = Heartbeat(reporter, os.dup(fd), reporter.hasmarkup)
    config.pluginmanager.register(beat, _NAME)
    config.pluginmanager.register(_After(beat), _NAME + "-after")
    config.add_cleanup(beat.close)


class LiveStream:
    """stderr for a live block: the first write (or `own_line()`) ends pytest's line, so a
    line redrawn from column 0 never overwrites pytest's, and a block that draws nothing
    (a warm cache) leaves pytest's line as it was."""

    def __init__(self, reporter: Any):
        self.reporter = reporter
        self.started = False

    def own_line(self) -> None:
        if not self.started:
            self.started = True
            tw = self.reporter._tw if self.reporter is not None else None
            if tw is not None and tw.width_of_current_line:
                tw.line()  # (through pytest's writer: it knows its line starts afresh)
                self.reporter.flush()

    def write(self, text: str) -> int:
        self.own_line()
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


@contextmanager
def live(config: pytest.Config) -> Iterator[LiveStream]:
    """A block that draws progress on the terminal past pytest's capture: a Status given the
    stream it yields, or a child whose stderr is inherited (call `own_line()` first). The
    heartbeat stands aside meanwhile."""
    beat = config.pluginmanager.get_plugin(_NAME)
    capture = config.pluginmanager.get_plugin("capturemanager")
    if beat is not None:
        beat.hold()
    try:
        with capture.global_and_fixture_disabled():
            yield LiveStream(config.pluginmanager.get_plugin("terminalreporter"))
    finally:
        if beat is not None:
            beat.resume()
