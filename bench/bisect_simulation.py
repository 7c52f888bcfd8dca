"""How often does `bisect` name the right stack, and after how many trials?

Simulated stacks (no hardware): CANDIDATES stacks in order, the first FIRST_BAD of them fail a
trial with probability P_GOOD_TRUE, the rest with P_BAD_TRUE; FIRST_BAD uniform over 1 ..
CANDIDATES-1 (stack 0 is the known good end, the last the known bad end). The real bisect
(stress.verdicts.bisect.bisect, default hypotheses p_good 0.02, p_bad 0.3, 1% error per
decision) runs on each; accuracy = share of runs naming FIRST_BAD; trials = all trials run,
ends included. A second setting with rates close to the hypotheses shows where it strains.

    python bench/bisect_simulation.py [--runs 1000] [--candidates 64] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import header  # noqa: E402

from stress.verdicts.bisect import Outcome, bisect  # noqa: E402
from stress.verdicts.compare import Trial  # noqa: E402

SETTINGS: tuple[tuple[float, float], ...] = (
    (0.0, 0.5),  # the fusilli case: clean before, half the runs failing after
    (0.02, 0.5),  # a background flake on good stacks too
    (0.0, 0.3),  # bad at exactly the H1 rate
    (0.05, 0.4),  # good stacks flakier than H0 assumes: where it strains
)


class SimStacks:
    """A TrialRunner: stack 'sNN' fails with its rate; trial i of a stack is drawn once
    (as the on-disk cache would return it)."""

    def __init__(self, rates: dict[str, float], rng: random.Random):
        self.rates, self.rng = rates, rng
        self.drawn: dict[tuple[str, int], Trial] = {}

    def run(self, stack: str, index: int, seed: int) -> Trial:
        key = (stack, index)
        if key not in self.drawn:
            self.drawn[key] = Trial(stack, index, seed, self.rng.random() < self.rates[stack])
        return self.drawn[key]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    header()
    rng = random.Random(args.seed)
    n = args.candidates
    print(f"{n} candidate stacks, {args.runs} bisections per setting; first bad uniform over "
          f"1..{n - 1}")
    print(f"{'good rate':>9} {'bad rate':>9} {'accuracy':>9} {'found':>7} {'mean trials':>12} "
          f"{'p90 trials':>11} {'mean conf.':>11}")
    for good, bad in SETTINGS:
        right = found = 0
        trials: list[int] = []
        conf = 0.0
        for _ in range(args.runs):
            first = rng.randrange(1, n)
            names = [f"s{i:03d}" for i in range(n)]
            rates = {s: (bad if i >= first else good) for i, s in enumerate(names)}
            res = bisect(SimStacks(rates, rng), names, seed=0)
            trials.append(res.trials)
            if res.outcome is Outcome.FOUND:
                found += 1
                conf += res.confidence
                right += res.first_bad == names[first]
        trials.sort()
        print(f"{good:>9.2f} {bad:>9.2f} {right / args.runs:>9.1%} {found / args.runs:>7.1%} "
              f"{sum(trials) / len(trials):>12.1f} {trials[int(0.9 * len(trials))]:>11} "
              f"{conf / max(1, found):>11.1%}")
    print("accuracy: right stack named / runs; found: runs that named a stack (the rest were "
          "inconclusive); mean conf.: the Bonferroni bound printed to the user")


if __name__ == "__main__":
    main()
