"""What an exec run's answer says (issue 36 items 5-9), on a real pytest suite run by
`python -m pytest` without --done-regex, two copies at once in one folder. Each job does one
thing (by IREE_STRESS_JOB): a test runs a compiler-like child that segfaults; the process
segfaults at exit after pytest's summary; every test is skipped; the process spins at exit
after its summary; all pass. The answer names the child (and its parent) and the test that
ran it; says that the exit failures came after the tests were done; flags the job that ran
no test; counts jobs, tests and command processes (no invocations); gives one failing-job
count in the report, its JSON, the gate, JUnit and HTML; names the program by its test
path; and its rerun line says where the command ran."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.system.test_exec_children import compilerlike  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.system, pytest.mark.slow]

_SUITE = '''
import atexit, ctypes, os, subprocess
import pytest

JOB = int(os.environ["IREE_STRESS_JOB"]) % 5
if JOB == 1:
    atexit.register(ctypes.string_at, 0)  # SIGSEGV at exit, after pytest's summary
if JOB == 3:
    def spin():
        while True:
            pass
    atexit.register(spin)  # spins at exit, after pytest's summary


def test_compiles():
    if JOB == 2:
        pytest.skip("no device")
    if JOB == 0:
        subprocess.run([os.environ["COMPILERLIKE"], "crash", "--o", "conv.vmfb"], check=True)


def test_runs():
    if JOB == 2:
        pytest.skip("no device")
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, compilerlike: Path  # noqa: F811
        ) -> tuple[Path, Path, str]:
    """(the suite's folder, the run folder, soak's output)."""
    root = tmp_path_factory.mktemp("answer")
    proj = root / "proj"
    (proj / "tests").mkdir(parents=True)
    (proj / "tests" / "x_test.py").write_text(_SUITE)
    out = root / "run"
    res = run_cli("soak", "--engine", "exec", "-n", "5", "--workers", "2", "--timeout", "60s",
                  "--teardown-timeout", "3s", "--results", str(out),
                  f"--env=COMPILERLIKE={compilerlike}", "--", sys.executable, "-m", "pytest",
                  "-q", "-p", "no:cacheprovider", "tests", timeout=400, cwd=proj)
    assert res.rc == 1, res.stdout[-3000:] + res.stderr[-3000:]
    return proj, out, res.stdout


def test_the_answer_names_the_child_that_crashed_its_parent_and_the_test_that_ran_it(
        run: tuple[Path, Path, str]) -> None:
    proj, out, _ = run
    text = run_cli("report", str(out), cwd=proj).stdout
    assert "crashed       compilerlike (child of pytest) SIGSEGV while running " \
           "tests/x_test.py::test_compiles" in text, text[:4000]
    crash = None
    for f in out.glob("failures/*/failure.json"):
        ev = json.loads(f.read_text())
        if ev.get("child_crash"):
            crash = ev
    assert crash is not None
    # the whole command line (a core's notes keep 80 bytes of it; the /proc one is whole)
    assert crash["child_crash"]["command"].endswith("compilerlike crash --o conv.vmfb")


def test_without_done_regex_a_crash_or_hang_after_pytests_summary_fails_the_exit(
        run: tuple[Path, Path, str]) -> None:
    """Items 6 and 8: pytest's summary line is the done marker by default. A SIGSEGV after
    it is a crash at worker-exit (rated per exit) and says the tests were done; a spin
    after it is a teardown hang ("the test finished its work"), not `hang (busy) at run`;
    neither is keyed on the summary line."""
    proj, out, _ = run
    report = json.loads(run_cli("report", str(out), "--format", "json", cwd=proj).stdout)
    exit_crash = next(f for f in report["first_screen"]  # (after main returned: issue 39)
                      if f["what"].startswith("crash SIGSEGV in process-exit")
                      and "at teardown (worker-exit" in f["what"])
    assert exit_crash["culprit"].startswith("pytest SIGSEGV at its exit, after its tests "
                                            "were done (2 tests run")
    hang = next(f for f in report["first_screen"] if f["what"].startswith("teardown_hang"))
    assert "worker-exit" in hang["what"]
    assert hang["culprit"].startswith("pytest hung at its exit, after its tests were done")
    for f in out.glob("failures/*/failure.json"):
        ev = json.loads(f.read_text())
        assert not any(re.search(r"passed in", line) for line in ev.get("output_key", [])), ev


def test_clean_jobs_keep_the_runners_counts_and_a_job_that_ran_no_test_is_flagged(
        run: tuple[Path, Path, str]) -> None:
    proj, out, soak_out = run
    summary = json.loads((out / "summary.json").read_text())
    # jobs 0 (1 failed + 1 passed), 1, 3, 4 (2 passed each); job 2: 2 skipped, none ran
    assert summary["tests"] == {"jobs_with_counts": 5, "jobs_without_a_test": 1, "ran": 8,
                                "passed": 7, "failed": 1, "skipped": 2}
    assert "tests     8 run in 5 job(s) (1.6 a job): 7 passed, 1 failed, 2 skipped; 1 " \
           "job(s) ran no test (flagged, not clean)" in soak_out
    flagged = [json.loads(f.read_text()) for f in out.glob("failures/*-failed-*/failure.json")]
    assert len(flagged) == 1 and flagged[0]["tests"]["ran"] == 0
    assert summary["failures"]["failed"] == 1


def test_an_exec_run_counts_jobs_tests_and_command_processes_not_invocations(
        run: tuple[Path, Path, str]) -> None:
    """Item 7: was "5 jobs (2 reported, 3 ended with their process), 0 invocations in ...
    (0/s)", "command process exits: 0" beside processes that died."""
    _, _, soak_out = run
    summary = soak_out.split("\n\n", 1)[1]
    assert "invocations" not in summary and "0/s" not in summary, summary
    assert "ended with their process" not in summary
    assert "  jobs      5 in " in summary
    line = next(x for x in summary.splitlines() if x.startswith("  command processes"))
    # job 0 exited 1 (its child crashed), 1 died by SIGSEGV, 2 exited 0 with no test
    #   ran, 3 was killed at its teardown deadline, 4 exited 0
    assert line == ("  command processes  5: exited 0 2, exited non-zero 1, killed by a "
                    "signal 1, killed at a deadline 1"), line


