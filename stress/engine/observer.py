"""What an observer of a running soak (the gate's sequential test) is told, and asked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from stress.engine.jobs import Job


@dataclass(frozen=True)
class Outcome:
    """One job's end as an observer sees it: failed when it had an error or miscompare, or
    when a crash or hang was pinned on it (job None: a process failure pinned on no job)."""

    job: Job | None
    pid: int
    failed: bool
    classes: tuple[str, ...]


class Observer(Protocol):
    """Watches a run as it goes (the gate's sequential test): told every job outcome (and may
    answer with a reason to stop at once), asked once a second whether the run should stop
    (a reason) or go on (None)."""

    def job(self, outcome: Outcome) -> str | None: ...

    def should_stop(self) -> str | None: ...
