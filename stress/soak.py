"""`iree-stress soak`: programs -> compiled artifacts -> session -> store -> summary."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.analysis.report import signature_summaries
from stress.engine.config import DEFAULT_EVIDENCE_BUDGET, SoakConfig
from stress.engine.phases import Phases
from stress.engine.probe import LIBRARY_HINT, ProbeResult, probe
from stress.engine.runfiles import RunFiles
from stress.engine.session import Observer, Session
from stress.errors import UsageError
from stress.programs import corpus, targets, userprog
from stress.programs.cache import ArtifactCache, load_export
from stress.programs.program import Program
from stress.store import rundir
from stress.store import summary as summary_mod
from stress.store.db import RunStore
from stress.ui import Status
from stress.vocab import Engine, Family, RunStatus, StopReason, family


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
    record: bool = False  # native: record HAL replays
    cwd: Path | None = None  # exec: where the command runs (default: here)
    max_jobs_per_worker: int | None = None  # retire pool workers after this many jobs
    evidence_budget: int = DEFAULT_EVIDENCE_BUDGET  # crashes of one mode with full evidence
    resume: bool = False  # --results holds a run: continue its plan there (stress/resume.py)
    given: frozenset[str] = frozenset()  # the options the user gave (click parameter names)
    repro_class: str = ""  # `iree-stress repro`: the class of the failure rerun
    repro_runs: int = 0  # `iree-stress repro`: how many runs were asked for


def resolve_patterns(names: list[str]) -> list[str]:
    """`all` (the default): the in-process patterns and process-per-job; `exit`: the exit-path
    family (opt-in: exit-alive finds the known local-task exit-order crash on every run)."""
    return _resolve(names or [Family.CORE.value], (Family.CORE, Family.EXIT), "pattern(s)")


def _resolve(names: list[str], families: tuple[Family, ...], what: str) -> list[str]:
    """Family names expanded (registry order), then pattern names; duplicates once."""
    groups = {f.value: family(f) for f in families}
    known = [p for f in families for p in family(f)]
    out: list[str] = []
    for n in names:
        out += [p for p in groups.get(n, (n,)) if p not in out]
    unknown = [n for n in out if n not in known]
    if unknown:
        raise UsageError(f"unknown {what} {', '.join(unknown)}; known: "
                         f"{', '.join([*groups, *known])}")
    return out


def choose_programs(globs: list[str], files: list[str]) -> list[Program]:
    progs: list[Program] = []
    if globs or not files:
        progs = corpus.select(globs)
    progs += [userprog.load(f) for f in files]
    return progs


def choose_exported(arts: dict[str, tuple[Program, Path]], globs: list[str]) -> list[Program]:
    import fnmatch

    progs = [p for p, _ in arts.values()]
    if not globs:
        return progs
    chosen = [p for p in progs if any(fnmatch.fnmatchcase(p.name, g) for g in globs)]
    if not chosen:
        raise UsageError(f"no exported program matches {', '.join(globs)}")
    return chosen


def resolve_target(opts: SoakOptions, python: str, env: dict[str, str]) -> tuple[
        targets.Target, str, ProbeResult]:
    """Explicit target, else the first usable GPU driver, else cpu. Refuses (exit 2) only a
    driver that cannot load; one that loads and then crashes or stalls in its teardown is a
    finding (`ProbeResult.failures`), and the run goes on."""
    if opts.target:
        target = targets.parse(opts.target)
        found = ProbeResult()
    else:
        found = probe(python, ["hip", "cuda"], env, opts.teardown_timeout_s)
        auto = next((b for b, d in (("rocm", "hip"), ("cuda", "cuda"))
                     if found.drivers.get(d, {}).get("ok")), "cpu")
        target = targets.parse(auto)
    uri = opts.device or target.device_uri
    driver = uri.split("://", 1)[0].split(":", 1)[0]
    if driver not in found.drivers:
        mine = probe(python, [driver], env, opts.teardown_timeout_s)
        found.drivers.update(mine.drivers)
        found.failures += mine.failures
        found.compiled_in = mine.compiled_in or found.compiled_in
    found.failures = [f for f in found.failures if f["driver"] == driver]
    info = found.drivers.get(driver, {})
    if not info.get("ok"):
        hint = LIBRARY_HINT.get(driver, "")
        error = " ".join(str(info.get("error", "unknown")).split())[:400]  # one line
        others = [d for d in ("hip", "cuda", "vulkan", "local-task", "local-sync")
                  if d not in found.drivers]
        found.drivers.update(probe(python, others, env, opts.teardown_timeout_s).drivers)
        usable = [d for d, i in found.drivers.items() if i.get("ok")]
        raise UsageError(f"driver {driver!r} cannot load here: {error}"
                         f"{'; it needs ' + hint if hint else ''}; usable drivers: "
                         f"{', '.join(usable) or 'none'}")
    return target, driver, found


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


def _summary(folder: rundir.RunFolder) -> dict[str, Any]:
    return write_summary(folder.root)


def _command(opts: SoakOptions, seed: int) -> str:
    """The command line that reproduces the run (its seed said even when it was drawn, or
    taken from a resumed plan)."""
    argv = recorded_command(opts.argv)
    if opts.seed is None or (opts.resume and "seed" not in opts.given):
        argv += ["--seed", str(seed)]
    return shlex.join(argv)


def run_soak(opts: SoakOptions, observer: Observer | None = None,
             status: Status | None = None) -> dict[str, Any]:
    """Runs one soak; returns the summary (also written to RUN_DIR/summary.json). `observer`
    watches every job outcome and may stop the run (the gate's sequential test); `status`
    is where its live lines go (one made here from opts.progress when none is given)."""
    from stress import __version__
    from stress.resume import check_plan, continue_plan, planned_before

    if opts.command and Engine.of(opts.engine) is not Engine.EXEC and not opts.resume:
        raise UsageError("a command after `--` runs only with --engine exec")
    status = status or Status(opts.progress)
    previous = rundir.check_free(opts.results, opts.resume)  # refused before any work
    if previous:
        opts = continue_plan(opts, previous)
    if Engine.of(opts.engine) is Engine.EXEC:
        return run_exec_soak(opts, observer, status)
    native = Engine.of(opts.engine) is Engine.NATIVE
    if opts.record and not native:
        raise UsageError("--record records IREE's tools: it needs --engine native")
    if native and opts.inject:
        raise UsageError("--inject fires inside our workers; for native jobs use --env "
                         "LD_PRELOAD=... (docs/native.md)")
    patterns = resolve_native_patterns(opts.patterns) if native else \
        resolve_patterns(opts.patterns)
    if opts.artifacts is not None:  # workers run in their own folders: paths must be absolute
        opts.artifacts = opts.artifacts.resolve()
    opts.cache_dir = Path(opts.cache_dir).resolve()
    exported = load_export(opts.artifacts) if opts.artifacts else None
    programs = choose_exported(exported[1], opts.programs) if exported else \
        choose_programs(opts.programs, opts.program_files)
    if native:
        programs = native_programs(programs)
    if opts.duration_s is not None and opts.duration_s <= 0:
        raise UsageError("--duration must be positive")
    seed = opts.seed if opts.seed is not None else int.from_bytes(os.urandom(3), "little")
    python = opts.python or sys.executable
    env = {**os.environ, **opts.env}
    status.update("soak: checking the driver (a worker interpreter imports the runtime)",
                  force=True)  # (a new phase: said at once, in a CI log too)
    target, driver, found = resolve_target(opts, python, env)
    if previous:
        check_plan(opts.results, previous[-1]["config"], target.name, programs, patterns)
    folder = rundir.prepare(opts.results, seed, opts.resume)
    with _started(folder, status) as start:
        duration = opts.duration_s
        if duration is None and opts.invocations is None:
            duration = 20.0
        phases = Phases()

        def config_of(artifacts: dict[str, Path], compiler_version: str) -> SoakConfig:
            return SoakConfig(
                target=target, driver=driver, device_uri=opts.device or target.device_uri,
                programs=programs, artifacts=artifacts, patterns=patterns,
                workers=opts.workers or os.cpu_count() or 2, threads=opts.threads,
                seed=seed, duration_s=duration, invocations=opts.invocations, env=opts.env,
                max_failures=opts.max_failures, results_dir=folder.files,
                timeout_s=opts.timeout_s, teardown_timeout_s=opts.teardown_timeout_s,
                max_worker_restarts=opts.max_worker_restarts, inject=opts.inject,
                python=opts.python, shard=opts.shard, job_seed=opts.job_seed,
                command=_command(opts, seed), progress=opts.progress,
                compiler_version=compiler_version, tool_version=__version__,
                engine=opts.engine, record=opts.record,
                max_jobs_per_worker=opts.max_jobs_per_worker,
                repro_class=opts.repro_class, repro_runs=opts.repro_runs,
                evidence_budget=opts.evidence_budget)

        scale = _native_scale() if native else 1.0
        try:
            start.where = "while compiling"
            artifact_paths, compiler_version = _artifacts(opts, exported, programs, target,
                                                          phases, status)
        except KeyboardInterrupt:
            cfg = config_of({}, "")
            cfg.job_scale = scale
            return start.interrupted(cfg)
        config = config_of(artifact_paths, compiler_version)
        config.job_scale = scale
        if previous:
            config.first_job = rundir.next_job_index(folder.root)
            config.planned_before = planned_before(config, folder.root)
            status.say(f"resuming {folder.root}: run {len(previous) + 1} of its plan, from "
                       f"job {config.first_job:,} (files in {folder.files})")
        runner = None
        facts: dict[str, Any] = {}
        if native:
            from stress.engine.native import NativeRunner, tool_facts

            tools = native_tools(python)
            facts = tool_facts(tools)  # no worker says hello: the tools' own version file
            runner = NativeRunner(tools, {p.name: p for p in programs}, artifact_paths,
                                  config.device_uri, folder.files, opts.record, opts.env)
        session = Session(config, folder.run_id, folder.files, RunStore(folder.root), phases,
                          runner=runner, startup_failures=found.failures, observer=observer)
        session.facts.update(facts)
        session.progress.status = status
        start.recorded = True
        with session.interrupts.handled():
            session.run()
            return _summary(folder)


def _native_scale() -> float:
    from stress.engine.native import ONE_PROCESS_SCALE

    return ONE_PROCESS_SCALE


def _artifacts(opts: SoakOptions, exported: Any, programs: list[Program],
               target: targets.Target, phases: Phases, status: Status,
               ) -> tuple[dict[str, Path], str]:
    """(program -> .vmfb, compiler version): prebuilt (--artifacts) or from the cache, which
    compiles what it lacks. A program that does not compile is one line (exit 2) naming the
    user's own file and line."""
    if exported is not None:
        manifest, arts = exported
        if manifest["target"].split(":")[0] != target.backend.value:
            raise UsageError(f"{opts.artifacts} holds {manifest['target']} artifacts, "
                             f"not {target.name}")
        return ({p.name: arts[p.name][1] for p in programs},
                f"{manifest['compiler']} (prebuilt: {opts.artifacts})")
    cache = ArtifactCache(opts.cache_dir)
    with phases.phase("compile"):
        report = cache.compile_all(programs, target, jobs=opts.compile_jobs, status=status)
    phases.count("compile", report.compiled)
    if report.errors:
        more = f"; {len(report.errors) - 1} more: `iree-stress compile` shows them all" \
            if len(report.errors) > 1 else ""
        raise UsageError(f"{len(report.errors)} program(s) failed to compile for "
                         f"{target.name}: {report.errors[0].one_line()}{more}")
    return {n: a.path for n, a in report.artifacts.items()}, report.compiler_version


def recorded_command(args: list[str]) -> list[str]:
    """The command line that reproduces this soak: `iree-stress SUBCOMMAND ARGS`, where the
    subcommand is the one typed (gate, compare and bisect run soaks too: a gate run's rerun
    is the gate) when `args` are this process's own arguments after it, else `soak`."""
    typed = sys.argv[1:2] if sys.argv[2:] == list(args) and len(sys.argv) > 1 else []
    sub = typed[0] if typed and typed[0] in _SOAKING_COMMANDS else "soak"
    return ["iree-stress", sub, *args]


_SOAKING_COMMANDS: frozenset[str] = frozenset({"soak", "gate", "compare", "bisect"})


def write_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json of a run folder (a soak's, or one made by `merge`), with its signatures."""
    return summary_mod.write(run_dir, {"signatures": signature_summaries(run_dir)})


_GPU_TOOLS: tuple[tuple[str, str], ...] = (("nvidia-smi", "cuda"), ("amd-smi", "rocm"),
                                           ("rocm-smi", "rocm"))  # whose telemetry to read


def exec_target(name: str | None) -> targets.Target:
    """The target of an exec soak, for telemetry only (the command brings its own device):
    --target, else the GPU whose tool is on PATH, else cpu (no telemetry)."""
    import shutil

    if name:
        return targets.parse(name)
    return targets.parse(next((b for tool, b in _GPU_TOOLS if shutil.which(tool)), "cpu"))


def run_exec_soak(opts: SoakOptions, observer: Observer | None = None,
                  status: Status | None = None) -> dict[str, Any]:
    """`soak --engine exec -- CMD`: every job one run of the user's command (execrunner)."""
    from stress import __version__
    from stress.engine.execrunner import (
        EXEC_PATTERN,
        ONE_RUN_SCALE,
        ExecCommand,
        ExecRunner,
        exec_program,
        resolve_executable,
    )
    from stress.resume import planned_before

    status = status or Status(opts.progress)
    if opts.inject:
        raise UsageError("--inject fires inside our workers; an exec command has none")
    if opts.duration_s is not None and opts.duration_s <= 0:
        raise UsageError("--duration must be positive")
    env = dict(opts.env)
    if opts.python:  # a stack's venv (compare, bisect): its python and tools come first
        bin_dir = str(Path(opts.python).parent)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", os.environ.get("PATH", ""))])
        env.setdefault("VIRTUAL_ENV", str(Path(opts.python).parent.parent))
    command = ExecCommand(list(opts.command), opts.cwd or Path.cwd(), opts.done_regex, env)
    try:
        command.validate()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    exe = resolve_executable(command.argv[0], command.cwd, {**os.environ, **env})
    if "{" not in command.argv[0] and not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        # (a placeholder in the program's own name, e.g. build-{gpu}/t, is resolved per job)
        where = "" if os.sep in command.argv[0] else " on PATH"
        raise UsageError(f"cannot run the command: {command.argv[0]!r} is not an executable "
                         f"file{where} ({exe})")
    seed = opts.seed if opts.seed is not None else int.from_bytes(os.urandom(3), "little")
    folder = rundir.prepare(opts.results, seed, opts.resume)
    with _started(folder, status) as start:
        program = exec_program(command.argv)
        duration = opts.duration_s
        if duration is None and opts.invocations is None:
            duration = 20.0
        target = exec_target(opts.target)
        config = SoakConfig(
            target=target, driver=Engine.EXEC.value, device_uri=opts.device or "",
            programs=[program], artifacts={program.name: Path(exe)}, patterns=[EXEC_PATTERN],
            workers=opts.workers or 1, threads=1, seed=seed, duration_s=duration,
            invocations=opts.invocations, env=opts.env, max_failures=opts.max_failures,
            results_dir=folder.files, timeout_s=opts.timeout_s,
            teardown_timeout_s=opts.teardown_timeout_s,
            max_worker_restarts=opts.max_worker_restarts, python=opts.python,
            shard=opts.shard, job_seed=opts.job_seed, job_scale=ONE_RUN_SCALE,
            command=_command(opts, seed), progress=opts.progress, tool_version=__version__,
            engine=Engine.EXEC.value, exec_argv=command.argv, exec_cwd=str(command.cwd),
            done_regex=opts.done_regex, repro_class=opts.repro_class,
            repro_runs=opts.repro_runs, evidence_budget=opts.evidence_budget)
        if folder.resumed:
            config.first_job = rundir.next_job_index(folder.root)
            config.planned_before = planned_before(config, folder.root)
            status.say(f"resuming {folder.root}: run {len(folder.previous) + 1} of its plan, "
                       f"from job {config.first_job:,} (files in {folder.files})")
        session = Session(config, folder.run_id, folder.files, RunStore(folder.root), Phases(),
                          runner=ExecRunner(command), observer=observer)
        session.progress.status = status
        start.recorded = True
        with session.interrupts.handled():
            session.run()
            return _summary(folder)


def resolve_native_patterns(names: list[str]) -> list[str]:
    """native-run (the default), native-bench, or `all` for both."""
    natives = family(Family.NATIVE)
    out: list[str] = []
    for n in names or natives[:1]:
        for p in natives if n == Family.CORE.value else (n,):
            if p not in natives:
                raise UsageError(f"unknown native pattern {p!r}; known: all, "
                                 f"{', '.join(natives)}")
            if p not in out:
                out.append(p)
    return out


def native_programs(programs: list[Program]) -> list[Program]:
    """The programs the tools can run with checked outputs (native.unsupported)."""
    from stress.engine.native import unsupported

    ok = [p for p in programs if unsupported(p) is None]
    if not ok:
        why = sorted({f"{p.name}: {unsupported(p)}" for p in programs})[:3]
        raise UsageError(f"no chosen program runs under --engine native ({'; '.join(why)})")
    return ok


def native_tools(python: str) -> Any:
    from stress.engine.native import ToolsMissing, find_tools

    try:
        return find_tools(python)
    except ToolsMissing as exc:
        raise UsageError(str(exc)) from None



