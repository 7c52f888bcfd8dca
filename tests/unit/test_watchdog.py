"""The watchdog's deadlines (issue 8): every step a worker takes has one, decided on a fake
clock against real journal files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stress.engine import journal as journal_mod
from stress.engine import watchdog
from stress.engine.journal import JournalReader, JournalWriter, Step

LIMITS = watchdog.Limits(timeout_s=30.0, teardown_timeout_s=15.0, startup_s=120.0,
                         stop_grace_s=5.0)
S = 1_000_000_000  # ns per second


def journal(tmp_path: Path) -> tuple[JournalWriter, JournalReader]:
    w = JournalWriter(tmp_path / "j.bin", slots=4)
    return w, JournalReader(tmp_path / "j.bin")


def scan(reader: JournalReader | None, now_ns: int,
         gil_waiter: Callable[[int], bool] | None = None,
         **kw: int | None) -> watchdog.Stuck | None:
    args: dict[str, int | None] = {"started_ns": 0, "bye_ns": None, "stop_ns": None, **kw}
    return watchdog.scan(reader, now_ns, LIMITS, started_ns=int(args["started_ns"] or 0),
                         bye_ns=args["bye_ns"], stop_ns=args["stop_ns"], gil_waiter=gil_waiter)


def newest_ts(reader: JournalReader) -> int:
    return max(ts for _, ts, _, _, _ in reader.latest())


def test_a_worker_without_a_journal_is_stuck_in_startup_only_after_the_startup_deadline(
        ) -> None:
    assert scan(None, 119 * S) is None
    stuck = scan(None, 121 * S)
    assert stuck is not None and stuck.label == "startup" and not stuck.teardown


def test_a_hal_step_past_timeout_is_a_hang_and_a_release_past_its_deadline_a_teardown_hang(
        tmp_path: Path) -> None:
    w, r = journal(tmp_path)
    t = w.acquire()
    t.begin(Step.INVOKE)
    now = newest_ts(r)
    assert scan(r, now + 29 * S) is None
    stuck = scan(r, now + 31 * S)
    assert stuck is not None and stuck.step is Step.INVOKE and not stuck.teardown
    t.end(Step.INVOKE)
    t.begin(Step.DEVICE_RELEASE)
    now = newest_ts(r)
    assert scan(r, now + 14 * S) is None
    stuck = scan(r, now + 16 * S)
    assert stuck is not None and stuck.step is Step.DEVICE_RELEASE and stuck.teardown


def test_a_job_waiting_on_busy_helpers_is_not_stuck_but_a_silent_process_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JOB step was exempt from the watchdog: a thread stuck between HAL steps (or a
    process where nothing moves) was never declared."""
    clock = [1000 * S]
    monkeypatch.setattr(journal_mod, "_now", lambda: clock[0])
    w, r = journal(tmp_path)
    job_thread, helper = w.acquire(), w.acquire()
    job_thread.begin(Step.JOB)  # at t = 1000 s
    clock[0] += 25 * S
    helper.begin(Step.INVOKE)  # the helper keeps working
    helper.end(Step.INVOKE)  # at t = 1025 s
    assert scan(r, 1040 * S) is None  # job begun 40 s ago, but the process moved 15 s ago
    stuck = scan(r, 1056 * S)  # nothing at all for 31 s: stuck, blamed on the job thread
    assert stuck is not None and stuck.step is Step.JOB and stuck.slot == job_thread.slot


def test_a_worker_that_said_bye_but_never_exits_is_a_teardown_hang_at_worker_exit(
        tmp_path: Path) -> None:
    w, r = journal(tmp_path)
    t = w.acquire()
    t.begin(Step.JOB)
    t.end(Step.JOB)
    bye = newest_ts(r)
    assert scan(r, bye + 14 * S, bye_ns=bye) is None
    stuck = scan(r, bye + 16 * S, bye_ns=bye)
    assert stuck is not None and stuck.step is Step.WORKER_EXIT and stuck.teardown


