"""Parent memory over a long run (issue #3 goal: RSS growth < 10 MB over 10^6 invocations).
Samples the soak parent's RSS once a second; growth is measured from the end of warm-up
(the first 5% of the run) to the end. Two runs: 10^6 invocations of the in-process patterns,
then every pattern including process-per-job for a fixed time (issue 8: that pattern's queue
used to grow while the pool drew jobs past it)."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import ROOT, add_target_args, header, soak_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--invocations", type=int, default=1_000_000)
    ap.add_argument("--all-patterns-duration", default="180s")
    ap.add_argument("--only-all-patterns", action="store_true",
                    help="skip the 10^6-invocation run (a GPU soak measured as it runs)")
    ap.add_argument("--programs", default="binary.add.f32.3x5x7+3x5x7")
    ap.add_argument("--workers", help="soak --workers (default: cores)")
    ap.add_argument("--keep", help="keep the all-patterns run folder here (a reference run)")
    ap.add_argument("--samples", help="append each RSS sample here as it is taken (seconds, "
                                      "MiB): the data survive a soak that never exits")
    add_target_args(ap)
    args = ap.parse_args()
    header()
    common = [*soak_target(args), *(["--programs", args.programs] if args.programs else []),
              *(["--workers", args.workers] if args.workers else [])]
    if not args.only_all_patterns:
        measure([*common, "--patterns", "shared,per-thread", "--invocations",
                 str(args.invocations)])
    measure([*common, "--patterns", "all", "--duration", args.all_patterns_duration],
            keep=args.keep, samples_to=args.samples)


_ANALYSIS_S: float = 6.0  # the parent's end-of-run work (summary, signatures): ~4 s after a
#   180 s all-pattern soak here


def measure(extra: list[str], keep: str | None = None, samples_to: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "stress", "soak", "--json", "-q", *extra, "--seed", "1",
                "--results", keep or f"{tmp}/run"]
        # stdout to a file, not a pipe: this loop reads nothing until the soak exits, and a
        # summary of thousands of failures is more than a pipe holds (on the H200 the soak
        # blocked in its final write, its work done, until killed)
        out_file = open(Path(tmp) / "soak.json", "w+")  # noqa: SIM115
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out_file, text=True,
                                env={**os.environ})
        ps = psutil.Process(proc.pid)
        samples: list[tuple[float, float]] = []
        t0 = time.monotonic()
        log = open(samples_to, "w") if samples_to else None  # noqa: SIM115
        while proc.poll() is None:
            try:
                samples.append((time.monotonic() - t0, ps.memory_info().rss / 2**20))
            except psutil.NoSuchProcess:
                break
            if log:
                log.write(f"{samples[-1][0]:.1f},{samples[-1][1]:.1f}\n")
                log.flush()
            time.sleep(1.0)
        proc.wait()
        out_file.seek(0)
        out = out_file.read()
        out_file.close()
        if log:
            log.close()


        db = sqlite3.connect(Path(keep or f"{tmp}/run") / "stress.db")
        windows = db.execute("SELECT COUNT(*) FROM windows").fetchone()[0]
        db.close()
    summary = json.loads(out)
    n = summary["invocations"]
    warm = samples[max(1, len(samples) // 20)]
    # the last seconds are the end-of-run analysis (signatures and correlation over the stored
    # windows, at most healthy.HEALTHY_SAMPLES_MAX of them): a bounded peak, reported apart
    running = [x for x in samples if x[0] <= samples[-1][0] - _ANALYSIS_S] or samples
    end = running[-1]
    peak = max(x[1] for x in running)
    final = max(x[1] for x in samples[len(running):]) if len(samples) > len(running) else end[1]
    growth = end[1] - warm[1]
    print(f"\nsoak {' '.join(extra)}")
    print(f"invocations {n:,} in {summary['duration_s']:.0f} s, {summary['jobs']:,} jobs, "
          f"{summary['patterns'].get('process-per-job', 0):,} in process-per-job")
    print(f"parent RSS while soaking: after warm-up {warm[1]:.1f} MiB (t={warm[0]:.0f}s), "
          f"at t={end[0]:.0f}s {end[1]:.1f} MiB, peak {peak:.1f} MiB")
    print(f"growth {growth:+.1f} MiB  goal < 10 MB  {'OK' if growth < 10 else 'MISSED'}")
    print(f"end-of-run analysis (last {_ANALYSIS_S:g} s): peak {final:.1f} MiB "
          f"({windows:,} windows stored)")


if __name__ == "__main__":
    main()
