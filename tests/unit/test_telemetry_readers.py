"""Telemetry readers (issue 13): each tool's output, as recorded in tests/data/telemetry/ (the
AMD ones in the formats of AMD's documentation: no AMD GPU was reachable), read through a fake
executable on PATH into the same per-GPU numbers; the visible-device variables; the hip
library path; the time line's sampler child."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from stress.engine import telemetry, timeline

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry"


def fake_tool(folder: Path, name: str, output: Path) -> None:
    """`name` on PATH printing the recorded `output` (whatever its arguments)."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text(f"#!/bin/sh\ncat '{output}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    def put(name: str, recorded: str) -> None:
        fake_tool(tmp_path / "bin", name, DATA / recorded)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    return put


def test_nvidia_smi_output_reads_as_clocks_power_use_memory_and_temperature(
        on_path: Any) -> None:
    on_path("nvidia-smi", "nvidia-smi.csv")

    snap = telemetry.read_first("cuda", only=["nvidia-smi"])

    assert snap["source"] == "nvidia-smi"
    g0, g1 = snap["gpus"]
    assert (g0["sm_clock_mhz"], g0["power_w"], g0["mem_used_mib"], g0["temp_c"]) == \
        (1980.0, 126.41, 5513.0, 34.0)
    assert (g1["index"], g1["sm_clock_mhz"]) == (1, 345.0)


def test_amd_smi_metric_json_reads_the_gfx_clock_socket_power_and_vram(on_path: Any) -> None:
    on_path("amd-smi", "amd-smi-metric.json")  # ROCm 6.4+ shape, with a warning line first

    snap = telemetry.read_first("rocm", only=["amd-smi"])

    assert snap["source"] == "amd-smi"
    g0, g1 = snap["gpus"]
    assert (g0["sm_clock_mhz"], g0["mem_clock_mhz"], g0["power_w"], g0["gpu_util_pct"]) == \
        (2100.0, 900.0, 133.0, 0.0)
    assert (g0["mem_used_mib"], g0["temp_c"]) == (284.0, 43.0)  # edge N/A: hotspot
    assert (g1["index"], g1["sm_clock_mhz"], g1["power_w"]) == (1, 132.0, 131.0)


def test_older_amd_smi_output_with_bare_numbers_reads_the_same(on_path: Any) -> None:
    on_path("amd-smi", "amd-smi-metric-6.1.json")

    (g,) = telemetry.read_first("rocm", only=["amd-smi"])["gpus"]

    assert (g["sm_clock_mhz"], g["power_w"], g["gpu_util_pct"], g["mem_used_mib"]) == \
        (1500.0, 212.0, 37.0, 10240.0)


def test_rocm_smi_json_reads_mi300_and_rdna_power_keys(on_path: Any) -> None:
    on_path("rocm-smi", "rocm-smi.json")

    snap = telemetry.read_first("rocm", only=["rocm-smi"])

    assert snap["source"] == "rocm-smi"
    g0, g1 = snap["gpus"]
    assert (g0["sm_clock_mhz"], g0["mem_clock_mhz"], g0["power_w"], g0["temp_c"]) == \
        (2100.0, 900.0, 133.0, 35.0)
    assert round(g0["mem_used_mib"]) == 284
    assert (g1["sm_clock_mhz"], g1["power_w"]) == (132.0, 131.0)  # "Average ... Power"


def test_amd_readers_are_preferred_amdsmi_then_amd_smi_then_rocm_smi(on_path: Any) -> None:
    on_path("amd-smi", "amd-smi-metric.json")
    on_path("rocm-smi", "rocm-smi.json")

    assert [r.name for r in telemetry.readers_for("rocm")] == ["amdsmi", "amd-smi", "rocm-smi"]
    assert telemetry.read_first("rocm", only=["amd-smi", "rocm-smi"])["source"] == "amd-smi"


