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
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stress.analysis import header
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
from stress.fs import atomic_write
from stress.verdicts.trials import Cached, Trial, TrialCache, TrialRunner, plan_key
from stress.vocab import Engine, RunStatus

if TYPE_CHECKING:
    from stress.soak.options import SoakOptions

THETA1: float = 0.8  # H1 of the paired test: B fails alone in 80% of discordant pairs. 0.75
#   needs 8 discordant pairs to decide (~32 trials at a 50% flake), 0.8 needs 7, and still
#   accepts H0 on an even split; a 50%-flaky B against a clean A decides in ~28 trials
ALPHA: float = 0.05  # false "B worse" (and false "A worse"), Wald's bound under early stopping
BETA: float = 0.1  # a real difference of THETA1 missed
MAX_PAIRS: int = 20  # the fixed design it replaces: 20 + 20 trials
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
    header: list[tuple[str, str]] = field(default_factory=list)  # what was tested (header.py)

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
                "per_trial": [t.as_dict() for t in self.trials],
                "header": header.as_dict(self.header)}


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


def render(r: CompareResult, with_header: bool = True) -> str:
    """The text answer, after what was tested (the header; a grid prints it once for all)."""
    ta, tb = r.arm(r.a), r.arm(r.b)
    head = [header.text(r.header), ""] if with_header and r.header else []
    lines = [*head, f"VERDICT  {r.verdict.value}  (A = {r.a}, B = {r.b}; {len(tb)} pairs, "
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

def trial_manifests(trials: Iterable[Trial]) -> list[dict[str, Any]]:
    """The manifests of these trials' soaks (summary.json in each trial's run folder): what
    each ran (runtime, compiler, target, device, host). A trial that never ran a soak, or
    whose folder is gone, has none."""
    out = []
    for run_dir in dict.fromkeys(t.run_dir for t in trials if t.run_dir):
        try:
            summary = json.loads((Path(run_dir) / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if summary.get("manifest"):
            out.append(summary["manifest"])
    return out


def verdict_header(arms: Sequence[tuple[str, Sequence[Trial]]], base: SoakOptions,
                   seed: int, seeds: str) -> list[tuple[str, str]]:
    """What a compare, grid or bisect tested (the header soak, report and gate begin with):
    each stack's runtime from its trials' own manifests, the shared facts once, how the
    trials' seeds were chosen, and the command that reruns this one."""
    import os
    import platform

    from stress import __version__
    from stress.soak.plan import command_line

    before = {"tool_version": __version__, "host": platform.node(), "os": platform.platform(),
              "cores": os.cpu_count(), "config": {"engine": engine_of(base).value,
                                                  "target": base.target or "cpu"}}
    return header.of_arms([(label, trial_manifests(ts)) for label, ts in arms],
                          header.rerun_command(command_line(base, seed)), seeds, before)


def engine_of(base: SoakOptions) -> Engine:
    """What runs a trial's jobs (`--engine`): what a trial must show to count as a result."""
    return Engine(base.engine or Engine.PYTHON.value)


def trial_problem(engine: Engine, summary: dict[str, Any], run_dir: Path) -> str:
    """Why a finished soak is not a result of its stack ('' when it is one). Our workers must
    report the runtime they imported and finish jobs; an exec or native job reports no runtime
    (no Python worker ran), and a job that failed is as much a result as one that passed (an
    exec job that crashed leaves no job row, only its failure): one job either way is enough.
    A failure recorded is always a result: a library that crashes in its own cleanup kills
    every worker in the facts step's driver release, before any reports its runtime."""
    failed = sum(int(v) for v in summary.get("failures", {}).values())
    if engine is Engine.PYTHON:
        if failed == 0 and (not summary.get("manifest", {}).get("iree_runtime")
                            or not summary.get("jobs")):
            return f"no worker reported its runtime or ran a job (see {run_dir})"
        return ""
    ran = int(summary.get("jobs", 0)) + failed
    return "" if ran else f"{engine.describe()} ran no job (see {run_dir})"


class SoakTrials:
    """Runs trial i of stack S as a soak with the base options, S's interpreter and env, and
    artifacts from S's compiler when it pins one; writes RUN/stack.json (freeze, runtime,
    iree.runtime path, GPU libraries) and refuses a trial whose workers ran something else."""

    def __init__(self, base: SoakOptions, built: dict[str, Any], out_dir: Path,
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
            from stress.soak.plan import choose_programs

            progs = choose_programs(self.base.programs, self.base.program_files)
            store = cache.ArtifactCache(self.base.cache_dir, compiler_path=built.compiler)
            rep = store.compile_all(progs, targets.parse(self.base.target or "cpu"),
                                    jobs=self.base.compile_jobs)
            if rep.errors:  # (one line, as soak says it; the compiler is the stack's own)
                tgt = targets.parse(self.base.target or "cpu").name
                raise UsageError(f"stack {name}: " + rep.failure_line(tgt, cache.rerun_hint(
                    tgt, self.base.programs, self.base.program_files, built.compiler)))
            path = cache.export(rep, self.out_dir / "artifacts" / name).parent
        self.artifacts[name] = path
        return path

    def check(self, stack: str) -> str:
        """Why the stack cannot run a trial at all ('' when it can), asked once per stack."""
        from stress.runtimes.provision import preflight
        from stress.verdicts.setup import exec_preflight

        if stack not in self.checked:
            built = self.built[stack]
            self.checked[stack] = exec_preflight(built, self.base) if engine_of(
                self.base) is Engine.EXEC else preflight(built, self.base.env)
        return self.checked[stack]

    def run(self, stack: str, index: int, seed: int) -> Trial:
        from stress.runtimes.fingerprint import content_facts
        from stress.runtimes.provision import check_facts, command_env
        from stress.soak.run import run_soak
        from stress.verdicts.setup import setup_problem

        built = self.built[stack]
        run_dir = self.out_dir / stack / f"trial-{index:04d}"
        k = 2
        while run_dir.exists():  # a trial interrupted before its result was kept: its folder
            #   stays as it was (a run folder is never rewritten), the rerun gets its own
            run_dir = self.out_dir / stack / f"trial-{index:04d}.{k}"
            k += 1
        engine = engine_of(self.base)
        if self.check(stack):
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
            # what the workers' hip driver loaded (hip_library: what the stack binds)
            "hip_library_loaded": manifest.get("hip_library"),
            **{k: manifest.get(k) for k in ("hip_library_sha256", "hip_library_mapped")},
            "worker_python": manifest.get("worker_python"),
            **content_facts(built, manifest)}, indent=1).encode())
        problems = check_facts(built, manifest)
        setup = setup_problem(engine, summary, stack, built.stack.runtime_version,
                              built.stack.compiler)
        harness = ""
        if setup:  # never a result of the stack (Ctrl-C, a module its runtime cannot load)
            harness = setup
        elif summary.get("harness_errors"):
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
        self.log(f"  {stack} trial {index} (seed {seed}): " + (
            f"{trial.jobs} jobs, not counted: {harness}" if harness else
            f"{'FAILED' if trial.failed else 'ok'} {trial.failures} failure(s), {trial.jobs} jobs"))
        return trial


# --- commands (the CLI calls these) -----------------------------------------------------------

def base_plan_key(base: SoakOptions, seed: int) -> str:
    return plan_key({**base.plan_parts(), "seed": seed})


def family_key(base: SoakOptions) -> str:
    """The plan without its seed: trials of one family under other seeds are more trials of
    the same experiment (bisect counts a compare's trials of its stacks)."""
    return plan_key({**base.plan_parts(), "family": True})


def prepare(stacks_file: Path, names: Sequence[str], base: SoakOptions,
            log: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, str]]:
    """Loads the file, builds (or reuses) each named stack's venv. Any problem here is a
    UsageError (exit 2, one line naming the file and line) before a single trial runs."""
    from stress.runtimes import spec

    if base.python:
        raise UsageError("--python and stacks exclude each other: a stack names its own "
                         "interpreter (its venv)")
    return build_all(spec.pick(spec.load(stacks_file), names), base, log)


