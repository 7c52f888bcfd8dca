"""Trials of compare and bisect: one whole soak under one runtime stack (`Trial`), who runs
them (`TrialRunner`: the real soaks in compare.SoakTrials, fakes in tests and simulations), and
their cache on disk (`TrialCache`, `Cached`), keyed by stack and plan so that bisect reuses a
compare's trials and resumes after an interruption.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from stress.fs import atomic_write

TRIALS_DIR: str = "trials"
PLAN_FILE: str = "plan.json"  # in each plan's folder of trials: its family (the plan without
#   the seed), so a bisect finds a compare's trials of the same plan (bisect.related_caches)


@dataclass(frozen=True)
class Trial:
    """One soak under one stack, as compare and bisect need it (and cache it on disk)."""

    stack: str
    index: int
    seed: int
    failed: bool
    jobs: int = 0
    failures: int = 0
    signatures: tuple[tuple[str, str], ...] = ()  # (id, class|...|frame key text)
    harness: str = ""  # why this trial is not a result ('' when it is one)
    run_dir: str = ""
    runtime: str = ""
    runtime_path: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Trial:
        return Trial(**{**d, "signatures": tuple(tuple(s) for s in d.get("signatures", ()))})


class TrialRunner(Protocol):
    """Runs trial `index` (seed `seed`) of the plan under one stack: the real one runs a soak
    (SoakTrials); tests and simulations use fakes."""

    def run(self, stack: str, index: int, seed: int) -> Trial: ...


class TrialCache:
    """Trials on disk, one JSON file each, keyed by stack (its name and build key) and plan:
    bisect reuses every trial already run and resumes after an interruption by reading them.
    `family` (the plan without its seed) is written next to them when given."""

    def __init__(self, root: Path, plan_key: str, stack_keys: dict[str, str] | None = None,
                 family: str = ""):
        self.root, self.plan_key = root, plan_key
        self.stack_keys = stack_keys or {}
        self.family = family

    def path(self, stack: str, index: int) -> Path:
        key = self.stack_keys.get(stack, "")
        return (self.root / TRIALS_DIR / self.plan_key / f"{stack}-{key}" if key else
                self.root / TRIALS_DIR / self.plan_key / stack) / f"trial-{index:04d}.json"

    def get(self, stack: str, index: int) -> Trial | None:
        p = self.path(stack, index)
        try:
            return Trial.from_dict(json.loads(p.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def stored(self, stack: str) -> list[Trial]:
        """Every trial on disk for this stack, by index."""
        found = []
        for p in sorted(self.path(stack, 0).parent.glob("trial-*.json")):
            try:
                found.append(Trial.from_dict(json.loads(p.read_text())))
            except (OSError, ValueError, TypeError):
                continue
        return found

    def put(self, trial: Trial) -> None:
        atomic_write(self.path(trial.stack, trial.index),
                     json.dumps(trial.as_dict(), indent=1).encode())
        plan_file = self.root / TRIALS_DIR / self.plan_key / PLAN_FILE
        if self.family and not plan_file.exists():
            atomic_write(plan_file, json.dumps({"plan": self.plan_key,
                                                "family": self.family}).encode())


class Cached:
    """A TrialRunner that answers from the cache first and stores what it runs; harness
    failures are not stored (they say nothing about the stack and may be fixed)."""

    def __init__(self, runner: TrialRunner, cache: TrialCache):
        self.runner, self.cache = runner, cache
        self.ran = self.reused = 0

    def run(self, stack: str, index: int, seed: int) -> Trial:
        hit = self.cache.get(stack, index)
        if hit is not None:
            self.reused += 1
            return hit
        trial = self.runner.run(stack, index, seed)
        self.ran += 1
        if not trial.harness:
            self.cache.put(trial)
        return trial


def plan_key(parts: dict[str, Any]) -> str:
    """Trials are comparable only under the same plan (programs, patterns, duration, seed...)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()
                          ).hexdigest()[:12]
