"""`iree-stress compare A B`: is stack B worse than stack A?

A trial is one whole soak under one stack. Trials run in pairs, A then B, pair i with seed
`seed + i` for both, so machine drift and the job mix hit both alike. A trial *failed* when its
soak recorded any failure (the unit is the trial: failures inside one soak share fate).

Decision, sequential: two PairedSprt (sequential) on the pairs, one for "B worse", one with the arms
swapped for "A worse"; only discordant pairs (one arm failed, the other not) carry information.
The first to accept its H1 decides; both accepting H0 is `no difference shown`. When neither
decides within the trial budget, Fisher's exact test on the per-trial counts decides at the end
(one fixed-size test after the sequential one; its p-value is shown, and beside it the
posterior P(B's rate > A's rate) under uniform priors, analysis.bayes.prob_greater: a number
that reads as a probability, not a decision). Per-signature comparison
beside the rates: a signature seen under B and never under A is news even at equal rates.

A trial that cannot vouch for itself (workers that could not start: the probe refused the
driver, a worker died of a Python exception before its hello, i.e. `harness_errors`; a stack
whose workers ran another runtime or HIP library than it names) stops the comparison at once:
`inconclusive`, with the reason. It is never counted as a failure of the stack.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from stress.analysis.bayes import prob_greater
from stress.analysis.sequential import Decision, PairedSprt
from stress.analysis.stats import (
    Alternative,
    Rate,
    benjamini_hochberg,
    compare_rates,
    fisher_exact,
    fmt_rate,
    independent_rate,
)
from stress.errors import UsageError
from stress.programs.cache import atomic_write
from stress.vocab import Engine, RunStatus

THETA1: float = 0.8  # H1 of the paired test: B fails alone in 80% of discordant pairs. 0.75
#   needs 8 discordant pairs to decide (~32 trials at a 50% flake), 0.8 needs 7, and still
#   accepts H0 on an even split; a 50%-flaky B against a clean A decides in ~28 trials
ALPHA: float = 0.05  # false "B worse" (and false "A worse"), Wald's bound under early stopping
BETA: float = 0.1  # a real difference of THETA1 missed
MAX_PAIRS: int = 20  # the fixed design it replaces: 20 + 20 trials
TRIALS_DIR: str = "trials"
PLAN_FILE: str = "plan.json"  # in each plan's folder of trials: its family (the plan without
#   the seed), so a bisect finds a compare's trials of the same plan (bisect.related_caches)
_ROUNDING: float = 1e-9  # wilson() at k = 0 returns float noise (6e-17) for a lower bound of 0


class Verdict(enum.Enum):
    B_WORSE = "B worse"
    A_WORSE = "A worse"
    NO_DIFFERENCE = "no difference shown"
    INCONCLUSIVE = "inconclusive"

    @property
    def exit_code(self) -> int:
        """1 for a regression (B worse), 3 inconclusive, else 0 (the CLI's exit codes)."""
        return {Verdict.B_WORSE: 1, Verdict.INCONCLUSIVE: 3}.get(self, 0)


@dataclass(frozen=True)
class Trial:
    """One soak under one stack, as compare and bisect need it (and cache it on disk)."""

    stack: str
    index: int
    seed: int
    failed: bool
    jobs: int = 0
    failures: int = 0
    signatures: tuple[tuple[str, str], ...] = ()  # (id, class|...|frame key text)
    harness: str = ""  # why this trial is not a result ('' when it is one)
    run_dir: str = ""
    runtime: str = ""
    runtime_path: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Trial:
        return Trial(**{**d, "signatures": tuple(tuple(s) for s in d.get("signatures", ()))})


class TrialRunner(Protocol):
    """Runs trial `index` (seed `seed`) of the plan under one stack: the real one runs a soak
    (SoakTrials); tests and simulations use fakes."""

    def run(self, stack: str, index: int, seed: int) -> Trial: ...


class TrialCache:
    """Trials on disk, one JSON file each, keyed by stack (its name and build key) and plan:
    bisect reuses every trial already run and resumes after an interruption by reading them.
    `family` (the plan without its seed) is written next to them when given."""

    def __init__(self, root: Path, plan_key: str, stack_keys: dict[str, str] | None = None,
                 family: str = ""):
        self.root, self.plan_key = root, plan_key
        self.stack_keys = stack_keys or {}
        self.family = family

    def path(self, stack: str, index: int) -> Path:
        key = self.stack_keys.get(stack, "")
        return (self.root / TRIALS_DIR / self.plan_key / f"{stack}-{key}" if key else
                self.root / TRIALS_DIR / self.plan_key / stack) / f"trial-{index:04d}.json"

    def get(self, stack: str, index: int) -> Trial | None:
        p = self.path(stack, index)
        try:
            return Trial.from_dict(json.loads(p.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def stored(self, stack: str) -> list[Trial]:
        """Every trial on disk for this stack, by index."""
        found = []
        for p in sorted(self.path(stack, 0).parent.glob("trial-*.json")):
            try:
                found.append(Trial.from_dict(json.loads(p.read_text())))
            except (OSError, ValueError, TypeError):
                continue
        return found

    def put(self, trial: Trial) -> None:
        atomic_write(self.path(trial.stack, trial.index),
                     json.dumps(trial.as_dict(), indent=1).encode())
        plan_file = self.root / TRIALS_DIR / self.plan_key / PLAN_FILE
        if self.family and not plan_file.exists():
            atomic_write(plan_file, json.dumps({"plan": self.plan_key,
                                                "family": self.family}).encode())


class Cached:
    """A TrialRunner that answers from the cache first and stores what it runs; harness
    failures are not stored (they say nothing about the stack and may be fixed)."""

    def __init__(self, runner: TrialRunner, cache: TrialCache):
        self.runner, self.cache = runner, cache
        self.ran = self.reused = 0

    def run(self, stack: str, index: int, seed: int) -> Trial:
        hit = self.cache.get(stack, index)
        if hit is not None:
            self.reused += 1
            return hit
        trial = self.runner.run(stack, index, seed)
        self.ran += 1
        if not trial.harness:
            self.cache.put(trial)
        return trial


def plan_key(parts: dict[str, Any]) -> str:
    """Trials are comparable only under the same plan (programs, patterns, duration, seed...)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()
                          ).hexdigest()[:12]


@dataclass
class CompareResult:
    a: str
    b: str
    verdict: Verdict
    reason: str
    trials: list[Trial] = field(default_factory=list)
    b_worse: dict[str, Any] = field(default_factory=dict)
    a_worse: dict[str, Any] = field(default_factory=dict)
    rates: dict[str, Any] = field(default_factory=dict)
    new_in_b: list[tuple[str, str]] = field(default_factory=list)
    gone_in_b: list[tuple[str, str]] = field(default_factory=list)
    signatures: list[dict[str, Any]] = field(default_factory=list)  # per signature, by trials
    decided_by: str = ""  # "sequential" | "fisher at the budget" | "harness"

    def arm(self, name: str) -> list[Trial]:
        return [t for t in self.trials if t.stack == name and not t.harness]

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "verdict": self.verdict.value, "reason": self.reason,
                "decided_by": self.decided_by, "pairs": len(self.arm(self.b)),
                "trials": len(self.trials), "rates": self.rates,
                "sequential": {"b_worse": self.b_worse, "a_worse": self.a_worse},
                "new_in_b": [{"id": i, "key": k} for i, k in self.new_in_b],
                "gone_in_b": [{"id": i, "key": k} for i, k in self.gone_in_b],
                "signatures": self.signatures,
                "per_trial": [t.as_dict() for t in self.trials]}


def pair_line(pair: int, a: Sequence[Trial], b: Sequence[Trial], sprt: PairedSprt,
              other: PairedSprt) -> str:
    """The live state printed after each pair."""
    fa, fb = sum(t.failed for t in a), sum(t.failed for t in b)
    s, o = sprt.state(), other.state()
    return (f"pair {pair}: A {fa}/{len(a)} failed, B {fb}/{len(b)} failed; discordant "
            f"{s['discordant_pairs']} (B alone {s['b_failed_alone']}); B-worse LLR "
            f"{s['llr']} in [{s['lower_bound']}, {s['upper_bound']}] {sprt.decision.value}; "
            f"A-worse LLR {o['llr']} {other.decision.value}")


def compare(runner: TrialRunner, a: str, b: str, seed: int, max_pairs: int = MAX_PAIRS,
            on_progress: Callable[[str], None] | None = None, theta1: float = THETA1,
            alpha: float = ALPHA, beta: float = BETA) -> CompareResult:
    """Runs pairs (A then B, same seed) until the sequential tests decide or `max_pairs`."""
    b_worse = PairedSprt(theta1, alpha, beta)
    a_worse = PairedSprt(theta1, alpha, beta)
    result = CompareResult(a, b, Verdict.INCONCLUSIVE, "")
    say = on_progress or (lambda _line: None)
    for i in range(max_pairs):
        pair = []
        for name in (a, b):
            trial = runner.run(name, i, seed + i)
            result.trials.append(trial)
            if trial.harness:
                result.reason = f"stack {name} trial {i}: {trial.harness}"
                result.decided_by = "harness"
                return _finish(result, b_worse, a_worse)
            pair.append(trial)
        b_worse.update(pair[0].failed, pair[1].failed)
        a_worse.update(pair[1].failed, pair[0].failed)
        say(pair_line(i + 1, result.arm(a), result.arm(b), b_worse, a_worse))
        if b_worse.decision is Decision.ACCEPT_H1:
            result.verdict, result.decided_by = Verdict.B_WORSE, "sequential"
            break
        if a_worse.decision is Decision.ACCEPT_H1:
            result.verdict, result.decided_by = Verdict.A_WORSE, "sequential"
            break
        if b_worse.decision is Decision.ACCEPT_H0 and a_worse.decision is Decision.ACCEPT_H0:
            result.verdict, result.decided_by = Verdict.NO_DIFFERENCE, "sequential"
            break
    return _finish(result, b_worse, a_worse, alpha)


def _finish(result: CompareResult, b_worse: PairedSprt, a_worse: PairedSprt,
            alpha: float = ALPHA) -> CompareResult:
    result.b_worse, result.a_worse = b_worse.state(), a_worse.state()
    ta, tb = result.arm(result.a), result.arm(result.b)
    ra = independent_rate(sum(t.failed for t in ta), len(ta), "trial")
    rb = independent_rate(sum(t.failed for t in tb), len(tb), "trial")
    if ta and tb:
        cmp = compare_rates(ra, rb)
        posterior = prob_greater(rb.failures, rb.units, ra.failures, ra.units)
        result.rates = {**cmp.as_dict(), "posterior_b_worse": round(posterior, 4),
                        "posterior_prior": "Beta(1, 1) on each rate, independent"}
        if not result.decided_by:
            result.decided_by = "fisher at the budget"
            if cmp.p_b_worse < alpha:
                result.verdict = Verdict.B_WORSE
            elif cmp.p_a_worse < alpha:
                result.verdict = Verdict.A_WORSE
            else:
                result.verdict = Verdict.NO_DIFFERENCE
        if result.decided_by != "harness":
            result.reason = (f"A {_rate(ra)}; B {_rate(rb)}; difference "
                             f"{cmp.difference:+.2f} [{cmp.low:+.2f}, {cmp.high:+.2f}], "
                             f"Fisher p(B worse) = {cmp.p_b_worse:.3g}, posterior "
                             f"P(B worse) = {posterior:.1%} (uniform priors)")
    sigs_a = {s for t in ta for s in t.signatures}
    sigs_b = {s for t in tb for s in t.signatures}
    ids_a, ids_b = {i for i, _ in sigs_a}, {i for i, _ in sigs_b}
    result.new_in_b = sorted(s for s in sigs_b if s[0] not in ids_a)
    result.gone_in_b = sorted(s for s in sigs_a if s[0] not in ids_b)
    result.signatures = per_signature(ta, tb)
    return result


def per_signature(ta: Sequence[Trial], tb: Sequence[Trial]) -> list[dict[str, Any]]:
    """Each signature's share of trials in which it occurred, A against B, with Fisher's
    one-sided p (B more often) and Benjamini-Hochberg q across signatures; most B-heavy first."""
    keys = {i: k for t in (*ta, *tb) for i, k in t.signatures}
    rows: list[dict[str, Any]] = []
    for sig, key in keys.items():
        ka = sum(any(i == sig for i, _ in t.signatures) for t in ta)
        kb = sum(any(i == sig for i, _ in t.signatures) for t in tb)
        p = fisher_exact(kb, len(tb) - kb, ka, len(ta) - ka, Alternative.GREATER) \
            if ta and tb else 1.0
        rows.append({"id": sig, "key": key, "a_trials": ka, "b_trials": kb, "p_b_more": p,
                     "new_in_b": ka == 0 and kb > 0})
    for row, q in zip(rows, benjamini_hochberg([r["p_b_more"] for r in rows]), strict=True):
        row["q"] = q
    return sorted(rows, key=lambda r: (r["p_b_more"], -r["b_trials"], r["id"]))


def _rate(r: Rate) -> str:
    """Trials are independent units: no process count (Rate.describe speaks of processes)."""
    return (f"{r.failures}/{r.units} trials failed = {fmt_rate(r.rate)} "
            f"[{fmt_rate(r.low if r.low > _ROUNDING else 0.0)}, {fmt_rate(r.high)}]")


def render(r: CompareResult) -> str:
    ta, tb = r.arm(r.a), r.arm(r.b)
    lines = [f"VERDICT  {r.verdict.value}  (A = {r.a}, B = {r.b}; {len(tb)} pairs, "
             f"decided by {r.decided_by or '-'})", f"         {r.reason}"]
    for name, stack, arm in (("A", r.a, ta), ("B", r.b, tb)):
        runtimes = sorted({f"{t.runtime} from {t.runtime_path}" for t in arm if t.runtime})
        fails = sum(t.failed for t in arm)
        lines.append(f"  {name} {stack:<24} {fails}/{len(arm)} trials "
                     f"failed ({fmt_rate(fails / len(arm)) if arm else '-'}); runtime "
                     f"{'; '.join(runtimes) or 'not reported'}")
    s = r.b_worse
    if s:
        lines.append(f"  sequential (paired SPRT, theta1 {s['p1']}, alpha {s['alpha']}, beta "
                     f"{s['beta']}): {s['discordant_pairs']} discordant pairs, B failed alone "
                     f"in {s['b_failed_alone']}; LLR {s['llr']} in [{s['lower_bound']}, "
                     f"{s['upper_bound']}]")
    if r.signatures:
        lines.append(f"  signatures by trials (A {len(ta)}, B {len(tb)}; Fisher p that B shows "
                     f"it more often, BH q):")
        lines += [f"    {s['id']}  A {s['a_trials']:>3}  B {s['b_trials']:>3}  "
                  f"p {s['p_b_more']:.3g}  q {s['q']:.3g}  {s['key'][:70]}"
                  for s in r.signatures[:10]]
    for title, sigs in (("new in B (never seen under A)", r.new_in_b),
                        ("gone in B (seen under A only)", r.gone_in_b)):
        if sigs:
            lines.append(f"  {title}:")
            lines += [f"    {i}  {k}" for i, k in sigs[:10]]
    return "\n".join(lines)


# --- the real trials: soaks under built stacks -----------------------------------------------

def engine_of(base: Any) -> Engine:
    """What runs a trial's jobs (`--engine`): what a trial must show to count as a result."""
    return Engine(getattr(base, "engine", None) or Engine.PYTHON.value)


def trial_problem(engine: Engine, summary: dict[str, Any], run_dir: Path) -> str:
    """Why a finished soak is not a result of its stack ('' when it is one). Our workers must
    report the runtime they imported and finish jobs; an exec or native job reports no runtime
    (no Python worker ran), and a job that failed is as much a result as one that passed (an
    exec job that crashed leaves no job row, only its failure): one job either way is enough."""
    if engine is Engine.PYTHON:
        if not summary.get("manifest", {}).get("iree_runtime") or not summary.get("jobs"):
            return f"no worker reported its runtime or ran a job (see {run_dir})"
        return ""
    ran = int(summary.get("jobs", 0)) + sum(summary.get("failures", {}).values())
    return "" if ran else f"{engine.describe()} ran no job (see {run_dir})"


def exec_preflight(built: Any, base: Any) -> str:
    """Can the command start under the stack? '' when its executable is found (on the PATH
    the jobs get: the stack's venv first) and executable. `stacks.preflight` asks the stack's
    interpreter to import iree.runtime, which says nothing about the user's command."""
    import os

    from stress.engine.execrunner import resolve_executable

    if not base.command:
        return "--engine exec needs a command after `--`"
    if "{" in base.command[0]:  # a placeholder in the executable: known per job only
        return ""
    from stress.verdicts.stacks import command_env

    env = {**os.environ, **base.env, **command_env(built, base.env)}
    if built.venv:
        env["PATH"] = os.pathsep.join([str(Path(built.python).parent), env.get("PATH", "")])
    cwd = Path(base.cwd) if getattr(base, "cwd", None) else Path.cwd()
    exe = resolve_executable(base.command[0], cwd, env)
    if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        return f"the command {base.command[0]!r} is not an executable file under this stack"
    return ""


class SoakTrials:
    """Runs trial i of stack S as a soak with the base options, S's interpreter and env, and
    artifacts from S's compiler when it pins one; writes RUN/stack.json (freeze, runtime,
    iree.runtime path, GPU libraries) and refuses a trial whose workers ran something else."""

    def __init__(self, base: Any, built: dict[str, Any], out_dir: Path,
                 log: Callable[[str], None] | None = None):
        self.base, self.built, self.out_dir = base, built, out_dir
        self.log = log or (lambda _line: None)
        self.artifacts: dict[str, Path | None] = {}
        self.checked: dict[str, str] = {}  # stack -> why its interpreter cannot start ('')

    def _artifacts(self, name: str) -> Path | None:
        """A stack that pins a compiler gets artifacts from it (a 3.13 module does not run on
        runtime 3.10), exported once per stack into the output folder."""
        if name in self.artifacts:
            return self.artifacts[name]
        built = self.built[name]
        path: Path | None = self.base.artifacts
        if engine_of(self.base) is Engine.EXEC:  # the user's command: no programs to compile
            path = None
        elif built.compiler:
            from stress.programs import cache, targets
            from stress.soak import choose_programs

            progs = choose_programs(self.base.programs, self.base.program_files)
            store = cache.ArtifactCache(self.base.cache_dir, compiler_path=built.compiler)
            rep = store.compile_all(progs, targets.parse(self.base.target or "cpu"),
                                    jobs=self.base.compile_jobs)
            if rep.errors:
                raise UsageError(f"stack {name}: {len(rep.errors)} program(s) failed to "
                                 f"compile with {built.compiler}: {rep.errors[0].describe()}")
            path = cache.export(rep, self.out_dir / "artifacts" / name).parent
        self.artifacts[name] = path
        return path

    def run(self, stack: str, index: int, seed: int) -> Trial:
        from stress.soak import run_soak
        from stress.verdicts.stacks import check_facts, command_env, preflight

        built = self.built[stack]
        run_dir = self.out_dir / stack / f"trial-{index:04d}"
        k = 2
        while run_dir.exists():  # a trial interrupted before its result was kept: its folder
            #   stays as it was (a run folder is never rewritten), the rerun gets its own
            run_dir = self.out_dir / stack / f"trial-{index:04d}.{k}"
            k += 1
        engine = engine_of(self.base)
        if stack not in self.checked:
            self.checked[stack] = exec_preflight(built, self.base) if engine is Engine.EXEC \
                else preflight(built, self.base.env)
        if self.checked[stack]:
            return Trial(stack, index, seed, False, harness=f"cannot start: "
                         f"{self.checked[stack]}", run_dir=str(run_dir))
        try:
            stack_env = command_env(built, self.base.env) if engine is Engine.EXEC else \
                built.env
            opts = replace(self.base, python=built.python if built.venv else self.base.python,
                           env={**self.base.env, **stack_env}, seed=seed, results=run_dir,
                           progress=False, artifacts=self._artifacts(stack))
            summary = run_soak(opts)
        except UsageError as exc:  # the probe refused the driver, a compile failed...
            return Trial(stack, index, seed, False, harness=f"cannot start: {exc}",
                         run_dir=str(run_dir))
        manifest = summary.get("manifest", {})
        atomic_write(run_dir / "stack.json", json.dumps({
            **built.manifest(), "iree_runtime": manifest.get("iree_runtime"),
            "iree_revisions": manifest.get("iree_revisions"),
            "iree_runtime_path": manifest.get("iree_runtime_path"),
            "loaded_gpu_libraries": manifest.get("loaded_gpu_libraries"),
            "worker_python": manifest.get("worker_python")}, indent=1).encode())
        problems = check_facts(built, manifest)
        harness = ""
        if summary.get("harness_errors"):
            harness = (f"{summary['harness_errors']} worker(s) could not start "
                       f"(harness errors; see {run_dir})")
        elif summary.get("status") == RunStatus.FAILED:  # the soak itself broke: not a result
            harness = f"the soak failed: {summary.get('stop_reason') or '?'} (see {run_dir})"
        elif problems:
            harness = "; ".join(problems)
        else:
            harness = trial_problem(engine, summary, run_dir)
        sigs = tuple((s["id"], s["key"]) for s in summary.get("signatures", []))
        trial = Trial(stack, index, seed, bool(summary["failed"]), int(summary.get("jobs", 0)),
                      sum(summary["failures"].values()), sigs, harness, str(run_dir),
                      str(manifest.get("iree_runtime") or ""),
                      str(manifest.get("iree_runtime_path") or ""))
        self.log(f"  {stack} trial {index} (seed {seed}): "
                 f"{'FAILED' if trial.failed else 'ok'} {trial.failures} failure(s), "
                 f"{trial.jobs} jobs{'; ' + harness if harness else ''}")
        return trial


# --- commands (the CLI calls these) -----------------------------------------------------------

_PLAN_FIELDS: tuple[str, ...] = (
    "target", "device", "workers", "threads", "patterns", "programs", "program_files",
    "duration_s", "invocations", "env", "max_failures", "timeout_s", "teardown_timeout_s",
    "inject", "shard", "job_seed", "artifacts")


_ENGINE_FIELDS: tuple[str, ...] = ("engine", "command", "done_regex", "record")  # when set


def base_plan_key(base: Any, seed: int) -> str:
    return plan_key({**_plan_parts(base), "seed": seed})


def family_key(base: Any) -> str:
    """The plan without its seed: trials of one family under other seeds are more trials of
    the same experiment (bisect counts a compare's trials of its stacks)."""
    return plan_key({**_plan_parts(base), "family": True})


def _plan_parts(base: Any) -> dict[str, Any]:
    return {**{f: getattr(base, f) for f in _PLAN_FIELDS},
            **{f: getattr(base, f) for f in _ENGINE_FIELDS if hasattr(base, f)}}


def prepare(stacks_file: Path, names: Sequence[str], base: Any,
            log: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, str]]:
    """Loads the file, builds (or reuses) each named stack's venv. Any problem here is a
    UsageError (exit 2, one line naming the file and line) before a single trial runs."""
    from stress.verdicts import stacks

    if base.python:
        raise UsageError("--python and stacks exclude each other: a stack names its own "
                         "interpreter (its venv)")
    return build_all(stacks.pick(stacks.load(stacks_file), names), base, log)


def build_all(chosen: Sequence[Any], base: Any,
              log: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, str]]:
    from stress.verdicts import stacks

    built: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for st in chosen:
        try:
            built[st.name] = stacks.build(st, base.cache_dir, log)
        except stacks.StackError as exc:
            raise UsageError(str(exc)) from None
        keys[st.name] = plan_key({"venv": st.key(), "env": st.env, "rocm": st.rocm})
    return built, keys


def run_compare(base: Any, stacks_file: Path, a: str, b: str, max_pairs: int,
                out_dir: Path | None, log: Callable[[str], None]) -> CompareResult:
    import os
    import time

    if a == b:
        raise UsageError("compare needs two different stacks")
    seed = base.seed if base.seed is not None else int.from_bytes(os.urandom(3), "little")
    built, keys = prepare(stacks_file, [a, b], base, log)
    out = out_dir or Path("results") / f"compare-{a}-{b}-{time.strftime('%Y%m%d-%H%M%S')}"
    log(f"compare A={a} B={b}: up to {max_pairs} pairs, seed {seed}, trials in {out}")
    for name in (a, b):
        log(f"  {built[name].stack.describe()} -> {built[name].python}")
    runner = Cached(SoakTrials(base, built, out, log),
                    TrialCache(out, base_plan_key(base, seed), keys, family_key(base)))
    result = compare(runner, a, b, seed, max_pairs, log)
    atomic_write(out / "compare.json", json.dumps(result.as_dict(), indent=1).encode())
    return result


# --- --grid: the IREE side and the ROCm side crossed (the fusilli ablation) --------------------

GRID_QUESTIONS: tuple[str, ...] = ("both sides", "ROCm side alone", "IREE side alone")


def grid_exit_code(results: Sequence[CompareResult]) -> int:
    """1 when any cell is `B worse`, else 3 when any is inconclusive, else 0."""
    verdicts = {r.verdict for r in results}
    return 1 if Verdict.B_WORSE in verdicts else 3 if Verdict.INCONCLUSIVE in verdicts else 0


def compare_grid(runner: TrialRunner, a: str, b: str, a_iree_b_rocm: str, b_iree_a_rocm: str,
                 seed: int, max_pairs: int = MAX_PAIRS,
                 on_progress: Callable[[str], None] | None = None) -> list[CompareResult]:
    """A against B, against A's IREE with B's ROCm, against B's IREE with A's ROCm: which
    side carries the difference. A's trials are the same in all three (same seeds): a cached
    runner runs them once."""
    say = on_progress or (lambda _line: None)
    out = []
    for question, other in zip(GRID_QUESTIONS, (b, a_iree_b_rocm, b_iree_a_rocm), strict=True):
        say(f"-- {question}: {a} vs {other}")
        out.append(compare(runner, a, other, seed, max_pairs, say))
    return out


def render_grid(results: Sequence[CompareResult]) -> str:
    lines = [f"GRID  A = {results[0].a}"]
    for question, r in zip(GRID_QUESTIONS, results, strict=True):
        lines.append(f"  {question:<16} B = {r.b:<40} {r.verdict.value:<20} "
                     f"({len(r.arm(r.b))} pairs)")
    lines.append("")
    lines += [render(r) for r in results]
    return "\n".join(lines)


def run_grid(base: Any, stacks_file: Path, a: str, b: str, max_pairs: int,
             out_dir: Path | None, log: Callable[[str], None]) -> list[CompareResult]:
    import os
    import time

    from stress.verdicts import stacks

    sa, sb = stacks.pick(stacks.load(stacks_file), [a, b])
    if not (sa.rocm_side or sb.rocm_side):
        raise UsageError(f"--grid crosses the ROCm sides of {a} and {b}, and neither has one "
                         "(rocm_requirements or rocm)")
    ab, ba = stacks.cross(sa, sb), stacks.cross(sb, sa)
    seed = base.seed if base.seed is not None else int.from_bytes(os.urandom(3), "little")
    if base.python:
        raise UsageError("--python and stacks exclude each other")
    built, keys = build_all([sa, sb, ab, ba], base, log)
    out = out_dir or Path("results") / f"grid-{a}-{b}-{time.strftime('%Y%m%d-%H%M%S')}"
    log(f"grid A={a} B={b}: crossed {ab.name}, {ba.name}; seed {seed}; trials in {out}")
    runner = Cached(SoakTrials(base, built, out, log),
                    TrialCache(out, base_plan_key(base, seed), keys, family_key(base)))
    results = compare_grid(runner, a, b, ab.name, ba.name, seed, max_pairs, log)
    atomic_write(out / "grid.json", json.dumps([r.as_dict() for r in results],
                                               indent=1).encode())
    return results
