"""The exec engine's pure parts (issue 14): placeholders, program names, output keys, the done
marker, deadlines on a fake clock, and what a command's exit turns into."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stress.engine.execrunner import (
    RUN_STEP,
    ExecCommand,
    ExecJudge,
    OutputWatch,
    exec_program,
    normalize_line,
    output_key,
    program_name,
    resolve_executable,
    substitute,
)
from stress.engine.jobs import Job, schedule
from stress.engine.journal import Step
from tests.conftest import run_cli

_S = 1_000_000_000  # ns per second


def test_placeholders_are_substituted_in_every_argument_and_other_braces_are_left_alone() -> None:
    argv = ["./t", "--seed={seed}", "{job}", "--gpu", "{gpu}", '{"a": 1}', "{other}"]
    assert substitute(argv, {"seed": 7, "job": 3, "gpu": 1}) == [
        "./t", "--seed=7", "3", "--gpu", "1", '{"a": 1}', "{other}"]


def test_a_command_is_named_by_its_basename_and_a_launcher_by_its_first_operand() -> None:
    assert program_name(["/build/tests/fusilli_conv_test", "--gtest_filter=x"]) == \
        "exec:fusilli_conv_test"
    assert program_name(["python3.11", "-u", "tests/test_device.py", "{seed}"]) == \
        "exec:python3.11:test_device.py"
    assert program_name(["ctest", "--timeout", "120", "-R", "conv"]) == "exec:ctest:."


def test_two_suites_run_by_python_m_pytest_get_two_program_names(tmp_path: Path) -> None:
    """issue 36: both were `exec:python:pytest`, and merged in compare, merge and known
    files. A runner is named by its test paths, a relative one by the folder it ran in; or
    by `--name`."""
    for proj in ("projA", "projB"):
        (tmp_path / proj / "tests").mkdir(parents=True)
    argv = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    a = program_name(argv, tmp_path / "projA")
    b = program_name(argv, tmp_path / "projB")
    assert (a, b) == ("exec:pytest:projA/tests", "exec:pytest:projB/tests")
    assert program_name(["pytest", "tests/x_test.py::test_y", "-x"], tmp_path / "projA") == \
        "exec:pytest:projA/tests/x_test.py"
    assert program_name(["/venv/bin/pytest"], tmp_path / "projB") == "exec:pytest:projB"
    assert program_name(["ctest", "--test-dir", "build", "-j", "8"], tmp_path / "projA") == \
        "exec:ctest:projA/build"
    assert program_name(argv, tmp_path / "projA", name="unit-suite") == "exec:unit-suite"


def test_output_lines_that_differ_only_in_numbers_addresses_and_paths_key_the_same() -> None:
    a = "Segfault at 0x7f12aa in /tmp/build-123/lib/libhip.so after 12.5 ms (pid 4242)"
    b = "Segfault at 0x7f99bb in /home/ci/work/lib/libhip.so after 7 ms (pid 17)"
    assert normalize_line(a) == normalize_line(b)
    assert output_key("x 1\n\nlast 2\n  \n", lines=1) == ["last #"]
    assert output_key("a\nb\nc\nd") == ["b", "c", "d"]


def test_the_done_marker_is_found_even_when_split_across_two_writes(tmp_path: Path) -> None:
    out, err = tmp_path / "o", tmp_path / "e"
    out.write_bytes(b"working 1\nall te")
    err.write_bytes(b"")
    w = OutputWatch((out, err), re.compile(r"^all tests done$"))
    assert w.poll(1 * _S) is None
    with open(out, "ab") as f:
        f.write(b"sts done\nexiting\n")
    assert w.poll(2 * _S) == 2 * _S
    assert w.poll(3 * _S) == 2 * _S  # the first time it was seen, not the latest


def _judge(tmp_path: Path, regex: str | None = "done") -> ExecJudge:
    out, err = tmp_path / "out", tmp_path / "err"
    out.write_bytes(b"")
    err.write_bytes(b"")
    return ExecJudge(Job(5, "exec:t", "exec", 99, 1), pid=2**22 + 12345, started_ns=0,
                     started_wall=0.0, timeout_s=10.0, teardown_timeout_s=2.0,
                     output=OutputWatch((out, err), re.compile(regex) if regex else None),
                     logs=(out, err))


def test_a_command_silent_past_its_timeout_is_a_hang_in_run(tmp_path: Path) -> None:
    j = _judge(tmp_path)
    assert j.watch(9 * _S) is None
    stuck = j.watch(11 * _S)
    assert stuck is not None and not stuck.teardown and stuck.label == RUN_STEP


def test_a_command_that_printed_done_and_did_not_exit_is_a_teardown_hang(tmp_path: Path) -> None:
    j = _judge(tmp_path)
    assert j.watch(1 * _S) is None
    (tmp_path / "out").write_bytes(b"done\n")
    assert j.watch(8 * _S) is None  # marker seen now: the teardown deadline starts here
    assert j.watch(9 * _S) is None
    stuck = j.watch(int(10.5 * _S))  # 2.5 s after the marker; the run's own 10 s is past too
    assert stuck is not None and stuck.teardown and stuck.step is Step.WORKER_EXIT


def test_an_exit_0_reports_the_job_and_says_bye_and_drops_its_logs(tmp_path: Path) -> None:
    j = _judge(tmp_path, regex=None)
    msgs = j.finish(0)
    assert [m for m, _ in msgs] == ["job_done", "bye"]
    res = msgs[0][1]["result"]
    assert res["invocations"] == 1 and res["ok"] == 1 and res["errors"] == 0
    assert msgs[0][1]["job"]["index"] == 5
    assert not (tmp_path / "out").exists()


def test_a_death_after_the_done_marker_is_a_failure_of_the_exit_not_of_the_work(
        tmp_path: Path) -> None:
    j = _judge(tmp_path)
    (tmp_path / "out").write_bytes(b"done\n")
    msgs = j.finish(-11)
    assert [m for m, _ in msgs] == ["job_done", "bye"]  # the session then sees rc != 0
    assert msgs[0][1]["result"]["ok"] == 0
    assert (tmp_path / "out").exists()  # kept: its tail goes into the failure folder


def test_a_death_or_failing_status_before_the_done_marker_sends_nothing(tmp_path: Path) -> None:
    for rc in (-11, 1):
        assert _judge(tmp_path).finish(rc) == []


def test_failure_facts_carry_the_normalized_last_lines_of_output(tmp_path: Path) -> None:
    j = _judge(tmp_path)
    (tmp_path / "err").write_bytes(b"assertion failed: 3 != 4 at /tmp/b/x.cpp:12\n")
    facts = j.facts()
    assert facts["output_key"] == ["assertion failed: # != # at <path>:#"]
    assert facts["done_marker_seen"] is False


_PYTEST_DUMP = """\
..
Fatal Python error: Segmentation fault

