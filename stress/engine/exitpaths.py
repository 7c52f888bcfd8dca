"""The `exit` pattern family: short-lived job processes that leave by one chosen exit path.

The failures this tool exists for live where a process ends: a GPU driver tears its context
down in its exit handlers (HIP's primary context is released only there, by design), after the
tests finished. Each job of this family runs in a process of its own (process-per-job shape,
cheaply forked by stress.engine.forkserver): load, invoke, check numerics like any pattern, and
then, after the worker said `bye` (so its results reached the parent), leave by its path:

  exit-clean    release everything in dependency order, then exit normally
  exit-alive    exit normally with the device, its program and an invocation's argument and
                result buffers still alive, left in __main__ as a script leaves its globals
  exit-inflight exit normally right after queueing copies that nobody waits for
  exit-thread   exit normally while a second thread still invokes on the device
  exit-sigterm  SIGTERM arrives while a second thread invokes: the expected end is that death
  exit-os-exit  release everything, then os._exit: no exit handlers run (the control arm)

"Exit normally" means `SystemExit` out of everything: Py_Finalize, atexit, the C library's
exit() and the ELF destructors, where the driver's teardown runs. The worker calls `leave()`
after `bye`; a pattern's `run` only records which path the process takes and keeps alive what
that path needs (in __main__'s globals, so nothing is released before the interpreter's own
teardown).
Runs inside the worker: numpy, iree.runtime, stress.engine and stress.vocab only.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from stress.engine.invocation import Device, JobResult, LoadedProgram
from stress.engine.journal import SlotWriter, Step
from stress.engine.patterns import ThreadState, Work, WorkerContext
from stress.vocab import ExitPath as ExitPath  # (re-exported: the tests read it here)
from stress.vocab import Family, family

FAMILY_NAME: str = Family.EXIT.value  # `--patterns exit` selects every member
_HELPER_BOUND_S: float = 60.0  # a helper's invoke loop ends by itself after this long: the
#   process should be gone in milliseconds; past the bound the parent's watchdog judges it
_SIGTERM_WAIT_S: float = 10.0  # after SIGTERM to ourselves: death is immediate (SIG_DFL); if
#   we are still here, something blocked it and the exit status (0) says so
_HELPER_START_S: float = 30.0  # waiting for the helper's first invocation (cpu: well under 1 s)
_INFLIGHT_BYTES: int = 4 << 20  # per queued copy: large enough that copies are still running
#   when exit begins (cpu: ~1 ms each), small enough for any device
_INFLIGHT_COPIES: int = 8  # chained on one timeline semaphore; nobody waits for the last


FAMILY: tuple[str, ...] = family(Family.EXIT)


def expected_returncode(path: ExitPath) -> int:
    """The Popen-style returncode a job process of `path` ends with when nothing goes wrong."""
    return path.expected_returncode


@dataclass
class Leaving:
    """What a finished job left for its process's exit."""

    path: ExitPath
    w: WorkerContext
    job_index: int
    work: Work
    device: Device | None  # None when the job released it
    lp: LoadedProgram | None
    kept: list[Any] = field(default_factory=list)
    writer: SlotWriter | None = None  # the job's journal slot (the main thread's): device
    #   work at exit is journaled there, so an error before the exit is an error of its step


_pending: Leaving | None = None
_pending_lock = threading.Lock()
_KEPT_NAME: str = "_iree_stress_kept_at_exit"  # in __main__: see _keep()


class _ExitPattern:
    """Shared job body: device, load, checked invocations; the subclass says what to keep."""

    path: ClassVar[ExitPath]
    keeps_device: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return self.path.value

    @property
    def summary(self) -> str:
        return self.path.describe()

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        dev = Device(w.driver, w.uri, t.writer)
        work.result.devices_created += 1
        lp: LoadedProgram | None = None
        try:
            lp = dev.load(w.instance, w.vm_module(w.instance, work.program.name), work.program,
                          t.writer)
            dev.loaded[work.program.name] = lp
            for i in range(work.job.invocations):
                w.call(lp, work.inputs, t.writer, dev, work.expect, work.result, i)
            kept = self.keep(dev, lp, work, t.writer)
        except BaseException:
            lp = None
            dev.release(t.writer, work.result)
            raise
        if not self.keeps_device:
            lp = None
            dev.release(t.writer, work.result)
        _set_pending(Leaving(self.path, w, work.job.index, work,
                             dev if self.keeps_device else None, lp, kept, t.writer))

    def keep(self, dev: Device, lp: LoadedProgram, work: Work,
             writer: SlotWriter) -> list[Any]:
        """HAL objects to keep alive beyond the job (besides the device itself)."""
        return []

    def leave(self, state: Leaving) -> None:
        """Runs after `bye`; returning means: exit normally."""


class ExitClean(_ExitPattern):
    path = ExitPath.CLEAN
    keeps_device = False


