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

    def invoke(device: object, ctx: object, fn: object) -> np.ndarray:
        arg_list = b.VmVariantList(len(inputs))
        for arr, elt in zip(inputs, elts, strict=True):
            arg_list.push_ref(device.allocator.allocate_buffer_copy(  # type: ignore[attr-defined]
                memory_type=mem, allowed_usage=usage, device=device, buffer=arr,
                element_type=elt))
        rets = b.VmVariantList(1)
        ctx.invoke(fn, arg_list, rets)  # type: ignore[attr-defined]
        view = rets.get_as_object(0, b.HalBufferView)
        mapping = view.map()
        out = np.array(mapping.asarray(tuple(view.shape), out_dtype), copy=True)
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
