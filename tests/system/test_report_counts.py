"""Every output of one real run says the same numbers and what was tested (issue 28 items 3
and 4): a short cpu soak with injected crashes and errors, an exec soak of a flaky command
and a native soak with a runtime fault, each rendered as the terminal summary, summary.json,
text, markdown, HTML, JSON and JUnit. Before: "in 46 jobs" over a run line of 40, summary.json
`jobs: 3` against the report's 5, pattern rows that did not add up to their totals, a "pool"
row of zeros, "process exits after device use" for commands, and no output but summary.json
naming the runtime, the device or the command that reproduces the run."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers.native import build_flaky

pytestmark = pytest.mark.system

HEADER_LABELS: tuple[str, ...] = ("iree-stress", "runtime", "compiler", "target", "device",
                                  "driver", "host", "numerics", "seed", "rerun")


@dataclass
class Rendered:
    """One run and everything said about it."""

    run: Path
    terminal: str  # what `soak` printed
    summary: dict[str, Any]
    text: str
    markdown: str
    html: str
    json: dict[str, Any]
    junit: ET.Element


def render_all(run: Path, soak: list[str], tmp: Path, cwd: Path | None = None) -> Rendered:
    cut = soak.index("--") if "--" in soak else len(soak)  # (after `--`: the exec command)
    # (PYTHONPATH: from another folder, `python -m stress` is this checkout's, not an installed one)
    res = run_cli("soak", *soak[:cut], "-q", "--results", str(run), *soak[cut:], timeout=400,
                  cwd=cwd, env={"PYTHONPATH": str(REPO)})
    assert res.rc in (0, 1), res.stderr[-3000:]
    junit = tmp / f"{run.name}.xml"
    out = {}
    for fmt in ("text", "markdown", "html", "json"):
        r = run_cli("report", str(run), "--format", fmt, "--junit", str(junit))
        assert r.rc in (0, 1), r.stderr[-2000:]
        out[fmt] = r.stdout
    return Rendered(run, res.stdout, json.loads((run / "summary.json").read_text()),
                    out["text"], out["markdown"], out["html"], json.loads(out["json"]),
                    ET.parse(junit).getroot())


def _n(text: str) -> int:
    return int(text.replace(",", ""))


def header_of(text: str) -> dict[str, str]:
    """The `label: value` lines of a header (pytest's), as the text outputs print them."""
    out = {}
    for line in text.splitlines():
        label, sep, value = line.partition(": ")
        if sep and label in HEADER_LABELS and label not in out:
            out[label] = value
    return out


def table_numbers(lines: list[str], split: Any) -> dict[str, Any]:
    """From a per-pattern table: the total row's (jobs, invocations, exits, full teardowns,
    handle releases) and the sums of the pattern rows above it ('-': not counted)."""
    rows = [split(line) for line in lines]
    head = next(i for i, r in enumerate(rows) if r[:2] == ["pattern", "jobs"])
    total_at = next(i for i, r in enumerate(rows) if r and r[0] == "total")

    def nums(r: list[str]) -> tuple[int, ...]:
        cells = [r[1], r[2], r[3], r[-2], r[-1]]
        return tuple(-1 if c in ("-", "") else _n(c) for c in cells)

    body = [nums(r) for r in rows[head + 1:total_at] if r != [""]]
    return {"total": nums(rows[total_at]),
            "sums": tuple(sum(col) if min(col) >= 0 else -1 for col in zip(*body, strict=True))}


def text_split(line: str) -> list[str]:
    """Cells of a text table row: columns are two or more spaces apart."""
    return [c for c in re.split(r"\s{2,}", line.strip()) if c] or [""]


def md_split(line: str) -> list[str]:
    """Cells of a markdown table row (the |---| line under the head is none)."""
    if not line.startswith("|") or set(line) <= set("|-"):
        return [""]
    return [c.strip() for c in line.strip().strip("|").split("|")]


def html_tables(page: str) -> list[str]:
    """Each <tr> as one line of cells split by '|' (enough for the per-pattern table)."""
    out = []
    for tr in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in
                 re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)]
        out.append("| " + " | ".join(cells) + " |")
    return out


