"""`iree-stress soak`: programs -> compiled artifacts -> session -> store -> summary."""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.analysis.report import signature_summaries
from stress.engine.config import DEFAULT_EVIDENCE_BUDGET, SoakConfig
from stress.engine.patterns import ALL_PATTERNS, EXIT_FAMILY
from stress.engine.phases import Phases
from stress.engine.probe import LIBRARY_HINT, ProbeResult, probe
from stress.engine.session import Observer, Session
from stress.errors import UsageError
from stress.programs import corpus, targets, userprog
from stress.programs.cache import ArtifactCache, load_export
from stress.programs.program import Program
from stress.store import summary as summary_mod
from stress.store.db import RunStore


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
    engine: str = "python"  # python | exec (the command after `--`) | native
    command: list[str] = field(default_factory=list)  # exec: argv after `--`
    done_regex: str | None = None  # exec: the command's "work finished" line
    record: bool = False  # native: record HAL replays
    cwd: Path | None = None  # exec: where the command runs (default: here)
    max_jobs_per_worker: int | None = None  # retire pool workers after this many jobs
    evidence_budget: int = DEFAULT_EVIDENCE_BUDGET  # crashes of one mode with full evidence


def resolve_patterns(names: list[str]) -> list[str]:
    """`all` (the default): the in-process patterns and process-per-job; `exit`: the exit-path
    family (opt-in: exit-alive finds the known local-task exit-order crash on every run)."""
    if not names:
        names = ["all"]
    out: list[str] = []
    for n in names:
        group = list(ALL_PATTERNS) if n == "all" else list(EXIT_FAMILY) if n == "exit" else [n]
        out += [p for p in group if p not in out]
    known = [*ALL_PATTERNS, *EXIT_FAMILY]
    unknown = [n for n in out if n not in known]
    if unknown:
        raise UsageError(f"unknown pattern(s) {', '.join(unknown)}; known: all, exit, "
                         f"{', '.join(known)}")
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


def make_run_dir(results: Path | None, seed: int) -> tuple[str, Path]:
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-s{seed}-{os.getpid()}"
    run_dir = results if results is not None else Path("results") / run_id
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe_file = run_dir / ".writable"
        probe_file.write_bytes(b"")
        probe_file.unlink()
    except OSError as exc:
        raise UsageError(f"results dir {run_dir} is not writable: {exc.strerror}") from None
    if results is not None:
        run_id = results.name or run_id
    return run_id, run_dir


def run_soak(opts: SoakOptions, observer: Observer | None = None) -> dict[str, Any]:
    """Runs one soak; returns the summary (also written to RUN_DIR/summary.json). `observer`
    watches every job outcome and may stop the run (the gate's sequential test)."""
    from stress import __version__

    if opts.command and opts.engine != "exec":
        raise UsageError("a command after `--` runs only with --engine exec")
    if opts.engine == "exec":
        return run_exec_soak(opts, observer)
    native = opts.engine == "native"
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
    target, driver, found = resolve_target(opts, python, env)
    run_id, run_dir = make_run_dir(opts.results, seed)
    phases = Phases()
    if exported is not None:
        manifest, arts = exported
        if manifest["target"].split(":")[0] != target.backend.value:
            raise UsageError(f"{opts.artifacts} holds {manifest['target']} artifacts, "
                             f"not {target.name}")
        artifact_paths = {p.name: arts[p.name][1] for p in programs}
        compiler_version = f"{manifest['compiler']} (prebuilt: {opts.artifacts})"
    else:
        cache = ArtifactCache(opts.cache_dir)
        with phases.phase("compile"):
            report = cache.compile_all(programs, target, jobs=opts.compile_jobs)
        phases.count("compile", report.compiled)
        if report.errors:
            lines = "\n".join(e.describe() for e in report.errors[:5])
            raise UsageError(f"{len(report.errors)} program(s) failed to compile for "
                             f"{target.name}:\n{lines}")
        artifact_paths = {n: a.path for n, a in report.artifacts.items()}
        compiler_version = report.compiler_version
    duration = opts.duration_s
    if duration is None and opts.invocations is None:
        duration = 20.0
    argv = recorded_command(opts.argv)
    if opts.seed is None:
        argv += ["--seed", str(seed)]
    config = SoakConfig(
        target=target, driver=driver, device_uri=opts.device or target.device_uri,
        programs=programs, artifacts=artifact_paths,
        patterns=patterns, workers=opts.workers or os.cpu_count() or 2, threads=opts.threads,
        seed=seed, duration_s=duration, invocations=opts.invocations, env=opts.env,
        max_failures=opts.max_failures, results_dir=run_dir, timeout_s=opts.timeout_s,
        teardown_timeout_s=opts.teardown_timeout_s,
        max_worker_restarts=opts.max_worker_restarts, inject=opts.inject, python=opts.python,
        shard=opts.shard, job_seed=opts.job_seed, command=shlex.join(argv),
        progress=opts.progress, compiler_version=compiler_version,
        tool_version=__version__, engine=opts.engine, record=opts.record,
        max_jobs_per_worker=opts.max_jobs_per_worker, evidence_budget=opts.evidence_budget)
    runner = None
    facts: dict[str, Any] = {}
    if native:
        from stress.engine.native import ONE_PROCESS_SCALE, NativeRunner, tool_facts

        config.job_scale = ONE_PROCESS_SCALE
        config.workers = opts.workers or os.cpu_count() or 2
        tools = native_tools(python)
        facts = tool_facts(tools)  # no worker says hello: the tools' own version file
        runner = NativeRunner(tools, {p.name: p for p in programs},
                              artifact_paths, config.device_uri, run_dir, opts.record, opts.env)
    session = Session(config, run_id, run_dir, RunStore(run_dir), phases, runner=runner,
                      startup_failures=found.failures, observer=observer)
    session.facts.update(facts)
    with session.signals():
        session.run()
        return write_summary(run_dir)


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


