"""A bare Python loop making the same iree.runtime calls as a soak pattern, with no harness:
the baseline of bench/soak_overhead.py. Prints invocations/s of this one process (for
create-release: device create/release cycles/s, no module, no invocation)."""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmfb", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--mode", choices=["shared", "per-call", "create-release"], required=True)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--device", default="local-task")
    ap.add_argument("--readback", choices=["map", "dma"],
                    help="map the result (host-visible memory: cpu) or DMA it to a staging "
                         "buffer (GPU device memory); default by the device")
    args = ap.parse_args()
    from iree.runtime import _binding as b

    from stress.programs import corpus, dtypes
    from stress.programs.program import make_inputs

    program = corpus.by_name()[args.program]
    inputs = make_inputs(program, 1)
    elts = [getattr(b.HalElementType, dtypes.get(a.dtype).hal) for a in program.args]
    out_dtype = np.dtype(dtypes.get(program.results[0].dtype).storage)
    with open(args.vmfb, "rb") as f:
        blob = f.read()
    instance = b.VmInstance()
    driver = b.create_hal_driver(args.device.split("://", 1)[0])
    module = b.VmModule.copy_buffer(instance, blob)
    mem, usage = b.MemoryType.DEVICE_LOCAL, b.BufferUsage.DEFAULT
    staging_mem = int(b.MemoryType.HOST_LOCAL | b.MemoryType.DEVICE_VISIBLE)
    staging_usage = int(b.BufferUsage.TRANSFER_TARGET | b.BufferUsage.MAPPING_SCOPED)
    if args.readback is None:
        args.readback = "map" if args.device.startswith("local-") else "dma"

    def invoke(device: object, ctx: object, fn: object) -> np.ndarray:
        arg_list = b.VmVariantList(len(inputs))
        for arr, elt in zip(inputs, elts, strict=True):
            arg_list.push_ref(device.allocator.allocate_buffer_copy(  # type: ignore[attr-defined]
                memory_type=mem, allowed_usage=usage, device=device, buffer=arr,
                element_type=elt))
        rets = b.VmVariantList(1)
        ctx.invoke(fn, arg_list, rets)  # type: ignore[attr-defined]
        view = rets.get_as_object(0, b.HalBufferView)
        if args.readback == "map":
            return copy_mapped(view, tuple(view.shape))
        # GPU device memory is not host-mappable: DMA into a host staging buffer and wait on a
        # fence, as the harness does (stress.engine.invocation)
        buf = view.get_buffer()
        staging = device.allocator.allocate_buffer(  # type: ignore[attr-defined]
            memory_type=staging_mem, allowed_usage=staging_usage,
            allocation_size=buf.byte_length())
        sem = device.create_semaphore(0)  # type: ignore[attr-defined]
        device.queue_copy(buf, staging,  # type: ignore[attr-defined]
                          wait_semaphores=b.HalFence.create_at(sem, 0),
                          signal_semaphores=b.HalFence.create_at(sem, 1))
        b.HalFence.create_at(sem, 1).wait()
        return copy_mapped(staging, tuple(view.shape))

    def copy_mapped(mappable: object, shape: tuple[int, ...]) -> np.ndarray:
        mapping = mappable.map()  # type: ignore[attr-defined]
        out = np.array(mapping.asarray(shape, out_dtype), copy=True)
        del mapping
        return out

    n = 0
    if args.mode == "shared":
        device = driver.create_device_by_uri(args.device)
        hal = b.create_hal_module(instance, device)
        ctx = b.VmContext(instance, [hal, module])
        fn = module.lookup_function("main")
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            for _ in range(50):
                invoke(device, ctx, fn)
            n += 50
        elapsed = time.perf_counter() - t0
        del fn, ctx, hal, device
    elif args.mode == "create-release":
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            device = driver.create_device_by_uri(args.device)
            del device
            n += 1
        elapsed = time.perf_counter() - t0
    else:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            device = driver.create_device_by_uri(args.device)
            hal = b.create_hal_module(instance, device)
            ctx = b.VmContext(instance, [hal, module])
            fn = module.lookup_function("main")
            invoke(device, ctx, fn)
            del fn, ctx, hal, device  # released here: no cycle on this path
            n += 1
        elapsed = time.perf_counter() - t0
    print(f"{n / elapsed:.1f}")


if __name__ == "__main__":
    main()