def check_same_numbers(r: Rendered) -> None:
    s = r.summary
    ex = s["exposures"]
    jobs, inv = s["jobs"], s["invocations"]
    exits = ex["process_exits"]["total"]
    full, handle = ex["full_teardowns"]["total"], ex["handle_releases"]["total"]
    counted = s.get("engine") == "python"
    want = (jobs, inv, exits, full if counted else -1, handle if counted else -1)
    failures = ", ".join(f"{c} {n:,}" for c, n in s["failures"].items() if n) or "none"
    # the report's own numbers and its rates' units
    d = r.json
    assert (d["jobs"], d["invocations"], d["failures"]) == (jobs, inv, s["failures"])
    assert d["failing_jobs"]["units"] == jobs
    if d["failing_exits"]:
        assert d["failing_exits"]["units"] == exits
    rows = d["exposures"]
    assert sum(e["jobs"] for e in rows) == jobs and sum(e["invocations"] for e in rows) == inv
    assert sum(e["process_exits"] for e in rows) == exits
    assert sum(e["full_teardowns"] for e in rows) == full
    assert sum(e["handle_releases"] for e in rows) == handle
    assert d["exposure_totals"] == ex
    # the same numbers in every rendering
    if s.get("engine") == "exec":  # (issue 36) jobs, tests and command processes: no table
        procs = s["command_processes"]["total"]
        for name, text in (("terminal", r.terminal), ("text", r.text)):
            assert f"  jobs      {jobs:,} in " in text, name
            assert f"  command processes  {procs:,}" in text, name
            assert f"failures  {failures}" in text or failures == "none"
        assert f"\n{jobs:,} jobs in " in r.markdown
    for name, text in (("terminal", r.terminal), ("text", r.text)):
        if s.get("engine") == "exec":
            break
        lines = text.splitlines()
        t = table_numbers(lines, text_split)
        assert t["total"] == want and t["sums"] == want, (name, t, want)
        run_line = next(x for x in lines if re.match(r"\s+[\d,]+ jobs.*invocations in", x))
        assert _n(run_line.split()[0]) == jobs and f"{inv:,} invocations in" in run_line
        if s["devices_created"] is None:
            assert "devices: the command's own" in run_line
        else:
            assert f"{s['devices_created']:,} devices created" in run_line
        assert f"failures  {failures}" in text or failures == "none"
    md = r.markdown.splitlines()
    # (the markdown prints the table in its exposures section)
    if s.get("engine") != "exec":
        t = table_numbers(md, md_split)
        assert t["total"] == want and t["sums"] == want, ("markdown", t, want)
    t = table_numbers(html_tables(r.html), md_split)
    assert t["total"] == want and t["sums"] == want, ("html", t, want)
    props = {p.get("name"): p.get("value") for p in r.junit.iter("property")}
    if s.get("engine") == "exec":  # the command's tests and processes, as the summary says
        assert _n(props["jobs"]) == jobs and "invocations" not in props, props
        assert _n(props["command processes"].split(":")[0]) == \
            s["command_processes"]["total"], props
    else:
        assert (_n(props["jobs"]), _n(props["invocations"]), _n(props["process exits"])) == \
            (jobs, inv, exits)
    assert props["failures"] == failures
    for problem in [*r.junit.iter("error"), *r.junit.iter("failure")]:  # never "1 in 0"
        m = re.search(r"occurrences here: ([\d,]+) in ([\d,]+) job\(s\)", problem.text or "")
        assert m and _n(m.group(2)) >= 1, problem.text
    # one headline, and it names the store's job count
    head = d["headline"]
    assert f"in {jobs:,} jobs" in head
    assert f"ANSWER\n\n{head}\n" in r.text and f"## Answer\n\n{head}\n" in r.markdown
    assert html.escape(head, quote=False) in r.html and props["headline"] == head
    # one header: what was tested, the same everywhere
    want_header = d["header"]
    assert set(want_header) == set(HEADER_LABELS)
    assert header_of(r.terminal) == want_header
    assert header_of(r.text) == want_header
    assert header_of(r.markdown.split("```text\n", 1)[1].split("```")[0]) == want_header
    pre = re.search(r'<pre id="header">(.*?)</pre>', r.html, re.S)
    assert pre and header_of(html.unescape(pre.group(1))) == want_header
    assert {k: props[k] for k in HEADER_LABELS} == want_header
    assert "--results" not in want_header["rerun"] and want_header["seed"] in \
        want_header["rerun"]


