"""README's quick start on a fresh clone, as a user runs it on a terminal: how soon each
command prints something, and the longest silence after that (issue 28, item 2: the first
`dev.py soak` was silent for ~90 s while pip installed, a cold compile for 52 s).

    python bench/quickstart_latency.py [--test-seconds 90] [--out FILE]

Clones this checkout's HEAD into a temporary folder (no .venv there), then runs, each under a
pseudo-terminal (so iree-stress and dev.py draw their live lines as on a terminal):
  1. `python3 dev.py soak`: creates .venv (pip install from the package index), compiles the
     corpus into an empty artifact cache (XDG_CACHE_HOME points into the clone), soaks 20 s;
  2. `python3 dev.py test`: the suite, cut after --test-seconds (its first output is what is
     measured; the whole suite takes minutes).
Output (a row per command, then each command's output events with their times) names the
commit and the command line. Times are wall clock on whatever machine runs it: say in the
output whether it was shared.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_READ_WAKE_S: float = 0.2
_CUT_GRACE_S: float = 30.0  # a command cut by SIGINT may print its report this long
_KEEP_EVERY_S: float = 3.0  # output events listed at most this often (after the first 5 s)


def _as_foreground_job() -> None:
    """In the child, after its setsid: as a shell's foreground job on a terminal. Ctrl-C as on
    a terminal (a shell starts background jobs, this script under `&`, with SIGINT ignored, and
    an interpreter that starts so never raises KeyboardInterrupt), and the pseudo-terminal its
    controlling terminal (os.tcgetpgrp on it is the child's group: the test suite's heartbeat
    draws only for the foreground job, and drew nothing here before this)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def run_on_terminal(argv: list[str], cwd: Path, env: dict[str, str],
                    limit_s: float | None) -> tuple[list[tuple[float, str]], int | None, float]:
    """(output events: (seconds since start, the text drawn), exit code or None when cut at
    limit_s, total seconds). An event is one read from the terminal: a redraw or new lines."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))  # as a
    #   terminal emulator sizes its terminal (COLUMNS says 160 too)
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, preexec_fn=_as_foreground_job)
    os.close(slave)
    events: list[tuple[float, str]] = []
    raw = bytearray()  # everything drawn (RAW_DIR: to read a failure afterwards)
    cut: float | None = None
    while True:
        ready, _, _ = select.select([master], [], [], _READ_WAKE_S)
        now = time.monotonic() - start
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child side closed
                data = b""
            if not data and proc.poll() is not None:
                break
            if data:
                raw += data
                text = _ANSI.sub("", data.decode(errors="replace"))
                shown = [x.strip() for x in re.split(r"[\r\n]", text) if x.strip()]
                events.append((now, shown[-1] if shown else ""))
        elif proc.poll() is not None:
            break
        if limit_s is not None and now > limit_s and cut is None:
            os.killpg(proc.pid, signal.SIGINT)  # (its last words are still read, kept)
            cut = now
        if cut is not None and time.monotonic() - start > cut + _CUT_GRACE_S:
            os.killpg(proc.pid, signal.SIGKILL)
    os.close(master)
    _keep(argv, raw)
    rc = proc.wait()
    return events, None if cut is not None else rc, cut or time.monotonic() - start


def _keep(argv: list[str], raw: bytes) -> None:
    folder = os.environ.get("QUICKSTART_RAW_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{'_'.join(argv[1:])}.out").write_bytes(raw)


def longest_silence(events: list[tuple[float, str]], total: float) -> tuple[float, float]:
    """(longest gap between two output events or the last one and the end, when it began)."""
    times = [t for t, _ in events] + [total]
    gaps = [(b - a, a) for a, b in zip(times, times[1:], strict=False)]
    return max(gaps) if gaps else (total, 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test-seconds", type=float, default=90.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--shared", default="yes", help="say whether the machine was shared")
    args = ap.parse_args()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="quickstart-"))
    clone = work / "iree-stress"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("IREE_STRESS", "VIRTUAL_ENV", "PYTHON"))}
    env.update(XDG_CACHE_HOME=str(work / "cache"), TERM="xterm", COLUMNS="160")
    lines = [f"# python bench/quickstart_latency.py --test-seconds {args.test_seconds:g}  "
             f"(commit {commit}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
             f"machine shared: {args.shared})",
             f"# fresh clone of {commit}, no .venv; artifact cache empty "
             "(XDG_CACHE_HOME in the clone); each command under a pseudo-terminal", ""]
    table = ["| command | first output | longest silence after it | exit | wall |",
             "|---|---|---|---|---|"]
    details: list[str] = []
    for argv, limit in ((["python3", "dev.py", "soak"], None),
                        (["python3", "dev.py", "test"], args.test_seconds)):
        events, rc, total = run_on_terminal(argv, clone, env, limit)
        first = events[0][0] if events else total
        after = [e for e in events if e[0] >= first]
        gap, at = longest_silence(after, total)
        name = " ".join(argv)
        ended = f"cut at {limit:g} s" if rc is None or limit is not None and total > limit \
            else str(rc)
        table.append(f"| `{name}` | {first:.2f} s | {gap:.1f} s (from {at:.1f} s) | "
                     f"{ended} | {total:.0f} s |")
        details += ["", f"## {name}: output events (seconds since start, what was drawn)"]
        last, kept = "", -1e9
        for i, (t, text) in enumerate(events):  # (a redrawn line: one every _KEEP_EVERY_S)
            if text and text != last and (t < 5 or t - kept >= _KEEP_EVERY_S
                                          or i == len(events) - 1):
                details.append(f"{t:8.2f}  {text[:150]}")
                last, kept = text, t
    lines += table + details
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
