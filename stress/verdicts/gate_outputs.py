"""What CI systems read from a gate: a text verdict, the GitHub step summary (markdown), and
JUnit XML with one testcase per signature and per pattern (plus the verdict itself)."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from stress.analysis import header
from stress.analysis.signatures import Signature
from stress.analysis.stats import fmt_level, fmt_rate
from stress.verdicts.gate import SIGNATURES_SHOWN, GateResult, Verdict
from stress.vocab import Family, family

_ERROR_CLASSES: frozenset[str] = frozenset({"crash", "hang", "teardown_hang", "error"})
_ICON: dict[Verdict, str] = {Verdict.PASS: "✅", Verdict.FAIL: "❌", Verdict.INCONCLUSIVE: "⚠️"}



def _work(g: GateResult) -> str:
    """`, N invocations` of our workers' jobs; nothing for runs of the user's command (an
    exec job is one run of it: issue 36)."""
    if g.job_patterns and set(g.job_patterns.values()) <= set(family(Family.EXEC)):
        return ""
    return f", {g.invocations:,} invocations"

def _rate_text(g: GateResult) -> str:
    r = g.rate
    return (f"{r.failures}/{r.units} jobs = {fmt_rate(r.rate)} [{fmt_rate(r.low)}, "
            f"{fmt_rate(r.high)}] ({fmt_level(r.confidence)}, clustered by worker process)")


def _exit_text(g: GateResult) -> str:
    """Failing process exits with their interval, when any failed (each exit its own cluster);
    said before failing jobs: a run whose jobs all pass can still fail at every exit."""
    r = g.exits
    if r is None or not r.failures:
        return ""
    return (f"{r.failures}/{r.units} process exits = {fmt_rate(r.rate)} [{fmt_rate(r.low)}, "
            f"{fmt_rate(r.high)}] ({fmt_level(r.confidence)})")


def render_text(g: GateResult) -> str:
    exits = _exit_text(g)
    head = header.text(g.header)  # what was tested first, as soak and report say it
    lines = [*([head, ""] if head else []), f"GATE {g.verdict.value}: {g.reason}",
             *([f"  failing exits {exits}"] if exits else []),
             f"  failing jobs  {_rate_text(g)}; bound {fmt_rate(g.spec.max_rate)}",
             f"  test          Wald SPRT p0 {fmt_rate(g.spec.p0)} vs p1 "
             f"{fmt_rate(g.spec.max_rate)}, errors <= {fmt_level(g.spec.error_rate)} each; "
             f"llr {g.sprt['llr']} in [{g.sprt['lower_bound']}, {g.sprt['upper_bound']}]",
             f"  data          {g.rate.units:,} jobs{_work(g)}, shards "
             f"{len(g.shards_seen)}/{g.shards_expected}, {len(g.runs)} run(s)"]
    for s in g.new:
        lines.append(f"  NEW    {s.id}  {s.count:>6} x {s.describe()}  {s.example or ''}")
    for s in g.known:
        note = s.known.note if s.known else ""
        lines.append(f"  KNOWN  {s.id}  {s.count:>6} x {s.describe()}  ({note})")
    lines.append(f"  evidence      {', '.join(str(d) for d in g.dirs)}")
    return "\n".join(lines)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(g: GateResult) -> str:
    """The step summary: verdict, rate with interval, top signatures, where the evidence is."""
    exits = _exit_text(g)
    out = [f"## iree-stress gate: {_ICON[g.verdict]} {g.verdict.value}", "",
           *([header.text(g.header, markdown=True), ""] if g.header else []),
           *([f"**Process exits failing: {_md_cell(exits)}**", ""] if exits else []),
           _md_cell(g.reason), "",
           "| | |", "|---|---|",
           *([f"| failing process exits | {_md_cell(exits)} |"] if exits else []),
           f"| failing jobs | {_md_cell(_rate_text(g))} |",
           f"| bound | {fmt_rate(g.spec.max_rate)} (PASS below it, FAIL not below "
           f"{fmt_rate(g.spec.p0)}; errors <= {fmt_level(g.spec.error_rate)}) |",
           f"| data | {g.rate.units:,} jobs{_work(g)}, "
           f"{len(g.runs)} run(s) |",
           f"| shards | {len(g.shards_seen)} of {g.shards_expected} |", ""]
    sigs: list[tuple[str, Signature]] = [("new", s) for s in g.new] + \
        [("known", s) for s in g.known]
    if sigs:
        out += ["| status | signature | what | count | evidence |", "|---|---|---|---|---|"]
        for status, s in sigs[:SIGNATURES_SHOWN]:
            known = f" ({s.known.note})" if s.known else ""
            out.append(f"| {status}{_md_cell(known)} | `{s.id}` | {_md_cell(s.describe())} | "
                       f"{s.count} | {_md_cell(s.example or '-')} |")
        if len(sigs) > SIGNATURES_SHOWN:
            out.append("")
            out.append(f"{len(sigs) - SIGNATURES_SHOWN} more signature(s): "
                       f"`iree-stress report {' '.join(str(d) for d in g.dirs)}`")
        out.append("")
    else:
        out += ["No failure signatures.", ""]
    out.append(f"Evidence: {', '.join(f'`{d}`' for d in g.dirs)}")
    return "\n".join(out) + "\n"


def append_step_summary(g: GateResult, path: Path) -> None:
    """Appends (GitHub's GITHUB_STEP_SUMMARY is shared by every step of a job)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(render_markdown(g) + "\n")


def render_junit(g: GateResult) -> str:
    """testsuites > testsuite 'iree-stress gate' > testcases: the verdict, one per signature
    (new: error/failure; known: passes, noted in system-out), one per pattern (fails when a
    new signature hit its jobs)."""
    root = ET.Element("testsuites", name="iree-stress")
    suite = ET.SubElement(root, "testsuite", name="iree-stress gate",
                          hostname=socket.gethostname())
    props = ET.SubElement(suite, "properties")  # what was tested, as the report's JUnit
    for name, value in [*g.header, ("jobs", f"{g.rate.units}"),
                        ("invocations", f"{g.invocations}"), ("verdict", g.verdict.value)]:
        ET.SubElement(props, "property", name=name, value=value)
    failures = errors = skipped = tests = 0

    def case(name: str, classname: str) -> ET.Element:
        nonlocal tests
        tests += 1
        return ET.SubElement(suite, "testcase", name=name, classname=classname, time="0")

    verdict = case(f"verdict (max rate {g.spec.max_rate:g})", "gate")
    if g.verdict is Verdict.FAIL:
        failures += 1
        ET.SubElement(verdict, "failure", type="FAIL", message=g.reason[:1000]).text = \
            f"{g.reason}\nfailing jobs: {_rate_text(g)}\n"
    elif g.verdict is Verdict.INCONCLUSIVE:
        skipped += 1
        ET.SubElement(verdict, "skipped", type="INCONCLUSIVE", message=g.reason[:1000])
    ET.SubElement(verdict, "system-out").text = f"{g.reason}\nfailing jobs: {_rate_text(g)}\n"
    for s in [*g.new, *g.known]:
        c = case(f"{s.id} {s.describe()}"[:200], f"gate.signature.{s.cls}")
        text = (f"signature {s.id}: {s.describe()}\noccurrences: {s.count}, jobs hit: "
                f"{len(s.jobs)}\nevidence: {s.example or '-'}\n")
        if s.known is None:
            tag = "error" if s.cls in _ERROR_CLASSES else "failure"
            if tag == "error":
                errors += 1
            else:
                failures += 1
            ET.SubElement(c, tag, type=s.cls, message=f"new: {s.describe()}"[:1000]).text = text
        else:
            ET.SubElement(c, "system-out").text = f"known: {s.known.note}\n{text}"
    patterns: Counter[str] = Counter()
    bad: Counter[str] = Counter()
    for run_jobs in _jobs_by_pattern(g):
        patterns[run_jobs[0]] += run_jobs[1]
        bad[run_jobs[0]] += run_jobs[2]
    for pattern in sorted(patterns):
        c = case(pattern, "gate.pattern")
        if bad[pattern]:
            failures += 1
            ET.SubElement(c, "failure", type="new-failures",
                          message=f"{bad[pattern]} of {patterns[pattern]} jobs hit by new "
                                  f"signatures")
    for el in (suite, root):
        el.set("tests", str(tests))
        el.set("failures", str(failures))
        el.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")


def _jobs_by_pattern(g: GateResult) -> list[tuple[str, int, int]]:
    """(pattern, jobs, jobs hit by a new signature) per run and pattern."""
    hit = set().union(*(s.jobs for s in g.new)) if g.new else set()
    out: dict[str, list[int]] = {}
    for key, pattern in g.job_patterns.items():
        row = out.setdefault(pattern, [0, 0])
        row[0] += 1
        row[1] += key in hit
    return [(p, n, k) for p, (n, k) in out.items()]
