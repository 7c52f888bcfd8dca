"""Commands about runtime stacks beside the verdicts: `stacks` (a stacks file from an index of
nightlies) and `history` (the change-point posterior over run folders already on disk). Thin,
as cli.py: parse, build a request, call one function; cli.py adds them to its group."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from stress.options import cache_option

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.command(context_settings=CONTEXT)
@click.option("--index", required=True, envvar="IREE_STRESS_INDEX", show_envvar=True,
              metavar="URL",
              help="The listing of builds: an S3 ListBucket XML listing, an HTML page of links "
                   "(tarballs), or a family's PEP 503 simple index (wheels); http(s)://, "
                   "file:// or a local folder.")
@click.option("--from", "start", required=True, metavar="VERSION",
              help="The first build (e.g. the last known good nightly).")
@click.option("--to", "end", required=True, metavar="VERSION",
              help="The last build (e.g. the first known bad nightly).")
@click.option("--family", help="GPU family, e.g. gfx94X-dcgpu  [default: the only one "
                               "listed; wheels: the index URL's last part]")
@click.option("--kind", type=click.Choice(["tarball", "wheel"]), default="tarball",
              show_default=True, help="TheRock tarballs, or wheels from the simple index.")
@click.option("--iree-runtime", metavar="VERSION", default="",
              help="Pin the IREE side of every stack (iree-base-runtime==VERSION); without "
                   "it a stack is its ROCm side alone (enough for --engine exec).")
@click.option("--compiler", metavar="VERSION", default="",
              help="With --iree-runtime: compile each stack's artifacts with this "
                   "iree-base-compiler (an older runtime refuses a newer compiler's modules).")
@click.option("--include-bkc", is_flag=True, help="Keep +bkc builds (left out by default).")
@click.option("--include-dev", is_flag=True,
              help="Keep X.Y.Z.dev0+SHA builds (left out by default; ordered by the "
                   "listing's date, those without one left out).")
@click.option("--no-download", is_flag=True,
              help="Wheels only: write index-only stacks (pip fetches them at build time; a "
                   "nightly deleted meanwhile is lost).")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The stacks file to write.")
@cache_option
@click.option("--quiet", "-q", is_flag=True, help="No live progress.")
def stacks(**kw: Any) -> None:
    """Write a stacks file of the TheRock builds from --from to --to, ordered by build date
    (not by version: 7.x -> 10.x), one stack a build named by its version. Every file is
    downloaded once and kept by its sha256 in the cache: a nightly later deleted from the
    index stays testable (and listed). See docs/stacks.md."""
    from stress.runtimes.listing import BuildKind
    from stress.runtimes.nightlies import PackageKind, StacksRequest, write_stacks
    from stress.ui import Status

    include = tuple(k for k, on in ((BuildKind.BKC, kw["include_bkc"]),
                                    (BuildKind.DEV, kw["include_dev"])) if on)
    req = StacksRequest(kw["index"], kw["start"], kw["end"], kw["output"],
                        Path(kw["cache_dir"]), kw["family"], PackageKind(kw["kind"]),
                        kw["iree_runtime"], include, not kw["no_download"],
                        ("iree-stress", *sys.argv[1:]), kw["compiler"])
    status = Status(not kw["quiet"])
    written = write_stacks(req, status.update)
    status.erase()
    click.echo(written.describe())


_BY_HELP = ("What names a run's stack: rocm, the TheRock build (from its libraries' paths or "
            "tree, its stack.json, or its folder's path); runtime, the IREE runtime version.")


def history_option(f: F) -> F:
    """bisect's --history (and --history-by): runs already on disk count as trials."""
    f = click.option("--history-by", type=click.Choice(["rocm", "runtime"]), default="rocm",
                     show_default=True, help=_BY_HELP)(f)
    return click.option("--history", "history_dirs", multiple=True, metavar="DIR",
                        type=click.Path(exists=True, file_okay=False, path_type=Path),
                        help="Run folders already on disk (nightly gate results...): each "
                             "counts as a trial of the stack it ran on; repeatable.")(f)


def history_trials(kw: dict[str, Any], log: Callable[[str], None]) -> list[Any]:
    """The --history runs as trials of the stacks file's stacks (none without --history)."""
    if not kw.get("history_dirs"):
        return []
    from stress.runtimes import spec
    from stress.verdicts.history import By, trials_for

    return trials_for(list(kw["history_dirs"]), list(spec.load(kw["stacks_file"])),
                      By(kw["history_by"]), log)


@click.command(context_settings=CONTEXT)
@click.argument("run_dirs", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--by", type=click.Choice(["rocm", "runtime"]), default="rocm",
              show_default=True, help=_BY_HELP)
@click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=None, help="Name a stack when its posterior reaches this  [default: "
                                 "bisect's, 0.975]")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def history(run_dirs: tuple[Path, ...], by: str, confidence: float | None,
            as_json: bool) -> None:
    """When did the failure rate rise? From run folders already on disk (nightly gate
    results, old soaks), without a new trial: each run is a trial of the stack it ran on,
    stacks ordered by build date, identical ones merged, and bisect's change-point posterior
    over them. Exit 0 when a first bad stack is named, 3 when still unsure (then `bisect
    --history` adds trials only where it is). See docs/stacks.md."""
    from stress.verdicts.bisect import CONFIDENCE
    from stress.verdicts.history import By, render_history
    from stress.verdicts.history import history as run_history

    h = run_history(list(run_dirs), By(by), confidence or CONFIDENCE,
                    log=None if as_json else lambda line: click.echo(line, err=True))
    click.echo(json.dumps(h.as_dict()) if as_json else render_history(h))
    sys.exit(h.result.outcome.exit_code)


COMMANDS: tuple[click.Command, ...] = (stacks, history)
