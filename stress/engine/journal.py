"""The HAL journal: what each worker thread did last, readable after the worker dies.

Each worker owns one file, mapped MAP_SHARED: the kernel keeps every store in the page cache, so
the parent reads the records after a SIGSEGV or SIGKILL, and reads them *live* for the watchdog
(no heartbeat messages needed). Each thread writes into its own slot: a ring of fixed 40-byte
records. One record costs one struct.pack_into (~0.3 us), which keeps the soak engine within
its overhead goal; the ring bounds the file size.
"""

from __future__ import annotations

import enum
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"ISJ1"
VERSION: int = 2  # 2: seq is a u64 (a u32 wrapped after 2^32 records, about a day of one slot)
_HEADER = struct.Struct("<4sIIIIQ")  # magic, version, slots, ring_len, record_size, pid
_HEADER_SIZE = 64
_SLOT_HEADER = struct.Struct("<QQ")  # native thread id, python thread ident
_INJECTED = struct.Struct("<Q")  # at slot offset 16: faults injected on this slot (wrap-proof)
_SLOT_HEADER_SIZE = 64
# ts_ns, seq, step, phase, status, device, job, detail, aux; padded so records stay 8-aligned
RECORD = struct.Struct("<QQBBBxIIiI4x")
RECORD_SIZE = 40
RING_LEN: int = 512  # records per thread (a power of 2): ~80 invocations of history; 20 KiB
_pack = RECORD.pack_into
_now = time.monotonic_ns
RECORD_DTYPE = np.dtype([("ts", "<u8"), ("seq", "<u8"), ("step", "u1"), ("phase", "u1"),
                         ("status", "u1"), ("_pad", "u1"), ("device", "<u4"), ("job", "<u4"),
                         ("detail", "<i4"), ("aux", "<u4"), ("_pad2", "<u4")])
assert RECORD.size == RECORD_SIZE == RECORD_DTYPE.itemsize
NO_JOB = 0xFFFFFFFF


class Step(enum.IntEnum):
    """HAL-level steps a worker thread performs. Names are the `--inject KIND@STEP` vocabulary."""

    INSTANCE_CREATE = 1
    DRIVER_CREATE = 2
    DEVICE_CREATE = 3
    MODULE_LOAD = 4
    UPLOAD = 5  # buffer allocate + upload of the inputs
    INVOKE = 6
    READBACK = 7
    CHECK = 8
    DEVICE_RELEASE = 9
    DRIVER_RELEASE = 10
    GC = 11
    JOB = 12
    WORKER_EXIT = 13
    INJECT = 14  # marker: a fault is about to be injected at the step in `detail`
    THREAD_START = 15  # marker: a new thread took this slot; older records are another thread's
    QUEUE = 16  # device work queued at exit that nobody waits for (exit-inflight)

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")

    @staticmethod
    def parse(text: str) -> Step:
        key = text.strip().upper().replace("-", "_")
        aliases = {"RELEASE": "DEVICE_RELEASE", "CREATE": "DEVICE_CREATE", "LOAD": "MODULE_LOAD",
                   "EXIT": "WORKER_EXIT", "READ_BACK": "READBACK"}
        return Step[aliases.get(key, key)]

    def is_teardown(self) -> bool:
        """Steps whose stall is a teardown hang (work done, exit never happens)."""
        return self in (Step.DEVICE_RELEASE, Step.DRIVER_RELEASE, Step.WORKER_EXIT, Step.GC)


class Phase(enum.IntEnum):
    BEGIN = 1
    END = 2
    FAIL = 3  # ended with an error status
    MARK = 4


_BEGIN, _END, _MARK = int(Phase.BEGIN), int(Phase.END), int(Phase.MARK)
_THREAD_START = int(Step.THREAD_START)


def file_size(slots: int, ring_len: int = RING_LEN) -> int:
    return _HEADER_SIZE + slots * (_SLOT_HEADER_SIZE + ring_len * RECORD_SIZE)


def _slot_offset(slot: int, ring_len: int) -> int:
    return _HEADER_SIZE + slot * (_SLOT_HEADER_SIZE + ring_len * RECORD_SIZE)


