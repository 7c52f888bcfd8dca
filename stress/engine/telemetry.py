"""GPU telemetry snapshots (clocks, power, activity, memory) taken around a kill.

In the fusilli incident the SCLK stayed at ~2100 MHz while the process hung and fell to 132 MHz
only after the kill: one snapshot before and one after tells that story. Nothing on cpu.

A wedged driver wedges its tools too (an NVML call or `nvidia-smi` can sit in an ioctl for
minutes), so `snapshot` never reads in the parent: it runs the readers in a child process
(`python -m stress.engine.telemetry BACKEND`) under a bound and kills the child's whole process
group at it. Readers are plug-ins behind `TelemetryReader`, tried in preference order per
backend; the first that reads wins.

Every reader returns the same per-GPU keys (`METRICS`, plus `index`: the tool's GPU number),
parsed by pure functions tested against recorded outputs of each tool (tests/data/telemetry/),
so a time line can be drawn and compared whatever tool read it. `visible` keeps the GPUs a
run may use (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES) and numbers them
as the runtime does (`logical`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
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
_MIB: int = 1 << 20

# The per-GPU numbers every reader gives (None where a tool has no such number): what the time
# line stores and the "busy while idle" detector compares.
METRICS: tuple[str, ...] = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "gpu_util_pct",
                            "mem_used_mib", "temp_c")
# Which variable picks the GPUs a runtime sees, per backend, in the order the runtime reads
# them (HIP applies HIP_VISIBLE_DEVICES on top of ROCR's; we take the first one set).
VISIBLE_ENV: dict[str, tuple[str, ...]] = {
    "cuda": ("CUDA_VISIBLE_DEVICES",), "rocm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")}


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
                         "gpu_util_pct": util.gpu, "mem_used_mib": mem.used // _MIB,
                         "temp_c": pynvml.nvmlDeviceGetTemperature(
                             h, pynvml.NVML_TEMPERATURE_GPU)})
        return {"gpus": gpus}


# nvidia-smi --query-gpu names, in the order of our keys (index first, then METRICS)
NVIDIA_SMI_QUERY: str = ("index,clocks.sm,clocks.mem,power.draw,utilization.gpu,memory.used,"
                         "temperature.gpu")


def number(value: Any) -> float | None:
    """A tool's number as a float: 123, "123.5", "132Mhz", "(2100Mhz)", "133.0 W",
    {"value": 5, "unit": "%"} (amd-smi); None for "N/A", "[N/A]", "[Not Supported]", null."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    m = re.search(r"-?\d+(?:\.\d+)?", str(value))
    return float(m.group()) if m else None


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=NVIDIA_SMI_QUERY --format=csv,noheader,nounits` -> GPUs."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(METRICS) + 1:
            continue
        idx = number(parts[0])
        if idx is None:
            continue
        gpus.append({"index": int(idx),
                     **{k: number(v) for k, v in zip(METRICS, parts[1:], strict=True)}})
    return gpus


def _first(d: Any, *keys: str) -> float | None:
    for k in keys:
        if isinstance(d, dict) and k in d:
            v = number(d[k])
            if v is not None:
                return v
    return None


def parse_amd_smi_metric(doc: Any) -> list[dict[str, Any]]:
    """`amd-smi metric --json`: a list of per-GPU objects (ROCm 6.0-6.3) or {"gpu_data": [...]}
    (6.4+); values are {"value", "unit"} objects, bare numbers (older) or "N/A". The GFX clock
    is `clock.gfx_0.clk` (one per XCD on MI300: the first is shown by amd-smi too)."""
    items = doc.get("gpu_data", []) if isinstance(doc, dict) else doc
    gpus = []
    for i, g in enumerate(items if isinstance(items, list) else []):
        if not isinstance(g, dict):
            continue
        clock, usage = g.get("clock") or {}, g.get("usage") or {}
        power, temp = g.get("power") or {}, g.get("temperature") or {}
        mem = g.get("mem_usage") or {}

        def clk(name: str, clock: Any = clock) -> float | None:
            c = clock.get(name) if isinstance(clock, dict) else None
            return _first(c, "clk", "cur_clk") if isinstance(c, dict) else number(c)

        idx = number(g.get("gpu"))
        used = _first(mem, "used_vram")
        unit = (mem.get("used_vram") or {}).get("unit", "MB") if isinstance(mem, dict) and \
            isinstance(mem.get("used_vram"), dict) else "MB"
        gpus.append({"index": int(idx) if idx is not None else i,
                     "sm_clock_mhz": clk("gfx_0"), "mem_clock_mhz": clk("mem_0"),
                     "power_w": _first(power, "socket_power", "average_socket_power",
                                       "current_socket_power"),
                     "gpu_util_pct": _first(usage, "gfx_activity"),
                     "mem_used_mib": None if used is None else
                     used / _MIB if unit == "B" else used,
                     "temp_c": _first(temp, "edge", "hotspot")})
    return gpus


def parse_rocm_smi(doc: Any) -> list[dict[str, Any]]:
    """`rocm-smi --showclocks --showpower --showuse --showtemp --showmeminfo vram --json`:
    {"card0": {"sclk clock speed:": "(2100Mhz)", "GPU use (%)": "0", ...}, "system": {...}}.
    Power is "Average Graphics Package Power (W)" (RDNA) or "Current Socket Graphics Package
    Power (W)" (MI300)."""
    gpus = []
    for key, card in (doc.items() if isinstance(doc, dict) else []):
        m = re.fullmatch(r"card(\d+)", key)
        if m is None or not isinstance(card, dict):
            continue
        used = _first(card, "VRAM Total Used Memory (B)")
        gpus.append({"index": int(m.group(1)),
                     "sm_clock_mhz": _first(card, "sclk clock speed:"),
                     "mem_clock_mhz": _first(card, "mclk clock speed:"),
                     "power_w": _first(card, "Current Socket Graphics Package Power (W)",
                                       "Average Graphics Package Power (W)"),
                     "gpu_util_pct": _first(card, "GPU use (%)"),
                     "mem_used_mib": None if used is None else used / _MIB,
                     "temp_c": _first(card, "Temperature (Sensor edge) (C)",
                                      "Temperature (Sensor junction) (C)")})
    return sorted(gpus, key=lambda g: int(g["index"]))


def _json_doc(out: str) -> Any:
    """The JSON in a tool's stdout; amd-smi may print a warning line before it."""
    start = min((i for i in (out.find("["), out.find("{")) if i >= 0), default=-1)
    return json.loads(out[start:] if start >= 0 else out)


class NvidiaSmiReader:
    """NVIDIA through `nvidia-smi --query-gpu` (CSV, values as strings)."""

    name = "nvidia-smi"

    def available(self) -> bool:
        return shutil.which("nvidia-smi") is not None

    def read(self) -> dict[str, Any]:
        out = _run_tool(["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}",
                         "--format=csv,noheader,nounits"])
        gpus = parse_nvidia_smi(out)
        if not gpus:
            raise RuntimeError(f"nvidia-smi printed no GPU: {out.strip()[:200]!r}")
        return {"gpus": gpus}


def amdsmi_values(amdsmi: Any, h: Any) -> dict[str, Any]:
    """One GPU's METRICS through the amdsmi module (passed in, so tests give a fake one).
    Each call may fail alone (a field a GPU does not report): that number is None."""
    def get(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:  # amdsmi raises AmdSmiLibraryException for unsupported fields
            return None

    gfx = get(lambda: amdsmi.amdsmi_get_clock_info(h, amdsmi.AmdSmiClkType.GFX)) or {}
    mem_clk = get(lambda: amdsmi.amdsmi_get_clock_info(h, amdsmi.AmdSmiClkType.MEM)) or {}
    act = get(lambda: amdsmi.amdsmi_get_gpu_activity(h)) or {}
    power = get(lambda: amdsmi.amdsmi_get_power_info(h)) or {}
    vram = get(lambda: amdsmi.amdsmi_get_gpu_memory_usage(h, amdsmi.AmdSmiMemoryType.VRAM))
    temp = get(lambda: amdsmi.amdsmi_get_temp_metric(
        h, amdsmi.AmdSmiTemperatureType.EDGE, amdsmi.AmdSmiTemperatureMetric.CURRENT))
    watts = _first(power, "current_socket_power", "average_socket_power", "socket_power")
    return {"sm_clock_mhz": _first(gfx, "clk", "cur_clk"),
            "mem_clock_mhz": _first(mem_clk, "clk", "cur_clk"),
            "power_w": watts, "gpu_util_pct": _first(act, "gfx_activity"),
            "mem_used_mib": None if number(vram) is None else (number(vram) or 0.0) / _MIB,
            "temp_c": number(temp)}


class AmdSmiLibReader:
    """AMD through the amdsmi Python bindings (ROCm 6+): GFX and memory clocks, activity,
    socket power, VRAM used, edge temperature."""

    name = "amdsmi"

    def available(self) -> bool:
        return _importable("amdsmi")

    def read(self) -> dict[str, Any]:
        import amdsmi  # type: ignore[import-not-found]

        amdsmi.amdsmi_init()
        try:
            gpus = []
            for i, h in enumerate(amdsmi.amdsmi_get_processor_handles()):
                gpus.append({"index": i, **amdsmi_values(amdsmi, h)})
            return {"gpus": gpus}
        finally:
            amdsmi.amdsmi_shut_down()


class AmdSmiCliReader:
    """AMD through `amd-smi metric --json` (ROCm 6+)."""

    name = "amd-smi"

    def available(self) -> bool:
        return shutil.which("amd-smi") is not None

    def read(self) -> dict[str, Any]:
        out = _run_tool(["amd-smi", "metric", "--json"])
        try:
            gpus = parse_amd_smi_metric(_json_doc(out))
        except json.JSONDecodeError:
            return {"raw_text": out[:_RAW_MAX_CHARS]}
        if not gpus:
            raise RuntimeError(f"amd-smi printed no GPU: {out.strip()[:200]!r}")
        return {"gpus": gpus}


ROCM_SMI_ARGV: list[str] = ["rocm-smi", "--showclocks", "--showpower", "--showuse",
                             "--showtemp", "--showmeminfo", "vram", "--json"]


class RocmSmiReader:
    """AMD through the older `rocm-smi --json` (ROCm 5 and 6; deprecated for amd-smi)."""

    name = "rocm-smi"

    def available(self) -> bool:
        return shutil.which("rocm-smi") is not None

    def read(self) -> dict[str, Any]:
        out = _run_tool(ROCM_SMI_ARGV)
        try:
            gpus = parse_rocm_smi(_json_doc(out))
        except json.JSONDecodeError:
            return {"raw_text": out[:_RAW_MAX_CHARS]}
        if not gpus:
            raise RuntimeError(f"rocm-smi printed no GPU: {out.strip()[:200]!r}")
        return {"gpus": gpus}


def _indices(value: str) -> list[int] | None:
    tokens = [t.strip() for t in value.split(",") if t.strip()]
    return [int(t) for t in tokens] if all(t.isdigit() for t in tokens) else None


def visible(backend: str, gpus: list[dict[str, Any]],
            env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The GPUs a runtime of `backend` may use under `env` (default: ours), each with
    `logical`: the number the runtime gives it (cuda://1, hip://1). For rocm,
    ROCR_VISIBLE_DEVICES picks among the physical GPUs and HIP_VISIBLE_DEVICES among those.
    A list naming GPUs by UUID cannot be mapped to the tools' numbers: all are kept, `logical`
    None."""
    env = os.environ if env is None else env
    chosen = sorted(gpus, key=lambda g: int(g.get("index") or 0))
    for var in reversed(VISIBLE_ENV.get(backend, ())):  # ROCR first, then HIP on top of it
        value = env.get(var)
        if value is None:
            continue
        picks = _indices(value)
        if picks is None:
            return [{**g, "logical": None} for g in gpus]
        chosen = [chosen[i] for i in picks if 0 <= i < len(chosen)]
    return [{**g, "logical": i} for i, g in enumerate(chosen)]


def device_ordinals(uris: Sequence[str]) -> list[int] | None:
    """The logical GPU numbers a run's device URIs name ("cuda://1" -> 1; a bare "cuda" is the
    driver's first device, 0); None when one names its GPU another way (a UUID): all of them."""
    out = []
    for uri in uris:
        _, sep, path = uri.partition("://")
        if not sep or not path:
            out.append(0)
        elif path.isdigit():
            out.append(int(path))
        else:
            return None
    return sorted(set(out))


def in_use(gpus: list[dict[str, Any]], ordinals: list[int] | None) -> list[dict[str, Any]]:
    """The visible GPUs a run uses (`ordinals` from device_ordinals; None: all visible). GPUs
    whose runtime number is unknown (`logical` None: named by UUID) are all kept."""
    if ordinals is None:
        return gpus
    return [g for g in gpus if g.get("logical") is None or g.get("logical") in ordinals]


def gpu_uris(driver: str, spec: str, count: int) -> list[str]:
    """`--gpus` -> device URIs: "all" (every one of `count` visible GPUs), "N" (the first N) or
    "0,2" (these); ValueError names what is wrong."""
    if spec == "all":
        picks = list(range(count))
    elif spec.isdigit():
        if int(spec) > count:
            raise ValueError(f"--gpus {spec}: only {count} GPU(s) visible")
        picks = list(range(int(spec)))
    else:
        found = _indices(spec)
        if not found or any(i >= count for i in found):
            raise ValueError(f"--gpus {spec!r}: want all, a count or indices below {count}")
        picks = found
    if not picks:
        raise ValueError("--gpus: no GPU visible")
    return [f"{driver}://{i}" for i in picks]


def hip_library_path(device_info: str | None) -> str | None:
    """The libamdhip64 the hip driver loaded, from its dump_device_info text
    ("- amdhip64_dylib_path: /opt/rocm/lib/libamdhip64.so"); None when absent."""
    m = re.search(r"amdhip64_dylib_path:\s*(\S+)", device_info or "")
    return m.group(1) if m else None


def readers_for(backend: str, only: Sequence[str] | None = None) -> list[TelemetryReader]:
    """The readers for a backend ("cuda", "rocm"), in preference order; [] for others.
    `only`: keep just the readers of these names (in the same order)."""
    readers: list[TelemetryReader] = []
    if backend == "cuda":
        readers = [NvmlReader(), NvidiaSmiReader()]
    elif backend == "rocm":
        readers = [AmdSmiLibReader(), AmdSmiCliReader(), RocmSmiReader()]
    return [r for r in readers if only is None or r.name in only]


def none_usable(backend: str, only: Sequence[str] | None = None) -> str:
    """One line when `backend` has readers but none of their tools is here; "" when one is,
    or for a backend without telemetry (cpu, vulkan). Cheap: no driver call."""
    readers = readers_for(backend, only)
    if not readers or any(r.available() for r in readers):
        return ""
    return (f"none: no {backend} telemetry tool here ({', '.join(r.name for r in readers)}), "
            "so no GPU time line or snapshots")


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
        if isinstance(data.get("gpus"), list):
            data["gpus"] = visible(backend, data["gpus"])
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
    missing = none_usable(backend, only)
    if missing:  # no child to start: no tool would answer it
        snap.update({"source": None, "note": missing})
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
