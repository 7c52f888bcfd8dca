"""The time line in the store and the report (issue 13): m005's tables, a stuck clock reported
like a failure signature with its samples, the HTML drawing the time line with phases and
failures, runs over several devices recording each worker's device."""

from __future__ import annotations

from pathlib import Path

from stress.analysis import html, report
from stress.store import db
from tests.helpers.runs import store_run


def test_m005_adds_the_time_line_tables_and_the_workers_device() -> None:
    conn = db.connect(Path(":memory:"))
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    cols = {r[1] for r in conn.execute("PRAGMA table_info(telemetry)")}
    workers = {r[1] for r in conn.execute("PRAGMA table_info(workers)")}

    assert {"telemetry", "timeline_marks"} <= tables
    assert {"t", "gpu", "logical", "sm_clock_mhz", "power_w", "gpu_util_pct", "mem_used_mib",
            "temp_c", "error"} <= cols
    assert "device" in workers
    assert (5, "m005_telemetry") in [(v, n) for v, n, _ in db.MIGRATIONS]


def test_a_stuck_clock_is_a_signature_in_the_report_with_its_samples(tmp_path: Path) -> None:
    store_run(tmp_path, "timeline-stuck.json")

    r = report.build([tmp_path])
    out = r.as_dict()

    (busy,) = [s for s in r.signatures if s.cls == "gpu_busy_idle"]
    assert busy.id in out["new_signatures"]
    assert sorted(s.cls for s in r.signatures) == ["gpu_busy_idle", "hang"]
    (ep,) = out["busy_idle"]
    assert ep["where"] == "after all workers exited" and ep["samples"]
    assert out["telemetry"][0]["sm_clock_mhz"] == {"min": 132.0, "max": 2100.0}
    assert "2100 MHz (idle baseline 132)" in report.render_text(r)


def test_a_normal_time_line_reports_no_gpu_signature(tmp_path: Path) -> None:
    store_run(tmp_path, "timeline-normal.json")

    r = report.build([tmp_path])

    assert [s.cls for s in r.signatures] == ["hang"]
    assert r.as_dict()["busy_idle"] == []


def test_the_html_draws_the_time_line_with_phases_failures_and_the_episode(
        tmp_path: Path) -> None:
    store_run(tmp_path, "timeline-stuck.json")

    page = html.render(report.build([tmp_path]))

    assert page.count('<svg class="timeline"') == 1
    assert 'class="busyidle"' in page
    assert ">cooldown</text>" in page and 'class="fail new"' in page
    assert "<polyline" in page


def test_each_failure_carries_the_device_of_its_worker(tmp_path: Path) -> None:
    store_run(tmp_path, "timeline-normal.json", devices=("cuda://0", "cuda://1"))

    r = report.build([tmp_path])

    assert [f["device"] for f in r.data.failures] == ["cuda://1"]
    assert sorted(w["device"] for w in r.data.workers) == ["cuda://0", "cuda://1"]
