"""Click options shared by several commands, defined once."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from stress.errors import UsageError
from stress.fs import ENV_CACHE_DIR, default_cache_dir
from stress.vocab import Engine, Family, Numerics, family

F = TypeVar("F", bound=Callable[..., Any])

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """`90s`, `2h`, `1h30m`, `45` (seconds)."""
    text = text.strip().lower()
    total, pos = 0.0, 0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise click.BadParameter(f"{text!r} is not a duration like 90s, 10m, 2h, 1h30m")
    if total <= 0:
        raise click.BadParameter("must be positive")
    return total


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value))
        except click.BadParameter as exc:
            self.fail(str(exc), param, ctx)


class AliasedOption(click.Option):
    """An option with old spellings that still parse but are left out of --help and of error
    messages (renamed options keep their old names as hidden aliases for one release)."""

    def __init__(self, param_decls: list[str], *, aliases: tuple[str, ...] = (),
                 **kwargs: Any):
        super().__init__([*param_decls, *aliases], **kwargs)
        self.aliases = tuple(aliases)

    def _shown(self) -> tuple[list[str], list[str]]:
        return ([o for o in self.opts if o not in self.aliases],
                [o for o in self.secondary_opts if o not in self.aliases])

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        saved = self.opts, self.secondary_opts
        self.opts, self.secondary_opts = self._shown()
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts, self.secondary_opts = saved

    def get_error_hint(self, ctx: click.Context | None) -> str:
        return " / ".join(f"'{o}'" for o in self._shown()[0])


def option(*param_decls: str, aliases: tuple[str, ...] = (), **kwargs: Any) -> Callable[[F], F]:
    """click.option with hidden `aliases` (old spellings)."""
    return click.option(*param_decls, cls=AliasedOption, aliases=aliases, **kwargs)


# Old spellings kept for one release (docs/soak.md, "Option names"): new name -> old ones.
RENAMED: dict[str, tuple[str, ...]] = {
    "--programs": ("-p",), "--patterns": ("-P",), "--mlir": ("--program",),
    "--compilers": ("-j", "--jobs"), "--workers": ("--parallel",), "--times": ("-n",),
    "--duration": ("--budget",),
}


def split_csv(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def target_option(f: F) -> F:
    return click.option("--target", "-t", envvar="IREE_STRESS_TARGET", show_envvar=True,
                        help="cpu | rocm[:ARCH] | cuda[:ARCH] | vulkan. Default for soak: a "
                             "usable GPU driver, else cpu.")(f)


def programs_option(f: F) -> F:
    f = option("--mlir", "program_files", aliases=RENAMED["--mlir"], multiple=True,
               metavar="FILE.mlir",
               help="A user program (plain func.func or fusilli-style torch MLIR). "
                    "Repeatable.")(f)
    return option("--programs", "programs", aliases=RENAMED["--programs"], multiple=True,
                  metavar="GLOB",
                  help="Corpus programs by name glob (comma list or repeatable), "
                       "e.g. 'binary.add.*'. Default: all (none with only --mlir).")(f)


def _default_cache_dir() -> str:
    return str(default_cache_dir())


def cache_option(f: F) -> F:
    return click.option("--cache-dir", type=click.Path(file_okay=False), envvar=ENV_CACHE_DIR,
                        show_envvar=True, default=_default_cache_dir,
                        show_default="~/.cache/iree-stress",
                        help="Content-addressed artifact cache.")(f)


def compilers_option(f: F) -> F:
    return option("--compilers", "compile_jobs", aliases=RENAMED["--compilers"],
                  type=click.IntRange(1), default=2, show_default=True, metavar="N",
                  help="iree-compile processes at once (a cold corpus compile).")(f)


def run_options(f: F) -> F:
    """Every option a soak run takes except how long it runs and how it prints (soak and gate
    share these; gate replaces --duration by --budget)."""
    decorators = [
        target_option,
        click.option("--device", help="Device URI (default: the target's driver, e.g. "
                                      "local-task, hip)."),
        option("--workers", "-w", "workers", aliases=RENAMED["--workers"],
               type=click.IntRange(1), envvar="IREE_STRESS_WORKERS", show_envvar=True,
               metavar="N",
               help="Worker processes at once (exec, native: copies of the command or tool, "
                    "like ctest -j N)  [default: cores; exec: 1]"),
        click.option("--threads", type=click.IntRange(1), default=2, show_default=True,
                     help="Threads per worker."),
        option("--patterns", "patterns", aliases=RENAMED["--patterns"], multiple=True,
               metavar="NAMES",
                     help="Lifecycle patterns (comma list or repeatable; default all): "
                          f"{', '.join(family(Family.CORE))}."),
        programs_option,
        click.option("--invocations", "-n", type=click.IntRange(1),
                     help="Stop after this many planned invocations (of this shard)."),
        click.option("--seed", type=int, envvar="IREE_STRESS_SEED", show_envvar=True,
                     help="Seed of the whole schedule (printed; same seed = same jobs). "
                          "Shards of one plan need the same seed."),
        click.option("--env", "env_items", multiple=True, metavar="KEY=VALUE",
                     help="Environment for workers only (AMD_LOG_LEVEL=4, HSA_*, "
                          "LD_LIBRARY_PATH)."),
        click.option("--max-failures", type=click.IntRange(1),
                     help="Stop after this many failures."),
        click.option("--results", type=click.Path(file_okay=False, path_type=Path),
                     help="Run folder, new or empty (one that holds a run is refused: soak "
                          "--resume continues it)  [default: results/RUN_ID]"),
        click.option("--timeout", type=Duration(), default="30s", show_default=True,
                     help="Deadline of one step (invoke, upload, ...): past it is a hang."),
        click.option("--teardown-timeout", type=Duration(), default="15s", show_default=True,
                     help="Deadline of device release and worker exit: past it is a teardown "
                          "hang."),
        click.option("--max-worker-restarts", type=click.IntRange(0), default=50,
                     show_default=True, metavar="N",
                     help="Stop the run when workers had to be restarted (after crashes, "
                          "hangs, failed starts) more than N times within a minute: a restart "
                          "storm."),
        click.option("--max-jobs-per-worker", type=click.IntRange(1), default=None,
                     help="Retire a pool worker after this many jobs (a fresh process takes "
                          "its place): bounded clusters for the statistics. Default: none; "
                          "gate: 100."),
        click.option("--evidence-budget", type=click.IntRange(0), default=5,
                     show_default=True, metavar="N",
                     help="Crashes of one failure mode (class, signal, step) that get their "
                          "core read and full stacks; later ones are counted with a cheap "
                          "record, and every 2^k-th after that is sampled in full again. "
                          "0: every crash."),
        click.option("--numerics", type=click.Choice([n.value for n in Numerics]),
                     default=Numerics.REFERENCE.value, show_default=True,
                     envvar="IREE_STRESS_NUMERICS", show_envvar=True,
                     help="How results are checked: reference (numpy, where the program has "
                          "one; else repeat), repeat (each result against the job's first: a "
                          "program with no reference, a nondeterministic kernel), off. On a "
                          "device that runs no kernels (the stand-in HIP library) programs "
                          "with dispatches are never checked; transfer-only ones are."),
        click.option("--inject", multiple=True, metavar="KIND@STEP[:PROB]",
                     help="Inject a real fault: segv|abort|kill|hang|exit|raise|corrupt at a "
                          "journal step (invoke, device-release, ...)."),
        click.option("--python", "python", metavar="PATH",
                     help="Interpreter for workers (a runtime stack's venv)."),
        shard_option,
        click.option("--job-seed", type=int, hidden=True,
                     help="Force every job's input seed (what the repro.sh of older runs "
                          "passed; `iree-stress repro FOLDER` sets it now). Hidden."),
        click.option("--artifacts", type=click.Path(exists=True, file_okay=False,
                                                    path_type=Path),
                     help="Use prebuilt artifacts (from `compile --export`) instead of "
                          "compiling."),
        cache_option,
        compilers_option,
    ]
    for d in reversed(decorators):
        f = d(f)
    return f


def shard_option(f: F) -> F:
    return click.option(
        "--shard", metavar="K/N",
        help="Run only shard K of N of the seeded plan (1-based, like cargo-nextest's "
             "--partition). Default: IREE_STRESS_SHARD=K/N, else a Kubernetes Indexed Job "
             "(JOB_COMPLETION_INDEX + IREE_STRESS_SHARDS), a Slurm array "
             "(SLURM_ARRAY_TASK_ID/COUNT/MIN) or GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS; else "
             "the whole plan.")(f)


def soak_options_from(kw: dict[str, Any], duration_s: float | None, progress: bool,
                      argv: list[str]) -> Any:
    """The SoakOptions of `run_options`' values (a UsageError for a bad --env, --inject or
    shard). Returns stress.soak.options.SoakOptions (imported here, late: the CLI starts fast)."""
    import os

    from stress.engine import inject
    from stress.errors import UsageError
    from stress.soak.options import SoakOptions
    from stress.verdicts.shards import ShardSource, resolve

    ctx = click.get_current_context(silent=True)
    given = frozenset(name for name in kw if ctx is not None and ctx.get_parameter_source(name)
                      in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT))
    env = {}
    for item in kw["env_items"]:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env wants KEY=VALUE, got {item!r}")
        env[key] = value
    shard = resolve(kw["shard"], os.environ)
    if shard.count > 1 and shard.source is not ShardSource.OPTION:  # say it: easy to miss
        click.echo(f"iree-stress: running {shard.describe()}", err=True)
    for spec in kw["inject"]:
        inject.parse(spec)
    return SoakOptions(
        target=kw["target"], device=kw["device"], workers=kw["workers"], threads=kw["threads"],
        patterns=split_csv(kw["patterns"]), programs=split_csv(kw["programs"]),
        program_files=list(kw["program_files"]), duration_s=duration_s,
        invocations=kw["invocations"], seed=kw["seed"], env=env,
        max_failures=kw["max_failures"], results=kw["results"], timeout_s=kw["timeout"],
        teardown_timeout_s=kw["teardown_timeout"],
        max_worker_restarts=kw["max_worker_restarts"], inject=list(kw["inject"]),
        python=kw["python"], shard=shard.pair, job_seed=kw["job_seed"],
        artifacts=kw["artifacts"], cache_dir=Path(kw["cache_dir"]),
        compile_jobs=kw["compile_jobs"], progress=progress, argv=argv,
        max_jobs_per_worker=kw.get("max_jobs_per_worker"), resume=bool(kw.get("resume")),
        given=given, evidence_budget=kw.get("evidence_budget", 5),
        numerics=kw.get("numerics") or Numerics.REFERENCE.value,
        from_env=env_given_argv(ctx, shard))


# where artifacts are kept, not what is tested: a rerun elsewhere uses its own cache
_NOT_RECORDED: frozenset[str] = frozenset({"cache_dir"})


def env_given_argv(ctx: click.Context | None, shard: Any) -> list[str]:
    """The options this command took from the environment (IREE_STRESS_SEED, a CI system's
    shard variables, ...) as command-line tokens, for the command that reproduces the run: a
    rerun on another machine has none of that environment (the Slurm example's rerun line
    had neither its seed nor its shard)."""
    from stress.verdicts.shards import ShardSource

    out: list[str] = []
    if shard.count > 1 and shard.source is not ShardSource.OPTION:
        out += ["--shard", f"{shard.index + 1}/{shard.count}"]
    if ctx is None:  # called outside a command (tests, bench scripts)
        return out
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name is None or p.name in _NOT_RECORDED or \
                ctx.get_parameter_source(p.name) is not ParameterSource.ENVIRONMENT:
            continue
        name = next((o for o in p.opts if o.startswith("--")), p.opts[0])
        if p.is_flag:
            out += [name] if ctx.params.get(p.name) else []
            continue
        raw = p.value_from_envvar(ctx)  # as the user wrote it (15s, not 15.0)
        for value in raw if isinstance(raw, (list, tuple)) else [raw]:
            out += [name, str(value)]
    return out


_ENGINE_CHOICES: list[str] = [e.value for e in (Engine.PYTHON, Engine.EXEC, Engine.NATIVE)]


def engine_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """What runs each job (soak and gate): our Python workers, the user's command after `--`
    (docs/exec.md) or IREE's own tools (docs/native.md)."""
    decorators = [
        click.option("--engine", type=click.Choice(_ENGINE_CHOICES),
                     default=Engine.PYTHON.value, show_default=True, envvar="IREE_STRESS_ENGINE",
                     show_envvar=True,
                     help="python: our workers; exec: the command after `--`, one process "
                          "per job; native: iree-run-module processes."),
        click.option("--done-regex", metavar="REGEX",
                     help="exec: the command's output line saying its work is done; an exit "
                          "later than --teardown-timeout after it is a teardown hang."),
        click.option("--name", "exec_name", metavar="NAME",
                     help="exec: the program's name in reports, compare, merge and known "
                          "files (default: the runner and its test paths, "
                          "`exec:pytest:proj/tests`)."),
        click.option("--record", is_flag=True,
                     help="native: record each job's HAL stream (kept for failures and a "
                          "bounded sample)."),
        click.argument("command", nargs=-1, type=click.UNPROCESSED),
    ]
    for d in reversed(decorators):
        f = d(f)
    return f