@pytest.fixture(scope="module")
def python_run(tmp_path_factory: pytest.TempPathFactory, cpu_artifacts: dict[str, Path],
               fault_lib: Path) -> Rendered:
    """docs/reports.md's run, shorter: the runtime's own pthread_join segfaults (p = 0.05)
    while devices are released, and an injected error at upload."""
    tmp = tmp_path_factory.mktemp("counts-python")
    return render_all(tmp / "run", [
        "--target", "cpu", "--programs", "unary.*.f32.64x64", "--workers", "3", "--threads",
        "2", "--duration", "8s", "--seed", "9", "--env", f"LD_PRELOAD={fault_lib}",
        "--env", "IREE_FAULT_JOIN=segv", "--env", "IREE_FAULT_JOIN_PROB=0.05",
        "--inject", "raise@upload:0.03"], tmp)


def test_a_python_soak_with_crashes_and_errors_says_the_same_numbers_everywhere(
        python_run: Rendered) -> None:
    s = python_run.summary
    assert s["failures"]["crash"] >= 1 and s["failures"]["error"] >= 1, s["failures"]
    check_same_numbers(python_run)
    assert s["jobs"] > s["jobs_finished"]  # crashed jobs died with their process: counted
    h = python_run.json["header"]
    assert h["runtime"].startswith(s["manifest"]["iree_runtime"])
    assert h["target"] == "cpu:generic" and h["device"].startswith("local-task")
    assert h["numerics"] == "numpy reference" and "--seed 9" in h["rerun"]


def test_an_exec_soak_says_the_same_numbers_and_that_devices_are_the_commands(
        tmp_path: Path) -> None:
    flaky = build_flaky(tmp_path)
    r = render_all(tmp_path / "run", [
        "--engine", "exec", "--done-regex", "^done$", "--timeout", "20s",
        "--teardown-timeout", "1s", "-n", "8", "--seed", "3", "--", str(flaky), "{seed}", "30",
        "30"], tmp_path, cwd=tmp_path)
    check_same_numbers(r)
    assert "process exits after device use" not in r.terminal + r.text
    assert "command processes  8: " in r.terminal and "invocations" not in r.text.split(
        "ANSWER", 1)[1].split("Failure signatures")[0]  # (issue 36 item 7)
    assert r.json["header"]["runtime"].startswith("the command's own")
    if r.json["failing_exits"]:  # a flaky exit: the headline leads with it (issue 24)
        assert r.json["headline"].startswith("Process exits failing")


def test_a_native_soak_with_a_runtime_fault_says_the_same_numbers_everywhere(
        tmp_path: Path, cpu_artifacts: dict[str, Path], fault_lib: Path) -> None:
    # three of the eight tool processes segfault in their first join, the others end clean
    # (a fixed count: at p = 0.15 per join a CI run saw no crash at all and failed)
    fired = tmp_path / "fired.txt"
    r = render_all(tmp_path / "run", [
        "--engine", "native", "--target", "cpu", "--programs", "unary.exp.f32.64x64",
        "--parallel", "2", "-n", "8", "--seed", "5", "--teardown-timeout", "5s",
        "--env", f"LD_PRELOAD={fault_lib}", "--env", "IREE_FAULT_JOIN=segv",
        "--env", "IREE_FAULT_LIMIT=3", "--env", f"IREE_FAULT_COUNT_FILE={fired}",
        "--env", "IREE_FAULT_JOIN_CALLER=iree-run-module"],
        tmp_path)
    check_same_numbers(r)
    s = r.summary
    assert s["failures"]["crash"] == len(fired.read_text().splitlines()) == 3, s["failures"]
    assert s["jobs"] == 8
    assert r.json["headline"].startswith("Process exits failing")  # at exit: issue 24
    assert s["devices_created"] == s["jobs_finished"] > 0  # one device per tool process
    assert "tool process exits" in r.terminal
    runtime = r.json["header"]["runtime"]
    assert runtime.split(" ")[0] == s["manifest"]["iree_runtime"] != "unknown"


