"""`iree-stress report`: one or more run folders -> signatures, correlation, factor rates, and
their renderings (text, markdown, json; html in html.py; JUnit in junit.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stress.analysis import correlation, rundata, signatures
from stress.analysis.text import summary_table
from stress.store import summary as summary_mod

CORRELATED_SIGNATURES: int = 5  # signatures that get a correlation table


@dataclass
class Report:
    data: rundata.RunData
    summaries: list[dict[str, Any]]
    signatures: list[signatures.Signature]
    correlations: list[correlation.SignatureCorrelation]
    factors: list[correlation.FactorRate]
    healthy_windows: int

    def as_dict(self) -> dict[str, Any]:
        fails: dict[str, int] = {}
        for s in self.summaries:
            for k, v in s["failures"].items():
                fails[k] = fails.get(k, 0) + v
        return {"runs": [{k: v for k, v in s.items() if k != "manifest"}
                         for s in self.summaries],
                "invocations": self.data.invocations, "failures": fails,
                "signatures": [s.as_dict() for s in self.signatures],
                "correlation": [c.as_dict() for c in self.correlations],
                "factors": [f.as_dict() for f in self.factors],
                "healthy_windows": self.healthy_windows}


def build(dirs: list[Path]) -> Report:
    data = rundata.load(dirs)
    summaries = [summary_mod.build(d) for d in dirs]
    sigs = signatures.build(data)
    healthy = correlation.healthy_features(data)
    corr = [correlation.correlate(s, healthy) for s in sigs[:CORRELATED_SIGNATURES]]
    return Report(data, summaries, sigs, corr, correlation.factor_rates(data), len(healthy))


def signature_summaries(run_dir: Path, top: int = 10) -> list[dict[str, Any]]:
    """The `signatures` list of a run's summary.json."""
    data = rundata.load([run_dir])
    keys = ("id", "class", "count", "rate_per_1k", "ci_low", "ci_high", "last_step",
            "patterns", "example")
    return [{k: s.as_dict()[k] for k in keys} for s in signatures.build(data)[:top]]


def render_text(r: Report) -> str:
    out = [summary_table(s) for s in r.summaries]
    out.append(_signature_lines(r, markdown=False))
    out.append(_correlation_lines(r, markdown=False))
    out.append(_factor_lines(r, markdown=False))
    return "\n\n".join(x for x in out if x)


def render_markdown(r: Report) -> str:
    out = ["# iree-stress report", ""]
    for s in r.summaries:
        out.append(f"## Run `{s['run_id']}` (seed {s['seed']}, {s['status']})")
        out.append(f"{s['invocations']:,} invocations in {s['duration_s']:.1f} s; failures: "
                   + ", ".join(f"{k} {v}" for k, v in s["failures"].items()))
        out.append("")
    out += [_signature_lines(r, markdown=True), "", _correlation_lines(r, markdown=True), "",
            _factor_lines(r, markdown=True)]
    return "\n".join(out) + "\n"


def _signature_lines(r: Report, markdown: bool) -> str:
    if not r.signatures:
        return "No failure signatures." if markdown else "  no failure signatures"
    rows = [(s.id, str(s.count), f"{s.rate_per_1k:.3f}", f"[{s.ci_low:.3f}, {s.ci_high:.3f}]",
             s.describe(), ", ".join(p for p, _ in s.patterns.most_common(4)),
             s.example or "") for s in r.signatures]
    head = ("id", "count", "per 1k", "95% CI", "signature", "patterns", "example")
    return _table("Failure signatures", head, rows, markdown)


def _correlation_lines(r: Report, markdown: bool) -> str:
    parts = []
    for c in r.correlations:
        rows = [(x.feature, f"{x.in_failures}/{x.failures}", f"{x.in_healthy}/{x.healthy}",
                 f"{x.lift:.1f}", f"{x.conservative:.1f}") for x in c.lifts]
        title = f"HAL steps before {c.signature}" + (f" ({c.note})" if c.note else "")
        parts.append(_table(title, ("feature", "in failures", "in healthy", "lift",
                                    "lift (95% low)"), rows, markdown))
    return "\n\n".join(parts)


def _factor_lines(r: Report, markdown: bool) -> str:
    rows = [(f.factor, f.value, str(f.failures), f"{f.invocations:,}", f"{f.rate_per_1k:.3f}",
             f"[{f.ci_low:.3f}, {f.ci_high:.3f}]", f.note) for f in r.factors]
    return _table("Failure rate by factor (per 1,000 invocations, Wilson 95% CI)",
                  ("factor", "value", "failures", "invocations", "rate", "95% CI", "note"),
                  rows, markdown)


def _table(title: str, head: tuple[str, ...], rows: Sequence[tuple[str, ...]],
           markdown: bool) -> str:
    if markdown:
        esc = [[c.replace("|", "\\|") for c in row] for row in rows]
        lines = [f"### {title}", "", "| " + " | ".join(head) + " |",
                 "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in esc]
        return "\n".join(lines)
    widths = [min(60, max(len(h), *(len(r[i]) for r in rows))) if rows else len(h)
              for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [f"  {title}", "  " + fmt.format(*head)]
    lines += ["  " + fmt.format(*(c[:60] for c in r)) for r in rows]
    return "\n".join(lines)
