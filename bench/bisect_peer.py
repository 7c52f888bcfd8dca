"""bisect beside its peer: our bisect and git-bayesect's own `Bisector`, same truths, same trials.

git-bayesect 1.2 (PyPI `git-bayesect`, a dev dependency only): one change point, the old and
new failure rates unknown with Jeffreys Beta(0.5, 0.5) priors, a uniform prior over where the
change is, the next trial where the expected entropy drops most, a stop when the top of its
posterior reaches the asked confidence. Ours: stress.verdicts.bisect.bisect, the shipped code
(its model: analysis.changepoint). Both stop at the same confidence (bisect's default, 97.5%)
or when the same budget of trials (bisect's MAX_TRIALS, 300) is spent.

Same trials: per run, each stack's outcomes are drawn once, before either method runs (an
outcome table, MAX_TRIALS outcomes per stack); each method reads a stack's outcomes in order
from the first, so where both tried a stack j times they saw the same j outcomes. After each
run the per-stack counts each method reports itself (our BisectResult's rows, the Bisector's
observation counts) are checked against the table; the output says how many runs passed.

Settings (rates of a trial's failure, good -> bad; the first rise uniform over the stacks
1 .. N-1, a second rise uniform after it):
- on our prior: 0% -> 50%, 2% -> 50%, 5% -> 40%, 2% -> 15%, 2% -> 15% -> 50% (two rises);
- off it: good 20% -> 60%, a rise of 5 points (2% -> 7%), a falling rate (40% -> 5%: no stack
  is the first bad one, since the rate never rises), each good stack's rate drawn from 0-8%
  (-> 50%), and no change at all (5% everywhere).
An answer is a stack named with the asked confidence (ours: Stop.CONFIDENT; the ends judged
wrong or the budget spent are inconclusive, exit 3). It is right when it names the first rise;
where the rate never rises (falling, flat) every named stack is wrong for bisect's question,
and the "names the change" column says how often a method named where the falling rate falls.

    python bench/bisect_peer.py [--runs 1000] [--candidates 20,64] [--seed 40] [--jobs 2]
                                [--settings 0,3] [--prior second_rise=0.3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from _common import header  # noqa: E402
from bisect_simulation import BINS, TOLERANCE, in_bin, parse_prior  # noqa: E402

from stress.analysis.changepoint import PRIOR, Prior  # noqa: E402
from stress.analysis.stats import wilson  # noqa: E402
from stress.verdicts.bisect import CONFIDENCE, MAX_TRIALS, Stop, bisect  # noqa: E402
from stress.verdicts.trials import Trial  # noqa: E402

MIN_BIN: int = 30  # a bin of printed confidence is judged from this many answers on (issue
#   40); printed within TOLERANCE (3 points) of the share right, bisect_simulation's bins
CLEAR_RATIO: float = 0.85  # clear faults: our mean trials at most this times the peer's
EVERY_RATIO: float = 1.05  # every setting: at most this, or more answered at equal accuracy
HONEST: float = 0.97  # no rise / a falling rate: no confident stack in this share of runs
METHODS: tuple[str, ...] = ("ours", "bayesect")


@dataclass(frozen=True)
class Setting:
    label: str
    rates: tuple[float, ...]  # good, bad[, after the second rise]; a falling one too
    noisy_good: float = 0.0  # > 0: each good stack's rate drawn uniform from 0 .. this
    clear: bool = False  # a clear fault: the trial-ratio goal of 0.85 applies
    rises: bool = True  # False: the rate falls or stays: no stack is the first bad one

    def truth(self, n: int, rng: random.Random) -> tuple[list[float], int]:
        """Each stack's rate, and where the rate first changes (a rise, or the fall)."""
        if len(set(self.rates)) == 1:  # flat: no change anywhere
            return [self.rates[0]] * n, -1
        first = rng.randrange(1, n - (len(self.rates) - 2))
        changes = [first]
        if len(self.rates) == 3:
            changes.append(rng.randrange(first + 1, n))
        rates = [self.rates[sum(i >= c for c in changes)] for i in range(n)]
        if self.noisy_good:
            rates = [rng.uniform(0.0, self.noisy_good) if i < first else r
                     for i, r in enumerate(rates)]
        return rates, first


SETTINGS: tuple[Setting, ...] = (
    Setting("0% -> 50%", (0.0, 0.5), clear=True),
    Setting("2% -> 50%", (0.02, 0.5), clear=True),
    Setting("5% -> 40%", (0.05, 0.4)),
    Setting("2% -> 15%", (0.02, 0.15)),
    Setting("2% -> 15% -> 50%", (0.02, 0.15, 0.5)),
    Setting("20% -> 60%", (0.2, 0.6)),
    Setting("2% -> 7%", (0.02, 0.07)),
    Setting("40% -> 5% (falls)", (0.4, 0.05), rises=False),
    Setting("0-8% -> 50%", (0.04, 0.5), noisy_good=0.08),
    Setting("5% flat", (0.05, 0.05), rises=False),
)


