"""One device, one loaded program, one invocation: the iree.runtime calls every pattern makes.

Only numpy and iree.runtime are used here, with our journal around each HAL-level step. Devices
come from `create_hal_driver(...).create_device_by_uri(...)`, never from the URI-keyed cache of
`iree.runtime.get_device`, and a release drops every reference in a fixed order (outputs,
function, context, HAL module, device) so that the native device is destroyed right there: the
high-level `SystemContext` path keeps a reference cycle alive until `gc.collect()`, and letting
interpreter exit tear down in dict order crashes local-task (seen with 3.13).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from stress.engine.journal import SlotWriter, Step
from stress.keys import message_key
from stress.programs import dtypes
from stress.programs.program import Program, Role
from stress.vocab import Numerics

HostArray = npt.NDArray[Any]

# Latency histogram buckets: log2 microseconds, 1 us .. ~1 s and above.
LATENCY_BUCKETS: int = 22


def _binding() -> Any:
    from iree.runtime import _binding  # deferred: the parent never needs the runtime

    return _binding


class InvocationError(Exception):
    """An IREE status error (or an injected `raise`) at a step."""

    def __init__(self, step: Step, message: str):
        self.step = step
        super().__init__(message)


@dataclass
class FailureNote:
    """An in-worker failure (error or miscompare); crashes and hangs are seen by the parent."""

    cls: str  # "error" | "miscompare"
    step: str
    message: str
    invocation: int
    device: int
    # raw journal entries of the failing thread (failing=True) and the other threads, and the
    # steps in flight on every thread at that moment: the same shape the parent stores for
    # crashes and hangs, so analysis treats every failure alike
    steps: list[dict[str, Any]] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    native_tid: int = 0
    evidence: dict[str, Any] | None = None  # a miscompare's (stress.engine.mismatch)

    def as_dict(self) -> dict[str, Any]:
        return {"class": self.cls, "step": self.step, "message": self.message[:2000],
                "invocation": self.invocation, "device": self.device,
                "steps": self.steps, "in_flight": self.in_flight,
                "native_tid": self.native_tid,
                **({"evidence": self.evidence} if self.evidence else {})}

    def key(self) -> str:
        return f"{self.cls}|{self.step}|{message_key(self.message)}"


WINDOW_STEPS: int = 24  # journal records of the failing thread kept with each failure note


@dataclass
class JobResult:
    invocations: int = 0
    ok: int = 0
    miscompare: int = 0
    errors: int = 0
    nondeterministic: int = 0  # bits changed but still within the reference tolerance
    devices_created: int = 0
    devices_released: int = 0
    full_teardowns: int = 0  # releases of the process's last live device (driver teardown)
    handle_releases: int = 0  # releases while another device of the process stayed alive
    latency_hist: list[int] = field(default_factory=lambda: [0] * LATENCY_BUCKETS)
    latency_sum_us: float = 0.0
    latency_max_us: float = 0.0
    failures: list[FailureNote] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # FailureNote.key() -> occurrences

    def note(self, n: FailureNote, writer: SlotWriter,
             window: tuple[list[dict[str, Any]], list[str], int] | None = None) -> None:
        """Counts a failure; the first few per job keep the journal window of the thread that
        failed (`window` when the caller snapshotted it already, e.g. on a helper thread)."""
        key = n.key()
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.keeps_note():
            n.steps, n.in_flight, n.native_tid = window or snapshot(writer)
            self.failures.append(n)

    def keeps_note(self) -> bool:
        """Whether the next failure's note is kept (sent with its detail); past the first
        few only its count is."""
        return len(self.failures) < _MAX_NOTES

    def count_release(self, full: bool | None) -> None:
        if full is None:
            return
        self.devices_released += 1
        if full:
            self.full_teardowns += 1
        else:
            self.handle_releases += 1

    def add_latency(self, seconds: float) -> None:
        us = seconds * 1e6
        self.latency_sum_us += us
        if us > self.latency_max_us:
            self.latency_max_us = us
        bucket = min(LATENCY_BUCKETS - 1, max(0, int(us).bit_length() - 1))
        self.latency_hist[bucket] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"invocations": self.invocations, "ok": self.ok, "miscompare": self.miscompare,
                "errors": self.errors, "nondeterministic": self.nondeterministic,
                "devices_created": self.devices_created,
                "devices_released": self.devices_released,
                "full_teardowns": self.full_teardowns, "handle_releases": self.handle_releases,
                "latency_hist": self.latency_hist, "latency_sum_us": self.latency_sum_us,
                "latency_max_us": self.latency_max_us,
                "failures": [f.as_dict() for f in self.failures[:_MAX_NOTES]],
                "counts": self.counts}


_MAX_NOTES = 5  # failure notes sent per job; the counts carry the rest
_OTHER_ENTRIES: int = 24  # entries of each other thread kept with a failure note: enough to
#   cut them back to the failure's own time (they ran on while the failing thread noted it)


def snapshot(writer: SlotWriter) -> tuple[list[dict[str, Any]], list[str], int]:
    """(raw entries, in-flight steps, native tid) of the calling thread's slot and the other
    threads of this process, read from our own journal file: the failing thread's own window,
    taken on the thread that failed (helper threads included)."""
    from stress.engine.attribution import entry_dict  # deferred: cold path only
    from stress.engine.journal import JournalReader

    reader = JournalReader(writer._journal.path)
    try:
        views = reader.all_slots(last=WINDOW_STEPS + 8)
    finally:
        reader.close()
    steps: list[dict[str, Any]] = []
    flight: list[str] = []
    tid = 0
    for v in sorted(views, key=lambda v: v.slot != writer.slot):
        own = v.slot == writer.slot
        if own:
            tid = v.native_tid
        entries = v.entries[-(WINDOW_STEPS if own else _OTHER_ENTRIES):]
        steps += [entry_dict(e, own, v.native_tid) for e in entries]
        flight += [f"t{v.slot}:{e.step.label}" for e in v.in_flight() if e.step is not Step.JOB]
    return steps, flight, tid


class Device:
    """A HAL device owned by exactly one pattern step; `release()` destroys it natively."""

    _ids = iter(range(1, 1 << 31))
    _ids_lock = threading.Lock()
    live: int = 0  # devices of this process created and not yet released (under _ids_lock)

    def __init__(self, driver: Any, uri: str, writer: SlotWriter):
        with Device._ids_lock:
            self.id = next(Device._ids)
        self.hal_device: Any = None
        self.loaded: dict[str, LoadedProgram] = {}
        try:  # begin inside the try: an injected `raise` at begin is a failed step too
            writer.begin(Step.DEVICE_CREATE, self.id)
            self.hal_device = driver.create_device_by_uri(uri)
        except Exception as exc:
            writer.fail(Step.DEVICE_CREATE, self.id)
            raise InvocationError(Step.DEVICE_CREATE, str(exc)) from exc
        with Device._ids_lock:
            Device.live += 1
        writer.end(Step.DEVICE_CREATE, self.id)

    def load(self, instance: Any, vm_module: Any, program: Program,
             writer: SlotWriter) -> LoadedProgram:
        try:
            writer.begin(Step.MODULE_LOAD, self.id)
            lp = LoadedProgram(instance, self.hal_device, vm_module, program)
        except Exception as exc:
            writer.fail(Step.MODULE_LOAD, self.id)
            raise InvocationError(Step.MODULE_LOAD, str(exc)) from exc
        writer.end(Step.MODULE_LOAD, self.id)
        return lp

    def release(self, writer: SlotWriter, result: JobResult | None = None) -> bool | None:
        """Drops every reference this handle holds; the device dies here unless another thread
        still holds it (the churn pattern does that on purpose). Returns True when it was the
        process's last live device (a full teardown: with GPU drivers the primary context can
        go), False for a handle-only release, None when already released; counted into
        `result` when given."""
        if self.hal_device is None:
            return None
        refs = sys.getrefcount(self.hal_device) - 1
        with Device._ids_lock:
            Device.live -= 1
            full = Device.live == 0
        try:
            writer.begin(Step.DEVICE_RELEASE, self.id, aux=refs)
            for lp in self.loaded.values():
                lp.close()
        except BaseException:  # an injected raise, or a close that failed: a failed step
            writer.fail(Step.DEVICE_RELEASE, self.id)
            raise
        finally:
            self.loaded.clear()
            self.hal_device = None
        writer.end(Step.DEVICE_RELEASE, self.id)
        if result is not None:
            result.count_release(full)
        return full


class LoadedProgram:
    """HAL module + VM context + entry function of one program on one device."""

    def __init__(self, instance: Any, hal_device: Any, vm_module: Any, program: Program,
                 readback: str = "auto"):
        b = _binding()
        self.readback = readback  # auto: map host-visible buffers, DMA-copy the others
        self._mappable: bool | None = None  # decided on the first result: fixed per device
        self.program = program
        self._b = b
        self.hal_device = hal_device
        self.hal_module = b.create_hal_module(instance, hal_device)
        self.context = b.VmContext(instance, [self.hal_module, vm_module])
        self.function = vm_module.lookup_function(program.entry)
        if self.function is None:
            raise InvocationError(Step.MODULE_LOAD, f"no function @{program.entry} in module")
        self._elt = [getattr(b.HalElementType, dtypes.get(a.dtype).hal) for a in program.args]
        self._out_dtypes = [np.dtype(dtypes.get(a.dtype).storage) for a in program.results]
        self._out_args = [i for i, a in enumerate(program.args) if a.role is Role.OUTPUT]
        self._mem = b.MemoryType.DEVICE_LOCAL
        self._usage = b.BufferUsage.DEFAULT
        self._host_visible = int(b.MemoryType.HOST_VISIBLE)
        self._scoped = int(b.BufferUsage.MAPPING_SCOPED)
        self._staging_mem = int(b.MemoryType.HOST_LOCAL | b.MemoryType.DEVICE_VISIBLE)
        self._staging_usage = int(b.BufferUsage.TRANSFER_TARGET | b.BufferUsage.MAPPING_SCOPED)

    def close(self) -> None:
        self.function = None
        self.context = None
        self.hal_module = None
        self.hal_device = None

    def call(self, inputs: list[HostArray], writer: SlotWriter, device_id: int) -> list[HostArray]:
        """upload -> invoke -> read back; every step journaled, IREE errors re-raised with it."""
        b = self._b
        step = Step.UPLOAD
        try:
            writer.begin(step, device_id)
            alloc = self.hal_device.allocator
            args = b.VmVariantList(len(inputs))
            views = []
            for arr, elt in zip(inputs, self._elt, strict=True):
                if arr.ndim:
                    bv = alloc.allocate_buffer_copy(memory_type=self._mem,
                                                    allowed_usage=self._usage,
                                                    device=self.hal_device, buffer=arr,
                                                    element_type=elt)
                else:  # the binding turns a 0-d array into shape [1]; build the view by hand
                    buf = alloc.allocate_buffer_copy(memory_type=self._mem,
                                                     allowed_usage=self._usage,
                                                     device=self.hal_device, buffer=arr)
                    bv = b.HalBufferView(buf, [], elt)
                views.append(bv)
                args.push_ref(bv)
            rets = b.VmVariantList(len(self._out_dtypes))
            writer.end(step, device_id)
            step = Step.INVOKE
            writer.begin(step, device_id)
            self.context.invoke(self.function, args, rets)
            writer.end(step, device_id)
            step = Step.READBACK
            writer.begin(step, device_id)
            outs: list[HostArray] = []
            for i, dt in enumerate(self._out_dtypes):
                outs.append(self._read(rets.get_as_object(i, b.HalBufferView), dt))
            for i in self._out_args:
                outs.append(self._read(views[i], np.dtype(inputs[i].dtype)))
            writer.end(step, device_id)
            return outs
        except InvocationError:
            writer.fail(step, device_id)
            raise
        except Exception as exc:
            writer.fail(step, device_id)
            raise InvocationError(step, f"{type(exc).__name__}: {exc}") from exc


    def _read(self, view: Any, dtype: np.dtype[Any]) -> HostArray:
        """Host copy of a result: map it when the memory is host-visible (cpu), else DMA it
        into a host staging buffer with queue_copy and wait on a fence (GPU device memory)."""
        if self.readback == "map" or (self.readback == "auto" and self._mappable):
            return _copy_mapped(view, tuple(view.shape), dtype)
        buf = view.get_buffer()
        if self._mappable is None:
            self._mappable = (buf.memory_type() & self._host_visible) == self._host_visible \
                and (buf.allowed_usage() & self._scoped) == self._scoped
            if self._mappable and self.readback == "auto":
                return _copy_mapped(view, tuple(view.shape), dtype)
        b = self._b
        staging = self.hal_device.allocator.allocate_buffer(
            memory_type=self._staging_mem, allowed_usage=self._staging_usage,
            allocation_size=buf.byte_length())
        sem = self.hal_device.create_semaphore(0)
        self.hal_device.queue_copy(buf, staging, wait_semaphores=b.HalFence.create_at(sem, 0),
                                   signal_semaphores=b.HalFence.create_at(sem, 1))
        b.HalFence.create_at(sem, 1).wait()
        return _copy_mapped(staging, tuple(view.shape), dtype)


def _copy_mapped(mappable: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> HostArray:
    mapping = mappable.map()
    try:
        return np.array(mapping.asarray(shape, dtype), copy=True)
    finally:
        del mapping  # unmap before the buffer (and maybe its device) can go away


class Expectation:
    """What an invocation must produce: the numpy reference, else the first result seen
    (determinism across invocations and devices for user programs without a reference), or
    nothing (`Numerics.OFF`: every result passes)."""

    def __init__(self, program: Program, seed: int, inputs: list[HostArray],
                 numerics: Numerics = Numerics.REFERENCE):
        from stress.programs import reference

        self.program, self.seed, self.inputs = program, seed, inputs
        self.off = numerics is Numerics.OFF
        self.dtypes = [a.dtype for a in program.results] or \
            [a.dtype for a in program.args if a.role is Role.OUTPUT]
        self.expected: list[HostArray] | None = None
        if program.has_reference and numerics is Numerics.REFERENCE:
            ins = [x for x, a in zip(inputs, program.args, strict=True) if a.role is Role.INPUT]
            self.expected = [reference.evaluate(program.op, program.dtype, ins)]
        self.golden: list[bytes] | None = None
        self._lock = threading.Lock()

    def check(self, outs: list[HostArray], detail: bool = True
              ) -> tuple[bool, bool, str, dict[str, Any] | None]:
        """(ok, bit_identical_to_golden, message, evidence of a miscompare: `mismatch`'s, the
        first time this process sees the program miscompare). Fast path: a byte compare
        with the golden. `detail` False (the miscompare's note would not be kept: only its
        count is) gives the message's first line only and no evidence, and costs nothing
        past the check: on a program that is always wrong, every invocation miscompares."""
        if self.off:
            return True, True, "", None
        golden = self.golden
        if golden is not None and len(golden) == len(outs):
            if len(outs) == 1:
                if outs[0].tobytes() == golden[0]:
                    return True, True, "", None
            elif all(o.tobytes() == g for o, g in zip(outs, golden, strict=True)):
                return True, True, "", None
        return self._slow_check(outs, detail)

    def _slow_check(self, outs: list[HostArray], detail: bool
                    ) -> tuple[bool, bool, str, dict[str, Any] | None]:
        from stress.programs import reference

        golden = self.golden
        if self.expected is not None:
            for i, (o, e) in enumerate(zip(outs, self.expected, strict=False)):
                if not reference.matches(self.dtypes[i], o, e):
                    err = reference.max_error(self.dtypes[i], o, e)
                    return self._miscompare(i, o, e, f"output {i} differs from the numpy "
                                                     f"reference (max abs error {err:.3g})",
                                            detail)
        elif golden is not None:
            for i, (o, g) in enumerate(zip(outs, golden, strict=False)):
                ref = np.frombuffer(g, dtype=o.dtype).reshape(o.shape)
                if not reference.matches(self.dtypes[i], o, ref):
                    dt = dtypes.get(self.dtypes[i])
                    first = dt.decode(ref) if dt.is_float else ref
                    return self._miscompare(i, o, first, f"output {i} differs from the first "
                                                         "result of this job", detail)
        with self._lock:
            if self.golden is None:
                self.golden = [o.tobytes() for o in outs]
                return True, True, "", None
        return True, False, "", None

    def _miscompare(self, i: int, actual: HostArray, expected: HostArray, head: str,
                    detail: bool) -> tuple[bool, bool, str, dict[str, Any] | None]:
        """The failed check: its first line (what signatures group on, as before), a second
        naming the program, dtype, tolerance and first differing element, and the evidence
        for the failure's folder (once per program and process: the folder needs one; the
        arrays are encoded for that one only)."""
        from stress.engine import mismatch

        if not detail:
            return False, False, head, None
        with _EVIDENCED_LOCK:
            first = self.program.name not in _EVIDENCED
            _EVIDENCED.add(self.program.name)
        dt = dtypes.get(self.dtypes[i])
        ev = mismatch.evidence(self.program, self.seed, self.inputs, i, self.dtypes[i], actual,
                               expected, dt.rtol, dt.atol, arrays=first)
        return False, False, f"{head}\n{mismatch.detail(ev)}", ev if first else None


_EVIDENCED: set[str] = set()  # programs whose miscompare evidence this process sent
_EVIDENCED_LOCK = threading.Lock()


def _corrupt(out: HostArray) -> None:
    """Perturbs one element far beyond any tolerance (the `corrupt` fault)."""
    flat = out.reshape(-1)
    if out.dtype.kind == "f":
        flat[-1] = flat[-1] + 100
    else:  # integers, and bf16 bit patterns (0x4000 flips the top exponent bit)
        flat[-1] = flat[-1] ^ (0x4000 if out.dtype == np.uint16 else 0x55)


def timed_call(lp: LoadedProgram, inputs: list[HostArray], writer: SlotWriter, device_id: int,
               expect: Expectation, result: JobResult, index: int,
               corrupt_pending: dict[int, str] | None = None) -> None:
    """One checked invocation, counted into `result`; errors and miscompares become notes."""
    result.invocations += 1
    t0 = time.perf_counter()
    try:
        outs = lp.call(inputs, writer, device_id)
    except InvocationError as exc:
        result.errors += 1
        result.note(FailureNote("error", exc.step.label, str(exc), index, device_id), writer)
        return
    result.add_latency(time.perf_counter() - t0)
    corrupted_at = corrupt_pending.pop(writer.slot, None) if corrupt_pending else None
    if corrupted_at is not None and outs and outs[0].size:
        _corrupt(outs[0])
    # numpy only: not a journaled HAL step
    ok, identical, message, ev = expect.check(outs, detail=result.keeps_note())
    if ok:
        result.ok += 1
        result.nondeterministic += not identical
    else:
        result.miscompare += 1
        step = corrupted_at or Step.CHECK.label  # an injected corruption names its step
        result.note(FailureNote("miscompare", step, message, index, device_id, evidence=ev),
                    writer)
