"""Who failed, in a user's words, for a failure mode of the user's own command (exec): the
process that crashed or hung (the command's own, or a process it started: "iree-lld (child
of pytest)"), its signal, and the test that was running ("while running
tests/x_test.py::test_y"), or that it had finished its tests (a crash or hang after the test
runner's summary line). Read from the engine's facts in each failure's evidence
(`command_name`, `child_crash`, `running_test`, `done_marker_seen`, `tests`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from stress.analysis.signatures import Signature
from stress.vocab import FailureClass

TESTS_NAMED: int = 2  # running tests named in the line (the most frequent first), then "..."
_LABELS: dict[str, str] = {FailureClass.CRASH.value: "crashed",
                           FailureClass.HANG.value: "stuck",
                           FailureClass.TEARDOWN_HANG.value: "stuck"}


def label(s: Signature) -> str | None:
    """The answer's row label for `culprit`'s line (None: no line for this class)."""
    return _LABELS.get(s.cls)


def _evidence(row: dict[str, Any]) -> dict[str, Any]:
    ev = row.get("evidence") or {}
    return ev if isinstance(ev, dict) else {}


def _test_of(ev: dict[str, Any]) -> str | None:
    test = ev.get("running_test")
    if test:
        return str(test)
    failed = (ev.get("tests") or {}).get("failed") or []
    return str(failed[0]) if ev.get("child_crash") and failed else None


def culprit(s: Signature) -> str | None:
    """`iree-lld (child of pytest) SIGSEGV while running tests/x_test.py::test_y` for an exec
    crash or hang; None for other engines' modes and other classes. Pure."""
    if label(s) is None:
        return None
    rows = [r for r in s.rows if "command_name" in _evidence(r)]
    evs = [_evidence(r) for r in rows]
    if not evs:
        return None
    command = Counter(str(e["command_name"]) for e in evs).most_common(1)[0][0]
    children = Counter(str((e.get("child_crash") or {}).get("name") or "")
                       for e in evs if e.get("child_crash"))
    who = f"{children.most_common(1)[0][0]} (child of {command})" if children else command
    what = (s.key.signal or "crashed") if s.cls == FailureClass.CRASH.value else "hung"
    head = f"{who} {what}"
    if all(r.get("last_step") == "worker-exit" for r in rows):  # after the done marker
        ran = [(e.get("tests") or {}).get("ran") for e in evs]
        counted = f"{sum(r for r in ran if r):,} tests run, " if any(ran) else ""
        return (f"{head} at its exit, after its tests were done ({counted}its runner's "
                "summary printed)")
    tests = Counter(t for e in evs for t in [_test_of(e)] if t)
    if not tests:
        return f"{head} while running its tests (which test: not said by its output)"
    shown = [f"{t}" + (f" ({n:,}x)" if len(tests) > 1 else "")
             for t, n in tests.most_common(TESTS_NAMED)]
    more = ", ..." if len(tests) > TESTS_NAMED else ""
    return f"{head} while running {', '.join(shown)}{more}"
