"""Real compares: does `compare` decide `B worse` in fewer trials than a fixed 20 + 20 design?

Stack A is this interpreter as is; stack B is the same runtime with an injected fault in its
environment (IREE_STRESS_INJECT=segv@invoke:P, a real SIGSEGV inside a worker), P chosen so
that about half of B's trials fail. Each trial is a real soak (cpu, per-call). The compare is
repeated REPEATS times with different seeds; printed per repeat: verdict, pairs, trials, and
at the end the mean number of trials against the fixed design's 40.

    python bench/compare_fault.py [--repeats 5] [--p 0.02] [--invocations 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import header  # noqa: E402

from stress.fs import default_cache_dir  # noqa: E402
from stress.soak.options import SoakOptions  # noqa: E402
from stress.verdicts.compare import Verdict, run_compare  # noqa: E402

FIXED_TRIALS: int = 40  # the fusilli design: 20 runs of each side


def base_options(invocations: int, results: Path) -> SoakOptions:
    return SoakOptions(
        target="cpu", device=None, workers=1, threads=1, patterns=["per-call"],
        programs=["unary.exp.f32*"], program_files=[], duration_s=None,
        invocations=invocations, seed=None, env={}, max_failures=None, results=results,
        timeout_s=30.0, teardown_timeout_s=15.0, max_worker_restarts=50, inject=[],
        python=None, shard=(0, 1), job_seed=None, cache_dir=default_cache_dir(),
        compile_jobs=2, progress=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--p", type=float, default=0.02, help="segv probability per invocation")
    ap.add_argument("--invocations", type=int, default=30, help="per trial")
    ap.add_argument("--seed", type=int, default=1000)
    args = ap.parse_args()
    header()
    with tempfile.TemporaryDirectory(prefix="compare-fault-") as tmp:
        stacks_file = Path(tmp) / "stacks.toml"
        stacks_file.write_text(
            "[stacks.clean]\n\n[stacks.faulty]\n"
            f'env = {{ IREE_STRESS_INJECT = "segv@invoke:{args.p}" }}\n')
        print(f"A = clean, B = faulty (segv@invoke:{args.p}); trials: soaks of "
              f"{args.invocations} invocations, cpu, per-call, 1 worker x 1 thread")
        counts = []
        verdicts = []
        for r in range(args.repeats):
            t0 = time.monotonic()
            base = base_options(args.invocations, Path(tmp) / f"r{r}")
            base.seed = args.seed + 100 * r
            res = run_compare(base, stacks_file, "clean", "faulty", 20, Path(tmp) / f"r{r}",
                              lambda _line: None)
            n = len(res.trials)
            fa = sum(t.failed for t in res.arm("clean"))
            fb = sum(t.failed for t in res.arm("faulty"))
            counts.append(n)
            verdicts.append(res.verdict)
            print(f"repeat {r + 1}: {res.verdict.value:<20} after {n // 2} pairs ({n} trials; "
                  f"A {fa}/{n // 2} failed, B {fb}/{n // 2} failed; {res.decided_by}; "
                  f"{time.monotonic() - t0:.0f} s)", flush=True)
        worse = sum(v is Verdict.B_WORSE for v in verdicts)
        print(f"\n`B worse` in {worse}/{len(verdicts)} repeats; mean trials "
              f"{sum(counts) / len(counts):.1f} (min {min(counts)}, max {max(counts)}) vs "
              f"{FIXED_TRIALS} for a fixed 20 + 20 design")


if __name__ == "__main__":
    main()