def test_a_worker_told_to_stop_that_neither_finishes_nor_exits_is_declared(
        tmp_path: Path) -> None:
    """Before: with no step in flight and no bye, the parent's teardown loop waited forever."""
    w, r = journal(tmp_path)
    t = w.acquire()
    t.begin(Step.JOB)
    t.end(Step.JOB)
    stop = newest_ts(r)
    limit = LIMITS.timeout_s + LIMITS.teardown_timeout_s + LIMITS.stop_grace_s
    assert scan(r, stop + int((limit - 1) * S), stop_ns=stop) is None
    stuck = scan(r, stop + int((limit + 1) * S), stop_ns=stop)
    assert stuck is not None and stuck.label == "stop" and stuck.teardown


def test_a_silent_job_gets_at_least_the_floor_even_with_a_short_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs and references are computed inside a job without journal records: with
    --timeout 1s a loaded box must not turn that into a hang."""
    clock = [1000 * S]
    monkeypatch.setattr(journal_mod, "_now", lambda: clock[0])
    w, r = journal(tmp_path)
    t = w.acquire()
    t.begin(Step.JOB)
    short = watchdog.Limits(1.0, 1.0, 120.0, 5.0)
    args = {"started_ns": 0, "bye_ns": None, "stop_ns": None}
    assert watchdog.scan(r, 1005 * S, short, **args) is None  # type: ignore[arg-type]
    stuck = watchdog.scan(r, int((1000 + watchdog.JOB_SILENCE_FLOOR_S + 1) * S), short,
                          **args)  # type: ignore[arg-type]
    assert stuck is not None and stuck.step is Step.JOB


def test_of_several_late_threads_the_step_begun_last_is_blamed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A release stuck in native code while holding the GIL leaves an invoke on another
    thread unable to return: both are late, the release (begun last) is the cause."""
    clock = [1000 * S]
    monkeypatch.setattr(journal_mod, "_now", lambda: clock[0])
    w, r = journal(tmp_path)
    victim, culprit, busy_job = w.acquire(), w.acquire(), w.acquire()
    victim.begin(Step.INVOKE)  # t = 1000 s
    busy_job.begin(Step.JOB)
    clock[0] += 2 * S
    culprit.begin(Step.DEVICE_RELEASE)  # t = 1002 s
    stuck = scan(r, 1040 * S)
    assert stuck is not None and stuck.slot == culprit.slot and stuck.teardown


def test_a_late_thread_waiting_for_the_gil_is_a_victim_even_when_its_step_began_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The H100 fault matrix's per-call join-block cell: a release began, the GIL went to
    another thread that began a readback and waited on its fence, then the release stalled
    holding the GIL. Both are late and the readback began last, but its thread waits for the
    GIL: the release is to blame (a teardown hang), not the readback."""
    clock = [1000 * S]
    monkeypatch.setattr(journal_mod, "_now", lambda: clock[0])
    w, r = journal(tmp_path)
    culprit, victim = w.acquire(), w.acquire()
    culprit.begin(Step.DEVICE_RELEASE)  # t = 1000 s
    clock[0] += S // 100
    victim.begin(Step.READBACK)  # t = 1000.01 s
    blind = scan(r, 1040 * S)
    assert blind is not None and blind.slot == victim.slot  # the journal alone blames it
    asked: list[int] = []

    def gil_waiter(slot: int) -> bool:
        asked.append(slot)
        return slot == victim.slot

    stuck = scan(r, 1040 * S, gil_waiter=gil_waiter)
    assert stuck is not None and stuck.slot == culprit.slot and stuck.teardown
    assert stuck.label == "device-release"
    # the record says which threads were late and what decided the blame
    assert sorted((t.slot, t.label, t.gil_waiter) for t in stuck.late) == sorted(
        [(culprit.slot, "device-release", False), (victim.slot, "readback", True)])
    reads = watchdog.with_reads(stuck, {victim.slot: ["futex wait, timed"] * 3})
    assert {t.slot: t.reads for t in reads.late}[victim.slot] == ("futex wait, timed",) * 3
    assert {t.slot: t.as_dict()["gil_waiter"] for t in reads.late}[culprit.slot] is False
    # every late thread waiting for the GIL (none known to stall): the journal's rule stands
    both = scan(r, 1040 * S, gil_waiter=lambda slot: True)
    assert both is not None and both.slot == victim.slot
    # one thread late, no other near its own deadline: no /proc read at all
    asked.clear()
    assert scan(r, int(1015.005 * S), gil_waiter=gil_waiter) is not None
    assert asked == []


def test_a_victim_past_its_deadline_first_does_not_take_the_blame_from_a_stall_begun_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The H100 fault matrix's per-call join-block cell again: an upload began, then another
    thread began a release that stalled holding the GIL. The upload passes its deadline a
    moment before the release does; the release, past half of its own, is the one to blame."""
    clock = [1000 * S]
    monkeypatch.setattr(journal_mod, "_now", lambda: clock[0])
    w, r = journal(tmp_path)
    victim, culprit = w.acquire(), w.acquire()
    victim.begin(Step.UPLOAD)  # t = 1000 s, deadline 30 s
    clock[0] += 2 * S
    culprit.begin(Step.INVOKE)  # t = 1002 s, deadline 30 s
    stuck = scan(r, int(1030.1 * S))
    assert stuck is not None and stuck.slot == culprit.slot and stuck.label == "invoke"
    assert stuck.age_s < LIMITS.timeout_s  # blamed before its own deadline
    assert {t.slot for t in stuck.late} == {victim.slot, culprit.slot}
    # nothing past its deadline: no verdict, however near
    assert scan(r, int(1029.9 * S)) is None
    # the culprit's step under half its deadline: the victim stands alone
    clock[0] = 1016 * S
    culprit.end(Step.INVOKE)
    culprit.begin(Step.INVOKE)
    alone = scan(r, int(1030.1 * S))
    assert alone is not None and alone.slot == victim.slot and not alone.late


