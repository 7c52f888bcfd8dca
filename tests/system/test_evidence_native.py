"""Evidence from real native crashes and hangs (issue 8 "what to build" 1, 2, 4; issue 17
item 5): a child process really takes SIGSEGV in native code (the fault library's
`iree_fault_segv`, from a secondary thread or from an ELF exit destructor), or really spins and
blocks in native code, and the evidence names the native frame and the thread."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stress.engine import evidence, kernellog, postmortem, procstate
from stress.engine.callstacks import StackSource
from stress.engine.procstate import Activity
from tests.conftest import REPO

pytestmark = pytest.mark.system

_CHILD_TIMEOUT_S: float = 60.0  # a Python start-up on a loaded 2-core machine, with margin

# Crash from a secondary thread, with faulthandler on as in a worker: the thread that took the
# signal is not the main thread, and faulthandler's re-raise sits above the faulting frame.
THREAD_CRASH = """
import ctypes, faulthandler, sys, threading
from stress.engine import postmortem
postmortem.prepare_child()
faulthandler.enable(all_threads=True)
lib = ctypes.CDLL(sys.argv[1])
def go():
    print(threading.get_native_id(), flush=True)
    lib.iree_fault_segv()
t = threading.Thread(target=go, name="crasher")
t.start()
t.join()
"""

# Crash in an ELF destructor at process exit (after Python's finalization: no faulthandler).
EXIT_CRASH = """
from stress.engine import postmortem
postmortem.prepare_child()
print("bye", flush=True)
"""

# One thread spinning in native code, one blocked in a futex, the main thread sleeping.
SPIN_AND_BLOCK = """
import ctypes, sys, threading, time
lib = ctypes.CDLL(sys.argv[1])
tids = {}
def run(name, fn):
    tids[name] = threading.get_native_id()
    fn()
for name, fn in (("spinner", lib.iree_fault_spin), ("blocker", lib.iree_fault_block)):
    threading.Thread(target=run, args=(name, fn), name=name, daemon=True).start()
while len(tids) < 2:
    time.sleep(0.01)
print(tids["spinner"], tids["blocker"], flush=True)
time.sleep(600)
"""


# A thread stuck in D state (tests/native/dstate.c), the main thread sleeping.
STUCK_IN_D = """
import ctypes, sys, threading, time
lib = ctypes.CDLL(sys.argv[1])
tid = []
def run():
    tid.append(threading.get_native_id())
    lib.iree_stuck_in_d()
threading.Thread(target=run, name="ioctl", daemon=True).start()
while not tid:
    time.sleep(0.01)
print(tid[0], flush=True)
time.sleep(600)
"""


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IREE_FAULT")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def crash(script: str, cwd: Path, *args: str, **env: str) -> tuple[int, str, str, int]:
    """Run `script` in a child with cwd `cwd`; (pid, stdout, stderr, returncode)."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(**env))
    out, err = proc.communicate(timeout=_CHILD_TIMEOUT_S)
    return proc.pid, out, err, proc.returncode


def needs_cores() -> None:
    pattern, _ = postmortem.read_core_pattern()
    if pattern.startswith("|") and "systemd-coredump" not in pattern:
        pytest.skip(f"core_pattern {pattern!r} sends cores where this test cannot read them")


def test_a_native_segv_on_a_thread_names_that_thread_and_its_faulting_frame(
        fault_lib: Path, tmp_path: Path) -> None:
    needs_cores()
    if postmortem.find_gdb() is None:
        pytest.skip("no gdb or cuda-gdb")
    start = time.time()
    pid, out, err, rc = crash(THREAD_CRASH, tmp_path, str(fault_lib))
    assert rc == -11, err
    crashing_tid = int(out.split()[0])
    assert crashing_tid != pid

    ev = evidence.collect_crash(pid, sys.executable, tmp_path, err, since_wall=start)

    assert ev.stacks.tool is StackSource.CORE_GDB, ev.stacks.note
    assert ev.stacks.crashed_tid == crashing_tid
    assert ev.stacks.signal == 11
    assert ev.stacks.crash_frames()[0] == "iree_fault_segv"
    assert {t.tid for t in ev.stacks.threads} == {pid, crashing_tid}
    files = ev.files()
    assert f"# thread {crashing_tid} took SIGSEGV; crashing frames: iree_fault_segv" in \
        files["stacks.txt"]
    assert "# py-spy dump --core (Python frames)" in files["stacks.txt"]  # go() in crash.py
    assert ev.summary()["crash_frames"][0] == "iree_fault_segv"
    assert list(tmp_path.iterdir()) == [], "the core was kept"


