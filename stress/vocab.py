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
    FAILED = "failed"  # exec jobs only: the user's command said its tests failed (a non-zero
    #   exit, no signal, no process of its group killed by one); a rated class, as errors are

    def describe(self) -> str:
        return {
            FailureClass.CRASH: "a process died by a signal (a worker, the user's command or a "
                                "process it started), or a worker's non-zero exit we did not "
                                "cause",
            FailureClass.HANG: "a step ran past --timeout",
            FailureClass.TEARDOWN_HANG: "work done, but release or process exit never finished",
            FailureClass.ERROR: "IREE returned an error status",
            FailureClass.MISCOMPARE: "wrong result (vs numpy reference or first result)",
            FailureClass.FAILED: "the command exited non-zero, no process of it killed by a "
                                 "signal: its tests failed",
        }[self]


ALL_CLASSES: tuple[str, ...] = tuple(c.value for c in FailureClass)


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


class Engine(str, enum.Enum):
    """What runs a soak's jobs (docs/exec.md, docs/native.md)."""

    PYTHON = "python"  # our workers: every device they create is counted
    NATIVE = "native"  # iree-run-module / iree-benchmark-module: one device per tool process
    EXEC = "exec"  # the user's own command: its devices are its own business

    @classmethod
    def of(cls, name: str | None) -> Engine:
        try:
            return cls(name or cls.PYTHON.value)
        except ValueError:
            return cls.PYTHON

    @property
    def knows_devices(self) -> bool:
        """Whether we know the devices its jobs create (exec: we never see them)."""
        return self is not Engine.EXEC

    @property
    def counts_releases(self) -> bool:
        """Whether its jobs count their device releases (full teardowns, handle releases):
        only our workers see them; a tool or a command releases its devices unseen."""
        return self is Engine.PYTHON

    @property
    def journals(self) -> bool:
        """Whether its threads journal their HAL steps (what other threads did is known)."""
        return self is Engine.PYTHON

    def process_exits(self) -> str:
        """What a process exit of this engine is, in the summary's exposure line."""
        return {Engine.PYTHON: "process exits after device use",
                Engine.NATIVE: "tool process exits",
                Engine.EXEC: "command process exits"}[self]
