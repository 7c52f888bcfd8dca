"""`iree-stress bisect`: which stack in an ordered list (TheRock nightlies, IREE rcs) is the
first bad one, when "bad" shows only as a higher failure rate?

Bayesian noisy bisection (analysis.changepoint.first_rise): a posterior over "the rate first
rises at stack k" for every stack of the list, with two more hypotheses: the good end is bad
already, and no stack is bad (the bad end fails like the good one). The failure rates are
unknown (Beta priors, in order: each rise adds at least the least rise, 10 points unless
--least-rise says otherwise) and integrated out, with
room for a second rise later (the first is the answer). Every trial on every stack counts,
the ends too, as evidence, never as gates. The next trial goes to the stack where the expected
drop of the posterior's entropy is largest (bisectread.expected_entropy); the bisection stops
when the top stack's posterior reaches the asked confidence (default 97.5%), when the two end
hypotheses together reach it (no rise inside the list: inconclusive), or when the trial
budget is spent (then it reports the posterior's top stacks, inconclusive). The confidence
printed is that posterior; bench/bisect_simulation.py measures whether it is right as often
as it says.

A trial is a whole soak (trial i of a stack with seed `seed + i`). Trials are cached on disk
by stack and plan (trials.TrialCache); before the first new trial, every trial already on
disk for a stack of the list counts: this bisection's own (an interrupted run resumes), and
those of other folders next to it under the same plan with another seed (a compare of the two
ends, an earlier bisect over an overlapping list). A trial is identified by its stack and seed:
one seen in two folders counts once, and no new trial repeats a seed already seen.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stress.analysis import header
from stress.analysis.bisectread import expected_entropy, fall
from stress.analysis.changepoint import PRIOR, FirstRise, Prior, first_rise
from stress.analysis.stats import fmt_level, fmt_rate
from stress.verdicts.trials import Trial, TrialRunner

LEAST_RISE: tuple[float, float] = (0.05, 0.4)  # --least-rise's range: a rise under 5 points is
#   out of reach of a few hundred trials (changepoint.RISE); over ~0.45 two rises in a row no
#   longer fit between the good rate and 1 (the second-rise hypotheses have no room)
CONFIDENCE: float = 0.975  # stop when the top stack's posterior reaches it (--confidence).
#   Not 95%: stopped there, a clear fault's answer (right 99.4-100% of the time) prints 95.5%,
#   and a faint one over 64 stacks is right 93.2%; at 97.5% every simulated setting prints
#   within 3 points of its share right and is right >= 96.4%, for 7-21% more trials (13-16%
#   at 2% -> 50%) and more runs inconclusive where the fault is faint (2% -> 15% over 64
#   stacks: 41.8% against 34.1%). bench/results/bisect_frontier.txt, -64.txt, docs/bisect-model.md
#   (all measured with the prior before issue 40; with later ones: bench/results/bisect_peer.txt)
MAX_TRIALS: int = 300  # the whole bisection's trials, those on disk included: 300 one-minute
#   soaks are a long night; at 5% vs 40% over 20 stacks 1 bisection in 10 needs more than 183
#   and 2.8% spend all 300 (bench/results/bisect_simulation.txt: 90th percentiles, stops)
TOP_SHOWN: int = 5  # stacks listed when the budget ends: the posterior's largest
TOP_MASS: float = 0.99  # ... or fewer, once they hold this much of it
FALL_SAID: float = 0.99  # an inconclusive reason says the rate falls along the list when the
#   counts favour a fall over rises at these odds (99:1; on no evidence the chance is 0.3-0.5,
#   weighed by the inner stacks' prior mass, not even): a fall is no answer to "which stack
#   broke it" (the model has rises only), but it tells the user what to check (the list's order)


class Outcome(enum.Enum):
    FOUND = "found"
    INCONCLUSIVE = "inconclusive"

    @property
    def exit_code(self) -> int:
        return 0 if self is Outcome.FOUND else 3


class Stop(enum.Enum):
    """Why the bisection stopped."""

    CONFIDENT = "confident"  # the top stack reached the asked confidence
    GOOD_END_BAD = "good end bad"  # ... and it is the good end: no change inside the list
    BAD_END_GOOD = "bad end good"  # "no stack is bad" reached it: the bad end fails like the rest
    SAME_RATE = "same rate"  # the two together reached it: no rise inside the list, neither
    #   end telling which claim is wrong (a list failing 50% throughout: is 50% good or bad?;
    #   or a rate that falls: the model has no fall, so its posterior lands here too)
    BUDGET = "budget"  # the trial budget is spent first
    HARNESS = "harness"  # a stack's workers could not start: its trials are not results

    @property
    def outcome(self) -> Outcome:
        return Outcome.FOUND if self is Stop.CONFIDENT else Outcome.INCONCLUSIVE


@dataclass
class Row:
    name: str
    trials: int = 0
    failures: int = 0
    p_first_bad: float = 0.0  # P(first bad = this stack)
    p_bad: float = 0.0  # P(this stack is bad) = P(first bad <= this stack)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"stack": self.name, "trials": self.trials, "failures": self.failures,
                "p_first_bad": round(self.p_first_bad, 4), "p_bad": round(self.p_bad, 4),
                "note": self.note}


NO_STACK: str = "(no stack is bad)"  # the posterior's entry past the list's last stack


@dataclass
class BisectResult:
    outcome: Outcome
    stop: Stop
    reason: str
    first_bad: str = ""
    last_good: str = ""
    confidence: float = 0.0  # the top stack's posterior: the number printed with the answer
    asked: float = CONFIDENCE
    rows: list[Row] = field(default_factory=list)
    top: list[tuple[str, float]] = field(default_factory=list)
    no_stack_bad: float = 0.0  # P(no stack of the list is bad)
    rate_good: float = 0.0  # posterior mean failure rate of a trial before the first bad
    rate_bad: float = 0.0  # ... and on the first bad stack
    second_rise: float = 0.0  # P(the rate rises again after the first bad stack)
    ran: int = 0  # trials run by this command (the rest were on disk)
    prior: Prior = PRIOR
    header: list[tuple[str, str]] = field(default_factory=list)  # what was tested (header.py)
    identical: list[str] = field(default_factory=list)  # "A = B: tested once" (identical.py)
    changed: list[str] = field(default_factory=list)  # last good -> first bad (changed.py)

    @property
    def trials(self) -> int:
        return sum(r.trials for r in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "stop": self.stop.value, "reason": self.reason,
                "first_bad": self.first_bad or None, "last_good": self.last_good or None,
                "confidence": round(self.confidence, 4), "asked_confidence": self.asked,
                "trials": self.trials, "ran": self.ran,
                "from_disk": self.trials - self.ran, "rate_good": round(self.rate_good, 4),
                "rate_bad": round(self.rate_bad, 4),
                "second_rise": round(self.second_rise, 4),
                "no_stack_bad": round(self.no_stack_bad, 4),
                "prior": self.prior.as_dict(),
                "top": [{"stack": s, "posterior": round(p, 4)} for s, p in self.top],
                "stacks": [r.as_dict() for r in self.rows],
                "identical": self.identical, "what_changed": self.changed,
                "header": header.as_dict(self.header)}


class Evidence:
    """Every trial seen per stack, one per seed (the same trial found in two folders counts
    once); harness failures are not evidence. Per-stack counts are kept as trials come."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self.by_stack: dict[str, dict[int, Trial]] = {n: {} for n in names}
        self._at = {n: i for i, n in enumerate(self.names)}
        self.failures = np.zeros(len(self.names), dtype=np.int64)
        self.trials = np.zeros(len(self.names), dtype=np.int64)

    def add(self, trial: Trial) -> bool:
        """False when that stack's trial of that seed is already counted."""
        seen = self.by_stack[trial.stack]
        if trial.harness or trial.seed in seen:
            return False
        seen[trial.seed] = trial
        i = self._at[trial.stack]
        self.trials[i] += 1
        self.failures[i] += bool(trial.failed)
        return True

    def counts(self) -> tuple[list[int], list[int]]:
        return [int(x) for x in self.failures], [int(x) for x in self.trials]

    @property
    def total(self) -> int:
        return int(self.trials.sum())

    def next_index(self, stack: str, seed: int) -> int:
        """The first trial index that neither names a trial seen (its run folder may be this
        one's) nor gives a seed (`seed + index`) this stack has run already."""
        seen = self.by_stack[stack]
        taken = {t.index for t in seen.values()}
        i = 0
        while seed + i in seen or i in taken:
            i += 1
        return i


