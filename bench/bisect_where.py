"""Where a bisection's trials go, and what each unknown in the model costs (issue 27).

Simulated stacks as in bisect_simulation.py (its truths, its trial draws, the real `bisect`),
good stacks failing 2%, bad ones 50%, the first bad stack uniform over 1 .. N-1. Each prior
below runs the same truths:
- the default prior (analysis.changepoint.PRIOR: both rates unknown, a second rise possible);
- no second rise (P = 0);
- no second rise, the bad rate pinned at 50% (Beta(500, 500));
- no second rise, both rates pinned (good Beta(20, 980), bad Beta(500, 500)): knowing the
  setting, the floor of this choice of trials and stop.
For each: mean trials, the share of answers right, the mean posterior printed, and the mean
trials spent per stack position relative to the first bad stack k (k-1 is the last good one).

    python bench/bisect_where.py [--runs 300] [--candidates 20,64] [--seed 27] [--jobs 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import header  # noqa: E402
from bisect_simulation import SimStacks, truth  # noqa: E402

from stress.analysis.changepoint import PRIOR, Prior  # noqa: E402
from stress.verdicts.bisect import Stop, bisect  # noqa: E402

SETTING = (0.02, 0.5)
PRIORS: tuple[tuple[str, Prior], ...] = (
    ("default prior", PRIOR),
    ("no second rise", dataclasses.replace(PRIOR, second_rise=0.0)),
    ("  + bad rate pinned 50%", dataclasses.replace(PRIOR, second_rise=0.0, bad=(500.0, 500.0))),
    ("  + good rate pinned 2%", dataclasses.replace(PRIOR, second_rise=0.0, bad=(500.0, 500.0),
                                                     good=(20.0, 980.0))),
)
GROUPS = ("good end", "other good", "k-2", "k-1", "k", "k+1", "other bad", "bad end")


def group(i: int, first: int, n: int) -> str:
    if i == 0:
        return "good end"
    if i == n - 1:
        return "bad end"
    d = i - first
    if -2 <= d <= 1:
        return f"k{d:+d}" if d else "k"
    return "other good" if d < 0 else "other bad"


def one_run(job: tuple[int, int, int, Prior]) -> tuple[int, bool, float, dict[str, int]]:
    n, seed, run, prior = job
    rng = random.Random(f"{seed}/{n}/{SETTING}/{run}")  # bisect_simulation's truths and draws
    names = [f"s{i:03d}" for i in range(n)]
    rates, first = truth(SETTING, n, rng, prior)
    res = bisect(SimStacks(dict(zip(names, rates, strict=True)), rng), names, seed=0,
                 prior=prior)
    spent: dict[str, int] = {}
    for i, row in enumerate(res.rows):
        g = group(i, first, n)
        spent[g] = spent.get(g, 0) + row.trials
    answered = res.stop is Stop.CONFIDENT
    return (res.trials, answered and res.first_bad == names[first],
            res.confidence if answered else -1.0, spent)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--candidates", default="20,64")
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    header()
    print(f"good stacks fail {SETTING[0]:.0%}, bad ones {SETTING[1]:.0%}; the same "
          f"{args.runs} truths for every prior; trials: mean per bisection")
    import multiprocessing

    t0 = time.monotonic()
    pool = multiprocessing.Pool(args.jobs) if args.jobs > 1 else None
    try:
        for n in (int(x) for x in args.candidates.split(",")):
            print(f"\n## {n} stacks")
            print(f"{'prior':<24} {'trials':>6} {'right/answers':>13} {'printed':>7}  "
                  + " ".join(f"{g:>10}" for g in GROUPS))
            for name, prior in PRIORS:
                jobs = [(n, args.seed, r, prior) for r in range(args.runs)]
                out = list(pool.imap(one_run, jobs, chunksize=4) if pool
                           else map(one_run, jobs))
                answers = [(ok, p) for _, ok, p, _ in out if p >= 0]
                spent = {g: sum(s.get(g, 0) for *_, s in out) / len(out) for g in GROUPS}
                print(f"{name:<24} {sum(t for t, *_ in out) / len(out):>6.1f} "
                      f"{sum(ok for ok, _ in answers) / max(1, len(answers)):>13.1%} "
                      f"{sum(p for _, p in answers) / max(1, len(answers)):>7.1%}  "
                      + " ".join(f"{spent[g]:>10.1f}" for g in GROUPS))
    finally:
        if pool is not None:
            pool.close()
    print("\nk: the first bad stack; k-1: the last good one; 'other good' / 'other bad': the "
          "stacks inside the list further from the rise (the ends on their own)")
    print(f"\n{time.monotonic() - t0:.0f} s wall, {args.jobs} process(es)")


if __name__ == "__main__":
    main()