def test_the_amdsmi_python_module_is_read_field_by_field() -> None:
    class Fake:
        class AmdSmiClkType:
            GFX, MEM = "gfx", "mem"

        class AmdSmiMemoryType:
            VRAM = "vram"

        class AmdSmiTemperatureType:
            EDGE = "edge"

        class AmdSmiTemperatureMetric:
            CURRENT = "current"

        @staticmethod
        def amdsmi_get_clock_info(h: object, kind: str) -> dict[str, int]:
            return {"clk": 2100 if kind == "gfx" else 900, "min_clk": 500}

        @staticmethod
        def amdsmi_get_gpu_activity(h: object) -> dict[str, Any]:
            return {"gfx_activity": 0, "umc_activity": 0, "mm_activity": "N/A"}

        @staticmethod
        def amdsmi_get_power_info(h: object) -> dict[str, Any]:
            return {"current_socket_power": "N/A", "average_socket_power": 133}

        @staticmethod
        def amdsmi_get_gpu_memory_usage(h: object, kind: str) -> int:
            return 284 << 20

        @staticmethod
        def amdsmi_get_temp_metric(h: object, kind: str, metric: str) -> int:
            raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")

    g = telemetry.amdsmi_values(Fake, object())

    assert (g["sm_clock_mhz"], g["mem_clock_mhz"], g["power_w"], g["mem_used_mib"]) == \
        (2100.0, 900.0, 133.0, 284.0)
    assert g["temp_c"] is None  # one unsupported field does not lose the others


def test_hip_visible_devices_picks_among_rocr_visible_devices(on_path: Any,
                                                              monkeypatch: Any) -> None:
    gpus = [{"index": i} for i in range(4)]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1,2,3")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2")

    assert telemetry.visible("rocm", gpus) == [{"index": 3, "logical": 0}]


def test_cuda_visible_devices_numbers_gpus_as_the_runtime_does(on_path: Any,
                                                               monkeypatch: Any) -> None:
    on_path("nvidia-smi", "nvidia-smi.csv")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")

    (g,) = telemetry.read_first("cuda", only=["nvidia-smi"])["gpus"]

    assert (g["index"], g["logical"]) == (1, 0)
    assert telemetry.visible("cuda", [{"index": 0}], {"CUDA_VISIBLE_DEVICES": ""}) == []
    uuid = telemetry.visible("cuda", [{"index": 0}], {"CUDA_VISIBLE_DEVICES": "GPU-1a2b"})
    assert uuid == [{"index": 0, "logical": None}]


def test_device_uris_name_the_gpus_in_use_and_gpus_all_expands() -> None:
    assert telemetry.device_ordinals(["cuda://1", "cuda://0", "cuda://1"]) == [0, 1]
    assert telemetry.device_ordinals(["hip"]) == [0]
    assert telemetry.device_ordinals(["cuda://GPU-00000000-1111"]) is None
    gpus = [{"index": 5, "logical": 0}, {"index": 6, "logical": 1}]
    assert telemetry.in_use(gpus, [1]) == [{"index": 6, "logical": 1}]
    assert telemetry.in_use([{"index": 0, "logical": None}], [1]) == [{"index": 0,
                                                                         "logical": None}]
    assert telemetry.gpu_uris("hip", "all", 3) == ["hip://0", "hip://1", "hip://2"]
    assert telemetry.gpu_uris("cuda", "0,2", 3) == ["cuda://0", "cuda://2"]
    with pytest.raises(ValueError, match="only 1 GPU"):
        telemetry.gpu_uris("cuda", "2", 1)


def test_the_hip_library_path_is_read_from_the_drivers_device_info() -> None:
    info = ("# --device=hip://GPU-0\n#   AMD Instinct MI300X\n"
            "- amdhip64_dylib_path: /opt/rocm-7.11/lib/libamdhip64.so.7\n"
            "- gpu-arch-name: gfx942\n")
    assert telemetry.hip_library_path(info) == "/opt/rocm-7.11/lib/libamdhip64.so.7"
    assert telemetry.hip_library_path("- gpu-compute-capability: 9.0") is None
    assert telemetry.hip_library_path(None) is None


def test_the_sampler_child_prints_a_sample_each_period_until_closed(on_path: Any) -> None:
    on_path("nvidia-smi", "nvidia-smi.csv")
    sampler = timeline.Sampler("cuda", period_s=0.2, only=["nvidia-smi"])
    samples: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 30  # a loaded 2-core box: start-up is the slow part
        while len(samples) < 3 and time.monotonic() < deadline:
            samples += sampler.poll()
            time.sleep(0.05)
    finally:
        samples += sampler.close()

    assert len(samples) >= 3
    assert all(s["source"] == "nvidia-smi" for s in samples)
    rows = timeline.rows(samples[0], [1])  # the run uses cuda://1 only
    assert [(r["gpu"], r["sm_clock_mhz"]) for r in rows] == [(1, 345.0)]
    assert sampler.proc.poll() is not None, "the sampler child outlived close()"


def test_no_sampler_runs_for_cpu() -> None:
    assert timeline.start("local-task") is None
    assert timeline.start("local-sync") is None
