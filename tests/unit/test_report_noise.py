"""Report noise (issue 28 item 9): a clean run's report is short; a row that says nothing is
left out (the "cannot tell" of every exit signature said once); the HTML's plots have units,
the failure rate over time is per job with intervals (a nearly empty stretch cannot spike to
1000), evidence paths are links, q / lift / design effect are explained, and known failures
are drawn muted on the GPU time line."""

from __future__ import annotations

import re
from pathlib import Path

from stress.analysis import html, report
from stress.store.db import RunStore
from tests.helpers.runs import exit_run, make_run, store_run


def test_a_clean_run_gives_a_short_report_that_says_no_failures_once(tmp_path: Path) -> None:
    r = report.build([exit_run(tmp_path / "run", failing=0)])
    text = report.render_text(r)
    md = report.render_markdown(r)

    assert text.lower().count("no failure") == 1 and md.lower().count("no failure") == 1
    assert "Failing jobs by factor" not in text + md  # 20 rows of 0/N jobs before
    assert "signature" not in text.lower()
    assert len(text.splitlines()) <= 25, text


def two_exit_signatures(run_dir: Path) -> Path:
    """30 one-job processes; 6 hang in their exit, 4 crash in it: two signatures at
    worker-exit, neither with a journal window to compare with."""
    run_dir.mkdir(parents=True)
    store = RunStore(run_dir)
    store.start_run("r1", 1, "iree-stress soak", {}, {"workers": 2, "threads": 1})
    for i in range(30):
        pid = 700 + i
        row = store.add_worker("r1", i % 2, i, pid)
        cls = "teardown_hang" if i < 6 else "crash" if i < 10 else None
        if cls:
            folder = run_dir / "failures" / f"{i:04d}-{cls}"
            folder.mkdir(parents=True)
            store.add_failure("r1", {"class": cls, "signal": "SIGSEGV" if cls == "crash"
                                     else None, "pid": pid, "worker": i % 2,
                                     "last_step": "worker-exit", "exposure": "process_exit",
                                     "artifacts": str(folder), "detected_at": 1000.0 + i})
        store.end_worker(row, 0, None, "exit", outcome="clean" if cls is None else
                         "hang" if cls == "teardown_hang" else "crash", device_used=1,
                         pattern="exit-clean")
    store.end_run("r1", "completed")
    store.close()
    return run_dir


def test_cannot_tell_is_said_once_for_every_exit_signature(tmp_path: Path) -> None:
    r = report.build([two_exit_signatures(tmp_path / "run")])
    assert len(r.signatures) == 2

    for out in (report.render_text(r), report.render_markdown(r), html.render(r)):
        assert out.count("cannot tell") == 1
        assert "0 failure and 0 healthy" not in out
        assert all(s.id in out.split("cannot tell")[1][:200] for s in r.signatures)


def test_the_html_plots_have_units_and_a_per_job_rate_over_time_with_intervals(
        tmp_path: Path) -> None:

    page = html.render(report.build([make_run(tmp_path / "run")]))

    plot = page.split('aria-label="Failing jobs over time')[1].split("</svg>")[0]
    values = [float(v) for v in re.findall(r"jobs\)?: ([\d.]+)%", plot)]
    assert values and max(values) <= 100  # a share of jobs: never "per 1,000" spikes
    assert plot.count('class="ci"') == len(values)  # each stretch with its interval
    assert "% of jobs failing" in plot and "time since the first job started (s)" in plot
    for svg in page.split('<svg class="plot"')[1:]:
        assert 'class="s axis y"' in svg and 'class="s axis x"' in svg


def test_evidence_is_a_link_and_the_statistics_are_explained(tmp_path: Path) -> None:
    run = two_exit_signatures(tmp_path / "run")
    page = html.render(report.build([run]))

    folder = run / "failures" / "0000-teardown_hang"
    assert f'<a href="{folder.as_uri()}">{folder}</a>' in page
    assert '<th title="95% interval of the rate' in page
    assert "<dt>design effect</dt>" in page


def test_known_failures_are_muted_on_the_gpu_time_line(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    store_run(tmp_path / "run", "timeline-stuck.json")
    hang = next(s for s in report.build([tmp_path / "run"]).signatures if s.cls == "hang")
    known = tmp_path / "known.toml"
    known.write_text(f'[[known]]\nsignature = "{hang.id}"\nnote = "seen before"\n')

    page = html.render(report.build([tmp_path / "run"], [known]))
    ticks = re.findall(r'<line class="fail (\w+)"[^>]*stroke="([^"]+)"', page)

    assert ticks and all(kind == "known" and colour == "#b8b8b8" for kind, colour in ticks)
    assert 'class="fail new"' in html.render(report.build([tmp_path / "run"]))