def test_a_segv_in_an_exit_destructor_is_read_from_the_core_and_the_core_is_deleted(
        fault_lib: Path, tmp_path: Path) -> None:
    needs_cores()
    if postmortem.find_gdb() is None:
        pytest.skip("no gdb or cuda-gdb")
    pid, out, err, rc = crash(EXIT_CRASH, tmp_path, LD_PRELOAD=str(fault_lib),
                              IREE_FAULT_EXIT="segv")
    assert (out, rc) == ("bye\n", -11), err
    assert "Fatal Python error" not in err  # past finalization: only the core can tell

    stacks = postmortem.native_stacks(pid, sys.executable, tmp_path, err)

    assert stacks.tool is StackSource.CORE_GDB, stacks.note
    assert stacks.crashed_tid == pid
    assert stacks.crash_frames()[:2] == ["iree_fault_segv", "fire"]
    assert not any(p.name.startswith("core") for p in tmp_path.iterdir())


def test_keep_leaves_the_core_and_reports_its_path(fault_lib: Path, tmp_path: Path) -> None:
    needs_cores()
    pid, _, err, rc = crash(EXIT_CRASH, tmp_path, LD_PRELOAD=str(fault_lib),
                            IREE_FAULT_EXIT="segv")
    assert rc == -11, err

    stacks = postmortem.native_stacks(pid, sys.executable, tmp_path, err, keep=True)

    assert stacks.core is not None and stacks.core.exists()
    notes = postmortem.read_core_notes(stacks.core)
    assert notes is not None and notes.pid == pid


