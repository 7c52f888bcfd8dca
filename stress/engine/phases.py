"""Time and count each phase of a run (compile, soak, teardown) into its statistics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - t0

    def record(self, name: str, seconds: float, count: int) -> None:
        """A phase measured elsewhere (the parent's CPU over the soak: `parent_cpu`)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.count(name, count)

    def count(self, name: str, n: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def rows(self) -> list[tuple[str, float, int]]:
        return [(name, s, self.counts.get(name, 0)) for name, s in self.seconds.items()]
