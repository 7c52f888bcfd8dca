"""Known failures: a small TOML file that `report` (and `gate`) read, so that failures someone
already filed are shown apart from new ones (and, in the gate, do not fail it).

    # known-failures.toml
    [[known]]
    signature = "S1a2b3c4d"                     # an id from a report, or:
    note = "TheRock 7.11 stall in hipDeviceReset"
    link = "https://github.com/ROCm/TheRock/issues/0000"

    [[known]]
    match = "teardown_hang|*|worker-exit|busy|*"   # a glob over the signature key text
    note = "spins at exit under driver X"

    [[known]]
    key = "crash|SIGSEGV|teardown||pthread_join [libc.so] < ?? [_runtime.so] < Py_DECREF|"
    note = "segfault in the runtime's teardown join"  # a report's `key_detailed` (or `key`),
    #   matched exactly or compatibly: the same mode seen through a shorter unwind or
    #   without symbols (`??` frames of the same module), and the report says which

    [[known]]
    match = "miscompare|*"
    programs = "*.f16.*, *.bf16.*"              # only signatures all of whose programs match
    note = "narrow types on the default Vulkan target"

    [[known]]
    upstream = "rocm-systems#10463"   # a shape of siglists/upstream.toml: every signature
    note = "lost wake-up, filed upstream"  #   that the answer says `matches` it

The key text is `class|signal|step|state|frame < frame < frame|message` (shown by
`report --format json` as each signature's `key`). The key keeps a message's first 120
characters. For errors and miscompares, a pattern that misses the key is tried on the key with
the signature's full messages in that place (first line, numbers blanked), and must match every
one of them: `*CUDA_ERROR_INVALID_CONTEXT*` matches where the error's name comes late in the
line, and does not make a signature known that also holds another CUDA error. Each entry
needs `signature` or `match` and a `note`; `link` is optional. Python 3.11+ reads the file
with tomllib; on 3.10 a small reader of this same subset is used (tables of `key = "string"`
lines), so no dependency is added.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stress.errors import UsageError

_KEYS: frozenset[str] = frozenset({"signature", "match", "key", "upstream", "note", "link",
                                   "programs"})
_WAYS: tuple[str, ...] = ("signature", "match", "key", "upstream")


@dataclass(frozen=True)
class KnownFailure:
    note: str
    signature: str = ""
    match: str = ""
    link: str = ""
    line: int = 0  # where it is in the file (for messages)
    key: str = ""  # a signature key text, matched exactly or compatibly
    programs: str = ""  # comma-separated globs: only a signature all of whose programs match
    upstream: str = ""  # an upstream shape's id (siglists/upstream.toml): every signature
    #   that shape matches

    def covers(self, programs: Iterable[str]) -> bool:
        """Whether the entry may name a signature of these programs: any, without
        `programs`; else only when each of them matches one of its globs (a known wrong
        answer of f16 programs does not make an f32 one known)."""
        if not self.programs:
            return True
        globs = [g.strip() for g in self.programs.split(",") if g.strip()]
        names = list(programs)
        return bool(names) and all(any(fnmatch.fnmatchcase(n, g) for g in globs)
                                   for n in names)

    def matches(self, sig_id: str, key_text: str, full_texts: Sequence[str] = ()) -> bool:
        """By id, or the pattern over the key text, or over *every one* of the signature's
        full-message texts (`Signature.full_texts`: a key holds the first 120 characters of
        a message, and the words that tell one CUDA error from another often come after;
        one signature may hold several, and a pattern that names one of them must not make
        the others known)."""
        if self.signature:
            return sig_id == self.signature
        if self.key:
            return key_text == self.key
        if self.upstream:
            return False  # matched by the signature's shape (lookup_signature)
        if fnmatch.fnmatchcase(key_text, self.match):
            return True
        return bool(full_texts) and all(fnmatch.fnmatchcase(t, self.match) for t in full_texts)

    def as_dict(self) -> dict[str, Any]:
        return {"signature": self.signature or None, "match": self.match or None,
                "key": self.key or None, "upstream": self.upstream or None, "note": self.note,
                "link": self.link or None, "programs": self.programs or None}


@dataclass(frozen=True)
class KnownFailures:
    path: Path | None
    entries: tuple[KnownFailure, ...]

    def lookup(self, sig_id: str, key_text: str,
               full_texts: Sequence[str] | Callable[[], Sequence[str]] = ()) -> \
            KnownFailure | None:
        """The first entry that names this signature (ids before patterns). `full_texts` as
        in `KnownFailure.matches`, or a function giving them (called only when a pattern
        entry exists and the key alone matched none)."""
        by_id = [e for e in self.entries if (e.signature or e.key) and
                 e.matches(sig_id, key_text)]
        if by_id:
            return by_id[0]
        patterns = [e for e in self.entries if e.match]
        hit = next((e for e in patterns if e.matches(sig_id, key_text)), None)
        if hit is not None or not patterns:
            return hit
        full = full_texts() if callable(full_texts) else full_texts
        return next((e for e in patterns if e.matches(sig_id, key_text, full)), None) \
            if full else None

    def lookup_signature(self, sig: Any) -> KnownFailure | None:
        """lookup() for a `signatures.Signature`; else a `key` entry the signature is
        compatible with (`Signature.compatible_with`: one mode through a shorter or
        unsymbolized unwind), whose way of matching is left in `sig.known_how`. Entries with
        `programs` are tried only on signatures of those programs."""
        names = list(getattr(sig, "programs", None) or ())
        entries = tuple(e for e in self.entries if e.covers(names))
        if len(entries) < len(self.entries):
            return KnownFailures(self.path, entries).lookup_signature(sig)
        hit = self.lookup(sig.id, sig.key.text(), sig.full_texts)
        if hit is not None:
            return hit
        shape = getattr(sig, "upstream", None)
        hit = next((e for e in self.entries if e.upstream and shape is not None
                    and e.upstream == shape.id), None)
        if hit is not None:
            return hit
        detailed = sig.key.detailed()
        hit = next((e for e in entries if e.key and e.key == detailed), None)
        if hit is not None:
            return hit
        for e in entries:
            why = sig.compatible_with(e.key) if e.key else None
            if why:
                sig.known_how = f"matched {e.key!r} compatibly: {why}"
                return e
        for e in entries:
            why = sig.incompatible_with(e.key) if e.key else None
            if why:
                sig.known_how = f"not the known key at line {e.line}: {why}"
                break
        return None


EMPTY = KnownFailures(None, ())


def tiny_toml(text: str, path: Path, table: str = "known"
               ) -> tuple[list[dict[str, Any]], list[int]]:
    """The subset this format uses: `[[known]]` (or `[[table]]`) headers and `key = "string"`
    lines (upstream.py reads its catalog with it too)."""
    tables: list[dict[str, Any]] = []
    lines: list[int] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if re.fullmatch(r"\[\[" + re.escape(table) + r"\]\]\s*(#.*)?", line):
            tables.append({})
            lines.append(n)
            continue
        m = re.fullmatch(r'([A-Za-z_]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|\'([^\']*)\')\s*(#.*)?',
                         line)
        if not m or not tables:
            raise UsageError(f"{path}:{n}: cannot read this line (expected [[{table}]] or "
                             f'key = "value"): {raw.strip()!r}')
        basic, literal = m.group(2), m.group(3)
        tables[-1][m.group(1)] = literal if basic is None else \
            basic.encode().decode("unicode_escape")
    return tables, lines


def toml_doc(text: str, path: Path) -> dict[str, Any]:
    """A TOML file's document (Python 3.11+); a UsageError naming the file when malformed."""
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _table_lines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if line.strip() == "[[known]]"]


