"""Which HAL drivers are usable, asked of the worker interpreter in a throwaway process (a
broken GPU stack may crash or hang the asker)."""

from __future__ import annotations

import json
import subprocess

_PROBE_TIMEOUT_S: float = 60.0
_PROBE = r"""
import json, sys
from iree.runtime import _binding as b
out = {"compiled_in": sorted(b.HalDriver.query())}
for name in sys.argv[1:]:
    try:
        d = b.create_hal_driver(name)
        devs = d.query_available_devices()
        out[name] = {"ok": bool(devs), "error": "" if devs else "no devices found"}
        del d
    except Exception as exc:
        out[name] = {"ok": False, "error": str(exc)}
print(json.dumps(out))
"""

LIBRARY_HINT = {
    "hip": "libamdhip64.so (point at one with IREE_HIP_DYLIB_PATH=/path/to/libamdhip64.so or "
           "LD_LIBRARY_PATH, e.g. --env IREE_HIP_DYLIB_PATH=...)",
    "cuda": "libcuda.so from the NVIDIA driver (LD_LIBRARY_PATH)",
    "vulkan": "libvulkan.so.1 and an ICD (VK_ICD_FILENAMES)",
}


def probe(python: str, drivers: list[str], env: dict[str, str]) -> dict[str, dict[str, object]]:
    try:
        out = subprocess.run([python, "-c", _PROBE, *drivers], capture_output=True, text=True,
                             timeout=_PROBE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {d: {"ok": False, "error": "driver probe timed out"} for d in drivers}
    try:
        data: dict[str, dict[str, object]] = json.loads(out.stdout.strip().splitlines()[-1])
        return data
    except (json.JSONDecodeError, IndexError):
        err = (out.stderr or out.stdout).strip().splitlines()
        msg = err[-1] if err else f"probe exited {out.returncode}"
        return {d: {"ok": False, "error": msg} for d in drivers}
