"""The soak configuration: everything one run needs, built by the CLI, read by the session."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.programs.program import Program
from stress.programs.targets import Target
from stress.vocab import Numerics

# Defaults (seconds). An invocation of a corpus program takes micro- to milliseconds on cpu and
# ~0.5 ms on a GPU; 30 s of silence inside one step is a hang, not a slow kernel.
DEFAULT_TIMEOUT_S: float = 30.0
DEFAULT_TEARDOWN_TIMEOUT_S: float = 15.0
DEFAULT_MAX_WORKER_RESTARTS: int = 50
DEFAULT_EVIDENCE_BUDGET: int = 5  # crashes of one mode that get a core read and full stacks;
#   Socorro and Sentry sample repeats the same way: the fifth identical unwind adds nothing,
#   and each costs a core (100 MiB-1 GiB) and a debugger's CPU-second while the soak runs


@dataclass
class SoakConfig:
    target: Target
    driver: str
    device_uri: str
    programs: list[Program]
    artifacts: dict[str, Path]
    patterns: list[str]
    workers: int
    threads: int
    seed: int
    duration_s: float | None = None
    invocations: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    max_failures: int | None = None
    results_dir: Path = Path("results")
    timeout_s: float = DEFAULT_TIMEOUT_S
    teardown_timeout_s: float = DEFAULT_TEARDOWN_TIMEOUT_S
    max_worker_restarts: int = DEFAULT_MAX_WORKER_RESTARTS
    inject: list[str] = field(default_factory=list)
    python: str | None = None  # worker interpreter (a runtime stack's venv); default: ours
    shard: tuple[int, int] = (0, 1)
    job_seed: int | None = None  # force every job's input seed (repro of one failure)
    job_scale: float = 1.0  # multiplies invocations per job
    command: str = ""  # the command line that reproduces this run
    progress: bool = True
    compiler_version: str = ""
    tool_version: str = ""
    engine: str = "python"  # python (our workers) | a Runner's engine name (native, exec)
    exec_argv: list[str] = field(default_factory=list)  # exec: the command ({seed} {job} {gpu})
    exec_cwd: str = ""  # exec: where the command runs (where iree-stress was started)
    done_regex: str | None = None  # exec: the command's "work finished" output line
    record: bool = False  # native: record each job's HAL stream (--device_replay_output)
    max_jobs_per_worker: int | None = None  # a pool worker retires after this many jobs
    evidence_budget: int = DEFAULT_EVIDENCE_BUDGET  # full crash evidence per mode (0: all)
    first_job: int = 0  # --resume: the plan goes on at this job index (earlier ones ran before)
    planned_before: int = 0  # --resume: invocations of the plan's jobs before first_job
    repro_class: str = ""  # `iree-stress repro`: the failure class rerun (progress says runs)
    repro_runs: int = 0  # `iree-stress repro`: the runs asked for
    numerics: str = Numerics.REFERENCE.value  # --numerics as asked
    unchecked: list[str] = field(default_factory=list)  # programs whose results go unchecked
    unchecked_why: str = ""  # why, when it was not asked (a device that runs no kernels)

    def numerics_of(self, program: Program) -> Numerics:
        """How `program`'s results are checked in this run."""
        if program.name in self.unchecked:
            return Numerics.OFF
        asked = Numerics(self.numerics)
        if asked is Numerics.REFERENCE and not program.has_reference:
            return Numerics.REPEAT
        return asked

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target.name, "driver": self.driver, "device_uri": self.device_uri,
            "programs": [p.name for p in self.programs], "patterns": self.patterns,
            "workers": self.workers, "threads": self.threads, "seed": self.seed,
            "duration_s": self.duration_s, "invocations": self.invocations, "env": self.env,
            "max_failures": self.max_failures, "timeout_s": self.timeout_s,
            "teardown_timeout_s": self.teardown_timeout_s,
            "max_worker_restarts": self.max_worker_restarts, "inject": self.inject,
            "python": self.python, "shard": list(self.shard), "job_seed": self.job_seed,
            "job_scale": self.job_scale, "engine": self.engine,
            "exec_argv": self.exec_argv, "exec_cwd": self.exec_cwd,
            "done_regex": self.done_regex, "record": self.record,
            "max_jobs_per_worker": self.max_jobs_per_worker, "first_job": self.first_job,
            "evidence_budget": self.evidence_budget,
            # checked only against their own first result (no numpy reference): reports say so
            "repeatability_only": [p.name for p in self.programs
                                   if self.numerics_of(p) is Numerics.REPEAT],
            "numerics": self.numerics, "unchecked": self.unchecked,
            "unchecked_why": self.unchecked_why,
        }
