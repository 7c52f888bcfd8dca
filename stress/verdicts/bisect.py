"""`iree-stress bisect`: which stack in an ordered list (TheRock nightlies, IREE rcs) is the
first bad one, when "bad" shows only as a higher failure rate?

Noisy bisection. Each stack tested is judged by a Bernoulli SPRT (stats.BernoulliSprt) of
H0: failure rate <= p_good against H1: rate >= p_bad, on whole-soak trials (trial i of every
stack with seed `seed + i`), until it decides: good, bad, or undecided after
`max_trials` (then the answer is inconclusive, with the table). The ends are judged first (the
good end must look good and the bad end bad), then the midpoint of the interval, as in a
plain bisection. The reported confidence is a Bonferroni lower bound: 1 minus the sum of the
per-decision error bounds (alpha for each "bad", beta for each "good") along the path;
bench/bisect_simulation.py measures the real accuracy (much higher: Wald's bounds are loose).

Every trial goes through a TrialCache keyed by stack and plan, so a bisection interrupted
midway resumes where it stopped (the same seeds replay the same decisions from disk), and a
second bisection over an overlapping list reuses the stacks already judged.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.analysis.stats import BernoulliSprt, Decision, fmt_rate, independent_rate
from stress.verdicts.compare import TrialRunner

P_GOOD: float = 0.02  # a good stack fails at most 1 trial in 50 (fusilli's good pair: 0/20)
P_BAD: float = 0.3  # a bad one at least 30% (fusilli's bad pair: 12/20; the TheRock stall
#   40-60%); the closer the two, the more trials each decision takes
STEP_ERROR: float = 0.01  # alpha = beta per decision: ~8 decisions for 64 stacks, a >= 92%
#   Bonferroni bound (the simulation measures ~99%)
MAX_TRIALS: int = 60  # per stack: a stack still undecided here sits between the hypotheses


class Judgement(enum.Enum):
    GOOD = "good"
    BAD = "bad"
    UNDECIDED = "undecided"
    HARNESS = "not a result"  # its workers could not start
    UNTESTED = "-"


class Outcome(enum.Enum):
    FOUND = "found"
    INCONCLUSIVE = "inconclusive"

    @property
    def exit_code(self) -> int:
        return 0 if self is Outcome.FOUND else 3


@dataclass
class Row:
    name: str
    judgement: Judgement = Judgement.UNTESTED
    trials: int = 0
    failures: int = 0
    llr: float = 0.0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"stack": self.name, "judgement": self.judgement.value, "trials": self.trials,
                "failures": self.failures, "llr": round(self.llr, 3), "note": self.note}


@dataclass
class BisectResult:
    outcome: Outcome
    reason: str
    first_bad: str = ""
    last_good: str = ""
    confidence: float = 0.0
    rows: list[Row] = field(default_factory=list)
    decisions: int = 0

    @property
    def trials(self) -> int:
        return sum(r.trials for r in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "reason": self.reason,
                "first_bad": self.first_bad or None, "last_good": self.last_good or None,
                "confidence": round(self.confidence, 4), "trials": self.trials,
                "decisions": self.decisions, "stacks": [r.as_dict() for r in self.rows]}


def judge(runner: TrialRunner, row: Row, seed: int, p_good: float = P_GOOD,
          p_bad: float = P_BAD, error: float = STEP_ERROR, max_trials: int = MAX_TRIALS) -> Row:
    """Trials of one stack until its SPRT decides (or max_trials, or a harness failure)."""
    sprt = BernoulliSprt(p_good, p_bad, error, error)
    for i in range(max_trials):
        trial = runner.run(row.name, i, seed + i)
        if trial.harness:
            row.judgement, row.note = Judgement.HARNESS, trial.harness
            return row
        row.trials += 1
        row.failures += int(trial.failed)
        decision = sprt.update(int(trial.failed), 1)
        row.llr = sprt.llr
        if decision is not Decision.CONTINUE:
            row.judgement = Judgement.BAD if decision is Decision.ACCEPT_H1 else Judgement.GOOD
            return row
    row.judgement = Judgement.UNDECIDED
    rate = independent_rate(row.failures, row.trials, "trial")
    row.note = (f"undecided after {row.trials} trials: {rate.describe()} lies between "
                f"{fmt_rate(p_good)} and {fmt_rate(p_bad)}")
    return row


def bisect(runner: TrialRunner, names: Sequence[str], seed: int, p_good: float = P_GOOD,
           p_bad: float = P_BAD, error: float = STEP_ERROR, max_trials: int = MAX_TRIALS,
           on_progress: Callable[[str], None] | None = None) -> BisectResult:
    """`names` ordered from the known-good to the known-bad stack (both ends included)."""
    if len(names) < 2:
        raise ValueError("bisect needs at least two stacks")
    rows = [Row(n) for n in names]
    say = on_progress or (lambda _line: None)
    result = BisectResult(Outcome.INCONCLUSIVE, "", rows=rows)
    bound = 0.0

    def test(i: int) -> Judgement:
        nonlocal bound
        row = judge(runner, rows[i], seed, p_good, p_bad, error, max_trials)
        say(f"[{i + 1}/{len(rows)}] {row.name}: {row.judgement.value} "
            f"({row.failures}/{row.trials} trials failed, LLR {row.llr:.2f})")
        if row.judgement in (Judgement.GOOD, Judgement.BAD):
            result.decisions += 1
            bound += error
        return row.judgement

    ends = ((0, Judgement.GOOD, "the good end"), (len(rows) - 1, Judgement.BAD, "the bad end"))
    for i, want, what in ends:
        got = test(i)
        if got is not want:
            result.reason = (f"{what} {rows[i].name} is {got.value}, not {want.value}"
                             f"{': ' + rows[i].note if rows[i].note else ''}")
            return result
    lo, hi = 0, len(rows) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = test(mid)
        if got is Judgement.GOOD:
            lo = mid
        elif got is Judgement.BAD:
            hi = mid
        else:
            result.reason = (f"{rows[mid].name} is {got.value}: {rows[mid].note}; the first "
                             f"bad stack lies in {rows[lo + 1].name} .. {rows[hi].name}")
            return result
    result.outcome = Outcome.FOUND
    result.first_bad, result.last_good = rows[hi].name, rows[lo].name
    result.confidence = max(0.0, 1.0 - bound)
    result.reason = (f"first bad stack: {rows[hi].name} (last good: {rows[lo].name}); "
                     f"confidence >= {result.confidence:.0%} ({result.decisions} decisions at "
                     f"<= {error:.0%} error each), {result.trials} trials")
    return result


def render(r: BisectResult) -> str:
    head = f"BISECT  {r.outcome.value}: {r.reason}"
    lines = [head, f"  {'stack':<32} {'judged':<13} {'failed':>9}  {'LLR':>6}  note"]
    for row in r.rows:
        frac = f"{row.failures}/{row.trials}" if row.trials else "-"
        mark = " <- first bad" if row.name == r.first_bad else ""
        lines.append(f"  {row.name:<32} {row.judgement.value:<13} {frac:>9}  "
                     f"{row.llr:>6.2f}  {row.note[:80]}{mark}")
    return "\n".join(lines)


def run_bisect(base: Any, stacks_file: Path, good: str, bad: str, out_dir: Path | None,
               log: Callable[[str], None], p_good: float = P_GOOD, p_bad: float = P_BAD,
               max_trials: int = MAX_TRIALS) -> BisectResult:
    """The stacks from `good` to `bad` in file order. Trials are cached in the output folder
    (default: results/bisect-PLAN, the same for the same command): rerunning the command
    after an interruption resumes."""
    import json

    from stress.errors import UsageError
    from stress.programs.cache import atomic_write
    from stress.verdicts import stacks
    from stress.verdicts.compare import Cached, SoakTrials, TrialCache, base_plan_key, prepare

    if not 0.0 < p_good < p_bad < 1.0:
        raise UsageError(f"need 0 < --p-good < --p-bad < 1, got {p_good} and {p_bad}")
    order = list(stacks.load(stacks_file))
    for name in (good, bad):
        if name not in order:
            raise UsageError(f"no stack named {name!r} in {stacks_file}")
    i, j = order.index(good), order.index(bad)
    if i >= j:
        raise UsageError(f"--good {good} must come before --bad {bad} in {stacks_file}")
    names = order[i:j + 1]
    seed = base.seed if base.seed is not None else 0
    plan = base_plan_key(base, seed)
    out = out_dir or Path("results") / f"bisect-{plan}"
    built, keys = prepare(stacks_file, names, base, log)
    cached = Cached(SoakTrials(base, built, out, log), TrialCache(out, plan, keys))
    log(f"bisect {len(names)} stacks {good} .. {bad}: seed {seed}, H0 rate <= {p_good}, "
        f"H1 rate >= {p_bad}; trials in {out} (rerun the same command to resume)")
    result = bisect(cached, names, seed, p_good, p_bad, max_trials=max_trials,
                    on_progress=log)
    log(f"{cached.ran} trial(s) run, {cached.reused} reused from {out}")
    atomic_write(out / "bisect.json", json.dumps(
        {**result.as_dict(), "ran": cached.ran, "reused": cached.reused}, indent=1).encode())
    return result
