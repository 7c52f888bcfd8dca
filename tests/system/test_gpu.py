"""On a real GPU (cuda or hip), skipped cleanly elsewhere. Where no compiler is installed (the
lent H200), point IREE_STRESS_GPU_ARTIFACTS at a `compile --target cuda --export` folder."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from stress.engine.probe import probe
from tests.conftest import run_cli

pytestmark = [pytest.mark.gpu, pytest.mark.system]


def _gpu_target() -> str | None:
    found = probe(sys.executable, ["cuda", "hip"], dict(os.environ))
    for driver, target in (("cuda", "cuda"), ("hip", "rocm")):
        if found.drivers.get(driver, {}).get("ok"):
            return target
    return None


TARGET = _gpu_target()
needs_gpu = pytest.mark.skipif(TARGET is None, reason="no usable cuda/hip driver here")


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