def apply_engine(opts: Any, kw: dict[str, Any]) -> Any:
    """Sets engine_options' values on SoakOptions."""
    opts.engine, opts.command = kw["engine"], list(kw["command"])
    opts.done_regex, opts.record = kw["done_regex"], kw["record"]
    opts.name = kw.get("exec_name")
    return opts


def stacks_exec_usage(opts: Any) -> None:
    """compare and bisect: the command after `--` and --engine agree and --done-regex
    compiles, before any stack is built (one line, exit 2; soak says the same words when its
    run starts). Found only once a stack's trial started, each was an inconclusive verdict."""
    from stress.engine.execrunner import ExecCommand

    if Engine.of(opts.engine) is not Engine.EXEC:
        if opts.command:
            raise UsageError("a command after `--` runs only with --engine exec")
        return
    try:
        ExecCommand(list(opts.command), Path.cwd(), opts.done_regex).validate()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def gpu_devices(spec: str, target: str | None) -> str:
    """`--gpus` as a device list for the target's driver (cuda, else rocm's hip), counting the
    visible GPUs with the telemetry tools."""
    from stress.engine import telemetry

    backends = [b for b in ("cuda", "rocm") if target is None or target.startswith(b)]
    if not backends:
        raise UsageError(f"--gpus needs a GPU target (cuda or rocm), not {target}")
    for backend in backends:
        snap = telemetry.snapshot(backend)
        if snap.get("gpus"):
            driver = "cuda" if backend == "cuda" else "hip"
            try:
                return ",".join(telemetry.gpu_uris(driver, spec, len(snap["gpus"])))
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    raise UsageError(f"--gpus {spec}: no GPU found by the telemetry tools "
                     f"({', '.join(backends)})")