def draw_table(rates: list[float], rng: random.Random, depth: int = MAX_TRIALS) -> list[list[bool]]:
    """Every trial either method may run: per stack, its outcomes in the order they are read."""
    return [[rng.random() < r for _ in range(depth)] for r in rates]


class Feed:
    """One method's reader of the run's outcome table: the j-th trial it runs on a stack is
    that stack's j-th outcome."""

    def __init__(self, table: list[list[bool]]):
        self.table = table
        self.read = [0] * len(table)

    def take(self, stack: int) -> bool:
        j = self.read[stack]
        self.read[stack] += 1
        return self.table[stack][j]


class FeedRunner:
    """Our bisect's TrialRunner over a Feed."""

    def __init__(self, feed: Feed, names: list[str]):
        self.feed = feed
        self.at = {name: i for i, name in enumerate(names)}

    def run(self, stack: str, index: int, seed: int) -> Trial:
        i = self.at[stack]
        if index != self.feed.read[i]:  # bisect numbers a stack's trials 0, 1, ...: in order
            raise AssertionError(f"{stack}: trial {index} asked, {self.feed.read[i]} read")
        return Trial(stack, index, seed, self.feed.take(i))


@dataclass
class Outcome:
    """One method's bisection: its trials, the stack named with the asked confidence (-1:
    none), the posterior printed with it, and its own per-stack (failures, trials)."""

    trials: int
    named: int
    printed: float
    counts: list[tuple[int, int]]
    stop: str  # why it stopped (ours: verdicts.bisect.Stop's values)
    fall_said: bool = False  # ours: its reason says the rate falls along the list


def run_ours(table: list[list[bool]], confidence: float, budget: int,
             prior: Prior = PRIOR) -> Outcome:
    n = len(table)
    names = [f"s{i:03d}" for i in range(n)]
    res = bisect(FeedRunner(Feed(table), names), names, seed=0, confidence=confidence,
                 max_trials=budget, prior=prior)
    named = names.index(res.first_bad) if res.stop is Stop.CONFIDENT else -1
    return Outcome(res.trials, named, res.confidence if named >= 0 else -1.0,
                   [(r.failures, r.trials) for r in res.rows], res.stop.value,
                   "the rate falls along the list" in res.reason)


def run_bayesect(table: list[list[bool]], confidence: float, budget: int) -> Outcome:
    """git-bayesect's Bisector as its own `run` loop drives it (git_bayesect.cli_run): index 0
    is the newest (bad) end, an observation is True when the trial failed; it stops when the
    top of its distribution reaches the confidence. Its answer B is the oldest index that
    fails at the new rate: our stack n - 1 - B."""
    from git_bayesect import Bisector

    n = len(table)
    feed = Feed(table)
    b = Bisector(np.ones(n))
    while b.num_total_observations < budget and float(b.distribution.max()) < confidence:
        j = b.select()
        b.record(j, feed.take(n - 1 - j))
    top = float(b.distribution.max())
    named = n - 1 - int(np.argmax(b.distribution)) if top >= confidence else -1
    total = np.diff(b.obs_total, prepend=0)[::-1]  # record(j) adds to every index from j on
    fails = np.diff(b.obs_yes, prepend=0)[::-1]
    return Outcome(b.num_total_observations, named, top if named >= 0 else -1.0,
                   [(int(f), int(m)) for f, m in zip(fails, total, strict=True)],
                   Stop.CONFIDENT.value if named >= 0 else Stop.BUDGET.value)


def same_outcomes(table: list[list[bool]], outcomes: list[Outcome]) -> bool:
    """Every method's own per-stack counts are a prefix of the run's one table: where two
    methods both ran j trials of a stack, they saw the same j outcomes."""
    return all(f == sum(row[:m]) for o in outcomes
               for row, (f, m) in zip(table, o.counts, strict=True))


def one_run(job: tuple[Any, ...]) -> tuple[int, list[Outcome], bool]:
    """One truth, one table, both methods: (where the rate first changes, their outcomes,
    whether both read the same table). Seeded per run: the output does not depend on how
    runs are spread over processes."""
    index, n, seed, run, confidence, budget = job[:6]
    prior = job[6] if len(job) > 6 else PRIOR  # --prior: ours under another prior
    setting = SETTINGS[index]
    rng = random.Random(f"{seed}/{n}/{setting.label}/{run}")
    rates, change = setting.truth(n, rng)
    table = draw_table(rates, rng, budget)
    outcomes = [run_ours(table, confidence, budget, prior),
                run_bayesect(table, confidence, budget)]
    return change, outcomes, same_outcomes(table, outcomes)


