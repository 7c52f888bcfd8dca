"""Failure signatures: failures grouped by (class, signal, last step, top native frames when
stacks exist; for errors and miscompares, the message shape).

What other threads had in flight is *not* part of the key: a fault local to one thread would
otherwise split into one signature per accidental concurrency state. It is kept per signature
as a distribution, and the correlation tables rank it ("other thread in flight: invoke") against
healthy windows, which is where a real cross-thread race shows up."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.analysis.rundata import RunData
from stress.analysis.stats import rate_per_1k
from stress.engine.invocation import message_key

TOP_FRAMES: int = 3
_PYSPY_THREAD = re.compile(r"^Thread (\d+) ")
_FAULTHANDLER_FRAME = re.compile(r'File "([^"]+)", line \d+ in (\S+)')


@dataclass
class Signature:
    id: str
    cls: str
    signal: str | None
    last_step: str | None
    frames: tuple[str, ...]
    message: str
    count: int = 0
    rate_per_1k: float = 0.0
    ci_low: float = 0.0
    ci_high: float = 0.0
    patterns: Counter[str] = field(default_factory=Counter)
    programs: Counter[str] = field(default_factory=Counter)
    first_seen: float | None = None
    last_seen: float | None = None
    example: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    others: Counter[str] = field(default_factory=Counter)  # steps other threads had in flight

    def describe(self) -> str:
        sig = f" {self.signal}" if self.signal else ""
        frames = f"; top frames {' < '.join(self.frames)}" if self.frames else ""
        msg = f"; {self.message}" if self.message else ""
        return f"{self.cls}{sig} in {self.last_step or '?'}{frames}{msg}"

    def others_share(self) -> dict[str, float]:
        """Fraction of this signature's failures during which another thread had each step
        in flight."""
        n = max(1, len([r for r in self.rows if r["class"] not in ("error", "miscompare")]))
        return {k: round(v / n, 3) for k, v in self.others.most_common()}

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "class": self.cls, "signal": self.signal, "count": self.count,
                "rate_per_1k": round(self.rate_per_1k, 4), "ci_low": round(self.ci_low, 4),
                "ci_high": round(self.ci_high, 4), "last_step": self.last_step,
                "others_in_flight": self.others_share(), "frames": list(self.frames),
                "message": self.message, "patterns": [p for p, _ in self.patterns.most_common()],
                "programs": [p for p, _ in self.programs.most_common(10)],
                "first_seen_s": self.first_seen, "last_seen_s": self.last_seen,
                "example": self.example, "description": self.describe()}


def failing_slot(steps: list[dict[str, Any]]) -> int | None:
    return next((s.get("slot") for s in steps if s.get("failing")), None)


def others_in_flight(row: dict[str, Any]) -> tuple[str, ...]:
    slot = failing_slot(row["steps"])
    own = f"t{slot}:" if slot is not None else None
    steps = {e.split(":", 1)[1] for e in row["in_flight"] if own is None or
             not e.startswith(own)}
    return tuple(sorted(steps))


def top_frames(folder: str | None) -> tuple[str, ...]:
    """The failing thread's top frames: from py-spy/gdb stacks for hangs, from faulthandler
    (in the worker's stderr) for crashes."""
    if not folder:
        return ()
    base = Path(folder)
    try:
        meta = json.loads((base / "failure.json").read_text())
    except (OSError, json.JSONDecodeError):
        return ()
    tid = meta.get("native_tid")
    stacks = base / "stacks.txt"
    if tid and stacks.exists():
        frames: list[str] = []
        inside = False
        for line in stacks.read_text(errors="replace").splitlines():
            m = _PYSPY_THREAD.match(line)
            if m:
                inside = int(m.group(1)) == tid
                continue
            if inside and line.startswith("    "):
                name = line.strip()
                if not name.startswith("0x"):
                    frames.append(re.sub(r"\s+\(.*\)$", "", name) + _lib(name))
                if len(frames) == TOP_FRAMES:
                    break
        if frames:
            return tuple(frames)
    err = base / "stderr.tail"
    if err.exists():
        text = err.read_text(errors="replace")
        i = text.rfind("Current thread")
        if i >= 0:
            found = _FAULTHANDLER_FRAME.findall(text[i:i + 3000])[:TOP_FRAMES]
            return tuple(f"{fn} ({Path(path).name})" for path, fn in found)
    return ()


def _lib(frame: str) -> str:
    m = re.search(r"\(([^():]+\.so[^()]*)\)$", frame)
    return f" [{m.group(1)}]" if m else ""


def _sig_id(key: tuple[Any, ...]) -> str:
    return "S" + hashlib.sha1(repr(key).encode()).hexdigest()[:6]


def build(data: RunData) -> list[Signature]:
    """Signatures, most frequent first. Rates are per 1,000 invocations: the completed ones
    plus each invocation that died with its worker (it never reported itself)."""
    died = sum(1 for f in data.failures if f["class"] in ("crash", "hang", "teardown_hang"))
    total = max(1, data.trials + died)
    sigs: dict[tuple[Any, ...], Signature] = {}

    def get(key: tuple[Any, ...], cls: str, signal: str | None, step: str | None,
            frames: tuple[str, ...], message: str) -> Signature:
        if key not in sigs:
            sigs[key] = Signature(_sig_id(key), cls, signal, step, frames, message)
        return sigs[key]

    for row in data.failures:
        if row["class"] in ("error", "miscompare"):
            continue
        frames = top_frames(row["artifacts"])
        key: tuple[Any, ...] = (row["class"], row["signal"], row["last_step"], frames)
        s = get(key, row["class"], row["signal"], row["last_step"], frames, "")
        s.count += 1
        s.others.update(others_in_flight(row))
        _observe(s, row)
    # Errors and miscompares: exact counts from the workers, examples and windows from rows.
    examples: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in data.failures:
        if row["class"] in ("error", "miscompare"):
            k = (row["class"], row["last_step"] or "", message_key(row["message"]))
            examples.setdefault(k, []).append(row)
    for c in data.counts:
        cls, step, msg = c["key"].split("|", 2)
        counted = get((cls, None, step, (), msg), cls, None, step, (), msg)
        counted.count += int(c["count"])
        counted.patterns[c["pattern"]] += int(c["count"])
        counted.programs[c["program"]] += int(c["count"])
    for (cls, step, msg), rows in examples.items():
        found = sigs.get((cls, None, step, (), msg))
        if found is None:
            continue
        for row in rows:
            found.rows.append(row)
            _seen(found, row)
    for s in sigs.values():
        s.rate_per_1k, s.ci_low, s.ci_high = rate_per_1k(s.count, total)
    return sorted(sigs.values(), key=lambda s: (-s.count, s.id))


def _observe(s: Signature, row: dict[str, Any]) -> None:
    s.rows.append(row)
    if row["pattern"]:
        s.patterns[row["pattern"]] += 1
    if row["program"]:
        s.programs[row["program"]] += 1
    _seen(s, row)


def _seen(s: Signature, row: dict[str, Any]) -> None:
    t = float(row["elapsed_s"])
    s.first_seen = t if s.first_seen is None else min(s.first_seen, t)
    s.last_seen = t if s.last_seen is None else max(s.last_seen, t)
    if s.example is None:
        s.example = row["artifacts"] or row["message"][:200]
