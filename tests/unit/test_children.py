"""The cores and crashed processes of an exec job's group (issue 27 item 5): which cores are
the group's, where they go, which process is blamed, on fake cores whose notes name their
session as the kernel's do."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from stress.engine import children, kernellog
from stress.engine.children import GroupWatch, core_name_globs
from stress.engine.postmortem import read_core_notes
from stress.engine.testlog import SignalDeath
from tests.helpers.procs import dead_pids, fake_core


def watch(tmp_path: Path, leader: int, pattern: str = "core", started: float = 0.0,
          claimed: dict[int, None] | None = None) -> GroupWatch:
    user = tmp_path / "user"
    user.mkdir(parents=True, exist_ok=True)
    return GroupWatch(leader, user, tmp_path / "run" / "cores" / children.CHILD_CORES,
                      started, (pattern, False), claimed)


def klog(*lines: str) -> kernellog.KernelLog:
    """A kernel log read by dmesg (lines stamped in seconds since boot)."""
    return kernellog.KernelLog("dmesg", list(lines), None, 0.0)


def test_core_names_follow_core_pattern_with_any_pid() -> None:
    assert core_name_globs("core", False) == ["core", "core.[0-9]*"]
    assert core_name_globs("core", True) == ["core.[0-9]*", "core"]
    assert core_name_globs("/var/crash/core.%e.%p", False) == [
        "/var/crash/core.*.[0-9]*", "core", "core.[0-9]*"]
    assert core_name_globs("|/usr/lib/systemd/systemd-coredump %P", False) == [
        "core", "core.[0-9]*"]


def test_a_child_s_core_leaves_the_user_s_folder_and_others_cores_stay_where_they_are(
        tmp_path: Path) -> None:
    leader, child, stranger = dead_pids(3)
    w = watch(tmp_path, leader)
    mine = fake_core(w.cwd / "core", child, [child], 11, sid=leader, name="iree-compile")
    theirs = fake_core(w.cwd / f"core.{stranger}", stranger, [stranger], 11, sid=stranger)
    own = fake_core(w.cwd / f"core.{leader}", leader, [leader], 11, sid=leader)

    w.sweep()

    moved = w.dest / f"core.{child}"
    assert not mine.exists() and read_core_notes(moved) is not None
    assert theirs.exists()  # another job's (or anyone's) session: not ours to touch
    assert own.exists()  # the command's own core: the session reads it where it is
    assert list(w.cores) == [child]


def test_a_core_still_being_written_is_moved_only_once_its_process_is_gone(
        tmp_path: Path) -> None:
    (leader,) = dead_pids(1)
    w = watch(tmp_path, leader)
    alive = os.getpid()  # a process that is not done: its core may be half written
    core = fake_core(w.cwd / "core", alive, [alive], 11, sid=leader)

    w.sweep()
    assert core.exists() and not w.cores

    w.sweep(final=True)  # the job ended and its group was killed
    assert not core.exists() and alive in w.cores


def test_the_first_core_of_the_group_is_the_crash_with_its_executable_from_the_core(
        tmp_path: Path) -> None:
    leader, first, second = dead_pids(3)
    w = watch(tmp_path, leader)
    fake_core(w.cwd / "core", first, [first + 1, first], 11, sid=leader, name="iree-compile",
              args="iree-compile - --iree-hal-target-backends=llvm-cpu",
              files=("/opt/iree/bin/iree-compile", "/usr/lib/libc.so.6"))
    w.sweep()
    fake_core(w.cwd / "core", second, [second], 6, sid=leader, name="other")

    crash = w.crashed([SignalDeath("iree-compile", "SIGSEGV", "Error code: -11")], klog())

    assert crash is not None
    assert (crash.name, crash.signal, crash.source, crash.pid) == (
        "iree-compile", "SIGSEGV", "core", first)
    assert crash.exe == "/opt/iree/bin/iree-compile" and crash.tids == [first + 1, first]
    assert crash.core_path == w.dest / f"core.{first}"
    gone = w.discard(keep=first)  # the one read is its reader's to delete
    assert gone == [w.dest / f"core.{second}"]
    assert crash.core_path.exists() and not (w.cwd / "core").exists()


def test_without_a_core_a_kernel_fault_line_of_a_process_the_output_names_is_the_crash(
        tmp_path: Path) -> None:
    (leader,) = dead_pids(1)
    w = watch(tmp_path, leader)
    lines = [f"[ 10.0] python3[{leader}]: segfault at 0 ip 0 sp 0 error 4 in x.so",  # ours
             "[ 11.0] firefox[999]: segfault at 8 ip 1 sp 2 error 6 in libxul.so",  # not
             "[ 12.0] iree-compile[4242]: segfault at 0 ip 5 sp 6 error 6 in "
             "libIREECompiler.so[7f00+100]"]
    named = [SignalDeath("iree-compile", "SIGSEGV", "Error code: -11")]

    crash = w.crashed(named, klog(*lines))

    assert crash is not None and (crash.name, crash.pid, crash.source) == (
        "iree-compile", 4242, "kernel log")
    assert "libIREECompiler.so" in crash.line
    assert w.crashed([], klog(*lines)) is None  # nothing says 4242 was ours: not blamed


def test_a_kernel_line_of_an_earlier_job_or_one_another_job_took_is_not_blamed(
        tmp_path: Path) -> None:
    import time

    leader, other = dead_pids(2)
    up = time.monotonic()  # dmesg stamps: seconds since boot
    before = f"[{up - 5:.6f}] iree-compile[4242]: segfault at 0 ip 5 sp 6 error 6"
    during = f"[{up + 1:.6f}] iree-compile[4343]: segfault at 0 ip 5 sp 6 error 6"
    named = [SignalDeath("iree-compile", "SIGSEGV", "Error code: -11")]
    claimed: dict[int, None] = {}
    w = watch(tmp_path / "a", leader, started=time.time(), claimed=claimed)
    crash = w.crashed(named, klog(before, during))
    assert crash is not None and crash.pid == 4343  # 4242 crashed before this job began
    w2 = watch(tmp_path / "b", other, started=time.time() - 1, claimed=claimed)
    crash2 = w2.crashed(named, klog(before, during))
    assert crash2 is not None and crash2.source == "output"  # 4343 was the first job's


def test_a_kernel_line_of_a_thread_seen_in_the_group_needs_no_name_from_the_output(
        tmp_path: Path) -> None:
    (leader,) = dead_pids(1)
    w = watch(tmp_path, leader)
    w.tids[777] = 770  # a thread of process 770, seen while the job ran
    w.names[770] = "ctest-test"
    crash = w.crashed([], klog("traps: worker[777] trap divide error ip:1 sp:2 error:0 in t"))
    assert crash is not None and (crash.name, crash.signal, crash.pid, crash.tids) == (
        "ctest-test", "SIGFPE", 770, [777])


def test_a_process_that_exec_d_after_its_last_sample_is_named_as_the_kernel_saw_it(
        tmp_path: Path) -> None:
    """python's forked child, sampled before it exec'd iree-compile and crashed before the next
    sample, is the crashed iree-compile (test_exec_children's compiler crash without cores was
    once named `python`); a name longer than the kernel's 15 characters stays whole."""
    (leader,) = dead_pids(1)
    w = watch(tmp_path, leader)
    w.tids[4242], w.names[4242] = 4242, "python"
    w.tids[4343], w.names[4343] = 4343, "compiler-driver-long"
    line = "[ 12.0] iree-compile[4242]: segfault at 0 ip 5 sp 6 error 6 in iree-compile[1165]"
    crash = w.crashed([], klog(line))
    assert crash is not None and (crash.name, crash.pid) == ("iree-compile", 4242)
    crash = w.crashed([], klog("[ 13.0] compiler-driver[4343]: segfault at 0 ip 5 sp 6 error 6"))
    assert crash is not None and crash.name == "compiler-driver-long"


