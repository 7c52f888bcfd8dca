"""The test-runner output parsers of exec jobs (issue 27 item 5), on real outputs of pytest,
ctest, gtest, Catch2 and shells (tests/data/testlogs/, README there says how each was made)."""

from __future__ import annotations

import re
from pathlib import Path

from stress.engine import testlog

LOGS = Path(__file__).resolve().parents[1] / "data" / "testlogs"


def log(name: str) -> str:
    return (LOGS / name).read_text()


def deaths(name: str) -> list[tuple[str, str]]:
    return [(d.name, d.signal) for d in testlog.signal_deaths(log(name))]


def test_pytest_failed_and_errored_tests_are_read_from_its_short_summary_with_its_totals() -> None:
    for name in ("pytest.txt", "pytest-q.txt"):
        s = testlog.summarize(log(name))
        assert s.runner == "pytest", name
        assert s.failed == ["test_compile.py::test_conv_compiles",
                            "test_compile.py::test_matmul_result",
                            "test_compile.py::test_shapes[2]",
                            "test_compile.py::test_needs_device"], name
        collected = {"collected": 6} if name == "pytest.txt" else {}  # (not under -q)
        assert s.counts == {"failed": 3, "passed": 2, "errors": 1, **collected}, name


def test_pytest_verbose_result_lines_name_the_failures_when_there_is_no_short_summary() -> None:
    text = ("test_a.py::test_one PASSED                     [ 50%]\n"
            "test_a.py::test_two[x-1] FAILED                [100%]\n"
            "========================= 1 failed, 1 passed in 0.05s =========================\n")
    s = testlog.summarize(text)
    assert (s.runner, s.failed, s.counts) == ("pytest", ["test_a.py::test_two[x-1]"],
                                              {"failed": 1, "passed": 1})


def test_ctest_names_its_failed_tests_and_which_of_them_died_by_a_signal() -> None:
    s = testlog.summarize(log("ctest.txt"))
    assert (s.runner, s.failed) == ("ctest", ["conv_crash", "matmul_fails", "abort_test"])
    assert s.counts == {"failed": 3, "passed": 1}
    assert deaths("ctest.txt") == [("conv_crash", "SIGSEGV"), ("abort_test", "SIGABRT")]


def test_gtest_failed_ids_come_once_each_without_their_parameter_or_time() -> None:
    s = testlog.summarize(log("gtest.txt"))
    assert (s.runner, s.failed) == ("gtest", ["ConvTest.WrongResult", "Small/Shapes.Fits/1"])
    assert s.counts == {"passed": 2, "failed": 2}


def test_catch2_failed_cases_are_named_by_their_test_case_not_their_section() -> None:
    s = testlog.summarize(log("catch2.txt"))
    assert (s.runner, s.failed) == ("catch2", ["conv wgrad on nhwc", "matmul throws"])
    assert s.counts == {"failed": 2, "passed": 1}


def test_an_output_without_a_runner_summary_has_no_failed_tests() -> None:
    s = testlog.summarize(log("bash-segv.txt"))
    assert (s.runner, s.failed, s.counts) == ("", [], {})
    assert s.as_dict()["failed_count"] == 0


def test_a_compiler_killed_by_a_signal_is_found_in_what_python_and_iree_compiler_print() -> None:
    assert deaths("pytest.txt") == [("helper", "SIGSEGV")] * 2  # CalledProcessError, then
    #   an assertion on a CompletedProcess's returncode (two lines)
    assert deaths("pytest-iree-compiler.txt") == [("iree-compile", "SIGSEGV")]


def test_a_shell_s_report_of_a_killed_child_names_it_when_the_shell_says_its_command() -> None:
    assert deaths("bash-segv.txt") == [("helper", "SIGSEGV")]
    assert deaths("sh-segv.txt") == [("", "SIGSEGV")]  # dash says the signal only


def test_outputs_that_only_mention_signals_or_failures_are_not_deaths_or_failed_tests() -> None:
    text = ("Fatal Python error: Segmentation fault\n"  # faulthandler: the process's own
            "FAILED to open the device, retrying\n"
            "Command '['ls']' returned non-zero exit status 2.\n"
            "[  FAILED  ] 1 test, listed below:\n")
    assert testlog.signal_deaths(text) == []
    assert testlog.pytest_summary(text) is None
    assert testlog.gtest_summary(text) is not None and testlog.gtest_summary(text).failed == []


def test_a_long_list_of_failed_tests_is_cut_in_the_record_but_counted_whole() -> None:
    text = "".join(f"FAILED t.py::test_{i} - boom\n" for i in range(testlog.FAILED_IDS_KEPT + 7))
    d = testlog.summarize(text).as_dict()
    assert len(d["failed"]) == testlog.FAILED_IDS_KEPT
    assert d["failed_count"] == testlog.FAILED_IDS_KEPT + 7


