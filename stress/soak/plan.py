"""A soak's plan, settled before its folder exists: which patterns, programs, target, driver and
device, workers and threads, for each engine (python: our workers; native: IREE's tools; exec:
the user's command); then its SoakConfig, built in one place for every engine."""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stress.engine.config import SoakConfig
from stress.engine.probe import LIBRARY_HINT, ProbeResult, probe
from stress.errors import UsageError
from stress.programs import corpus, targets, userprog
from stress.programs.program import Program
from stress.soak.options import SoakOptions
from stress.vocab import NO_KERNELS_MARK, Engine, Family, Numerics, family

if TYPE_CHECKING:
    from stress.engine.execrunner import ExecCommand

_DEFAULT_DURATION_S: float = 20.0  # neither --duration nor --invocations given
_GPU_TOOLS: tuple[tuple[str, str], ...] = (("nvidia-smi", "cuda"), ("amd-smi", "rocm"),
                                           ("rocm-smi", "rocm"))  # whose telemetry to read
_SOAKING_COMMANDS: frozenset[str] = frozenset({"soak", "gate", "compare", "bisect"})


@dataclass
class Plan:
    """What one engine's soak runs (the parts of its SoakConfig that differ by engine)."""

    target: targets.Target
    driver: str
    device_uri: str
    patterns: list[str]
    programs: list[Program]
    workers: int
    threads: int
    job_scale: float = 1.0
    found: ProbeResult = field(default_factory=ProbeResult)  # the driver probe's findings
    exported: Any = None  # --artifacts: (manifest, program -> (Program, .vmfb))
    inject: list[str] = field(default_factory=list)
    record: bool = False
    max_jobs_per_worker: int | None = None
    command: ExecCommand | None = None  # exec: the user's command, checked
    executable: Path | None = None  # exec: its program, resolved

    @property
    def exec_argv(self) -> list[str]:
        return list(self.command.argv) if self.command is not None else []


def config(opts: SoakOptions, plan: Plan, seed: int, results_dir: Path,
           artifacts: dict[str, Path], compiler_version: str) -> SoakConfig:
    """The run's config: the plan, and the options every engine shares."""
    from stress import __version__

    duration = opts.duration_s
    if duration is None and opts.invocations is None:
        duration = _DEFAULT_DURATION_S
    unchecked, why = unchecked_programs(
        plan.programs, opts.numerics, plan.found.drivers.get(plan.driver, {}).get("names", []))
    return SoakConfig(
        target=plan.target, driver=plan.driver, device_uri=plan.device_uri,
        programs=plan.programs, artifacts=artifacts, patterns=plan.patterns,
        workers=plan.workers, threads=plan.threads, seed=seed, duration_s=duration,
        invocations=opts.invocations, env=opts.env, max_failures=opts.max_failures,
        results_dir=results_dir, timeout_s=opts.timeout_s,
        teardown_timeout_s=opts.teardown_timeout_s,
        max_worker_restarts=opts.max_worker_restarts, inject=plan.inject, python=opts.python,
        shard=opts.shard, job_seed=opts.job_seed, job_scale=plan.job_scale,
        command=command_line(opts, seed), progress=opts.progress,
        compiler_version=compiler_version, tool_version=__version__, engine=opts.engine,
        exec_argv=plan.exec_argv, exec_cwd=str(plan.command.cwd) if plan.command else "",
        done_regex=plan.command.done_regex if plan.command else None,
        record=plan.record, max_jobs_per_worker=plan.max_jobs_per_worker,
        repro_class=opts.repro_class, repro_runs=opts.repro_runs,
        evidence_budget=opts.evidence_budget, numerics=opts.numerics, unchecked=unchecked,
        unchecked_why=why)


def unchecked_programs(programs: list[Program], asked: str, device_names: list[str]
                       ) -> tuple[list[str], str]:
    """(programs whose results go unchecked, why): all of them with `--numerics off`; on a
    device that names itself as running no kernels (the stand-in HIP library), every program
    with a dispatch (its results are whatever the buffers held), never a transfer-only one."""
    if asked == Numerics.OFF.value:
        return [p.name for p in programs], ""
    fake = next((n for n in device_names if NO_KERNELS_MARK in n), "")
    if not fake:
        return [], ""
    return ([p.name for p in programs if p.kind != corpus.TRANSFER],
            f"the device runs no kernels ({fake}): programs with dispatches unchecked")


def check_duration(opts: SoakOptions) -> None:
    if opts.duration_s is not None and opts.duration_s <= 0:
        raise UsageError("--duration must be positive")


