"""Exits per second when half of all process exits crash the same way (issue 24 item 4).

A crash storm (the incident: 40-60% of runs died in cleanup) must not drown the soak in its
own evidence: a core (100 MiB-1 GiB) and a debugger's CPU-second per crash. Three arms, the
same exit-clean soak, the fault library (tests/native/libfault.c) preloaded in all of them:

  clean      no fault
  budget     IREE_FAULT_EXIT=segv with p = 0.5, the default --evidence-budget (full evidence
             for the first N crashes of a mode, then every N*2^k-th; the rest counted)
  unbudgeted the same storm with --evidence-budget 0 (every crash's core read: the old way)
  no-notes   the budget arm with IREE_STRESS_NOTES_CORES=0: the processes past the budget dump
             no core at all; budget/no-notes is what notes-only cores cost. Measured 0.911 at
             d301a1b (bench/results/evidence_budget-cpu-notes.txt: 2 MiB cores then), since
             when the python engine's workers dump none (faulthandler leaves them no fault
             site), so here the two arms run the same code

Rounds are interleaved (the order rotates) and medians compared: target budget/clean >= 0.8.

    python bench/evidence_budget.py [--rounds 5] [--duration 20] [--workers N]
                                    [--target cpu | --target cuda --artifacts DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_target_args, build_fault_lib, header, soak, soak_target  # noqa: E402

from stress.engine.recorder import NOTES_CORES_ENV  # noqa: E402

TARGET_RATIO: float = 0.8  # issue 24: budgeted storm >= 0.8x the clean soak's exits per second
PROGRAMS: str = "binary.add.f32.3x5x7+3x5x7"  # the smallest program: the bench measures exits



def arm(name: str, args: argparse.Namespace, lib: Path, folder: Path,
        n: int) -> tuple[float, float, int, int]:
    """(exits/s, jobs/s, crashes, cores read) of one soak of arm `name`."""
    extra = ["--env", f"LD_PRELOAD={lib}"]
    if name != "clean":
        extra += ["--env", "IREE_FAULT_EXIT=segv", "--env", "IREE_FAULT_EXIT_PROB=0.5"]
    if name == "unbudgeted":
        extra += ["--evidence-budget", "0"]
    os.environ.pop(NOTES_CORES_ENV, None)
    if name == "no-notes":
        os.environ[NOTES_CORES_ENV] = "0"  # (read by the soak's own process)
    try:
        s = soak(*soak_target(args), "--patterns", "exit-clean", "--programs", PROGRAMS,
                 "--duration", f"{args.duration}s", "--workers", str(args.workers),
                 "--max-worker-restarts", "100000", "--results", str(folder / f"{name}-{n}"),
                 *extra, timeout=args.duration * 4 + 300)
    finally:
        os.environ.pop(NOTES_CORES_ENV, None)
    exits = s["exposures"]["process_exits"]
    span = s["duration_s"] or 1.0
    crashes = s["failures"].get("crash", 0)
    cores = sum(1 for f in s["failures_detail"] if f["class"] == "crash" and f["artifacts"])
    return exits["total"] / span, s["jobs"] / span, crashes, cores


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=2)
    add_target_args(ap)
    args = ap.parse_args()
    header()
    arms = ("clean", "budget", "unbudgeted", "no-notes")
    rates: dict[str, list[float]] = {a: [] for a in arms}
    with tempfile.TemporaryDirectory(prefix="evidence-budget-") as tmp:
        folder = Path(tmp)
        lib = build_fault_lib(folder)
        for r in range(args.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for name in order:
                exits_s, jobs_s, crashes, cores = arm(name, args, lib, folder, r)
                rates[name].append(exits_s)
                print(f"round {r + 1} {name:<11} exits/s {exits_s:6.2f}  jobs/s {jobs_s:6.2f}"
                      f"  crashes {crashes:4d}  cores read {cores:4d}", flush=True)
    med = {a: statistics.median(v) for a, v in rates.items()}
    print()
    for a in arms:
        print(f"median exits/s {a:<11} {med[a]:6.2f}  (rounds: "
              + ", ".join(f"{x:.2f}" for x in rates[a]) + ")")
    ratio = med["budget"] / med["clean"] if med["clean"] else 0.0
    print(f"budget/clean     {ratio:.3f}  (goal >= {TARGET_RATIO}: "
          f"{'met' if ratio >= TARGET_RATIO else 'missed'})")
    if med["clean"]:
        print(f"unbudgeted/clean {med['unbudgeted'] / med['clean']:.3f}")
    if med["no-notes"]:
        print(f"budget/no-notes  {med['budget'] / med['no-notes']:.3f}  (what notes-only cores "
              "cost: 1.0 is nothing)")
    print(f"# {args.workers} workers, {args.duration:g} s soaks, {args.rounds} interleaved "
          f"rounds, target {args.target}; p = 0.5 exit segfaults in the storm arms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