def bisect_options(f: F) -> F:
    """When bisect stops and what it looks for (the defaults are analysis.changepoint's and
    verdicts.bisect's: a test holds them equal)."""
    decorators = [
        click.option("--confidence", type=click.FloatRange(0.5, 1.0, min_open=True,
                                                           max_open=True),
                     default=0.975, show_default=True,
                     help="Stop when the top stack's posterior of being the first bad one "
                          "reaches it. Lower stops sooner, and a faint fault's answer is "
                          "then right less often than printed; how often the default's "
                          "answers are right, setting by setting: docs/bisect-peer.md."),
        click.option("--max-trials", type=click.IntRange(1), default=300, show_default=True,
                     help="Trials in all (those on disk included); then inconclusive, with "
                          "the posterior's top stacks."),
        click.option("--least-rise", type=click.FloatRange(0.05, 0.4), default=0.1,
                     show_default=True, metavar="POINTS",
                     help="The smallest rise of a trial's chance to fail, in points over the "
                          "good stacks' (0.2: from 2% to 22%), that makes a stack bad. Larger "
                          "takes fewer trials, but a smaller rise may then be answered wrong "
                          "at full confidence (docs/bisect-model.md, 'What counts as a rise')."),
        click.option("--p-good", type=float, hidden=True,  # the SPRT's, before issue 27
                     help="Ignored (said so): bisect learns the good side's failure rate."),
        click.option("--p-bad", type=float, hidden=True,
                     help="Ignored (said so): bisect learns the bad side's failure rate."),
    ]
    for d in reversed(decorators):
        f = d(f)
    return f
