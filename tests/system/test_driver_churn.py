"""driver-churn (issue 39): each job creates a new HAL driver (not the cached one) and a device
on it, runs, then releases both and collects, so the driver's own teardown (where IREE's HIP
driver dlcloses the GPU library) runs once per job; its teardowns are counted as their own
exposure, and a fault in that teardown is in phase driver-destroy, rated per driver teardown."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.system

PROGRAMS = "unary.*.f32.*"


@pytest.mark.parametrize("device", ["local-task", "local-sync"])
def test_driver_churn_runs_on_cpu_and_counts_a_driver_teardown_per_job(
        tmp_path: Path, device: str, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / device
    res = run_cli("soak", "--target", "cpu", "--device", device, "--patterns", "driver-churn",
                  "--programs", PROGRAMS, "--duration", "8s", "--workers", "1", "--threads",
                  "2", "--json", "-q", "--results", str(run), timeout=300)
    assert res.rc == 0, res.stderr[-2000:]
    s = res.json()
    jobs = s["jobs_by_pattern"]["driver-churn"]
    assert jobs >= 2 and s["failures"] == dict.fromkeys(s["failures"], 0), s["failures"]
    dt = s["exposures"]["driver_teardowns"]
    assert dt["total"] == jobs and dt["by_pattern"] == {"driver-churn": jobs}, dt
    assert s["devices_created"] >= jobs
    text = run_cli("report", str(run)).stdout
    assert f"driver teardowns (a HAL driver created and destroyed in a job): {jobs:,}" in text


@pytest.mark.slow
def test_a_fault_in_the_drivers_own_teardown_is_driver_destroy_per_driver_teardown(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    """local-task's executor threads are joined when the driver, their last holder, goes:
    the fault library's join fault fires there, inside the job."""
    run = tmp_path / "run"
    res = run_cli("soak", "--target", "cpu", "--patterns", "driver-churn", "--programs",
                  PROGRAMS, "--duration", "25s", "--workers", "2", "--threads", "1", "-q",
                  "--results", str(run), "--env", f"LD_PRELOAD={fault_lib}",
                  "--env", "IREE_FAULT_JOIN=segv", "--env", "IREE_FAULT_JOIN_PROB=0.1",
                  timeout=400)
    assert res.rc == 1, res.stderr[-2000:]
    rep = run_cli("report", str(run), "--format", "json").json()
    s = next(x for x in rep["signatures"] if x["class"] == "crash")
    assert s["phases"].get("driver-destroy", 0) >= 1, s
    assert s["steps"].get("driver-release", 0) >= 1, s
    assert rep["exposure_totals"]["driver_teardowns"]["total"] >= 1
    if s["exposure"] == "driver teardown":
        assert s["rate"]["unit"] == "driver teardown", s["rate"]