def run_exec_soak(opts: SoakOptions, observer: Observer | None = None) -> dict[str, Any]:
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
    run_id, run_dir = make_run_dir(opts.results, seed)
    program = exec_program(command.argv)
    duration = opts.duration_s
    if duration is None and opts.invocations is None:
        duration = 20.0
    argv = recorded_command(opts.argv)
    if opts.seed is None:
        argv += ["--seed", str(seed)]
    target = exec_target(opts.target)
    config = SoakConfig(
        target=target, driver="exec", device_uri=opts.device or "",
        programs=[program], artifacts={program.name: Path(exe)}, patterns=[EXEC_PATTERN],
        workers=opts.workers or 1, threads=1, seed=seed, duration_s=duration,
        invocations=opts.invocations, env=opts.env, max_failures=opts.max_failures,
        results_dir=run_dir, timeout_s=opts.timeout_s,
        teardown_timeout_s=opts.teardown_timeout_s,
        max_worker_restarts=opts.max_worker_restarts, python=opts.python, shard=opts.shard,
        job_seed=opts.job_seed, job_scale=ONE_RUN_SCALE, command=shlex.join(argv),
        progress=opts.progress, tool_version=__version__, engine="exec",
        exec_argv=command.argv, exec_cwd=str(command.cwd), done_regex=opts.done_regex,
        evidence_budget=opts.evidence_budget)
    session = Session(config, run_id, run_dir, RunStore(run_dir), Phases(),
                      runner=ExecRunner(command), observer=observer)
    with session.signals():
        session.run()
        return write_summary(run_dir)


def resolve_native_patterns(names: list[str]) -> list[str]:
    """native-run (the default), native-bench, or `all` for both."""
    from stress.engine.native import NATIVE_PATTERNS, NATIVE_RUN

    out: list[str] = []
    for n in names or [NATIVE_RUN]:
        for p in NATIVE_PATTERNS if n == "all" else (n,):
            if p not in NATIVE_PATTERNS:
                raise UsageError(f"unknown native pattern {p!r}; known: all, "
                                 f"{', '.join(NATIVE_PATTERNS)}")
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


# ---- repro: rerun one failure's job ---------------------------------------------------------
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

    def describe(self) -> str:
        rate = self.failed / self.runs if self.runs else 0.0
        lines = [f"{self.folder.name}: {self.cls} again in {self.failed}/{self.runs} runs "
                 f"({rate:.0%}, 95% interval {self.low:.0%}-{self.high:.0%}) -> {self.run_dir}"]
        if self.original and self.original.get("ci_low") is not None:
            lo, hi = self.original["ci_low"], self.original["ci_high"]
            inside = "within" if lo <= rate <= hi else "outside"
            lines.append(f"  original run: {self.original['rate_per_exposure']:.0%} "
                         f"[{lo:.0%}-{hi:.0%}] of its {self.original.get('exposure', 'job')}s:"
                         f" the rerun's rate is {inside} that interval")
        if self.replays:
            ok = sum(rc == 0 for rc in self.replays)
            lines.append(f"  iree-run-replay: {ok}/{len(self.replays)} replays exited 0")
        return "\n".join(lines)


def original_signature(run_dir: Path, folder: Path) -> dict[str, Any] | None:
    """The signature (as_dict) of the run that holds the failure of `folder`, with its rate."""
    from stress.analysis import rundata, signatures

    try:
        sigs = signatures.build(rundata.load([run_dir]))
    except Exception:  # an unreadable store: the rerun's own numbers still stand
        return None
    want = str(folder.resolve())
    for sig in sigs:
        if any(r.get("artifacts") and str(Path(r["artifacts"]).resolve()) == want
               for r in sig.rows):
            return sig.as_dict()
    return None