Current thread 0x00007f4bb8c7a240 (most recent call first):
  File "/tmp/p/test_rt.py", line 14 in test_device
  File "/v/lib/python3.11/site-packages/_pytest/python.py", line 187 in pytest_pyfunc_call
  File "/v/lib/python3.11/site-packages/pluggy/_execution.py", line 147 in _multicall
  File "/v/lib/python3.11/site-packages/pytest/__main__.py", line 9 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "<frozen runpy>", line 198 in _run_module_as_main

Extension modules: numpy._core._multiarray_umath, numpy.linalg._umath_linalg (total: 2)
"""


def test_a_python_crash_keys_on_the_top_of_its_dump_never_on_runpy_or_extension_modules(
        tmp_path: Path) -> None:
    """Issue 36 item 2: the tail of faulthandler's dump is the same for every `python -m`
    process (`<frozen runpy>`, "Extension modules: numpy..."); the top names the fault."""
    j = _judge(tmp_path)
    (tmp_path / "err").write_text(_PYTEST_DUMP)
    key = j.facts()["output_key"]
    assert key == ["Fatal Python error: Segmentation fault", "test_device [test_rt.py]",
                   "pytest_pyfunc_call [python.py]"]
    assert not any("runpy" in x or "Extension modules" in x for x in key)


def test_an_exec_job_is_one_run_of_the_command() -> None:
    from stress.engine.execrunner import EXEC_PATTERN, ONE_RUN_SCALE

    prog = exec_program(["./flaky", "{seed}"])
    jobs = schedule(1, [prog], [EXEC_PATTERN], scale=ONE_RUN_SCALE)
    first = [next(jobs) for _ in range(5)]
    assert {j.invocations for j in first} == {1}
    assert {j.program for j in first} == {"exec:flaky"}
    assert len({j.seed for j in first}) == 5


def test_the_executable_of_a_relative_command_is_found_from_the_command_cwd(
        tmp_path: Path) -> None:
    assert resolve_executable("./bin/t", tmp_path, {}) == str(tmp_path / "bin" / "t")
    assert resolve_executable("sh", tmp_path, {"PATH": "/bin:/usr/bin"}).endswith("/sh")


def test_an_empty_command_or_a_bad_done_regex_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a command"):
        ExecCommand([], Path.cwd()).validate()
    with pytest.raises(ValueError, match="done-regex"):
        ExecCommand(["./t"], Path.cwd(), "(unclosed").validate()


@pytest.mark.parametrize("args,needle", [
    (["--", "./t"], "--engine exec"),
    (["--engine", "exec"], "needs a command"),
    (["--engine", "exec", "--done-regex", "(", "--", "./t"], "done-regex"),
    (["--engine", "exec", "--inject", "segv@invoke", "--", "./t"], "inject"),
])
def test_the_cli_refuses_inconsistent_exec_options_in_one_line(
        tmp_path: Path, args: list[str], needle: str) -> None:
    res = run_cli("soak", "-q", "--results", str(tmp_path / "r"), *args)
    assert res.rc == 2, res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr


def test_a_clean_exit_deletes_the_cores_its_children_left_and_a_failed_one_keeps_them(
        tmp_path: Path) -> None:
    from stress.engine.children import GroupWatch
    from tests.helpers.procs import dead_pids, fake_core

    for rc, kept in ((0, False), (1, True)):
        j = _judge(tmp_path)
        (child,) = dead_pids(1)
        user = tmp_path / f"user-{rc}"
        user.mkdir()
        j.group = GroupWatch(j.pid, user, tmp_path / f"run-{rc}", 0.0, ("core", False))
        fake_core(user / "core", child, [child], 6, sid=j.pid)  # a death test's SIGABRT
        j.watch(1 * _S)  # the group's first sweep moves it out of the user's folder
        assert not (user / "core").exists() and list(j.group.cores) == [child]
        j.finish(rc)
        assert (tmp_path / f"run-{rc}" / f"core.{child}").exists() is kept, rc


@pytest.mark.slow  # two soaks of the CLI: ~20 s on a loaded 2-core machine
def test_name_names_an_exec_program_and_a_resume_keeps_it(tmp_path: Path) -> None:
    """issue 36: `--name` keeps two suites apart when their paths do not."""
    import sqlite3

    run = tmp_path / "run"
    res = run_cli("soak", "--engine", "exec", "--name", "suite-a", "-d", "1s", "-q",
                  "--results", str(run), "--", "/bin/true", cwd=tmp_path)
    assert res.rc == 0, res.stderr[-2000:]
    again = run_cli("soak", "--results", str(run), "--resume", "-d", "1s", "-q", cwd=tmp_path)
    assert again.rc == 0, again.stderr[-2000:]
    db = sqlite3.connect(run / "stress.db")
    programs = {p for (p,) in db.execute("SELECT program FROM jobs")}
    db.close()
    assert programs == {"exec:suite-a"}
