"""On a real GPU (cuda or hip), skipped cleanly elsewhere. Where no compiler is installed (the
lent H200), point IREE_STRESS_GPU_ARTIFACTS at a `compile --target cuda --export` folder.
The spreading of workers over several devices is tested here on cpu device URIs (one GPU on
the lent machine)."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from stress.engine.probe import probe
from tests.conftest import run_cli

pytestmark = [pytest.mark.system]


def _gpu_target() -> str | None:
    found = probe(sys.executable, ["cuda", "hip"], dict(os.environ))
    for driver, target in (("cuda", "cuda"), ("hip", "rocm")):
        if found.drivers.get(driver, {}).get("ok"):
            return target
    return None


TARGET = _gpu_target()
_skip_without_gpu = pytest.mark.skipif(TARGET is None, reason="no usable cuda/hip driver here")


def needs_gpu(f: Any) -> Any:
    return pytest.mark.gpu(_skip_without_gpu(f))


def gpu_args() -> list[str]:
    art = os.environ.get("IREE_STRESS_GPU_ARTIFACTS")
    return ["--target", TARGET or "cpu", *(["--artifacts", art] if art else [])]


@needs_gpu
def test_gpu_soak_over_the_device_lifecycle_patterns_is_clean(tmp_path: Path) -> None:
    res = run_cli("soak", *gpu_args(), "--patterns", "shared,per-thread,per-call,"
                  "instance-churn,process-per-job", "--programs", "unary.*,binary.add.*",
                  "--invocations", "3000", "--workers", "4", "--seed", "5", "--json", "-q",
                  "--results", str(tmp_path / "r"))
    s = res.json()
    assert res.rc == 0, (s["failures"], [f["message"][:200] for f in s["failures_detail"][:3]])
    assert s["invocations"] >= 3000 and s["devices_created"] > 20
    assert any("libcuda" in lib or "amdhip" in lib
               for lib in s["manifest"]["loaded_gpu_libraries"])


@needs_gpu
def test_a_gpu_hang_is_captured_with_gpu_telemetry_and_native_stacks(tmp_path: Path) -> None:
    res = run_cli("soak", *gpu_args(), "--patterns", "shared", "--programs", "unary.exp.*",
                  "--inject", "hang@invoke:0.01", "--max-failures", "1", "--timeout", "5s",
                  "--duration", "60s", "--workers", "1", "--threads", "1", "--json", "-q",
                  "--results", str(tmp_path / "r"))
    assert res.rc == 1
    # one thread: a second thread on the shared cuda device would first hit the fresh-thread
    # CUDA_ERROR_INVALID_CONTEXT finding (docs/gpu-h200/README.md)
    hang = next(f for f in res.json()["failures_detail"] if f["class"] == "hang")
    assert hang["last_step"] == "invoke"
    folder = Path(hang["artifacts"])
    before = json.loads((folder / "telemetry_before.json").read_text())
    assert before["source"] in ("nvml", "nvidia-smi", "amdsmi", "amd-smi", "rocm-smi")
    assert before["gpus"] or before.get("raw") or before.get("raw_text")
    assert "pause" in (folder / "stacks.txt").read_text()


@needs_gpu
def test_a_gpu_soak_records_a_time_line_of_the_gpu_in_use_with_its_phases(
        tmp_path: Path) -> None:
    run = tmp_path / "r"
    res = run_cli("soak", *gpu_args(), "--patterns", "shared,per-call", "--programs",
                  "unary.exp.*", "--duration", "6s", "--workers", "2", "--threads", "1",
                  "--json", "-q", "--results", str(run))
    assert res.rc in (0, 1), res.stderr[-2000:]
    db = sqlite3.connect(run / "stress.db")
    rows = db.execute("SELECT gpu, sm_clock_mhz, power_w FROM telemetry "
                      "WHERE error IS NULL").fetchall()
    marks = [r[0] for r in db.execute("SELECT label FROM timeline_marks "
                                      "WHERE kind='phase-start' ORDER BY t")]
    assert len(rows) >= 8, rows  # 6 s soak + teardown + 8 s cooldown at 1 Hz
    assert {r[0] for r in rows} == {0} and all(r[1] and r[2] for r in rows)
    assert marks == ["soak", "teardown", "cooldown"]
    page = run_cli("report", str(run), "--format", "html")
    assert '<svg class="timeline"' in page.stdout


def test_workers_spread_over_several_devices_and_each_failure_names_its_device(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "r"
    res = run_cli("soak", "--target", "cpu", "--device", "local-task://,local-sync://",
                  "--patterns", "shared", "--programs", "binary.add.f32.3x5x7+3x5x7",
                  "--workers", "2", "--threads", "1", "--invocations", "400",
                  "--inject", "raise@invoke:0.05", "--seed", "3", "--json", "-q",
                  "--results", str(run))
    assert res.rc == 1, res.stderr[-2000:]
    db = sqlite3.connect(run / "stress.db")
    devices = dict(db.execute("SELECT worker, device FROM workers"))
    assert devices == {0: "local-task://", 1: "local-sync://"}
    configs = {json.loads((run / f"worker-config-{i}.json").read_text())["device_uri"]
               for i in (0, 1)}
    assert configs == {"local-task://", "local-sync://"}
    report = json.loads(run_cli("report", str(run), "--format", "json").stdout)
    assert report["failures"].get("error", 0) > 0
    from stress.analysis import rundata

    failed = rundata.load([run]).failures
    assert failed and all(f["device"] in ("local-task://", "local-sync://") for f in failed)
    assert {f["device"] for f in failed} == {"local-task://", "local-sync://"}
