"""gilwait: which late thread waits for the GIL (a victim) and which stalled, read from
/proc/PID/task/TID/syscall before any evidence tool touches the process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stress.engine import gilwait

# a release stalled in native code while holding the GIL (ctypes.PyDLL keeps it), and a
#   thread whose native call ended meanwhile and now waits for the GIL to come back
_GIL_SCENE = textwrap.dedent("""
    import ctypes, threading, time
    def victim():
        time.sleep(0.2)
        ctypes.CDLL(None).usleep(50000)  # the GIL is released here, then wanted back
    t = threading.Thread(target=victim)
    t.start()
    print(threading.get_native_id(), t.native_id, flush=True)
    time.sleep(0.05)
    ctypes.PyDLL(None).pause()  # blocks forever, holding the GIL
""")


def test_a_timed_futex_wait_is_told_apart_from_untimed_waits_and_running() -> None:
    gil = "202 0x7f9af734e6f0 0x89 0x0 0x7f9af685da40 0x0 0xffffffff 0x7f9af685d910 0x7f9a"
    join = "202 0x7f9af734e6f0 0x80 0x1c2 0x0 0x0 0x0 0x7f9af685d910 0x7f9af6ca3f16"
    assert gilwait.in_timed_futex_wait(gil)
    assert not gilwait.in_timed_futex_wait(join)  # a thread join: no timeout
    assert not gilwait.in_timed_futex_wait("34 0x0 0x0 0x2 0x0 0x0 0x5600 0x7ffe 0x7f9a")
    assert not gilwait.in_timed_futex_wait("running")
    assert not gilwait.in_timed_futex_wait("-1 0x7ffe 0x7f9a")
    assert gilwait.parse_syscall("running") is None
    assert gilwait.parse_syscall(join) == (202, [0x7f9af734e6f0, 0x80, 0x1c2, 0, 0, 0])


@contextlib.contextmanager
def _scene(source: str, settled: Callable[[int, list[int]], bool]) -> Iterator[list[int]]:
    """A process running `source` (it prints its native thread ids, the GIL holder first),
    once `settled(pid, ids)` (polled for up to ~4 s): the ids; killed afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ids = [int(x) for x in proc.stdout.readline().split()]
        for _ in range(200):  # the victims' usleep ends ~0.25 s in; then they wait for good
            if settled(proc.pid, ids):
                break
            subprocess.run(["sleep", "0.02"], check=True)
        yield [proc.pid, *ids]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not Path("/proc/self/syscall").exists(), reason="no /proc/PID/syscall")
def test_the_thread_waiting_for_the_gil_is_the_victim_and_the_one_holding_it_is_not() -> None:
    with _scene(_GIL_SCENE, lambda pid, ids: gilwait.waits_for_gil(pid, ids[1])) as ids:
        pid, culprit, victim = ids
        assert gilwait.waits_for_gil(pid, victim), \
            "the thread waiting for the GIL was never seen in a timed futex wait"
        assert not gilwait.waits_for_gil(pid, culprit)
        by_slot = gilwait.GilCheck(pid, {0: culprit, 1: victim, 2: 0}.__getitem__)
        assert [by_slot(s) for s in (0, 1, 2)] == [False, True, False]
        # what it read is kept for the failure's record: the holder's untimed pause
        #   (rt_sigsuspend / pause: not a futex), the victim's timed waits, nothing for no tid
        timed = by_slot.reads[1].count("futex wait, timed")  # (a read between two waits
        #   may catch it running, between the GIL's wake-ups: a full suite run here saw one)
        assert timed == gilwait.GIL_TIMED_SAMPLES and \
            by_slot.reads[1][-1] == "futex wait, timed", by_slot.reads
        assert by_slot.reads[0] and "futex wait, timed" not in by_slot.reads[0], by_slot.reads
        assert by_slot.reads[2] == []


# eight threads waiting for the GIL at once contend for its mutex: on two cores a read catches
#   one running now and then (all of three reads in a wait missed 28 of 400 checks here)
_CROWDED_GIL_SCENE = textwrap.dedent("""
    import ctypes, threading, time
    def victim():
        time.sleep(0.2)
        ctypes.CDLL(None).usleep(50000)
    threads = [threading.Thread(target=victim) for _ in range(8)]
    for t in threads:
        t.start()
    print(threading.get_native_id(), *[t.native_id for t in threads], flush=True)
    time.sleep(0.05)
    ctypes.PyDLL(None).pause()
""")


@pytest.mark.skipif(not Path("/proc/self/syscall").exists(), reason="no /proc/PID/syscall")
def test_every_one_of_eight_threads_waiting_for_the_gil_is_a_victim_on_every_check() -> None:
    def settled(pid: int, ids: list[int]) -> bool:
        return all(gilwait.waits_for_gil(pid, v) for v in ids[1:])

    with _scene(_CROWDED_GIL_SCENE, settled) as ids:
        pid, culprit, *victims = ids
        missed = [v for _ in range(30) for v in victims if not gilwait.waits_for_gil(pid, v)]
        assert not missed, f"{len(missed)} of {30 * len(victims)} checks blamed a victim"
        assert not gilwait.waits_for_gil(pid, culprit)
