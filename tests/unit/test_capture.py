"""Which thread a hang is pinned on when several are late (issue 8: never blame the wrong
thing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stress.engine import capture
from stress.engine.callstacks import Stacks, StackSource
from stress.engine.journal import JournalWriter, Step
from stress.engine.workermanage import WorkerHandle
from stress.stacktext import Frame, ThreadStack


def frames(*names: str) -> list[Frame]:
    return [Frame(n) for n in names]

def handle(tmp_path: Path, journal: Path) -> WorkerHandle:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    return WorkerHandle(0, 0, proc, read_fd, journal, tmp_path / "o", tmp_path / "e", False)


def test_a_thread_only_waiting_for_the_gil_passes_the_blame_to_the_one_holding_it(
        tmp_path: Path) -> None:
    path = tmp_path / "j.bin"
    w = JournalWriter(path, slots=3)
    victim, culprit = w.acquire(), w.acquire()
    victim.begin(Step.INVOKE)
    culprit.begin(Step.DEVICE_RELEASE)
    h = handle(tmp_path, path)
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
    assert capture._culprit_slot(h, victim.slot, stacks) == culprit.slot
    stacks.threads[1].frames = frames("take_gil")  # both wait: nobody better to blame
    assert capture._culprit_slot(h, victim.slot, stacks) == victim.slot
    h.close()


def test_a_worker_dead_of_a_python_exception_before_hello_is_told_apart_from_a_crash(
        tmp_path: Path) -> None:
    """A stack whose workers cannot import (issue 11: an infrastructure failure, not a
    runtime crash) dies with a traceback and status 1 before its hello."""
    h = handle(tmp_path, tmp_path / "j.bin")
    h.stderr_path.write_text("Traceback (most recent call last):\n  File \"x\", line 1\n"
                             "ModuleNotFoundError: No module named 'iree'\n")
    assert capture._python_exception(h) == "ModuleNotFoundError: No module named 'iree'"
    h.stderr_path.write_text("Fatal Python error: Segmentation fault\n\nCurrent thread 0x1\n")
    assert capture._python_exception(h) == ""
    h.close()


def test_a_core_that_names_another_thread_than_the_journal_blamed_is_said_in_the_evidence(
        tmp_path: Path) -> None:
    """The journal blamed thread 1111; the core says 2222, also a journal thread, took the
    signal: failure.json and the stored evidence say both (never silently one of them)."""
    import json
    from concurrent.futures import Future
    from types import SimpleNamespace

    from stress.engine import evidence, kernellog

    stacks = Stacks(StackSource.CORE_GDB, "", crashed_tid=2222,
                    threads=[ThreadStack(2222, frames=frames("boom"))], signal=11)
    fut: Future[evidence.CrashEvidence] = Future()
    fut.set_result(evidence.CrashEvidence(stacks, kernellog.KernelLog(None)))
    updates: list[tuple[int, dict[str, object], int | None]] = []
    store = SimpleNamespace(update_failure=lambda row, ev, tid: updates.append((row, ev, tid)))
    folder = tmp_path / "f"
    folder.mkdir()
    pending = capture.PendingCrash(fut, 7, folder, {"native_tid": 1111, "attribution":
                                                    "faulthandler"}, {}, [1111, 2222])
    s = SimpleNamespace(pending_crashes=[pending], store=store)
    capture.collect_finished(s, wait=True)  # type: ignore[arg-type]
    (row, ev, _), = updates
    assert row == 7 and "2222" in str(ev["blame_conflict"])
    assert "1111" in str(ev["blame_conflict"])
    meta = json.loads((folder / "failure.json").read_text())
    assert meta["blame_conflict"] == ev["blame_conflict"]


def test_the_evidence_budget_spends_the_first_n_then_every_n_times_a_power_of_two() -> None:
    from collections import Counter

    seen: Counter[str] = Counter()
    full = [n for n in range(1, 70) if capture.spend(seen, "crash|SIGSEGV|teardown", 3)[0]]
    assert full == [1, 2, 3, 6, 12, 24, 48]
    assert seen["crash|SIGSEGV|teardown"] == 69
    other: Counter[str] = Counter()
    assert all(capture.spend(other, "k", 0)[0] for _ in range(20))  # 0: no budget


def test_the_evidence_mode_is_known_before_the_core_is_read_and_keeps_step_and_pattern(
        ) -> None:
    from stress.vocab import FailureClass

    exit_key = capture.evidence_key(FailureClass.CRASH, "SIGSEGV", "worker-exit", "exit-clean")
    assert exit_key != capture.evidence_key(FailureClass.CRASH, "SIGSEGV", "device-release",
                                            "exit-clean")
    assert exit_key != capture.evidence_key(FailureClass.CRASH, "SIGSEGV", "worker-exit",
                                            "exit-alive")
    assert exit_key != capture.evidence_key(FailureClass.CRASH, "SIGABRT", "worker-exit",
                                            "exit-clean")


def _exit(rc: int, said_bye: bool = True, said_hello: bool = True, expected_rc: int = 0,
          exec_group: bool = False, python_exception: str = "") -> capture.ExitKind:
    return capture.classify_exit(rc, said_bye=said_bye, said_hello=said_hello,
                                 expected_rc=expected_rc, exec_group=exec_group,
                                 python_exception=python_exception)[0]


def test_an_exit_is_clean_only_with_a_bye_and_the_status_its_job_expects() -> None:
    from stress.engine.forkclient import RETURNCODE_LOST

    assert _exit(0) is capture.ExitKind.CLEAN
    assert _exit(-15, expected_rc=-15) is capture.ExitKind.CLEAN  # exit-sigterm's own end
    assert _exit(0, said_bye=False) is capture.ExitKind.FAILURE  # exited 0 before its jobs
    assert _exit(-11) is capture.ExitKind.FAILURE  # a crash in its exit: the status wins
    assert _exit(RETURNCODE_LOST) is capture.ExitKind.HARNESS


def test_harness_exit_codes_are_ours_except_for_a_users_command() -> None:
    assert capture.classify_exit(70, said_bye=False, said_hello=True, expected_rc=0,
                                 exec_group=False, python_exception="") == \
        (capture.ExitKind.HARNESS, "failed in iree-stress's own code")
    assert _exit(71, said_bye=False) is capture.ExitKind.HARNESS
    assert _exit(70, said_bye=False, exec_group=True) is capture.ExitKind.FAILURE
    assert _exit(71, exec_group=True) is capture.ExitKind.FAILURE


def test_a_worker_that_dies_of_an_import_error_before_its_hello_could_not_start() -> None:
    err = "ModuleNotFoundError: No module named 'iree'"
    kind, why = capture.classify_exit(1, said_bye=False, said_hello=False, expected_rc=0,
                                      exec_group=False, python_exception=err)
    assert kind is capture.ExitKind.HARNESS and why == f"could not start: {err}"
    assert _exit(1, said_bye=False, said_hello=True,
                 python_exception=err) is capture.ExitKind.FAILURE  # after hello: the run's
    assert _exit(1, said_bye=False, said_hello=False) is capture.ExitKind.FAILURE
