#!/usr/bin/env python3
"""Bootstrap + entry point for the README's two commands. Needs only Python >= 3.10 and pip.

    python3 dev.py soak [ARGS...]   a short soak (20 s) on the embedded cpu default
    python3 dev.py test [ARGS...]   the test suite (fast + system tests; not the slow ones)
    python3 dev.py lint             ruff + mypy
    python3 dev.py bench NAME       a benchmark script under bench/

On first use it creates .venv and installs the package with its dev extras; later runs reuse
it (re-installing when pyproject.toml changes).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".iree-stress-installed"


def ensure_env() -> None:
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == want:
        return
    if not (BIN / "python").exists():
        print("dev.py: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    print("dev.py: installing iree-stress and its dependencies into .venv", file=sys.stderr)
    subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(want)


def run(argv: list[str]) -> int:
    os.chdir(ROOT)
    return subprocess.call(argv)


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) >= 2 else 2
    cmd, rest = sys.argv[1], sys.argv[2:]
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
