"""The parent-RSS lines of bench/parent_memory.py, from a `--samples` file (seconds, MiB per
line) when the run itself printed none (a soak killed before it exited).

    python bench/rss_samples.py SAMPLES.csv --soak-end SECONDS
"""

from __future__ import annotations

import argparse
import csv

GOAL_MIB: float = 10.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("samples")
    ap.add_argument("--soak-end", type=float, required=True,
                    help="seconds at which the soak's work ended (later samples: end-of-run)")
    args = ap.parse_args()
    with open(args.samples) as f:
        samples = [(float(t), float(m)) for t, m in csv.reader(f)]
    running = [x for x in samples if x[0] <= args.soak_end]
    if not running:
        raise SystemExit(f"no sample at or before {args.soak_end:g} s in {args.samples}")
    after = [m for t, m in samples if t > args.soak_end]
    warm = running[len(running) // 20]  # parent_memory.py's rule: after the first 5%
    end = running[-1]
    peak = max(m for _, m in running[len(running) // 20:])
    growth = end[1] - warm[1]
    print(f"parent RSS while soaking: after warm-up {warm[1]:.1f} MiB (t={warm[0]:.0f}s), "
          f"at t={end[0]:.0f}s {end[1]:.1f} MiB, peak {peak:.1f} MiB")
    print(f"growth {growth:+.1f} MiB  goal < 10 MB  {'OK' if growth < GOAL_MIB else 'MISSED'}")
    if after:
        print(f"after the soak (end-of-run work): peak {max(after):.1f} MiB")


if __name__ == "__main__":
    main()