def load(path: Path) -> KnownFailures:
    """Reads a known-failures file; any error is a UsageError naming the file and line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the known-failures file: {exc.strerror}") from None
    if sys.version_info >= (3, 11):
        doc = toml_doc(text, path)
        unknown_top = set(doc) - {"known"}
        if unknown_top:
            raise UsageError(f"{path}: unknown top-level key(s) {sorted(unknown_top)}; "
                             f"entries are [[known]] tables")
        tables = doc.get("known", [])
        if not isinstance(tables, list):
            raise UsageError(f"{path}: `known` must be an array of tables ([[known]])")
        lines = _table_lines(text)
    else:
        tables, lines = tiny_toml(text, path)
    return KnownFailures(path, tuple(_entry(t, path, lines[i] if i < len(lines) else 0)
                                     for i, t in enumerate(tables)))


def _entry(t: Any, path: Path, line: int) -> KnownFailure:
    where = f"{path}:{line}" if line else str(path)
    if not isinstance(t, dict):
        raise UsageError(f"{where}: each [[known]] entry must be a table")
    extra = set(t) - _KEYS
    if extra:
        raise UsageError(f"{where}: unknown key(s) {sorted(extra)} (allowed: "
                         f"{', '.join(sorted(_KEYS))})")
    if not all(isinstance(v, str) for v in t.values()):
        raise UsageError(f"{where}: values must be strings")
    if sum(bool(t.get(k)) for k in _WAYS) != 1:
        raise UsageError(f"{where}: give exactly one of `signature` (an id), `match` "
                         f"(a glob over the signature key), `key` (a signature key) or "
                         f"`upstream` (a shape's id in siglists/upstream.toml)")
    if t.get("key") and t["key"].count("|") < 5:
        raise UsageError(f"{where}: `key` must be a signature key as a report prints it "
                         f"(class|signal|step|state|frames|message), got {t['key']!r}")
    if not t.get("note"):
        raise UsageError(f"{where}: a known failure needs a `note` saying what it is")
    return KnownFailure(t["note"], t.get("signature", ""), t.get("match", ""), t.get("link", ""),
                        line, t.get("key", ""), t.get("programs", ""), t.get("upstream", ""))


def load_all(paths: Iterable[Path]) -> KnownFailures:
    entries: list[KnownFailure] = []
    first: Path | None = None
    for p in paths:
        k = load(p)
        first = first or p
        entries += k.entries
    return KnownFailures(first, tuple(entries))
