"""Harness overhead: a soak pattern vs a bare loop making the same iree.runtime calls, with the
same process count, journal on, on cpu (local-task) or a GPU (`--target cuda --artifacts DIR`).
Prints the ratios measured in this run, and device create/release cycles per second: per-call's
(one device per invocation) vs the bare per-call loop and vs a bare create/release loop (no
module, no invocation: the ceiling of device cycles on this machine).

Goals (issue #3): shared >= 0.90 x bare loop; per-call >= 0.90 x bare loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from _common import (
    ROOT,
    add_target_args,
    artifact,
    device_uri,
    header,
    per_worker_rates,
    soak,
    soak_target,
)


def bare(program: str, mode: str, procs: int, seconds: float, args: argparse.Namespace) -> float:
    path = artifact(program, args)
    argv = [sys.executable, str(ROOT / "bench" / "bare_loop.py"), "--vmfb", str(path),
            "--program", program, "--mode", mode, "--seconds", str(seconds),
            "--device", device_uri(args)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(  # ours first, the caller's kept (a
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}  # carried iree there)
    def one(_: int) -> str:
        run = subprocess.run(argv, capture_output=True, text=True, env=env)
        if run.returncode:
            raise SystemExit(f"bare loop failed ({run.returncode}): {' '.join(argv)}\n"
                             f"{run.stderr[-2000:]}")
        return run.stdout

    with ThreadPoolExecutor(procs) as pool:
        outs = list(pool.map(one, range(procs)))
    return sum(float(o.strip()) for o in outs)


def harness(program: str, pattern: str, procs: int, seconds: float,
            args: argparse.Namespace) -> tuple[float, float]:
    """(invocations/s, devices created/s) of a soak of one pattern, summed over its workers
    as the bare loop's processes are (`per_worker_rates`)."""
    with tempfile.TemporaryDirectory() as tmp:
        s = soak(*soak_target(args), "--patterns", pattern, "--programs", program,
                 "--workers", str(procs), "--threads", "1", "--duration", f"{seconds}s",
                 "--seed", "1", "--results", f"{tmp}/run")
        assert not s["failed"], s["failures"]
        return per_worker_rates(s["results_dir"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternate bare/harness runs")
    ap.add_argument("--patterns", default="shared,per-call",
                    help="which of the cases to run (comma list of their patterns)")
    add_target_args(ap)
    args = ap.parse_args()
    header()
    wanted = set(args.patterns.split(","))
    cases = [(p, prog) for p, prog in (("shared", "binary.add.f32.3x5x7+3x5x7"),
                                       ("shared", "unary.exp.f32.64x64"),
                                       ("per-call", "binary.add.f32.3x5x7+3x5x7"))
             if p in wanted]
    print(f"medians of {args.rounds} interleaved rounds of {args.seconds:g} s, {args.procs} "
          "processes; ratio = median of the per-round harness/bare ratios")
    print(f"{'pattern':10s} {'program':32s} {'bare/s':>10s} {'harness/s':>10s} {'ratio':>6s}")
    for pattern, program in cases:
        b_rates, h_rates, h_devs, c_rates = [], [], [], []
        for i in range(args.rounds):  # interleaved, so machine noise hits both alike
            t0 = time.monotonic()
            b_rates.append(bare(program, pattern, args.procs, args.seconds, args))
            t1 = time.monotonic()
            rate, devs = harness(program, pattern, args.procs, args.seconds, args)
            print(f"# {pattern} {program} round {i}: bare {b_rates[-1]:.0f}/s in "
                  f"{t1 - t0:.1f} s, harness {rate:.0f}/s in {time.monotonic() - t1:.1f} s "
                  "(wall, start-up and exit included)", file=sys.stderr, flush=True)
            h_rates.append(rate)
            h_devs.append(devs)
            if pattern == "per-call":
                c_rates.append(bare(program, "create-release", args.procs, args.seconds, args))
        b, h = statistics.median(b_rates), statistics.median(h_rates)
        ratio = statistics.median(x / y for x, y in zip(h_rates, b_rates, strict=True))
        print(f"{pattern:10s} {program:32s} {b:10.0f} {h:10.0f} {ratio:6.2f}", flush=True)
        if c_rates:  # per-call: one device created and released per invocation
            d, c = statistics.median(h_devs), statistics.median(c_rates)
            print(f"device cycles/s: per-call harness {d:.0f}, bare per-call loop {b:.0f} "
                  f"(ratio {d / b:.2f}), bare create/release loop {c:.0f} (harness share "
                  f"{d / c:.2f}: the rest is module load + invoke)", flush=True)


if __name__ == "__main__":
    main()
