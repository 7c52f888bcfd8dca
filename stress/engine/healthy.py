"""Healthy windows: what the busy threads of running workers were doing when nothing failed, the
baseline that analysis compares each failure's window against (analysis/correlation.py).
Raw journal entries of every thread are stored (the sampled one marked failing); analysis
derives the features."""

from __future__ import annotations

import random
from collections.abc import Iterable

from stress.engine.attribution import attribute, window_tokens
from stress.engine.records import Records
from stress.engine.workermanage import State, WorkerHandle

HEALTHY_SAMPLES_MAX: int = 4000  # per run (a reservoir: uniform over the whole run)
_SAMPLE_RECORDS: int = 40  # per thread: a 12-step window plus what is still in flight


class HealthySampler:
    """Snapshots of the recent steps of every busy thread, kept as a reservoir so that a long
    run's sample stays uniform over the whole run."""

    def __init__(self, store: Records, run_id: str, seed: int):
        self.store, self.run_id = store, run_id
        self.taken = 0  # windows seen (the reservoir's count)
        self.rng = random.Random(seed)

    def sample(self, workers: Iterable[WorkerHandle]) -> None:
        """One window per busy thread of every running worker that holds jobs."""
        for h in [h for h in workers if h.state is State.RUNNING and h.outstanding]:
            self._sample_worker(h)

    def _sample_worker(self, h: WorkerHandle) -> None:
        reader = h.journal()
        if reader is None:
            return
        views = reader.all_slots(last=_SAMPLE_RECORDS)
        for view in views:
            if not view.in_flight():
                continue
            attr = attribute(reader, "", slot_hint=view.slot, views=views)
            job = h.outstanding.get(attr.job_index) if attr.job_index is not None else None
            self.taken += 1
            slot = self.taken
            if slot > HEALTHY_SAMPLES_MAX:
                slot = self.rng.randint(1, self.taken)
                if slot > HEALTHY_SAMPLES_MAX:
                    continue
            self.store.add_window(self.run_id, "healthy", job.pattern if job else None,
                                  window_tokens(attr.steps), attr.in_flight, slot,
                                  steps=attr.steps)
