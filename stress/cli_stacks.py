"""Commands about runtime stacks beside the verdicts: `stacks` (a stacks file from an index of
nightlies) and `history` (the change-point posterior over run folders already on disk). Thin,
as cli.py: parse, build a request, call one function; cli.py adds them to its group."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from stress.options import cache_option

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
                        ("iree-stress", *sys.argv[1:]))
    status = Status(not kw["quiet"])
    written = write_stacks(req, status.update)
    status.erase()
    click.echo(written.describe())