def next_stack(fr: FirstRise) -> int:
    """The stack whose next trial is expected to shrink the posterior's entropy the most (the
    first such stack on a tie)."""
    return int(np.argmin(expected_entropy(fr)))


def bisect(runner: TrialRunner, names: Sequence[str], seed: int,
           confidence: float = CONFIDENCE, max_trials: int = MAX_TRIALS,
           on_progress: Callable[[str], None] | None = None,
           known: Iterable[Trial] = (), prior: Prior = PRIOR,
           check: Callable[[str], str] | None = None) -> BisectResult:
    """`names` ordered from the known-good to the known-bad stack (both ends included);
    `known`: trials already run (from disk), counted before any new one; `check(stack)`:
    why a stack cannot run a trial at all ('' when it can), asked of every stack before the
    first new trial (a stack the posterior would never try must not pass for a result)."""
    if len(names) < 2:
        raise ValueError("bisect needs at least two stacks")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    say = on_progress or (lambda _line: None)
    ev = Evidence(names)
    for t in known:
        if t.stack in ev.by_stack:
            ev.add(t)
    stop, harness = Stop.BUDGET, ("", "")
    last, ran = "", 0
    refused = next(((n, why) for n in names for why in [check(n) if check else ""] if why),
                   None)
    while True:
        fr = first_rise(ev.failures, ev.trials, prior)
        if refused:
            stop, harness = Stop.HARNESS, (refused[0], f"{refused[0]}: cannot start: "
                                                       f"{refused[1]}")
            break
        post = fr.posterior
        top = int(np.argmax(post))
        if last:
            say(f"{last}; top {_name(names, top)} {post[top]:.1%}, entropy "
                f"{fr.entropy():.2f} bits")
        if post[top] >= confidence:
            stop = (Stop.GOOD_END_BAD if top == 0 else Stop.BAD_END_GOOD if top == len(names)
                    else Stop.CONFIDENT)
            break
        if ev.total and post[0] + post[-1] >= confidence:  # the prior alone reaches 55% over
            #   two stacks (the good end bad 45%, no stack bad 10%): not a finding
            stop = Stop.SAME_RATE
            break
        if ev.total >= max_trials:
            break
        x = next_stack(fr)
        name = names[x]
        index = ev.next_index(name, seed)
        trial = runner.run(name, index, seed + index)
        if trial.harness:
            stop, harness = Stop.HARNESS, (name, f"{name} trial {index}: {trial.harness}")
            break
        ran += ev.add(trial)
        last = (f"trial {ev.total}: {name} {'FAILED' if trial.failed else 'ok'} "
                f"({ev.failures[x]}/{ev.trials[x]} of its trials failed)")
    result = _result(ev, fr, stop, confidence, max_trials, harness, prior)
    result.ran = ran
    return result


