"""What a soak was asked for: the options of `iree-stress soak` (and of the commands that run
soaks: gate, compare, bisect, repro), as the CLI parsed them. Light: the verdicts import it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.engine.config import DEFAULT_EVIDENCE_BUDGET
from stress.vocab import Engine, Numerics


@dataclass
class SoakOptions:
    target: str | None
    device: str | None
    workers: int | None
    threads: int
    patterns: list[str]
    programs: list[str]
    program_files: list[str]
    duration_s: float | None
    invocations: int | None
    seed: int | None
    env: dict[str, str]
    max_failures: int | None
    results: Path | None
    timeout_s: float
    teardown_timeout_s: float
    max_worker_restarts: int
    inject: list[str]
    python: str | None
    shard: tuple[int, int]
    job_seed: int | None
    cache_dir: Path
    compile_jobs: int
    progress: bool
    artifacts: Path | None = None
    argv: list[str] = field(default_factory=list)
    engine: str = Engine.PYTHON.value  # python | exec (the command after `--`) | native
    command: list[str] = field(default_factory=list)  # exec: argv after `--`
    done_regex: str | None = None  # exec: the command's "work finished" line
    name: str | None = None  # exec: the program's name (--name; default: execrunner's)
    record: bool = False  # native: record HAL replays
    cwd: Path | None = None  # exec: where the command runs (default: here)
    max_jobs_per_worker: int | None = None  # retire pool workers after this many jobs
    evidence_budget: int = DEFAULT_EVIDENCE_BUDGET  # crashes of one mode with full evidence
    resume: bool = False  # --results holds a run: continue its plan there (soak/resume.py)
    given: frozenset[str] = frozenset()  # the options the user gave (click parameter names)
    repro_class: str = ""  # `iree-stress repro`: the class of the failure rerun
    repro_runs: int = 0  # `iree-stress repro`: how many runs were asked for
    from_env: list[str] = field(default_factory=list)  # options the environment gave, as argv
    numerics: str = Numerics.REFERENCE.value  # --numerics: how results are checked

    def plan_parts(self) -> dict[str, Any]:
        """The options that define what a soak runs (not where, nor under which runtime
        stack): trials are comparable only under the same ones (compare, bisect)."""
        return {"target": self.target, "device": self.device, "workers": self.workers,
                "threads": self.threads, "patterns": self.patterns, "programs": self.programs,
                "program_files": self.program_files, "duration_s": self.duration_s,
                "invocations": self.invocations, "env": self.env,
                "max_failures": self.max_failures, "timeout_s": self.timeout_s,
                "teardown_timeout_s": self.teardown_timeout_s, "inject": self.inject,
                "shard": self.shard, "job_seed": self.job_seed, "artifacts": self.artifacts,
                "engine": self.engine, "command": self.command, "done_regex": self.done_regex,
                "record": self.record,
                # (keys of older plans kept: each only when asked)
                **({"name": self.name} if self.name else {}),
                **({"numerics": self.numerics} if self.numerics != Numerics.REFERENCE.value
                   else {})}
