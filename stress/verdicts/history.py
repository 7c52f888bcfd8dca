"""`iree-stress history RUN...`: when did the failure rate rise, from runs already on disk
(nightly gate results downloaded from CI, old soaks), without a new trial. Each run folder is
one trial of the stack it ran on (failed when it recorded any failure, as a bisect trial);
runs are grouped by that stack, stacks ordered by build date (TheRock nightlies across the
7.x -> 10.x jump: listing.by_date), consecutive stacks whose workers loaded the same HIP and
HSA bytes merged (identical.py), and bisect's change-point posterior (analysis.changepoint)
is computed over what already ran. Sure enough: the first bad stack is named, exit 0. Not
yet: the posterior's top stacks, and `bisect --history RUN...` runs trials only where it is
still unsure (every run on disk counts there as a trial of its stack).

The stack a run ran on, first found of: the trial's stack.json (a compare or bisect trial);
a TheRock version in the paths of the libraries its workers loaded, or in the ROCm tree
beside its HIP library (`.info/version`, the TheRock manifest, a `rocm_sdk_core-V.dist-info`
next to it); a TheRock version in the run folder's path (`nightly/7.11.0a20251201/run-1`).
With `--by runtime`, the IREE runtime version its workers imported.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.analysis.changepoint import PRIOR, Prior, first_rise
from stress.analysis.stats import fmt_level
from stress.errors import UsageError
from stress.runtimes.listing import Build, BuildKind, version_kind
from stress.verdicts.bisect import (
    CONFIDENCE,
    BisectResult,
    Stop,
    bisect,
    next_stack,
    render,
)
from stress.verdicts.identical import apply, as_group_trials, describe, groups, merged
from stress.verdicts.trials import Trial
from stress.vocab import RunStatus

SUMMARY: str = "summary.json"
STACK_FILE: str = "stack.json"  # a compare/bisect trial's record of its stack
SEARCH_DEPTH: int = 5  # gate-results/NIGHTLY/shard/run: folders this deep are searched
VERSION = re.compile(r"(?<![0-9])\d+\.\d+\.\d+(?:a\d{8}(?:\+bkc\.\d{8})?|\.dev\d+\+[0-9a-f]+|"
                     r"rc\d+)(?![0-9A-Za-z])")  # TheRock's nightly, +bkc, dev, rc versions
_SAME_LIBS: tuple[str, ...] = ("libamdhip64", "libhsa-runtime64")  # a ROCm side loaded


class By(enum.Enum):
    """What a run's stack is named by."""

    ROCM = "rocm"  # the TheRock build (nightly version)
    RUNTIME = "runtime"  # the IREE runtime version


@dataclass
class PastRun:
    """One run folder read back: the stack it ran on and whether it failed."""

    folder: Path
    stack: str
    failed: bool
    digest: str = ""  # sha256 over the HIP, HSA and IREE runtime libraries' ('' unknown)
    run_ids: frozenset[str] = frozenset()  # the store's runs (several: a merged folder)
    shard: tuple[int, int] = (0, 1)  # (0-based index, count) of a gate's sharded plan
    seed: object = None


@dataclass
class History:
    result: BisectResult
    runs: list[PastRun] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "FOLDER: why" of runs not counted
    next_stack: str = ""  # where a trial would tell the most (when unsure)

    def as_dict(self) -> dict[str, Any]:
        return {**self.result.as_dict(), "runs": [
            {"folder": str(r.folder), "stack": r.stack, "failed": r.failed} for r in self.runs],
            "skipped": self.skipped, "next_stack": self.next_stack or None}