def _name(names: Sequence[str], k: int) -> str:
    return names[k] if k < len(names) else NO_STACK


def _result(ev: Evidence, fr: FirstRise, stop: Stop, asked: float, budget: int,
            harness: tuple[str, str], prior: Prior) -> BisectResult:
    names = ev.names
    failures, trials = ev.counts()
    post = fr.posterior
    p_bad = fr.p_bad()
    rows = [Row(n, trials[i], failures[i], float(post[i]), float(p_bad[i]))
            for i, n in enumerate(names)]
    top: list[tuple[str, float]] = []
    for i in np.argsort(-post, kind="stable")[:TOP_SHOWN]:
        top.append((_name(names, int(i)), float(post[i])))
        if sum(p for _, p in top) >= TOP_MASS:
            break
    g, b = fr.rates()
    k = fr.top
    r = BisectResult(stop.outcome, stop, "", confidence=float(post[k]), asked=asked,
                     rows=rows, top=top, no_stack_bad=fr.none, rate_good=g, rate_bad=b,
                     second_rise=fr.second_rise(), prior=prior)
    shown = ", ".join(f"{s} {p:.1%}" for s, p in top)
    rates = f"trials fail {fmt_rate(g)} before the first bad stack, {fmt_rate(b)} on it"
    if stop is Stop.CONFIDENT:
        r.first_bad, r.last_good = names[k], names[k - 1]
        r.reason = (f"first bad stack: {names[k]} (last good: {names[k - 1]}); posterior "
                    f"{r.confidence:.1%} (asked {fmt_level(asked)}) after {r.trials} trials; "
                    f"{rates}")
    elif stop is Stop.GOOD_END_BAD:
        r.reason = (f"the good end {names[0]} fails like the stacks after it (posterior "
                    f"{r.confidence:.1%} that the list's first stack is already bad) after "
                    f"{r.trials} trials: is --good really good?")
    elif stop is Stop.BAD_END_GOOD:
        r.reason = (f"the bad end {names[-1]} fails like the stacks before it (posterior "
                    f"{r.confidence:.1%} that no stack of the list is bad; trials fail "
                    f"{fmt_rate(g)}) after {r.trials} trials: is --bad really bad?")
    elif stop is Stop.SAME_RATE:
        r.confidence = float(post[0] + post[-1])
        r.reason = (f"no stack inside the list raises the rate: the good end {names[0]} is "
                    f"already bad, or no stack is (posterior {r.confidence:.1%} of the two "
                    f"together; trials fail {fmt_rate(fr.rate_none)} over the list) after "
                    f"{r.trials} trials: is --good really good, and --bad really bad?")
    elif stop is Stop.HARNESS:
        rows[names.index(harness[0])].note = "not a result: it could not run (see above)"
        r.reason = f"{harness[1]}; posterior so far: {shown}"
    else:
        r.reason = (f"the budget of {budget} trials is spent with no stack at {fmt_level(asked)}: "
                    f"most likely first bad {shown}; {rates}")
    if stop in (Stop.GOOD_END_BAD, Stop.BAD_END_GOOD, Stop.SAME_RATE, Stop.BUDGET):
        f = fall(failures, trials, fr, prior)
        if f.chance >= FALL_SAID:
            r.reason += (f"; the rate falls along the list ({f.chance:.1%}): trials fail "
                         f"{fmt_rate(f.before)} towards {names[0]}, {fmt_rate(f.after)} towards "
                         f"{names[-1]}: is the list ordered from good to bad?")
    return r


