"""Which shard of the seeded plan this machine runs, from the command line or from the
environment of the engine that started it (a CI matrix, a Kubernetes Indexed Job, a Slurm
array, a GoogleTest-style runner). No scheduler of our own: each engine already numbers its
tasks; we only read the number.

On the command line shards are 1-based (`--shard 2/4`, as cargo-nextest's `--partition`);
inside they are 0-based (`SoakConfig.shard == (1, 4)`). Sources, first one set wins:

| source | variables | base |
|---|---|---|
| `--shard K/N` | | 1 |
| iree-stress | `IREE_STRESS_SHARD=K/N` | 1 |
| Kubernetes Indexed Job | `JOB_COMPLETION_INDEX` + `IREE_STRESS_SHARDS` (the total) | 0 |
| Slurm array | `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`, `SLURM_ARRAY_TASK_MIN` | MIN |
| GoogleTest | `GTEST_SHARD_INDEX`, `GTEST_TOTAL_SHARDS` | 0 |
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from stress.errors import UsageError

_SPEC = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
WHOLE: tuple[int, int] = (0, 1)  # the unsharded plan


class ShardSource(str, enum.Enum):
    NONE = "none"
    OPTION = "--shard"
    IREE_STRESS = "IREE_STRESS_SHARD"
    KUBERNETES = "JOB_COMPLETION_INDEX"
    SLURM = "SLURM_ARRAY_TASK_ID"
    GTEST = "GTEST_SHARD_INDEX"

    def describe(self) -> str:
        return {ShardSource.NONE: "not sharded",
                ShardSource.OPTION: "the --shard option",
                ShardSource.IREE_STRESS: "IREE_STRESS_SHARD",
                ShardSource.KUBERNETES: "a Kubernetes Indexed Job (JOB_COMPLETION_INDEX, "
                                        "IREE_STRESS_SHARDS)",
                ShardSource.SLURM: "a Slurm array (SLURM_ARRAY_TASK_ID/COUNT/MIN)",
                ShardSource.GTEST: "GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS"}[self]


@dataclass(frozen=True)
class Shard:
    """A 0-based shard `index` of `count`, and where it came from."""

    index: int
    count: int
    source: ShardSource

    @property
    def pair(self) -> tuple[int, int]:
        return self.index, self.count

    def describe(self) -> str:
        if self.count == 1:
            return "whole plan"
        return f"shard {self.index + 1}/{self.count} (from {self.source.describe()})"


def parse_spec(text: str, what: str = "--shard") -> tuple[int, int]:
    """`K/N`, 1-based, to the 0-based pair (K-1, N). `0/N`, K > N or N < 1 is a UsageError."""
    m = _SPEC.fullmatch(text)
    if not m:
        raise UsageError(f"{what} wants K/N (1-based, e.g. 2/4), got {text!r}")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"{what} wants K/N with 1 <= K <= N (shards are 1-based), got {text!r}")
    return k - 1, n


def _int(env: Mapping[str, str], name: str) -> int:
    text = env.get(name, "").strip()
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{name} must be an integer, got {text!r}") from None


def _zero_based(index: int, count: int, what: str) -> tuple[int, int]:
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"{what}: shard index {index} is outside 0..{count - 1}")
    return index, count


def resolve(option: str | None, env: Mapping[str, str]) -> Shard:
    """The shard to run: `option` (the --shard text) first, then the environment (module doc).
    A variable that is set but unusable is a UsageError naming it (a CI job that silently ran
    the whole plan on every machine would count each job N times)."""
    if option:
        return Shard(*parse_spec(option), ShardSource.OPTION)
    if env.get("IREE_STRESS_SHARD", "").strip():
        return Shard(*parse_spec(env["IREE_STRESS_SHARD"], "IREE_STRESS_SHARD"),
                     ShardSource.IREE_STRESS)
    if env.get("JOB_COMPLETION_INDEX", "").strip():
        if not env.get("IREE_STRESS_SHARDS", "").strip():
            raise UsageError("JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but "
                             "IREE_STRESS_SHARDS (the job's completions) is not")
        return Shard(*_zero_based(_int(env, "JOB_COMPLETION_INDEX"),
                                  _int(env, "IREE_STRESS_SHARDS"), "JOB_COMPLETION_INDEX"),
                     ShardSource.KUBERNETES)
    if env.get("SLURM_ARRAY_TASK_ID", "").strip():
        if not env.get("SLURM_ARRAY_TASK_COUNT", "").strip():
            raise UsageError("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not")
        first = _int(env, "SLURM_ARRAY_TASK_MIN") if env.get("SLURM_ARRAY_TASK_MIN", "").strip() \
            else 0
        return Shard(*_zero_based(_int(env, "SLURM_ARRAY_TASK_ID") - first,
                                  _int(env, "SLURM_ARRAY_TASK_COUNT"),
                                  "SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN"),
                     ShardSource.SLURM)
    if env.get("GTEST_SHARD_INDEX", "").strip() or env.get("GTEST_TOTAL_SHARDS", "").strip():
        return Shard(*_zero_based(_int(env, "GTEST_SHARD_INDEX"),
                                  _int(env, "GTEST_TOTAL_SHARDS"), "GTEST_SHARD_INDEX"),
                     ShardSource.GTEST)
    return Shard(*WHOLE, ShardSource.NONE)
