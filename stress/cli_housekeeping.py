"""The housekeeping commands: `runs` (what the run folders and the cache hold) and `clean`
(remove the old or the excess). Thin, as cli.py: cli.py adds them to its group."""

from __future__ import annotations

from pathlib import Path

import click

from stress.errors import UsageError
from stress.options import Duration, cache_option

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.command(context_settings=CONTEXT)
@click.argument("folder", required=False, default="results",
                type=click.Path(file_okay=False, path_type=Path))
@cache_option
@click.option("--json", "as_json", is_flag=True, help="One JSON list of the entries.")
def runs(folder: Path, cache_dir: str, as_json: bool) -> None:
    """List the run folders under FOLDER (default: results): status, date of the last run,
    runs, invocations, failures, size; then what the cache holds (artifacts, runtime
    stacks' venvs, each with its size and last use). `iree-stress clean` removes them."""
    from stress import housekeeping as hk

    click.echo(hk.listing(folder, Path(cache_dir), as_json))


@click.command(context_settings=CONTEXT)
@click.argument("folder", required=False, default="results",
                type=click.Path(file_okay=False, path_type=Path))
@click.option("--older-than", type=Duration(), metavar="AGE",
              help="Remove what was last run (cache: last used) more than AGE ago: 7d, 12h.")
@click.option("--keep", type=click.IntRange(0), metavar="N",
              help="Keep the N newest run folders (with --cache: and stacks); remove the rest.")
@click.option("--max-size", metavar="SIZE",
              help="Remove the oldest until the rest fits in SIZE (500M, 10G), for run "
                   "folders and (with --cache) the cache's stacks and artifacts apart.")
@click.option("--all", "everything", is_flag=True,
              help="Remove every run folder (with --cache: the whole cache) not in use.")
@click.option("--cache", "with_cache", is_flag=True,
              help="Clean the artifact cache too: runtime stacks' venvs and compiled "
                   "artifacts (rebuilt on the next use).")
@cache_option
@click.option("--dry-run", is_flag=True, help="Say what would go; remove nothing.")
def clean(folder: Path, older_than: float | None, keep: int | None, max_size: str | None,
          everything: bool, with_cache: bool, cache_dir: str, dry_run: bool) -> None:
    """Remove old run folders under FOLDER (default: results) and, with --cache, old cache
    entries. Only folders holding a run store, empty folders, and the cache's own entries
    are removed; a run still writing never is. Needs a cap (--older-than, --keep,
    --max-size) or --all."""
    from stress import housekeeping as hk

    if older_than is None and keep is None and max_size is None and not everything:
        raise UsageError("clean needs --older-than AGE, --keep N, --max-size SIZE or --all "
                         "(add --dry-run to see what would go)")
    try:
        cap = hk.parse_size(max_size) if max_size is not None else None
    except ValueError as exc:
        raise UsageError(f"--max-size: {exc}") from None
    for line in hk.clean(folder, Path(cache_dir) if with_cache else None, older_than, keep,
                         cap, everything, dry_run):
        click.echo(line)


COMMANDS: tuple[click.Command, ...] = (runs, clean)
