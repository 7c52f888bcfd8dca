"""What a long step says while it runs, on stderr: one redrawn line on a terminal, plain lines
at most every _PLAIN_PERIOD_S in a CI log (stderr not a terminal, or TERM=dumb), nothing when
quiet. Colour only on a terminal, never with NO_COLOR set (https://no-color.org).

Every stage may use it (like vocab): it imports nothing of this package."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

_TTY_PERIOD_S: float = 0.5  # a redrawn line: twice a second reads as live without flicker
_PLAIN_PERIOD_S: float = 10.0  # one line per 10 s keeps a CI log readable
_WIDTH: int = 160  # a redrawn line is cut here (a wider line wraps and cannot be redrawn)
_RED, _RESET = "\033[31m", "\033[0m"
_live: list[Status] = []  # the terminal line drawn now (an error erases it first)


def is_terminal(stream: TextIO) -> bool:
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
    return tty and os.environ.get("TERM") != "dumb"


def color_enabled(stream: TextIO) -> bool:
    """Colour on a terminal unless NO_COLOR is set (to anything but the empty string)."""
    return is_terminal(stream) and not os.environ.get("NO_COLOR")


def red(text: str, stream: TextIO | None = None) -> str:
    return f"{_RED}{text}{_RESET}" if color_enabled(stream or sys.stderr) else text


def eta(done: int, total: int, elapsed_s: float) -> str:
    """`~40 s left` from the rate so far ('' until one item is done)."""
    if done <= 0 or total <= done or elapsed_s <= 0:
        return ""
    left = elapsed_s / done * (total - done)
    return f"~{duration_text(left)} left"


def duration_text(seconds: float) -> str:
    """`9 s`, `4 min 10 s`, `2 h 5 min`."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def erase_live() -> None:
    """Before an error line: the live line goes, so that the error is all the screen says."""
    for status in list(_live):
        status.erase()


class Status:
    """One live status line. `update` shows the newest state (rate-limited: a terminal redraws
    at most every _TTY_PERIOD_S, a log gets a line at most every _PLAIN_PERIOD_S, the first
    update at once); `say` prints a line that stays; `done` leaves the last state on screen."""

    def __init__(self, enabled: bool = True, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = is_terminal(self.stream)
        self.clock = clock
        self.last = -1e9
        self.shown = ""  # what the redrawn line shows now ('' when none is drawn)
        self.pending = ""  # the newest state not printed yet (a log line held back)

    @property
    def period(self) -> float:
        return _TTY_PERIOD_S if self.tty else _PLAIN_PERIOD_S

    def due(self) -> bool:
        return self.enabled and self.clock() - self.last >= self.period

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        self.pending = text
        if not force and self.clock() - self.last < self.period:
            return
        self.last = self.clock()
        self._draw(text)

    def _draw(self, text: str) -> None:
        if self.tty:
            line = text[:_WIDTH]
            self.stream.write("\r" + line.ljust(len(self.shown)))
            self.shown = line
            if self not in _live:
                _live.append(self)
        else:
            self.stream.write(text + "\n")
        self.pending = ""
        self.stream.flush()

    @contextmanager
    def ticking(self, text: str) -> Iterator[None]:
        """`text, N s` while the block runs, redrawn every period from a thread: a step that
        waits on something else (a driver probe in another interpreter) says it is alive
        instead of a still line. The block must not draw on this Status meanwhile."""
        if not self.enabled:
            yield
            return
        started = self.clock()
        stop = threading.Event()

        def line() -> str:
            return f"{text}, {duration_text(self.clock() - started)}"

        def tick() -> None:
            while not stop.wait(min(self.period, _TTY_PERIOD_S)):
                self.update(line())

        self.update(line(), force=True)  # a new phase: said at once, in a CI log too
        ticker = threading.Thread(target=tick, name="status-ticker", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()

    def say(self, text: str) -> None:
        """A line that stays (a failure, a phase's end), above the live line."""
        if not self.enabled:
            return
        self.erase()
        self.stream.write(text + "\n")
        self.stream.flush()

    def erase(self) -> None:
        """Takes the redrawn line off the terminal (what was said before it stays)."""
        if self.tty and self.shown:
            self.stream.write("\r" + " " * len(self.shown) + "\r")
            self.stream.flush()
            self.shown = ""
        if self in _live:
            _live.remove(self)

    def done(self, text: str | None = None) -> None:
        """Ends the live line: `text` (or the last state held back) stays on screen."""
        if not self.enabled:
            return
        final = text if text is not None else self.pending
        if self.tty:
            if final:
                self._draw(final)
            if self.shown:
                self.stream.write("\n")
            self.shown = ""
            if self in _live:
                _live.remove(self)
        elif final:
            self._draw(final)
        self.stream.flush()
        self.pending = ""
        self.last = -1e9


class Log(Status):
    """A Status that is also the `log(line)` callable of the verdict commands (compare,
    bisect): their lines stay, and a long step (a stack's install) draws its live line on
    it. Disabled (-q, --json): silent."""

    def __call__(self, line: str) -> None:
        self.say(line)
