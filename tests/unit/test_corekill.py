"""Issue 24 item 2: evidence tools that cannot kill the patient. Which debugger may attach live,
which signals a process handles, when a process is already dying, and the core a hung process
leaves when its kill dumps one (real child processes; no runtime needed)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stress.engine import callstacks, corekill, evidence, postmortem, procstate
from stress.engine.callstacks import Debugger, Stacks, StackSource
from stress.stacktext import Frame, ThreadStack

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
BIG_EXIT = ("import os, sys\nheld = bytearray(1 << 30)\nfor i in range(0, len(held), 4096):\n"
            "    held[i] = 1\nprint('up', flush=True)\nsys.stdin.readline()\nos._exit(3)\n")
HANDLES_QUIT = ("import signal, time\nsignal.signal(signal.SIGQUIT, lambda *a: None)\n"
                "print('up', flush=True)\ntime.sleep(60)\n")


def child(tmp_path: Path, code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, preexec_fn=postmortem.prepare_child)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    return proc


def fake_tool(tmp_path: Path, name: str, banner: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho '{banner}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_signal_masks_read_as_signal_numbers() -> None:
    assert procstate.parse_sigmask("0000000000000200") == {signal.SIGUSR1}
    assert procstate.parse_sigmask("0000000000004a02") == {2, 10, 12, 15}
    assert procstate.parse_sigmask("zz") == set()


def test_a_python_handler_shows_in_the_caught_signals_and_the_default_does_not(
        tmp_path: Path) -> None:
    plain, handler = child(tmp_path, SLEEPER), child(tmp_path, HANDLES_QUIT)
    try:
        assert signal.SIGQUIT not in (procstate.caught_signals(plain.pid) or {0})
        assert signal.SIGQUIT in (procstate.caught_signals(handler.pid) or set())
    finally:
        for p in (plain, handler):
            p.kill()
            p.wait()
    assert procstate.caught_signals(plain.pid) is None  # gone


def test_a_process_is_dead_once_a_fatal_signal_is_queued_or_it_is_a_zombie(
        tmp_path: Path) -> None:
    proc = child(tmp_path, SLEEPER)
    assert not procstate.is_dead(proc.pid)
    os.kill(proc.pid, signal.SIGSTOP)
    while (getattr(procstate.read_thread(proc.pid, proc.pid, details=False), "state", "")
           != "T"):
        time.sleep(0.001)
    assert not procstate.is_dead(proc.pid)  # stopped is not dying
    try:
        os.kill(proc.pid, signal.SIGTERM)  # stopped: an unhandled SIGTERM stays pending
        seen = [procstate.is_dead(proc.pid) for _ in range(50)]
        assert all(seen), f"alive after {seen.index(False)} reads"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
    # From the kill on, every read says dead (pending, in its exit, or a zombie): never alive
    # in the window between the signal leaving the queue and the zombie.
    seen = []
    while proc.poll() is None:
        seen.append(procstate.is_dead(proc.pid))
    assert all(seen)
    assert proc.returncode == -signal.SIGKILL


def test_a_process_in_its_exit_is_dead_before_it_is_a_zombie(tmp_path: Path) -> None:
    # os._exit with 1 GiB to give back: tens of ms in the kernel's exit with no signal pending
    proc = subprocess.Popen([sys.executable, "-c", BIG_EXIT], cwd=tmp_path, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    assert proc.stdin is not None and not procstate.is_dead(proc.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    reads: list[tuple[bool, str]] = []
    while proc.poll() is None:
        state = getattr(procstate.read_thread(proc.pid, proc.pid, details=False), "state", "")
        reads.append((procstate.is_dead(proc.pid), state))
    assert proc.returncode == 3
    first = next(i for i, (dead, _) in enumerate(reads) if dead)
    assert all(dead for dead, _ in reads[first:])
    assert any(state not in ("Z", "X", "") for _, state in reads[first:]), \
        "dead only once a zombie: the exit itself was not seen"


def test_a_child_gets_the_kill_signals_back_that_its_launcher_ignored_or_blocked(
        tmp_path: Path) -> None:
    def launcher_then_prepare() -> None:  # as nohup or a CI runner would leave them
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGQUIT})
        postmortem.prepare_child()

    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, preexec_fn=launcher_then_prepare)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        fields = dict(line.split(":", 1) for line in
                      Path(f"/proc/{proc.pid}/status").read_text().splitlines() if ":" in line)
        for name in ("SigIgn", "SigBlk"):
            left = procstate.parse_sigmask(fields[name].strip()) & {
                signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
            assert not left, f"{name}: {left}"
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


def test_cuda_gdb_is_told_apart_by_name_or_by_its_banner(tmp_path: Path) -> None:
    assert callstacks.debugger_kind(fake_tool(tmp_path, "cuda-gdb", "x")) is Debugger.CUDA_GDB
    disguised = fake_tool(tmp_path, "gdb", "NVIDIA (R) CUDA Debugger")
    assert callstacks.debugger_kind(disguised) is Debugger.CUDA_GDB
    (tmp_path / "r").mkdir()
    rocm = fake_tool(tmp_path / "r", "gdb", "GNU gdb (rocm-rel-7.1) 16.3")
    assert callstacks.debugger_kind(rocm) is Debugger.ROCGDB
    (tmp_path / "p").mkdir()
    assert callstacks.debugger_kind(fake_tool(tmp_path / "p", "gdb", "GNU gdb (Debian 13.1)")) \
        is Debugger.GDB


def test_a_gpu_debugger_never_attaches_to_a_process_with_its_gpu_runtime_mapped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_gdb = fake_tool(tmp_path, "cuda-gdb", "NVIDIA (R) CUDA Debugger")
    plain = fake_tool(tmp_path, "gdb", "GNU gdb (Debian 13.1)")
    me = os.getpid()
    assert callstacks.live_attach_hazard(cuda_gdb, me) is None  # no libcuda here
    monkeypatch.setattr(Debugger, "gpu_libraries", property(lambda self: ("libc.so",)))
    hazard = callstacks.live_attach_hazard(cuda_gdb, me)
    assert hazard is not None and "cuda-gdb injects its debugger into" in hazard
    assert callstacks.live_attach_hazard(plain, me) is not None  # (every kind patched)


def test_sigusr1_is_never_sent_to_a_process_without_a_handler(tmp_path: Path) -> None:
    proc = child(tmp_path, SLEEPER)
    err = tmp_path / "stderr"
    err.write_text("")
    try:
        stacks = evidence._faulthandler(proc.pid, err, [])
        assert stacks.tool is StackSource.NONE
        assert "no SIGUSR1 handler" in stacks.tried[-1]
        time.sleep(0.2)
        assert proc.poll() is None  # still alive: SIGUSR1's default action would have killed it
    finally:
        proc.kill()
        proc.wait()


def test_the_core_kill_dumps_a_core_that_reads_as_every_threads_stack(tmp_path: Path) -> None:
    if callstacks.find_gdb() is None:
        pytest.skip("no gdb to read the core")
    proc = child(tmp_path, SLEEPER)
    kill = corekill.dump(proc.pid, proc.poll)
    assert kill.signal == "SIGQUIT" and kill.ended and proc.returncode == -signal.SIGQUIT
    post = corekill.read(proc.pid, sys.executable, tmp_path)
    assert post.tool is StackSource.CORE_GDB and post.threads, post.note
    assert not list(tmp_path.glob("core*"))  # read, then deleted
    live = Stacks(StackSource.NONE, "", tried=["py-spy: not found"])
    kept = corekill.merge(live, post, "core dumped by our SIGQUIT after the verdict")
    assert kept is post and kept.crashed_tid is None  # the SIGQUIT taker is no crash thread
    assert kept.tried == ["py-spy: not found", "core dumped by our SIGQUIT after the verdict: "
                          f"core+gdb: {len(post.threads)} threads"]
    assert "# tried: py-spy: not found" in kept.render()


def test_a_process_that_handles_sigquit_is_cored_by_sigabrt(tmp_path: Path) -> None:
    proc = child(tmp_path, HANDLES_QUIT)
    kill = corekill.dump(proc.pid, proc.poll)
    assert kill.signal == "SIGABRT" and proc.returncode == -signal.SIGABRT
    postmortem.discard_core(proc.pid, tmp_path)


def test_no_core_is_wanted_when_live_native_frames_exist_or_the_folder_is_the_users() -> None:
    native = Stacks(StackSource.PYSPY, "x", threads=[ThreadStack(1, name="t", frames=[Frame("f")])])
    none = Stacks(StackSource.NONE, "")
    assert not corekill.wanted(native, own_cwd=True)
    assert not corekill.wanted(none, own_cwd=False)
    assert not corekill.wanted(Stacks(StackSource.NONE, "", died="gdb attach"), own_cwd=True)
    assert corekill.wanted(none, own_cwd=True) is (callstacks.find_gdb() is not None or
                                                   callstacks.find_pyspy() is not None or
                                                   postmortem.pystack_available())


def test_a_death_during_evidence_is_said_as_what_it_was() -> None:
    died = Stacks(StackSource.NONE, "", died="gdb attach")
    assert corekill.after_verdict(-11, died) == "died by SIGSEGV during gdb attach"
    assert corekill.after_verdict(0, Stacks(StackSource.NONE, "")) == \
        "exited with status 0 while its evidence was taken"
