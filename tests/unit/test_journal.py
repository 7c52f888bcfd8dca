from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stress.engine import inject
from stress.engine.attribution import attribute
from stress.engine.journal import RING_LEN, JournalReader, JournalWriter, Phase, Step
from stress.errors import UsageError


def test_records_round_trip_and_in_flight_steps_are_found(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=2)
    w = j.acquire()
    w.job = 3
    w.begin(Step.JOB)
    w.begin(Step.DEVICE_CREATE, 1)
    w.end(Step.DEVICE_CREATE, 1)
    w.begin(Step.INVOKE, 1)
    view = JournalReader(tmp_path / "j.bin").slot(w.slot)
    assert [e.step for e in view.in_flight()] == [Step.JOB, Step.INVOKE]
    assert view.native_tid == threading.get_native_id()
    assert view.entries[-1].job == 3


def test_ring_keeps_the_newest_records_when_it_wraps(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=1)
    w = j.acquire()
    for i in range(RING_LEN * 3 + 5):
        w.record(Step.INVOKE, Phase.BEGIN, device=i)
    entries = JournalReader(tmp_path / "j.bin").slot(0).entries
    assert len(entries) == RING_LEN
    assert entries[-1].device == RING_LEN * 3 + 4
    assert [e.seq for e in entries] == sorted(e.seq for e in entries)


def test_latest_skips_the_inject_marker_so_the_watchdog_sees_the_begun_step(
        tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=1)
    w = j.acquire()
    w.begin(Step.INVOKE)
    w.record(Step.INJECT, Phase.MARK, detail=int(Step.INVOKE))
    (_slot, _ts, step, phase, _job), = JournalReader(tmp_path / "j.bin").latest()
    assert (step, phase) == (Step.INVOKE, Phase.BEGIN)


def test_attribution_prefers_the_injected_thread_over_a_later_in_flight_one(
        tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=3)
    a, b = j.acquire(), j.acquire()
    a.job, b.job = 1, 2
    a.begin(Step.DEVICE_RELEASE)
    a.record(Step.INJECT, Phase.MARK, detail=int(Step.DEVICE_RELEASE))
    b.begin(Step.INVOKE)  # later, still in flight
    attr = attribute(JournalReader(tmp_path / "j.bin"))
    assert attr.method == "inject-marker"
    assert attr.last_step == "device-release" and attr.job_index == 1
    assert "t1:invoke" in attr.in_flight


def test_attribution_uses_faulthandlers_current_thread(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=2)
    out: list[int] = []

    def other() -> None:
        w = j.acquire()
        w.begin(Step.UPLOAD)
        out.append(threading.get_ident())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    mine = j.acquire()
    mine.begin(Step.INVOKE)  # the most recent, but not the crashing thread
    stderr = f"Fatal Python error: Segmentation fault\n\nCurrent thread {out[0]:#018x}"
    attr = attribute(JournalReader(tmp_path / "j.bin"), stderr)
    assert attr.method == "faulthandler" and attr.last_step == "upload"


def test_attribution_blames_the_live_thread_when_a_dead_one_had_the_same_ident(
        tmp_path: Path) -> None:
    """A thread's ident is its pthread address: the next thread started reuses it. Seen in CI:
    a crash in device-release blamed on an ended thread's readback."""
    j = JournalWriter(tmp_path / "j.bin", slots=3)
    idents: list[int] = []

    def run(step: Step, end: bool) -> None:
        w = j.acquire()
        w.begin(step)
        if end:
            w.end(step)
        idents.append(threading.get_ident())

    for step, end in ((Step.READBACK, True), (Step.DEVICE_RELEASE, False)):
        t = threading.Thread(target=run, args=(step, end))
        t.start()
        t.join()
    views = JournalReader(tmp_path / "j.bin").all_slots()
    if len({v.py_ident for v in views}) != 1:
        pytest.skip("this C library did not reuse the ended thread's stack (no shared ident)")
    stderr = f"Fatal Python error: Segmentation fault\n\nCurrent thread {idents[1]:#018x}"
    attr = attribute(JournalReader(tmp_path / "j.bin"), stderr)
    assert attr.method == "faulthandler" and attr.last_step == "device-release"
    assert attr.native_tid == views[1].native_tid


