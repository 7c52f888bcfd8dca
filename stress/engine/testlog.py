"""What a test runner's output says about the run (pure parsers of an exec job's output).

Two facts go into the record of an exec job that failed (docs/exec.md, "How an exec job ends"):

* **the failing tests**: the summary of whichever runner printed one, outermost first (ctest,
  whose tests may be gtest or Catch2 binaries printing their own; then pytest; then a gtest or
  Catch2 binary run directly): `FAILED tests/x.py::test_y - ...` lines and pytest's `N failed,
  M passed` line; ctest's `The following tests FAILED:` list and `N% tests passed`; gtest's
  `[  FAILED  ] Suite.Test` summary; Catch2's failed test case blocks and `test cases:` line;
* **processes the output says died by a signal**: a child the test ran (a compiler, a tool)
  whose death only the output tells, as Python's subprocess (`died with <Signals.SIGSEGV:
  11>`, `CompletedProcess(..., returncode=-11)`), iree.compiler (`Error invoking IREE compiler
  tool iree-compile` / `Error code: -11`), a shell (`Segmentation fault (core dumped)`) or ctest
  (`conv_crash (SEGFAULT)`) print it. The kernel log and the child's core, when there are any,
  say more (`children`); this is what is left when there are none.

The texts recognised are those of the committed outputs in tests/data/testlogs/ (real runs).
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field
from typing import Any

FAILED_IDS_KEPT: int = 50  # failing test ids kept in a record: a collection error can fail
#   hundreds of tests at once; the count is kept whole


@dataclass
class TestSummary:
    """A runner's own account of the run: which tests failed, in output order, and its
    counts as it printed them (`failed`, `passed`, `errors`, ...). `runner` is empty when no
    summary was recognised."""

    __test__ = False  # not a pytest test class, whatever its name

    runner: str = ""
    failed: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def ran(self) -> int | None:
        """Tests the runner says it ran (passed, failed, errors; not skipped nor deselected);
        None when no summary was recognised."""
        if not self.runner:
            return None
        return sum(self.counts.get(k, 0) for k in _RAN_KEYS)

    def counted(self) -> dict[str, Any]:
        """The runner and its counts, with the tests it ran (a clean job's record)."""
        return {"runner": self.runner, "counts": self.counts, "ran": self.ran()}

    def as_dict(self) -> dict[str, Any]:
        return {"runner": self.runner, "failed": self.failed[:FAILED_IDS_KEPT],
                "failed_count": len(self.failed), "counts": self.counts, "ran": self.ran()}


_RAN_KEYS: tuple[str, ...] = ("passed", "failed", "errors", "xfailed", "xpassed")


@dataclass(frozen=True)
class SignalDeath:
    """A process the output says was killed by a signal: its executable's (or ctest test's)
    name, the signal's name, and the line that said it."""

    name: str
    signal: str
    line: str
    command: str = ""  # its whole command line, when the output printed it

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "signal": self.signal, "line": self.line,
                **({"command": self.command} if self.command else {})}


def _add(out: list[str], test_id: str) -> None:
    if test_id and test_id not in out:
        out.append(test_id)


# ---- pytest -------------------------------------------------------------------------------
_PYTEST_SHORT = re.compile(r"^(FAILED|ERROR) (.+?)(?: - .*)?$")
_PYTEST_VERBOSE = re.compile(r"^(\S+::\S+?) (FAILED|ERROR)\b")
_PYTEST_TOTALS = re.compile(r"^(?:=+ )?((?:\d+ [a-z]+(?: [a-z]+)?(?:, )?)+) in [\d.]+s\b.*?"
                            r"(?: =+)?$")  # (pytest 9's "5 subtests passed": two words)
_PYTEST_COUNT = re.compile(r"(\d+) ([a-z]+(?: [a-z]+)?)")
_PYTEST_NONE = re.compile(r"^(?:=+ )?no tests ran in [\d.]+s\b")
_PYTEST_COLLECTED = re.compile(r"^collected (\d+) items?\b")  # (not printed under -q)


