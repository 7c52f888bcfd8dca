"""Command line: each command parses options, builds a config, calls one function."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from stress import cli_housekeeping, cli_stacks
from stress.errors import UsageError, one_line, usage_line
from stress.options import (
    RENAMED,
    Duration,
    apply_engine,
    bisect_options,
    cache_option,
    compilers_option,
    engine_options,
    gpu_devices,
    option,
    programs_option,
    run_options,
    soak_options_from,
    split_csv,
    stacks_exec_usage,
    target_option,
)
from stress.ui import Log, Status, erase_live
from stress.vocab import RunStatus

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

EXIT_OK, EXIT_FAILURES, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """--version: ours, and the runtime and compiler a soak here would use (versions.py)."""
    if value and not ctx.resilient_parsing:
        from stress.versions import describe

        click.echo(describe())
        ctx.exit()


@click.group(context_settings=CONTEXT)
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_show_version, help="Show the version, runtime and compiler, and exit.")
def cli() -> None:
    """iree-stress: find, reproduce and pin down flakes in the IREE runtime.

    Exit codes: 0 ok, 1 failures found, 2 usage error, 3 inconclusive.
    """


for _command in (*cli_stacks.COMMANDS, *cli_housekeeping.COMMANDS):  # (modules of their own:
    cli.add_command(_command)  # this one stays under 500 lines)


@cli.command(context_settings=CONTEXT)
@programs_option
@click.option("--kind", help="unary | binary | chain | dynamic")
@click.option("--op", help="e.g. add, exp, silu")
@click.option("--dtype", help="f32 | f16 | bf16 | i32 | i8")
@click.option("--target", "-t", envvar="IREE_STRESS_TARGET", show_envvar=True, default="cpu",
              show_default=True, help="The target a --mlir file is compiled for, to check it.")
@cache_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per program.")
def programs(programs: tuple[str, ...], program_files: tuple[str, ...], kind: str | None,
             op: str | None, dtype: str | None, target: str, cache_dir: str,
             as_json: bool) -> None:
    """List corpus (and user) programs: name, op, dtype, shape. A --mlir file is compiled
    (into the cache) to check it: one that does not compile is an error naming its line
    (exit 2)."""
    from stress.programs import cache, corpus, targets, userprog

    progs = corpus.select(split_csv(programs), kind=kind, op=op, dtype=dtype) \
        if programs or not program_files else []
    users = [userprog.load(f) for f in program_files]
    if users:
        tgt = targets.parse(target)
        report = cache.ArtifactCache(Path(cache_dir)).compile_all(users, tgt)
        if report.errors:  # (listed as fine, it would fail at the soak: said as soak says it)
            raise UsageError(report.failure_line(
                tgt.name, cache.rerun_hint(tgt.name, (), program_files)))
    progs += users
    if not progs:
        raise UsageError("no program matches those filters")
    for p in progs:
        if as_json:
            click.echo(json.dumps({"name": p.name, "kind": p.kind, "op": p.op, "dtype": p.dtype,
                                   "shape": p.shape_text, "reference": p.has_reference}))
        else:
            click.echo(f"{p.name:<44} {p.op:<16} {p.dtype:<5} {p.shape_text}")
    if not as_json:
        checked = f" ({len(users)} compiled for {target})" if users else ""
        click.echo(f"{len(progs)} programs{checked}", err=True)


@cli.command(context_settings=CONTEXT)
@target_option
@programs_option
@cache_option
@compilers_option
@click.option("--export", "export_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also copy the artifacts to this folder with a manifest "
                   "(for `soak --artifacts` on a machine without a compiler).")
@click.option("--verbose", "-v", is_flag=True,
              help="For each program that fails: all of the compiler's diagnostics and its "
                   "command line (to rerun it by hand).")
@click.option("--quiet", "-q", is_flag=True, help="No live progress.")
def compile(target: str | None, programs: tuple[str, ...], program_files: tuple[str, ...],
            cache_dir: str, compile_jobs: int, export_dir: Path | None, verbose: bool,
            quiet: bool) -> None:
    """Compile programs into the artifact cache (a warm cache runs no compiler). A program
    that does not compile is one line naming its file and line (exit 2), as in soak."""
    from stress.programs import cache, targets
    from stress.soak.plan import choose_programs

    tgt = targets.parse(target or "cpu")
    progs = choose_programs(split_csv(programs), list(program_files))
    store = cache.ArtifactCache(Path(cache_dir))
    report = store.compile_all(progs, tgt, jobs=compile_jobs, status=Status(not quiet))
    if verbose:
        for err in report.errors:
            click.echo(err.describe(), err=True)
    if not (quiet and report.errors):
        click.echo(f"{tgt.name}: {report.compiled} compiled, {report.cached} cached, "
                   f"{len(report.errors)} failed ({report.compiler_version}) -> {cache_dir}")
    if export_dir is not None and report.artifacts:  # (compile here, soak elsewhere: what
        #   did compile goes; the exit status still says some did not)
        click.echo(f"exported {len(report.artifacts)} artifacts -> "
                   f"{cache.export(report, export_dir)}")
    if report.errors:  # (what did compile is in the cache; `programs` lists them)
        raise UsageError(report.failure_line(
            tgt.name, cache.rerun_hint(tgt.name, programs, program_files)))


@cli.command(context_settings=CONTEXT)
@run_options
@engine_options
@click.option("--duration", "-d", type=Duration(), envvar="IREE_STRESS_DURATION",
              show_envvar=True, help="How long, counted from the first job (not worker "
                                     "start-up): 90s, 10m, 2h  [default: 20s]")
@click.option("--resume", is_flag=True,
              help="--results holds a run: continue its plan there (same seed, programs, "
                   "patterns; the next jobs of its schedule) as a new run beside the old ones "
                   "(files in DIR/resume-K/), which are never rewritten.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No live progress.")
@click.option("--gpus", metavar="all|N|I,J",
              help="Spread workers over these GPUs (sets --device to cuda://0,cuda://1,...); "
                   "several devices can also be given as --device A,B.")
def soak(**kw: Any) -> None:
    """Run many invocations across worker processes x threads under device lifecycle patterns;
    record every failure with its evidence."""
    status = Status(not kw["quiet"])
    if status.tty:  # at once, before the imports and checks of a second or so (in a log,
        #   where it would stay above a usage error, the first line is the driver check's)
        status.update("soak: starting (programs, driver, artifacts)", force=True)
    from stress.analysis.text import summary_table
    from stress.soak.run import run_soak

    if kw["gpus"]:
        kw["device"] = gpu_devices(kw["gpus"], kw["target"])

    opts = apply_engine(soak_options_from(kw, kw["duration"], not kw["quiet"], sys.argv[2:]),
                        kw)
    summary = run_soak(opts, status=status)
    if kw["as_json"]:
        click.echo(json.dumps(summary))
    else:
        click.echo(summary_table(summary))
    sys.exit(soak_exit_code(summary))


def soak_exit_code(summary: dict[str, Any]) -> int:
    """1 when failures were found (whatever else happened: they are real); else 3 when the run
    cannot vouch for its own result (interrupted, store failure, harness errors); else 0."""
    if summary["failed"]:
        return EXIT_FAILURES
    if summary["status"] != RunStatus.COMPLETED or summary.get("harness_errors"):
        return EXIT_INCONCLUSIVE
    return EXIT_OK


@cli.command(context_settings=CONTEXT)
@click.argument("run_dirs", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html", "json"]),
              default="text", show_default=True,
              help="text for a terminal, markdown for a PR or step summary, html with plots, "
                   "json for scripts.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here instead of stdout.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write JUnit XML (one testcase per program x pattern).")
@click.option("--known", "known_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              envvar="IREE_STRESS_KNOWN", show_envvar=True,
              help="Known-failures file (TOML, docs/reports.md); repeatable. Known signatures "
                   "are shown apart from new ones.")
def report(run_dirs: tuple[Path, ...], fmt: str, output: Path | None,
           junit: Path | None, known_files: tuple[Path, ...]) -> None:
    """The answer first (what fails, how often, where, what other threads were doing, known
    or new), then signatures, HAL-sequence correlation, factor rates and exposures of one or
    more runs (complete or killed midway). Exit 1 when a run had a failure that is not known."""
    from stress.analysis import html
    from stress.analysis import junit as junit_mod
    from stress.analysis import report as report_mod
    from stress.fs import atomic_write

    r = report_mod.build(list(run_dirs), known_files)
    renderers: dict[str, Callable[[report_mod.Report], str]] = {
        "text": report_mod.render_text, "markdown": report_mod.render_markdown,
        "html": html.render, "json": lambda x: json.dumps(x.as_dict(), indent=1)}
    text = renderers[fmt](r)
    if output:
        atomic_write(output, text.encode())
    else:
        click.echo(text)
    if junit:
        atomic_write(junit, junit_mod.render(r).encode())
    sys.exit(EXIT_FAILURES if r.new_signatures else EXIT_OK)


@cli.command(context_settings=CONTEXT)
@run_options
@engine_options
@click.option("--max-rate", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              envvar="IREE_STRESS_MAX_RATE", show_envvar=True,
              help="Failing jobs allowed (a share, e.g. 0.01): PASS when the rate is below it.")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="1 - each error rate of the sequential test (false PASS, false FAIL).")
@click.option("--design-effect", type=click.FloatRange(1), default=3.0, show_default=True,
              help="Clustering assumed until the data show more (1: independent jobs).")
@option("--duration", "-d", "duration", aliases=RENAMED["--duration"], type=Duration(),
        default="10m", show_default=True,
        envvar=["IREE_STRESS_DURATION", "IREE_STRESS_BUDGET"], show_envvar=True,
        help="Longest soak (from the first job); undecided then: INCONCLUSIVE.")
@click.option("--fatal", default="crash,hang,teardown_hang,miscompare", show_default=True,
              help="Classes whose new signatures FAIL at once (comma list, or none).")
@click.option("--known", "known_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              envvar="IREE_STRESS_KNOWN", show_envvar=True,
              help="Known-failures file (docs/reports.md): reported, never failing the gate.")
@click.option("--from", "from_dirs", multiple=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Decide on recorded (merged) run folders instead of running a soak.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path),
              help="Write JUnit XML: the verdict, one testcase per signature and per pattern.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No live progress.")
def gate(**kw: Any) -> None:
    """PASS / FAIL / INCONCLUSIVE: soak until a sequential test decides whether the failing-job
    rate is below --max-rate (or a new fatal failure FAILs it), or decide on merged shards
    (--from). Exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE. Appends a summary to $GITHUB_STEP_SUMMARY.
    See docs/ci.md."""
    import os

    from stress.fs import atomic_write
    from stress.verdicts import gate as gate_mod
    from stress.verdicts import gate_live, gate_outputs

    if kw["max_rate"] is None:
        raise UsageError("gate needs --max-rate (e.g. 0.01: at most 1% of jobs failing)")
    spec = gate_mod.GateSpec(kw["max_rate"], kw["confidence"],
                             kw["design_effect"], gate_mod.parse_fatal(kw["fatal"]),
                             gate_mod.load_known(kw["known_files"]))
    if kw["from_dirs"]:
        result = gate_mod.evaluate(list(kw["from_dirs"]), spec)
    else:
        opts = apply_engine(soak_options_from(kw, kw["duration"], not kw["quiet"],
                                              sys.argv[2:]), kw)
        result = gate_live.run_gate(opts, spec)
    if kw["as_json"]:
        click.echo(json.dumps(result.as_dict()))
    else:
        click.echo(gate_outputs.render_text(result))
    if kw["junit"]:
        atomic_write(kw["junit"], gate_outputs.render_junit(result).encode())
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        gate_outputs.append_step_summary(result, Path(summary_path))
    sys.exit(result.verdict.exit_code)


@cli.command(context_settings=CONTEXT)
@click.argument("run_dirs", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The merged run folder (created; must not hold a store yet).")
def merge(run_dirs: tuple[Path, ...], output: Path) -> None:
    """Combine the run folders of many machines (the shards of one plan) into one run folder:
    one store holding every run, failure folders copied. Refuses runs of different plans,
    seeds, targets or stacks. `gate --from DIR` and `report DIR` read the result."""
    from stress.soak.run import write_summary
    from stress.store.merge import merge as merge_runs

    m = merge_runs(list(run_dirs), output)
    write_summary(output)  # the merged folder reads like any run folder (issue 28 item 3)
    click.echo(m.describe())


@cli.command(context_settings=CONTEXT)
@click.argument("a")
@click.argument("b")
@click.option("--stacks", "stacks_file", required=True, envvar="IREE_STRESS_STACKS",
              show_envvar=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The stacks file (TOML; docs/stacks.md).")
@run_options
@engine_options
@click.option("--duration", "-d", type=Duration(), help="Length of each trial's soak  "
                                                       "[default: 20s, or --invocations]")
@click.option("--trials", type=click.IntRange(1), default=20, show_default=True,
              help="Most pairs of trials (A then B, same seed) before the fixed-size test.")
@click.option("--grid", is_flag=True,
              help="Also cross the sides: A against A's IREE with B's ROCm, and against B's "
                   "IREE with A's ROCm (which side carries the difference).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No live state.")
def compare(**kw: Any) -> None:
    """Is stack B worse than stack A? Whole-soak trials alternated A B A B with the same seeds,
    a sequential test that stops as soon as it decides, per-signature comparison. Verdict:
    B worse (exit 1), A worse, no difference shown (exit 0), inconclusive (exit 3: a stack's
    workers could not start). --results is the folder of all trials. See docs/stacks.md."""
    from stress.verdicts import compare as compare_mod
    from stress.verdicts import grid as grid_mod

    opts = apply_engine(soak_options_from(kw, kw["duration"], False, sys.argv[2:]), kw)
    stacks_exec_usage(opts)
    log = Log(not (kw["quiet"] or kw["as_json"]))  # lines and live steps, on stderr
    if kw["grid"]:
        cells = grid_mod.run_grid(opts, kw["stacks_file"], kw["a"], kw["b"], kw["trials"],
                                  kw["results"], log)
        click.echo(json.dumps([c.as_dict() for c in cells]) if kw["as_json"] else
                   grid_mod.render_grid(cells))
        sys.exit(grid_mod.grid_exit_code(cells))
    result = compare_mod.run_compare(opts, kw["stacks_file"], kw["a"], kw["b"], kw["trials"],
                                     kw["results"], log)
    click.echo(json.dumps(result.as_dict()) if kw["as_json"] else compare_mod.render(result))
    sys.exit(result.verdict.exit_code)


@cli.command(context_settings=CONTEXT)
@click.option("--stacks", "stacks_file", required=True, envvar="IREE_STRESS_STACKS",
              show_envvar=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The stacks file; bisect walks its stacks in file order.")
@click.option("--good", required=True, help="A stack known good (earlier in the file).")
@click.option("--bad", required=True, help="A stack known bad (later in the file).")
@run_options
@engine_options
@click.option("--duration", "-d", type=Duration(), help="Length of each trial's soak  "
                                                       "[default: 20s, or --invocations]")
@bisect_options
@cli_stacks.history_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No live state.")
def bisect(**kw: Any) -> None:
    """Which stack between --good and --bad (in file order) is the first bad one? Bayesian
    noisy bisection: a posterior over the first bad stack with both sides' failure rates
    unknown; each trial goes where it is expected to tell the most, until one stack reaches
    --confidence. Every trial is cached under --results (default results/bisect-PLAN): rerun
    the same command to resume; trials of a compare of the same plan next to it count too.
    With --engine exec, each trial runs the command after `--` under each stack's environment
    (the user's own test: docs/exec.md). Exit 0 found, 3 inconclusive. See docs/stacks.md."""
    from stress.verdicts import bisect as bisect_mod

    opts = apply_engine(soak_options_from(kw, kw["duration"], False, sys.argv[2:]), kw)
    stacks_exec_usage(opts)
    log = Log(not (kw["quiet"] or kw["as_json"]))  # lines and live steps, on stderr
    if kw["p_good"] is not None or kw["p_bad"] is not None:
        click.echo("note: --p-good/--p-bad are ignored: bisect learns both sides' rates from "
                   "the trials (docs/stacks.md)", err=True)
    result = bisect_mod.run_bisect(opts, kw["stacks_file"], kw["good"], kw["bad"],
                                   kw["results"], log, kw["confidence"], kw["max_trials"],
                                   kw["least_rise"], cli_stacks.history_trials(kw, log))
    click.echo(json.dumps(result.as_dict()) if kw["as_json"] else bisect_mod.render(result))
    sys.exit(result.outcome.exit_code)


@cli.command(context_settings=CONTEXT)
@click.argument("folder", type=click.Path(exists=True, path_type=Path))
@option("--times", "times", aliases=RENAMED["--times"], type=click.IntRange(1), default=20,
        show_default=True, metavar="N", help="Reruns of the job.")
@click.option("--replay", "with_replay", is_flag=True,
              help="Native failures: also run the folder's recorded HAL stream with "
                   "iree-run-replay, --times times.")
@click.option("--device", help="Device of --replay  [default: the run's device]")
@click.option("--quiet", "-q", is_flag=True, help="No live progress.")
def repro(folder: Path, times: int, with_replay: bool, device: str | None,
          quiet: bool) -> None:
    """Rerun exactly the job of one failure (FOLDER: RUN_DIR/failures/NNNN-...): same engine,
    program, pattern, input seed, command, environment and interpreter, one at a time, and
    say how often it fails the same way (its signature: a count and a rate, with a 95%
    interval) beside that signature's rate in the original run, and which other failure modes
    it hit. The reruns are a run of their own in FOLDER/repro-TIME/; every failure folder's
    repro.sh runs this command. Exit 1 when it failed again (either way), 0 when not, 3 when
    interrupted before it failed again.
    With --replay, FOLDER may also be a recorded healthy job's replay
    (RUN_DIR/native/replays/*.ireereplay): only that is replayed."""
    from stress.soak.repro import repro as repro_run
    from stress.soak.repro import run_replays

    if with_replay and folder.suffix == ".ireereplay":
        codes = run_replays(folder, device or "local-task", times, None)
        click.echo(f"{folder.name}: iree-run-replay exited 0 in "
                   f"{sum(c == 0 for c in codes)}/{len(codes)} runs")
        sys.exit(EXIT_OK if all(c == 0 for c in codes) else EXIT_FAILURES)
    result = repro_run(folder, times, device, with_replay=with_replay, progress=not quiet)
    click.echo(result.describe())
    bad_replay = any(rc != 0 for rc in result.replays)
    if result.failed or result.variants or bad_replay:  # another mode is a failure too
        sys.exit(EXIT_FAILURES)
    sys.exit(EXIT_INCONCLUSIVE if result.interrupted else EXIT_OK)


def main() -> None:
    try:
        _main()
    except SystemExit as exc:
        if exc.code == EXIT_INCONCLUSIVE:  # e.g. interrupted: on its way out. The interpreter's
            # finalization puts Python's signal handlers back to SIG_DFL, so a second Ctrl-C
            # then would kill it by SIGINT instead of exit 3
            import signal

            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
        raise


def _main() -> None:
    try:
        cli.main(prog_name="iree-stress", standalone_mode=False)
    except UsageError as exc:
        erase_live()
        click.echo(f"iree-stress: error: {one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:  # Ctrl-C before a run folder existed (one that exists is
        #   recorded as interrupted by the run itself and reported)
        click.echo("iree-stress: interrupted", err=True)
        sys.exit(EXIT_INCONCLUSIVE)
    except click.UsageError as exc:
        click.echo(usage_line(exc, RENAMED, cli), err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        click.echo(f"iree-stress: error: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
