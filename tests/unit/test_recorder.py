"""Where failures are written (stress/engine/recorder.py): post-mortem stacks completed into
their row and folder, the evidence budget, and which processes keep core dumps."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.engine import recorder as recorder_mod
from tests.helpers.engine import recorder


def test_a_core_that_names_another_thread_than_the_journal_blamed_is_said_in_the_evidence(
        tmp_path: Path) -> None:
    """The journal blamed thread 1111; the core says 2222, also a journal thread, took the
    signal: failure.json and the stored evidence say both (never silently one of them)."""
    import json
    from concurrent.futures import Future
    from types import SimpleNamespace

    from stress.engine import evidence, kernellog
    from stress.engine.callstacks import Stacks, StackSource
    from stress.stacktext import Frame, ThreadStack

    stacks = Stacks(StackSource.CORE_GDB, "", crashed_tid=2222,
                    threads=[ThreadStack(2222, frames=[Frame("boom")])], signal=11)
    fut: Future[evidence.CrashEvidence] = Future()
    fut.set_result(evidence.CrashEvidence(stacks, kernellog.KernelLog(None)))
    updates: list[tuple[int, dict[str, object], int | None]] = []
    store = SimpleNamespace(update_failure=lambda row, ev, tid: updates.append((row, ev, tid)))
    folder = tmp_path / "f"
    folder.mkdir()
    rec = recorder(tmp_path, store)
    rec.pending.append(recorder_mod.PendingCrash(fut, 7, folder, {
        "native_tid": 1111, "attribution": "faulthandler"}, {}, [1111, 2222]))
    rec.collect_finished(wait=True)
    assert not rec.pending
    (row, ev, _), = updates
    assert row == 7 and "2222" in str(ev["blame_conflict"])
    assert "1111" in str(ev["blame_conflict"])
    meta = json.loads((folder / "failure.json").read_text())
    assert meta["blame_conflict"] == ev["blame_conflict"]


def test_the_evidence_budget_spends_the_first_n_then_every_n_times_a_power_of_two() -> None:
    from collections import Counter

    seen: Counter[str] = Counter()
    full = [n for n in range(1, 70) if recorder_mod.spend(seen, "crash|SIGSEGV|teardown", 3)[0]]
    assert full == [1, 2, 3, 6, 12, 24, 48]
    assert seen["crash|SIGSEGV|teardown"] == 69
    other: Counter[str] = Counter()
    assert all(recorder_mod.spend(other, "k", 0)[0] for _ in range(20))  # 0: no budget


def test_the_evidence_mode_is_known_before_the_core_is_read_and_keeps_step_and_pattern(
        ) -> None:
    from stress.vocab import FailureClass

    key = recorder_mod.evidence_key
    exit_key = key(FailureClass.CRASH, "SIGSEGV", "worker-exit", "exit-clean")
    assert exit_key != key(FailureClass.CRASH, "SIGSEGV", "device-release", "exit-clean")
    assert exit_key != key(FailureClass.CRASH, "SIGSEGV", "worker-exit", "exit-alive")
    assert exit_key != key(FailureClass.CRASH, "SIGABRT", "worker-exit", "exit-clean")


def test_cores_stay_on_until_every_crash_mode_seen_has_its_budget_then_one_in_eight(
        tmp_path: Path) -> None:
    rec = recorder(tmp_path, None, evidence_budget=2)
    assert rec.cores_wanted()  # no crash seen yet
    rec.evidence_seen["a"] = 2
    rec.evidence_seen["b"] = 1
    assert rec.cores_wanted()  # b has less than its budget
    rec.evidence_seen["b"] = 2
    assert [rec.cores_wanted() for _ in range(16)].count(True) == 2


def test_the_budget_s_processes_dump_their_notes_only_unless_copies_share_a_core_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the budget a process may dump a core cut after its notes (its fault site), but
    never where copies of a command share a folder under a pattern without its pid (each
    `core` would replace the one a sampled crash is about to have read), nor to a |pipe
    (which is given the whole core whatever the limit)."""
    import resource
    import subprocess
    import sys

    from stress.engine import postmortem
    from tests.helpers.engine import soak_config

    def after(notes: bool, pattern: str, hang: bool = False) -> tuple[int, int]:
        """(soft core limit, coredump_filter) of a process `no_cores` was called on (`hang`:
        then a hang's kill asked for its core)."""
        monkeypatch.setattr(postmortem, "read_core_pattern", lambda: (pattern, False))
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert recorder_mod.no_cores(proc.pid, notes) is False
            if hang:
                assert postmortem.allow_core(proc.pid) == ""
            return (resource.prlimit(proc.pid, resource.RLIMIT_CORE)[0],
                    int(Path(f"/proc/{proc.pid}/coredump_filter").read_text(), 16))
        finally:
            proc.kill()
            proc.wait()

    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    if hard != resource.RLIM_INFINITY and hard < postmortem.NOTES_CORE_BYTES:
        pytest.skip("the hard core limit here is below a notes-only core")
    mine = int(Path("/proc/self/coredump_filter").read_text(), 16)
    assert after(True, "core") == (postmortem.NOTES_CORE_BYTES, 0)
    assert after(False, "core") == (0, mine)
    assert after(True, "|/usr/lib/systemd/systemd-coredump %P") == (0, mine)
    limit, kept = after(True, "core", hang=True)  # a hang's core is whole again
    assert limit > postmortem.NOTES_CORE_BYTES and kept == mine != 0
    for pattern, engine, workers, notes in [("core", "exec", 2, False), ("core", "exec", 1, True),
                                            ("core.%p", "exec", 2, True),
                                            ("core", "native", 2, True),
                                            ("/cores/core", "native", 2, False),
                                            ("/cores/core-%p", "native", 2, True),
                                            ("core", "python", 1, False)]:
        monkeypatch.setattr(postmortem, "read_core_pattern", lambda p=pattern: (p, False))
        cfg = soak_config(tmp_path, engine=engine, workers=workers)
        assert recorder_mod.notes_cores(cfg) is notes, (pattern, engine, workers)
