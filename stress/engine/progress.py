"""Live progress on stderr: a redrawn line on a terminal, plain periodic lines in CI."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from stress.vocab import ALL_CLASSES, FailureClass

if TYPE_CHECKING:
    from stress.engine.attribution import Attribution
    from stress.engine.config import SoakConfig
    from stress.engine.jobs import Job
    from stress.engine.session import Session
    from stress.engine.workermanage import WorkerHandle

_TTY_PERIOD_S: float = 0.5
_PLAIN_PERIOD_S: float = 10.0  # one line per 10 s keeps CI logs readable


class Progress:
    def __init__(self, config: SoakConfig, session: Session):
        self.cfg = config
        self.s = session
        self.enabled = config.progress
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.last_invocations = 0
        self.last_time = time.monotonic()
        self.rate = 0.0

    def line(self) -> str:
        s = self.s
        now = time.monotonic()
        elapsed = now - s.started
        dt = now - self.last_time
        if dt > 0:
            inst = (s.invocations - self.last_invocations) / dt
            self.rate = inst if self.rate == 0 else 0.7 * self.rate + 0.3 * inst
        self.last_invocations, self.last_time = s.invocations, now
        fails = " ".join(f"{c}={s.failures_by_class[c]}" for c in ALL_CLASSES
                         if s.failures_by_class[c])
        if self.cfg.duration_s:
            remain = f"{max(0.0, self.cfg.duration_s - elapsed):5.0f}s left"
        elif self.cfg.invocations:
            remain = f"{min(100.0, 100.0 * s.invocations / self.cfg.invocations):5.1f}%"
        else:
            remain = ""
        live = sum(1 for _ in s.workers)
        return (f"[{elapsed:6.1f}s] {s.invocations:>9,} invocations  {self.rate:8,.0f}/s  "
                f"workers {live}  restarts {s.restarts}  "
                f"failures {sum(s.failures_by_class.values())}"
                f"{' (' + fails + ')' if fails else ''}  {remain}")

    def tick(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        period = _TTY_PERIOD_S if self.tty else _PLAIN_PERIOD_S
        if now - self.last < period:
            return
        self.last = now
        if self.tty:
            sys.stderr.write("\r" + self.line()[:160].ljust(160))
        else:
            sys.stderr.write(self.line() + "\n")
        sys.stderr.flush()

    def failure(self, cls: FailureClass, h: WorkerHandle, job: Job | None,
                attr: Attribution, sig: str | None, folder: Path | None) -> None:
        if not self.enabled or cls in (FailureClass.ERROR, FailureClass.MISCOMPARE):
            return
        what = {FailureClass.CRASH: f"crashed ({sig or 'non-zero exit'})",
                FailureClass.HANG: "hung", FailureClass.TEARDOWN_HANG: "hung in teardown",
                FailureClass.FAILED: "failed its tests (non-zero exit)"}[cls]
        job_text = f"{job.program} [{job.pattern}]" if job else "no job"
        where = f" -> {folder}" if folder else ""
        prefix = "\n" if self.tty else ""
        sys.stderr.write(f"{prefix}FAIL worker {h.name} {what} while running {job_text}, "
                         f"last step {attr.last_step}{where}\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write(("\r" if self.tty else "") + self.line() + "\n")
            sys.stderr.flush()
