"""Vocabulary every stage shares (engine, store, analysis, verdicts): failure classes and
signal names. The lowest module of the package: it imports nothing of ours."""

from __future__ import annotations

import enum
import signal


class FailureClass(str, enum.Enum):
    CRASH = "crash"
    HANG = "hang"
    TEARDOWN_HANG = "teardown_hang"
    ERROR = "error"
    MISCOMPARE = "miscompare"

    def describe(self) -> str:
        return {
            FailureClass.CRASH: "worker died by a signal or a non-zero exit we did not cause",
            FailureClass.HANG: "a step ran past --timeout",
            FailureClass.TEARDOWN_HANG: "work done, but release or process exit never finished",
            FailureClass.ERROR: "IREE returned an error status",
            FailureClass.MISCOMPARE: "wrong result (vs numpy reference or first result)",
        }[self]


ALL_CLASSES: tuple[str, ...] = tuple(c.value for c in FailureClass)


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"