def pytest_summary(text: str) -> TestSummary | None:
    """pytest's short test summary (`FAILED id - message`, `ERROR id - message`; without one,
    `-v`'s `id FAILED` lines) and its totals line (`3 failed, 2 passed, 1 error in 0.32s`,
    with or without the `=` rule). None when neither is there."""
    failed: list[str] = []
    verbose: list[str] = []
    counts: dict[str, int] = {}
    totals = False
    for line in text.splitlines():
        line = line.rstrip()
        m = _PYTEST_SHORT.match(line)
        if m and ("::" in m.group(2) or m.group(2).endswith(".py")):  # a node id, or a file
            _add(failed, m.group(2))  # that failed to collect
            continue
        m = _PYTEST_VERBOSE.match(line)
        if m:
            _add(verbose, m.group(1))
            continue
        m = _PYTEST_TOTALS.match(line)
        if m:
            counts = {w if w != "error" else "errors": int(n)
                      for n, w in _PYTEST_COUNT.findall(m.group(1))}
            totals = True
        elif _PYTEST_NONE.match(line):
            counts, totals = {}, True
    if not failed and not verbose and not totals:
        return None
    collected = next((m for line in text.splitlines()
                      for m in [_PYTEST_COLLECTED.match(line)] if m), None)
    if collected is not None:
        counts["collected"] = int(collected.group(1))
    return TestSummary("pytest", failed or verbose, counts)


# ---- ctest --------------------------------------------------------------------------------
_CTEST_LIST = re.compile(r"^The following tests FAILED:")
_CTEST_ENTRY = re.compile(r"^\s+\d+ - (.+) \(([^()]+)\)\s*$")
_CTEST_TOTALS = re.compile(r"^\d+% tests passed, (\d+) tests? failed out of (\d+)")
_CTEST_NONE = re.compile(r"^No tests were found")
# ctest's status words for a test killed by a signal (cmCTest's SEGFAULT, ILLEGAL, ...; a
#   SIGABRT is "Subprocess aborted"), and the signal each stands for
_CTEST_SIGNALS: dict[str, str] = {"SEGFAULT": "SIGSEGV", "ILLEGAL": "SIGILL",
                                  "NUMERICAL": "SIGFPE", "INTERRUPT": "SIGINT",
                                  "Subprocess aborted": "SIGABRT",
                                  "Child aborted": "SIGABRT"}


def _ctest_entries(text: str) -> list[tuple[str, str, str]]:
    """(test name, status, line) of each entry of ctest's `The following tests FAILED:`."""
    out: list[tuple[str, str, str]] = []
    inside = False
    for line in text.splitlines():
        if _CTEST_LIST.match(line):
            inside = True
            continue
        if inside:
            m = _CTEST_ENTRY.match(line)
            if m:
                out.append((m.group(1), m.group(2), line.strip()))
            elif line.strip():
                inside = False
    return out


def ctest_summary(text: str) -> TestSummary | None:
    """ctest's `The following tests FAILED:` list (test names) and `N% tests passed, F tests
    failed out of T`. None when neither is there."""
    failed: list[str] = []
    for name, _, _ in _ctest_entries(text):
        _add(failed, name)
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = _CTEST_TOTALS.match(line)
        if m:
            counts = {"failed": int(m.group(1)), "passed": int(m.group(2)) - int(m.group(1))}
        elif _CTEST_NONE.match(line):
            counts = {"failed": 0, "passed": 0}
    if not failed and not counts:
        return None
    return TestSummary("ctest", failed, counts)


