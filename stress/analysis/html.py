"""The HTML report: one self-contained file (inline CSS + SVG, no script, no fetches), so it
opens offline and attaches to a bug report as is."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stress.analysis import header
from stress.analysis import report as rep
from stress.analysis.report import Report
from stress.analysis.stats import wilson
from stress.analysis.text import failure_counts
from stress.engine import telemetry
from stress.engine.invocation import LATENCY_BUCKETS

_W, _H, _PAD = 640, 220, 44
_TIME_BINS: int = 30  # stretches of the run in the rate-over-time plot, at most
MIN_JOBS_PER_BIN: int = 10  # jobs per stretch at least: one failure in it is then <= 10%


def _bars(title: str, labels: list[str], values: list[float], ylabel: str,
          whiskers: list[tuple[float, float]] | None = None, cls: str = "plot",
          xlabel: str = "", unit: str = "") -> str:
    """A bar chart with its axes named (`ylabel`, `xlabel`) and the top tick in `unit`."""
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
             f'<text x="{_PAD - 4}" y="34" class="s" text-anchor="end">{top:.3g}{unit}</text>',
             f'<text x="{_PAD - 4}" y="{_H}" class="s" text-anchor="end">0</text>',
             f'<text class="s axis y" x="12" y="{(_H + 28) / 2:.0f}" text-anchor="middle" '
             f'transform="rotate(-90 12 {(_H + 28) / 2:.0f})">{html.escape(ylabel)}</text>',
             f'<text class="s axis x" x="{_W / 2}" y="{_H + 56}" text-anchor="middle">'
             f'{html.escape(xlabel)}</text>']
    for i, v in enumerate(values):
        h = (_H - 30) * v / top
        x = _PAD + i * bw
        tip = f"{labels[i]}: {v:.4g}{unit}"
        if whiskers:
            tip += f" [{whiskers[i][0]:.3g}{unit}, {whiskers[i][1]:.3g}{unit}]"
        parts.append(f'<rect class="bar" x="{x + 1:.1f}" y="{_H - h:.1f}" '
                     f'width="{max(1.0, bw - 2):.1f}" height="{h:.1f}">'
                     f'<title>{html.escape(tip)}</title></rect>')
        if whiskers:
            lo, hi = whiskers[i]
            cx = x + bw / 2
            y1, y2 = _H - (_H - 30) * lo / top, _H - (_H - 30) * hi / top
            parts.append(f'<line class="ci" x1="{cx:.1f}" y1="{y1:.1f}" x2="{cx:.1f}" '
                         f'y2="{y2:.1f}" stroke="#000"/>')
        if n <= 16 or i % max(1, n // 8) == 0:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{_H + 14}" class="s" '
                         f'text-anchor="end" transform="rotate(-30 {x + bw / 2:.1f} {_H + 14})">'
                         f'{html.escape(labels[i][:18])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _job_ends(r: Report) -> list[tuple[float, float, bool]]:
    """(start, end, failed) per job: finished jobs by their row, jobs that died with their
    process by the failure that ended them; failed = hit by any signature."""
    hit = set().union(*(s.jobs for s in r.signatures)) if r.signatures else set()
    out: dict[tuple[str, int], tuple[float, float, bool]] = {}
    for j in r.data.jobs:
        key = (j["run_id"], int(j["job_index"]))
        out[key] = (float(j["started_at"]), float(j["ended_at"]), key in hit)
    for f in r.data.failures:
        if f.get("job_index") is not None:
            key = (f["run_id"], int(f["job_index"]))
            t = float(f["detected_at"])
            out.setdefault(key, (t, t, key in hit))
    return list(out.values())


def _rate_over_time(r: Report) -> str:
    """Failing jobs (%) per stretch of the run, with 95% intervals: a stretch holds at least
    MIN_JOBS_PER_BIN jobs (ended in it), so a nearly empty one cannot spike."""
    jobs = sorted(_job_ends(r), key=lambda j: j[1])
    title = "Failing jobs over time (%, 95% interval)"
    x = "time since the first job started (s); a bar: the jobs that ended then"
    if not jobs:
        return _bars(title, [], [], "% of jobs failing", xlabel=x, unit="%")
    t0 = min(j[0] for j in jobs)
    bins = max(1, min(_TIME_BINS, len(jobs) // MIN_JOBS_PER_BIN))
    size = len(jobs) / bins
    labels, values, whiskers = [], [], []
    for b in range(bins):
        part = jobs[round(b * size):round((b + 1) * size)]
        failed = sum(1 for j in part if j[2])
        lo, hi = wilson(failed, len(part))
        labels.append(f"{part[0][1] - t0:.0f}-{part[-1][1] - t0:.0f}s ({len(part)} jobs)")
        values.append(100.0 * failed / len(part))
        whiskers.append((100.0 * lo, 100.0 * hi))
    return _bars(title, labels, values, "% of jobs failing", whiskers, xlabel=x, unit="%")


def _per_pattern(r: Report) -> str:
    rows = [f for f in r.factors.rows if f.factor == "pattern"]
    return _bars("Failing jobs per pattern (%, 95% CI clustered by process)",
                 [f.value for f in rows], [100 * f.rate.rate for f in rows], "% of jobs failing",
                 [(100 * f.rate.low, 100 * f.rate.high) for f in rows], xlabel="pattern",
                 unit="%")


def _signature_bars(r: Report) -> str:
    sigs = r.signatures[:20]
    return _bars("Failures per signature", [f"{s.id} {s.cls}" for s in sigs],
                 [float(s.count) for s in sigs], "occurrences", xlabel="signature")


def _latency(r: Report) -> str:
    hist = [0] * LATENCY_BUCKETS
    for j in r.data.jobs:
        for i, n in enumerate(json.loads(j["latency_hist"])):
            hist[i] += n
    labels = [f"{1 << i}us" if i < 10 else f"{(1 << i) / 1000:.0f}ms"
              for i in range(LATENCY_BUCKETS)]
    return _bars("Invocation latency (upload + invoke + read back)", labels,
                 [float(n) for n in hist], "invocations",
                 xlabel="latency, log2 buckets (us, ms)")


_TL_W, _TL_H, _TL_PAD = 1000, 240, 50
_NEW, _KNOWN = "#c22", "#b8b8b8"  # failure ticks: new ones red, known ones muted
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
             f'<text x="{_TL_W / 2}" y="{plot_h + 44}" class="s axis x" '
             f'text-anchor="middle">time since the run started (s)</text>',
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
    known_ids = {row.get("id") for s in r.known_signatures for row in s.rows}
    for f in fails:
        fx = x(float(f["detected_at"]))
        known = f.get("id") in known_ids
        parts.append(f'<line class="fail {"known" if known else "new"}" x1="{fx:.1f}" '
                     f'y1="{plot_h + 22}" x2="{fx:.1f}" y2="{plot_h + 30}" '
                     f'stroke="{_KNOWN if known else _NEW}"><title>'
                     f'{"known" if known else "new"} {html.escape(str(f["class"]))}'
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
            "dashed: phase starts; red ticks: new failures; grey ticks: known failures (a "
            "--known file names them); shaded: GPU busy while idle.</p>"
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
dt{color:#555}dd{margin:0}#header{background:#f6f6f6;padding:8px;white-space:pre-wrap}
dl.legend{font-size:12px;color:#444;margin:0 0 16px}.axis{fill:#555}"""


