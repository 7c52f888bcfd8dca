"""The report's first screen (issue 9 item 5): what fails, how often, where, what other threads
did, known or new; the same content in text, markdown, HTML and JSON. Built on a synthetic run
folder (a real SQLite store, written with the store's own migrations)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from stress.analysis import html, junit, report
from tests.conftest import run_cli
from tests.helpers.runs import make_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("rep") / "run")


@pytest.fixture(scope="module")
def known_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    f = tmp_path_factory.mktemp("known") / "known.toml"
    f.write_text('[[known]]\nmatch = "error|*CUDA_ERROR_INVALID_CONTEXT*"\n'
                 'note = "fresh-thread cuda context"\nlink = "repro/cuda_fresh_thread_context.py"'
                 '\n')
    return f


def test_the_first_screen_answers_what_how_often_where_and_whether_known(
        run_dir: Path, known_file: Path) -> None:
    r = report.build([run_dir], [known_file])
    text = report.render_text(r)
    screen = text.split("run r-test")[0]
    assert "2 failure mode(s): 1 new, 1 known, in 60 jobs" in screen
    crash = next(s for s in r.signatures if s.cls == "crash")
    assert crash.frames == ("iree_fault_segv", "fire", "pthread_join")
    assert f"NEW    {crash.id}  crash SIGSEGV in device-release at teardown (device-release 3)" \
        in screen
    assert "iree_fault_segv" in screen and "3/60 jobs = 5%" in screen
    assert "per-call 100%; workers x threads 3x2" in screen
    err = next(s for s in r.signatures if s.cls == "error")
    assert f"KNOWN  {err.id}  error at module-load" in screen
    assert "known as      fresh-thread cuda context (repro/cuda_fresh_thread_context.py)" \
        in screen
    assert screen.index("NEW") < screen.index("KNOWN")  # new ones first
    assert err.count == 8 and err.rate is not None and err.rate.failures == 2


RENDERERS: dict[str, Callable[[report.Report], str]] = {
    "text": report.render_text, "markdown": report.render_markdown, "html": html.render,
    "json": lambda r: json.dumps(r.as_dict())}


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_format_carries_the_same_first_screen(run_dir: Path, known_file: Path,
                                                    fmt: str) -> None:
    r = report.build([run_dir], [known_file])
    out = RENDERERS[fmt](r)
    head = out[:out.find("Failure signatures") if fmt != "json" else len(out)]
    for f in r.findings:
        assert f.signature.id in head
        assert f.what() in head
        if f.others_tested:
            assert f.others().split(" (")[0] in head
        else:  # said once for every such signature, not in a row of each
            assert "Other threads: cannot tell for" in head
            assert fmt == "json" or "0 failure and 0" not in head
    assert "fresh-thread cuda context" in head
    if fmt == "json":
        d = json.loads(out)
        assert [x["status"] for x in d["first_screen"]] == ["new", "known"]
        assert d["new_signatures"] == [r.signatures[0].id]
        assert d["failing_jobs"]["unit"] == "job" and d["failing_jobs"]["clusters"] == 6


def test_the_html_report_explains_q_lift_and_design_effect_in_a_legend_under_their_tables(
        run_dir: Path) -> None:
    """issue 28 item 9: q, lift and design effect were columns nobody explained."""
    import re

    page = html.render(report.build([run_dir]))
    legends = [dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", m))
               for m in re.findall(r'<dl class="legend">(.*?)</dl>', page)]
    said = {term: text for legend in legends for term, text in legend.items()}
    assert "clustering widens the interval" in said["design effect"]
    assert "divided by its share of healthy windows" in said["lift"]
    assert "Benjamini-Hochberg" in said["q"]
    # each under the table whose column it explains (the column head's tooltip says the
    #   same); the design effect widens the 95% CI column's interval
    for column, term in (("95% CI", "design effect"), ("lift", "lift"), ("q", "q")):
        head = re.search(f'<th title="[^"]+">{re.escape(column)}</th>', page)
        assert head and head.start() < page.index(f"<dt>{term}</dt>"), term


def test_correlation_in_the_report_is_aligned_and_says_when_nothing_stands_out(
        run_dir: Path) -> None:
    r = report.build([run_dir])
    c = next(c for c in r.correlations if c.signature == r.signatures[0].id)
    assert c.step == "device-release" and c.failure_windows == 3
    assert "anecdotal" in c.note
    assert c.verdict().startswith(("nothing stands out", "stands out"))


def test_a_store_from_before_m004_still_gives_a_report(tmp_path: Path) -> None:
    r = report.build([make_run(tmp_path / "old", latest=False)])
    assert {s.cls for s in r.signatures} == {"crash", "error"}
    crash = next(s for s in r.signatures if s.cls == "crash")
    assert crash.rate is not None and crash.rate.units == 60
    assert "first failures" not in report.render_markdown(r)  # renders without error
    assert "<testsuites" in junit.render(r)


def test_summary_signatures_keep_their_documented_keys(run_dir: Path) -> None:
    got = report.signature_summaries(run_dir)
    assert {"id", "key", "class", "signal", "last_step", "thread_state", "frames", "count",
            "exposure", "rate_per_exposure", "ci_low", "ci_high", "patterns", "example",
            "description", "phase", "phase_detail", "threads", "upstream"} == set(got[0])
    json.dumps(got)


def test_report_exits_0_when_every_failure_is_known_and_1_when_one_is_new(
        run_dir: Path, known_file: Path, tmp_path: Path) -> None:
    assert run_cli("report", str(run_dir), "--known", str(known_file), "-o",
                   str(tmp_path / "r.txt")).rc == 1
    every = tmp_path / "all.toml"
    every.write_text('[[known]]\nmatch = "*"\nnote = "all of them"\n')
    res = run_cli("report", str(run_dir), "--known", str(every), "--format", "json")
    assert res.rc == 0 and res.json()["new_signatures"] == []
    bad = tmp_path / "bad.toml"
    bad.write_text('[[known]]\nsignature = "S1"\n')
    res = run_cli("report", str(run_dir), "--known", str(bad))
    assert res.rc == 2 and "needs a `note`" in res.stderr and "Traceback" not in res.stderr


def test_the_headline_of_a_merged_folder_counts_every_run_it_holds(tmp_path: Path) -> None:
    from stress.store import merge

    shards = [make_run(tmp_path / f"shard{i}") for i in range(3)]
    merged = tmp_path / "merged"
    merge.merge(shards, merged)
    r = report.build([merged])
    assert "in 180 jobs" in r.headline() and "3 run(s))" in r.headline()
    # the same runs given as separate folders read the same
    assert "3 run(s))" in report.build(shards).headline()


def test_junit_of_a_run_of_the_user_s_command_counts_jobs_tests_and_command_processes(
        run_dir: Path) -> None:
    """Issue 36 item 7 in JUnit: the summary and report of an exec run count jobs, tests and
    command processes, but its JUnit said 'invocations 0' and 'process exits 0' beside 30
    crashed processes (the shortfin suite), and 'in 30 job(s), 0 invocations'."""
    r = report.build([run_dir])
    r.totals.engines = {"exec"}
    r.totals.command_processes.update({"killed by a signal": 3, "exited 0": 57})
    r.totals.tests.update({"ran": 120, "passed": 118, "skipped": 2})
    r.totals.jobs_with_tests = 57
    suite = ET.fromstring(junit.render(r).split("\n", 1)[1])
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert "invocations" not in props and "process exits" not in props, props
    assert props["command processes"] == "60: exited 0 57, killed by a signal 3"
    assert props["tests"].startswith("120 run in 57 job(s)")
    errors = [e.text or "" for e in suite.iter("error")]
    assert errors and all("invocations" not in e for e in errors), errors