def test_one_failing_job_count_in_the_report_its_json_the_gate_junit_and_html(
        run: tuple[Path, Path, str], tmp_path: Path) -> None:
    """Items 8/9: the report said "Jobs failing: 0/12" where the gate said 3/12 for crashes
    at exit, and the HTML's failing-jobs plots showed 0%. Every job here failed but job 4."""
    proj, out, _ = run
    text = run_cli("report", str(out), "--junit", str(tmp_path / "j.xml"),
                   cwd=proj).stdout
    assert "Jobs failing: 4/5 = 80%" in text, text[:3000]
    report = json.loads(run_cli("report", str(out), "--format", "json", cwd=proj).stdout)
    assert (report["failing_jobs"]["failures"], report["failing_jobs"]["units"]) == (4, 5)
    gate = run_cli("gate", "--from", str(out), "--max-rate", "0.5", cwd=proj)
    assert "failing jobs  4/5 jobs = 80%" in gate.stdout, gate.stdout
    assert "  data          5 jobs, shards 1/1" in gate.stdout  # (no "2 invocations")
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert int(suite.get("errors") or 0) + int(suite.get("failures") or 0) >= 1
    html = run_cli("report", str(out), "--format", "html", cwd=proj).stdout
    assert "80%" in html


def test_the_program_is_named_by_its_test_path_and_the_rerun_line_says_where_it_ran(
        run: tuple[Path, Path, str]) -> None:
    proj, out, soak_out = run
    summary = json.loads((out / "summary.json").read_text())
    programs = {f["job"]["program"] for f in summary["failures_detail"]}
    assert programs == {"exec:pytest:proj/tests"}  # was exec:python:pytest, for any suite
    rerun = next(x for x in soak_out.splitlines() if x.startswith("rerun: "))
    assert rerun.startswith(f"rerun: cd {proj} && iree-stress soak --engine exec "), rerun
