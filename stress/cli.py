"""Command line: each command parses options, builds a config, calls one function."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from stress import __version__
from stress.errors import UsageError
from stress.options import (
    Duration,
    cache_option,
    jobs_option,
    programs_option,
    split_csv,
    target_option,
)

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

EXIT_OK, EXIT_FAILURES, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version")
def cli() -> None:
    """iree-stress: find, reproduce and pin down flakes in the IREE runtime.

    Exit codes: 0 ok, 1 failures found, 2 usage error, 3 inconclusive.
    """


@cli.command(context_settings=CONTEXT)
@programs_option
@click.option("--kind", help="unary | binary | chain | dynamic")
@click.option("--op", help="e.g. add, exp, silu")
@click.option("--dtype", help="f32 | f16 | bf16 | i32 | i8")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per program.")
def programs(programs: tuple[str, ...], program_files: tuple[str, ...], kind: str | None,
             op: str | None, dtype: str | None, as_json: bool) -> None:
    """List corpus (and user) programs: name, op, dtype, shape."""
    from stress.programs import corpus, userprog

    progs = corpus.select(split_csv(programs), kind=kind, op=op, dtype=dtype) \
        if programs or not program_files else []
    progs += [userprog.load(f) for f in program_files]
    if not progs:
        raise UsageError("no program matches those filters")
    for p in progs:
        if as_json:
            click.echo(json.dumps({"name": p.name, "kind": p.kind, "op": p.op, "dtype": p.dtype,
                                   "shape": p.shape_text, "reference": p.has_reference}))
        else:
            click.echo(f"{p.name:<44} {p.op:<16} {p.dtype:<5} {p.shape_text}")
    if not as_json:
        click.echo(f"{len(progs)} programs", err=True)


@cli.command(context_settings=CONTEXT)
@target_option
@programs_option
@cache_option
@jobs_option
@click.option("--export", "export_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also copy the artifacts to this folder with a manifest "
                   "(for `soak --artifacts` on a machine without a compiler).")
def compile(target: str | None, programs: tuple[str, ...], program_files: tuple[str, ...],
            cache_dir: str, compile_jobs: int, export_dir: Path | None) -> None:
    """Compile programs into the artifact cache (a warm cache runs no compiler)."""
    from stress.programs import cache, targets
    from stress.soak import choose_programs

    tgt = targets.parse(target or "cpu")
    progs = choose_programs(split_csv(programs), list(program_files))
    store = cache.ArtifactCache(Path(cache_dir))
    report = store.compile_all(progs, tgt, jobs=compile_jobs)
    for err in report.errors:
        click.echo(err.describe(), err=True)
    click.echo(f"{tgt.name}: {report.compiled} compiled, {report.cached} cached, "
               f"{len(report.errors)} failed ({report.compiler_version}) -> {cache_dir}")
    if export_dir is not None:
        click.echo(f"exported {len(report.artifacts)} artifacts -> "
                   f"{cache.export(report, export_dir)}")
    if report.errors:
        sys.exit(EXIT_USAGE)


@cli.command(context_settings=CONTEXT)
@target_option
@click.option("--device", help="Device URI (default: the target's driver, e.g. local-task, hip).")
@click.option("--workers", "-w", type=click.IntRange(1), envvar="IREE_STRESS_WORKERS",
              show_envvar=True, help="Worker processes  [default: cores]")
@click.option("--threads", type=click.IntRange(1), default=2, show_default=True,
              help="Threads per worker.")
@click.option("--patterns", "-P", multiple=True, metavar="NAMES",
              help="Lifecycle patterns (comma list or repeatable; default all): shared, "
                   "per-thread, per-call, churn, instance-churn, cross-thread, process-per-job.")
@programs_option
@click.option("--duration", "-d", type=Duration(), envvar="IREE_STRESS_DURATION",
              show_envvar=True, help="How long: 90s, 10m, 2h  [default: 20s]")
@click.option("--invocations", "-n", type=click.IntRange(1),
              help="Stop after this many planned invocations instead of a duration.")
@click.option("--seed", type=int, envvar="IREE_STRESS_SEED", show_envvar=True,
              help="Seed of the whole schedule (printed; same seed = same jobs).")
@click.option("--env", "env_items", multiple=True, metavar="KEY=VALUE",
              help="Environment for workers only (AMD_LOG_LEVEL=4, HSA_*, LD_LIBRARY_PATH).")
@click.option("--max-failures", type=click.IntRange(1), help="Stop after this many failures.")
@click.option("--results", type=click.Path(file_okay=False, path_type=Path),
              help="Run folder  [default: results/RUN_ID]")
@click.option("--timeout", type=Duration(), default="30s", show_default=True,
              help="Deadline of one step (invoke, upload, ...): past it is a hang.")
@click.option("--teardown-timeout", type=Duration(), default="15s", show_default=True,
              help="Deadline of device release and worker exit: past it is a teardown hang.")
@click.option("--max-worker-restarts", type=click.IntRange(0), default=50, show_default=True)
@click.option("--inject", multiple=True, metavar="KIND@STEP[:PROB]",
              help="Inject a real fault: segv|abort|kill|hang|exit|raise|corrupt at a journal "
                   "step (invoke, device-release, ...).")
@click.option("--python", "python", metavar="PATH",
              help="Interpreter for workers (a runtime stack's venv).")
@click.option("--shard", default="0/1", show_default=True, metavar="I/N",
              envvar="IREE_STRESS_SHARD", show_envvar=True,
              help="Run only shard I of N of the seeded plan.")
@click.option("--job-seed", type=int, hidden=True, help="Force every job's input seed (repro).")
@click.option("--artifacts", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Use prebuilt artifacts (from `compile --export`) instead of compiling.")
@cache_option
@jobs_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No live progress.")
def soak(**kw: Any) -> None:
    """Run many invocations across worker processes x threads under device lifecycle patterns;
    record every failure with its evidence."""
    from stress.analysis.text import summary_table
    from stress.soak import SoakOptions, run_soak

    env = {}
    for item in kw["env_items"]:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env wants KEY=VALUE, got {item!r}")
        env[key] = value
    try:
        index, count = (int(x) for x in kw["shard"].split("/"))
        if not 0 <= index < count:
            raise ValueError
    except ValueError:
        raise UsageError(f"--shard wants I/N with 0 <= I < N, got {kw['shard']!r}") from None
    from stress.engine import inject

    for spec in kw["inject"]:
        inject.parse(spec)
    opts = SoakOptions(
        target=kw["target"], device=kw["device"], workers=kw["workers"], threads=kw["threads"],
        patterns=split_csv(kw["patterns"]), programs=split_csv(kw["programs"]),
        program_files=list(kw["program_files"]), duration_s=kw["duration"],
        invocations=kw["invocations"], seed=kw["seed"], env=env,
        max_failures=kw["max_failures"], results=kw["results"], timeout_s=kw["timeout"],
        teardown_timeout_s=kw["teardown_timeout"],
        max_worker_restarts=kw["max_worker_restarts"], inject=list(kw["inject"]),
        python=kw["python"], shard=(index, count), job_seed=kw["job_seed"],
        artifacts=kw["artifacts"],
        cache_dir=Path(kw["cache_dir"]), compile_jobs=kw["compile_jobs"],
        progress=not kw["quiet"], argv=sys.argv[2:])
    summary = run_soak(opts)
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
    if summary["status"] != "completed" or summary.get("harness_errors"):
        return EXIT_INCONCLUSIVE
    return EXIT_OK


@cli.command(context_settings=CONTEXT)
@click.argument("run_dirs", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html", "json"]),
              default="text", show_default=True)
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
    from stress.programs.cache import atomic_write

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


def main() -> None:
    try:
        cli.main(prog_name="iree-stress", standalone_mode=False)
    except UsageError as exc:
        click.echo(f"iree-stress: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("iree-stress: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
