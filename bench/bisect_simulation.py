"""Is `bisect` right as often as it says, and after how many trials?

Simulated stacks (no hardware): N stacks in order; stack i fails each trial with its setting's
rate. One-step settings: the stacks from FIRST on fail at the bad rate, those before at the
good rate, FIRST uniform over 1 .. N-1 (stack 0 is the --good end, the last the --bad end).
Two-step setting: the rate rises twice, at FIRST (uniform over 1 .. N-2) and at a second
stack uniform over FIRST+1 .. N-1; the answer is FIRST. The real bisect
(stress.verdicts.bisect.bisect, its defaults: stop at a 95% posterior, 300 trials at most)
runs on each. An answer is right when it names FIRST.

Calibration: the answers binned by the posterior printed with them; in each bin the mean
printed posterior against the share right (with its 95% Wilson interval): a calibrated
bisect is right as often as it says.

    python bench/bisect_simulation.py [--runs 1000] [--candidates 64,20] [--seed 1] [--jobs N]
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import header  # noqa: E402

from stress.analysis.stats import wilson  # noqa: E402
from stress.verdicts.bisect import CONFIDENCE, MAX_TRIALS, Outcome, bisect  # noqa: E402
from stress.verdicts.trials import Trial  # noqa: E402

# (good rate, bad rate[, rate after the second rise]); the four of issue 11's bench first
SETTINGS: tuple[tuple[float, ...], ...] = (
    (0.0, 0.5),  # the fusilli case: clean before, half the runs failing after
    (0.02, 0.5),  # a background flake on good stacks too
    (0.0, 0.3),  # a milder fault
    (0.05, 0.4),  # a flakier background
    (0.02, 0.15),  # a faint fault over a background flake
    (0.02, 0.2, 0.5),  # a rate that rises twice: the first rise is the answer
)
BINS: tuple[tuple[float, float], ...] = ((0.95, 0.97), (0.97, 0.99), (0.99, 1.0))


class SimStacks:
    """A TrialRunner: a stack fails with its rate; trial i of a stack is drawn once (as the
    on-disk cache would return it)."""

    def __init__(self, rates: dict[str, float], rng: random.Random):
        self.rates, self.rng = rates, rng
        self.drawn: dict[tuple[str, int], Trial] = {}

    def run(self, stack: str, index: int, seed: int) -> Trial:
        key = (stack, index)
        if key not in self.drawn:
            self.drawn[key] = Trial(stack, index, seed, self.rng.random() < self.rates[stack])
        return self.drawn[key]


@dataclass
class Tally:
    runs: int = 0
    trials: list[int] = field(default_factory=list)
    answers: list[tuple[float, bool]] = field(default_factory=list)  # (printed, right)
    stops: dict[str, int] = field(default_factory=dict)

    @property
    def right(self) -> int:
        return sum(r for _, r in self.answers)


def truth(setting: tuple[float, ...], n: int, rng: random.Random) -> tuple[list[float], int]:
    first = rng.randrange(1, n - (len(setting) - 2))
    rises = [first]
    if len(setting) == 3:
        rises.append(rng.randrange(first + 1, n))
    rates = [setting[sum(i >= r for r in rises)] for i in range(n)]
    return rates, first


def one_run(job: tuple[tuple[float, ...], int, int, int]) -> tuple[int, str, float, bool]:
    """One bisection: (trials, stop, printed posterior, right); its own seeded generator, so
    the result does not depend on how runs are spread over processes."""
    setting, n, seed, run = job
    rng = random.Random(f"{seed}/{n}/{setting}/{run}")
    names = [f"s{i:03d}" for i in range(n)]
    rates, first = truth(setting, n, rng)
    res = bisect(SimStacks(dict(zip(names, rates, strict=True)), rng), names, seed=0)
    return (res.trials, res.stop.value, res.confidence if res.outcome is Outcome.FOUND
            else -1.0, res.first_bad == names[first])


def simulate(setting: tuple[float, ...], n: int, runs: int, seed: int,
             pool: Any = None) -> Tally:
    jobs = [(setting, n, seed, r) for r in range(runs)]
    t = Tally()
    for trials, stop, printed, right in (pool.imap(one_run, jobs, chunksize=4) if pool
                                         else map(one_run, jobs)):
        t.runs += 1
        t.trials.append(trials)
        t.stops[stop] = t.stops.get(stop, 0) + 1
        if printed >= 0:
            t.answers.append((printed, right))
    return t


def label(setting: tuple[float, ...]) -> str:
    return " -> ".join(f"{r:.0%}" for r in setting)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--candidates", default="64,20", help="stack counts, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="processes (runs are seeded one by "
                    "one: the output does not depend on it)")
    args = ap.parse_args()
    header()
    print("only counts are measured here (no timings): the machine may be shared")
    import multiprocessing

    pool = multiprocessing.Pool(args.jobs) if args.jobs > 1 else None
    for n in (int(x) for x in args.candidates.split(",")):
        tallies = [(s, simulate(s, n, args.runs, args.seed, pool)) for s in SETTINGS]
        print(f"\n## {n} stacks, {args.runs} bisections per setting (defaults: stop at "
              f"{CONFIDENCE:.0%}, at most {MAX_TRIALS} trials)")
        print(f"{'rates (good -> bad)':<20} {'answered':>8} {'right/answers':>13} "
              f"{'right/runs':>10} {'inconcl.':>8} {'mean trials':>11} {'p90 trials':>10} "
              f"{'mean printed':>12}")
        for s, t in tallies:
            a = len(t.answers)
            trials = sorted(t.trials)
            printed = sum(c for c, _ in t.answers) / a if a else 0.0
            print(f"{label(s):<20} {a / t.runs:>8.1%} {t.right / max(1, a):>13.1%} "
                  f"{t.right / t.runs:>10.1%} {1 - a / t.runs:>8.1%} "
                  f"{sum(trials) / len(trials):>11.1f} {trials[int(0.9 * len(trials))]:>10} "
                  f"{printed:>12.1%}")
        print(f"\ncalibration ({n} stacks): answers binned by the posterior printed with them")
        print(f"{'rates (good -> bad)':<20} {'bin':<9} {'answers':>7} {'printed':>8} "
              f"{'right':>7} {'95% interval':>15} {'right - printed':>15}")
        for s, t in tallies:
            for lo, hi in BINS:
                got = [(c, r) for c, r in t.answers if lo <= c < hi or (hi == 1.0 and c >= lo)]
                if not got:
                    print(f"{label(s):<20} {lo:.0%}-{hi:.0%}  {0:>7}")
                    continue
                k = sum(r for _, r in got)
                printed = sum(c for c, _ in got) / len(got)
                w_lo, w_hi = wilson(k, len(got))
                print(f"{label(s):<20} {lo:.0%}-{hi:.0%}  {len(got):>7} {printed:>8.1%} "
                      f"{k / len(got):>7.1%} {f'[{w_lo:.1%}, {w_hi:.1%}]':>15} "
                      f"{100 * (k / len(got) - printed):>+14.1f}pt")
        print(f"\nstops ({n} stacks): " + "; ".join(
            f"{label(s)}: " + ", ".join(f"{k} {v}" for k, v in sorted(t.stops.items()))
            for s, t in tallies))
    print("\nanswered: runs that named a stack (the rest inconclusive: budget spent, or the "
          "good end judged bad); right/answers: share of the answers naming the first rise; "
          "printed: the posterior the answer printed")


if __name__ == "__main__":
    main()