def run_folders(paths: Iterable[Path]) -> list[Path]:
    """Every folder holding a summary.json under `paths` (each one included)."""
    found: dict[Path, None] = {}

    def walk(d: Path, depth: int) -> None:
        if (d / SUMMARY).is_file():
            found[d] = None
            return
        if depth <= 0:
            return
        try:
            children = sorted(p for p in d.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            return
        for c in children:
            walk(c, depth - 1)

    for p in paths:
        walk(Path(p), SEARCH_DEPTH)
    return list(found)


def _tree_version(library: str) -> str:
    """A TheRock version the ROCm tree of a loaded HIP library states about itself."""
    lib = Path(library).parent
    root = lib.parent if lib.name == "lib" else lib
    for f in (root / ".info" / "version", root / "share/therock/therock_manifest.json"):
        try:
            text = f.read_text()
        except OSError:
            continue
        m = VERSION.search(text)
        if m:
            return m.group(0)
    for dist in sorted(root.parent.glob("rocm_sdk_core-*.dist-info")):
        m = VERSION.search(dist.name)
        if m:
            return m.group(0)
    return ""


def stack_of(folder: Path, summary: Mapping[str, Any], by: By) -> str:
    """The stack a run ran on ('' when nothing says)."""
    manifest = summary.get("manifest") or {}
    if by is By.RUNTIME:
        words = str(manifest.get("iree_runtime") or "").split()
        return words[0] if words and words[0] != "?" else ""
    try:
        return str(json.loads((folder / STACK_FILE).read_text())["stack"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    libs = [str(manifest.get("hip_library") or ""), *(manifest.get("loaded_gpu_libraries") or []),
            *(manifest.get("library_hashes") or {})]
    for text in libs:
        m = VERSION.search(text)
        if m:
            return m.group(0)
    for lib in libs:
        if "amdhip" in lib:
            v = _tree_version(lib)
            if v:
                return v
    for part in reversed(folder.resolve().parts):
        m = VERSION.search(part)
        if m:
            return m.group(0)
    return ""


def _digest(manifest: Mapping[str, Any]) -> str:
    hashes = manifest.get("library_hashes") or {}
    if not any(k in p for p in hashes for k in _SAME_LIBS):
        return ""  # (no ROCm library known: never the same stack as another)
    return hashlib.sha256(json.dumps(sorted(hashes.values())).encode()).hexdigest()  # HIP,
    #   HSA and the IREE runtime: a night whose IREE runtime changed is not the same stack


def read_runs(paths: Iterable[Path], by: By = By.ROCM) -> tuple[list[PastRun], list[str]]:
    """The runs under `paths` that count, and `FOLDER: why` for those that do not (still
    running or broken, harness errors, no job, no stack named)."""
    runs, skipped = [], []
    for folder in run_folders(paths):
        try:
            s = json.loads((folder / SUMMARY).read_text())
        except (OSError, ValueError):
            skipped.append(f"{folder}: unreadable {SUMMARY}")
            continue
        ran = int(s.get("jobs", 0)) + sum((s.get("failures") or {}).values())
        if s.get("status") != RunStatus.COMPLETED.value and not s.get("failed"):
            skipped.append(f"{folder}: {s.get('status')} without a failure (not a result)")
        elif s.get("harness_errors") or not ran:
            skipped.append(f"{folder}: harness errors or no job (not a result)")
        else:
            name = stack_of(folder, s, by)
            if not name:
                skipped.append(f"{folder}: no stack version found (manifest, libraries, path)")
            else:
                runs.append(PastRun(folder, name, bool(s.get("failed")),
                                    _digest(s.get("manifest") or {}), _run_ids(s), _shard(s),
                                    s.get("seed")))
    return whole_runs(runs, skipped), skipped


def _run_ids(summary: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(x for x in str(summary.get("run_id") or "").split("+") if x)


def _shard(summary: Mapping[str, Any]) -> tuple[int, int]:
    """A run's shard of its plan; a merged folder (store/merge.py: `runs`) is the whole."""
    if len(summary.get("runs") or []) > 1:
        return 0, 1
    shard = ((summary.get("manifest") or {}).get("config") or {}).get("shard") or (0, 1)
    try:
        return int(shard[0]), int(shard[1])
    except (TypeError, ValueError, IndexError):
        return 0, 1


def whole_runs(runs: Sequence[PastRun], skipped: list[str]) -> list[PastRun]:
    """One trial a whole run of the plan: a folder whose runs a merged folder also holds is
    left out (counted there), and the shards of one gate (`--shard K/N`: one stack, one
    seed) are one run, failed when any shard failed; shards that are not all there and
    failed nowhere are not a result (as an interrupted run)."""
    out: list[PastRun] = []
    sets: dict[tuple[str, str, int], list[list[PastRun]]] = {}
    for r in runs:
        within = next((m for m in runs if r.run_ids and r.run_ids < m.run_ids), None)
        if within is not None:
            skipped.append(f"{r.folder}: counted in the merged {within.folder}")
        elif r.shard[1] <= 1:
            out.append(r)
        else:
            found = sets.setdefault((r.stack, str(r.seed), r.shard[1]), [])
            g = next((g for g in found if r.shard[0] not in {x.shard[0] for x in g}), None)
            if g is None:
                found.append([r])
            else:
                g.append(r)
    for (stack, _seed, count), found in sets.items():
        for g in found:
            failed = any(x.failed for x in g)
            if len(g) < count and not failed:
                skipped.append(f"{g[0].folder}: {len(g)} of {count} shards, none failed (not "
                               f"a result)")
                continue
            digests = {x.digest for x in g}
            out.append(PastRun(g[0].folder, stack, failed, digests.pop() if len(digests) == 1
                               else "", frozenset().union(*(x.run_ids for x in g))))
    return out


def order(names: Iterable[str]) -> list[str]:
    """Stack names by build date (a version's own date); when some have no date (IREE
    releases among dated rcs, `--by runtime`), by version number, a version's dated
    prerelease builds before its release (3.10.0, 3.11.0rc20251016, 3.11.0)."""
    builds = [Build(n, *version_kind(n)) for n in set(names)]
    if all(b.date for b in builds):
        return [b.version for b in sorted(builds, key=Build.sort_key)]

    def by_number(b: Build) -> tuple[tuple[int, ...], bool, str, str]:
        numbers = b.sort_key()[1]
        return numbers, b.kind is BuildKind.RELEASE, b.date, b.version

    return [b.version for b in sorted(builds, key=by_number)]


def as_trials(runs: Sequence[PastRun], names: Mapping[str, str] | None = None) -> list[Trial]:
    """Each run a trial of its stack (renamed by `names`, e.g. to a stacks file's stack),
    each with a negative seed of its own across all stacks: never one a new trial takes
    (those count up from --seed), and two runs of identical stacks merged into one stack
    stay two trials."""
    return [Trial((names or {}).get(r.stack, r.stack), -k, -k, r.failed, run_dir=str(r.folder))
            for k, r in enumerate(runs, 1)]


class _NoTrials:
    """A TrialRunner for a posterior over what ran: asked for a trial, it is a bug."""

    def run(self, stack: str, index: int, seed: int) -> Trial:
        raise AssertionError("history runs no trial")


def history(paths: Sequence[Path], by: By = By.ROCM, confidence: float = CONFIDENCE,
            prior: Prior = PRIOR, log: Callable[[str], None] | None = None) -> History:
    say = log or (lambda _line: None)
    runs, skipped = read_runs(paths, by)
    names = order(r.stack for r in runs)
    if len(names) < 2:
        raise UsageError(f"history needs runs of at least two stacks; found {len(runs)} run(s) "
                         f"of {len(names)} ({', '.join(names) or 'none'}) under "
                         f"{', '.join(map(str, paths))}" + (f"; {len(skipped)} not counted: "
                                                             f"{skipped[0]}" if skipped else ""))
    digests = {}
    for n in names:
        ds = {r.digest for r in runs if r.stack == n}
        digests[n] = ds.pop() if len(ds) == 1 else ""
    parts = groups(names, digests)
    for g in merged(parts):
        say(f"identical stacks (their workers loaded the same HIP, HSA and IREE runtime "
            f"bytes): {describe(g)}")
    heads = [g[0] for g in parts]
    trials = as_group_trials(as_trials(runs), parts)
    result = bisect(_NoTrials(), heads, 0, confidence, len(trials), None, trials, prior)
    apply(result, parts)
    h = History(result, runs, skipped)
    if result.stop is Stop.BUDGET:  # an end, or both, reached the confidence: a bisect
        #   over the same runs would stop before its first trial
        failures = [r.failures for r in result.rows]
        counts = [r.trials for r in result.rows]
        h.next_stack = heads[next_stack(first_rise(failures, counts, prior))]
        shown = ", ".join(f"{s} {p:.1%}" for s, p in result.top)
        if result.reason.startswith("the budget"):
            result.reason = (f"not sure from the {len(trials)} runs on disk (no stack at "
                             f"{fmt_level(confidence)}): most likely first bad {shown}; a "
                             f"trial would tell the most on {h.next_stack}")
    return h


def render_history(h: History) -> str:
    lines = [render(h.result).replace("BISECT  ", "HISTORY  ", 1)]
    if h.skipped:
        lines.append(f"  {len(h.skipped)} run folder(s) not counted: " + "; ".join(h.skipped[:3])
                     + ("; ..." if len(h.skipped) > 3 else ""))
    if h.next_stack:
        rows = h.result.rows
        lines.append(f"  still unsure: `iree-stress bisect --stacks F --good {rows[0].name} "
                     f"--bad {rows[-1].name} --history RUN...` adds trials only where it is, "
                     f"first on {h.next_stack} (every run read here counts as a trial)")
    return "\n".join(lines)


def trials_for(paths: Sequence[Path], stacks: Sequence[str], by: By = By.ROCM,
               log: Callable[[str], None] | None = None) -> list[Trial]:
    """`bisect --history`: the runs under `paths` as trials of the stacks file's stacks (a
    stack named as the run's stack, else the one stack whose name contains it); runs of
    other stacks are left out, and the log says how many counted."""
    runs, skipped = read_runs(paths, by)
    names = {}
    for r in runs:
        exact = [s for s in stacks if s == r.stack]
        within = [s for s in stacks if r.stack in s]
        if exact or len(within) == 1:
            names[r.stack] = (exact or within)[0]
    counted = [r for r in runs if r.stack in names]
    if log is not None:
        log(f"  + {len(counted)} run(s) on disk from --history count as trials of "
            f"{len({names[r.stack] for r in counted})} stack(s); {len(runs) - len(counted)} "
            f"of other stacks and {len(skipped)} not results left out")
    return as_trials(counted, names)
