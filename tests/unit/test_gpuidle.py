"""The "busy while idle" detector (issue 13) on recorded time lines: one with a clock stuck high
after the work (the shape of the fusilli incident), one where clocks fall as they should, one
from a GPU that keeps its clocks high even when idle (its own baseline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stress.analysis import gpuidle

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry"


def recorded(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / name).read_text())
    doc["jobs"] = [tuple(j) for j in doc["jobs"]]
    return doc


def test_a_clock_stuck_high_after_every_worker_exited_is_one_episode_with_its_samples() -> None:
    line = recorded("timeline-stuck.json")

    (ep,) = gpuidle.detect(line["samples"], line["jobs"], line["workers_done"], "r", 0)

    assert ep.where == "after all workers exited"
    assert ep.metrics == ("clock", "power")
    assert ep.seconds >= 25
    assert ep.baseline.sm_clock_mhz == 132 and ep.baseline.source == "pre-run median"
    assert ep.peak("sm_clock_mhz") == 2100
    assert ep.samples and all(s["sm_clock_mhz"] == 2100 for s in ep.samples)
    assert "GPU 0 busy for" in ep.describe() and "2100 MHz (idle baseline 132)" in ep.describe()


def test_clocks_that_fall_after_the_work_give_no_episode() -> None:
    line = recorded("timeline-normal.json")

    assert gpuidle.detect(line["samples"], line["jobs"], line["workers_done"]) == []


def test_a_gpu_that_idles_at_high_clocks_is_its_own_baseline() -> None:
    line = recorded("timeline-stuck.json")
    for s in line["samples"]:  # fixed application clocks: high before, during and after
        s["sm_clock_mhz"], s["power_w"] = 1980, 120

    assert gpuidle.detect(line["samples"], line["jobs"], line["workers_done"]) == []


def test_high_clocks_in_a_long_gap_between_jobs_are_flagged_as_no_job_in_flight() -> None:
    line = recorded("timeline-normal.json")
    jobs = [j for j in line["jobs"] if not 20 < j[0] - line["samples"][0]["t"] < 32]

    (ep,) = gpuidle.detect(line["samples"], jobs, line["workers_done"])

    assert ep.where == "with no job in flight"
    assert ep.metrics == ("clock", "power")


def test_a_short_ramp_down_below_the_threshold_is_not_flagged() -> None:
    line = recorded("timeline-stuck.json")
    end = line["workers_done"] + gpuidle.THRESHOLD_S - 2
    samples = [s for s in line["samples"] if s["t"] <= end]

    assert gpuidle.detect(samples, line["jobs"], line["workers_done"]) == []


def test_episodes_become_signatures_counted_per_gpu_and_place() -> None:
    line = recorded("timeline-stuck.json")
    eps = gpuidle.detect(line["samples"], line["jobs"], line["workers_done"], "r", 0)
    eps += gpuidle.detect(line["samples"], line["jobs"], line["workers_done"], "r2", 0)

    (sig,) = gpuidle.signatures(eps)

    assert sig.cls == gpuidle.CLASS and sig.count == 2
    assert sig.key.step == "after-exit"
    assert len(sig.rows) == 2 and sig.rows[0]["samples"]
