"""Seen while building iree-stress (iree-base-runtime 3.13.0, cpu): a script that leaves its HAL
objects as module globals and lets the interpreter tear them down at exit dies with SIGSEGV on
local-task (not on local-sync). Releasing them explicitly in dependency order (outputs, context,
modules, device, driver) exits cleanly, which is why the soak workers always do that.

    python repro/local_task_exit_order.py VMFB [local-task|local-sync] [--ordered]

VMFB: a cpu build of binary.add.f32.* (two f32 inputs, one output), e.g. from
`iree-stress compile --target cpu --programs 'binary.add.f32.3x5x7*' --export DIR`.
"""

from __future__ import annotations

import sys

import numpy as np
from iree.runtime import _binding as b

uri = sys.argv[2] if len(sys.argv) > 2 else "local-task"
driver = b.create_hal_driver(uri)
device = driver.create_device_by_uri(uri)
instance = b.VmInstance()
hal = b.create_hal_module(instance, device)
with open(sys.argv[1], "rb") as f:
    module = b.VmModule.copy_buffer(instance, f.read())
context = b.VmContext(instance, [hal, module])
function = module.lookup_function("main")
x = np.arange(105, dtype=np.float32).reshape(3, 5, 7)
args = b.VmVariantList(2)
for _ in range(2):
    args.push_ref(device.allocator.allocate_buffer_copy(
        memory_type=b.MemoryType.DEVICE_LOCAL, allowed_usage=b.BufferUsage.DEFAULT,
        device=device, buffer=x, element_type=b.HalElementType.FLOAT_32))
rets = b.VmVariantList(1)
for _ in range(2000):
    context.invoke(function, args, rets)
view = rets.get_as_object(0, b.HalBufferView)
out = np.array(view.map().asarray(tuple(view.shape), np.dtype(np.float32)), copy=True)
print("result ok:", bool((out == 2 * x).all()), flush=True)
if "--ordered" in sys.argv:
    del out, view, rets, args, function, context, module, hal, instance, device, driver
print("exiting", flush=True)
