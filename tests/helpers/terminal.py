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
    raw: bytes = b""  # every byte drawn, escapes included (`screen` replays them)

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
    raw = bytearray()
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
                raw += data
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
    return Drawn(events, rc, time.monotonic() - start, bytes(raw))


_CONTROL = re.compile(r"\x1b\[([0-9;]*)([A-Za-z])|\x1b\][^\x07]*\x07|\x1b[78]|[\r\n\b]")


def screen(raw: bytes) -> list[str]:
    """The lines left on screen once `raw` is drawn: enough of a terminal for what pytest and
    iree-stress draw (carriage return, backspace, erase to the end of the line, cursor back,
    colours and OSC sequences ignored; no wrapping)."""
    lines, row, col = [""], 0, 0
    text = raw.decode(errors="replace")
    pos = 0
    for m in [*_CONTROL.finditer(text), None]:
        chunk = text[pos:m.start() if m else len(text)]
        if chunk:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + chunk + line[col + len(chunk):]
            col += len(chunk)
        if m is None:
            break
        pos = m.end()
        code = m.group(0)
        if code == "\n":
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        elif code == "\r":
            col = 0
        elif code == "\b":
            col = max(0, col - 1)
        elif m.group(2) == "K":
            lines[row] = lines[row][:col]
        elif m.group(2) == "D":
            col = max(0, col - int(m.group(1) or 1))
    return [line.rstrip() for line in lines]
