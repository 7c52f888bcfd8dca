"""`compare`'s error rates and trial counts against the fixed 20 + 20 design, simulated.

Each simulated trial fails with its arm's rate (no hardware); the real sequential compare
(stress.verdicts.compare.compare: paired SPRT both ways, theta1 0.8, alpha 0.05, beta 0.1,
Fisher at the 20-pair budget) runs RUNS times per setting. Side by side, the fixed design:
20 + 20 trials and one-sided Fisher at 5% (what the fusilli maintainers did by eye).
bench/compare_fault.py does the same with real soaks for the 0 vs ~50% setting.

    python bench/compare_simulation.py [--runs 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import header  # noqa: E402

from stress.analysis.stats import Alternative, fisher_exact  # noqa: E402
from stress.verdicts.compare import MAX_PAIRS, Verdict, compare  # noqa: E402
from stress.verdicts.trials import Trial  # noqa: E402

SETTINGS: tuple[tuple[float, float], ...] = (
    (0.0, 0.5),  # the case: B fails about half its trials
    (0.0, 0.4),  # fusilli: 20/20 passed vs 8/20 passed
    (0.1, 0.5),
    (0.0, 0.0),  # no failures at all (3.12 vs 3.13 here)
    (0.3, 0.3),  # equal flaky arms: false 'B worse' rate
    (0.5, 0.0),  # A worse
)


class SimArms:
    def __init__(self, rates: dict[str, float], rng: random.Random):
        self.rates, self.rng = rates, rng

    def run(self, stack: str, index: int, seed: int) -> Trial:
        return Trial(stack, index, seed, self.rng.random() < self.rates[stack])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    header()
    rng = random.Random(args.seed)
    print(f"{args.runs} compares per setting; sequential budget {MAX_PAIRS} pairs; fixed "
          f"design {MAX_PAIRS} + {MAX_PAIRS} trials, one-sided Fisher at 5%")
    print(f"{'A rate':>6} {'B rate':>6} | {'B worse':>8} {'A worse':>8} {'no diff':>8} "
          f"{'mean trials':>12} | fixed: {'B worse':>8} {'trials':>6}")
    for pa, pb in SETTINGS:
        tally = {v: 0 for v in Verdict}
        trials = 0
        fixed_worse = 0
        for _ in range(args.runs):
            r = compare(SimArms({"A": pa, "B": pb}, rng), "A", "B", seed=0)
            tally[r.verdict] += 1
            trials += len(r.trials)
            ka = sum(rng.random() < pa for _ in range(MAX_PAIRS))
            kb = sum(rng.random() < pb for _ in range(MAX_PAIRS))
            p = fisher_exact(kb, MAX_PAIRS - kb, ka, MAX_PAIRS - ka, Alternative.GREATER)
            fixed_worse += p < 0.05
        n = args.runs
        print(f"{pa:>6.2f} {pb:>6.2f} | {tally[Verdict.B_WORSE] / n:>8.1%} "
              f"{tally[Verdict.A_WORSE] / n:>8.1%} {tally[Verdict.NO_DIFFERENCE] / n:>8.1%} "
              f"{trials / n:>12.1f} |        {fixed_worse / n:>8.1%} {2 * MAX_PAIRS:>6}")


if __name__ == "__main__":
    main()