# what the columns mean, as each column head's tooltip and in the legend under the tables
GLOSSARY: dict[str, str] = {
    "rate": "failures per exposure: the share of jobs (or process exits, or full driver "
            "teardowns) that the signature hit",
    "95% CI": "95% interval of the rate, clustered by worker process (jobs of one process "
              "share its fate): Wilson's interval on n / design effect",
    "design effect": "how much the clustering widens the interval: the rate's variance over "
                     "the variance if every job were independent (1: no clustering)",
    "lift": "share of failure windows showing the feature divided by its share of healthy "
            "windows (above 1: more frequent just before failures)",
    "p": "one-sided exact test (Fisher, stratified by pattern) that the feature is more "
         "frequent in failure windows",
    "q": "p adjusted for the number of features or factor values tested (Benjamini-Hochberg "
         "false-discovery rate)",
    "stands out": "q below 0.05",
}


def _cell(c: str, link: bool) -> str:
    """A table cell; an evidence folder or file becomes a link."""
    if link and c.startswith("/") and Path(c).exists():
        return f'<a href="{html.escape(Path(c).as_uri())}">{html.escape(c)}</a>'
    return html.escape(c)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]],
           links: Sequence[str] = ()) -> str:
    """`links`: the columns whose paths are evidence (shown as links)."""
    h = "".join(f'<th title="{html.escape(GLOSSARY[c])}">{html.escape(c)}</th>'
                if c in GLOSSARY else f"<th>{html.escape(c)}</th>" for c in head)
    linked = [c in links for c in head]
    body = "".join("<tr>" + "".join(f"<td>{_cell(c, linked[i])}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _legend(*terms: str) -> str:
    items = "".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(GLOSSARY[t])}</dd>"
                    for t in terms)
    return f'<dl class="legend">{items}</dl>'


