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
