"""GPU telemetry snapshots (clocks, power, activity, memory) taken around a kill.

In the fusilli incident the SCLK stayed at ~2100 MHz while the process hung and fell to 132 MHz
only after the kill: one snapshot before and one after tells that story. Nothing on cpu.

A wedged driver wedges its tools too (an NVML call or `nvidia-smi` can sit in an ioctl for
minutes), so `snapshot` never reads in the parent: it runs the readers in a child process
(`python -m stress.engine.telemetry BACKEND`) under a bound and kills the child's whole process
group at it. Readers are plug-ins behind `TelemetryReader`, tried in preference order per
backend; the first that reads wins.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from stress.engine import procstate

SNAPSHOT_TIMEOUT_S: float = 10.0  # NVML init + one query takes ~0.1-1 s and nvidia-smi ~0.1-2 s
#   on a healthy machine (H200: 0.3 s); past this the driver is wedged, and the evidence and
#   the kill must go on without it
_TOOL_TIMEOUT_S: float = 5.0  # one smi command inside the child: leaves room for the next
#   reader within the snapshot's bound when one tool stalls and another may still answer
_RAW_MAX_CHARS: int = 20_000  # an 8-GPU amd-smi metric dump is ~15 kB
_PROGRESS_KEY: str = "trying"  # child -> parent: which reader runs now (named on a timeout)
_RESULT_KEY: str = "result"


class TelemetryReader(Protocol):
    """One telemetry tool. `available()` is cheap (an import or a PATH lookup, no driver
    call); `read()` may call the driver and raise anything: the caller catches it. The dict it
    returns holds `gpus` (a list of per-GPU dicts) or `raw`/`raw_text` for tools not parsed
    yet."""

    name: str

    def available(self) -> bool: ...

    def read(self) -> dict[str, Any]: ...


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _run_tool(argv: list[str]) -> str:
    # in the snapshot child's process group: the parent's kill at its bound reaches the tool
    run = procstate.run_bounded(argv, _TOOL_TIMEOUT_S, new_group=False)
    if run.rc != 0:
        raise RuntimeError(run.describe() + (f": {run.stderr.strip()[:200]}"
                                             if run.stderr.strip() else ""))
    return run.stdout


class NvmlReader:
    """NVIDIA through pynvml (nvidia-ml-py): SM/memory clocks, power, utilization, memory."""

    name = "nvml"

    def available(self) -> bool:
        return _importable("pynvml")

    def read(self) -> dict[str, Any]:
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
        return {"gpus": gpus}


_SMI_FIELDS = ["index", "sm_clock_mhz", "mem_clock_mhz", "power_w", "gpu_util_pct",
               "mem_used_mib"]


class NvidiaSmiReader:
    """NVIDIA through `nvidia-smi --query-gpu` (CSV, values as strings)."""

    name = "nvidia-smi"

    def available(self) -> bool:
        return shutil.which("nvidia-smi") is not None

    def read(self) -> dict[str, Any]:
        fields = "index,clocks.sm,clocks.mem,power.draw,utilization.gpu,memory.used"
        out = _run_tool(["nvidia-smi", f"--query-gpu={fields}",
                         "--format=csv,noheader,nounits"])
        gpus = []
        for line in out.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            gpus.append(dict(zip(_SMI_FIELDS, parts, strict=False)))
        return {"gpus": gpus}


class AmdSmiLibReader:
    """AMD through the amdsmi Python bindings: GFX clock, activity, power."""

    name = "amdsmi"

    def available(self) -> bool:
        return _importable("amdsmi")

    def read(self) -> dict[str, Any]:
        import amdsmi  # type: ignore[import-not-found]

        amdsmi.amdsmi_init()
        gpus = []
        for i, h in enumerate(amdsmi.amdsmi_get_processor_handles()):
            act = amdsmi.amdsmi_get_gpu_activity(h)
            clk = amdsmi.amdsmi_get_clock_info(h, amdsmi.AmdSmiClkType.GFX)
            power = amdsmi.amdsmi_get_power_info(h)
            gpus.append({"index": i, "sclk_mhz": clk.get("clk"), "activity": act,
                         "power": power})
        return {"gpus": gpus}


class AmdSmiCliReader:
    """AMD through `amd-smi metric --json` (kept raw; parsing comes with the GPU work)."""

    name = "amd-smi"

    def available(self) -> bool:
        return shutil.which("amd-smi") is not None

    def read(self) -> dict[str, Any]:
        out = _run_tool(["amd-smi", "metric", "--json"])
        try:
            return {"raw": json.loads(out)}
        except json.JSONDecodeError:
            return {"raw_text": out[:_RAW_MAX_CHARS]}


class RocmSmiReader:
    """AMD through the older `rocm-smi --json` (kept raw)."""

    name = "rocm-smi"

    def available(self) -> bool:
        return shutil.which("rocm-smi") is not None

    def read(self) -> dict[str, Any]:
        out = _run_tool(["rocm-smi", "--showclocks", "--showpower", "--showuse",
                         "--showmemuse", "--json"])
        return {"raw_text": out[:_RAW_MAX_CHARS]}


def readers_for(backend: str, only: Sequence[str] | None = None) -> list[TelemetryReader]:
    """The readers for a backend ("cuda", "rocm"), in preference order; [] for others.
    `only`: keep just the readers of these names (in the same order)."""
    readers: list[TelemetryReader] = []
    if backend == "cuda":
        readers = [NvmlReader(), NvidiaSmiReader()]
    elif backend == "rocm":
        readers = [AmdSmiLibReader(), AmdSmiCliReader(), RocmSmiReader()]
    return [r for r in readers if only is None or r.name in only]


def read_first(backend: str, progress: Callable[[str], None] | None = None,
               only: Sequence[str] | None = None) -> dict[str, Any]:
    """In *this* process, unbounded: the first available reader that reads, as
    {"source": name, ...its dict, "errors": [earlier readers' failures]}; {"source": None,
    "note": ...} when none could. `progress(name)` is called before each reader. Used by the
    child of `snapshot`; call `snapshot` instead."""
    errors = []
    tried = []
    for reader in readers_for(backend, only):
        if not reader.available():
            continue
        tried.append(reader.name)
        if progress is not None:
            progress(reader.name)
        try:
            data = reader.read()
        except Exception as exc:  # a driver library raises its own error types
            errors.append(f"{reader.name}: {type(exc).__name__}: {exc}"[:300])
            continue
        return {"source": reader.name, **data, **({"errors": errors} if errors else {})}
    names = ", ".join(r.name for r in readers_for(backend, only))
    return {"source": None, "note": f"none of {names} usable" if not tried else
            f"every reader failed ({', '.join(tried)})", "errors": errors}


def snapshot(backend: str, timeout_s: float = SNAPSHOT_TIMEOUT_S,
             only: Sequence[str] | None = None) -> dict[str, Any]:
    """One telemetry snapshot for `backend` ("cuda", "rocm"; anything else gives a note), read
    in a child process and returned within about `timeout_s` + 2 s whatever the driver does:
    {"time": wall clock at the start, "backend", "source": the reader that answered (or the one
    still running when time ran out), "gpus": [...] or "raw"/"raw_text", "errors": [...]}; on
    the bound, {"time", "backend", "source", "error": "timed out after Ns"}; when the child
    could not run, "error" says why. `only`: try just the readers of these names. Never
    raises."""
    snap: dict[str, Any] = {"time": time.time(), "backend": backend}
    if not readers_for(backend, only):
        snap["note"] = f"no GPU telemetry for {backend}"
        return snap
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                else "")
    argv = [sys.executable, "-m", "stress.engine.telemetry", backend, *(only or [])]
    run = procstate.run_bounded(argv, timeout_s, env=env)
    source, result = _parse_child(run.stdout)
    if result is not None:
        snap.update(result)
    elif run.timed_out:
        snap.update({"source": source, "error": f"timed out after {timeout_s:g}s"})
    else:
        snap.update({"source": source, "error": f"telemetry reader {run.describe()}: "
                     f"{run.stderr.strip()[-300:]}"})
    snap["seconds"] = round(run.seconds, 3)
    return snap


def _parse_child(stdout: str) -> tuple[str | None, dict[str, Any] | None]:
    source, result = None, None
    for line in stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(msg, dict):
            if _PROGRESS_KEY in msg:
                source = str(msg[_PROGRESS_KEY])
            if isinstance(msg.get(_RESULT_KEY), dict):
                result = msg[_RESULT_KEY]
    return source, result


def _child_main(argv: list[str]) -> int:
    def progress(name: str) -> None:
        print(json.dumps({_PROGRESS_KEY: name}), flush=True)

    backend = argv[0] if argv else ""
    result = read_first(backend, progress, argv[1:] or None)
    print(json.dumps({_RESULT_KEY: result}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
