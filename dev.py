#!/usr/bin/env python3
"""Bootstrap + entry point for the README's two commands. Needs only Python >= 3.10 and pip.

    python3 dev.py soak [ARGS...]   a short soak (20 s) on the embedded cpu default
    python3 dev.py test [ARGS...]   the test suite (fast + system tests; not the slow ones)
    python3 dev.py lint             ruff + mypy
    python3 dev.py bench NAME       a benchmark script under bench/
    python3 dev.py fakehip          build the stand-in libamdhip64.so for tests and print its
                                    path (tests/native/fakehip.c: IREE's real hip driver runs
                                    on it; kernels are counted, never run)

On first use it creates .venv and installs the package with its dev extras; later runs reuse
it (re-installing when pyproject.toml changes).
"""

from __future__ import annotations

import hashlib
import os
import select
import shlex
import subprocess
import sys
import threading
import time
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".iree-stress-installed"
_PIP_TAIL = 12  # lines of pip's output shown when it fails
_TICK_S = 0.5  # the install line's elapsed time moves this often, pip silent or not


def _status() -> Any:
    """stress.ui.Status (it imports nothing, so it works before .venv exists)."""
    sys.path.insert(0, str(ROOT))
    from stress.ui import Status

    return Status(True)


def ensure_env() -> None:
    """.venv with the package installed, said at once and shown as it goes (the first
    install downloads the compiler and runtime wheels: a minute or two of silence
    otherwise)."""
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == want:
        return
    status = _status()
    started = time.monotonic()
    first = not (BIN / "python").exists()
    status.say("dev.py: " + ("first use: creating .venv, then installing iree-stress with its "
                             "dependencies (downloads the IREE compiler and runtime wheels; a "
                             "minute or two)" if first else
                             "pyproject.toml changed: reinstalling iree-stress into .venv"))
    if first:  # (python -m venv with its pip: ~25 s on a busy machine, silent)
        maker = threading.Thread(target=venv.EnvBuilder(with_pip=True).create, args=(VENV,))
        maker.start()
        while maker.is_alive():
            status.update(f"dev.py: creating .venv (with pip), "
                          f"{time.monotonic() - started:.0f} s")
            maker.join(_TICK_S)
        if not (BIN / "python").exists():
            status.done()
            print("dev.py: creating .venv failed (python3 -m venv: is the venv module "
                  "installed? on Debian: apt install python3-venv)", file=sys.stderr)
            sys.exit(1)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check",
           "--progress-bar", "off", "-e", f"{ROOT}[dev]"]
    proc = subprocess.Popen(pip, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    tail: list[str] = []
    steps, current, pending = 0, "starting pip", b""
    while True:  # (woken every _TICK_S: pip is silent for long while it unpacks big wheels)
        ready, _, _ = select.select([proc.stdout], [], [], _TICK_S)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                text = raw.decode(errors="replace").strip()
                if text:
                    tail = (tail + [text])[-_PIP_TAIL:]
                    steps += text.startswith(("Collecting ", "Downloading ", "Using cached ",
                                              "Building ", "Processing "))
                    current = text[:90]
        status.update(f"dev.py: installing into .venv, {time.monotonic() - started:.0f} s, "
                      f"{steps} package step(s): {current}")
    if proc.wait() != 0:
        status.done()
        print("dev.py: pip install failed:\n  " + "\n  ".join(tail), file=sys.stderr)
        sys.exit(proc.returncode)
    STAMP.write_text(want)
    status.done(f"dev.py: .venv ready in {time.monotonic() - started:.0f} s")


def run(argv: list[str]) -> int:
    """Runs `argv` in the checkout, said first (the command's own output follows)."""
    os.chdir(ROOT)
    shown = [Path(a).name if a.startswith(str(BIN)) else a for a in argv]
    print(f"dev.py: {shlex.join(shown)}", file=sys.stderr, flush=True)
    child = subprocess.Popen(argv)
    while True:  # Ctrl-C reaches the command from the terminal: its answer is dev.py's
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue


def fakehip() -> int:
    """Builds the stand-in HIP library (reused when its source did not change) and prints its
    path, with the variable that makes IREE's hip driver load it."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.fakehip import ENV_DYLIB, NoCompiler, build, dylib_env

    try:
        lib = build()
    except NoCompiler as exc:
        print(f"dev.py: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"dev.py: building the stand-in failed:\n{exc.stderr.decode(errors='replace')}",
              file=sys.stderr)
        return 1
    print(f"dev.py: stand-in HIP library (kernels not run); use it with "
          f"--env {ENV_DYLIB}={dylib_env(lib)}", file=sys.stderr)
    print(lib)
    return 0


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) >= 2 else 2
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "fakehip":  # (a C compiler only: no .venv needed)
        return fakehip()
    ensure_env()
    py = str(BIN / "python")
    if cmd == "soak":
        has_len = any(a.startswith(("--duration", "-d", "--invocations", "-n")) for a in rest)
        return run([str(BIN / "iree-stress"), "soak", "--target", "cpu",
                    *([] if has_len else ["--duration", "20s"]), *rest])
    if cmd == "test":
        marker = [] if any(a.startswith("-m") for a in rest) else ["-m", "not slow"]
        return run([py, "-m", "pytest", *marker, *rest])
    if cmd == "lint":
        rc = run([py, "-m", "ruff", "check", "stress", "tests", "bench", "repro", "dev.py"])
        return rc or run([py, "-m", "mypy"])
    if cmd == "bench":
        return run([py, str(ROOT / "bench" / f"{rest[0]}.py"), *rest[1:]])
    print(f"dev.py: unknown command {cmd!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
