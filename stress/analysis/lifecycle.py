"""The lifecycle phase of a failure (issue 39): `work`, `device-release`, `driver-destroy` or
`process-exit`, from the journal step and the failing thread's native frames, with the rules
as data in siglists/phases.txt (beside the signature lists): a crash at teardown surfaces in
frames that are not the culprit's, and *when* it happened tells such failures apart. The
phase rides along with a signature (`phase` in summary.json and every report); it is not part
of the key, so ids stay what they were."""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stress.analysis.framerules import SIGLISTS
from stress.stacktext import Frame

PHASES_FILE: str = "phases.txt"
ANY: str = "*"


class Phase(str, enum.Enum):
    WORK = "work"
    DEVICE_RELEASE = "device-release"
    DRIVER_DESTROY = "driver-destroy"
    PROCESS_EXIT = "process-exit"

    def describe(self) -> str:
        return {Phase.WORK: "while devices were created, programs loaded, run or copied",
                Phase.DEVICE_RELEASE: "while a device was released",
                Phase.DRIVER_DESTROY: "while the HAL driver was destroyed (its GPU library "
                                      "closed)",
                Phase.PROCESS_EXIT: "after main: exit handlers, ELF destructors, _dl_fini, "
                                    "the interpreter's finalization"}[self]


@dataclass(frozen=True)
class FrameRule:
    phase: Phase | None  # None: `*`, the detail only
    pattern: re.Pattern[str]
    detail: str
    teardown_only: bool = False  # `teardown-frame`: during a work step, the detail only


@dataclass(frozen=True)
class PhaseRules:
    steps: dict[str, Phase]
    frames: tuple[FrameRule, ...]

    @classmethod
    def load(cls, path: Path) -> PhaseRules:
        steps: dict[str, Phase] = {}
        frames: list[FrameRule] = []
        text = path.read_text() if path.exists() else ""
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            kind, _, rest = line.partition(" ")
            try:
                if kind == "step":
                    step, phase = rest.split()
                    steps[step] = Phase(phase)
                elif kind in ("frame", "teardown-frame"):
                    head, sep, detail = rest.partition(" => ")
                    phase, _, regex = head.strip().partition(" ")
                    if not sep or not regex.strip():
                        raise ValueError("want `frame PHASE REGEX => DETAIL`")
                    frames.append(FrameRule(None if phase == ANY else Phase(phase),
                                            re.compile(regex.strip()), detail.strip(),
                                            kind == "teardown-frame"))
                else:
                    raise ValueError("a line starts with `step`, `frame` or `teardown-frame`")
            except (ValueError, re.error) as exc:
                raise ValueError(f"{path}:{n}: {exc}: {raw.strip()!r}") from exc
        return cls(steps, tuple(frames))

    def of_step(self, step: str | None) -> Phase:
        return self.steps.get(step or "", Phase.WORK)

    def of_frames(self, frames: Sequence[Frame], step: str | None = None
                  ) -> tuple[Phase, str] | None:
        """(phase, detail) from one thread's frames (innermost first), None when no frame
        rule matches one of them with a phase. `step`: the journal step, when known; during a
        work step a `teardown-frame` rule gives only its detail (a library dlclosed mid-work
        is not a driver's destroy)."""
        work = step is not None and self.of_step(step) is Phase.WORK
        hits = [(i, r) for i, f in enumerate(frames) if f.function and not f.python
                for r in [self._rule(f.function)] if r is not None]
        hits = [(i, FrameRule(None, r.pattern, r.detail) if work and r.teardown_only else r)
                for i, r in hits]
        decided = [(i, r) for i, r in hits if r.phase is not None]
        if not decided:
            return None
        phase = decided[-1][1].phase
        assert phase is not None
        i, rule = next((i, r) for i, r in hits if r.phase in (None, phase))
        return phase, _detail(rule.detail, frames, i)

    def _rule(self, function: str) -> FrameRule | None:
        return next((r for r in self.frames if r.pattern.search(function)), None)


def _module(frames: Sequence[Frame], i: int, step: int) -> str:
    """The library of the nearest frame beside frame i (step -1: inside it, +1: outside it);
    a frame with debug info names its source file instead (gdb prints `at libfault.c:232`,
    not the library), said with its function: `fault_at_exit in libfault.c`."""
    j = i + step
    while 0 <= j < len(frames):
        f = frames[j]
        if f.module:
            return f.module
        if f.source and f.function:
            return f"{f.function} in {f.source.rsplit('/', 1)[-1].rsplit(':', 1)[0]}"
        j += step
    return "?"


def _detail(template: str, frames: Sequence[Frame], i: int) -> str:
    return template.replace("{lib}", _module(frames, i, -1)) \
        .replace("{caller}", _module(frames, i, 1))


@functools.lru_cache(maxsize=4)
def rules(folder: Path = SIGLISTS) -> PhaseRules:
    return PhaseRules.load(folder / PHASES_FILE)


def phase_of(step: str | None, threads: Sequence[Sequence[Frame]] = ()) -> tuple[Phase, str]:
    """(phase, detail): the first of `threads` (the failing thread first, then the others
    that speak for the failure, e.g. the blamed thread of a hang) whose frames decide it, else
    the step's phase with no detail."""
    r = rules()
    for frames in threads:
        hit = r.of_frames(frames, step)
        if hit is not None:
            return hit
    return r.of_step(step), ""


def text(phase: str, detail: str = "") -> str:
    """`process-exit (ELF destructor of libfault.so)`."""
    return f"{phase} ({detail})" if detail else phase
