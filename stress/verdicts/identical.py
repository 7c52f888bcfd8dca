"""Identical stacks are one stack: consecutive stacks of a bisection whose fingerprints match
(runtimes.fingerprint: the same libraries and code objects on the ROCm side, the same IREE side
and env) are merged before the first trial and tested once, under the first one's name; the
answer says so ("7.11.0a20251125 = 7.11.0a20251126: tested once"), and a first bad stack's
last good one is the last of the group before it (the nearest build to the change).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stress.verdicts.trials import Trial


def groups(names: Sequence[str], digests: Mapping[str, str]) -> list[list[str]]:
    """`names` in order, consecutive ones with the same digest together ('' never merges)."""
    out: list[list[str]] = []
    for n in names:
        d = digests.get(n, "")
        if out and d and digests.get(out[-1][-1], "") == d:
            out[-1].append(n)
        else:
            out.append([n])
    return out


def merged(parts: Sequence[Sequence[str]]) -> list[list[str]]:
    return [list(g) for g in parts if len(g) > 1]


def describe(group: Sequence[str]) -> str:
    return f"{' = '.join(group)}: tested once"


def as_group_trials(trials: Iterable[Trial], parts: Sequence[Sequence[str]]) -> list[Trial]:
    """Trials of any stack of a group counted as the group's (its first stack's name): a
    trial on disk of 7.11.0a20251126 is one of 7.11.0a20251125 when they are identical. The
    same seed on two members is the same trial (counted once by bisect.Evidence)."""
    head = {n: g[0] for g in parts for n in g}
    return [dataclasses.replace(t, stack=head[t.stack]) if t.stack in head else t
            for t in trials]


def apply(result: Any, parts: Sequence[Sequence[str]]) -> None:
    """A bisection run over the groups' first stacks, told about the groups: the rows of
    merged stacks say so, and the last good stack is the last of the group before the first
    bad one."""
    sets = merged(parts)
    result.identical = [describe(g) for g in sets]
    by_head = {g[0]: g for g in parts}
    for row in result.rows:
        g = by_head.get(row.name, [row.name])
        if len(g) > 1:
            row.note = (f"= {', '.join(g[1:])} (identical: tested once)"
                        + (f"; {row.note}" if row.note else ""))
    if result.first_bad and result.last_good in by_head:
        nearest = by_head[result.last_good][-1]
        if nearest != result.last_good:
            result.reason = result.reason.replace(f"(last good: {result.last_good})",
                                                  f"(last good: {nearest})", 1)
            result.last_good = nearest
