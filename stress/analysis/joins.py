"""Crashes whose native stacks were not read join the mode they belong to (issue 36 item 1).

The evidence budget reads the stacks of a few crashes of each mode and only counts the others;
a core can also be lost (another copy's crash overwrote it in a shared folder). Such a crash
has no native frames, but what is cheap to know for every crash is there: its class, signal
and step, the process that died (the command, or which child), and for a Python process the
top of faulthandler's dump (`fault_top`, recorded by the engine for every crash). It joins the
signature of the crashes *read* with the same class, signal, step and process; when several
such signatures were read, the one whose read crashes had the same dump top, else the one read
most often (said as such). Before the dump top comes the fault site (`fault_site`: the module
and function, or offset, of the faulting instruction, from the notes of a core cut at its size
limit, recorded for every crash whose signal the kernel raised): a crash joins the mode whose
read crashes faulted where it did. Socorro groups every crash report the same way, symbolized
or not: sampling decides how much is read, never how failures are grouped.

Where no native stacks were read in its group at all (every core lost, or gdb out of time),
the crashes keyed on faulthandler's Python frames (from their folders) stand in: a crash only
counted with the same dump top joins them. A crash with nothing of its kind read keeps its own
key (the top of its dump, or its last output lines): then there is no mode to join, and the
modes read of its class, signal and process at other steps are named beside it (`elsewhere`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from stress.analysis.sigkeys import SignatureKey
from stress.analysis.stacks import StackEvidence
from stress.stacktext import StackTool

_UNREAD_SOURCES: frozenset[str] = frozenset({StackTool.FAULTHANDLER.describe(), "none",
                                             "pending", "faulthandler"})  # no native frames
_TEARDOWN_STEPS: frozenset[str] = frozenset({"device-release", "driver-release", "gc",
                                             "worker-exit"})  # signatures.TEARDOWN_STEPS

Head = tuple[str, str, str, str]  # class, signal, step group, the process that died


def counted(row: dict[str, Any]) -> bool:
    """A crash the evidence budget only counted (no core read)."""
    b = (row.get("evidence") or {}).get("evidence_budget")
    return isinstance(b, dict) and "full" in b and not b["full"]


def unread(row: dict[str, Any], stack: StackEvidence) -> bool:
    """A crash without native frames of its own: only counted, or its core was not read
    (lost, overwritten, no core at all): nothing or faulthandler's Python frames."""
    if row["class"] != "crash":
        return False
    return counted(row) or not stack.frames or stack.source in _UNREAD_SOURCES


def head(row: dict[str, Any], step: str | None) -> Head:
    """What is known of every crash: class, signal, step (the teardown steps as one, as in
    signature keys) and which process died (the command, or its child by name)."""
    child = (row.get("evidence") or {}).get("child_crash")
    who = str(child.get("name") or "?") if isinstance(child, dict) else ""
    step = "teardown" if step in _TEARDOWN_STEPS else (step or "")
    return row["class"], row.get("signal") or "", step, who


def fault_top(row: dict[str, Any]) -> tuple[str, ...]:
    """The top of the crash's faulthandler dump, as the engine recorded it (() unknown)."""
    top = (row.get("evidence") or {}).get("fault_top")
    return tuple(x for x in top if isinstance(x, str)) if isinstance(top, list) else ()


def fault_site(row: dict[str, Any]) -> str:
    """The crash's fault site as two crashes share it (`FaultSite.key`), "" unknown."""
    site = (row.get("evidence") or {}).get("fault_site")
    return str(site.get("key") or "") if isinstance(site, dict) else ""


