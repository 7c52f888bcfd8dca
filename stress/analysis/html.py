"""The HTML report: one self-contained file (inline CSS + SVG, no script, no fetches), so it
opens offline and attaches to a bug report as is."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from stress.analysis import report as rep
from stress.analysis.report import Report
from stress.engine import telemetry
from stress.engine.invocation import LATENCY_BUCKETS

_W, _H, _PAD = 640, 220, 44
_TIME_BINS: int = 30


def _bars(title: str, labels: list[str], values: list[float], ylabel: str,
          whiskers: list[tuple[float, float]] | None = None, cls: str = "plot") -> str:
    n = max(1, len(values))
    top = max([*values, *(hi for _, hi in (whiskers or []))], default=0.0) or 1.0
    bw = (_W - 2 * _PAD) / n
    parts = [f'<svg class="{cls}" role="img" aria-label="{html.escape(title)}" '
             f'viewBox="0 0 {_W} {_H + 60}" width="{_W}" height="{_H + 60}" '
             f'xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{_W / 2}" y="16" text-anchor="middle" class="t">{html.escape(title)}'
             f'</text>',
             f'<line x1="{_PAD}" y1="{_H}" x2="{_W - _PAD}" y2="{_H}" stroke="#444"/>',
             f'<line x1="{_PAD}" y1="28" x2="{_PAD}" y2="{_H}" stroke="#444"/>',
             f'<text x="4" y="34" class="s">{top:.3g}</text>',
             f'<text x="4" y="{_H}" class="s">0</text>',
             f'<text x="{_PAD}" y="{_H + 54}" class="s">{html.escape(ylabel)}</text>']
    for i, v in enumerate(values):
        h = (_H - 30) * v / top
        x = _PAD + i * bw
        parts.append(f'<rect class="bar" x="{x + 1:.1f}" y="{_H - h:.1f}" '
                     f'width="{max(1.0, bw - 2):.1f}" height="{h:.1f}">'
                     f'<title>{html.escape(labels[i])}: {v:.4g}</title></rect>')
        if whiskers:
            lo, hi = whiskers[i]
            cx = x + bw / 2
            y1, y2 = _H - (_H - 30) * lo / top, _H - (_H - 30) * hi / top
            parts.append(f'<line x1="{cx:.1f}" y1="{y1:.1f}" x2="{cx:.1f}" y2="{y2:.1f}" '
                         f'stroke="#000"/>')
        if n <= 16 or i % max(1, n // 8) == 0:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{_H + 14}" class="s" '
                         f'text-anchor="end" transform="rotate(-30 {x + bw / 2:.1f} {_H + 14})">'
                         f'{html.escape(labels[i][:18])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _rate_over_time(r: Report) -> str:
    jobs = r.data.jobs
    if not jobs:
        return _bars("Failure rate over time", [], [], "per 1,000 invocations")
    t0 = min(float(j["started_at"]) for j in jobs)
    t1 = max(float(j["ended_at"]) for j in jobs)
    span = max(t1 - t0, 1e-6)
    inv = [0.0] * _TIME_BINS
    fails = [0.0] * _TIME_BINS

    def b(t: float) -> int:
        return min(_TIME_BINS - 1, max(0, int((t - t0) / span * _TIME_BINS)))

    for j in jobs:  # a job's invocations and failures spread evenly over its span
        lo, hi = b(float(j["started_at"])), b(float(j["ended_at"]))
        share = 1.0 / (hi - lo + 1)
        for i in range(lo, hi + 1):
            inv[i] += int(j["invocations"]) * share
            fails[i] += (int(j["errors"]) + int(j["miscompare"])) * share
    for f in r.data.failures:
        if f["class"] in ("crash", "hang", "teardown_hang"):
            i = b(float(f["detected_at"]))
            fails[i] += 1
            inv[i] += 1
    labels = [f"{(k + 0.5) * span / _TIME_BINS:.0f}s" for k in range(_TIME_BINS)]
    values = [1000.0 * f / n if n else 0.0 for f, n in zip(fails, inv, strict=True)]
    return _bars("Failure rate over time", labels, values, "per 1,000 invocations (x: time)")


def _per_pattern(r: Report) -> str:
    rows = [f for f in r.factors.rows if f.factor == "pattern"]
    return _bars("Failing jobs per pattern (%, 95% CI clustered by process)",
                 [f.value for f in rows], [100 * f.rate.rate for f in rows], "% of jobs",
                 [(100 * f.rate.low, 100 * f.rate.high) for f in rows])


def _signature_bars(r: Report) -> str:
    sigs = r.signatures[:20]
    return _bars("Failures per signature", [f"{s.id} {s.cls}" for s in sigs],
                 [float(s.count) for s in sigs], "count")


def _latency(r: Report) -> str:
    hist = [0] * LATENCY_BUCKETS
    for j in r.data.jobs:
        for i, n in enumerate(json.loads(j["latency_hist"])):
            hist[i] += n
    labels = [f"{1 << i}us" if i < 10 else f"{(1 << i) / 1000:.0f}ms"
              for i in range(LATENCY_BUCKETS)]
    return _bars("Invocation latency (upload + invoke + read back)", labels,
                 [float(n) for n in hist], "invocations per log2 bucket")


_TL_W, _TL_H, _TL_PAD = 1000, 240, 50
_TL_POINTS: int = 1500  # points per line at most: a 10-hour run at 1 Hz is 36k samples
# (metric, label, colour): each line scaled to its own maximum, the maximum shown in the legend
_TL_LINES: tuple[tuple[str, str, str], ...] = (
    ("sm_clock_mhz", "SM/GFX clock MHz", "#3b6ea5"), ("power_w", "power W", "#d08020"),
    ("gpu_util_pct", "utilization %", "#4a9a4a"), ("mem_used_mib", "memory used MiB", "#888"))


def _timeline(r: Report, run_id: str, gpu: Any, rows: list[dict[str, Any]]) -> str:
    """One GPU's time line: its numbers over the run, phases (dashed), failures (red ticks)
    and busy-while-idle episodes (shaded)."""
    t0 = min(float(x["t"]) for x in rows)
    t1 = max(float(x["t"]) for x in rows)
    marks = [m for m in r.data.marks if m["run_id"] == run_id]
    logical = rows[0].get("logical")
    fails = [f for f in r.data.failures if f["run_id"] == run_id and
             (not f.get("device") or logical is None or
              telemetry.device_ordinals([str(f["device"])]) in (None, [logical]))]
    t0 = min([t0, *(float(m["t"]) for m in marks)])
    t1 = max([t1, *(float(m["t"]) for m in marks)])
    span = max(t1 - t0, 1e-6)
    plot_w, plot_h = _TL_W - 2 * _TL_PAD, _TL_H - 60

    def x(t: float) -> float:
        return _TL_PAD + (t - t0) / span * plot_w

    title = f"GPU {gpu} time line, run {run_id}"
    parts = [f'<svg class="timeline" role="img" aria-label="{html.escape(title)}" '
             f'viewBox="0 0 {_TL_W} {_TL_H}" width="{_TL_W}" height="{_TL_H}" '
             f'xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{_TL_W / 2}" y="14" text-anchor="middle" class="t">'
             f'{html.escape(title)}</text>',
             f'<line x1="{_TL_PAD}" y1="{plot_h + 30}" x2="{_TL_W - _TL_PAD}" '
             f'y2="{plot_h + 30}" stroke="#444"/>',
             f'<text x="{_TL_PAD}" y="{plot_h + 44}" class="s">0 s</text>',
             f'<text x="{_TL_W - _TL_PAD}" y="{plot_h + 44}" class="s" text-anchor="end">'
             f'{span:.0f} s</text>']
    for ep in r.busy_idle or []:
        if ep.run_id == run_id and ep.gpu == gpu:
            parts.append(f'<rect class="busyidle" x="{x(ep.start):.1f}" y="30" '
                         f'width="{max(2.0, x(ep.end) - x(ep.start)):.1f}" height="{plot_h}">'
                         f'<title>{html.escape(ep.describe())}</title></rect>')
    for m in marks:
        if m["kind"] == "phase-start":
            mx = x(float(m["t"]))
            parts.append(f'<line x1="{mx:.1f}" y1="30" x2="{mx:.1f}" y2="{plot_h + 30}" '
                         f'stroke="#555" stroke-dasharray="4 3"/>'
                         f'<text x="{mx + 2:.1f}" y="40" class="s">'
                         f'{html.escape(str(m["label"]))}</text>')
    for f in fails:
        fx = x(float(f["detected_at"]))
        parts.append(f'<line class="fail" x1="{fx:.1f}" y1="{plot_h + 22}" x2="{fx:.1f}" '
                     f'y2="{plot_h + 30}" stroke="#c22"><title>{html.escape(str(f["class"]))}'
                     f' {html.escape(str(f.get("pattern") or ""))}</title></line>')
    step = max(1, len(rows) // _TL_POINTS)
    shown = rows[::step]
    legend = []
    for i, (metric, label, colour) in enumerate(_TL_LINES):
        vals = [(float(p["t"]), float(p[metric])) for p in shown if p.get(metric) is not None]
        if not vals:
            continue
        top = max(v for _, v in vals) or 1.0
        pts = " ".join(f"{x(t):.1f},{30 + plot_h - plot_h * v / top:.1f}" for t, v in vals)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" '
                     f'points="{pts}"><title>{html.escape(label)}</title></polyline>')
        legend.append(f'<text x="{_TL_PAD + 240 * i}" y="{_TL_H - 4}" class="s" '
                      f'fill="{colour}">{html.escape(label)} (top {top:.0f})</text>')
    parts += legend
    parts.append("</svg>")
    return "".join(parts)


def _timelines(r: Report) -> str:
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for row in r.data.telemetry:
        if row.get("error") is None:
            groups.setdefault((row["run_id"], row.get("gpu")), []).append(row)
    if not groups:
        return ""
    svgs = [_timeline(r, run_id, gpu, rows) for (run_id, gpu), rows in
            sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))]
    eps = "".join(f"<li>{html.escape(ep.describe())}</li>" for ep in r.busy_idle or [])
    return ("<h2>GPU time line</h2><p>Each line is scaled to its own top (in the legend); "
            "dashed: phase starts; red ticks: failures; shaded: GPU busy while idle.</p>"
            + "".join(svgs) + (f"<ul>{eps}</ul>" if eps else
                               "<p>No GPU was busy while idle.</p>"))


_CSS = """body{font:14px system-ui,sans-serif;margin:24px;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f3f3f3}.bar{fill:#3b6ea5}
.t{font:bold 13px sans-serif}.s{font:10px sans-serif;fill:#333}.note{color:#a33}
.busyidle{fill:#f4c0c0;opacity:.6}
.plots{display:flex;flex-wrap:wrap;gap:12px}code{background:#f6f6f6;padding:0 3px}
.findings li{margin:8px 0}.findings li.new b{color:#a33}.findings li.known b{color:#376}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:4px 0 0 16px}
dt{color:#555}dd{margin:0}"""


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    h = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _first_screen(r: Report) -> str:
    items = []
    for f in r.findings[:rep.FIRST_SCREEN]:
        cls = "known" if f.is_known else "new"
        dl = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
                     for k, v in f.rows())
        items.append(f'<li class="{cls}"><b>{html.escape(f.status())}</b> '
                     f"<code>{html.escape(f.signature.id)}</code> {html.escape(f.what())}"
                     f"<dl>{dl}</dl></li>")
    more = len(r.signatures) - rep.FIRST_SCREEN
    tail = f"<p>... and {more} more signature(s) below.</p>" if more > 0 else ""
    return (f'<section id="answer"><h2>Answer</h2><p>{html.escape(r.headline())}</p>'
            f'<ul class="findings">{"".join(items)}</ul>{tail}</section>')


def render(r: Report) -> str:
    runs = _table(["run", "seed", "status", "invocations", "duration", "crash", "hang",
                   "teardown_hang", "error", "miscompare"],
                  [[s["run_id"], str(s["seed"]), s["status"], f"{s['invocations']:,}",
                    f"{s['duration_s']:.1f}s", *(str(s["failures"].get(k, 0)) for k in
                    ("crash", "hang", "teardown_hang", "error", "miscompare"))]
                   for s in r.summaries])
    sigs = _table(rep.SIGNATURE_HEAD, rep.signature_rows(r))
    corr = []
    for c in r.correlations:
        note = f'<p class="note">{html.escape(c.note)}</p>' if c.note else ""
        corr.append(f"<h3>HAL steps before {html.escape(c.signature)} (aligned at "
                    f"{html.escape(c.aligned_at)})</h3><p>{html.escape(c.verdict())}</p>{note}"
                    + _table(rep.CORRELATION_HEAD, rep.correlation_rows(c)))
    factors = _table(rep.FACTOR_HEAD, rep.factor_rows(r)) + \
        (f'<p class="note">{html.escape(r.factors.note)}</p>' if r.factors.note else "")
    exposures = _table(rep.EXPOSURE_HEAD, rep.exposure_rows(r))
    if r.exit_paths is not None:
        exposures += f"<h3>Exit paths</h3><p>{html.escape(r.exit_paths.verdict())}</p>" + \
            _table(rep.EXIT_PATH_HEAD, rep.exit_path_rows(r))
    manifest = r.summaries[0]["manifest"] if r.summaries else {}
    facts = _table(["fact", "value"], [[k, str(manifest.get(k))] for k in (
        "iree_compiler", "iree_runtime", "driver", "device_uri", "loaded_gpu_libraries",
        "host", "kernel", "cpu", "command", "tool_version")])
    plots = "".join([_rate_over_time(r), _per_pattern(r), _signature_bars(r), _latency(r)])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>iree-stress report</title>
<style>{_CSS}</style></head><body>
<h1>iree-stress report</h1>
{_first_screen(r)}
<p>{r.healthy_windows} healthy journal windows sampled.</p>
<h2>Runs</h2>{runs}
<h2>Plots</h2><div class="plots">{plots}</div>
{_timelines(r)}
<h2>Signatures</h2>{sigs}
<h2>Correlation with HAL call sequences</h2>{"".join(corr) or "<p>No failures.</p>"}
<h2>Failing jobs by factor</h2>{factors}
<h2>Exposures</h2>{exposures}
<h2>Environment</h2>{facts}
</body></html>
"""
