"""Who failed, in a user's words (stress/analysis/culprit.py, issue 36 item 5): the answer
said "crash SIGSEGV at run" for a linker child of a pytest test, naming neither the child
nor the test, though both were in failure.json."""

from __future__ import annotations

from typing import Any

from stress.analysis import culprit
from stress.analysis.sigkeys import SignatureKey
from stress.analysis.signatures import Signature


def mode(cls: str, step: str, *evidence: dict[str, Any]) -> Signature:
    s = Signature(SignatureKey(cls, "SIGSEGV" if cls == "crash" else None, step, "", (), ""))
    s.rows = [{"last_step": step, "evidence": ev} for ev in evidence]
    return s


def test_a_childs_crash_names_the_child_its_parent_and_the_test_that_ran_it() -> None:
    ev = {"command_name": "pytest", "child_crash": {"name": "iree-lld", "signal": "SIGSEGV"},
          "tests": {"failed": ["tests/x_test.py::test_y"], "ran": 3}}
    assert culprit.culprit(mode("crash", "run", ev, ev)) == \
        "iree-lld (child of pytest) SIGSEGV while running tests/x_test.py::test_y"


def test_the_running_tests_are_counted_and_a_crash_at_exit_says_the_tests_were_done() -> None:
    a = {"command_name": "pytest", "running_test": "tests/a_test.py::test_1"}
    b = {"command_name": "pytest", "running_test": "tests/b_test.py::test_2"}
    assert culprit.culprit(mode("crash", "run", a, a, b)) == (
        "pytest SIGSEGV while running tests/a_test.py::test_1 (2x), "
        "tests/b_test.py::test_2 (1x)")
    done = {"command_name": "conv_test", "tests": {"ran": 4}, "done_marker_seen": True}
    assert culprit.culprit(mode("teardown_hang", "worker-exit", done)) == (
        "conv_test hung at its exit, after its tests were done (4 tests run, its runner's "
        "summary printed)")
    assert culprit.culprit(mode("failed", "run", a)) is None  # its tests row says it
    assert culprit.culprit(mode("crash", "run", {"output_key": []})) is None  # not exec
