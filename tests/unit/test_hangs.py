"""Stuck workers (stress/engine/hangs.py): which thread a hang is pinned on when several are
late (issue 8: never blame the wrong thing), and the deadline scan."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stress.engine import hangs, watchdog
from stress.engine.callstacks import Stacks, StackSource
from stress.engine.journal import JournalWriter, Step
from stress.engine.workermanage import WorkerHandle
from stress.stacktext import Frame, ThreadStack
from tests.helpers.procs import ended_handle


def frames(*names: str) -> list[Frame]:
    return [Frame(n) for n in names]


def test_a_thread_only_waiting_for_the_gil_passes_the_blame_to_the_one_holding_it(
        tmp_path: Path) -> None:
    path = tmp_path / "j.bin"
    w = JournalWriter(path, slots=3)
    victim, culprit = w.acquire(), w.acquire()
    victim.begin(Step.INVOKE)
    culprit.begin(Step.DEVICE_RELEASE)
    h = ended_handle(tmp_path, path)
    reader = h.journal()
    assert reader is not None
    # rewrite the slots' native tids (both threads are this one in the test)
    import struct

    from stress.engine import journal as j

    for slot, tid in ((victim.slot, 1111), (culprit.slot, 2222)):
        struct.pack_into("<QQ", w._mm, j._slot_offset(slot, w.ring_len), tid, 0)
    stacks = Stacks(StackSource.PYSPY, "", threads=[
        ThreadStack(1111, name="job-0", frames=frames("futex_wait", "take_gil",
                                                      "PyEval_RestoreThread")),
        ThreadStack(2222, name="job-1", frames=frames("syscall", "iree_fault_block",
                                                      "pthread_join"))])
    assert hangs._culprit_slot(h, victim.slot, stacks) == culprit.slot
    stacks.threads[1].frames = frames("take_gil")  # both wait: nobody better to blame
    assert hangs._culprit_slot(h, victim.slot, stacks) == victim.slot
    h.close()


def test_a_worker_silent_past_the_start_up_allowance_is_found_stuck_by_the_scan(
        tmp_path: Path) -> None:
    """No journal yet (the interpreter never started): stuck at start-up once the allowance
    is past, not before; the gap is the time since the previous scan."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        h = WorkerHandle(0, 0, proc, -1, tmp_path / "none.bin", tmp_path / "o", tmp_path / "e",
                         False, started=100.0)
        now = [int(130e9)]
        scan = hangs.Deadlines(watchdog.Limits(30.0, 15.0, 60.0, 5.0), {0: h}, lambda: now[0])
        assert scan.gap() is None and scan.find() == []
        now[0] = int(161e9)
        assert scan.gap() == 31.0
        (found, stuck), = scan.find()
        assert found is h and stuck.label == watchdog.STARTUP_STEP
        assert scan.find(skip={id(h)}) == []  # being handled: not looked at again
    finally:
        proc.kill()
        proc.wait()
