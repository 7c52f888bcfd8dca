"""`iree-stress report`: one or more run folders -> the answer first (what fails, how often,
where, what the other threads were doing, known or new), then the evidence behind it
(signatures, correlation, factor rates, exposures, exit paths), rendered as text, markdown and
JSON here, HTML in html.py, JUnit in junit.py. Every rendering carries the same first screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stress.analysis import (
    correlation,
    exposure,
    factors,
    gpuidle,
    header,
    known,
    rundata,
    signatures,
    teardowns,
    upstream,
)
from stress.analysis.finding import Finding as Finding  # (re-exported: tests, html)
from stress.analysis.signatures import Signature
from stress.analysis.stats import Rate, fmt_rate
from stress.analysis.text import (
    PATTERN_HEAD,
    failure_counts,
    pattern_rows,
    run_lines,
    tests_text,
)
from stress.store import counts
from stress.store import summary as summary_mod
from stress.vocab import Engine

CORRELATED_SIGNATURES: int = 8  # signatures that get a correlation table
FIRST_SCREEN: int = 6  # findings on the first screen; the rest are in the tables below


@dataclass
class Report:
    data: rundata.RunData
    summaries: list[dict[str, Any]]
    signatures: list[Signature]
    correlations: list[correlation.SignatureCorrelation]
    factors: factors.FactorTable
    exit_paths: exposure.ExitPathAblation | None
    overall: Rate  # jobs hit by any failure, per job
    known_file: str | None = None
    overall_exits: Rate | None = None  # process exits that failed, when any did
    busy_idle: list[gpuidle.BusyIdle] | None = None  # GPU busy with nothing in flight
    teardowns: list[teardowns.TeardownRow] | None = None  # failures per teardown, by phase

    @property
    def totals(self) -> counts.Counts:
        """Every count shown (store/counts.py): the same numbers as summary.json's."""
        return self.data.totals

    @property
    def header(self) -> list[tuple[str, str]]:
        """What was tested (header.py), from the runs' own manifests."""
        return header.of_runs(self.data.runs)

    def untested_correlations(self) -> list[correlation.SignatureCorrelation]:
        """Signatures whose other threads could not be compared (said once, not per row)."""
        return [c for c in self.correlations if not c.tested and not c.standing_out]

    @property
    def findings(self) -> list[Finding]:
        """New signatures first, then known ones, each by how often they hit."""
        by_id = {c.signature: c for c in self.correlations}
        return [Finding(s, by_id.get(s.id)) for s in [*self.new_signatures, *self.known_signatures]]

    @property
    def new_signatures(self) -> list[Signature]:
        return [s for s in self.signatures if s.known is None]

    @property
    def known_signatures(self) -> list[Signature]:
        return [s for s in self.signatures if s.known is not None]

    def headline(self) -> str:
        """The answer's first line: the worst rate first (failing process exits, when any
        fail, before failing jobs), then what failed in how much."""
        t = self.totals
        runs = f"{t.runs} run(s)"  # a merged folder holds several runs in one store
        work = f"{t.invocations:,} invocations"
        if t.engines == {Engine.EXEC.value}:  # the user's command: jobs and its tests
            work = f"{t.tests['ran']:,} tests run" if t.jobs_with_tests else \
                "tests not counted"
        if not self.signatures:
            return (f"No failures in {t.jobs:,} jobs ({work}, {runs}); "
                    f"failing jobs at most {fmt_rate(self.overall.high)} "
                    f"({self.overall.confidence:.0%} upper bound).")
        jobs = (f"{self.overall.failures:,}/{self.overall.units:,} = "
                f"{fmt_rate(self.overall.rate)} [{fmt_rate(self.overall.low)}, "
                f"{fmt_rate(self.overall.high)}] ({self.overall.confidence:.0%}, clustered by "
                f"worker process)")
        modes = (f"{len(self.signatures)} failure mode(s): {len(self.new_signatures)} new, "
                 f"{len(self.known_signatures)} known")
        exits = self.overall_exits
        if exits is None or not exits.failures:
            return (f"Jobs failing: {jobs}. {modes}, in {t.jobs:,} jobs "
                    f"({work}, {runs}).")
        return (f"Process exits failing: {exits.failures:,}/{exits.units:,} = "
                f"{fmt_rate(exits.rate)} [{fmt_rate(exits.low)}, {fmt_rate(exits.high)}] "
                f"({exits.confidence:.0%}). Jobs failing: {jobs}. {modes}, in {t.jobs:,} jobs "
                f"and {exits.units:,} process exits ({work}, {runs}).")

    def as_dict(self) -> dict[str, Any]:
        t = self.totals
        return {"header": header.as_dict(self.header), "headline": self.headline(),
                "first_screen": [f.as_dict() for f in self.findings[:FIRST_SCREEN]],
                "other_threads_untested": untested_line(self) or None,
                "runs": [{k: v for k, v in s.items() if k != "manifest"}
                         for s in self.summaries],
                "invocations": t.invocations, "jobs": t.jobs,
                "jobs_finished": t.jobs_finished, "worker_processes": t.worker_processes,
                "devices_created": t.devices_created if t.knows_devices else None,
                "duration_s": round(t.duration_s, 3), "failures": dict(t.failures),
                "failing_jobs": self.overall.as_dict(),
                "failing_exits": self.overall_exits.as_dict() if self.overall_exits else None,
                "known_file": self.known_file,
                "new_signatures": [s.id for s in self.new_signatures],
                "known_signatures": [s.id for s in self.known_signatures],
                "signatures": [s.as_dict() for s in self.signatures],
                "correlation": [c.as_dict() for c in self.correlations],
                "factors": self.factors.as_dict(),
                "exposures": [exposure_dict(p) for p in self.patterns],
                "exposure_totals": t.exposures(),
                "exit_paths": self.exit_paths.as_dict() if self.exit_paths else None,
                "teardowns": [t.as_dict() for t in self.teardowns or []],
                "healthy_windows": self.healthy_windows, "telemetry": telemetry_summary(self.data),
                "busy_idle": [b.as_dict() for b in self.busy_idle or []]}

    @property
    def patterns(self) -> list[counts.PatternCounts]:
        return sorted(self.totals.patterns.values(), key=lambda p: p.pattern)

    @property
    def healthy_windows(self) -> int:
        return sum(1 for w in self.data.windows if w.get("kind") == "healthy")


