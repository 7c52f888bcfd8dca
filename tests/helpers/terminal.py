"""A command under a pseudo-terminal, as a user sees it: what it drew and when (issue 28 item
2: a cold compile was silent for 52 s; the first `dev.py soak` for ~90 s)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_READ_WAKE_S: float = 0.1  # how often the reader looks; finer than any period it measures


@dataclass
class Drawn:
    """What a command drew on its terminal: (seconds since its start, the text drawn last in
    that read) per read, its exit code and how long it ran."""

    events: list[tuple[float, str]]
    rc: int
    total_s: float

    @property
    def first_s(self) -> float:
        return self.events[0][0] if self.events else self.total_s

    def longest_silence(self, until: float | None = None) -> tuple[float, float]:
        """(the longest time nothing was drawn, when it began), from the first output to
        `until` (default: the end)."""
        end = self.total_s if until is None else until
        times = [t for t, _ in self.events if t <= end] + [end]
        gaps = [(b - a, a) for a, b in zip(times, times[1:], strict=False)]
        return max(gaps) if gaps else (end, 0.0)

    def texts(self) -> list[str]:
        return [text for _, text in self.events]


def run_on_terminal(argv: list[str], env: dict[str, str], cwd: Path,
                    timeout: float = 300.0) -> Drawn:
    master, slave = pty.openpty()
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env={**env, "TERM": "xterm", "COLUMNS": "160"},
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(slave)
    events: list[tuple[float, str]] = []
    try:
        while time.monotonic() - start < timeout:
            ready, _, _ = select.select([master], [], [], _READ_WAKE_S)
            now = time.monotonic() - start
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child side closed
                    data = b""
                if not data and proc.poll() is not None:
                    break
                text = _ANSI.sub("", data.decode(errors="replace"))
                shown = [x.strip() for x in re.split(r"[\r\n]", text) if x.strip()]
                if shown:
                    events.append((now, shown[-1]))
            elif proc.poll() is not None:
                break
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    finally:
        os.close(master)
    rc = proc.wait()
    return Drawn(events, rc, time.monotonic() - start)
