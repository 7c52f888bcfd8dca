"""Device lifecycle patterns: how jobs create, share and release HAL devices.

Each pattern is one class behind the `Pattern` protocol; all run inside a worker process and
journal every HAL step through the thread's slot. "Release" always means the native device is
destroyed at that point (see invocation.Device.release), except where a pattern keeps another
reference alive on purpose (churn releases devices while another thread still invokes on them).
"""

from __future__ import annotations

import gc
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from stress.engine.invocation import (
    Device,
    Expectation,
    HostArray,
    InvocationError,
    JobResult,
    LoadedProgram,
    _binding,
    snapshot,
    timed_call,
)
from stress.engine.jobs import Job
from stress.engine.journal import JournalWriter, SlotWriter, Step
from stress.programs.program import Program
from stress.vocab import Family, family

_HELPER_JOIN_S: float = 600.0  # helpers are joined with a bound; the parent watchdog judges hangs


@dataclass
class ThreadState:
    writer: SlotWriter
    device: Device | None = None  # per-thread pattern
    shared_loaded: dict[str, LoadedProgram] = field(default_factory=dict)

    def close(self, w: WorkerContext) -> None:
        for lp in self.shared_loaded.values():
            lp.close()
        self.shared_loaded.clear()
        if self.device is not None:
            self.device.release(self.writer, w.teardown)
            self.device = None


class WorkerContext:
    """What every thread of one worker process shares."""

    def __init__(self, driver_name: str, uri: str, journal: JournalWriter,
                 programs: dict[str, Program], vmfbs: dict[str, bytes],
                 corrupt_pending: dict[int, str] | None = None):
        b = _binding()
        self.b = b
        self.driver_name, self.uri = driver_name, uri
        self.journal = journal
        self.programs, self.vmfbs = programs, vmfbs
        self.corrupt_pending = corrupt_pending if corrupt_pending is not None else {}
        self._lock = threading.Lock()
        self._modules: dict[tuple[int, str], Any] = {}
        self._shared: Device | None = None
        self.instance: Any = None
        self.driver: Any = None
        self.teardown = JobResult()  # releases outside any job (thread and worker teardown)

    def start(self, writer: SlotWriter) -> None:
        writer.begin(Step.INSTANCE_CREATE)
        self.instance = self.b.VmInstance()
        writer.end(Step.INSTANCE_CREATE)
        self.driver = create_driver(self.b, self.driver_name, writer)

    def vm_module(self, instance: Any, name: str) -> Any:
        key = (id(instance), name)
        with self._lock:
            mod = self._modules.get(key)
            if mod is None:
                mod = self.b.VmModule.copy_buffer(instance, self.vmfbs[name])
                if instance is self.instance:  # only the long-lived instance is cached
                    self._modules[key] = mod
            return mod

    def shared_device(self, writer: SlotWriter, result: JobResult) -> Device:
        """The process's one shared device, created by (and counted in) the first job that
        asks for it."""
        with self._lock:
            if self._shared is None:
                self._shared = Device(self.driver, self.uri, writer)
                result.devices_created += 1
            return self._shared

    def call(self, lp: LoadedProgram, inputs: list[HostArray], writer: SlotWriter, dev: Device,
             expect: Expectation, result: JobResult, index: int) -> None:
        timed_call(lp, inputs, writer, dev.id, expect, result, index, self.corrupt_pending)

    def run_helper(self, job: Job, fn: Callable[[SlotWriter], None],
                   errors: list[BaseException]) -> threading.Thread:
        """Starts `fn` on a new thread with its own journal slot."""

        def body() -> None:
            writer = self.journal.acquire()
            writer.job = job.index
            try:
                fn(writer)
            except BaseException as exc:  # reported by the job thread
                # the window is this helper's, taken now: its slot is reused after release
                exc.failure_window = snapshot(writer)  # type: ignore[attr-defined]
                errors.append(exc)
                _fail_open_steps(writer)  # a freed slot must not look busy to the watchdog
            finally:
                self.journal.release(writer)

        th = threading.Thread(target=body, name=f"helper-{job.index}", daemon=True)
        th.start()
        return th

    def close(self, writer: SlotWriter) -> None:
        """Worker teardown, in dependency order: shared device, modules, driver, instance."""
        if self._shared is not None:
            self._shared.release(writer, self.teardown)
            self._shared = None
        self._modules.clear()
        release_driver(self, writer)


def create_driver(b: Any, name: str, writer: SlotWriter) -> Any:
    writer.begin(Step.DRIVER_CREATE)
    try:
        driver = b.create_hal_driver(name)  # uncached, unlike iree.runtime.get_driver
    except Exception as exc:
        writer.fail(Step.DRIVER_CREATE)
        raise InvocationError(Step.DRIVER_CREATE, str(exc)) from exc
    writer.end(Step.DRIVER_CREATE)
    return driver


def release_driver(holder: Any, writer: SlotWriter) -> None:
    writer.begin(Step.DRIVER_RELEASE)
    holder.driver = None
    writer.end(Step.DRIVER_RELEASE)


