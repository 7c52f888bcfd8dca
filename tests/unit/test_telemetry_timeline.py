"""The time line in the store and the report (issue 13): m005's tables, a stuck clock reported
like a failure signature with its samples, the HTML drawing the time line with phases and
failures, runs over several devices recording each worker's device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stress.analysis import html, report
from stress.store import db

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry"


def store_run(run_dir: Path, line: str, devices: tuple[str, ...] = ("cuda",)) -> None:
    """A small run whose GPU time line is the recorded `line`."""
    doc: dict[str, Any] = json.loads((DATA / line).read_text())
    store = db.RunStore(run_dir)
    store.start_run("r1", 1, "iree-stress soak", {"driver": "cuda"},
                    {"workers": len(devices), "threads": 1})
    for i, (t0, t1) in enumerate(doc["jobs"]):
        store.add_job("r1", i % len(devices), {
            "job": {"index": i, "program": "binary.add", "pattern": "shared", "seed": i,
                    "invocations": 10},
            "started": t0, "ended": t1, "pid": 100 + i % len(devices),
            "result": {"invocations": 10, "ok": 10, "miscompare": 0, "errors": 0,
                       "nondeterministic": 0, "devices_created": 1, "latency_sum_us": 5.0,
                       "latency_max_us": 1.0, "latency_hist": [0] * 22, "failures": []}},
            "ok")
    for w, dev in enumerate(devices):
        row = store.add_worker("r1", w, 0, 100 + w)
        if len(devices) > 1:
            store.set_worker_device(row, dev)
        store.end_worker(row, 0, None, "done")
    store.flush()  # (worker rows are written at the commit; this SQL goes around the store)
    store.db.execute("UPDATE workers SET ended_at=?", (doc["workers_done"],))
    store.add_failure("r1", {"class": "hang", "pid": 100 + len(devices) - 1, "worker": 0,
                             "message": "step past deadline", "last_step": "invoke",
                             "detected_at": doc["jobs"][3][0]})
    store.add_telemetry("r1", [{**s, "logical": 0, "source": "amd-smi"}
                               for s in doc["samples"]])
    store.add_mark("r1", doc["samples"][0]["t"], "phase-start", "soak")
    store.add_mark("r1", doc["workers_done"], "phase-start", "cooldown")
    store.end_run("r1", "completed")
    store.close()


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
