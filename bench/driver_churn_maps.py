"""Whether a GPU driver's library leaves the process when its HAL driver is destroyed (issue
39, driver-churn): creates a HAL driver (not the cached one) and a device on it, releases both
and collects, three times, printing whether the library is mapped (/proc/self/maps) at each
point; then the same while a second driver of the process stays alive (what a worker's own
long-lived driver does during driver-churn's jobs).

    python3 bench/driver_churn_maps.py cuda      # libcuda.so
    python3 bench/driver_churn_maps.py hip       # libamdhip64.so
"""

from __future__ import annotations

import gc
import sys

LIBRARY: dict[str, str] = {"cuda": "libcuda.so", "hip": "libamdhip64.so"}


def mapped(name: str) -> bool:
    with open("/proc/self/maps") as fh:
        return any(name in line for line in fh)


def main() -> int:
    driver = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    lib = LIBRARY[driver]
    from iree.runtime import _binding as b

    print(f"{lib} mapped before any driver: {mapped(lib)}")
    for i in range(3):
        d = b.create_hal_driver(driver)
        dev = d.create_device_by_uri(driver)
        print(f"cycle {i}: driver and device alive: mapped {mapped(lib)}")
        del dev
        del d
        gc.collect()
        print(f"cycle {i}: both released and collected: mapped {mapped(lib)}")
    keep = b.create_hal_driver(driver)
    d = b.create_hal_driver(driver)
    dev = d.create_device_by_uri(driver)
    del dev
    del d
    gc.collect()
    print(f"another driver alive, this one released: mapped {mapped(lib)}")
    del keep
    gc.collect()
    print(f"and that one released too: mapped {mapped(lib)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