class ExitAlive(_ExitPattern):
    path = ExitPath.ALIVE

    def keep(self, dev: Device, lp: LoadedProgram, work: Work,
             writer: SlotWriter) -> list[Any]:
        """One more (journaled) invocation whose argument and result buffers stay alive: a
        script that exits holding its results. Results alive at exit are what crashes
        local-task 3.13 in repro/local_task_exit_order.py; inputs alone do not."""
        b = _binding()
        hd = dev.hal_device
        args = b.VmVariantList(len(work.inputs))
        for arr, elt in zip(work.inputs, lp._elt, strict=True):
            buf = hd.allocator.allocate_buffer_copy(memory_type=b.MemoryType.DEVICE_LOCAL,
                                                    allowed_usage=b.BufferUsage.DEFAULT,
                                                    device=hd, buffer=arr)
            args.push_ref(b.HalBufferView(buf, list(arr.shape), elt))
        rets = b.VmVariantList(len(lp._out_dtypes))
        writer.begin(Step.INVOKE, dev.id)
        try:
            lp.context.invoke(lp.function, args, rets)
        except Exception:
            writer.fail(Step.INVOKE, dev.id)
            raise
        writer.end(Step.INVOKE, dev.id)
        views = [rets.get_as_object(i, b.HalBufferView) for i in range(len(lp._out_dtypes))]
        return [args, rets, *views]

    def leave(self, state: Leaving) -> None:
        _keep(state)


class ExitInflight(_ExitPattern):
    path = ExitPath.INFLIGHT

    def leave(self, state: Leaving) -> None:
        """Queues chained device-to-device copies and returns without waiting for any: on the
        thread that created the device (the main thread: worker.Worker runs exit-family jobs
        there), journaled as the `queue` step, so a failure here is an error at `queue`, not
        a failure of the exit that follows."""
        assert state.device is not None
        b = _binding()
        dev = state.device
        hd = dev.hal_device
        writer = state.writer
        try:
            if writer is not None:
                writer.begin(Step.QUEUE, dev.id)  # an injected fault fires right here
            usage = b.BufferUsage.DEFAULT | b.BufferUsage.TRANSFER
            src = hd.allocator.allocate_buffer(memory_type=b.MemoryType.DEVICE_LOCAL,
                                               allowed_usage=usage,
                                               allocation_size=_INFLIGHT_BYTES)
            dst = hd.allocator.allocate_buffer(memory_type=b.MemoryType.DEVICE_LOCAL,
                                               allowed_usage=usage,
                                               allocation_size=_INFLIGHT_BYTES)
            sem = hd.create_semaphore(0)
            for i in range(_INFLIGHT_COPIES):
                hd.queue_copy(src, dst, wait_semaphores=b.HalFence.create_at(sem, i),
                              signal_semaphores=b.HalFence.create_at(sem, i + 1))
        except BaseException:
            if writer is not None:
                writer.fail(Step.QUEUE, dev.id)
            raise
        if writer is not None:
            writer.end(Step.QUEUE, dev.id)
        state.kept += [src, dst, sem]
        _keep(state)


class ExitThread(_ExitPattern):
    path = ExitPath.THREAD

    def leave(self, state: Leaving) -> None:
        _keep(state)
        _start_invoking(state)


class ExitSigterm(_ExitPattern):
    path = ExitPath.SIGTERM

    def leave(self, state: Leaving) -> None:
        _keep(state)
        _start_invoking(state)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(_SIGTERM_WAIT_S)  # death comes first; exit 0 past this says it did not


class ExitOsExit(_ExitPattern):
    path = ExitPath.OS_EXIT
    keeps_device = False

    def leave(self, state: Leaving) -> None:
        _os_exit()


def _keep(state: Leaving) -> None:
    """Leaves `state` to the interpreter's teardown as a script leaves its globals: in
    __main__ (the shape of repro/local_task_exit_order.py). Nothing of it is released before
    Py_Finalize clears the modules."""
    main = sys.modules.get("__main__")
    if main is None:
        return
    kept = main.__dict__.setdefault(_KEPT_NAME, [])
    kept.append(state)


def _os_exit() -> None:
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


def _start_invoking(state: Leaving) -> None:
    """A daemon thread that invokes on the kept device in a loop (journaled on its own slot);
    returns once its first invocation is done, so the next one is under way."""
    assert state.device is not None and state.lp is not None
    started = threading.Event()
    dev, lp, w, work = state.device, state.lp, state.w, state.work

    def loop() -> None:
        writer = w.journal.acquire()
        writer.job = state.job_index
        result = JobResult()  # after bye: nobody reads it; a failure shows in the exit status
        deadline = time.monotonic() + _HELPER_BOUND_S
        i = 0
        while time.monotonic() < deadline:
            w.call(lp, work.inputs, writer, dev, work.expect, result, i)
            started.set()
            i += 1

    threading.Thread(target=loop, name="exit-helper", daemon=True).start()
    started.wait(_HELPER_START_S)


def _binding() -> Any:
    from iree.runtime import _binding as b

    return b


def _set_pending(state: Leaving) -> None:
    global _pending
    with _pending_lock:
        _pending = state


def pending() -> ExitPath | None:
    """The exit path the finished job chose, if any (not consumed)."""
    with _pending_lock:
        return _pending.path if _pending is not None else None


PATTERNS: dict[str, _ExitPattern] = {p.name: p for p in (
    ExitClean(), ExitAlive(), ExitInflight(), ExitThread(), ExitSigterm(), ExitOsExit())}
_BY_PATH: dict[ExitPath, _ExitPattern] = {p.path: p for p in PATTERNS.values()}


def leave(path: ExitPath | None = None) -> None:
    """The worker's last act, after `bye`: takes the exit path its job chose (or `path` when
    given and no job chose one: then only the paths that need no device act). Returns when the
    process should exit normally; os._exit and SIGTERM never return. Idempotent: a second call
    finds nothing pending."""
    global _pending
    with _pending_lock:
        state, _pending = _pending, None
    if state is not None:
        _BY_PATH[state.path].leave(state)
    elif path is ExitPath.OS_EXIT:
        _os_exit()
    elif path is ExitPath.SIGTERM:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(_SIGTERM_WAIT_S)