def exposure_dict(p: counts.PatternCounts) -> dict[str, Any]:
    return {"pattern": p.pattern, "jobs": p.jobs, "invocations": p.invocations,
            "process_exits": p.process_exits, "exits_by_outcome": dict(sorted(p.exits.items())),
            "full_teardowns": p.full_teardowns, "handle_releases": p.handle_releases}


def build(dirs: list[Path], known_paths: Sequence[Path] = ()) -> Report:
    """The report of one or more run folders; `known_paths`: known-failure files
    (known.py) whose signatures are shown apart from new ones. Bad files raise UsageError."""
    kf = upstream.checked(known.load_all(known_paths)) if known_paths else known.EMPTY
    data = rundata.load(dirs)
    summaries = [summary_mod.build(d) for d in dirs]
    sigs = signatures.build(data)
    for s in sigs:
        s.known = kf.lookup_signature(s)
    corr = correlation.correlate_all(data, sigs[:CORRELATED_SIGNATURES])
    any_failed = set().union(*(s.jobs for s in sigs)) if sigs else set()
    overall = exposure.job_rate(data, any_failed)
    factor_table = factors.factor_rates(data, sigs)
    busy = gpuidle.detect_run(data)  # the time line's findings: signatures with no job
    idle_sigs = gpuidle.signatures(busy)
    for s in idle_sigs:
        s.known = kf.lookup_signature(s)
    return Report(data, summaries, sigs + idle_sigs, corr, factor_table,
                  exposure.exit_paths(data), overall,
                  ", ".join(str(p) for p in known_paths) or None,
                  exposure.failing_exits(data), busy, teardowns.rows(sigs, data.totals))


def telemetry_summary(data: rundata.RunData) -> list[dict[str, Any]]:
    """Per run and GPU: samples, failed reads, and the range of each number on the time line."""
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for row in data.telemetry:
        groups.setdefault((row["run_id"], row.get("gpu")), []).append(row)
    out = []
    for (run_id, gpu), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        good = [r for r in rows if r.get("error") is None]
        entry: dict[str, Any] = {"run_id": run_id, "gpu": gpu, "samples": len(good),
                                 "failed_reads": len(rows) - len(good),
                                 "source": next((r["source"] for r in good if r.get("source")),
                                                None)}
        for m in ("sm_clock_mhz", "power_w", "gpu_util_pct", "mem_used_mib", "temp_c"):
            vals = [float(r[m]) for r in good if r.get(m) is not None]
            entry[m] = {"min": min(vals), "max": max(vals)} if vals else None
        out.append(entry)
    return out


