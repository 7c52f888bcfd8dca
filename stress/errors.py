"""Errors a user can cause. The CLI turns each into one line and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (click only here: workers import this module under a runtime stack's
    #   interpreter, which has numpy and iree.runtime, not click)
    import click


class UsageError(Exception):
    """Bad input: unknown target, filter matching nothing, missing file, unusable driver..."""

    exit_code: int = 2


def one_line(text: str) -> str:
    """A message as one line (the exit-2 promise): its lines joined, spaces collapsed."""
    return " ".join(text.split())


def usage_line(exc: click.UsageError, renamed: dict[str, tuple[str, ...]],
               group: click.Group) -> str:
    """click's usage error (4 lines: usage, a help hint, a blank line, the error) as one;
    an unknown option's suggestions name today's options, never a hidden old spelling."""
    where = exc.ctx.command_path if exc.ctx is not None else " ".join(
        ["iree-stress", *[a for a in sys.argv[1:2] if a in group.commands]])
    import click

    message = one_line(exc.format_message())
    if isinstance(exc, click.NoSuchOption):
        old = {alias: new for new, aliases in renamed.items() for alias in aliases}
        hidden = {o for p in (exc.ctx.command.params if exc.ctx else [])
                  if isinstance(p, click.Option) and p.hidden for o in p.opts}
        maybe = list(dict.fromkeys(old.get(p, p) for p in exc.possibilities or ()
                                   if p not in hidden))
        message = f"no such option {exc.option_name}" + \
            (f" (did you mean {' or '.join(maybe)}?)" if maybe else "")
    return f"{where}: error: {message} (see {where} --help)"
