"""Minimal reproduction of a finding of `iree-stress soak` on an NVIDIA H200 (cuda driver,
iree-base-runtime 3.13.0): an IREE cuda device used from a thread that has never had a CUDA
context current fails with CUDA_ERROR_INVALID_CONTEXT (module load / buffer allocation), while
the same call from a thread that created any cuda device before succeeds.

    python repro/cuda_fresh_thread_context.py VMFB   # a cuda (sm_80) build of any corpus program

Each case runs on its own new thread against one device created on the main thread.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np


def main() -> int:
    from iree.runtime import _binding as b

    with open(sys.argv[1], "rb") as f:
        blob = f.read()
    instance = b.VmInstance()
    driver = b.create_hal_driver("cuda")
    device = driver.create_device_by_uri("cuda")
    module = b.VmModule.copy_buffer(instance, blob)

    def load() -> None:
        hal = b.create_hal_module(instance, device)
        b.VmContext(instance, [hal, module])

    def allocate() -> None:
        device.allocator.allocate_buffer_copy(
            memory_type=b.MemoryType.DEVICE_LOCAL, allowed_usage=b.BufferUsage.DEFAULT,
            device=device, buffer=np.ones(16, np.float32), element_type=b.HalElementType.FLOAT_32)

    def after_own_device(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            other = driver.create_device_by_uri("cuda")  # makes a context current here
            del other
            fn()
        return run

    cases: list[tuple[str, Callable[[], None]]] = [
        ("main thread: module load", load),
        ("fresh thread: module load", load),
        ("fresh thread: buffer allocate", allocate),
        ("fresh thread after creating its own device: module load", after_own_device(load)),
        ("fresh thread after creating its own device: buffer allocate",
         after_own_device(allocate)),
    ]
    failed_fresh = 0
    for name, fn in cases:
        outcome: list[Any] = []

        def body(fn: Callable[[], None] = fn, outcome: list[Any] = outcome) -> None:
            try:
                fn()
                outcome.append("ok")
            except Exception as exc:  # the finding: an IREE status error
                outcome.append(f"ERROR {str(exc).splitlines()[0][:150]}")

        if name.startswith("main"):
            body()
        else:
            t = threading.Thread(target=body)
            t.start()
            t.join()
        print(f"{name:62s} {outcome[0]}")
        failed_fresh += name.startswith("fresh thread:") and outcome[0] != "ok"
    return 0 if failed_fresh == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
