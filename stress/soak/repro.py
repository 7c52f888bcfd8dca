"""`iree-stress repro FAILURE_DIR`: rerun exactly one failure's job, alone, N times, and say how
often it failed the same way: a count and a rate with its interval, beside the original run's
rate. Every engine's failure folder has a `repro.sh` that runs this (stress/engine/evidence.py).
The reruns are a run of their own under the failure folder (FAILURE_DIR/repro-TIME/)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.analysis import header
from stress.errors import UsageError
from stress.fs import default_cache_dir
from stress.soak.options import SoakOptions
from stress.soak.plan import native_tools
from stress.soak.resume import stored_name
from stress.soak.run import run_soak
from stress.store import readers
from stress.store.db import DB_NAME
from stress.vocab import Engine, Numerics, RunStatus

_STORE_LEVELS: int = 3  # FAILURE_DIR/../.. is the run folder; a resumed run's is one more up
_REPLAY_TIMEOUT_S: float = 120.0  # one iree-run-replay of a recorded job's HAL stream


@dataclass
class ReproResult:
    """How often a failure's job failed again when rerun alone."""

    folder: Path
    cls: str
    runs: int
    failed: int
    low: float
    high: float
    run_dir: Path
    original: dict[str, Any] | None = None  # the original signature's rate, when known
    replays: list[int] = field(default_factory=list)  # iree-run-replay exit codes
    header: list[tuple[str, str]] = field(default_factory=list)  # what the reruns tested
    asked: int = 0  # the runs asked for (--times)
    interrupted: bool = False  # the reruns were stopped (Ctrl-C, SIGTERM) before the end
    variants: list[tuple[str, int]] = field(default_factory=list)  # other failure modes the
    #   reruns hit: (signature id and description, runs), most first

    def describe(self) -> str:
        rate = self.failed / self.runs if self.runs else 0.0
        head = [header.text(self.header), ""] if self.header else []
        lines = [*head, f"{self.folder.name}: {self.cls} again in {self.failed}/{self.runs} runs: "
                 f"rate {rate:.0%} (95% interval {self.low:.0%}-{self.high:.0%}) -> "
                 f"{self.run_dir}"]
        if self.original:  # what "again" counted: its signature, not its class
            lines.append(f"  counted: the same signature, {self.original['id']} "
                         f"{self.original.get('description')}")
        for what, n in self.variants:
            lines.append(f"  another variant in {n}/{self.runs} runs (not counted): {what}")
        if self.interrupted:  # a rate of 0 from a cut-short rerun must not read as an answer
            lines.append(f"  interrupted after {self.runs} of {self.asked} runs: "
                         "not an answer on its own")
        if self.original and self.original.get("ci_low") is not None:
            lo, hi = self.original["ci_low"], self.original["ci_high"]
            inside = "within" if lo <= rate <= hi else "outside"
            lines.append(f"  original run: rate {self.original['rate_per_exposure']:.0%} "
                         f"[{lo:.0%}-{hi:.0%}] of its {self.original.get('exposure', 'job')}s:"
                         f" the rerun's rate is {inside} that interval")
        if self.replays:
            ok = sum(rc == 0 for rc in self.replays)
            lines.append(f"  iree-run-replay: {ok}/{len(self.replays)} replays exited 0")
        return "\n".join(lines)


def store_of(folder: Path) -> Path:
    """The run folder holding the store of a failure folder (RUN/failures/NNNN-..., or
    RUN/resume-K/failures/NNNN-... for a resumed run)."""
    here = folder.resolve()
    for parent in list(here.parents)[:_STORE_LEVELS]:
        if (parent / DB_NAME).is_file():
            return parent
    raise UsageError(f"{folder}: no run store ({DB_NAME}) in the folders above it; is it a "
                     "failure folder of a run (RUN_DIR/failures/NNNN-...)?")


def _same_folder(recorded: str | None, folder: Path) -> bool:
    """A failure row's evidence folder is `folder` (also when the run folder was moved or
    copied since: CI artifacts are read where they were downloaded)."""
    if not recorded:
        return False
    a, b = Path(recorded), folder.resolve()
    return a == b or (a.name == b.name and a.parent.parent.name == b.parent.parent.name)


def run_config(root: Path, folder: Path) -> dict[str, Any]:
    """The config of the run that recorded the failure of `folder` (a folder's store may hold
    several: resumed or merged runs), else its first run's."""
    config = readers.run_config(root, lambda recorded: _same_folder(recorded, folder))
    if config is None:
        raise UsageError(f"{root} holds no run")
    return config


def original_signature(root: Path, folder: Path) -> dict[str, Any] | None:
    """The signature (as_dict) that holds the failure of `folder`, with its rate."""
    from stress.analysis import rundata, signatures

    try:
        sigs = signatures.build(rundata.load([root]))
    except Exception:  # an unreadable store: the rerun's own numbers still stand
        return None
    for sig in sigs:
        if any(_same_folder(r.get("artifacts"), folder) for r in sig.rows):
            return sig.as_dict()
    return None


