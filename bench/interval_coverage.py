"""Does the reported 95% interval of a failure rate cover the truth when failures cluster?

Simulated soaks (no hardware): W worker slots run jobs one after another. Each worker process
has its own failure propensity (mean mu, gamma-distributed: some processes are worse than
others); after a failure the next BURST jobs fail with probability Q_BURST (a churn helper
failing in bursts); a failure is a crash with probability P_CRASH, which ends the process (its
slot starts a new process: a new cluster). Jobs have INVOCATIONS invocations; a crashed job
stops at its failing invocation, an erroring job fails a share of its invocations.

For each setting, RUNS simulated soaks; coverage = share of runs whose 95% interval contains
the true long-run rate (itself measured on a simulation 1,000 x longer). Printed side by side:
  clustered  stress.analysis.stats.clustered_rate, per job, clusters = worker processes
  naive job  Wilson per job, as if jobs were independent
  old inv    Wilson per invocation (the old report), against the true per-invocation rate

    python bench/interval_coverage.py [--runs 1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stress.analysis.stats import Unit, clustered_rate, wilson  # noqa: E402

INVOCATIONS: int = 20  # per job: the corpus jobs plan 10-50
BURST: int = 3  # jobs after a failure that stay at risk (a churn helper's burst)
Q_BURST: float = 0.5  # failure probability of a job inside a burst
P_CRASH: float = 0.4  # share of failures that kill their process
HETEROGENEITY_SHAPE: float = 1.5  # gamma shape of per-process propensity (mean 1): wide spread
ERROR_INVOCATION_SHARE: float = 0.3  # an erroring job fails this share of its other invocations
TRUTH_SCALE: int = 1000  # the truth run is this many times longer than one simulated run


@dataclass(frozen=True)
class Setting:
    mu: float  # base per-job failure probability of an average process
    workers: int
    jobs: int


SETTINGS: tuple[Setting, ...] = (
    Setting(0.01, 4, 400), Setting(0.01, 8, 2000), Setting(0.03, 2, 300),
    Setting(0.05, 4, 400), Setting(0.05, 8, 2000), Setting(0.2, 2, 200), Setting(0.2, 8, 1000),
)


@dataclass
class Outcome:
    units: list[Unit]
    failed_invocations: int
    invocations: int


def simulate(s: Setting, rng: random.Random, jobs: int) -> Outcome:
    units: list[Unit] = []
    finv = inv = 0
    proc = 0
    per_slot = [jobs // s.workers + (1 if i < jobs % s.workers else 0) for i in range(s.workers)]
    for slot, count in enumerate(per_slot):
        proc += 1
        p_proc = min(0.95, s.mu * rng.gammavariate(HETEROGENEITY_SHAPE,
                                                    1 / HETEROGENEITY_SHAPE))
        burst_left = 0
        for _ in range(count):
            p = Q_BURST if burst_left > 0 else p_proc
            burst_left = max(0, burst_left - 1)
            failed = rng.random() < p
            units.append(Unit((slot, proc), int(failed)))
            if not failed:
                inv += INVOCATIONS
                continue
            if rng.random() < P_CRASH:
                at = rng.randint(1, INVOCATIONS)
                inv += at
                finv += 1
                proc += 1  # the slot's next job runs in a fresh process
                p_proc = min(0.95, s.mu * rng.gammavariate(HETEROGENEITY_SHAPE,
                                                            1 / HETEROGENEITY_SHAPE))
                burst_left = 0
            else:
                inv += INVOCATIONS
                finv += 1 + sum(rng.random() < ERROR_INVOCATION_SHARE
                                for _ in range(INVOCATIONS - 1))
                burst_left = BURST
    return Outcome(units, finv, inv)


def truth(s: Setting, rng: random.Random) -> tuple[float, float]:
    big = Setting(s.mu, s.workers * TRUTH_SCALE, s.jobs * TRUTH_SCALE)
    o = simulate(big, rng, big.jobs)
    return sum(u.failed for u in o.units) / len(o.units), o.failed_invocations / o.invocations


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    print(f"$ python {' '.join(sys.argv)}    (git {commit})")
    print(f"{args.runs} simulated soaks per setting; crash ends the process (p={P_CRASH}), "
          f"bursts of {BURST} jobs at q={Q_BURST}, per-process propensity ~ "
          f"gamma(shape {HETEROGENEITY_SHAPE})")
    print(f"{'mu':>5} {'workers':>7} {'jobs':>5} {'true/job':>9} {'clustered':>10} "
          f"{'naive job':>10} {'old inv':>8} {'mean deff':>9}")
    rng = random.Random(args.seed)
    worst = 1.0
    for s in SETTINGS:
        true_job, true_inv = truth(s, rng)
        cov = naive = old = 0
        deffs = 0.0
        for _ in range(args.runs):
            o = simulate(s, rng, s.jobs)
            r = clustered_rate(o.units)
            deffs += r.design_effect
            cov += r.low <= true_job <= r.high
            lo, hi = wilson(r.failures, r.units)
            naive += lo <= true_job <= hi
            lo, hi = wilson(o.failed_invocations, o.invocations)
            old += lo <= true_inv <= hi
        c = cov / args.runs
        worst = min(worst, c)
        print(f"{s.mu:>5} {s.workers:>7} {s.jobs:>5} {true_job:>9.4f} {c:>10.1%} "
              f"{naive / args.runs:>10.1%} {old / args.runs:>8.1%} "
              f"{deffs / args.runs:>9.2f}")
    print(f"worst clustered coverage {worst:.1%}  goal >= 93%  {'OK' if worst >= 0.93 else 'MISS'}")


if __name__ == "__main__":
    main()
