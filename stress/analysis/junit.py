"""JUnit XML: one testcase per program x pattern; failures carry their signature and the
evidence folder. Follows the schema Jenkins, GitLab and GitHub reporters read (testsuites >
testsuite > testcase > failure|error)."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Any

from stress.analysis.report import Report
from stress.analysis.text import command_processes_text, failure_counts, tests_text
from stress.keys import message_key
from stress.vocab import Engine

_ERROR_CLASSES = {"crash", "hang", "teardown_hang", "error"}  # <error>; miscompare: <failure>


def render(r: Report) -> str:
    cases: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"time": 0.0, "invocations": 0, "jobs": 0, "problems": []})
    for key, cc in r.totals.cases.items():  # the store's counts (store/counts.py)
        cases[key].update(time=cc.seconds, invocations=cc.invocations, jobs=cc.jobs)
    for s in r.signatures:
        per_case: dict[tuple[str, str], int] = defaultdict(int)
        for row in s.rows:
            if row.get("program") and row.get("pattern"):
                per_case[(row["program"], row["pattern"])] += 1
        if s.cls in ("error", "miscompare") and r.data.counts:  # exact counts per case
            per_case = defaultdict(int)
            for cnt in r.data.counts:
                cls, step, msg = (cnt["key"].split("|", 2) + ["", ""])[:3]
                if cls == s.cls and step == (s.last_step or "") and \
                        message_key(msg) == s.key.message:
                    per_case[(cnt["program"], cnt["pattern"])] += int(cnt["count"])
        for key, n in per_case.items():
            example = next((row["artifacts"] for row in s.rows if row.get("program") == key[0]
                            and row.get("pattern") == key[1] and row.get("artifacts")), None)
            cases[key]["problems"].append((s, n, example))
    root = ET.Element("testsuites", name="iree-stress")
    suite = ET.SubElement(root, "testsuite", name="iree-stress soak",
                          hostname=socket.gethostname())
    props = ET.SubElement(suite, "properties")  # what was tested (header.py)
    t = r.totals
    exits = t.process_exits
    counts = [("invocations", f"{t.invocations}"), ("process exits", f"{sum(exits.values())}")]
    exec_run = t.engines == {Engine.EXEC.value}
    if exec_run:  # the user's command: its tests and processes, as the summary says them
        counts = [("tests", tests_text(t.as_dict())),
                  ("command processes", command_processes_text(t.as_dict()))]
    for name, value in [*r.header, ("jobs", f"{t.jobs}"), *counts,
                        ("failures", failure_counts(t.failures)), ("headline", r.headline())]:
        ET.SubElement(props, "property", name=name, value=value)
    failures = errors = 0
    total_time = 0.0
    for (program, pattern), c in sorted(cases.items()):
        total_time += c["time"]
        case = ET.SubElement(suite, "testcase", name=program, classname=f"soak.{pattern}",
                             time=f"{c['time']:.3f}")
        for s, n, example in c["problems"]:
            tag = "error" if s.cls in _ERROR_CLASSES else "failure"
            if tag == "error":
                errors += 1
            else:
                failures += 1
            status = f"known ({s.known.note})" if s.known else "new"
            el = ET.SubElement(case, tag, type=s.cls,
                               message=f"{s.id} [{status}]: {n} x {s.describe()}"[:1000])
            rate = f"\nrate: {s.rate.describe()}" if s.rate else ""
            work = "" if exec_run else f", {c['invocations']:,} invocations"
            el.text = (f"signature {s.id} ({status}): {s.describe()}\noccurrences here: {n} in "
                       f"{c['jobs']:,} job(s){work}{rate}\n"
                       f"evidence: {example or s.example or '-'}\n")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("time", f"{total_time:.3f}")
    root.set("tests", str(len(cases)))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
