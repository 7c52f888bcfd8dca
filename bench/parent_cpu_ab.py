"""The soak parent's own CPU per job (the summary's `phases.parent_cpu`), this checkout against
another (a baseline), the two alternated round by round: CPU seconds, not wall, so another
user's load on a shared machine moves it far less than the wall-clock ratios of
soak_overhead.py and exit_rate.py. Each shape is a fixed plan (same seed, same invocations).

    git archive main | tar -x -C /tmp/base
    python bench/parent_cpu_ab.py --base /tmp/base [--rounds 5] [--out FILE]

Both trees run under this interpreter (the same runtime and compiler), each with its own
package first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import ROOT, header

_PROGRAM: str = "binary.add.f32.3x5x7+3x5x7"  # the smallest real program: the harness's cost
#   dominates the job
SHAPES: dict[str, list[str]] = {  # pattern -> soak arguments (2 workers x 1 thread)
    "per-call": ["--patterns", "per-call", "-n", "3000"],
    "shared": ["--patterns", "shared", "-n", "30000"],
    "exit-clean": ["--patterns", "exit-clean", "-n", "600"],
}


def parent_ms_per_job(root: Path, args: list[str]) -> tuple[float, int, float]:
    """(parent CPU ms per job, jobs, load average) of one soak run from checkout `root`."""
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "soak", "--json", "-q", "--target", "cpu", "--seed",
         "7", "--programs", _PROGRAM, "--workers", "2", "--threads", "1", *args],
        cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)},
        timeout=600)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"soak in {root} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = json.loads(proc.stdout)["phases"]["parent_cpu"]
    return 1000 * cpu["seconds"] / max(1, cpu["count"]), cpu["count"], os.getloadavg()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the baseline checkout")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args()
    lines = [header(), f"baseline: {args.base.resolve()}; {_PROGRAM}, 2 workers x 1 thread, "
             "seed 7; the trees alternate (which goes first flips each round)"]
    print(lines[-1], flush=True)
    trees = {"this": ROOT, "base": args.base.resolve()}
    seen: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for shape, soak_args in SHAPES.items():
            for tree in ("this", "base") if r % 2 == 0 else ("base", "this"):
                ms, jobs, load = parent_ms_per_job(trees[tree], soak_args)
                seen.setdefault((tree, shape), []).append(ms)
                lines.append(f"round {r} {shape:10s} {tree}: {ms:.3f} ms/job over {jobs} jobs "
                             f"(load {load:.1f})")
                print(lines[-1], flush=True)
    for shape in SHAPES:
        base = statistics.median(seen[("base", shape)])
        this = statistics.median(seen[("this", shape)])
        lines.append(f"{shape:10s} parent CPU per job, medians: base {base:.3f} ms, this "
                     f"{this:.3f} ms, this/base {this / base:.2f}")
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