@dataclass
class Work:
    """One job, ready to run: program, inputs and the expectation to check against."""

    job: Job
    program: Program
    inputs: list[HostArray]
    expect: Expectation
    result: JobResult


class Pattern(Protocol):
    """A device lifecycle strategy; `run` performs one job on the calling worker thread."""

    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None: ...


class Shared:
    name = "shared"
    summary = "one device per process, used by all threads (each thread has its own context)"

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        _invoke_loaded(w, t, work, w.shared_device(t.writer, work.result), t.shared_loaded)


class PerThread:
    name = "per-thread"
    summary = "each thread owns a device for its whole lifetime"

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        if t.device is None:
            t.device = Device(w.driver, w.uri, t.writer)
            work.result.devices_created += 1
        _invoke_loaded(w, t, work, t.device, t.device.loaded)


def _invoke_loaded(w: WorkerContext, t: ThreadState, work: Work, dev: Device,
                   loaded: dict[str, LoadedProgram]) -> None:
    """All of a job's invocations on a long-lived device, loading the program into `loaded`
    (the thread's contexts on that device) the first time."""
    lp = loaded.get(work.program.name)
    if lp is None:
        lp = dev.load(w.instance, w.vm_module(w.instance, work.program.name), work.program,
                      t.writer)
        loaded[work.program.name] = lp
    for i in range(work.job.invocations):
        w.call(lp, work.inputs, t.writer, dev, work.expect, work.result, i)


class PerCall:
    name = "per-call"
    summary = "device create -> module load -> invoke -> read back -> release, every call"

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        mod = w.vm_module(w.instance, work.program.name)
        for i in range(work.job.invocations):
            dev = Device(w.driver, w.uri, t.writer)
            work.result.devices_created += 1
            try:
                lp = dev.load(w.instance, mod, work.program, t.writer)
                dev.loaded[work.program.name] = lp
                del lp
                w.call(dev.loaded[work.program.name], work.inputs, t.writer, dev, work.expect,
                       work.result, i)
            finally:
                dev.release(t.writer, work.result)


class Churn:
    name = "churn"
    summary = ("devices created and released in bursts; some released while another thread "
               "still has an invocation in flight on them")

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        burst = 2 + work.job.seed % 3
        mod = w.vm_module(w.instance, work.program.name)
        devices: list[Device] = []
        errors: list[BaseException] = []
        try:
            for i in range(work.job.invocations):
                while len(devices) < burst:
                    dev = Device(w.driver, w.uri, t.writer)
                    work.result.devices_created += 1
                    dev.loaded["p"] = dev.load(w.instance, mod, work.program, t.writer)
                    devices.append(dev)
                dev = devices[i % burst]
                w.call(dev.loaded["p"], work.inputs, t.writer, dev, work.expect, work.result, i)
                if i % burst == burst - 1:
                    victim = devices.pop((work.job.seed + i) % len(devices))
                    self._release_in_flight(w, t, work, victim, mod, errors)
        finally:
            for dev in devices:
                dev.release(t.writer, work.result)
        _raise_first(errors)

    @staticmethod
    def _release_in_flight(w: WorkerContext, t: ThreadState, work: Work, victim: Device,
                           mod: Any, errors: list[BaseException]) -> None:
        """Another thread invokes on `victim` while this one releases it: the helper's own
        references keep the native device alive until its invocation ends."""
        helper_lp = victim.load(w.instance, mod, work.program, t.writer)
        started = threading.Event()
        helper_result = JobResult()

        def helper(writer: SlotWriter) -> None:
            started.set()
            w.call(helper_lp, work.inputs, writer, victim, work.expect, helper_result, -1)
            # this drop may be the native device's last reference (the job thread released
            # its handle meanwhile): journaled, so a crash or stall here is seen as a release
            writer.begin(Step.DEVICE_RELEASE, victim.id)
            helper_lp.close()
            writer.end(Step.DEVICE_RELEASE, victim.id)

        th = w.run_helper(work.job, helper, errors)
        started.wait(_HELPER_JOIN_S)
        victim.release(t.writer, work.result)
        th.join(_HELPER_JOIN_S)
        _merge(work.result, helper_result)


class InstanceChurn:
    name = "instance-churn"
    summary = "VM instance and HAL driver recreated too (with a gc pass), in chunks of a job"

    CHUNKS: ClassVar[int] = 3

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        n = work.job.invocations
        done = 0
        for chunk in range(self.CHUNKS):
            count = n // self.CHUNKS + (chunk < n % self.CHUNKS)
            t.writer.begin(Step.INSTANCE_CREATE)
            holder = _Holder(w.b.VmInstance())
            t.writer.end(Step.INSTANCE_CREATE)
            holder.driver = create_driver(w.b, w.driver_name, t.writer)
            dev = _device_or_destroy(holder, w.uri, t.writer)
            work.result.devices_created += 1
            try:
                mod = w.vm_module(holder.instance, work.program.name)
                dev.loaded["p"] = dev.load(holder.instance, mod, work.program, t.writer)
                del mod
                for i in range(count):
                    w.call(dev.loaded["p"], work.inputs, t.writer, dev, work.expect,
                           work.result, done + i)
                done += count
            finally:
                dev.release(t.writer, work.result)
                _destroy_driver(holder, t.writer)