# ---- gtest --------------------------------------------------------------------------------
_GTEST_FAILED = re.compile(r"^\[  FAILED  \] (.+?)(?:, where .*?)?(?: \(\d+ ms\))?$")
_GTEST_NOT_AN_ID = re.compile(r"^\d+ tests?, listed below:$|^\d+ tests?\.?$")
_GTEST_PASSED = re.compile(r"^\[  PASSED  \] (\d+) tests?\.")
_GTEST_FAILED_TOTAL = re.compile(r"^\[  FAILED  \] (\d+) tests?, listed below:")
_GTEST_SKIPPED_TOTAL = re.compile(r"^\[  SKIPPED \] (\d+) tests?, listed below:")
_GTEST_RAN = re.compile(r"^\[==========\] (\d+) tests? from \d+ test (?:suites?|cases?) ran\.")
_GTEST_TOTALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("passed", _GTEST_PASSED), ("failed", _GTEST_FAILED_TOTAL),
    ("skipped", _GTEST_SKIPPED_TOTAL), ("ran", _GTEST_RAN))


def gtest_summary(text: str) -> TestSummary | None:
    """gtest's `[  FAILED  ] Suite.Test` lines (the per-test line and the summary list name
    the same ids; a value-parametrized one's `, where GetParam() = ...` is cut) and its
    `[  PASSED  ] N tests.` / `[  FAILED  ] N tests, listed below:` counts."""
    failed: list[str] = []
    counts: dict[str, int] = {}
    for line in text.splitlines():
        line = line.rstrip()
        total = next(((k, t) for k, pattern in _GTEST_TOTALS for t in [pattern.match(line)]
                      if t), None)
        if total is not None:
            key, found = total
            if key == "ran":
                counts.setdefault("passed", 0)  # (0 tests ran: no PASSED line follows)
            else:
                counts[key] = int(found.group(1))
            continue
        m = _GTEST_FAILED.match(line)
        if m and not _GTEST_NOT_AN_ID.match(m.group(1)):
            _add(failed, m.group(1))
    if not failed and not counts:
        return None
    return TestSummary("gtest", failed, counts)


# ---- Catch2 -------------------------------------------------------------------------------
_CATCH_RULE = re.compile(r"^-{79}$")
_CATCH_FAILED = re.compile(r": FAILED:$")
_CATCH_TOTALS = re.compile(r"^test cases: *(\d+) \| *(?:(\d+) passed)?(?: \| )?(?:(\d+) failed)?")
_CATCH_ALL_PASSED = re.compile(r"^All tests passed \((\d+) assertions? in (\d+) test cases?\)")
_CATCH_NONE = re.compile(r"^No tests ran\b")


def catch2_summary(text: str) -> TestSummary | None:
    """Catch2's console reporter: each failed test case is a block headed by its name
    between two rules of 79 dashes (its sections follow, indented: the case's name is the
    test id), with a `file:line: FAILED:` line under it; and `test cases: T | P passed | F
    failed`. None when neither is there."""
    failed: list[str] = []
    counts: dict[str, int] = {}
    lines = text.splitlines()
    name: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if _CATCH_RULE.match(line):
            j = i + 1
            while j < len(lines) and not _CATCH_RULE.match(lines[j].rstrip()):
                j += 1
            if j < len(lines) and j > i + 1:  # a header: the case's name, then its sections
                name = lines[i + 1].strip()
                i = j + 1
                continue
        elif name is not None and _CATCH_FAILED.search(line):
            _add(failed, name)
        else:
            m = _CATCH_TOTALS.match(line)
            if m:
                counts = {"failed": int(m.group(3) or 0), "passed": int(m.group(2) or 0)}
            m = _CATCH_ALL_PASSED.match(line)
            if m:
                counts = {"failed": 0, "passed": int(m.group(2))}
            if _CATCH_NONE.match(line):
                counts = {"failed": 0, "passed": 0}
        i += 1
    if not failed and not counts:
        return None
    return TestSummary("catch2", failed, counts)


_RUNNERS = (ctest_summary, pytest_summary, gtest_summary, catch2_summary)  # outermost first