def _run_record(run_dir: Path) -> dict[str, Any]:
    import json
    import sqlite3

    summary = run_dir / "summary.json"
    if summary.exists():
        data: dict[str, Any] = json.loads(summary.read_text())
        return {"config": data["manifest"]["config"], "signatures": data.get("signatures", [])}
    db = sqlite3.connect(f"file:{run_dir / 'stress.db'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT config FROM runs LIMIT 1").fetchone()
    finally:
        db.close()
    if row is None:
        raise UsageError(f"{run_dir} holds no run")
    return {"config": json.loads(row[0]), "signatures": []}


def repro(folder: Path, times: int, replay_device: str | None = None, *,
          with_replay: bool = False, progress: bool = False) -> ReproResult:
    """Reruns the job of failure folder `folder` (RUN_DIR/failures/NNNN-...) `times` times,
    alone, with the run's engine, program, pattern, input seed, command, environment,
    interpreter and deadlines; counts the runs that failed in the same class again.
    `with_replay`: also runs the folder's HAL replay with iree-run-replay that many times."""
    import json
    import sqlite3

    from stress.analysis.stats import wilson

    try:
        meta = json.loads((folder / "failure.json").read_text())
        job = json.loads((folder / "job.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{folder} is not a failure folder: {exc}") from None
    if not job:
        raise UsageError(f"{folder}: the failure was pinned on no job; nothing to rerun")
    run_dir = folder.parent.parent
    record = _run_record(run_dir)
    cfg = record["config"]
    engine = cfg.get("engine", "python")
    out = folder / f"repro-{time.strftime('%Y%m%d-%H%M%S')}"
    opts = SoakOptions(
        target=None if engine == "exec" else str(cfg.get("target") or "cpu"),
        device=cfg.get("device_uri") or None, workers=1, threads=int(cfg.get("threads", 2)),
        patterns=[job["pattern"]] if engine != "exec" else [], programs=[job["program"]]
        if engine != "exec" else [], program_files=[], duration_s=None,
        invocations=times if engine != "python" else times * int(job["invocations"]),
        seed=int(cfg.get("seed", 0)), env=dict(cfg.get("env") or {}), max_failures=None,
        results=out, timeout_s=float(cfg["timeout_s"]),
        teardown_timeout_s=float(cfg["teardown_timeout_s"]),
        max_worker_restarts=max(times, 50), inject=list(cfg.get("inject") or []),
        python=cfg.get("python"), shard=(0, 1), job_seed=int(job["seed"]),
        cache_dir=Path(os.environ.get("IREE_STRESS_CACHE",
                                      Path.home() / ".cache" / "iree-stress")),
        compile_jobs=2, progress=progress, engine=engine,
        command=list(cfg.get("exec_argv") or []), done_regex=cfg.get("done_regex"),
        record=bool(cfg.get("record")),
        cwd=Path(cfg["exec_cwd"]) if cfg.get("exec_cwd") else None)
    run_soak(opts)
    db = sqlite3.connect(out / "stress.db")
    try:
        jobs = {r[0] for r in db.execute("SELECT job_index FROM jobs")}
        failing = {r[0] for r in db.execute("SELECT job_index FROM failures WHERE class = ?",
                                            (meta["class"],))}
        jobs |= {r[0] for r in db.execute("SELECT job_index FROM failures")}
    finally:
        db.close()
    jobs.discard(None)
    failing.discard(None)
    low, high = wilson(len(failing), len(jobs))
    original = original_signature(run_dir, folder)
    result = ReproResult(folder, meta["class"], len(jobs), len(failing), low, high, out,
                         original)
    if with_replay:
        result.replays = run_replays(folder, replay_device or cfg.get("device_uri") or
                                     "local-task", times, cfg.get("python"))
    return result


def run_replays(folder: Path, device: str, times: int, python: str | None) -> list[int]:
    """iree-run-replay of the folder's recorded HAL stream (or of the replay file `folder`)
    on `device`, `times` times."""
    from stress.engine import procstate
    from stress.engine.native import replay_argv

    replays = [folder] if folder.is_file() else sorted(folder.glob("*.ireereplay"))
    if not replays:
        raise UsageError(f"{folder} holds no HAL replay (record with soak --engine native "
                         "--record)")
    tools = native_tools(python or sys.executable)
    codes = []
    for _ in range(times):
        run = procstate.run_bounded(replay_argv(tools, replays[0], device), 120.0)
        codes.append(run.rc if run.rc is not None else -9)
    return codes
