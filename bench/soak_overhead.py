"""Harness overhead: a soak pattern vs a bare loop making the same iree.runtime calls, with the
same process count, on cpu (local-task), journal on. Prints the ratios measured in this run.

Goals (issue #3): shared >= 0.90 x bare loop; per-call >= 0.90 x bare loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from _common import ROOT, header, soak, steady_rate, vmfb


def bare(program: str, mode: str, procs: int, seconds: float) -> float:
    path = vmfb(program)
    argv = [sys.executable, str(ROOT / "bench" / "bare_loop.py"), "--vmfb", str(path),
            "--program", program, "--mode", mode, "--seconds", str(seconds)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with ThreadPoolExecutor(procs) as pool:
        outs = list(pool.map(lambda _: subprocess.run(argv, capture_output=True, text=True,
                                                      env=env, check=True).stdout, range(procs)))
    return sum(float(o.strip()) for o in outs)


def harness(program: str, pattern: str, procs: int, seconds: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        s = soak("--target", "cpu", "--patterns", pattern, "--programs", program,
                 "--workers", str(procs), "--threads", "1", "--duration", f"{seconds}s",
                 "--seed", "1", "--results", f"{tmp}/run")
        assert not s["failed"], s["failures"]
        return steady_rate(s["results_dir"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternate bare/harness runs")
    args = ap.parse_args()
    header()
    cases = [("shared", "binary.add.f32.3x5x7+3x5x7"), ("shared", "unary.exp.f32.64x64"),
             ("per-call", "binary.add.f32.3x5x7+3x5x7")]
    print(f"medians of {args.rounds} interleaved rounds of {args.seconds:g} s, {args.procs} "
          "processes; ratio = median of the per-round harness/bare ratios")
    print(f"{'pattern':10s} {'program':32s} {'bare/s':>10s} {'harness/s':>10s} {'ratio':>6s}")
    for pattern, program in cases:
        b_rates, h_rates = [], []
        for _ in range(args.rounds):  # interleaved, so machine noise hits both alike
            b_rates.append(bare(program, pattern, args.procs, args.seconds))
            h_rates.append(harness(program, pattern, args.procs, args.seconds))
        b, h = statistics.median(b_rates), statistics.median(h_rates)
        ratio = statistics.median(x / y for x, y in zip(h_rates, b_rates, strict=True))
        print(f"{pattern:10s} {program:32s} {b:10.0f} {h:10.0f} {ratio:6.2f}", flush=True)


if __name__ == "__main__":
    main()