@dataclass
class Tally:
    runs: int = 0
    trials: list[int] = field(default_factory=list)
    answers: list[tuple[float, bool]] = field(default_factory=list)  # (printed, right)
    change: int = 0  # answers naming where a rate that never rises changes (falls)
    stops: dict[str, int] = field(default_factory=dict)
    fall_said: int = 0  # runs whose reason says the rate falls along the list

    @property
    def right(self) -> int:
        return sum(r for _, r in self.answers)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.trials)


def simulate(index: int, n: int, runs: int, seed: int, pool: Any, confidence: float,
             budget: int, prior: Prior = PRIOR) -> tuple[dict[str, Tally], int]:
    """Per method its tally; and the runs whose two methods read the same outcomes."""
    setting = SETTINGS[index]
    jobs = [(index, n, seed, r, confidence, budget, prior) for r in range(runs)]
    tallies = {m: Tally() for m in METHODS}
    same = 0
    results = pool.imap(one_run, jobs, chunksize=4) if pool else map(one_run, jobs)
    for change, outcomes, ok in results:
        same += ok
        for m, o in zip(METHODS, outcomes, strict=True):
            t = tallies[m]
            t.runs += 1
            t.trials.append(o.trials)
            t.stops[o.stop] = t.stops.get(o.stop, 0) + 1
            t.fall_said += o.fall_said
            if o.named >= 0:
                t.answers.append((o.printed, setting.rises and o.named == change))
                t.change += not setting.rises and o.named == change
    return tallies, same


def goals(s: Setting, ours: Tally, peer: Tally) -> list[str]:
    """Issue 40's lines this setting misses (ours against the peer)."""
    missed = []
    ratio = ours.mean / peer.mean
    acc_o = ours.right / max(1, len(ours.answers))
    acc_p = peer.right / max(1, len(peer.answers))
    if s.clear and (ratio > CLEAR_RATIO or acc_o < acc_p):
        missed.append(f"clear fault: trials {ratio:.2f}x the peer's (goal <= {CLEAR_RATIO}), "
                      f"right {acc_o:.1%} against {acc_p:.1%}")
    if s.rises and ratio > EVERY_RATIO and not (len(ours.answers) > len(peer.answers)
                                                and acc_o >= acc_p):
        missed.append(f"trials {ratio:.2f}x the peer's (goal <= {EVERY_RATIO}) and not more "
                      f"answered at equal accuracy ({len(ours.answers)} answers right "
                      f"{acc_o:.1%}, the peer {len(peer.answers)} right {acc_p:.1%})")
    wrong = len(ours.answers) - ours.right
    if (not s.rises or s.rates == (0.02, 0.07)) and wrong > (1 - HONEST) * ours.runs:
        missed.append(f"a confident wrong stack in {wrong / ours.runs:.1%} of the runs (goal "
                      f"<= {1 - HONEST:.0%})")
    for lo, hi in BINS:
        got = [(c, r) for c, r in ours.answers if in_bin(c, lo, hi)]
        if len(got) >= MIN_BIN:
            gap = sum(r for _, r in got) / len(got) - statistics.fmean(c for c, _ in got)
            if abs(gap) > TOLERANCE:
                missed.append(f"bin {lo:.0%}-{hi:.0%}: right - printed {100 * gap:+.1f} points "
                              f"over {len(got)} answers (goal within {100 * TOLERANCE:g})")
    return missed


def table_head(n: int, runs: int) -> None:
    print(f"\n## {n} stacks, {runs} runs a setting (both: stop at {100 * CONFIDENCE:g}%, at "
          f"most {MAX_TRIALS} trials)")
    print(f"{'setting':<18} {'method':<9} {'mean trials':>11} {'median':>6} {'x peer':>6} "
          f"{'answered':>8} {'right/answered':>14} {'wrong/runs':>10} {'mean printed':>12} "
          f"{'names the change':>16}", flush=True)


def table_rows(s: Setting, tallies: dict[str, Tally]) -> None:
    """A setting's rows, printed as soon as it is done (a run cut short keeps them)."""
    peer = tallies["bayesect"]
    for m in METHODS:
        t = tallies[m]
        a = len(t.answers)
        printed = statistics.fmean(c for c, _ in t.answers) if a else 0.0
        right = f"{t.right / a:.1%}" if a and s.rises else "-"
        change = "-" if s.rises else f"{t.change / t.runs:.1%}"
        print(f"{s.label:<18} {m:<9} {t.mean:>11.1f} {statistics.median(t.trials):>6g} "
              f"{t.mean / peer.mean:>6.2f} {a / t.runs:>8.1%} {right:>14} "
              f"{(a - t.right) / t.runs:>10.1%} {printed:>12.1%} {change:>16}", flush=True)


