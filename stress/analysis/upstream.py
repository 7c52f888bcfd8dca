"""Known upstream shapes (issue 39): siglists/upstream.toml lists failure modes that public
reports describe (frames, phase, class, busy or blocked), each with its upstream issue, a
one-line title and the affected and fixed versions where public. A signature that looks like
one gets `matches <id> (<title>; fixed in <fixed>)` under it in the answer; a --known file's
`upstream = "<id>"` entry makes every signature of that shape known. A signature that matches
no shape says nothing."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stress.analysis.framerules import SIGLISTS, rules
from stress.analysis.known import KnownFailures, tiny_toml, toml_doc
from stress.analysis.stacks import read_folder
from stress.errors import UsageError

CATALOG: Path = SIGLISTS / "upstream.toml"
AND: str = " && "
_KEYS: frozenset[str] = frozenset({"id", "title", "class", "state", "phase", "frames", "thread",
                                   "also", "link", "affected", "fixed"})
ROWS_READ: int = 3  # failure folders of a signature whose threads are read for `thread = any`


@dataclass(frozen=True)
class Shape:
    id: str
    title: str
    cls: re.Pattern[str]
    frames: tuple[re.Pattern[str], ...]
    state: str = ""
    phase: re.Pattern[str] | None = None
    any_thread: bool = False
    link: str = ""
    affected: str = ""
    fixed: str = ""
    also: tuple[re.Pattern[str], ...] = ()  # frames found together in one other thread

    def describe(self) -> str:
        """`rocm-systems#10463 (lost wake-up parks AsyncEventsLoop; fixed in ...)`."""
        fixed = f"; fixed in {self.fixed}" if self.fixed else "; no fix named"
        return f"{self.id} ({self.title}{fixed})"

    def fits(self, cls: str, state: str, phase: str) -> bool:
        return bool(self.cls.fullmatch(cls)) and (not self.state or self.state == state) and \
            (self.phase is None or bool(self.phase.fullmatch(phase)))

    def in_thread(self, functions: Sequence[str],
                  patterns: Sequence[re.Pattern[str]] | None = None) -> bool:
        """Every frame pattern (`patterns`, else the shape's frames) found among one thread's
        function names."""
        return all(any(p.search(f) for f in functions)
                   for p in (self.frames if patterns is None else patterns))

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "link": self.link or None,
                "affected": self.affected or None, "fixed": self.fixed or None,
                "text": self.describe()}


def _regex(path: Path, sid: str, what: str, text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise UsageError(f"{path}: shape {sid!r}: bad regular expression in `{what}`: "
                         f"{exc}") from None


def _frames(path: Path, sid: str, what: str, text: str) -> tuple[re.Pattern[str], ...]:
    return tuple(_regex(path, sid, what, f.strip()) for f in text.split(AND) if f.strip())


def _shape(t: dict[str, Any], path: Path) -> Shape:
    sid = str(t.get("id") or "")
    extra = set(t) - _KEYS
    if not sid or not t.get("title") or not t.get("class") or not t.get("frames"):
        raise UsageError(f"{path}: every [[shape]] needs id, title, class and frames "
                         f"({sid or 'an entry without id'})")
    if extra or not all(isinstance(v, str) for v in t.values()):
        raise UsageError(f"{path}: shape {sid!r}: string values of "
                         f"{', '.join(sorted(_KEYS))} only")
    if t.get("thread", "failing") not in ("failing", "any"):
        raise UsageError(f"{path}: shape {sid!r}: `thread` is `failing` or `any`")
    return Shape(sid, t["title"], _regex(path, sid, "class", t["class"]),
                 _frames(path, sid, "frames", t["frames"]),
                 t.get("state", ""),
                 _regex(path, sid, "phase", t["phase"]) if t.get("phase") else None,
                 t.get("thread") == "any", t.get("link", ""), t.get("affected", ""),
                 t.get("fixed", ""), _frames(path, sid, "also", t.get("also", "")))


def load(path: Path = CATALOG) -> tuple[Shape, ...]:
    """The shapes of a catalog file (UsageError naming the file when it is malformed)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the upstream shapes: {exc.strerror}") from None
    tables = toml_doc(text, path).get("shape", []) if sys.version_info >= (3, 11) else \
        tiny_toml(text, path, "shape")[0]
    return tuple(_shape(t, path) for t in tables if isinstance(t, dict))


@functools.lru_cache(maxsize=4)
def catalog(path: Path = CATALOG) -> tuple[Shape, ...]:
    return load(path)


def checked(kf: KnownFailures) -> KnownFailures:
    """`kf` when each of its `upstream` entries names a shape of the catalog; else a
    UsageError naming the entry (a misspelt id would silently leave its failures new)."""
    ids = {s.id for s in catalog()}
    for e in kf.entries:
        if e.upstream and e.upstream not in ids:
            raise UsageError(f"--known entry at line {e.line}: `upstream = {e.upstream!r}` "
                             f"names no shape of {CATALOG.name} (known: "
                             f"{', '.join(sorted(ids))})")
    return kf


def _threads(rows: Iterable[dict[str, Any]]) -> list[list[str]]:
    """Every thread's named native functions in the first ROWS_READ failure folders."""
    out: list[list[str]] = []
    folders = [r.get("artifacts") for r in rows if r.get("artifacts")][:ROWS_READ]
    for folder in folders:
        for dump in read_folder(folder):
            for th in dump.threads:
                out.append([f.function for f in (rules().renamed(x) for x in th.frames)
                            if f.function and not f.python])
    return out


def match(cls: str, state: str, phase: str, functions: Sequence[str],
          rows: Iterable[dict[str, Any]] = (), shapes: Sequence[Shape] | None = None
          ) -> Shape | None:
    """The first shape that fits a signature: its class, state and phase, and frames found in
    its failing thread (`functions`: every named function, innermost first) or, for a shape
    with `thread = any`, in one thread of a failure folder among `rows`; a shape with `also`
    wants those frames together in one thread of such a folder too."""
    shapes = catalog() if shapes is None else shapes
    others: list[list[str]] | None = None
    for shape in shapes:
        if not shape.fits(cls, state, phase):
            continue
        if shape.also or (shape.any_thread and not shape.in_thread(functions)):
            others = _threads(rows) if others is None else others
        if shape.also and not any(shape.in_thread(t, shape.also) for t in others or ()):
            continue
        if shape.in_thread(functions) or \
                (shape.any_thread and any(shape.in_thread(t) for t in others or ())):
            return shape
    return None
