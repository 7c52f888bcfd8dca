"""What a stuck thread is doing, in words (siglists/waits.txt): "joining a thread", "on a
completion", "in an event loop", else "in <its first meaningful frame>"."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

from stress.analysis.framerules import SIGLISTS, meaningful
from stress.stacktext import Frame

WAITS_FILE: str = "waits.txt"


@functools.lru_cache(maxsize=4)
def rules(folder: Path = SIGLISTS) -> tuple[tuple[re.Pattern[str], str], ...]:
    path = folder / WAITS_FILE
    out = []
    for n, raw in enumerate(path.read_text().splitlines() if path.exists() else [], 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        regex, sep, words = line.partition(" => ")
        if not sep:
            raise ValueError(f"{path}:{n}: want `REGEX => WORDS`, got {line!r}")
        try:
            out.append((re.compile(regex.strip()), words.strip()))
        except re.error as exc:
            raise ValueError(f"{path}:{n}: bad regular expression: {exc}") from exc
    return tuple(out)


def words(frames: Sequence[Frame]) -> str:
    """The words of the first frame (innermost first) a rule matches, else `in <frame>`."""
    for f in frames:
        if not f.function or f.python:
            continue
        hit = next((w for p, w in rules() if p.search(f.function)), None)
        if hit is not None:
            return hit
    good = meaningful(list(frames))
    return f"in {good[0].function or '??'}" if good else "in frames unknown"