def signature_summaries(run_dir: Path, top: int = 10) -> list[dict[str, Any]]:
    """The `signatures` list of a run's summary.json, most frequent first. Keys: id, key
    (the normalised key text), class, signal, last_step, thread_state (busy | blocked | null),
    frames (key frames), count (occurrences), exposure (job | process exit | full teardown),
    rate_per_exposure, ci_low, ci_high (95%, clustered by process), patterns (names, most
    frequent first), example (evidence folder or message), description, phase (work |
    device-release | driver-destroy | process-exit) and phase_detail (what the frames say:
    `ELF destructor of libX`, or null), threads (hangs: what the stuck threads did)."""
    data = rundata.load([run_dir])
    keys = ("id", "key", "class", "signal", "last_step", "thread_state", "frames", "count",
            "exposure", "rate_per_exposure", "ci_low", "ci_high", "example", "description",
            "phase", "phase_detail", "threads", "upstream")
    out = []
    for s in signatures.build(data)[:top]:
        d = s.as_dict()
        out.append({**{k: d[k] for k in keys}, "patterns": list(d["patterns"])})
    return out


# --- text and markdown -----------------------------------------------------------------------

def first_screen(r: Report, markdown: bool) -> str:
    lines = ["## Answer" if markdown else "ANSWER", "", r.headline(), ""]
    for f in r.findings[:FIRST_SCREEN]:
        if markdown:
            lines.append(f"* **{f.status()}** `{f.signature.id}` {f.what()}")
            lines += [f"  * {k}: {v}" for k, v in f.rows()]
        else:
            lines.append(f"{f.status():<5}  {f.signature.id}  {f.what()}")
            lines += [f"       {k:<13} {v}" for k, v in f.rows()]
        lines.append("")
    more = len(r.signatures) - FIRST_SCREEN
    if more > 0:
        lines.append(f"... and {more} more signature(s) in the table below.")
    untested = untested_line(r)
    if untested:
        lines.append(untested)
    return "\n".join(lines).rstrip()


def untested_line(r: Report) -> str:
    """One sentence for every signature whose other threads could not be compared."""
    cs = r.untested_correlations()
    if not cs or not any(Engine.of(e).journals for e in r.totals.engines):
        return ""  # (a tool or command journals no steps: there is nothing to compare)
    steps = ", ".join(dict.fromkeys(c.aligned_at or "begin:" + c.step for c in cs))
    return (f"Other threads: cannot tell for {', '.join(c.signature for c in cs)} (no healthy "
            f"journal window to compare with at {steps}).")


def render_text(r: Report) -> str:
    out = [header.text(r.header), first_screen(r, markdown=False)]
    out += ["\n".join(run_lines(s)) for s in r.summaries]
    out.append(_signature_lines(r, markdown=False))
    out.append(_correlation_lines(r, markdown=False))
    out.append(_factor_lines(r, markdown=False))
    out.append(_exposure_lines(r, markdown=False))
    return "\n\n".join(x for x in out if x)


def render_markdown(r: Report) -> str:
    out = ["# iree-stress report", "", header.text(r.header, markdown=True), "",
           first_screen(r, markdown=True), ""]
    for s in r.summaries:
        out.append(f"## Run `{s['run_id']}` (seed {s['seed']}, {s['status']})")
        took = f"in {s['duration_s']:.1f} s"
        work = f" {took}; tests {tests_text(s)}" if s.get("engine") == Engine.EXEC.value \
            else f", {s['invocations']:,} invocations {took}"  # (exec: one run a job)
        out.append(f"{s['jobs']:,} jobs{work}; failures: {failure_counts(s['failures'])}")
        out.append("")
    for part in (_signature_lines(r, markdown=True), _correlation_lines(r, markdown=True),
                 _factor_lines(r, markdown=True), _exposure_lines(r, markdown=True)):
        if part:
            out += [part, ""]
    return "\n".join(out).rstrip() + "\n"


def signature_rows(r: Report) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for s in r.signatures:
        rate = s.rate
        rows.append((s.id, "known" if s.known else "new", str(s.count),
                     f"{rate.failures}/{rate.units} {rate.unit}s" if rate else "-",
                     fmt_rate(rate.rate) if rate else "-",
                     f"[{fmt_rate(rate.low)}, {fmt_rate(rate.high)}]" if rate else "-",
                     s.describe(), ", ".join(p for p, _ in s.patterns.most_common(4)),
                     s.example or ""))
    return rows


SIGNATURE_HEAD: tuple[str, ...] = ("id", "status", "count", "hit", "rate", "95% CI",
                                   "signature", "patterns", "example")


