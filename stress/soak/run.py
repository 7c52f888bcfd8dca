"""Runs one soak: the engine's plan (plan.py), its folder, its artifacts, its config, one session
with the engine's runner, the summary. What differs by engine is one entry of `ENGINES`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stress.analysis.report import signature_summaries
from stress.engine.config import SoakConfig
from stress.engine.phases import Phases
from stress.engine.runfiles import RunFiles
from stress.engine.session import Observer, Session
from stress.engine.workermanage import Runner
from stress.errors import UsageError
from stress.programs.cache import ArtifactCache, load_export, rerun_hint
from stress.soak import plan as plans
from stress.soak.options import SoakOptions
from stress.soak.plan import Plan
from stress.store import rundir
from stress.store import summary as summary_mod
from stress.store.db import RunStore
from stress.ui import Status
from stress.vocab import Engine, RunStatus, StopReason

if TYPE_CHECKING:
    from stress.engine.execrunner import ExecCommand


@dataclass(frozen=True)
class EngineKit:
    """What one engine does in a soak: its plan (checks first, refused in one line), its
    artifacts (program -> file, compiler version), and the runner of its processes with the
    facts it knows of them (None: our spawned Python workers, which report their own)."""

    plan: Callable[[SoakOptions, Status, list[dict[str, Any]]], Plan]
    artifacts: Callable[[SoakOptions, Plan, Phases, Status], tuple[dict[str, Path], str]]
    runner: Callable[[SoakOptions, Plan, SoakConfig, Path], tuple[Runner | None,
                                                                   dict[str, Any]]]


def run_soak(opts: SoakOptions, observer: Observer | None = None,
             status: Status | None = None) -> dict[str, Any]:
    """Runs one soak; returns the summary (also written to RUN_DIR/summary.json). `observer`
    watches every job outcome and may stop the run (the gate's sequential test); `status`
    is where its live lines go (one made here from opts.progress when none is given)."""
    from stress.soak.resume import continue_plan, planned_before

    if opts.command and Engine.of(opts.engine) is not Engine.EXEC and not opts.resume:
        raise UsageError("a command after `--` runs only with --engine exec")
    status = status or Status(opts.progress)
    previous = rundir.check_free(opts.results, opts.resume)  # refused before any work
    if previous:
        opts = continue_plan(opts, previous)
    kit = ENGINES[Engine.of(opts.engine)]
    plan = kit.plan(opts, status, previous)
    seed = plans.draw_seed(opts)
    folder = rundir.prepare(opts.results, seed, opts.resume)
    with _started(folder, status) as start:
        phases = Phases()
        try:
            start.where = "while compiling"
            artifacts, compiler_version = kit.artifacts(opts, plan, phases, status)
        except KeyboardInterrupt:
            return start.interrupted(plans.config(opts, plan, seed, folder.files, {}, ""))
        config = plans.config(opts, plan, seed, folder.files, artifacts, compiler_version)
        if folder.resumed:
            config.first_job = rundir.next_job_index(folder.root)
            config.planned_before = planned_before(config, folder.root)
            status.say(f"resuming {folder.root}: run {len(folder.previous) + 1} of its plan, "
                       f"from job {config.first_job:,} (files in {folder.files})")
        runner, facts = kit.runner(opts, plan, config, folder.files)
        session = Session(config, folder.run_id, folder.files, RunStore(folder.root), phases,
                          runner=runner, startup_failures=plan.found.failures,
                          observer=observer)
        session.facts.update(facts)
        session.progress.status = status
        start.recorded = True
        with session.interrupts.handled():
            session.run()
            return write_summary(folder.root)


def write_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json of a run folder (a soak's, or one made by `merge`), with its signatures."""
    return summary_mod.write(run_dir, {"signatures": signature_summaries(run_dir)})


class _Start:
    """A run from its folder's creation to its summary: a usage error before the session
    leaves no folder; an interrupt (Ctrl-C) anywhere leaves a reportable one (the run
    recorded as interrupted, with where it was); the end tidies the folder (rundir.finish)."""

    def __init__(self, folder: rundir.RunFolder, status: Status):
        self.folder, self.status = folder, status
        self.where = "while starting"
        self.recorded = False  # the session wrote the run's row

    def interrupted(self, config: SoakConfig, signal: str = "SIGINT") -> dict[str, Any]:
        """The run, stopped before its session began, as an interrupted run of the store."""
        store = RunStore(self.folder.root)
        try:
            manifest = RunFiles(config, self.folder.files).manifest({})
            store.start_run(self.folder.run_id, config.seed, config.command, manifest,
                            config.as_dict())
            store.end_run(self.folder.run_id, RunStatus.INTERRUPTED.value,
                          StopReason.INTERRUPTED.text(f"{signal} {self.where}, before the first "
                                                      "job"))
        finally:
            store.close()
        self.status.done()
        return summary_mod.write(self.folder.root, {"signatures": []})


@contextmanager
def _started(folder: rundir.RunFolder, status: Status) -> Iterator[_Start]:
    start = _Start(folder, status)
    try:
        yield start
    except UsageError:
        status.done()
        if not start.recorded:
            folder.discard()  # a failed start leaves nothing behind
        raise
    finally:
        if folder.lock_fd is not None:
            rundir.finish(folder)


# ---- our Python workers, and IREE's tools (native) ----------------------------------------
def _plan_compiled(opts: SoakOptions, status: Status, previous: list[dict[str, Any]]) -> Plan:
    """Patterns, programs and the driver (probed: it must load) of a python or native soak;
    resuming (`previous` runs), they must be the plan's."""
    from stress.soak.resume import check_plan

    native = Engine.of(opts.engine) is Engine.NATIVE
    if opts.record and not native:
        raise UsageError("--record records IREE's tools: it needs --engine native")
    if native and opts.inject:
        raise UsageError("--inject fires inside our workers; for native jobs use --env "
                         "LD_PRELOAD=... (docs/native.md)")
    patterns = plans.resolve_native_patterns(opts.patterns) if native else \
        plans.resolve_patterns(opts.patterns)
    if opts.artifacts is not None:  # workers run in their own folders: paths must be absolute
        opts.artifacts = opts.artifacts.resolve()
    opts.cache_dir = Path(opts.cache_dir).resolve()
    exported = load_export(opts.artifacts) if opts.artifacts else None
    programs = plans.choose_exported(exported[1], opts.programs) if exported else \
        plans.choose_programs(opts.programs, opts.program_files)
    if native:
        programs = plans.native_programs(programs)
    plans.check_duration(opts)
    python = opts.python or sys.executable
    env = {**os.environ, **opts.env}
    with status.ticking("soak: checking the driver (a worker interpreter imports the "
                        "runtime)"):  # seconds, more under load or with a GPU driver
        target, driver, found = plans.resolve_target(opts, python, env)
    if previous:
        check_plan(opts.results, previous[-1]["config"], target.name, programs, patterns)
    return Plan(target, driver, opts.device or target.device_uri, patterns, programs,
                opts.workers or os.cpu_count() or 2, opts.threads,
                job_scale=_native_scale() if native else 1.0, found=found, exported=exported,
                inject=opts.inject, record=opts.record,
                max_jobs_per_worker=opts.max_jobs_per_worker)


def _native_scale() -> float:
    from stress.engine.native import ONE_PROCESS_SCALE

    return ONE_PROCESS_SCALE


def _compiled(opts: SoakOptions, plan: Plan, phases: Phases, status: Status,
              ) -> tuple[dict[str, Path], str]:
    """(program -> .vmfb, compiler version): prebuilt (--artifacts) or from the cache, which
    compiles what it lacks. A program that does not compile is one line (exit 2) naming the
    user's own file and line."""
    target = plan.target
    if plan.exported is not None:
        manifest, arts = plan.exported
        if manifest["target"].split(":")[0] != target.backend.value:
            raise UsageError(f"{opts.artifacts} holds {manifest['target']} artifacts, "
                             f"not {target.name}")
        return ({p.name: arts[p.name][1] for p in plan.programs},
                f"{manifest['compiler']} (prebuilt: {opts.artifacts})")
    cache = ArtifactCache(opts.cache_dir)
    with phases.phase("compile"):
        report = cache.compile_all(plan.programs, target, jobs=opts.compile_jobs, status=status)
    phases.count("compile", report.compiled)
    if report.errors:
        raise UsageError(report.failure_line(target.name, rerun_hint(
            target.name, opts.programs, opts.program_files)))
    return {n: a.path for n, a in report.artifacts.items()}, report.compiler_version


def _spawned(opts: SoakOptions, plan: Plan, config: SoakConfig,
             files: Path) -> tuple[Runner | None, dict[str, Any]]:
    return None, {}  # the session's own SpawnRunner; a worker's hello says the facts


def _tools(opts: SoakOptions, plan: Plan, config: SoakConfig,
           files: Path) -> tuple[Runner | None, dict[str, Any]]:
    from stress.engine.native import NativeRunner
    from stress.engine.nativetools import tool_facts

    tools = plans.native_tools(opts.python or sys.executable)
    facts = tool_facts(tools)  # no worker says hello: the tools' own version file
    return NativeRunner(tools, {p.name: p for p in plan.programs}, config.artifacts,
                        config.device_uri, files, opts.record, opts.env,
                        {p.name: config.numerics_of(p) for p in plan.programs}), facts


# ---- the user's command (exec) ------------------------------------------------------------
def _plan_command(opts: SoakOptions, status: Status, previous: list[dict[str, Any]]) -> Plan:
    """`soak --engine exec -- CMD`: every job one run of the user's command (execrunner)."""
    from stress.engine.execrunner import EXEC_PATTERN, ONE_RUN_SCALE, exec_program

    if opts.inject:
        raise UsageError("--inject fires inside our workers; an exec command has none")
    plans.check_duration(opts)
    command, exe = _command(opts)
    program = exec_program(command.argv, command.cwd, opts.name)
    return Plan(plans.exec_target(opts.target), Engine.EXEC.value, opts.device or "",
                [EXEC_PATTERN], [program], opts.workers or 1, 1,
                job_scale=ONE_RUN_SCALE, command=command, executable=exe)


def _command(opts: SoakOptions) -> tuple[ExecCommand, Path]:
    """The command to run (its environment: a stack's venv first on PATH) and its program,
    which must be an executable file (one line, exit 2, otherwise)."""
    from stress.engine import execrunner

    env = dict(opts.env)
    if opts.python:  # a stack's venv (compare, bisect): its python and tools come first
        bin_dir = str(Path(opts.python).parent)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", os.environ.get("PATH", ""))])
        env.setdefault("VIRTUAL_ENV", str(Path(opts.python).parent.parent))
    command = execrunner.ExecCommand(list(opts.command), opts.cwd or Path.cwd(),
                                     opts.done_regex, env)
    try:
        command.validate()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    exe = execrunner.resolve_executable(command.argv[0], command.cwd, {**os.environ, **env})
    if "{" not in command.argv[0] and not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        # (a placeholder in the program's own name, e.g. build-{gpu}/t, is resolved per job)
        where = "" if os.sep in command.argv[0] else " on PATH"
        raise UsageError(f"cannot run the command: {command.argv[0]!r} is not an executable "
                         f"file{where} ({exe})")
    return command, Path(exe)


def _executable(opts: SoakOptions, plan: Plan, phases: Phases, status: Status,
                ) -> tuple[dict[str, Path], str]:
    assert plan.executable is not None
    return {plan.programs[0].name: plan.executable}, ""  # nothing to compile


def _exec_runner(opts: SoakOptions, plan: Plan, config: SoakConfig,
                 files: Path) -> tuple[Runner | None, dict[str, Any]]:
    from stress.engine.execrunner import ExecRunner

    assert plan.command is not None
    return ExecRunner(plan.command), {}


ENGINES: dict[Engine, EngineKit] = {
    Engine.PYTHON: EngineKit(_plan_compiled, _compiled, _spawned),
    Engine.NATIVE: EngineKit(_plan_compiled, _compiled, _tools),
    Engine.EXEC: EngineKit(_plan_command, _executable, _exec_runner),
}