def report(n: int, runs: int, rows: list[tuple[Setting, dict[str, Tally], int]]) -> list[str]:
    """After a list length's table: the bins, the stops, the outcome check; the goals missed."""
    missed = [f"{n} stacks, {s.label}: {line}" for s, t, _ in rows
              for line in goals(s, t["ours"], t["bayesect"])]
    print(f"\nprinted against right ({n} stacks): answers binned by the posterior printed with "
          f"them (bins of {MIN_BIN} answers or more are judged)")
    print(f"{'setting':<18} {'method':<9} {'bin':<9} {'answers':>7} {'printed':>8} {'right':>7} "
          f"{'95% interval':>16} {'right - printed':>15}")
    for s, tallies, _ in rows:
        if not s.rises:
            continue
        for m in METHODS:
            for lo, hi in BINS:
                got = [(c, r) for c, r in tallies[m].answers if in_bin(c, lo, hi)]
                if not got:
                    continue
                k = sum(r for _, r in got)
                printed = statistics.fmean(c for c, _ in got)
                w_lo, w_hi = wilson(k, len(got))
                print(f"{s.label:<18} {m:<9} {lo:.0%}-{hi:.0%}  {len(got):>7} {printed:>8.1%} "
                      f"{k / len(got):>7.1%} {f'[{w_lo:.1%}, {w_hi:.1%}]':>16} "
                      f"{100 * (k / len(got) - printed):>+14.1f}pt")
    print(f"\nstops ({n} stacks, ours; the peer stops confident or at the budget): " + "; ".join(
        f"{s.label}: " + ", ".join(f"{k} {v}" for k, v in sorted(t["ours"].stops.items()))
        + (f" (the reason says the rate falls in {t['ours'].fall_said})"
           if t["ours"].fall_said else "") for s, t, _ in rows))
    checked = sum(same for _, _, same in rows)
    print(f"\nsame outcomes ({n} stacks): {checked} of {runs * len(rows)} runs, both methods' "
          f"per-stack counts are prefixes of the run's one outcome table")
    if checked != runs * len(rows):
        missed.append(f"{n} stacks: the two methods did not read the same outcomes in "
                      f"{runs * len(rows) - checked} runs")
    return missed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--candidates", default="20,64", help="stack counts, comma-separated")
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2, help="processes (runs are seeded one by "
                    "one: the output does not depend on it)")
    ap.add_argument("--settings", default="", help="indices into SETTINGS, comma-separated "
                    "(default: all)")
    ap.add_argument("--prior", action="append", default=[], metavar="FIELD=VALUE",
                    help="ours under another prior: a field of analysis.changepoint.Prior "
                    "(tuples comma-separated), e.g. --prior second_rise=0.3")
    args = ap.parse_args()
    prior = parse_prior(args.prior)
    try:
        import git_bayesect
    except ImportError:
        raise SystemExit("bisect_peer: needs git-bayesect (pip install -e '.[dev]')") from None
    header()
    from importlib.metadata import version

    print(f"git-bayesect {version('git-bayesect')} ({Path(git_bayesect.__file__).name}): "
          f"Bisector(uniform prior weights, Beta(0.5, 0.5) old and new); only counts are "
          f"measured here (the machine may be shared)")
    print(f"ours: stress.verdicts.bisect.bisect, prior {prior.describe()}"
          + (f" (--prior {' '.join(args.prior)}; the shipped default otherwise)"
             if args.prior else " (the shipped default)"))
    chosen = ([int(i) for i in args.settings.split(",")] if args.settings
              else list(range(len(SETTINGS))))
    import multiprocessing

    t0 = time.monotonic()
    missed: list[str] = []
    pool = multiprocessing.Pool(args.jobs) if args.jobs > 1 else None
    try:
        for n in (int(x) for x in args.candidates.split(",")):
            rows = []
            table_head(n, args.runs)
            for i in chosen:
                rows.append((SETTINGS[i], *simulate(i, n, args.runs, args.seed, pool,
                                                     CONFIDENCE, MAX_TRIALS, prior)))
                table_rows(*rows[-1][:2])
                print(f"  {n} stacks, {SETTINGS[i].label}: done at "
                      f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
            missed += report(n, args.runs, rows)
    finally:
        if pool is not None:
            pool.close()
    print("\nanswered: runs that named a stack at the asked confidence (the rest: budget "
          "spent, or for ours an end judged wrong: inconclusive); right/answered: answers "
          "naming the first rise; wrong/runs: a confident wrong stack; names the change: where "
          "the rate never rises, answers naming the stack where it changes; x peer: mean "
          "trials over the peer's")
    print(f"\ngoals of issue 40 missed: {len(missed)}" + "".join(f"\n  - {m}" for m in missed))
    print(f"\n{time.monotonic() - t0:.0f} s wall, {args.jobs} process(es)")


if __name__ == "__main__":
    main()
