"""Jobs and the seeded schedule. The whole job sequence derives from (--seed, programs,
patterns), so two runs with the same seed run the same jobs in the same order, and a shard
(`index/count`) takes every count-th job: deterministic splits across CI machines."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stress.programs.program import Program
from stress.vocab import DEFAULT_INVOCATIONS, PATTERNS

# Invocations per job, per pattern (the registry's, stress/vocab.py)
BASE_INVOCATIONS: dict[str, int] = {p.name: p.invocations for p in PATTERNS.values()}
_ELEMENTS_FOR_FULL_JOB: int = 1 << 16  # larger programs get proportionally fewer invocations


@dataclass(frozen=True)
class Job:
    index: int
    program: str
    pattern: str
    seed: int
    invocations: int

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "program": self.program, "pattern": self.pattern,
                "seed": self.seed, "invocations": self.invocations}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Job:
        return Job(int(d["index"]), d["program"], d["pattern"], int(d["seed"]),
                   int(d["invocations"]))

    def describe(self) -> str:
        return f"{self.program} [{self.pattern}] seed={self.seed} n={self.invocations}"


_MASK64 = (1 << 64) - 1


def mix(*keys: int) -> int:
    """SplitMix64 over the keys: a well-distributed 64-bit hash, identical on every platform."""
    h = 0x9E3779B97F4A7C15
    for key in keys:
        h = (h ^ (key & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h


def invocations_for(pattern: str, program: Program, scale: float = 1.0) -> int:
    base = BASE_INVOCATIONS.get(pattern, DEFAULT_INVOCATIONS) * scale
    shrink = min(1.0, _ELEMENTS_FOR_FULL_JOB / max(1, program.elements))
    return max(1, int(round(base * max(shrink, 0.05))))


def schedule(seed: int, programs: list[Program], patterns: list[str],
             shard: tuple[int, int] = (0, 1), scale: float = 1.0,
             job_seed: int | None = None, start: int = 0) -> Iterator[Job]:
    """Endless deterministic job stream. Each block of len(patterns) consecutive jobs holds every
    pattern once, in a seeded order; program, job seed and shard are independent hashes of
    (seed, job index), so shards never alias with the pattern rotation. Pure integer hashing:
    the parent draws ~200 jobs a second and numpy generators cost ~100 us each. `start`: the
    same stream from job index `start` on (a resumed plan)."""
    index_shard, count = shard
    n = len(patterns)
    perm: list[int] = []
    for i in itertools.count(start - start % n):
        if i % n == 0:
            perm = list(range(n))
            for k in range(n - 1, 0, -1):  # Fisher-Yates, keyed by (seed, block)
                j = mix(seed, i // n, 0xB1, k) % (k + 1)
                perm[k], perm[j] = perm[j], perm[k]
        if i < start or (count > 1 and mix(seed, i, 0x5A) % count != index_shard):
            continue
        pattern = patterns[perm[i % n]]
        program = programs[mix(seed, i, 1) % len(programs)]
        drawn = mix(seed, i, 2) & 0x7FFFFFFF
        yield Job(i, program.name, pattern, drawn if job_seed is None else job_seed,
                  invocations_for(pattern, program, scale))
