"""One failure mode, one signature, run after run (issue 27 item 1). For each held-out style
fault of the fault library (tests/native/libfault.c, LD_PRELOAD), N soaks with different
seeds; for each soak the crash signatures its report gives; then per mode the number of
signatures per run and the share of runs whose ids all match the most common one.

  join-segv  pthread_join segfaults in device release (p = 0.2), per-call, churn and
             per-thread, 2 workers x 2 threads (the issue's split: 2 of 4 runs made a second
             signature from a shorter unwind)
  exit-segv  the process's exit destructor segfaults (p = 0.3), exit-clean

Goal: 1 signature per mode in N of N runs, every run's id the same.

    python bench/signature_stability.py [--runs 10] [--duration 30] [--parallel 1]
                                        [--target cuda --artifacts DIR]

`--parallel N` runs N soaks at once (a GPU machine with many cores; each soak has its own
seed and folder, so the answer per run does not depend on it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, add_target_args, build_fault_lib, header, soak_target  # noqa: E402

MODES: dict[str, tuple[list[str], list[str]]] = {
    "join-segv": (["--patterns", "per-call,churn,per-thread", "--threads", "2"],
                  ["IREE_FAULT_JOIN=segv", "IREE_FAULT_JOIN_PROB=0.2"]),
    "exit-segv": (["--patterns", "exit-clean"],
                  ["IREE_FAULT_EXIT=segv", "IREE_FAULT_EXIT_PROB=0.3"]),
}



def one(mode: str, seed: int, args: argparse.Namespace, lib: Path,
        folder: Path) -> list[dict[str, Any]]:
    opts, env = MODES[mode]
    run = folder / f"{mode}-{seed}"
    argv = [sys.executable, "-m", "stress", "soak", *soak_target(args), *opts,
            "--programs", "unary.*.f32.*", "--duration", f"{args.duration:g}s",
            "--workers", "2", "--seed", str(seed), "--max-worker-restarts", "100000",
            "--json", "-q", "--results", str(run), "--env", f"LD_PRELOAD={lib}",
            *[x for e in env for x in ("--env", e)]]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                         timeout=args.duration * 6 + 600)
    if out.returncode not in (0, 1):
        raise SystemExit(f"soak failed ({out.returncode}): {out.stderr[-1000:]}")
    rep = subprocess.run([sys.executable, "-m", "stress", "report", str(run), "--format",
                          "json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    sigs = json.loads(rep.stdout)["signatures"]
    return [g for g in sigs if g["class"] == "crash"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_target_args(ap)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--parallel", type=int, default=1, help="soaks at once")
    args = ap.parse_args()
    header()
    ok = True
    with tempfile.TemporaryDirectory(prefix="sig-stability-") as tmp:
        lib = build_fault_lib(Path(tmp))
        for mode in args.modes.split(","):
            per_run: list[list[dict[str, Any]]] = []
            with ThreadPoolExecutor(max_workers=args.parallel) as pool:
                futures = [pool.submit(one, mode, seed, args, lib, Path(tmp))
                           for seed in range(1, args.runs + 1)]
            for seed, sigs in enumerate((f.result() for f in futures), start=1):
                per_run.append(sigs)
                desc = "; ".join(f"{g['id']} x{g['count']} {' < '.join(g['frames'][:3])}"
                                 + (f" (merged {sum(g['merged'].values())})"
                                    if g.get("merged") else "") for g in sigs)
                print(f"{mode} seed {seed:2d}: {len(sigs)} signature(s): {desc or '-'}",
                      flush=True)
            ids = Counter(g["id"] for sigs in per_run for g in sigs[:1])
            top = ids.most_common(1)[0][0] if ids else None
            one_sig = sum(len(sigs) == 1 for sigs in per_run)
            same = sum(len(sigs) == 1 and sigs[0]["id"] == top for sigs in per_run)
            counts = Counter(len(sigs) for sigs in per_run)
            print(f"{mode}: signatures per run {dict(sorted(counts.items()))}; "
                  f"1 signature in {one_sig} of {len(per_run)} runs; the same id ({top}) in "
                  f"{same} of {len(per_run)}", flush=True)
            ok &= same == len(per_run)
    print(f"# goal: 1 signature per mode in every run, the same id: {'met' if ok else 'missed'}"
          f"; target {args.target}, {args.duration:g} s soaks, {args.parallel} at once")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
