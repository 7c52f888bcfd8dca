"""Fault injection (`--inject KIND@STEP[:PROB]`): real faults raised inside a worker at a step,
right after the journal recorded that step's begin, to prove the harness catches each kind.

`segv` is a genuine native fault (libc memset on an unmapped address), not a Python exception.
The same specs travel in the worker environment variable IREE_STRESS_INJECT, so a runtime stack
under test can carry a fault too.
"""

from __future__ import annotations

import ctypes
import enum
import os
import random
import signal
from dataclasses import dataclass
from pathlib import Path

from stress.engine.journal import SlotWriter, Step
from stress.errors import UsageError

ENV_VAR = "IREE_STRESS_INJECT"


class Kind(str, enum.Enum):
    SEGV = "segv"
    ABORT = "abort"
    KILL = "kill"
    HANG = "hang"
    EXIT = "exit"
    RAISE = "raise"
    CORRUPT = "corrupt"

    def describe(self) -> str:
        return {
            Kind.SEGV: "SIGSEGV in native code (libc memset on an unmapped address)",
            Kind.ABORT: "abort() -> SIGABRT",
            Kind.KILL: "SIGKILL to the worker itself",
            Kind.HANG: "block forever in a native call (libc pause)",
            Kind.EXIT: "_exit(7) without cleanup",
            Kind.RAISE: "raise an exception from the step (an IREE-like error)",
            Kind.CORRUPT: "perturb the output that is read back next (a wrong result)",
        }[self]


class InjectedError(RuntimeError):
    """The `raise` fault: looks to the worker like an IREE status error at `step`."""

    def __init__(self, step: Step):
        self.step = step
        super().__init__(f"injected fault (raise) at {step.label}")


@dataclass(frozen=True)
class Spec:
    kind: Kind
    step: Step
    prob: float
    while_step: Step | None = None  # fire only while another thread has this step in flight

    def text(self) -> str:
        cond = f"?while={self.while_step.label}" if self.while_step else ""
        return f"{self.kind.value}@{self.step.label}:{self.prob:g}{cond}"


def parse(text: str) -> Spec:
    """`segv@invoke:0.01`, `hang@release` (probability 1), `raise@device-release:1?while=
    device-create` (only while another thread of the process is creating a device: a
    cross-thread race made to order)."""
    try:
        body, _, cond = text.partition("?")
        kind_text, rest = body.split("@", 1)
        step_text, _, prob_text = rest.partition(":")
        kind = Kind(kind_text.strip().lower())
        step = Step.parse(step_text)
        prob = float(prob_text) if prob_text else 1.0
        while_step = None
        if cond:
            key, _, value = cond.partition("=")
            if key.strip() != "while":
                raise ValueError(cond)
            while_step = Step.parse(value)
    except (ValueError, KeyError):
        kinds = ", ".join(k.value for k in Kind)
        steps = ", ".join(s.label for s in Step if s is not Step.INJECT)
        raise UsageError(f"bad --inject {text!r}: want KIND@STEP[:PROB][?while=STEP], KIND in "
                         f"{kinds}; STEP in {steps}") from None
    if not 0.0 <= prob <= 1.0:
        raise UsageError(f"bad --inject {text!r}: probability must be within 0..1")
    return Spec(kind, step, prob, while_step)


def parse_env(value: str | None) -> list[Spec]:
    return [parse(part) for part in (value or "").split(",") if part.strip()]


_libc = ctypes.CDLL(None, use_errno=True)


class Injector:
    """Installed as the journal's begin hook in a worker."""

    def __init__(self, specs: list[Spec], seed: int, journal_path: str | None = None):
        self.journal_path = journal_path  # to see other threads' steps (`?while=`)
        self.by_step: dict[int, list[Spec]] = {}
        for s in specs:
            self.by_step.setdefault(int(s.step), []).append(s)
        self._rng = random.Random(seed)
        self.corrupt_pending: dict[int, str] = {}  # slot -> step label: perturb its next output

    def __call__(self, writer: SlotWriter, step: Step) -> None:
        specs = self.by_step.get(int(step))
        if not specs:
            return
        for spec in specs:
            if spec.while_step is not None and not self._other_in_flight(writer.slot,
                                                                         spec.while_step):
                continue
            if self._rng.random() < spec.prob:
                # The marker makes the failing thread unambiguous even for kill/exit, which
                # leave no faulthandler trace behind.
                writer.mark_injection(step, _KIND_CODES[spec.kind])
                fire(spec.kind, writer.slot, step, self)


    def _other_in_flight(self, slot: int, step: Step) -> bool:
        """Whether another thread's newest journal record begins `step` right now."""
        if self.journal_path is None:
            return False
        from stress.engine.journal import JournalReader, Phase

        reader = JournalReader(Path(self.journal_path))
        try:
            return any(s != slot and code == step and phase == Phase.BEGIN
                       for s, _ts, code, phase, _job in reader.latest())
        finally:
            reader.close()


_KIND_CODES = {k: i + 1 for i, k in enumerate(Kind)}


def fire(kind: Kind, slot: int, step: Step, injector: Injector | None = None) -> None:
    if kind is Kind.SEGV:
        ctypes.memset(8, 0, 64)  # writes to page zero: SIGSEGV inside libc
    elif kind is Kind.ABORT:
        os.abort()
    elif kind is Kind.KILL:
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind is Kind.HANG:
        while True:
            _libc.pause()  # native, releases the GIL; py-spy/gdb show it as the stuck frame
    elif kind is Kind.EXIT:
        os._exit(7)
    elif kind is Kind.RAISE:
        raise InjectedError(step)
    elif kind is Kind.CORRUPT and injector is not None:
        injector.corrupt_pending[slot] = step.label