def same_signature(run_dir: Path, original: dict[str, Any]
                   ) -> tuple[set[int], list[tuple[str, int]]]:
    """(the reruns' jobs that failed in the `original` signature (as_dict: its id and key), the
    other signatures they hit as (id and description, jobs), most first). A rerun's signature
    is the original's when it has its id, or its key is one mode with it seen through another
    unwind (`sigkeys.compatible`)."""
    from stress.analysis import rundata, signatures
    from stress.analysis.sigkeys import SignatureKey, compatible

    same: set[int] = set()
    others: list[tuple[str, int]] = []
    for sig in signatures.build(rundata.load([run_dir])):
        jobs = {int(r["job_index"]) for r in sig.rows if r.get("job_index") is not None}
        if sig.id == original["id"] or compatible(sig.key, SignatureKey.parse(original["key"])):
            same |= jobs
        elif jobs:
            others.append((f"{sig.id} {sig.describe()}", len(jobs)))
    return same, sorted(others, key=lambda x: -x[1])


def _out_dir(folder: Path) -> Path:
    """FAILURE_DIR/repro-TIME, new (a second repro within the same second gets -2)."""
    base = folder / f"repro-{time.strftime('%Y%m%d-%H%M%S')}"
    out, k = base, 2
    while out.exists():
        out = base.with_name(f"{base.name}-{k}")
        k += 1
    return out


def repro_options(folder: Path, times: int, cfg: dict[str, Any], job: dict[str, Any],
                  cls: str, progress: bool) -> SoakOptions:
    """The soak of `times` runs of the failure's job alone: the run's engine, program,
    pattern, input seed, command, environment, interpreter and deadlines; the artifact
    cache of this machine (IREE_STRESS_CACHE, else XDG_CACHE_HOME/iree-stress, as soak)."""
    engine = Engine.of(cfg.get("engine"))
    return SoakOptions(
        target=None if engine is Engine.EXEC else str(cfg.get("target") or "cpu"),
        device=cfg.get("device_uri") or None, workers=1, threads=int(cfg.get("threads", 2)),
        patterns=[job["pattern"]] if engine is not Engine.EXEC else [],
        programs=[job["program"]] if engine is not Engine.EXEC else [], program_files=[],
        duration_s=None,
        invocations=times if engine is not Engine.PYTHON else times * int(job["invocations"]),
        seed=int(cfg.get("seed", 0)), env=dict(cfg.get("env") or {}), max_failures=None,
        results=_out_dir(folder), timeout_s=float(cfg["timeout_s"]),
        teardown_timeout_s=float(cfg["teardown_timeout_s"]),
        max_worker_restarts=max(times, 50), inject=list(cfg.get("inject") or []),
        python=cfg.get("python"), shard=(0, 1), job_seed=int(job["seed"]),
        cache_dir=default_cache_dir(), compile_jobs=2, progress=progress, engine=engine.value,
        command=list(cfg.get("exec_argv") or []), done_regex=cfg.get("done_regex"),
        name=stored_name(cfg) if engine is Engine.EXEC else None,
        record=bool(cfg.get("record")),
        cwd=Path(cfg["exec_cwd"]) if cfg.get("exec_cwd") else None,
        repro_class=cls, repro_runs=times,
        numerics=str(cfg.get("numerics") or Numerics.REFERENCE.value))


def repro(folder: Path, times: int, replay_device: str | None = None, *,
          with_replay: bool = False, progress: bool = False) -> ReproResult:
    """Reruns the job of failure folder `folder` `times` times (module doc); counts the runs
    that failed in the same class again. `with_replay`: also runs the folder's HAL replay
    with iree-run-replay that many times."""
    from stress.analysis.stats import wilson

    try:
        meta = json.loads((folder / "failure.json").read_text())
        job = json.loads((folder / "job.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{folder} is not a failure folder: {exc}") from None
    if not job:
        raise UsageError(f"{folder}: the failure was pinned on no job; nothing to rerun (the "
                         "run's own command is in its summary.json)")
    root = store_of(folder)
    cfg = run_config(root, folder)
    opts = repro_options(folder, times, cfg, job, meta["class"], progress)
    out = opts.results
    assert out is not None
    summary = run_soak(opts)
    jobs, failing = readers.job_outcomes(out, meta["class"])
    original = original_signature(root, folder)
    variants: list[tuple[str, int]] = []
    if original is not None:  # the same signature, not the same class (issue 36 item 4)
        failing, variants = same_signature(out, original)
    low, high = wilson(len(failing), len(jobs))
    result = ReproResult(folder, meta["class"], len(jobs), len(failing), low, high, out,
                         original, variants=variants,
                         header=header.rows([summary.get("manifest") or {}],
                                            [str(summary.get("command") or "")]),
                         asked=times,
                         interrupted=summary.get("status") == RunStatus.INTERRUPTED)
    if with_replay:
        result.replays = run_replays(folder, replay_device or cfg.get("device_uri") or
                                     "local-task", times, cfg.get("python"))
    return result


def run_replays(folder: Path, device: str, times: int, python: str | None) -> list[int]:
    """iree-run-replay of the folder's recorded HAL stream (or of the replay file `folder`)
    on `device`, `times` times."""
    from stress.engine import procstate
    from stress.engine.nativetools import replay_argv

    replays = [folder] if folder.is_file() else sorted(folder.glob("*.ireereplay"))
    if not replays:
        raise UsageError(f"{folder} holds no HAL replay (record with soak --engine native "
                         "--record)")
    tools = native_tools(python or sys.executable)
    codes = []
    for _ in range(times):
        run = procstate.run_bounded(replay_argv(tools, replays[0], device), _REPLAY_TIMEOUT_S)
        codes.append(run.rc if run.rc is not None else -9)
    return codes

