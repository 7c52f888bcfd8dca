"""A command under a pseudo-terminal, as a user sees it: what it drew and when (issue 28 item
2: a cold compile was silent for 52 s; the first `dev.py soak` for ~90 s)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
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


def _child_setup() -> None:
    """In the child, after its setsid: the pseudo-terminal becomes its controlling terminal
    (a shell's foreground job: os.tcgetpgrp on it is the child's group), Ctrl-C as usual."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def run_on_terminal(argv: list[str], env: dict[str, str], cwd: Path,
                    timeout: float = 300.0, columns: int = 160,
                    columns_env: bool = True) -> Drawn:
    """`argv` on a fresh pseudo-terminal `columns` wide (its size as a terminal emulator sets
    it). `columns_env`: COLUMNS says the width too (as most shells export it); False: COLUMNS
    is unset, so the terminal's own size is all a program can go by."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    full_env = {k: v for k, v in env.items() if k != "COLUMNS"}
    full_env["TERM"] = "xterm"
    if columns_env:
        full_env["COLUMNS"] = str(columns)
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=full_env,
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=_child_setup)
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


def screen(raw: bytes, width: int | None = None) -> list[str]:
    """The lines left on screen once `raw` is drawn: enough of a terminal for what pytest and
    iree-stress draw (carriage return, backspace, erase to the end of the line, cursor back,
    colours and OSC sequences ignored). `width`: a terminal that wide, which wraps as xterm
    does (a character written past the last column goes to the next line, and cursor-left
    never goes back up); None: no wrapping."""
    lines, row, col = [""], 0, 0
    text = raw.decode(errors="replace")
    pos = 0
    for m in [*_CONTROL.finditer(text), None]:
        chunk = text[pos:m.start() if m else len(text)]
        while chunk:
            if width is not None and col >= width:  # (xterm's pending wrap, taken)
                row, col = row + 1, 0
                if row == len(lines):
                    lines.append("")
            part = chunk if width is None else chunk[:width - col]
            line = lines[row].ljust(col)
            lines[row] = line[:col] + part + line[col + len(part):]
            col += len(part)
            chunk = chunk[len(part):]
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
            col = max(0, min(col, width - 1 if width else col) - int(m.group(1) or 1))
    return [line.rstrip() for line in lines]
