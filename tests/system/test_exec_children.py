"""An exec job's command is a test runner (pytest), and the process that crashes is one that a
test started: a compiler-like helper (tests/native/compilerlike.c) run through iree.compiler
and through subprocess, as IREE's and fusilli's tests run iree-compile (issue 27 item 5).
The job is a crash led by the helper's own native frame, one signature whichever test ran it,
and its core is read from the run folder, never left in the user's; a test that fails by an
assertion is `failed`, not a crash."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stress.engine.postmortem import read_core_notes
from tests.conftest import REPO, run_cli
from tests.helpers.files import unreadable

pytestmark = pytest.mark.system

_TESTS = '''
import os, subprocess
import iree.compiler as ic

JOB = int(os.environ["IREE_STRESS_JOB"])  # even jobs: the first test's compile crashes


def test_conv_compiles(monkeypatch):
    if JOB % 2 == 0:
        monkeypatch.setenv("HELPER_CRASH", "1")  # iree-compile (the helper) segfaults
    ic.compile_str("func.func @conv() { return }", target_backends=["llvm-cpu"])


def test_matmul_compiles():
    subprocess.run([os.environ["COMPILERLIKE"], "crash" if JOB % 2 else "matmul.mlir"],
                   check=True)


def test_passes():
    pass
'''

_PLAIN = '''
def test_result_is_right():
    assert 2 + 2 == 5


def test_passes():
    pass
'''


@pytest.fixture(scope="module")
def compilerlike(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/native/compilerlike.c built, and installed as `iree-compile` in a tools folder
    (IREE_TOOL_PATH) beside it (skips the test without a C compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("compilerlike")
    subprocess.run([cc, "-O0", "-g", "-o", str(out / "compilerlike"),
                    str(REPO / "tests" / "native" / "compilerlike.c")], check=True)
    (out / "tools").mkdir()
    shutil.copy(out / "compilerlike", out / "tools" / "iree-compile")
    return out / "compilerlike"


def cores_under(folder: Path) -> list[Path]:
    """Every ELF core file under `folder`."""
    return [p for p in folder.rglob("*") if p.is_file() and read_core_notes(p) is not None]


def soak_pytest(tmp_path: Path, test_file: str, jobs: int, env: dict[str, str],
                wrap: tuple[str, ...] = ()) -> tuple[Path, Path, dict[str, object]]:
    """`soak --engine exec -- python -m pytest -q FILE` started in tmp_path/proj (the user's
    folder, where the tests and their processes run), under `wrap` (run_cli's prefix);
    (proj, run folder, summary)."""
    proj, run = tmp_path / "proj", tmp_path / "run"
    proj.mkdir()
    (proj / "test_models.py").write_text(test_file)
    res = run_cli("soak", "--engine", "exec", "-n", str(jobs), "--timeout", "60s",
                  "--json", "-q", "--results", str(run),
                  *[f"--env={k}={v}" for k, v in env.items()],
                  "--", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  "test_models.py", timeout=400, cwd=proj, prefix=wrap)
    assert res.rc == 1, res.stdout[-2000:] + res.stderr[-3000:]
    return proj, run, json.loads(res.stdout)


def failure_rows(run: Path) -> list[sqlite3.Row]:
    db = sqlite3.connect(run / "stress.db")
    db.row_factory = sqlite3.Row
    return list(db.execute("SELECT * FROM failures ORDER BY job_index"))


def test_a_compiler_crash_inside_a_pytest_job_is_one_crash_led_by_the_compiler_s_frame(
        tmp_path: Path, compilerlike: Path) -> None:
    proj, run, summary = soak_pytest(tmp_path, _TESTS, 4, {
        "IREE_TOOL_PATH": str(compilerlike.parent / "tools"),
        "COMPILERLIKE": str(compilerlike)})
    rows = failure_rows(run)
    assert len(rows) == 4  # every job ran one crashing compile
    failed_tests = set()
    for row in rows:
        ev = json.loads(row["evidence"])
        assert row["class"] == "crash" and row["signal"] == "SIGSEGV", dict(row)
        assert row["last_step"] == "run"
        assert ev["child_crash"]["source"] == "core", ev
        assert ev["stack_source"] == "core+gdb" and \
            ev["crash_frames"][0] == "helper_crash_in_compile", ev
        assert "exited with status 1; its child" in row["message"]
        failed_tests.update(ev["tests"]["failed"])
        stacks = (Path(row["artifacts"]) / "stacks.txt").read_text()
        # read by gdb from the run folder, where it was moved: RUN/cores/children/core.PID
        assert f"core.{ev['child_crash']['pid']})" in stacks
    # the two tests that ran the compiler (through iree.compiler, through subprocess) both
    #   failed, in different jobs
    assert failed_tests == {"test_models.py::test_conv_compiles",
                            "test_models.py::test_matmul_compiles"}
    sigs = summary["signatures"]  # type: ignore[index]
    assert len(sigs) == 1, [s["key"] for s in sigs]
    assert sigs[0]["key"].startswith("crash|SIGSEGV|run||helper_crash_in_compile < "
                                     "helper_compile"), sigs[0]["key"]
    assert summary["failures"] == {  # type: ignore[index]
        "crash": 4, "hang": 0, "teardown_hang": 0, "error": 0, "miscompare": 0, "failed": 0}
    assert cores_under(proj) == []  # the user's folder keeps no core
    assert cores_under(run) == []  # each was read, then deleted


def test_without_cores_a_compiler_crash_is_found_from_the_kernel_log_or_the_output(
        tmp_path: Path, compilerlike: Path) -> None:
    tools = compilerlike.parent / "tools"
    # no core can be written (hard limit 0, as where `ulimit -c 0` is the rule): the kernel's
    #   segfault line (where it can be read) or what iree.compiler and subprocess printed
    proj, run, summary = soak_pytest(tmp_path, _TESTS, 2, {
        "IREE_TOOL_PATH": str(tools), "COMPILERLIKE": str(tools / "iree-compile")},
        wrap=("sh", "-c", 'ulimit -c 0 && exec "$@"', "sh"))
    rows = failure_rows(run)
    assert len(rows) == 2
    for row in rows:
        ev = json.loads(row["evidence"])
        assert (row["class"], row["signal"]) == ("crash", "SIGSEGV"), dict(row)
        assert ev["child_crash"]["name"] == "iree-compile", ev
        assert ev["child_crash"]["source"] in ("kernel log", "output"), ev
    sigs = summary["signatures"]  # type: ignore[index]
    assert [s["key"] for s in sigs] == ["crash|SIGSEGV|run|||child iree-compile"]
    assert cores_under(proj) == [] and cores_under(run) == []


def test_a_plain_failing_test_is_failed_keyed_by_its_test_id_not_a_crash(
        tmp_path: Path) -> None:
    proj, run, summary = soak_pytest(tmp_path, _PLAIN, 2, {})
    rows = failure_rows(run)
    assert [(r["class"], r["signal"], r["last_step"]) for r in rows] == [
        ("failed", None, "run")] * 2
    for row in rows:
        ev = json.loads(row["evidence"])
        assert ev["tests"]["runner"] == "pytest"
        assert ev["tests"]["failed"] == ["test_models.py::test_result_is_right"]
        assert ev["tests"]["counts"] == {"failed": 1, "passed": 1}
        assert "child_crash" not in ev
    assert summary["failures"]["failed"] == 2 and summary["failures"]["crash"] == 0  # type: ignore[index]
    sigs = summary["signatures"]  # type: ignore[index]
    assert [s["key"] for s in sigs] == [
        "failed||run|||test_models.py::test_result_is_right"]
    report = run_cli("report", str(run), timeout=120)
    assert report.rc == 1, report.stderr[-2000:]
    answer = report.stdout.split("ANSWER", 1)[1].split("\nrun ", 1)[0]
    assert "failed at run" in answer and "crash" not in answer, answer
    assert "tests         test_models.py::test_result_is_right" in answer, answer
    assert "failures  failed 2" in report.stdout


def test_a_test_binary_crashing_under_ctest_in_its_build_folder_is_found_by_its_core(
        tmp_path: Path, compilerlike: Path, usual_umask: None) -> None:
    ctest = shutil.which("ctest")
    if ctest is None:
        pytest.skip("no ctest")
    proj, run = tmp_path / "proj", tmp_path / "run"
    tests = proj / "build" / "tests"  # each test's WORKING_DIRECTORY: where its core lands
    tests.mkdir(parents=True)
    (proj / "build" / "CTestTestfile.cmake").write_text("".join(
        f'add_test({name} "{compilerlike}" "{arg}")\n'
        f'set_tests_properties({name} PROPERTIES WORKING_DIRECTORY "{tests}")\n'
        for name, arg in (("conv_ok", "conv.mlir"), ("conv_crash", "crash"))))
    res = run_cli("soak", "--engine", "exec", "-n", "2", "--json", "-q", "--results", str(run),
                  "--", ctest, "--test-dir", "build", timeout=300, cwd=proj)
    assert res.rc == 1, res.stdout[-2000:] + res.stderr[-3000:]
    rows = failure_rows(run)
    assert len(rows) == 2
    for row in rows:
        ev = json.loads(row["evidence"])
        assert (row["class"], row["signal"]) == ("crash", "SIGSEGV"), dict(row)
        assert ev["child_crash"]["source"] == "core" and ev["child_crash"]["name"] == \
            "compilerlike", ev
        assert ev["crash_frames"][0] == "helper_crash_in_compile"
        assert ev["tests"]["runner"] == "ctest" and ev["tests"]["failed"] == ["conv_crash"]
    keys = [s["key"] for s in json.loads(res.stdout)["signatures"]]
    assert len(keys) == 1 and keys[0].startswith("crash|SIGSEGV|run||helper_crash_in_compile")
    assert cores_under(proj) == [] and cores_under(run) == []
    assert unreadable(run) == {}  # the evidence of cores moved in, as readable as the rest


def test_a_child_that_crashed_in_a_passing_job_leaves_no_core_in_the_user_s_folders(
        tmp_path: Path, two_faults: Path) -> None:
    """A death-test-like job: the command's child segfaults in a folder of its own, too
    briefly to be seen alive, and the command exits 0. Nothing failed, and no core of the
    run's processes is left anywhere under the command's folder at the run's end (the early
    jobs dump whole cores, the later ones notes-only ones: neither is left)."""
    proj, run = tmp_path / "proj", tmp_path / "run"
    proj.mkdir()
    script = f"mkdir -p sub{{job}} && cd sub{{job}} && {{ {two_faults} {{job}} || true; }}"
    res = run_cli("soak", "--engine", "exec", "-n", "12", "--workers", "1", "--timeout", "60s",
                  "--evidence-budget", "1", "--json", "-q", "--results", str(run),
                  "--", "sh", "-c", script, timeout=600, cwd=proj)
    assert res.rc == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert len(list(proj.glob("sub*"))) == 12
    leftover = [p for p in proj.rglob("*") if p.is_file() and read_core_notes(p) is not None]
    assert leftover == []