def render(r: BisectResult) -> str:
    head = [header.text(r.header), ""] if r.header else []  # what was tested, first
    lines = [*head, f"BISECT  {r.outcome.value}: {r.reason}",
             f"  posterior of the first bad stack from {r.trials} trials ({r.ran} run now, "
             f"{r.trials - r.ran} from disk); prior: {r.prior.describe()}",
             f"  P(the rate rises again later) = {r.second_rise:.0%}; P(no stack is bad) = "
             f"{r.no_stack_bad:.1%}",
             f"  {'stack':<32} {'failed':>9}  {'P(first bad)':>12}  {'P(bad)':>7}  note"]
    for row in r.rows:
        frac = f"{row.failures}/{row.trials}" if row.trials else "-"
        mark = " <- first bad" if row.name == r.first_bad else ""
        lines.append(f"  {row.name:<32} {frac:>9}  {row.p_first_bad:>12.1%}  "
                     f"{row.p_bad:>7.1%}  {row.note[:80]}{mark}")
    lines += [f"  identical: {x}" for x in r.identical]
    if r.changed:
        lines += ["", *r.changed]
    return "\n".join(lines)


# --- the real bisection: trials on disk --------------------------------------------------------

def stored_trials(caches: Iterable[Any], names: Sequence[str]) -> list[Trial]:
    """Every trial the caches hold for these stacks."""
    return [t for c in caches for n in names for t in c.stored(n)]


def related_caches(out: Path, family: str, plan: str,
                   stack_keys: dict[str, str]) -> list[Any]:
    """Trial caches of the same plan but another seed, in `out` and in the folders next to it
    (a compare's `results/compare-A-B-...` beside this `results/bisect-...`): those that
    recorded the plan family (trials.TrialCache writes it)."""
    from stress.verdicts.trials import PLAN_FILE, TRIALS_DIR, TrialCache

    found = []
    pattern = f"{TRIALS_DIR}/*/{PLAN_FILE}"
    for pf in sorted({*out.glob(pattern), *out.parent.glob(f"*/{pattern}")}):
        try:
            meta = json.loads(pf.read_text())
        except (OSError, ValueError):
            continue
        root = pf.parent.parent.parent
        if meta.get("family") == family and not (root == out and meta.get("plan") == plan):
            found.append(TrialCache(root, str(meta.get("plan")), stack_keys, family))
    return found


