"""Pools the per-round soak/bare ratios of several native_throughput outputs (one file holding
them one after another): the median and quartiles over every round, how many rounds reached
the 0.90 target, and a distribution-free 95% interval for the median (order statistics; it
takes rounds as independent, which load drift within a run makes optimistic). One run's median
moves with the shared machine's load from run to run; the pooled rounds say where the ratio
sits.

    python bench/pool_rounds.py bench/results/native_throughput-cpu-history.txt
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import header  # noqa: E402
from stress.analysis.stats import median_interval  # noqa: E402

_ROUND = re.compile(r"^round \d+:.*soak/bare ([\d.]+)\s*$", re.M)


def main() -> None:
    header()
    text = "".join(Path(p).read_text() for p in sys.argv[1:])
    runs = [m.group(0) for m in re.finditer(r"^# python \S*bench/native_throughput\.py.*$", text,
                                            re.M)]
    ratios = [float(x) for x in _ROUND.findall(text)]
    q = statistics.quantiles(ratios, n=4)
    met = sum(r >= 0.90 for r in ratios)
    ci = median_interval(ratios)
    shown = "n/a" if ci is None else f"{ci[0]:.3f}-{ci[1]:.3f}"
    print(f"{len(runs)} runs, {len(ratios)} rounds: soak/bare median "
          f"{statistics.median(ratios):.3f} (quartiles {q[0]:.3f}-{q[2]:.3f}; 95% interval of "
          f"the median {shown}, distribution-free, rounds taken as independent); {met} of "
          f"{len(ratios)} rounds >= 0.90")


if __name__ == "__main__":
    main()