def _first_screen(r: Report) -> str:
    items = []
    for f in r.findings[:rep.FIRST_SCREEN]:
        cls = "known" if f.is_known else "new"
        dl = "".join(f"<dt>{html.escape(k)}</dt><dd>{_cell(v, k == 'evidence')}</dd>"
                     for k, v in f.rows())
        items.append(f'<li class="{cls}"><b>{html.escape(f.status())}</b> '
                     f"<code>{html.escape(f.signature.id)}</code> {html.escape(f.what())}"
                     f"<dl>{dl}</dl></li>")
    more = len(r.signatures) - rep.FIRST_SCREEN
    tail = f"<p>... and {more} more signature(s) below.</p>" if more > 0 else ""
    untested = rep.untested_line(r)
    if untested:
        tail += f"<p>{html.escape(untested)}</p>"
    return (f'<section id="answer"><h2>Answer</h2><p>{html.escape(r.headline())}</p>'
            f'<ul class="findings">{"".join(items)}</ul>{tail}</section>')


def render(r: Report) -> str:
    runs = _table(["run", "seed", "status", "jobs", "invocations", "duration", "failures"],
                  [[s["run_id"], str(s["seed"]), s["status"], f"{s['jobs']:,}",
                    f"{s['invocations']:,}", f"{s['duration_s']:.1f} s",
                    failure_counts(s["failures"])] for s in r.summaries])
    sigs = _table(rep.SIGNATURE_HEAD, rep.signature_rows(r), links=("example",)) + \
        _legend("rate", "95% CI", "design effect") if r.signatures else ""
    corr = []
    for c in r.correlations:
        if not c.tested and not c.standing_out:  # said once, in the answer
            continue
        note = f'<p class="note">{html.escape(c.note)}</p>' if c.note else ""
        corr.append(f"<h3>HAL steps before {html.escape(c.signature)} (aligned at "
                    f"{html.escape(c.aligned_at)})</h3><p>{html.escape(c.verdict())}</p>{note}"
                    + _table(rep.CORRELATION_HEAD, rep.correlation_rows(c)))
    if corr:
        corr.append(_legend("lift", "p", "q", "stands out"))
    factor_rows = rep.factor_rows(r) if any(f.rate.failures for f in r.factors.rows) else []
    factors = (_table(rep.FACTOR_HEAD, factor_rows) + (
        f'<p class="note">{html.escape(r.factors.note)}</p>' if r.factors.note else "")
        + _legend("q", "stands out")) if factor_rows else "<p>No failing job.</p>"
    exposures = _table(rep.EXPOSURE_HEAD, rep.exposure_rows(r))
    if r.exit_paths is not None:
        exposures += f"<h3>Exit paths</h3><p>{html.escape(r.exit_paths.verdict())}</p>" + \
            _table(rep.EXIT_PATH_HEAD, rep.exit_path_rows(r))
    manifest = r.summaries[0]["manifest"] if r.summaries else {}
    facts = _table(["fact", "value"], [[k, str(manifest.get(k))] for k in (
        "iree_compiler", "iree_runtime", "driver", "device_uri", "loaded_gpu_libraries",
        "host", "kernel", "cpu", "command", "tool_version")])
    plots = "".join([_rate_over_time(r), _per_pattern(r), _signature_bars(r), _latency(r)])
    no_corr = "<p>No failures.</p>" if not r.signatures else \
        "<p>No signature could be compared (see the answer).</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>iree-stress report</title>
<style>{_CSS}</style></head><body>
<h1>iree-stress report</h1>
<pre id="header">{html.escape(header.text(r.header))}</pre>
{_first_screen(r)}
<p>{r.healthy_windows} healthy journal windows sampled.</p>
<h2>Runs</h2>{runs}
<h2>Plots</h2><div class="plots">{plots}</div>
{_timelines(r)}
{f"<h2>Signatures</h2>{sigs}" if sigs else ""}
<h2>Correlation with HAL call sequences</h2>{"".join(corr) or no_corr}
<h2>Failing jobs by factor</h2>{factors}
<h2>Exposures</h2>{exposures}
<h2>Environment</h2>{facts}
</body></html>
"""