def test_with_neither_core_nor_kernel_line_the_output_s_own_line_is_the_crash(
        tmp_path: Path) -> None:
    (leader,) = dead_pids(1)
    w = watch(tmp_path, leader)
    said = SignalDeath("helper", "SIGSEGV", "Command '['./helper']' died with <Signals...>")
    crash = w.crashed([said], klog())
    assert crash is not None and (crash.name, crash.source, crash.pid) == (
        "helper", "output", None)
    assert w.crashed([], klog()) is None


def test_a_core_written_in_a_test_s_own_build_folder_is_found_when_a_death_is_known(
        tmp_path: Path) -> None:
    leader, child = dead_pids(2)
    w = watch(tmp_path, leader)
    deep = w.cwd / "build" / "tests" / "conv"
    deep.mkdir(parents=True)
    fake_core(deep / "core", child, [child], 11, sid=leader, name="conv_test")
    (w.cwd / ".git" / "objects").mkdir(parents=True)  # hidden folders are not searched

    crash = w.crashed([SignalDeath("conv_crash", "SIGSEGV", "2 - conv_crash (SEGFAULT)")],
                      klog())

    assert crash is not None and (crash.name, crash.pid) == ("conv_test", child)
    assert not (deep / "core").exists()


def test_the_group_s_live_processes_and_their_folders_are_noted_while_it_runs(
        tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    leader = subprocess.Popen(["sh", "-c", f"cd {elsewhere} && sleep 30 & wait"],
                              cwd=tmp_path, start_new_session=True)
    try:
        w = GroupWatch(leader.pid, tmp_path, tmp_path / "dest", 0.0, ("core", False))
        for _ in range(100):  # until sh has started its child
            w.tick()
            if "sleep" in w.names.values():
                break
            subprocess.run(["sleep", "0.05"])
        sleeper = [pid for pid, name in w.names.items() if name == "sleep"]
        assert len(sleeper) == 1, w.names
        assert elsewhere in w.dirs  # where the child's core would land
        assert w.tids.get(sleeper[0]) == sleeper[0]  # its thread, for kernel log lines
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