class JournalWriter:
    """Worker side. Slots are handed to threads; each thread writes only its own slot."""

    def __init__(self, path: Path, slots: int, ring_len: int = RING_LEN):
        if ring_len & (ring_len - 1):
            raise ValueError("ring_len must be a power of 2")
        self.path, self.slots, self.ring_len = path, slots, ring_len
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, file_size(slots, ring_len))
            self._mm = mmap.mmap(fd, file_size(slots, ring_len), mmap.MAP_SHARED)
        finally:
            os.close(fd)
        _HEADER.pack_into(self._mm, 0, MAGIC, VERSION, slots, ring_len, RECORD_SIZE, os.getpid())
        self._free = list(range(slots))
        self._lock = threading.Lock()
        self.on_begin: Callable[[SlotWriter, Step], None] | None = None  # fault injection hook

    def acquire(self, start_seq: int | None = None) -> SlotWriter:
        """A slot for the calling thread (raises when all are taken: size slots generously).
        `start_seq` (tests) starts its sequence there: the thread-start mark gets that seq,
        unless the slot's earlier records are already past it."""
        with self._lock:
            slot = self._free.pop(0)
        _SLOT_HEADER.pack_into(self._mm, _slot_offset(slot, self.ring_len),
                               threading.get_native_id(), threading.get_ident())
        writer = SlotWriter(self, slot, start_seq)
        writer.record(Step.THREAD_START, Phase.MARK)
        return writer

    def release(self, writer: SlotWriter) -> None:
        with self._lock:
            self._free.append(writer.slot)


class SlotWriter:
    """Hot path: every HAL step of a worker thread passes here twice; kept to one pack_into."""

    __slots__ = ("_base", "_journal", "_mask", "_mm", "_ring", "job", "seq", "slot")

    def __init__(self, journal: JournalWriter, slot: int, start_seq: int | None = None):
        self._journal = journal
        self._mm = journal._mm
        self._ring = journal.ring_len
        self._mask = journal.ring_len - 1
        self._base = _slot_offset(slot, journal.ring_len) + _SLOT_HEADER_SIZE
        self.slot = slot
        self.seq = 0
        self.job = NO_JOB
        # Continue the slot's sequence when a slot is reused by a later thread: readers order
        # a ring by seq, so it must never go back.
        prev = np.frombuffer(self._mm, RECORD_DTYPE, journal.ring_len, self._base)["seq"]
        self.seq = int(prev.max()) if prev.size else 0
        if start_seq is not None:
            self.seq = max(self.seq, start_seq - 1)

    def record(self, step: int, phase: int, device: int = 0, status: int = 0, detail: int = 0,
               aux: int = 0) -> None:
        seq = self.seq + 1
        self.seq = seq
        _pack(self._mm, self._base + (seq & self._mask) * RECORD_SIZE, _now(), seq, step, phase,
              status, device, self.job, detail, aux)

    def begin(self, step: Step, device: int = 0, aux: int = 0) -> None:
        seq = self.seq + 1
        self.seq = seq
        _pack(self._mm, self._base + (seq & self._mask) * RECORD_SIZE, _now(), seq, step,
              _BEGIN, 0, device, self.job, 0, aux)
        hook = self._journal.on_begin
        if hook is not None:
            hook(self, step)

    def end(self, step: Step, device: int = 0, aux: int = 0) -> None:
        seq = self.seq + 1
        self.seq = seq
        _pack(self._mm, self._base + (seq & self._mask) * RECORD_SIZE, _now(), seq, step,
              _END, 0, device, self.job, 0, aux)

    def tail(self, k: int) -> list[tuple[str, str]]:
        """(phase, step) of this slot's last k records, oldest first, skipping marks: the
        window attached to a failure the worker itself detects (error, miscompare)."""
        recs = np.frombuffer(self._mm, RECORD_DTYPE, self._ring, self._base)
        recs = recs[recs["seq"] > 0]
        recs = recs[np.argsort(recs["seq"], kind="stable")]
        starts = np.nonzero(recs["step"] == Step.THREAD_START)[0]
        if starts.size:
            recs = recs[int(starts[-1]):]  # this thread's records only
        recs = recs[-(k + 4):]
        out = []
        for r in recs:
            if r["phase"] == Phase.MARK:
                continue
            out.append((Phase(int(r["phase"])).name.lower(), Step(int(r["step"])).label))
        return out[-k:]

    def fail(self, step: Step, device: int = 0, status: int = 1) -> None:
        self.record(step, Phase.FAIL, device, status)

    def mark_injection(self, step: Step, kind_code: int) -> None:
        """Records that a fault is injected at `step` now; the per-slot counter survives ring
        wrap-around, so tests can check that every injected fault was detected."""
        off = self._base - _SLOT_HEADER_SIZE + _SLOT_HEADER.size
        (count,) = _INJECTED.unpack_from(self._mm, off)
        _INJECTED.pack_into(self._mm, off, count + 1)
        self.record(Step.INJECT, Phase.MARK, detail=int(step), aux=kind_code)


@dataclass(frozen=True)
class Entry:
    ts_ns: int
    seq: int
    slot: int
    step: Step
    phase: Phase
    status: int
    device: int
    job: int
    detail: int
    aux: int

    def describe(self) -> str:
        job = "-" if self.job == NO_JOB else str(self.job)
        extra = f" fault={Step(self.detail).label}" if self.step is Step.INJECT else ""
        return (f"t{self.slot} {self.phase.name.lower():5s} {self.step.label:15s} "
                f"dev={self.device} job={job}{extra}")