def test_inject_specs_parse_and_bad_ones_are_usage_errors() -> None:
    spec = inject.parse("segv@invoke:0.25")
    assert (spec.kind, spec.step, spec.prob) == (inject.Kind.SEGV, Step.INVOKE, 0.25)
    assert inject.parse("hang@release").step is Step.DEVICE_RELEASE
    assert [s.kind for s in inject.parse_env("kill@invoke:0.1, raise@upload")] == [
        inject.Kind.KILL, inject.Kind.RAISE]
    for bad in ("segv", "boom@invoke", "segv@nowhere", "segv@invoke:2"):
        with pytest.raises(UsageError):
            inject.parse(bad)


def test_injection_counter_survives_ring_wrap_around(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=2)
    w = j.acquire()
    for _ in range(RING_LEN * 2):
        w.mark_injection(Step.INVOKE, 1)
        w.begin(Step.INVOKE)
    reader = JournalReader(tmp_path / "j.bin")
    assert reader.injected() == RING_LEN * 2
    marks = sum(e.step is Step.INJECT for e in reader.slot(w.slot).entries)
    assert marks < RING_LEN * 2  # the ring alone would undercount


def test_a_reused_slot_shows_only_the_new_threads_records(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=1)
    old = j.acquire()
    old.begin(Step.DEVICE_CREATE)
    old.end(Step.DEVICE_CREATE)
    j.release(old)
    new = j.acquire()
    new.begin(Step.MODULE_LOAD)
    view = JournalReader(tmp_path / "j.bin").slot(0)
    assert [e.step for e in view.entries] == [Step.MODULE_LOAD]
    assert new.tail(8) == [("begin", "module-load")]


def test_latest_steps_back_over_several_marks_in_a_row_to_the_begun_step(
        tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=1)
    w = j.acquire()
    w.begin(Step.DEVICE_RELEASE)
    w.mark_injection(Step.DEVICE_RELEASE, 1)
    w.mark_injection(Step.DEVICE_RELEASE, 2)  # two faults armed on the same step
    (_slot, _ts, step, phase, _job), = JournalReader(tmp_path / "j.bin").latest()
    assert (Step(step), Phase(phase)) == (Step.DEVICE_RELEASE, Phase.BEGIN)


def test_latest_skips_a_slot_whose_thread_wrote_only_marks(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=2)
    busy = j.acquire()
    busy.begin(Step.INVOKE)
    idle = j.acquire()  # THREAD_START, then an injection marker: no step yet
    idle.mark_injection(Step.UPLOAD, 1)
    latest = JournalReader(tmp_path / "j.bin").latest()
    assert [(slot, Step(step)) for slot, _ts, step, _ph, _job in latest] == [
        (busy.slot, Step.INVOKE)]


def test_latest_does_not_report_the_previous_threads_step_on_a_reused_slot(
        tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=1)
    old = j.acquire()
    old.begin(Step.DEVICE_CREATE)  # left begun: the old thread's last record
    j.release(old)
    j.acquire()
    assert JournalReader(tmp_path / "j.bin").latest() == []


def test_a_slot_started_at_seq_2_pow_32_minus_10_is_written_past_the_wrap_and_read_in_order(
        tmp_path: Path) -> None:
    start = 2**32 - 10
    j = JournalWriter(tmp_path / "j.bin", slots=1)
    w = j.acquire(start_seq=start)
    written = 40
    for i in range(written):
        w.begin(Step.INVOKE, device=i)
        w.end(Step.INVOKE, device=i)
    reader = JournalReader(tmp_path / "j.bin")
    entries = reader.slot(0).entries
    seqs = [e.seq for e in entries]
    assert len(entries) == 2 * written  # the THREAD_START mark is not an entry
    assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False))
    assert seqs[0] == start + 1 and seqs[-1] == start + 2 * written > 2**32
    assert [e.device for e in entries[::2]] == list(range(written))
    (_slot, ts, step, phase, _job), = reader.latest()
    assert (Step(step), Phase(phase), ts) == (Step.INVOKE, Phase.END, entries[-1].ts_ns)


def test_a_slot_past_2_pow_32_keeps_the_newest_ring_when_it_wraps_the_ring_too(
        tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "j.bin", slots=1)
    w = j.acquire(start_seq=2**32 - 3)
    for i in range(RING_LEN + 7):
        w.record(Step.INVOKE, Phase.BEGIN, device=i)
    entries = JournalReader(tmp_path / "j.bin").slot(0).entries
    assert len(entries) == RING_LEN
    assert entries[-1].device == RING_LEN + 6
    assert [e.seq for e in entries] == list(range(entries[0].seq, entries[0].seq + RING_LEN))