class Joiner:
    """Which read signature each unread crash joins (module doc)."""

    def __init__(self) -> None:
        self.read: dict[Head, Counter[SignatureKey]] = defaultdict(Counter)
        self.sites: dict[tuple[Head, str], Counter[SignatureKey]] = defaultdict(Counter)
        self.tops: dict[tuple[Head, tuple[str, ...]], Counter[SignatureKey]] = \
            defaultdict(Counter)
        self.python: dict[tuple[Head, tuple[str, ...]], Counter[SignatureKey]] = \
            defaultdict(Counter)

    def add_python(self, row: dict[str, Any], step: str | None, key: SignatureKey) -> None:
        """An unread crash with Python frames only (faulthandler's, from its folder): where no
        native stacks were read at all, the crashes only counted with the same dump top join
        it rather than keep a key of their own made of the same frames."""
        top = fault_top(row)
        if top and key.frames:
            self.python[(head(row, step), top)][key] += 1

    def add_read(self, row: dict[str, Any], step: str | None, key: SignatureKey) -> None:
        """A crash whose native frames were read and made `key`."""
        h = head(row, step)
        self.read[h][key] += 1
        top = fault_top(row)
        if top:
            self.tops[(h, top)][key] += 1
        if fault_site(row):
            self.sites[(h, fault_site(row))][key] += 1

    def target(self, row: dict[str, Any], step: str | None
               ) -> tuple[SignatureKey, str] | None:
        """(the signature an unread crash joins, why) or None when nothing of its group was
        read."""
        h = head(row, step)
        read = self.read.get(h)
        how = "class, signal and step" + (f" (child {h[3]})" if h[3] else "")
        if not read:
            python = self.python.get((h, fault_top(row))) if fault_top(row) else None
            if not python:
                return None
            best = max(python, key=lambda k: (python[k], k.text()))
            return best, (f"joined by {how} and the top of its Python dump (no native stacks "
                          "were read in its mode)")
        site = fault_site(row)
        sited = {k for (other, _), keys in self.sites.items() if other == h for k in keys}
        by_site = self.sites.get((h, site)) if site and sited >= set(read) else None  # (only
        #   where every mode read there has a site: one read without may fault there too)
        if by_site and len(by_site) == 1:
            return next(iter(by_site)), f"joined by {how} and its fault site, {site}"
        by_top = self.tops.get((h, fault_top(row))) if fault_top(row) else None
        if by_top and by_site:
            by_top = Counter({k: n for k, n in by_top.items() if k in by_site}) or None
        if by_top and len(by_top) == 1:
            return next(iter(by_top)), f"joined by {how} and the top of its Python dump"
        if len(read) == 1:
            return next(iter(read)), f"joined by {how}"
        pool = by_site or by_top or read
        best = max(pool, key=lambda k: (pool[k], k.text()))
        unmatched = f"; its fault site, {site}, is none of theirs" if site and not by_site \
            and sited >= set(read) else ""
        return best, (f"joined the most read of {len(pool)} modes of its {how}: "
                      f"which one it was is not known{unmatched}")


    def elsewhere(self, row: dict[str, Any], step: str | None) -> list[SignatureKey]:
        """For an unread crash that joined nothing: the modes read with its class, signal and
        process at other steps (most read first). Not joined (the step is part of a mode: a
        crash after the work was done is not one during it), but named, so that the answer
        says which read mode it may be (the same frames at another moment, e.g. a device
        collected during a test in one process and at the interpreter's exit in another)."""
        h = head(row, step)
        near: Counter[SignatureKey] = Counter()
        for other, keys in self.read.items():
            if other[:2] == h[:2] and other[3] == h[3] and other[2] != h[2]:
                near.update(keys)
        site = fault_site(row)
        same = {k for (other, s), keys in self.sites.items() if site and s == site
                and other[2] != h[2] for k in keys}  # (faulted where it did: named first)
        return sorted(near, key=lambda k: (k not in same, -near[k], k.text()))

    def same_site(self, row: dict[str, Any], key: SignatureKey) -> bool:
        """Whether crashes read in mode `key` faulted where unread crash `row` did."""
        site = fault_site(row)
        return bool(site) and any(s == site and key in keys
                                  for (_, s), keys in self.sites.items())


def reason(row: dict[str, Any]) -> str:
    """Why a crash's stacks were not read, for the signature's merged line."""
    if counted(row):
        return "counted without stacks (evidence budget)"
    note = str((row.get("evidence") or {}).get("note") or "")
    if "overwritten" in note:
        return "core overwritten by another process"
    return "its native stacks not read"