@dataclass
class SlotView:
    slot: int
    native_tid: int
    py_ident: int
    entries: list[Entry]  # oldest first
    injected: int = 0

    @property
    def last(self) -> Entry | None:
        return self.entries[-1] if self.entries else None

    def in_flight(self) -> list[Entry]:
        """Steps begun and not (yet) ended on this thread, outermost first."""
        open_steps: list[Entry] = []
        for e in self.entries:
            if e.phase is Phase.BEGIN:
                open_steps.append(e)
            elif e.phase in (Phase.END, Phase.FAIL):
                for i in range(len(open_steps) - 1, -1, -1):
                    if open_steps[i].step == e.step:
                        del open_steps[i:]
                        break
        return open_steps


def _newest_step(recs: np.ndarray[tuple[int], np.dtype[np.void]]) -> int | None:
    """Index of the newest non-mark record of the slot's current thread (None: only marks since
    its THREAD_START, or an unused slot)."""
    order = np.argsort(recs["seq"], kind="stable")[::-1]
    for i in order:
        r = recs[int(i)]
        if not r["seq"] or int(r["step"]) == _THREAD_START:
            return None
        if r["phase"] != _MARK:
            return int(i)
    return None


class JournalReader:
    """Parent side: maps a worker's journal read-only; works while it runs and after it died."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, version, self.slots, self.ring_len, rsize, self.pid = _HEADER.unpack_from(
            self._mm, 0)
        if magic != MAGIC:
            raise ValueError(f"{path} is not an iree-stress journal")
        if version != VERSION or rsize != RECORD_SIZE:
            raise ValueError(f"{path} is journal version {version} ({rsize}-byte records); this "
                             f"iree-stress reads version {VERSION} ({RECORD_SIZE}-byte records)")

    def close(self) -> None:
        self._mm.close()

    def latest(self) -> list[tuple[int, int, int, int, int]]:
        """Per slot: (slot, ts_ns, step, phase, job) of the newest record of its current thread
        that is not a mark; slots with none (unused, or only marks so far) are left out.
        Cheap: for the watchdog's frequent polls (the common case is one argmax)."""
        out = []
        for slot in range(self.slots):
            base = _slot_offset(slot, self.ring_len) + _SLOT_HEADER_SIZE
            recs = np.frombuffer(self._mm, RECORD_DTYPE, self.ring_len, base)
            seq = recs["seq"]
            i = int(seq.argmax())
            if not seq[i]:
                continue
            if recs[i]["phase"] == _MARK:
                found = _newest_step(recs)
                if found is None:
                    continue
                i = found
            r = recs[i]
            out.append((slot, int(r["ts"]), int(r["step"]), int(r["phase"]), int(r["job"])))
        return out

    def native_tid(self, slot: int) -> int:
        """The OS thread id of the thread now on `slot` (0: none yet)."""
        native, _ = _SLOT_HEADER.unpack_from(self._mm, _slot_offset(slot, self.ring_len))
        return int(native)

    def slot(self, slot: int, last: int | None = None) -> SlotView:
        """One thread's records, oldest first; only the newest `last` when given (cheap: the
        parent samples healthy windows several times a second)."""
        off = _slot_offset(slot, self.ring_len)
        native, ident = _SLOT_HEADER.unpack_from(self._mm, off)
        (injected,) = _INJECTED.unpack_from(self._mm, off + _SLOT_HEADER.size)
        recs = np.frombuffer(self._mm, RECORD_DTYPE, self.ring_len, off + _SLOT_HEADER_SIZE).copy()
        recs = recs[recs["seq"] > 0]
        recs = recs[np.argsort(recs["seq"], kind="stable")]
        if last is not None:
            recs = recs[-last:]
        entries: list[Entry] = []
        for r in recs:
            try:
                step, phase = Step(int(r["step"])), Phase(int(r["phase"]))
            except ValueError:
                continue  # a torn record written as the process died
            if step is Step.THREAD_START:
                entries = []  # records before it belong to a thread that released the slot
                continue
            entries.append(Entry(int(r["ts"]), int(r["seq"]), slot, step, phase, int(r["status"]),
                                 int(r["device"]), int(r["job"]), int(r["detail"]), int(r["aux"])))
        return SlotView(slot, native, ident, entries, injected)

    def all_slots(self, last: int | None = None) -> list[SlotView]:
        return [v for v in (self.slot(s, last) for s in range(self.slots)) if v.entries]

    def injected(self) -> int:
        """Faults injected over the worker's life (all slots, including reused ones)."""
        return sum(self.slot(s).injected for s in range(self.slots))