# ---- patterns and programs ----------------------------------------------------------------
def resolve_patterns(names: list[str]) -> list[str]:
    """`all` (the default): the in-process patterns and process-per-job; `exit`: the exit-path
    family (opt-in: exit-alive finds the known local-task exit-order crash on every run);
    `driver` (opt-in): driver-churn."""
    return _resolve(names or [Family.CORE.value], (Family.CORE, Family.EXIT, Family.DRIVER),
                    "pattern(s)")


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


def choose_programs(globs: list[str], files: list[str]) -> list[Program]:
    progs: list[Program] = []
    if globs or not files:
        progs = corpus.select(globs)
    progs += [userprog.load(f) for f in files]
    return progs


def choose_exported(arts: dict[str, tuple[Program, Path]], globs: list[str]) -> list[Program]:
    progs = [p for p, _ in arts.values()]
    if not globs:
        return progs
    chosen = [p for p in progs if any(fnmatch.fnmatchcase(p.name, g) for g in globs)]
    if not chosen:
        raise UsageError(f"no exported program matches {', '.join(globs)}")
    return chosen


def native_programs(programs: list[Program]) -> list[Program]:
    """The programs the tools can run with checked outputs (native.unsupported)."""
    from stress.engine.native import unsupported

    ok = [p for p in programs if unsupported(p) is None]
    if not ok:
        why = sorted({f"{p.name}: {unsupported(p)}" for p in programs})[:3]
        raise UsageError(f"no chosen program runs under --engine native ({'; '.join(why)})")
    return ok


def native_tools(python: str) -> Any:
    from stress.engine.nativetools import ToolsMissing, find_tools

    try:
        return find_tools(python)
    except ToolsMissing as exc:
        raise UsageError(str(exc)) from None


# ---- targets ------------------------------------------------------------------------------
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


def exec_target(name: str | None) -> targets.Target:
    """The target of an exec soak, for telemetry only (the command brings its own device):
    --target, else the GPU whose tool is on PATH, else cpu (no telemetry)."""
    if name:
        return targets.parse(name)
    return targets.parse(next((b for tool, b in _GPU_TOOLS if shutil.which(tool)), "cpu"))


# ---- the command line ---------------------------------------------------------------------
def command_line(opts: SoakOptions, seed: int) -> str:
    """The command line that reproduces the run (its seed said even when it was drawn, or
    taken from a resumed plan)."""
    if opts.repro_class and opts.results is not None:  # `iree-stress repro`: its job alone,
        #   its input seed forced; the command that reruns that is repro's own, not a soak
        return shlex.join(["iree-stress", "repro", str(opts.results.parent.resolve()),
                           "--times", str(opts.repro_runs)])
    argv = recorded_command(opts.argv)
    extra = list(opts.from_env)  # a rerun elsewhere has none of this environment
    if opts.seed is None or (opts.resume and "seed" not in opts.given):
        extra += ["--seed", str(seed)]
    cut = argv.index("--") if "--" in argv else len(argv)  # ours, not the exec command's
    line = shlex.join([*argv[:cut], *extra, *argv[cut:]])
    where = (opts.cwd or Path.cwd()).resolve()
    if Engine.of(opts.engine) is Engine.EXEC and any(_relative(a, where) for a in argv[2:]):
        return f"cd {shlex.quote(str(where))} && {line}"  # reproduces from anywhere
    return line


def _relative(arg: str, cwd: Path) -> bool:
    """`arg` names a path relative to `cwd` (it has a slash and does not start with one, or
    it is there: `tests`), so a rerun from elsewhere would name another file."""
    value = arg.split("=", 1)[-1] if arg.startswith("-") else arg
    if not value or value.startswith(("/", "-")) or "://" in value:
        return False
    if "/" in value:
        return True
    try:
        return (cwd / value).exists()
    except (OSError, ValueError):  # a name too long for a path (`python -c CODE`)
        return False


def recorded_command(args: list[str]) -> list[str]:
    """The command line that reproduces this soak: `iree-stress SUBCOMMAND ARGS`, where the
    subcommand is the one typed (gate, compare and bisect run soaks too: a gate run's rerun
    is the gate) when `args` are this process's own arguments after it, else `soak`."""
    typed = sys.argv[1:2] if sys.argv[2:] == list(args) and len(sys.argv) > 1 else []
    sub = typed[0] if typed and typed[0] in _SOAKING_COMMANDS else "soak"
    return ["iree-stress", sub, *args]


def draw_seed(opts: SoakOptions) -> int:
    return opts.seed if opts.seed is not None else int.from_bytes(os.urandom(3), "little")
