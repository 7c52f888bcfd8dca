"""SIGINT, SIGTERM and SIGHUP during a soak: noted by flag, acted on by the session's loop
(never raised from an arbitrary line)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM,
                                         signal.SIGHUP)  # SIGHUP: the terminal or ssh session
#   went away; the run ends as interrupted


class Interrupts:
    """The first signal's name (`first`) and how many came (`count`)."""

    def __init__(self) -> None:
        self.first: str | None = None
        self.count = 0

    def note(self, signum: int, frame: object) -> None:
        """A signal came: noted. A second one while we shut down only shortens nothing: the
        kill loop is already bounded."""
        self.count += 1
        if self.first is None:
            self.first = signal.Signals(signum).name

    @contextmanager
    def handled(self) -> Iterator[None]:
        """The signals handled by flag for as long as the caller needs (the run, then its
        summary): a second Ctrl-C while we shut down or write the summary is noted, never a
        traceback."""
        previous = {s: signal.getsignal(s) for s in _SIGNALS}
        for s in previous:
            signal.signal(s, self.note)
        try:
            yield
        finally:
            if self.first is None:  # interrupted: the process is on its way out (exit 3), and
                #   a further Ctrl-C while the CLI prints must not be a traceback
                for s, handler in previous.items():
                    signal.signal(s, handler)
