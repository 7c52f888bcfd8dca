"""Can any stopping rule meet all of issue 27's bisect goals at once? The rules side by side.

bench/bisect_simulation.py measures bisect's default rule (stop when the top stack's posterior
reaches verdicts.bisect.CONFIDENCE, print that posterior). This script runs the same truths
and the same trials (bisect_simulation's truth() and SimStacks, the same seeded generator per
run) and asks, of
the same sequence of trials, when each of several rules would have stopped, which stack it
would have named and what it would have printed. The next trial does not depend on the
stopping rule (it is the stack of largest expected entropy drop of the full posterior), so one
sequence of trials per run serves every rule: a run goes on until the last rule has stopped
(or the budget of 300 trials is spent).

The rules (P: the model's posterior, analysis.changepoint.first_rise: rates unknown and
integrated out, room for a second rise; top: its largest stack):
- stop at 95%: stop when P(top) >= 95%; print P(top). bisect's default until this script's
  outputs (bench/results/bisect_frontier*.txt, where it is called "default") made it 97.5%.
- stop at 97.5%: the same at 97.5%, bisect's default now (called "later stop" in them).
- plug-in printed: stop when P(top) >= 95% and the plug-in posterior of top is >= 95% too;
  print the plug-in one. The plug-in posterior: one rise, the good and bad rates fixed at P's
  posterior means (FirstRise.rates), the hypotheses weighted as the model's prior weighs them
  (the good end end_weight against one stack, no stack bad at the prior chance no_rise); a
  posterior that no longer averages over the rates the trials still allow.
- plug-in: stop when the plug-in posterior's top reaches 95%; name and print that.
- one rise printed: stop at 95%; print the posterior within the structure the
  trials favour (one rise unless P(a second rise) >= 50%, then two).
- one rise: stop when that favoured-structure posterior's top reaches 95%; name and print it.
Every rule also stops "same rate" as bisect does (Stop.SAME_RATE): when, after at least one
trial and with no top stop, P(the good end is bad) + P(no stack is bad) reaches its level on
the posterior it stops on (both P and the plug-in one for plug-in printed); it prints the
two ends' sum of the posterior it prints. As in bisect_simulation, that stop is an answer
only in the setting from the prior (right when the good end is bad or no stack is).

Goals (issue 27, as bisect_simulation counts them): answers right >= 95% in every setting
(but the one from the prior), inconclusive <= 5% in the four original settings, every bin of
printed confidence within 3 points of the share right (here also a bin below 95%, which only
the rules that print another posterior than the one they stop on can fill), mean trials at
2% -> 50% <= 30 over 20 stacks (45 over 64). The last line per rule counts the goals it misses.

Check of the machinery: for the first CHECKED runs of each setting the trials, stop, answer
and printed posterior of the rule at bisect's default confidence are compared with
bisect_simulation.one_run (the real bisect); the output says how many agree.

    python bench/bisect_frontier.py [--runs 1000] [--candidates 20] [--seed 27] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from _common import header  # noqa: E402
from bisect_simulation import (  # noqa: E402
    BINS,
    FROM_PRIOR,
    ORIGINAL,
    SETTINGS,
    TOLERANCE,
    TRIAL_GOALS,
    Setting,
    SimStacks,
    in_bin,
    label,
    one_run,
    truth,
)

from stress.analysis.changepoint import PRIOR, FirstRise, Prior, first_rise  # noqa: E402
from stress.analysis.stats import wilson  # noqa: E402
from stress.verdicts.bisect import CONFIDENCE as DEFAULT  # noqa: E402
from stress.verdicts.bisect import MAX_TRIALS, Evidence, Stop, next_stack  # noqa: E402

CONFIDENCE = 0.95  # the other rules' level
LATER = 0.975
CHECKED = 20  # runs per setting checked against the real bisect
BUDGET = -1  # the stack "named" by a rule that never stopped (the budget ran out first)
SAME = -2  # ... by a same-rate stop: the good end bad or no stack bad, neither one named
ALL_BINS: tuple[tuple[float, float], ...] = ((0.0, 0.95), *BINS)  # some rules print below 95%


@dataclass
class View:
    """What the rules read at one point of a run."""

    post: Any  # the model's posterior, k = 0 .. n (n: no stack is bad)
    plug: Any  # the plug-in posterior (rates at their posterior means, one rise)
    fav: Any  # the posterior within the favoured structure (one rise or two)
    tried: bool  # a trial seen: bisect's same-rate stop waits for one (the prior alone puts
    #   55% on the two ends over two stacks)


def plug_in(fr: FirstRise, failures: Any, trials: Any, prior: Prior) -> Any:
    """P(first bad = k), k = 0 .. n (n: no stack is bad), one rise, rates fixed at the
    posterior means, each hypothesis weighted as the model's prior weighs it
    (changepoint._log_prior, _log_prior_none): the good end end_weight against 1 for each
    stack inside the list; no stack bad the chance no_rise of the whole (end_weight against
    1 when no_rise is 0)."""
    g, b = fr.rates()
    g = min(max(g, 1e-6), 1 - 1e-6)
    b = min(max(b, g), 1 - 1e-6)
    f = np.asarray(failures, dtype=float)
    p = np.asarray(trials, dtype=float) - f

    def cum(r: float) -> Any:
        return np.concatenate(([0.0], np.cumsum(f * math.log(r) + p * math.log1p(-r))))

    cg, cb = cum(g), cum(b)
    n = len(f)
    k = np.arange(n + 1)
    log = cg[k] + cb[n] - cb[k]
    weight = np.ones(n + 1)
    weight[0] = prior.end_weight
    weight[n] = (prior.no_rise / (1.0 - prior.no_rise) * weight[:n].sum() if prior.no_rise > 0
                 else prior.end_weight)
    with np.errstate(divide="ignore"):
        log += np.log(weight)  # a weight 0: that end is not a hypothesis
    w = np.exp(log - log.max())
    return w / w.sum()


def favoured(fr: FirstRise) -> Any:
    """P(first bad = k), k = 0 .. n, within the structure the posterior favours."""
    if fr.second_rise() < 0.5:
        v = np.append(fr.joint[:, -1], fr.none)
    else:
        v = np.append(fr.joint[:, :-1].sum(axis=1), 0.0)
    return v / v.sum()


Hit = tuple[int, float]  # (the stack named or SAME, printed) when a rule stops
Rule = Callable[[View], Hit | None]


def ends(p: Any) -> float:
    """P(the good end is bad) + P(no stack is bad): what a same-rate stop reads."""
    return float(p[0] + p[-1])


def at(p: Any, level: float, tried: bool) -> Hit | None:
    """bisect's stops on posterior p: its top reaching level, else (after a trial) its two
    ends together."""
    k = int(np.argmax(p))
    if p[k] >= level:
        return (k, float(p[k]))
    return (SAME, ends(p)) if tried and ends(p) >= level else None


def both(v: View) -> Hit | None:
    k = int(np.argmax(v.post))
    if v.post[k] >= CONFIDENCE and v.plug[k] >= CONFIDENCE:
        return (k, float(v.plug[k]))
    if v.tried and ends(v.post) >= CONFIDENCE and ends(v.plug) >= CONFIDENCE:
        return (SAME, ends(v.plug))
    return None


def printed_fav(v: View) -> Hit | None:
    hit = at(v.post, CONFIDENCE, v.tried)
    if hit is None:
        return None
    return (hit[0], ends(v.fav) if hit[0] == SAME else float(v.fav[hit[0]]))


RULES: dict[str, Rule] = {
    f"stop at {100 * CONFIDENCE:g}%": lambda v: at(v.post, CONFIDENCE, v.tried),
    f"stop at {100 * LATER:g}%": lambda v: at(v.post, LATER, v.tried),
    "plug-in printed": both,
    "plug-in": lambda v: at(v.plug, CONFIDENCE, v.tried),
    "one rise printed": printed_fav,
    "one rise": lambda v: at(v.fav, CONFIDENCE, v.tried),
}


def stop_of(k: int, n: int) -> Stop:
    """The stop bisect reports when it names k (BUDGET, SAME or 0 .. n) over n stacks."""
    return (Stop.BUDGET if k == BUDGET else Stop.SAME_RATE if k == SAME
            else Stop.GOOD_END_BAD if k == 0 else Stop.BAD_END_GOOD if k == n
            else Stop.CONFIDENT)


def answer(setting: Setting, n: int, first: int, k: int,
           printed: float) -> tuple[float, bool] | None:
    """(printed, right) when a rule's stop counts as an answer, as bisect_simulation.one_run
    counts the real bisect's: a stack inside the list always; from the prior the ends and the
    same-rate stop too (right when the good end is bad or no stack is)."""
    stop = stop_of(k, n)
    if stop is Stop.BUDGET or (stop is not Stop.CONFIDENT and setting != FROM_PRIOR):
        return None
    return (printed, first in (0, n) if stop is Stop.SAME_RATE else k == first)


def trajectory(job: tuple[Setting, int, int, int, Prior]) -> dict[str, tuple[int, int, float]]:
    """One run: per rule (trials at its stop, the stack named, SAME or BUDGET, printed)."""
    setting, n, seed, run, prior = job
    rng = random.Random(f"{seed}/{n}/{setting}/{run}")  # bisect_simulation.one_run's
    names = [f"s{i:03d}" for i in range(n)]
    rates, _ = truth(setting, n, rng, prior)
    runner = SimStacks(dict(zip(names, rates, strict=True)), rng)
    ev = Evidence(names)
    out: dict[str, tuple[int, int, float]] = {}
    while True:
        fr = first_rise(ev.failures, ev.trials, prior)
        v = View(fr.posterior, plug_in(fr, ev.failures, ev.trials, prior), favoured(fr),
                 ev.total > 0)
        for name, rule in RULES.items():
            if name not in out and (hit := rule(v)) is not None:
                out[name] = (ev.total, hit[0], hit[1])
        if len(out) == len(RULES) or ev.total >= MAX_TRIALS:
            break
        stack = names[next_stack(fr)]
        index = ev.next_index(stack, 0)
        ev.add(runner.run(stack, index, index))
    for name in RULES:
        out.setdefault(name, (ev.total, BUDGET, -1.0))
    return out


def first_of(setting: Setting, n: int, seed: int, run: int, prior: Prior) -> int:
    return truth(setting, n, random.Random(f"{seed}/{n}/{setting}/{run}"), prior)[1]


@dataclass
class Tally:
    runs: int = 0
    trials: list[int] = field(default_factory=list)
    answers: list[tuple[float, bool]] = field(default_factory=list)


def check(setting: Setting, n: int, seed: int, prior: Prior, runs: int) -> int:
    """How many of the first runs the rule at bisect's default confidence reproduces the
    real bisect on."""
    rule = f"stop at {100 * DEFAULT:g}%"
    if rule not in RULES:
        raise SystemExit(f"no rule at bisect's default confidence ({rule}): add one to RULES")
    same = 0
    for r in range(runs):
        trials, stop, printed, right, _ = one_run((setting, n, seed, r, prior))
        mine, k, shown = trajectory((setting, n, seed, r, prior))[rule]
        got = answer(setting, n, first_of(setting, n, seed, r, prior), k, shown)
        same += (trials == mine and stop == stop_of(k, n).value
                 and (printed < 0) == (got is None)
                 and (got is None or (abs(printed - got[0]) < 1e-12 and right == got[1])))
    return same


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--candidates", default="20")
    ap.add_argument("--seed", type=int, default=27, help="27: bisect_simulation.txt's draws")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    header()
    print("only counts are measured here (no timings but the wall time at the end)")
    print(f"prior: {PRIOR.describe()}; budget {MAX_TRIALS} trials; the same trials for every "
          f"rule within a run")
    import multiprocessing

    t0 = time.monotonic()
    pool = multiprocessing.Pool(args.jobs) if args.jobs > 1 else None
    summary: list[str] = []
    try:
        for n in (int(x) for x in args.candidates.split(",")):
            tallies = {name: {s: Tally() for s in SETTINGS} for name in RULES}
            agree = 0
            for s in SETTINGS:
                jobs = [(s, n, args.seed, r, PRIOR) for r in range(args.runs)]
                results = pool.imap(trajectory, jobs, chunksize=8) if pool else map(
                    trajectory, jobs)
                for r, res in enumerate(results):
                    first = first_of(s, n, args.seed, r, PRIOR)
                    for name, (trials, k, printed) in res.items():
                        t = tallies[name][s]
                        t.runs += 1
                        t.trials.append(trials)
                        if (got := answer(s, n, first, k, printed)) is not None:
                            t.answers.append(got)
                agree += check(s, n, args.seed, PRIOR, min(CHECKED, args.runs))
            print(f"\n# {n} stacks, {args.runs} runs a setting; the rule at bisect's "
                  f"default ({100 * DEFAULT:g}%) reproduces the real bisect (trials, stop, "
                  f"answer, printed) in {agree} of {len(SETTINGS) * min(CHECKED, args.runs)} "
                  f"runs checked")
            for name in RULES:
                summary.append(report(name, n, tallies[name]))
    finally:
        if pool is not None:
            pool.close()
    print("\n# summary: goals missed per rule (of issue 27's, as bisect_simulation counts them)")
    print(f"{'stacks':>6} {'rule':<20} {'missed':>6} {'trials 2->50%':>13} "
          f"{'worst right/ans':>15} {'max inconcl.':>12} {'worst bin gap':>13}")
    for line in summary:
        print(line)
    print(f"\n{time.monotonic() - t0:.0f} s wall, {args.jobs} process(es)")


def report(name: str, n: int, tallies: dict[Setting, Tally]) -> str:
    """Prints one rule's table; returns its summary line."""
    missed: list[str] = []
    print(f"\n## rule: {name} ({n} stacks)")
    print(f"{'rates':<20} {'answered':>8} {'right/answers':>13} {'mean trials':>11}  "
          f"calibration: bin answers printed right [95%] gap")
    worst_acc, worst_inc, worst_gap, mean_2_50 = 1.0, 0.0, 0.0, 0.0
    for s, t in tallies.items():
        a = len(t.answers)
        right = sum(r for _, r in t.answers)
        acc = right / a if a else 0.0
        mean = sum(t.trials) / len(t.trials)
        cells = []
        for lo, hi in ALL_BINS:
            got = [(c, r) for c, r in t.answers if in_bin(c, lo, hi)]
            if not got:
                continue
            k = sum(r for _, r in got)
            printed = sum(c for c, _ in got) / len(got)
            w_lo, w_hi = wilson(k, len(got))
            gap = k / len(got) - printed
            cells.append(f"{lo:.0%}-{hi:.0%} {len(got)} {printed:.1%} {k / len(got):.1%} "
                         f"[{w_lo:.1%}, {w_hi:.1%}] {100 * gap:+.1f}")
            if abs(gap) > abs(worst_gap):
                worst_gap = gap
            if abs(gap) > TOLERANCE:
                missed.append(f"{label(s)} bin {lo:.0%}-{hi:.0%} {100 * gap:+.1f} points")
        print(f"{label(s):<20} {a / t.runs:>8.1%} {acc:>13.1%} {mean:>11.1f}  "
              + "; ".join(cells))
        if s != FROM_PRIOR and a:
            worst_acc = min(worst_acc, acc)
            if acc < 0.95:
                missed.append(f"{label(s)} {acc:.1%} right")
        if SETTINGS.index(s) < ORIGINAL:
            worst_inc = max(worst_inc, 1 - a / t.runs)
            if 1 - a / t.runs > 0.05:
                missed.append(f"{label(s)} {1 - a / t.runs:.1%} inconclusive")
        if s == (0.02, 0.5):
            mean_2_50 = mean
            if n in TRIAL_GOALS and mean > TRIAL_GOALS[n]:
                missed.append(f"{label(s)} {mean:.1f} trials")
    print(f"goals missed: {len(missed)}" + "".join(f"\n  - {m}" for m in missed))
    return (f"{n:>6} {name:<20} {len(missed):>6} {mean_2_50:>13.1f} {worst_acc:>15.1%} "
            f"{worst_inc:>12.1%} {100 * worst_gap:>+12.1f}pt")


if __name__ == "__main__":
    main()