def test_a_user_program_without_a_reference_is_said_to_be_checked_for_repeatability_only(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Issue 28 item 10: --program FILE has no numpy reference; its results are only checked
    against its own first result, and every output says so (the corpus program beside it is
    checked against numpy)."""
    examples = REPO / "stress" / "programs" / "mlir" / "examples"
    r = render_all(tmp_path / "run", [
        "--target", "cpu", "--program", str(examples / "scale_shift.mlir"), "--programs",
        "unary.abs.f32.64x64", "--invocations", "200", "--workers", "1", "--seed", "2"],
        tmp_path)
    said = ("numerics: repeatability only (no reference): user.scale_shift (each result "
            "against the first); numpy reference for the other 1")
    for name, out in (("terminal", r.terminal), ("text", r.text), ("markdown", r.markdown),
                      ("html", html.unescape(r.html))):
        assert said in out, name
    assert "numerics: " + r.json["header"]["numerics"] == said
    props = {p.get("name"): p.get("value") for p in r.junit.iter("property")}
    assert "numerics: " + props["numerics"] == said
    check_same_numbers(r)


def test_the_shared_device_of_each_worker_is_counted_as_created(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """A shared-pattern run said "0 devices created" over its pool's full teardowns (seen on
    the lent H100: 4,550 invocations on 2 workers' shared devices)."""
    run = tmp_path / "r"
    res = run_cli("soak", "--target", "cpu", "--patterns", "shared", "--programs",
                  "unary.*.f32.64x64", "--workers", "2", "--threads", "2", "--invocations",
                  "600", "--seed", "4", "--json", "-q", "--results", str(run))
    assert res.rc == 0, res.stderr[-2000:]
    s = res.json()
    assert s["worker_processes"] == 2 and s["devices_created"] == 2, s
    text = run_cli("report", str(run)).stdout
    assert "2 worker processes, 2 devices created" in text


def test_a_gate_on_the_run_begins_every_output_with_the_reports_header(
        python_run: Rendered, tmp_path: Path) -> None:
    """The gate is what CI shows (its text in the log, the step summary, JUnit, --json): each
    says what was tested, the same lines as `report` on the same folder (before: none)."""
    junit, step = tmp_path / "gate.xml", tmp_path / "step-summary.md"
    text = run_cli("gate", "--from", str(python_run.run), "--max-rate", "0.5", "--fatal",
                   "none", "--junit", str(junit), env={"GITHUB_STEP_SUMMARY": str(step)})
    as_json = run_cli("gate", "--from", str(python_run.run), "--max-rate", "0.5", "--fatal",
                      "none", "--json")
    assert text.rc in (0, 1, 3) and as_json.rc == text.rc, text.stderr[-2000:]
    want = python_run.json["header"]
    head, _, rest = text.stdout.partition("\n\n")
    assert header_of(head) == want and len(head.splitlines()) == len(want), text.stdout
    assert rest.startswith("GATE ")  # then the verdict, as the report's answer
    assert as_json.json()["header"] == want
    summary = step.read_text()
    assert header_of(summary.split("```text\n", 1)[1].split("```")[0]) == want
    assert summary.index("```text") < summary.index("| failing jobs |")
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert {k: props[k] for k in HEADER_LABELS} == want
    assert _n(props["jobs"]) == python_run.summary["jobs"]


def test_the_rerun_line_reproduces_a_run_whose_seed_and_shard_came_from_the_environment(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """CI sets the plan through the environment (IREE_STRESS_SEED, a Slurm array's or an
    Indexed Job's shard variables); the rerun line is run on a machine that has none of it.
    Before: the Slurm example's rerun line had neither its seed nor its shard, so it ran
    another plan, whole."""
    import shlex
    import sqlite3

    def plan(run: Path) -> list[tuple[object, ...]]:
        con = sqlite3.connect(run / "stress.db")
        try:
            return sorted(con.execute("SELECT job_index, program, pattern, seed FROM jobs"))
        finally:
            con.close()

    ci = {"IREE_STRESS_SEED": "4242", "IREE_STRESS_SHARD": "2/3",
          "IREE_STRESS_TARGET": "cpu", "IREE_STRESS_WORKERS": "1"}
    first = run_cli("soak", "--programs", "unary.*.f32.64x64", "--patterns", "shared",
                    "--threads", "1", "-n", "300", "-q", "--json", "--results",
                    str(tmp_path / "ci"), env=ci)
    assert first.rc == 0, first.stderr[-2000:]
    rerun = header_of(run_cli("report", str(tmp_path / "ci")).stdout)["rerun"]
    for said in ("--seed 4242", "--shard 2/3", "--target cpu", "--workers 1"):
        assert said in rerun, rerun
    argv = shlex.split(rerun)
    assert argv[:2] == ["iree-stress", "soak"]
    clean = {k: "" for k in ci}  # the rerun's machine: none of CI's variables
    again = run_cli(*argv[1:], "--results", str(tmp_path / "again"), env=clean)
    assert again.rc == 0, again.stderr[-2000:]
    assert plan(tmp_path / "again") == plan(tmp_path / "ci") != []