def test_without_gdb_the_core_still_gives_python_frames_and_the_crashed_thread(
        fault_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 machine's case: py-spy but no gdb."""
    needs_cores()
    pyspy = postmortem.find_pyspy()
    if pyspy is None:
        pytest.skip("no py-spy")
    pid, out, err, rc = crash(THREAD_CRASH, tmp_path, str(fault_lib))
    assert rc == -11, err
    crashing_tid = int(out.split()[0])
    only_pyspy = tmp_path.parent / f"{tmp_path.name}-bin"  # outside the core folder
    only_pyspy.mkdir()
    (only_pyspy / "py-spy").symlink_to(pyspy)
    monkeypatch.setenv("PATH", str(only_pyspy))  # no gdb or cuda-gdb
    monkeypatch.setattr(postmortem, "find_pyspy", lambda: str(only_pyspy / "py-spy"))
    monkeypatch.setattr(postmortem, "pystack_available", lambda: False)

    stacks = postmortem.native_stacks(pid, sys.executable, tmp_path, err)

    assert stacks.tool is StackSource.CORE_PYSPY, stacks.note
    assert "gdb or cuda-gdb not found" in stacks.note
    assert stacks.crashed_tid == crashing_tid
    assert stacks.crash_frames() == ["go", "Thread.run", "Thread._bootstrap_inner",
                                     "Thread._bootstrap"]
    assert list(tmp_path.iterdir()) == []


def test_without_a_core_the_kernel_segfault_line_names_the_library(fault_lib: Path,
                                                                   tmp_path: Path) -> None:
    """No prepare_child (soft core limit 0) and no faulthandler: the kernel logs the fault."""
    start = time.time()
    pid, _, err, rc = crash("", tmp_path, LD_PRELOAD=str(fault_lib), IREE_FAULT_EXIT="segv",
                            **{"PYTHONFAULTHANDLER": ""})
    assert rc == -11, err
    (tmp_path / "core").unlink(missing_ok=True)  # where the hard limit lets a core through

    stacks = postmortem.native_stacks(pid, sys.executable, tmp_path, err, since_wall=start)

    if stacks.tool is not StackSource.KERNEL_LOG:
        log = kernellog.kernel_log_tail(start)
        if log.source is None:
            pytest.skip(f"kernel log not readable: {log.note}")
        if any("callbacks suppressed" in line for line in log.lines):
            pytest.skip("the kernel rate-limited its segfault lines (other crashes at once)")
    assert stacks.tool is StackSource.KERNEL_LOG, stacks.note
    assert stacks.crashed_tid == pid
    assert "libfault.so" in stacks.text and "segfault at 0 " in stacks.text


@pytest.fixture
def spinners(fault_lib: Path) -> list[tuple[int, int, int]]:
    """Two processes, each with a native spinner and a native futex waiter: (pid, spin tid,
    block tid) each; killed after the test."""
    procs, out = [], []
    try:
        for _ in range(2):
            p = subprocess.Popen([sys.executable, "-c", SPIN_AND_BLOCK, str(fault_lib)],
                                 stdout=subprocess.PIPE, text=True, env=child_env())
            procs.append(p)
        for p in procs:
            assert p.stdout is not None
            spin, block = (int(x) for x in p.stdout.readline().split())
            out.append((p.pid, spin, block))
        for pid, spin, block in out:  # both threads inside their native functions
            for _ in range(500):
                s = procstate.read_thread(pid, spin, details=False)
                b = procstate.read_thread(pid, block)
                if s and b and s.cpu_ticks > 0 and b.wchan and "futex" in b.wchan:
                    break
                time.sleep(0.01)
        yield out
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_spinning_thread_is_busy_and_a_futex_waiter_is_blocked_by_tid(
        spinners: list[tuple[int, int, int]]) -> None:
    pid, spin, block = spinners[0]

    samples = procstate.sample(pid, window_s=0.5)

    assert samples[spin].activity is Activity.BUSY, samples[spin]
    assert samples[block].activity is Activity.BLOCKED, samples[block]
    assert samples[pid].activity is Activity.BLOCKED, samples[pid]  # time.sleep
    assert samples[block].wchan is None or "futex" in samples[block].wchan  # None: hidden


def test_several_hung_processes_give_every_thread_state_and_stack_before_any_kill(
        spinners: list[tuple[int, int, int]]) -> None:
    pids = [pid for pid, _, _ in spinners]

    ev = evidence.collect_many(pids, backend="cpu", window_s=0.5)

    for pid, spin, block in spinners:
        proc = ev.processes[pid]
        assert proc.stacks.tool in (StackSource.PYSPY, StackSource.GDB_ATTACH), proc.stacks.note
        spin_stack, block_stack = proc.stacks.thread(spin), proc.stacks.thread(block)
        assert spin_stack is not None and block_stack is not None
        assert "iree_fault_spin" in spin_stack.labels()[:2]
        assert "iree_fault_block" in block_stack.labels()[:3]
        assert proc.activity_of(spin) is Activity.BUSY
        assert proc.activity_of(block) is Activity.BLOCKED
        summary = proc.summary(stuck_tid=block)
        assert spin in summary["busy_tids"]
        assert (summary["activity"], summary["process_activity"]) == ("blocked", "busy")
        files = ev.files(pid)
        assert '"activity": "busy"' in files["threads.json"]
        assert files["kernel.log"].startswith("# kernel log")
        assert procstate.thread_ids(pid), "evidence must not kill the process"


def test_live_stacks_carry_each_thread_native_id(spinners: list[tuple[int, int, int]]) -> None:
    pid, spin, block = spinners[0]

    stacks = evidence.dump_stacks(pid)

    assert {pid, spin, block} <= {t.tid for t in stacks.threads}
    assert stacks.render().startswith(f"# {stacks.tool.value}\n")


@pytest.fixture
def stuck_in_d(tmp_path: Path) -> tuple[int, int]:
    """A Python process with one thread in uninterruptible wait: (pid, that thread's tid)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lib = tmp_path / "libdstate.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-g", "-o", str(lib),
                    str(REPO / "tests" / "native" / "dstate.c")], check=True)
    proc = subprocess.Popen([sys.executable, "-c", STUCK_IN_D, str(lib)],
                            stdout=subprocess.PIPE, text=True, env=child_env(),
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        tid = int(proc.stdout.readline())
        for _ in range(500):  # the vfork happens right after the print
            t = procstate.read_thread(proc.pid, tid, details=False)
            if t is not None and t.state == "D":
                break
            time.sleep(0.01)
        else:
            pytest.skip("vfork's wait does not show as D state here")
        yield proc.pid, tid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the paused vfork child too
        proc.wait()


def test_a_thread_in_d_state_gives_python_stacks_without_blocking_on_ptrace(
        stuck_in_d: tuple[int, int]) -> None:
    pid, tid = stuck_in_d

    ev = evidence.collect_many([pid], window_s=0.3)

    proc = ev.processes[pid]
    assert proc.samples[tid].first_state == proc.samples[tid].last_state == "D"
    assert proc.samples[tid].activity is Activity.BLOCKED
    assert proc.stacks.tool is StackSource.PYSPY_NONBLOCKING, proc.stacks.note
    assert "uninterruptible wait (D)" in proc.stacks.note
    stack = proc.stacks.thread(tid)
    assert stack is not None and "Thread.run" in stack.labels()
    assert procstate.thread_ids(pid), "evidence must not kill the process"


def test_dump_stacks_alone_notices_the_d_state_thread(stuck_in_d: tuple[int, int]) -> None:
    pid, tid = stuck_in_d

    stacks = evidence.dump_stacks(pid)

    assert stacks.tool is StackSource.PYSPY_NONBLOCKING, stacks.note
    assert tid in {t.tid for t in stacks.threads}