def test_ctest_s_summary_wins_over_the_gtest_output_of_the_tests_it_ran() -> None:
    s = testlog.summarize(log("gtest.txt") + log("ctest.txt"))  # --output-on-failure
    assert s.runner == "ctest" and s.failed[0] == "conv_crash"


# ---- issue 36: the runner's summary as the done marker, and the tests each job ran ----------
RUNNER_LOGS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    # runner: (a command that runs it, its real outputs)
    "pytest": (["python", "-m", "pytest", "-q", "tests"],
               ("pytest.txt", "pytest-q.txt", "pytest-skipped.txt", "pytest-none.txt",
                "pytest-subtests.txt")),
    "ctest": (["ctest", "--test-dir", "build", "-j", "8"],
              ("ctest.txt", "ctest-pass.txt", "ctest-none.txt")),
    "gtest": (["build/bin/conv_test", "--gtest_filter=Conv*"],
              ("gtest.txt", "gtest-pass.txt", "gtest-none.txt")),
    "catch2": (["build/bin/fusilli_conv_samples", "--rng-seed", "{seed}"],
               ("catch2.txt", "catch2-pass.txt", "catch2-none.txt")),
}


def test_each_runners_summary_line_is_the_default_done_marker_of_its_command() -> None:
    """Without --done-regex a crash or hang after the runner's summary is a failure of the
    process's exit (was: a crash "while running", keyed on the summary line). The marker is
    the runner's own line, found once, near the end of every real output of it; a pytest
    command's marker never fires on a gtest binary's lines it printed, nor ctest's on its
    tests' gtest summaries."""
    for runner, (argv, names) in RUNNER_LOGS.items():
        marker = re.compile(testlog.done_marker(argv))
        for name in names:
            lines = log(name).splitlines()
            hits = [i for i, line in enumerate(lines) if marker.search(line)]
            assert len(hits) == 1, (runner, name, hits)
            assert len(lines) - hits[0] <= 10, (runner, name)  # then its report and exit
    assert not re.search(testlog.done_marker(RUNNER_LOGS["pytest"][0]),
                         "[==========] 3 tests from 1 test suite ran. (0 ms total)")
    assert testlog.runner_of(["sh", "-c", "exec ctest --test-dir \"$BUILD\""]) == "ctest"
    assert testlog.runner_of(["build/bin/t"]) is None


def test_every_runner_says_how_many_tests_it_ran_and_a_run_of_none_is_told_apart() -> None:
    ran = {name: testlog.summarize(log(name)).ran()
           for _, names in RUNNER_LOGS.values() for name in names}
    assert ran == {"pytest.txt": 6, "pytest-q.txt": 6, "pytest-skipped.txt": 0,
                   "pytest-none.txt": 0, "pytest-subtests.txt": 2, "ctest.txt": 4,
                   "ctest-pass.txt": 2,
                   "ctest-none.txt": 0, "gtest.txt": 4, "gtest-pass.txt": 2,
                   "gtest-none.txt": 0, "catch2.txt": 3, "catch2-pass.txt": 2,
                   "catch2-none.txt": 0}
    assert testlog.summarize(log("pytest-skipped.txt")).counts == {"skipped": 2}
    # pytest 9's subtests add a count of two words (IREE's runtime tests: a clean job of
    #   that suite kept no count, and a crash after its summary was one "at run")
    assert testlog.summarize(log("pytest-subtests.txt")).counts == {
        "passed": 2, "skipped": 1, "warning": 1, "subtests passed": 3}
    assert testlog.summarize(log("gtest-pass.txt")).counts == {"passed": 2, "skipped": 1}


def test_the_running_test_is_read_from_faulthandler_gtest_and_ctest() -> None:
    dump = ("tests/x_test.py .\n"
            "Fatal Python error: Segmentation fault\n\n"
            "Current thread 0x00007f1 (most recent call first):\n"
            '  File "/src/lib/runtime.py", line 12 in release\n'
            '  File "/src/proj/tests/x_test.py", line 7 in test_y\n'
            '  File "/usr/lib/python3/site-packages/_pytest/python.py", line 159 in call\n'
            "\nExtension modules: numpy.core._multiarray_umath (total: 1)\n")
    assert testlog.running_test(dump, "/src/proj") == "tests/x_test.py::test_y"
    gtest = "[ RUN      ] ConvTest.Fprop\n[       OK ] ConvTest.Fprop (0 ms)\n" \
            "[ RUN      ] ConvTest.Wgrad\n"
    assert testlog.running_test(gtest) == "ConvTest.Wgrad"
    assert testlog.running_test(log("gtest-pass.txt")) is None  # every test ended
    ctest = "    Start 1: conv_fprop\n1/2 Test #1: conv_fprop ....   Passed    0.00 sec\n" \
            "    Start 2: catch_suite\n"
    assert testlog.running_test(ctest) == "catch_suite"
