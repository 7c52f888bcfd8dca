"""Which Vulkan libraries a process has mapped at each step of IREE's vulkan driver (issue 37):
why a header read after the driver's release said `none loaded`. Reads /proc/self/maps
before the driver, after its creation, after listing its devices, while a device lives, after
the device's release and after the driver's.

    python bench/vulkan_mapped_libraries.py [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, header  # noqa: E402


def mapped() -> list[str]:
    """Mapped files that are the Vulkan loader or an ICD (the worker's own reading)."""
    from stress.engine import worker

    return [p for p in worker._gpu_libraries() if "vulkan" in p or "GLX" in p]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    args = ap.parse_args()
    from iree.runtime import _binding as b

    lines = [header()]

    def say(step: str) -> None:
        libs = mapped()
        lines.append(f"{step:<28} {len(libs)} mapped: {', '.join(libs) or '-'}")

    say("before the driver")
    drv = b.create_hal_driver("vulkan")
    say("driver created")
    drv.query_available_devices()
    say("devices listed")
    dev = drv.create_default_device()
    say("a device lives")
    del dev
    say("device released")
    del drv
    say("driver released")
    return emit(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
