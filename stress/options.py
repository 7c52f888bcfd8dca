"""Click options shared by several commands, defined once."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from stress.programs.cache import default_cache_dir

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


def split_csv(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def target_option(f: F) -> F:
    return click.option("--target", "-t", envvar="IREE_STRESS_TARGET", show_envvar=True,
                        help="cpu | rocm[:ARCH] | cuda[:ARCH] | vulkan. Default for soak: a "
                             "usable GPU driver, else cpu.")(f)


def programs_option(f: F) -> F:
    f = click.option("--program", "program_files", multiple=True, metavar="FILE.mlir",
                     help="A user program (plain func.func or fusilli-style torch MLIR). "
                          "Repeatable.")(f)
    return click.option("--programs", "-p", multiple=True, metavar="GLOB",
                        help="Corpus programs by name glob (comma list or repeatable), "
                             "e.g. 'binary.add.*'.")(f)


def cache_option(f: F) -> F:
    return click.option("--cache-dir", type=click.Path(file_okay=False), envvar="IREE_STRESS_CACHE",
                        show_envvar=True, default=lambda: str(default_cache_dir()),
                        show_default="~/.cache/iree-stress",
                        help="Content-addressed artifact cache.")(f)


def jobs_option(f: F) -> F:
    return click.option("-j", "--jobs", "compile_jobs", type=click.IntRange(1), default=2,
                        show_default=True, help="Parallel compiler processes.")(f)
