"""GPU telemetry snapshots (clocks, power, activity, memory) taken around a kill.

In the fusilli incident the SCLK stayed at ~2100 MHz while the process hung and fell to 132 MHz
only after the kill: one snapshot before and one after tells that story. Nothing on cpu.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

_TOOL_TIMEOUT_S: float = 5.0  # smi tools can stall on a wedged GPU; never let them block a kill


def snapshot(backend: str) -> dict[str, Any]:
    snap: dict[str, Any] = {"time": time.time(), "backend": backend}
    if backend == "cuda":
        snap.update(_nvidia())
    elif backend == "rocm":
        snap.update(_amd())
    else:
        snap["note"] = "no GPU telemetry on cpu"
    return snap


def _run(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S)
        return out.stdout if out.returncode == 0 else None
    except (subprocess.TimeoutExpired, OSError):
        return None


def _nvidia() -> dict[str, Any]:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append({"index": i,
                         "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                         "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                         "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                         "gpu_util_pct": util.gpu, "mem_used_mib": mem.used // (1 << 20)})
        return {"source": "nvml", "gpus": gpus}
    except Exception:
        pass
    fields = "index,clocks.sm,clocks.mem,power.draw,utilization.gpu,memory.used"
    out = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
    if out is None:
        return {"source": None, "note": "neither pynvml nor nvidia-smi usable"}
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        gpus.append(dict(zip(["index", "sm_clock_mhz", "mem_clock_mhz", "power_w",
                              "gpu_util_pct", "mem_used_mib"], parts, strict=False)))
    return {"source": "nvidia-smi", "gpus": gpus}


def _amd() -> dict[str, Any]:
    try:
        import amdsmi  # type: ignore[import-not-found]

        amdsmi.amdsmi_init()
        gpus = []
        for i, h in enumerate(amdsmi.amdsmi_get_processor_handles()):
            act = amdsmi.amdsmi_get_gpu_activity(h)
            clk = amdsmi.amdsmi_get_clock_info(h, amdsmi.AmdSmiClkType.GFX)
            power = amdsmi.amdsmi_get_power_info(h)
            gpus.append({"index": i, "sclk_mhz": clk.get("clk"), "activity": act,
                         "power": power})
        return {"source": "amdsmi", "gpus": gpus}
    except Exception:
        pass
    out = _run(["amd-smi", "metric", "--json"])
    if out is not None:
        try:
            return {"source": "amd-smi", "raw": json.loads(out)}
        except json.JSONDecodeError:
            return {"source": "amd-smi", "raw_text": out[:20000]}
    out = _run(["rocm-smi", "--showclocks", "--showpower", "--showuse", "--showmemuse", "--json"])
    if out is not None:
        return {"source": "rocm-smi", "raw_text": out[:20000]}
    return {"source": None, "note": "none of amdsmi, amd-smi, rocm-smi usable"}