def run_bisect(base: Any, stacks_file: Path, good: str, bad: str, out_dir: Path | None,
               log: Callable[[str], None], confidence: float = CONFIDENCE,
               max_trials: int = MAX_TRIALS, least_rise: float | None = None,
               past: Sequence[Trial] = ()) -> BisectResult:
    """The stacks from `good` to `bad` in file order. Trials are cached in the output folder
    (default: results/bisect-PLAN, the same for the same command): rerunning the command
    after an interruption resumes; the trials do not depend on `least_rise` (the prior's
    least rise, the model's RISE by default), so a rerun with another one reuses them.
    `past`: runs already on disk as trials of the file's stacks (history.trials_for)."""
    from stress.errors import UsageError
    from stress.fs import atomic_write
    from stress.runtimes import spec
    from stress.verdicts.changed import what_changed
    from stress.verdicts.compare import (
        SoakTrials,
        base_plan_key,
        family_key,
        in_use,
        prepare,
        verdict_header,
    )
    from stress.verdicts.identical import apply as apply_identical
    from stress.verdicts.identical import as_group_trials
    from stress.verdicts.trials import Cached, TrialCache

    if not 0.0 < confidence < 1.0:
        raise UsageError(f"need 0 < --confidence < 1, got {confidence}")
    if least_rise is not None and not LEAST_RISE[0] <= least_rise <= LEAST_RISE[1]:
        raise UsageError(f"need {LEAST_RISE[0]} <= --least-rise <= {LEAST_RISE[1]}, got "
                         f"{least_rise}")
    prior = PRIOR if least_rise is None else dataclasses.replace(PRIOR, rise=least_rise)
    order = list(spec.load(stacks_file))
    for name in (good, bad):
        if name not in order:
            raise UsageError(f"no stack named {name!r} in {stacks_file}")
    i, j = order.index(good), order.index(bad)
    if i >= j:
        raise UsageError(f"--good {good} must come before --bad {bad} in {stacks_file}")
    names = order[i:j + 1]
    seed = base.seed if base.seed is not None else 0
    plan, family = base_plan_key(base, seed), family_key(base)
    out = out_dir or Path("results") / f"bisect-{plan}"
    built, keys = prepare(stacks_file, names, base, log)
    with in_use(built):
        prints, parts = same_stacks(built, names, log)
        if len(parts) < 2:
            return one_build(names, parts[0], confidence, prior)
        every, names = names, [g[0] for g in parts]
        own = TrialCache(out, plan, keys, family)
        soak = SoakTrials(base, built, out, log)
        cached = Cached(soak, own)
        known = as_group_trials(stored_trials([own], every), parts)
        log(f"bisect {len(names)} stacks {good} .. {bad}: seed {seed}, stop at "
            f"{fmt_level(confidence)}, at most {max_trials} trials, a stack bad from a rise of "
            f"{100 * prior.rise:g} points on; "
            f"trials in {out} (rerun the same command to resume); {len(known)} trial(s) of "
            f"this bisection already on disk")
        known += as_group_trials([t for t in past if t.stack in every], parts)
        seen = {(t.stack, t.seed) for t in known}
        for cache in related_caches(out, family, plan, keys):
            more = [t for t in as_group_trials(stored_trials([cache], every), parts)
                    if (t.stack, t.seed) not in seen]
            if more:
                log(f"  + {len(more)} trial(s) of the same plan from {cache.root} (seeds "
                    f"{min(t.seed for t in more)}..{max(t.seed for t in more)})")
                known += more
                seen |= {(t.stack, t.seed) for t in more}
        result = bisect(cached, names, seed, confidence, max_trials, log, known, prior,
                        getattr(soak, "check", None))  # (stand-in trials need not say)
        apply_identical(result, parts)
        if result.first_bad:
            g, b = result.last_good, result.first_bad
            result.changed = what_changed(g, built[g], prints[g], b, built[b], prints[b])
        trials = stored_trials([own], names) + known
        result.header = verdict_header(
            [(n, [t for t in trials if t.stack == n]) for n in names], base, seed,
            f"{seed} (trial i of a stack: {seed} + i; trials from other folders keep theirs)")
        atomic_write(out / "bisect.json", json.dumps(result.as_dict(), indent=1).encode())
    return result


def same_stacks(built: dict[str, Any], names: Sequence[str],
                log: Callable[[str], None]) -> tuple[dict[str, Any], list[list[str]]]:
    """Each stack's fingerprint, and the list in groups of consecutive identical stacks
    (identical.py): each group is bisected as one stack, and the log says so."""
    from stress.runtimes import fingerprint
    from stress.verdicts.identical import describe, groups, merged

    prints = {n: fingerprint.of(built[n]) for n in names}
    parts = groups(names, {n: p.digest if p.rocm_side else "" for n, p in prints.items()})
    for g in merged(parts):
        log(f"identical stacks (the same libraries and code objects, "
            f"{len(prints[g[0]].files)} files): {describe(g)}")
    return prints, parts


def one_build(names: Sequence[str], group: Sequence[str], asked: float,
              prior: Prior) -> BisectResult:
    """--good and --bad are the same build: no stack of the list can be the change."""
    from stress.verdicts.identical import describe

    return BisectResult(Outcome.INCONCLUSIVE, Stop.BAD_END_GOOD,
                        f"the good end {names[0]} and the bad end {names[-1]} are the same "
                        f"build (the same libraries and code objects): no stack between them "
                        f"can be the change; is the difference elsewhere (the machine, the "
                        f"command)?", asked=asked, rows=[Row(n) for n in names], prior=prior,
                        identical=[describe(group)])
