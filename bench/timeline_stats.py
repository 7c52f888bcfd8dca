"""Per-phase figures of an exported GPU time line (bench/timeline_export.py's telemetry.csv):
the median clock, power and utilization and the peak memory of each phase, and the samples
from the end of teardown on (how fast the clock came down).

    python bench/timeline_stats.py TELEMETRY_CSV [--after-s 10]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import header  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--after-s", type=float, default=10.0,
                    help="samples shown after the end of teardown")
    args = ap.parse_args()
    header()
    with open(args.csv) as f:
        rows = list(csv.DictReader(f))
    marks = [(float(r["t"]), r["error"].split()) for r in rows if r["error"].startswith("mark ")]
    samples = [r for r in rows if r["gpu"] != ""]
    spans: dict[str, list[float]] = {}
    for t, (_, kind, phase) in marks:
        spans.setdefault(phase, [t, t])[0 if kind == "phase-start" else 1] = t
    t0 = spans["soak"][0] if "soak" in spans else float(samples[0]["t"])
    print(f"{len(samples)} samples, times in s from the soak's start")
    print(f"{'phase':<10} {'from':>7} {'to':>7} {'n':>4} {'SM MHz':>7} {'power W':>8} "
          f"{'util %':>7} {'max mem MiB':>11}")
    for phase, (a, b) in spans.items():
        got = [r for r in samples if a <= float(r["t"]) <= b]
        if not got:
            print(f"{phase:<10} {a - t0:7.1f} {b - t0:7.1f} {0:>4}")
            continue

        def med(key: str, rows: list[dict[str, str]] = got) -> float:
            return statistics.median(float(r[key]) for r in rows)

        print(f"{phase:<10} {a - t0:7.1f} {b - t0:7.1f} {len(got):>4} {med('sm_clock_mhz'):7.0f} "
              f"{med('power_w'):8.1f} {med('gpu_util_pct'):7.0f} "
              f"{max(float(r['mem_used_mib']) for r in got):11.0f}")
    end = spans.get("teardown", spans.get("soak", [t0, t0]))[1]
    print(f"samples after the end of teardown (t={end - t0:.1f} s):")
    for r in samples:
        t = float(r["t"])
        if end < t <= end + args.after_s:
            print(f"  t={t - t0:6.1f}  SM {float(r['sm_clock_mhz']):6.0f} MHz  "
                  f"power {float(r['power_w']):6.1f} W  util {float(r['gpu_util_pct']):3.0f}%")


if __name__ == "__main__":
    main()