def test_a_helper_slot_freed_after_a_failed_release_is_not_a_teardown_hang(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper whose release raised used to leave its BEGIN open in a freed slot: 15 s later
    the watchdog killed a healthy worker as a teardown hang."""
    from stress.engine.patterns import _fail_open_steps

    clock = [1000 * S]
    monkeypatch.setattr(journal_mod, "_now", lambda: clock[0])
    w, r = journal(tmp_path)
    helper = w.acquire()
    helper.begin(Step.DEVICE_RELEASE)
    _fail_open_steps(helper)  # what run_helper does when its function raised
    w.release(helper)
    assert scan(r, 1100 * S) is None


def test_a_worker_told_to_stop_is_judged_from_its_last_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-job process is told to stop at launch: the stop deadline runs from its last
    journal record, not from the launch (a slow start is not a teardown hang)."""
    clock = [1000 * S]
    monkeypatch.setattr(journal_mod, "_now", lambda: clock[0])
    w, r = journal(tmp_path)
    t = w.acquire()
    clock[0] += 40 * S
    t.begin(Step.JOB)
    t.end(Step.JOB)  # at 1040 s; stop was sent at 1000 s
    limit = LIMITS.timeout_s + LIMITS.teardown_timeout_s + LIMITS.stop_grace_s
    assert scan(r, int(1040 * S + (limit - 1) * S), stop_ns=1000 * S) is None
    assert scan(r, int(1040 * S + (limit + 1) * S), stop_ns=1000 * S) is not None


def test_a_stall_in_an_exit_paths_own_device_work_after_bye_is_a_hang_at_that_step(
        tmp_path: Path) -> None:
    """exit-inflight's `queue` runs after goodbye: past the exit's deadline it is a hang at
    `queue`, not a teardown hang at worker-exit (issue 24 item 3)."""
    w, r = journal(tmp_path)
    t = w.acquire()
    t.begin(Step.JOB)
    t.end(Step.JOB)
    bye = newest_ts(r)
    t.begin(Step.WORKER_EXIT)
    t.begin(Step.QUEUE)
    assert scan(r, bye + 14 * S, bye_ns=bye) is None
    stuck = scan(r, bye + 16 * S, bye_ns=bye)
    assert stuck is not None and stuck.step is Step.QUEUE and not stuck.teardown
