"""Evidence pieces that need no real crash (issue 8 "what to build" 1-2, issue 17 item 5):
where the kernel puts a core under each core_pattern form, the core's own notes, the stack
parsers, the kernel log filter, busy-or-blocked classification. Real crashes and hangs are in
tests/system/test_evidence.py."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from stress.engine import evidence, kernellog, postmortem, procstate
from stress.engine.callstacks import StackSource
from stress.engine.procstate import Activity, ThreadState
from tests.helpers.procs import fake_core


# ---- the worker side ----------------------------------------------------------------------
def test_a_prepared_child_may_dump_a_core_and_yama_lets_its_parent_attach() -> None:
    script = ("import ctypes, os, resource\n"
              "from stress.engine import postmortem\n"
              "postmortem.prepare_child(parent_pid=os.getppid())\n"
              "soft, hard = resource.getrlimit(resource.RLIMIT_CORE)\n"
              "dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE\n"
              "print(soft, hard, dumpable)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    hard_here = resource.getrlimit(resource.RLIMIT_CORE)[1]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, check=True, preexec_fn=lambda: resource.setrlimit(
                             resource.RLIMIT_CORE, (0, hard_here)))
    soft, hard, dumpable = (int(x) for x in out.stdout.split())

    expected = 4 << 30 if hard_here == resource.RLIM_INFINITY else min(4 << 30, hard_here)
    assert soft == expected  # raised from 0 up to the hard limit, capped at 4 GiB
    assert hard == hard_here
    assert dumpable == 1
    yama = Path("/proc/sys/kernel/yama/ptrace_scope").exists()
    assert procstate.allow_parent_ptrace(os.getppid()) is yama


# ---- core_pattern --------------------------------------------------------------------------
def test_a_relative_core_pattern_lands_in_the_worker_cwd(tmp_path: Path) -> None:
    globs = postmortem.core_globs("core", 4242, tmp_path)

    assert globs[0] == str(tmp_path / "core")
    assert str(tmp_path / "core.4242") in globs


def test_core_uses_pid_appends_the_pid_when_the_pattern_has_none(tmp_path: Path) -> None:
    assert postmortem.core_globs("core", 7, tmp_path, uses_pid=True)[0] == str(tmp_path /
                                                                               "core.7")
    assert postmortem.core_globs("core.%p", 7, tmp_path, uses_pid=True)[0] == str(tmp_path /
                                                                                  "core.7")


def test_templates_become_the_pid_or_wildcards_and_percent_stays_literal(tmp_path: Path
                                                                          ) -> None:
    globs = postmortem.core_globs("/var/crash/core.%e.%p.%t%%", 99, tmp_path)

    assert globs[0] == "/var/crash/core.*.99.*%"


def test_a_pipe_pattern_gives_only_the_cwd_fallbacks(tmp_path: Path) -> None:
    globs = postmortem.core_globs("|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h",
                                  5, tmp_path)

    assert globs == [str(tmp_path / "core.5"), str(tmp_path / "core")]


def test_glob_characters_in_the_worker_folder_are_matched_literally(tmp_path: Path) -> None:
    odd = tmp_path / "w[0]"
    odd.mkdir()
    (odd / "core").write_bytes(b"x")
    (tmp_path / "w0").mkdir()
    (tmp_path / "w0" / "core").write_bytes(b"x")

    import glob

    hits = glob.glob(postmortem.core_globs("core", 1, odd)[0])

    assert hits == [str(odd / "core")]


# ---- the core's notes -----------------------------------------------------------------------


def test_the_core_notes_name_the_process_and_the_thread_that_took_the_signal(
        tmp_path: Path) -> None:
    core = fake_core(tmp_path / "core", pid=300, tids=[305, 300, 301], signum=11)

    notes = postmortem.read_core_notes(core)

    assert notes is not None
    assert (notes.pid, notes.crashed_tid, notes.signal) == (300, 305, 11)
    assert notes.tids == [305, 300, 301]


def test_a_file_that_is_not_a_core_has_no_notes(tmp_path: Path) -> None:
    (tmp_path / "core").write_text("core: a folder name, a text file, anything\n")

    assert postmortem.read_core_notes(tmp_path / "core") is None
    assert postmortem.read_core_notes(tmp_path / "missing") is None


def test_a_stale_core_of_another_process_is_neither_read_nor_deleted(tmp_path: Path) -> None:
    stale = fake_core(tmp_path / "core", pid=os.getpid() + 1, tids=[os.getpid() + 1],
                      signum=6)
    stderr = "noise\nFatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most ..."

    stacks = postmortem.native_stacks(os.getpid(), "/usr/bin/python3", tmp_path, stderr,
                                      timeout_s=10)

    assert stale.exists()
    assert stacks.tool is StackSource.FAULTHANDLER
    assert stacks.text.startswith("Fatal Python error: Segmentation fault")
    assert f"no core of {os.getpid()}" in stacks.note
    assert stacks.core is None


def test_discarding_a_core_deletes_only_that_process_core(tmp_path: Path) -> None:
    mine = fake_core(tmp_path / "core.41", pid=41, tids=[41], signum=11)
    other = fake_core(tmp_path / "core", pid=42, tids=[42], signum=11)

    assert postmortem.discard_core(41, tmp_path) == mine
    assert not mine.exists() and other.exists()
    assert postmortem.discard_core(41, tmp_path) is None


def test_sweeping_a_run_deletes_left_over_cores_and_nothing_else(tmp_path: Path) -> None:
    w0, w1 = postmortem.core_dir(tmp_path, "w0"), postmortem.core_dir(tmp_path, "w1")
    cores = [fake_core(w0 / "core", 5, [5], 11), fake_core(w1 / "core.6", 6, [6], 6)]
    (w1 / "notes.txt").write_text("not a core")

    assert postmortem.sweep_cores(tmp_path) == cores
    assert [p.name for p in w1.iterdir()] == ["notes.txt"]
    assert w0 == tmp_path / "cores" / "w0" and w0.is_dir()


def test_with_no_core_and_no_report_the_stack_says_none_and_why(tmp_path: Path) -> None:
    stacks = postmortem.native_stacks(os.getpid(), "/usr/bin/python3", tmp_path, "", 10,
                                      since_wall=4e9)

    assert stacks.tool is StackSource.NONE
    assert "no faulthandler report" in stacks.note
    assert stacks.render().startswith("# none\n# note: no core of")


# ---- the kernel log ------------------------------------------------------------------------
def test_kernel_log_keeps_gpu_and_fault_lines_since_the_start_plus_the_last_lines() -> None:
    stamped: list[tuple[float | None, str]] = [
        (100.0, "NVRM: Xid 79, GPU has fallen off the bus (before the run)")]
    stamped += [(200.0 + i, f"eth0: link chatter {i}") for i in range(30)]
    stamped.insert(5, (203.5, "NVRM: Xid (PCI:0000:1b:00): 13, Graphics Exception"))
    stamped.insert(9, (206.5, "amdgpu 0000:03:00.0: ring gfx_0.0.0 timeout, signaled seq=1"))
    stamped.insert(12, (207.5, "INFO: task python:123 blocked for more than 120 seconds."))

    lines = kernellog.select_lines(stamped, since_wall=199.0, max_lines=200)

    assert "NVRM: Xid 79, GPU has fallen off the bus (before the run)" not in lines
    assert lines[:3] == ["NVRM: Xid (PCI:0000:1b:00): 13, Graphics Exception",
                         "amdgpu 0000:03:00.0: ring gfx_0.0.0 timeout, signaled seq=1",
                         "INFO: task python:123 blocked for more than 120 seconds."]
    assert lines[3:] == [f"eth0: link chatter {i}" for i in range(20, 30)]
    assert kernellog.select_lines(stamped, 199.0, max_lines=4)[0] == "eth0: link chatter 26"


def test_the_kernel_log_keeps_nothing_older_than_the_start_or_says_why_it_is_unreadable(
        ) -> None:
    log = kernellog.kernel_log_tail(since_wall=4e9)  # the future: nothing logged since

    if log.source is None:
        assert log.note and log.text.startswith("# kernel log not readable: ")
    else:
        assert log.lines == []
        assert "(nothing logged since then)" in log.text


# ---- busy or blocked --------------------------------------------------------------------------
def state(tid: int, letter: str, ticks: int, ns: int | None = None) -> ThreadState:
    return ThreadState(tid, "python", letter, ticks, ns)


@pytest.mark.parametrize(("first", "last", "expected"), [
    (state(1, "R", 0), state(1, "R", 1), Activity.BUSY),  # on a run queue it never got
    (state(1, "S", 0, 0), state(1, "R", 0, 400_000_000), Activity.BUSY),  # 0.4 of 0.5 s
    (state(1, "S", 0), state(1, "S", 0), Activity.BLOCKED),
    (state(1, "D", 0), state(1, "D", 1), Activity.BLOCKED),  # a driver ioctl, 1 tick
    (state(1, "S", 0, 0), state(1, "S", 0, 100_000_000), Activity.MIXED),  # 20% of a core
    (state(1, "R", 0), state(1, "S", 0), Activity.BLOCKED),  # read on its way into a wait
    (state(1, "S", 0), state(1, "R", 0), Activity.MIXED),  # woke up as the window ended
    (state(1, "S", 0), None, Activity.GONE),
    (state(1, "S", 0), state(1, "Z", 0), Activity.GONE),
])
def test_threads_are_classified_busy_blocked_mixed_or_gone(
        first: ThreadState, last: ThreadState | None, expected: Activity) -> None:
    assert procstate.classify(first, last, window_s=0.5).activity is expected


def test_stat_lines_with_parentheses_in_the_thread_name_parse() -> None:
    line = "123 (evil) (R x) S 1 123 123 0 -1 4194560 50 0 0 0 17 5 0 0 20 0 3 0 9 0 0"

    assert procstate.parse_stat(line) == ("evil) (R x", "S", 22)


def test_this_process_threads_are_read_from_proc() -> None:
    threads = procstate.thread_states(os.getpid())

    main = next(t for t in threads if t.tid == os.getpid())
    assert main.state == "R"  # it is running this very line
    assert main.cpu_ticks >= 0 and main.name


def test_a_vanished_process_gives_empty_evidence_not_an_error() -> None:
    gone = 2**22 + 12345  # above the default pid_max: no such process
    ev = evidence.collect_many([gone], window_s=0.05, timeout_s=5)

    assert ev.processes[gone].samples == {}
    assert ev.processes[gone].stacks.tool is StackSource.NONE
    assert procstate.sample(gone, 0.01) == {}
    assert set(ev.files(gone)) == {"stacks.txt", "threads.json", "kernel.log",
                                   "telemetry_before.json"}


def test_a_teardown_hangs_kernel_log_keeps_only_its_own_processes_faults() -> None:
    """issue 36 item 10: a teardown hang's kernel.log held the segfault lines of unrelated
    processes (other pids: another copy's crash); the job's own threads' and its group's
    (a compiler it ran) stay, and so do lines that name no process (a GPU's Xid)."""
    lines = ["[ 10.100000] python[4242]: segfault at 0 ip 00007f sp 00007f error 6 in "
             "libfault.so[7f+1000]",
             "[ 10.100001] Code: 48 8b 45 f8 c7 00 00 00 00 00",
             "[ 10.200000] iree-lld[5001]: segfault at 8 ip 00007e sp 00007e error 4 in "
             "iree-lld[55+100]",
             "[ 10.300000] traps: pytest[777] general protection fault ip:7f sp:7f error:0",
             "[ 10.400000] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus"]
    sample = procstate.ThreadSample(778, "worker", "R", "R", 0.1, 0.1, Activity.BUSY)
    hang = evidence.HangEvidence(
        {777: evidence.ProcessEvidence(777, {778: sample}, evidence.Stacks(StackSource.NONE,
                                                                           ""))},
        {}, kernellog.KernelLog("dmesg", lines, None, 0.0))
    text = hang.files(777, own=[5001])["kernel.log"]
    assert "python[4242]" not in text and "Code: 48" not in text  # another process's crash
    assert "iree-lld[5001]" in text and "pytest[777]" in text and "Xid" in text
    assert "2 line(s) about faults of other processes (not this job's) left out" in text
