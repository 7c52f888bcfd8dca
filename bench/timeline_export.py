"""Exports a run's GPU telemetry time line: a CSV of every sample, the phase marks, failures per
10 s, and (where matplotlib is installed) a PNG plot of clock, power and utilization with the
phases and failures marked. Also writes the report (text, JSON, HTML) from one build.

    python bench/timeline_export.py RUN_DIR OUT_DIR [--known FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import sqlite3
from pathlib import Path
from typing import Any

from _common import ROOT


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--known", type=Path, action="append", default=[])
    args = ap.parse_args()
    import sys

    sys.path.insert(0, str(ROOT))
    from stress.analysis import html, report

    args.out_dir.mkdir(parents=True, exist_ok=True)
    r = report.build([args.run_dir], args.known)
    (args.out_dir / "soak-report.txt").write_text(report.render_text(r))
    (args.out_dir / "soak-report.html").write_text(html.render(r))
    (args.out_dir / "report.json").write_text(json.dumps(r.as_dict(), indent=1, default=str))
    db = sqlite3.connect(args.run_dir / "stress.db")
    cols = ["t", "gpu", "sm_clock_mhz", "mem_clock_mhz", "power_w", "gpu_util_pct",
            "mem_used_mib", "temp_c", "error"]
    rows = db.execute(f"SELECT {', '.join(cols)} FROM telemetry ORDER BY t").fetchall()
    marks = db.execute("SELECT t, kind, label FROM timeline_marks ORDER BY t").fetchall()
    fails = db.execute("SELECT detected_at, class FROM failures").fetchall()
    with open(args.out_dir / "telemetry.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows)
        for t, kind, label in marks:
            w.writerow([t, None, None, None, None, None, None, None, f"mark {kind} {label}"])
    print(f"{len(rows)} telemetry rows, {len(marks)} marks, {len(fails)} failure rows")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no PNG (the HTML report has the time line as SVG)")
        return
    good = [r for r in rows if r[-1] is None]
    if good:
        try:
            plot(args, good, marks, fails, plt)
        except Exception as exc:  # a plot is a convenience: never lose the exports for it
            print(f"no PNG: {type(exc).__name__}: {exc}")


def plot(args: argparse.Namespace, good: list[Any],
         marks: list[tuple[float, str, str]], fails: list[tuple[float, str]],
         plt: Any) -> None:
    t0 = min([good[0][0], *(m[0] for m in marks)])
    fig, axes = plt.subplots(3, 1, figsize=(12, 7), sharex=True)
    for ax, idx, label in ((axes[0], 2, "SM clock (MHz)"), (axes[1], 4, "power (W)"),
                           (axes[2], 5, "utilization (%)")):
        ax.plot([r[0] - t0 for r in good], [r[idx] for r in good], lw=0.8)
        ax.set_ylabel(label)
        for t, kind, name in marks:
            if kind == "phase-start":
                ax.axvline(t - t0, color="k", ls="--", lw=0.7)
                if ax is axes[0]:
                    ax.text(t - t0, ax.get_ylim()[1], f" {name}", va="top", fontsize=8)
        for t, _ in fails:
            ax.axvline(t - t0, color="r", lw=0.3, alpha=0.3)
    axes[-1].set_xlabel("seconds since the sampler started (red: failures; dashed: phases)")
    fig.suptitle(f"GPU time line, {args.run_dir.name}")
    fig.tight_layout()
    fig.savefig(args.out_dir / "timeline.png", dpi=90)
    print("timeline.png written")


if __name__ == "__main__":
    main()
