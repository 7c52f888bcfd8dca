"""`pip install .` (not editable), then the tool from another directory: the way a CI job
installs it (issue 8: the corpus templates were not package data, so `programs` died with
FileNotFoundError on site-packages/mlir/elementwise.mlir.in)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from stress.programs import corpus
from tests.conftest import REPO, TEST_CACHE

pytestmark = pytest.mark.system

# Not part of a source tree a user would install: environments, caches, build leftovers, runs.
_NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", ".cache", "results", "build", "*.egg-info",
                                     "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache")
_INSTALL_TIMEOUT_S: float = 300  # a wheel build plus an isolated build env; ~5 s when pip is warm
_RUN_TIMEOUT_S: float = 300  # a cold compile of the soak's few programs plus the 5 s soak


def _deps_path() -> str:
    """The dependencies (numpy, iree, click...) of the interpreter running the tests, without
    the checkout: .pth files, the editable install's among them, are not read from PYTHONPATH."""
    paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    return os.pathsep.join(paths)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(bin dir, environment) of a fresh venv holding a wheel build of this checkout."""
    root = tmp_path_factory.mktemp("install")
    src = root / "src"  # a copy: the build writes build/ and *.egg-info into its source tree
    shutil.copytree(REPO, src, ignore=_NOT_SOURCE, symlinks=True)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--no-deps", "--no-input", "--disable-pip-version-check", str(src)],
        capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = _deps_path()
    # iree-compile comes with the dependencies; found on PATH, after the fresh venv's own bin
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", ""),
                                   str(Path(sys.executable).parent)])
    env["IREE_STRESS_CACHE"] = str(TEST_CACHE)  # shared with the suite: warm after one run
    return venv / "bin", env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=_RUN_TIMEOUT_S)


def test_the_installed_package_not_the_checkout_is_what_runs(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    proc = _run([str(bin_dir / "python"), "-c",
                 "import stress, stress.programs.corpus as c; print(stress.__file__); "
                 "print(c.MLIR_DIR)"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    module, mlir_dir = (Path(line) for line in proc.stdout.split())
    venv = bin_dir.parent
    assert module.is_relative_to(venv) and not module.is_relative_to(REPO)
    assert mlir_dir.is_relative_to(venv) and (mlir_dir / "elementwise.mlir.in").is_file()
    assert {p.name for p in (mlir_dir / "examples").iterdir()} == {
        p.name for p in corpus.EXAMPLES_DIR.iterdir()}


def test_every_data_file_of_the_package_is_installed(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    proc = _run([str(bin_dir / "python"), "-c", "import stress; print(stress.__file__)"],
                env, tmp_path)
    site_stress = Path(proc.stdout.strip()).parent
    source = REPO / "stress"
    data = [p.relative_to(source) for p in source.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert data  # the corpus templates at least
    assert [p for p in data if not (site_stress / p).is_file()] == []


def test_installed_programs_lists_the_whole_corpus_from_another_directory(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    proc = _run([str(bin_dir / "iree-stress"), "programs", "--json"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = [json.loads(line)["name"] for line in proc.stdout.splitlines()]
    assert names == [p.name for p in corpus.corpus()]
    assert len(names) == 108  # the corpus size README.md states (105 pointwise, 3 transfer)


def test_an_installed_5s_cpu_soak_passes_from_another_directory(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    run_dir = tmp_path / "run"
    proc = _run([str(bin_dir / "iree-stress"), "soak", "--target", "cpu", "--duration", "5s",
                 "--programs", "unary.abs.f32.*,binary.add.f32.*", "--json", "-q",
                 "--results", str(run_dir)], env, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["invocations"] > 0 and not summary["failed"]
    assert (run_dir / "summary.json").is_file() and (run_dir / "stress.db").is_file()
    assert not (tmp_path / "mlir").exists()  # nothing expected in, or left in, the cwd