# ---- the test that was running ---------------------------------------------------------
_FAULT_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+ in (\w+)')
_FAULT_HEAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ .*most recent call first")
_GTEST_RUN = re.compile(r"^\[ RUN      \] (\S+)")
_GTEST_END = re.compile(r"^\[ +(?:OK|FAILED|SKIPPED) +\] (\S+?)(?:,| \(|$)")
_CTEST_START = re.compile(r"^\s*Start +\d+: (\S+)")
_CTEST_END = re.compile(r"^\s*\d+/\d+ Test +#\d+: (\S+) ")
_PYTEST_LIVE = re.compile(r"^(\S+\.py::\S+)(?: |$)")
_PYTEST_OUTCOME = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def _test_file(path: str) -> bool:
    name = os.path.basename(path)
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def running_test(text: str, cwd: str | None = None) -> str | None:
    """The test a runner was running when its output stopped: faulthandler's dump (the
    innermost frame in a test file of the most recent call first: `tests/x_test.py::test_y`,
    relative to `cwd`), gtest's last `[ RUN      ]` without its end, ctest's last `Start N:`
    without its result, `pytest -v`'s last node id without an outcome. None when none
    says. Pure."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):  # the last dump (its first block: the crashed
        if _FAULT_HEAD.match(lines[i]):     # thread's)
            for line in lines[i + 1:]:
                m = _FAULT_FRAME.match(line)
                if m is None:
                    break
                if _test_file(m.group(1)):
                    path = m.group(1)
                    if cwd and path.startswith(cwd.rstrip("/") + "/"):
                        path = path[len(cwd.rstrip("/")) + 1:]
                    return f"{path}::{m.group(2)}"
            break
    open_tests: dict[str, None] = {}
    for line in lines:
        for start, end in ((_GTEST_RUN, _GTEST_END), (_CTEST_START, _CTEST_END)):
            m = start.match(line)
            if m:
                open_tests[m.group(1)] = None
            m = end.match(line)
            if m:
                open_tests.pop(m.group(1), None)
        m = _PYTEST_LIVE.match(line)
        if m:
            if _PYTEST_OUTCOME.search(line[m.end():]):
                open_tests.pop(m.group(1), None)
            else:
                open_tests[m.group(1)] = None
    return next(reversed(open_tests), None) if open_tests else None


def command_name(argv: list[str]) -> str:
    """What a user calls the command's process: its runner (`pytest` for `python -m
    pytest`), else its program's basename. Pure."""
    if "-m" in argv[1:-1]:
        return argv[argv.index("-m") + 1]
    return os.path.basename(argv[0]) if argv else "?"


# ---- the runner's own "done" line --------------------------------------------------------
# the line each runner prints once its tests have run (what follows is its report and exit):
#   the default done marker of an exec job (docs/exec.md, "How an exec job ends")
DONE_MARKERS: dict[str, str] = {
    "pytest": r"^(?:=+ )?(?:(?:\d+ [a-z]+(?: [a-z]+)?(?:, )?)+|no tests ran) in [\d.]+s\b",
    "ctest": r"^(?:\d+% tests passed, \d+ tests? failed out of \d+|No tests were found)",
    "gtest": r"^\[==========\] \d+ tests? from \d+ test (?:suites?|cases?) ran\.",
    "catch2": r"^(?:All tests passed \(|test cases: |No tests ran\b)",
}
_BINARY_RUNNERS: tuple[str, ...] = ("gtest", "catch2")  # a test binary run directly


def runner_of(argv: list[str]) -> str | None:
    """The test runner a command runs, by its words: `pytest` (also `python -m pytest`,
    `py.test`) or `ctest`, anywhere in it (`sh -c 'ctest ...'` too); None for anything else
    (a test binary, a script). Pure."""
    words = [os.path.basename(w) for a in argv for w in a.split()]
    for name in ("ctest", "pytest", "py.test"):
        if name in words:
            return "pytest" if name == "py.test" else name
    return None


def done_marker(argv: list[str]) -> str:
    """The default done marker of a command: its runner's summary line (DONE_MARKERS); for
    a command that names no runner (a test binary run directly), gtest's or Catch2's. Pure."""
    runner = runner_of(argv)
    names = (runner,) if runner else _BINARY_RUNNERS
    return "|".join(f"(?:{DONE_MARKERS[n]})" for n in names)


def summarize(text: str) -> TestSummary:
    """The first runner (module doc) whose summary is in `text`; an empty summary when none
    is. Pure."""
    for parse in _RUNNERS:
        found = parse(text)
        if found is not None:
            return found
    return TestSummary()


# ---- processes killed by a signal -----------------------------------------------------------
_SUBPROCESS_DIED = re.compile(r"Command '(.+?)' died with <Signals\.(SIG\w+): \d+>")
_SUBPROCESS_NEGATIVE = re.compile(r"Command '(.+?)' returned non-zero exit status (-\d+)")
_COMPLETED = re.compile(r"CompletedProcess\(args=(.+?), returncode=(-\d+)")
_IREE_TOOL = re.compile(r"Error invoking IREE compiler tool (\S+)\s*\n(?:E\s+)?Error code: (-\d+)")
# what a shell prints for a child killed by a signal (bash: "line 1: PID Segmentation fault
#   (core dumped) CMD"; dash: the description alone), strsignal's texts
_SHELL_TEXTS: dict[str, str] = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT",
                                "Bus error": "SIGBUS", "Illegal instruction": "SIGILL",
                                "Floating point exception": "SIGFPE"}
_SHELL_NAMED = re.compile(r": \d+ +(" + "|".join(_SHELL_TEXTS) + r")(?: +\(core dumped\))? +(\S+)")
_SHELL_BARE = re.compile(r"^(" + "|".join(_SHELL_TEXTS) + r")(?: \(core dumped\))?$")


def _signal_of(returncode: str) -> str | None:
    try:
        return signal.Signals(-int(returncode)).name
    except ValueError:
        return None


def _command_line(cmd: str) -> str:
    """A command as Python printed it (a list's repr, or a string), as a shell line."""
    import ast
    import shlex

    try:
        value = ast.literal_eval(cmd.strip())
    except (ValueError, SyntaxError):
        return cmd.strip()
    if isinstance(value, (list, tuple)):
        return shlex.join(str(v) for v in value)
    return str(value)


def _command_name(cmd: str) -> str:
    """The executable's basename in a command as Python printed it: a list's repr
    (`['/x/iree-compile', '-']`) or a string (`iree-compile -`)."""
    cmd = cmd.strip()
    m = re.match(r"""^[\[(]\s*(?:PosixPath\()?['"]([^'"]+)['"]""", cmd)
    first = m.group(1) if m else cmd.split()[0] if cmd.split() else ""
    return os.path.basename(first)


def signal_deaths(text: str) -> list[SignalDeath]:
    """Every process `text` says was killed by a signal (module doc), in output order, one
    entry per (name, signal) and line. Pure."""
    out: list[SignalDeath] = []
    seen: set[tuple[str, str, str]] = set()

    def add(name: str, sig: str | None, line: str, command: str = "") -> None:
        key = (name, sig or "", line)
        if sig and key not in seen:
            seen.add(key)
            out.append(SignalDeath(name, sig, line, command))

    for m in _IREE_TOOL.finditer(text):
        add(os.path.basename(m.group(1)), _signal_of(m.group(2)), m.group(0).splitlines()[0])
    for raw in text.splitlines():
        line = raw.strip()
        for m in _SUBPROCESS_DIED.finditer(line):
            add(_command_name(m.group(1)), m.group(2), line, _command_line(m.group(1)))
        for m in _SUBPROCESS_NEGATIVE.finditer(line):
            add(_command_name(m.group(1)), _signal_of(m.group(2)), line,
                _command_line(m.group(1)))
        for m in _COMPLETED.finditer(line):
            add(_command_name(m.group(1)), _signal_of(m.group(2)), line)
        shell = _SHELL_NAMED.search(line) or _SHELL_BARE.match(line)
        if shell:
            name = shell.group(2) if shell.re is _SHELL_NAMED else ""
            add(os.path.basename(name), _SHELL_TEXTS[shell.group(1)], line)
    for name, status, line in _ctest_entries(text):
        add(name, _CTEST_SIGNALS.get(status), line)
    return sorted(out, key=lambda d: text.find(d.line))