def _signature_lines(r: Report, markdown: bool) -> str:
    if not r.signatures:  # the headline said so
        return ""
    return _table("Failure signatures (rate per exposure, 95% CI clustered by process)",
                  SIGNATURE_HEAD, signature_rows(r), markdown)


def correlation_rows(c: correlation.SignatureCorrelation) -> list[tuple[str, ...]]:
    return [(x.feature, f"{x.in_failures}/{x.failures}", f"{x.in_healthy}/{x.healthy}",
             f"{x.lift:.1f}", f"{x.p:.2g}", f"{x.q:.2g}", "yes" if x.stands_out else "")
            for x in c.features]


CORRELATION_HEAD: tuple[str, ...] = ("feature", "in failures", "in healthy", "lift", "p", "q",
                                     "stands out")


def _correlation_lines(r: Report, markdown: bool) -> str:
    parts = []
    for c in r.correlations:
        if not c.tested and not c.standing_out:  # said once, on the first screen
            continue
        title = f"HAL steps before {c.signature} (aligned at {c.aligned_at}): {c.verdict()}" \
            + (f" [{c.note}]" if c.note else "")
        parts.append(_table(title, CORRELATION_HEAD, correlation_rows(c), markdown))
    return "\n\n".join(parts)


def factor_rows(r: Report) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for f in r.factors.rows:
        a = f.adjusted
        out.append((f.factor, f.value, f"{f.rate.failures}/{f.rate.units}", fmt_rate(f.rate.rate),
                    f"[{fmt_rate(f.rate.low)}, {fmt_rate(f.rate.high)}]",
                    f"{fmt_rate(a.rate)} [{fmt_rate(a.low)}, {fmt_rate(a.high)}]" if a else "",
                    f"{f.q:.2g}", "yes" if f.stands_out else "", f.note))
    return out


FACTOR_HEAD: tuple[str, ...] = ("factor", "value", "failed jobs", "rate", "95% CI",
                                "pattern-adjusted", "q", "stands out", "note")


def _factor_lines(r: Report, markdown: bool) -> str:
    if not any(f.rate.failures for f in r.factors.rows):  # no failing job: rows of zeros
        return ""
    t = _table("Failing jobs by factor (per job, clustered by process)", FACTOR_HEAD,
               factor_rows(r), markdown)
    return t + ("\n\n" if markdown else "\n  ") + r.factors.note if r.factors.note else t


def exposure_rows(r: Report) -> list[tuple[str, ...]]:
    """Per pattern with the total below (the rows add up to it): the summary's own rows."""
    return pattern_rows(r.summaries[0]) if len(r.summaries) == 1 else \
        pattern_rows(counts_summary(r.totals))


def counts_summary(t: counts.Counts) -> dict[str, Any]:
    """The counts of several stores together, shaped like summary.json (for its tables)."""
    return {**t.as_dict(), "run_id": "+", "status": "", "results_dir": ""}


EXPOSURE_HEAD: tuple[str, ...] = PATTERN_HEAD


def exit_path_rows(r: Report) -> list[tuple[str, ...]]:
    if r.exit_paths is None:
        return []
    return [(x.exit_path + (" (control)" if x.control else ""), f"{x.rate.units:,}",
             str(x.rate.failures), fmt_rate(x.rate.rate),
             f"[{fmt_rate(x.rate.low)}, {fmt_rate(x.rate.high)}]",
             "" if x.q is None else f"{x.q:.2g}", "yes" if x.worse_than_control else "")
            for x in r.exit_paths.rows]


EXIT_PATH_HEAD: tuple[str, ...] = ("exit path", "exits", "teardown failures", "per exit",
                                   "95% CI", "q vs control", "worse")


def _exposure_lines(r: Report, markdown: bool) -> str:
    parts = []
    if r.totals.engines == {Engine.EXEC.value}:
        pass  # the user's command: no patterns nor invocations (the run lines' counts)
    elif len(r.summaries) > 1:  # each run's table is under its run line
        parts.append(_table("Exposures, all runs", EXPOSURE_HEAD, exposure_rows(r), markdown))
    elif markdown:
        parts.append(_table("Exposures", EXPOSURE_HEAD, exposure_rows(r), markdown))
    if r.exit_paths is not None:
        parts.append(_table(f"Exit paths: {r.exit_paths.verdict()}", EXIT_PATH_HEAD,
                            exit_path_rows(r), markdown))
    if any(t.rate.failures for t in r.teardowns or []):
        parts.append(_table("Teardowns: failures by phase, per exposure", teardowns.HEAD,
                            [t.cells() for t in r.teardowns or []], markdown))
    return "\n\n".join(parts)


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
