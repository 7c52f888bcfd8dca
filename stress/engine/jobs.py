"""Jobs and the seeded schedule. The whole job sequence derives from (--seed, programs,
patterns), so two runs with the same seed run the same jobs in the same order, and a shard
(`index/count`) takes every count-th job: deterministic splits across CI machines."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from stress.programs.program import Program

# Invocations per job, per pattern: sized so one job takes roughly 5-50 ms on cpu; per-call
# and process-per-job pay a device (or a process) per call, which is slow on GPUs by nature.
BASE_INVOCATIONS: dict[str, int] = {
    "shared": 100, "per-thread": 100, "per-call": 8, "churn": 24, "instance-churn": 12,
    "cross-thread": 24, "process-per-job": 20,
}
_ELEMENTS_FOR_FULL_JOB: int = 1 << 16  # larger programs get proportionally fewer invocations


@dataclass(frozen=True)
class Job:
    index: int
    program: str
    pattern: str
    seed: int
    invocations: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Job:
        return Job(int(d["index"]), d["program"], d["pattern"], int(d["seed"]),
                   int(d["invocations"]))

    def describe(self) -> str:
        return f"{self.program} [{self.pattern}] seed={self.seed} n={self.invocations}"


def invocations_for(pattern: str, program: Program, scale: float = 1.0) -> int:
    base = BASE_INVOCATIONS.get(pattern, 20) * scale
    shrink = min(1.0, _ELEMENTS_FOR_FULL_JOB / max(1, program.elements))
    return max(1, int(round(base * max(shrink, 0.05))))


def schedule(seed: int, programs: list[Program], patterns: list[str],
             shard: tuple[int, int] = (0, 1), scale: float = 1.0,
             job_seed: int | None = None) -> Iterator[Job]:
    """Endless deterministic job stream. Each block of len(patterns) consecutive jobs holds every
    pattern once, in a seeded order; program and job seed come from a generator keyed by
    (seed, job index); the shard of a job is drawn from its own generator, so shards never alias
    with the pattern rotation."""
    index_shard, count = shard
    n = len(patterns)
    perm: list[int] = []
    for i in itertools.count():
        if i % n == 0:
            perm = [int(x) for x in np.random.default_rng([seed, i // n, 0xB1]).permutation(n)]
        if count > 1 and int(np.random.default_rng([seed, i, 0x5A]).integers(count)) != index_shard:
            continue
        rng = np.random.default_rng([seed, i])
        pattern = patterns[perm[i % n]]
        program = programs[int(rng.integers(len(programs)))]
        drawn = int(rng.integers(1 << 31))
        yield Job(i, program.name, pattern, drawn if job_seed is None else job_seed,
                  invocations_for(pattern, program, scale))
