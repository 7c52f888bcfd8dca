from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import heartbeat

REPO = Path(__file__).resolve().parents[1]
# Shared by every test (and kept between local runs): compiling the corpus takes ~30 s per
# target on 2 cores; a warm cache makes the second run of the suite fast.
TEST_CACHE = Path(os.environ.get("IREE_STRESS_TEST_CACHE", REPO / ".cache" / "test-artifacts"))


@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
            cwd: Path | None = None, prefix: tuple[str, ...] = (),
            stderr_shown: bool = False) -> CliResult:
    """`python -m stress ARGS` as a user runs it (`prefix`: a wrapper that execs it, such as
    `sh -c 'ulimit -c 0 && exec "$@"' sh`). `stderr_shown`: its stderr (progress) goes where
    this process's goes instead of being captured (`stderr` is then empty)."""
    # this checkout's `stress` first: from another cwd, `-m stress` would import the package
    #   the venv has installed (the main checkout's, in a worktree)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, "IREE_STRESS_CACHE": str(TEST_CACHE), "PYTHONPATH": path,
                **(env or {})}
    proc = subprocess.run([*prefix, sys.executable, "-m", "stress", *args],
                          stdout=subprocess.PIPE, stderr=None if stderr_shown else subprocess.PIPE,
                          text=True, timeout=timeout, env=full_env, cwd=cwd or REPO)
    return CliResult(proc.returncode, proc.stdout, proc.stderr or "")


@pytest.hookimpl(trylast=True)  # (after pytest's terminal reporter is made)
def pytest_configure(config: pytest.Config) -> None:
    heartbeat.pytest_configure(config)  # a long test on a terminal: its name and seconds


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The test (and every process it starts) runs under umask 022, whatever the runner's:
    a file-mode test under 077 would find nothing readable by others expected, and pass
    whatever the modes (tests/helpers/files.py)."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    TEST_CACHE.mkdir(parents=True, exist_ok=True)
    return TEST_CACHE


@pytest.fixture(scope="session")
def cpu_artifacts(cache_dir: Path, pytestconfig: pytest.Config) -> dict[str, Path]:
    """Every corpus program compiled for cpu (once per session, cached across sessions). A
    cold compile takes minutes: its progress line goes to the terminal, past pytest's capture
    (the first `dev.py test` on a fresh clone was otherwise a minute of silence)."""
    from stress.programs import corpus, targets
    from stress.programs.cache import ArtifactCache
    from stress.ui import Status

    with heartbeat.live(pytestconfig) as stream:
        report = ArtifactCache(cache_dir).compile_all(
            list(corpus.corpus()), targets.parse("cpu"), jobs=2,
            status=Status(True, stream=stream))
    assert not report.errors, [e.describe() for e in report.errors]
    return {name: a.path for name, a in report.artifacts.items()}


@pytest.fixture(scope="session")
def two_faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/native/twofaults.c built: `twofaults N` segfaults in fault_reading (N even) or
    fault_writing (N odd), with symbols."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the two-fault program")
    exe = tmp_path_factory.mktemp("native") / "twofaults"
    subprocess.run([cc, "-O1", "-g", "-o", str(exe),
                    str(REPO / "tests" / "native" / "twofaults.c")],
                   check=True, capture_output=True)
    return exe


@pytest.fixture(scope="session")
def fault_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/native/libfault.c built as an LD_PRELOAD library (`libfault.so.1`; a byte-identical
    `libfault.so.2` beside it for version-suffix tests). See the C file for its environment."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fault library")
    out = tmp_path_factory.mktemp("native")
    lib = out / "libfault.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-g", "-o", str(lib),
                    str(REPO / "tests" / "native" / "libfault.c"), "-ldl", "-lpthread"],
                   check=True, capture_output=True)
    shutil.copy(lib, out / "libfault.so.2")
    return lib
