"""Frame rules, as in Socorro's siglists: which frames of a failing thread are meaningful
(siglists/irrelevant.txt skipped, everything above a signal handler frame dropped,
siglists/normalize.txt renames) and which of them make a signature's key (the first TOP_FRAMES,
siglists/prefix.txt frames riding along uncounted). The lists are plain text files next to
this module: a user reads and extends them without reading code."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from stress.stacktext import Frame

SIGLISTS: Path = Path(__file__).with_name("siglists")
TOP_FRAMES: int = 3  # meaningful frames in a key: Socorro's signatures average 2-4 frames


# --- rules -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rules:
    """The siglists, compiled. Users extend them by editing the text files."""

    irrelevant: tuple[re.Pattern[str], ...]
    prefix: tuple[re.Pattern[str], ...]
    signal_handler: tuple[re.Pattern[str], ...]
    rename: tuple[tuple[re.Pattern[str], str], ...] = ()

    @staticmethod
    def _lines(path: Path) -> list[tuple[int, str]]:
        if not path.exists():
            return []
        return [(n, line.strip()) for n, line in enumerate(path.read_text().splitlines(), 1)
                if line.strip() and not line.strip().startswith("#")]

    @staticmethod
    def _compile(path: Path, n: int, text: str) -> re.Pattern[str]:
        try:
            return re.compile(text)
        except re.error as exc:
            raise ValueError(f"{path}:{n}: bad regular expression {text!r}: {exc}") from exc

    @classmethod
    def _load(cls, path: Path) -> tuple[re.Pattern[str], ...]:
        return tuple(cls._compile(path, n, line) for n, line in cls._lines(path))

    @classmethod
    def _load_rename(cls, path: Path) -> tuple[tuple[re.Pattern[str], str], ...]:
        out = []
        for n, line in cls._lines(path):
            pat, sep, repl = line.partition(" => ")
            if not sep:
                raise ValueError(f"{path}:{n}: want `REGEX => REPLACEMENT`, got {line!r}")
            out.append((cls._compile(path, n, pat.strip()), repl.strip()))
        return tuple(out)

    @classmethod
    def load(cls, folder: Path = SIGLISTS) -> Rules:
        return cls(cls._load(folder / "irrelevant.txt"), cls._load(folder / "prefix.txt"),
                   cls._load(folder / "signal_handler.txt"),
                   cls._load_rename(folder / "normalize.txt"))

    def renamed(self, f: Frame) -> Frame:
        if f.function is None or f.python:
            return f
        name = f.function
        for pat, repl in self.rename:
            name = pat.sub(repl, name)
        return f if name == f.function else dataclasses.replace(f, function=name)


@functools.lru_cache(maxsize=4)
def rules(folder: Path = SIGLISTS) -> Rules:
    return Rules.load(folder)


def matches(pats: tuple[re.Pattern[str], ...], text: str) -> bool:
    return any(p.match(text) for p in pats)


def meaningful(frames: list[Frame], r: Rules | None = None, crashed: bool = False) -> list[Frame]:
    """Frames (innermost first) minus irrelevant ones; for a crashed thread, only those below
    the last signal handler frame. Consecutive repeats (unnamed frames of one library)
    collapse into one."""
    r = r or rules()
    frames = [r.renamed(f) for f in frames]
    if crashed or any(matches(r.signal_handler, f.text()) for f in frames):
        cut = [i for i, f in enumerate(frames) if matches(r.signal_handler, f.text())]
        if cut:
            frames = frames[cut[-1] + 1:]
    out: list[Frame] = []
    for f in frames:
        if matches(r.irrelevant, f.text()):
            continue
        if out and out[-1].key() == f.key():
            continue
        out.append(f)
    return out


def key_frames(frames: list[Frame], r: Rules | None = None) -> tuple[str, ...]:
    """The first TOP_FRAMES meaningful frames' keys (prefix frames ride along uncounted)."""
    r = r or rules()
    out: list[str] = []
    counted = 0
    for f in frames:
        out.append(f.key())
        if not matches(r.prefix, f.text()):
            counted += 1
        if counted == TOP_FRAMES:
            break
    return tuple(out)
