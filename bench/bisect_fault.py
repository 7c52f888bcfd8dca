"""A real bisect over 16 stacks where a fault starts at a known position: does it name it,
with what posterior, after how many trials?

Stacks n00 .. n15 are this interpreter; from n{FIRST_BAD} on, each carries an injected fault
in its environment (IREE_STRESS_INJECT=segv@invoke:P: a real SIGSEGV in a worker, about half
the trials failing). Each trial is a real soak (cpu, per-call). Then the same bisect is run a
second time over the same folder: it must reuse every trial and run none (resume).

    python bench/bisect_fault.py [--first-bad 11] [--p 0.02] [--invocations 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import header  # noqa: E402
from compare_fault import base_options  # noqa: E402

from stress.verdicts.bisect import render, run_bisect  # noqa: E402

STACKS: int = 16


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first-bad", type=int, default=11)
    ap.add_argument("--p", type=float, default=0.02, help="segv probability per invocation")
    ap.add_argument("--invocations", type=int, default=30, help="per trial")
    ap.add_argument("--seed", type=int, default=2000)
    args = ap.parse_args()
    header()
    with tempfile.TemporaryDirectory(prefix="bisect-fault-") as tmp:
        f = Path(tmp) / "stacks.toml"
        f.write_text("".join(
            f"[stacks.n{i:02d}]\n" + (f'env = {{ IREE_STRESS_INJECT = "segv@invoke:{args.p}" }}\n'
                                      if i >= args.first_bad else "") + "\n"
            for i in range(STACKS)))
        print(f"{STACKS} stacks n00..n{STACKS - 1:02d}; segv@invoke:{args.p} from "
              f"n{args.first_bad:02d} on; trials: soaks of {args.invocations} invocations, "
              f"cpu, per-call, 1 worker x 1 thread")
        out = Path(tmp) / "bisect"
        for attempt in ("first run", "same command again (resume)"):
            base = base_options(args.invocations, out)
            base.seed = args.seed
            t0 = time.monotonic()
            lines: list[str] = []
            res = run_bisect(base, f, "n00", f"n{STACKS - 1:02d}", out, lines.append)
            print(f"\n## {attempt}: {time.monotonic() - t0:.0f} s; {res.ran} trial(s) run, "
                  f"{res.trials - res.ran} from disk")
            print(render(res))
            ok = res.first_bad == f"n{args.first_bad:02d}"
            print(f"named the right stack: {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
