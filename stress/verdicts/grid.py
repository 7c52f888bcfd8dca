"""`iree-stress compare A B --grid`: the IREE side and the ROCm side of two runtime stacks
crossed (the fusilli ablation): A against B, against A's IREE with B's ROCm, and against B's
IREE with A's ROCm, to tell which side carries the difference.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from stress.analysis import header
from stress.errors import UsageError
from stress.fs import atomic_write
from stress.verdicts.compare import (
    MAX_PAIRS,
    CompareResult,
    SoakTrials,
    Verdict,
    base_plan_key,
    build_all,
    compare,
    family_key,
    in_use,
    render,
    verdict_header,
)
from stress.verdicts.trials import Cached, TrialCache, TrialRunner

if TYPE_CHECKING:
    from stress.soak.options import SoakOptions

GRID_QUESTIONS: tuple[str, ...] = ("both sides", "ROCm side alone", "IREE side alone")


def grid_exit_code(results: Sequence[CompareResult]) -> int:
    """1 when any cell is `B worse`, else 3 when any is inconclusive, else 0."""
    verdicts = {r.verdict for r in results}
    return 1 if Verdict.B_WORSE in verdicts else 3 if Verdict.INCONCLUSIVE in verdicts else 0


def compare_grid(runner: TrialRunner, a: str, b: str, a_iree_b_rocm: str, b_iree_a_rocm: str,
                 seed: int, max_pairs: int = MAX_PAIRS,
                 on_progress: Callable[[str], None] | None = None) -> list[CompareResult]:
    """A against B, against A's IREE with B's ROCm, against B's IREE with A's ROCm: which
    side carries the difference. A's trials are the same in all three (same seeds): a cached
    runner runs them once."""
    say = on_progress or (lambda _line: None)
    out = []
    for question, other in zip(GRID_QUESTIONS, (b, a_iree_b_rocm, b_iree_a_rocm), strict=True):
        say(f"-- {question}: {a} vs {other}")
        out.append(compare(runner, a, other, seed, max_pairs, say))
    return out


def render_grid(results: Sequence[CompareResult]) -> str:
    head = results[0].header if results else []
    lines = [*([header.text(head), ""] if head else []), f"GRID  A = {results[0].a}"]
    for question, r in zip(GRID_QUESTIONS, results, strict=True):
        lines.append(f"  {question:<16} B = {r.b:<40} {r.verdict.value:<20} "
                     f"({len(r.arm(r.b))} pairs)")
    lines.append("")
    lines += [render(r, with_header=False) for r in results]
    return "\n".join(lines)


def run_grid(base: SoakOptions, stacks_file: Path, a: str, b: str, max_pairs: int,
             out_dir: Path | None, log: Callable[[str], None]) -> list[CompareResult]:
    import os
    import time

    from stress.runtimes import spec

    sa, sb = spec.pick(spec.load(stacks_file), [a, b])
    if not (sa.rocm_side or sb.rocm_side):
        raise UsageError(f"--grid crosses the ROCm sides of {a} and {b}, and neither has one "
                         "(rocm_requirements or rocm)")
    ab, ba = spec.cross(sa, sb), spec.cross(sb, sa)
    seed = base.seed if base.seed is not None else int.from_bytes(os.urandom(3), "little")
    if base.python:
        raise UsageError("--python and stacks exclude each other")
    built, keys = build_all([sa, sb, ab, ba], base, log)
    with in_use(built):
        out = out_dir or Path("results") / f"grid-{a}-{b}-{time.strftime('%Y%m%d-%H%M%S')}"
        log(f"grid A={a} B={b}: crossed {ab.name}, {ba.name}; seed {seed}; trials in {out}")
        runner = Cached(SoakTrials(base, built, out, log),
                        TrialCache(out, base_plan_key(base, seed), keys, family_key(base)))
        results = compare_grid(runner, a, b, ab.name, ba.name, seed, max_pairs, log)
        arms = {r.b: r.arm(r.b) for r in results} | {a: [t for r in results for t in r.arm(a)]}
        head = verdict_header([(name, arms[name]) for name in (a, b, ab.name, ba.name)
                               if name in arms], base, seed,
                              f"{seed} (pair i: {seed} + i, the same for every stack)")
        for r in results:
            r.header = head
        atomic_write(out / "grid.json", json.dumps([r.as_dict() for r in results],
                                                   indent=1).encode())
    return results