class DriverChurn:
    name = "driver-churn"
    summary = ("a new HAL driver per job (not the cached one), a device on it, run, then "
               "device and driver released and collected: the GPU library opened and closed "
               "per job")

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        holder = _Holder(w.instance)
        holder.driver = create_driver(w.b, w.driver_name, t.writer)
        dev = _device_or_destroy(holder, w.uri, t.writer)
        work.result.devices_created += 1
        try:
            mod = w.vm_module(w.instance, work.program.name)
            dev.loaded["p"] = dev.load(w.instance, mod, work.program, t.writer)
            for i in range(work.job.invocations):
                w.call(dev.loaded["p"], work.inputs, t.writer, dev, work.expect, work.result, i)
        finally:
            dev.release(t.writer, work.result)
            _destroy_driver(holder, t.writer)


class _Holder:
    def __init__(self, instance: Any):
        self.instance: Any = instance
        self.driver: Any = None


def _device_or_destroy(holder: _Holder, uri: str, writer: SlotWriter) -> Device:
    """A device on the job's own driver; when it cannot be made, the driver is destroyed here,
    in its journaled step (review of issue 39), not later wherever the exception's frames
    let go of it (a crash there would read as the job's work)."""
    try:
        return Device(holder.driver, uri, writer)
    except BaseException as exc:
        _drop_frames(exc)
        _destroy_driver(holder, writer)
        raise


def _drop_frames(exc: BaseException | None) -> None:
    """Clears the locals of the finished frames of an exception and its causes (Device's
    constructor holds the driver as an argument)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


def _destroy_driver(holder: _Holder, writer: SlotWriter) -> None:
    """Drops a job's own driver (its last reference: it is destroyed here) and instance, then
    collects whatever a binding cycle kept of them, each step journaled."""
    release_driver(holder, writer)
    holder.instance = None
    writer.begin(Step.GC)
    gc.collect()
    writer.end(Step.GC)


class CrossThread:
    name = "cross-thread"
    summary = "device created in one thread, used in a second, released in a third"

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        dev = Device(w.driver, w.uri, t.writer)
        work.result.devices_created += 1
        errors: list[BaseException] = []
        mod = w.vm_module(w.instance, work.program.name)

        def use(writer: SlotWriter) -> None:
            lp = dev.load(w.instance, mod, work.program, writer)
            dev.loaded["p"] = lp
            for i in range(work.job.invocations):
                w.call(lp, work.inputs, writer, dev, work.expect, work.result, i)

        def release(writer: SlotWriter) -> None:
            dev.release(writer, work.result)

        try:
            w.run_helper(work.job, use, errors).join(_HELPER_JOIN_S)
        finally:
            w.run_helper(work.job, release, errors).join(_HELPER_JOIN_S)
        _raise_first(errors)


class ProcessPerJob:
    name = "process-per-job"
    summary = "a fresh worker process per job (the ctest shape): create, run, release, exit"

    def run(self, w: WorkerContext, t: ThreadState, work: Work) -> None:
        dev = Device(w.driver, w.uri, t.writer)
        work.result.devices_created += 1
        try:
            _invoke_loaded(w, t, work, dev, dev.loaded)
        finally:
            dev.release(t.writer, work.result)


def _fail_open_steps(writer: SlotWriter) -> None:
    """Ends, as failed, every step the exception left begun on this slot."""
    from stress.engine.journal import JournalReader

    reader = JournalReader(writer._journal.path)
    try:
        flight = reader.slot(writer.slot).in_flight()
    finally:
        reader.close()
    for e in reversed(flight):
        writer.fail(e.step, e.device)


def _merge(into: JobResult, other: JobResult) -> None:
    into.invocations += other.invocations
    into.ok += other.ok
    into.miscompare += other.miscompare
    into.errors += other.errors
    into.nondeterministic += other.nondeterministic
    into.devices_released += other.devices_released
    into.full_teardowns += other.full_teardowns
    into.handle_releases += other.handle_releases
    into.latency_sum_us += other.latency_sum_us
    into.latency_max_us = max(into.latency_max_us, other.latency_max_us)
    into.latency_hist = [a + b for a, b in zip(into.latency_hist, other.latency_hist, strict=True)]
    into.failures.extend(other.failures)
    for k, v in other.counts.items():
        into.counts[k] = into.counts.get(k, 0) + v


def _raise_first(errors: list[BaseException]) -> None:
    if errors:
        raise errors[0]


PATTERNS: dict[str, Pattern] = {p.name: p for p in (
    Shared(), PerThread(), PerCall(), Churn(), InstanceChurn(), CrossThread(), ProcessPerJob(),
    DriverChurn())}
ALL_PATTERNS: tuple[str, ...] = family(Family.CORE)  # what `all` (the default) selects