def build_all(chosen: Sequence[Any], base: SoakOptions,
              log: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, str]]:
    from stress.runtimes import provision, spec

    built: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for st in chosen:
        try:
            built[st.name] = provision.build(st, base.cache_dir, log)
        except spec.StackError as exc:
            for done in built.values():
                done.release()
            raise UsageError(str(exc)) from None
        keys[st.name] = plan_key({"venv": st.key(), "env": st.env, "rocm": st.rocm})
    return built, keys


@contextmanager
def in_use(built: Mapping[str, Any]) -> Iterator[None]:
    """The stacks' cached folders held (shared locks, taken by `provision.build`) while the
    block runs: `iree-stress clean --cache` skips them meanwhile."""
    try:
        yield
    finally:
        for b in built.values():
            b.release()


def run_compare(base: SoakOptions, stacks_file: Path, a: str, b: str, max_pairs: int,
                out_dir: Path | None, log: Callable[[str], None]) -> CompareResult:
    import os
    import time

    if a == b:
        raise UsageError("compare needs two different stacks")
    seed = base.seed if base.seed is not None else int.from_bytes(os.urandom(3), "little")
    built, keys = prepare(stacks_file, [a, b], base, log)
    with in_use(built):
        out = out_dir or Path("results") / f"compare-{a}-{b}-{time.strftime('%Y%m%d-%H%M%S')}"
        log(f"compare A={a} B={b}: up to {max_pairs} pairs, seed {seed}, trials in {out}")
        for name in (a, b):
            log(f"  {built[name].stack.describe()} -> {built[name].python}")
        runner = Cached(SoakTrials(base, built, out, log),
                        TrialCache(out, base_plan_key(base, seed), keys, family_key(base)))
        result = compare(runner, a, b, seed, max_pairs, log)
        result.header = verdict_header(
            [(f"A {a}", result.arm(a)), (f"B {b}", result.arm(b))], base, seed,
            f"{seed} (pair i: {seed} + i, the same for A and B)")
        atomic_write(out / "compare.json", json.dumps(result.as_dict(), indent=1).encode())
    return result
