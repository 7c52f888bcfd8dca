"""The answer's first line tells the worst thing (issue 24 item 5): when process exits fail,
the headline leads with them, with their interval, before failing jobs (the H200 run began
"Jobs failing: 0 [0, 1.2%]" while 47% of its exits failed); the same in markdown, HTML, JSON
and the gate's step summary."""

from __future__ import annotations

import json
from pathlib import Path

from stress.analysis import html, report
from stress.verdicts import gate, gate_outputs
from tests.helpers.runs import exit_run


def test_failing_exits_lead_the_headline_in_every_format(tmp_path: Path) -> None:
    r = report.build([exit_run(tmp_path / "run")])
    head = r.headline()

    assert head.startswith("Process exits failing: 8/20 = 40% [")
    assert head.index("Process exits failing") < head.index("Jobs failing: 0/20")
    assert report.render_text(r).split("ANSWER\n\n")[1].startswith(head)
    assert report.render_markdown(r).split("## Answer\n\n")[1].startswith(head)
    assert f"<h2>Answer</h2><p>{head.replace('<', '&lt;')}" in html.render(r)
    assert json.loads(json.dumps(r.as_dict()))["headline"] == head


def test_without_failing_exits_the_headline_leads_with_failing_jobs(tmp_path: Path) -> None:
    r = report.build([exit_run(tmp_path / "run", failing=0)])
    assert r.headline().startswith("No failures in 20 jobs")


def test_the_gate_step_summary_names_failing_exits_before_failing_jobs(tmp_path: Path) -> None:
    run = exit_run(tmp_path / "run")
    spec = gate.GateSpec(0.5, 0.95, 1.0, gate.parse_fatal("none"), gate.load_known(()))
    g = gate.evaluate([run], spec)

    md = gate_outputs.render_markdown(g)
    text = gate_outputs.render_text(g)
    assert md.index("Process exits failing: 8/20 process exits = 40%") < md.index("failing jobs")
    first = next(line for line in text.splitlines() if line.startswith("GATE "))
    assert first.startswith("GATE PASS: process exits failing 8/20 process exits = 40%")
    assert first.index("process exits failing") < first.index("failing jobs 0/20")
    assert g.as_dict()["failing_exits"]["failures"] == 8
