"""Fork server safety checks and start-up (issue 17 item 3): forking must be refused where it is
unsafe, and a server that cannot start is reported, never waited on forever."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stress.engine.forkclient import ForkServer, ForkServerDown, ForkServerUnsafe
from stress.engine.forkserver import EXIT_CHILD_SETUP, Msg, check_fork_safety, decode, encode

REPO = Path(__file__).resolve().parents[2]
_STARTUP_S: float = 120.0  # imports numpy + iree.runtime on a loaded 2-core machine


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def _fake_proc(tmp_path: Path, threads: int, libs: list[str]) -> str:
    proc = tmp_path / "proc"
    (proc / "task").mkdir(parents=True)
    for tid in range(threads):
        (proc / "task" / str(1000 + tid)).mkdir()
    lines = ["7f0000000000-7f0000001000 r--p 00000000 00:00 0 [heap]",
             "7f0000001000-7f0000002000 r-xp 00000000 08:01 42 /usr/lib/libc.so.6"]
    lines += [f"7f0000003000-7f0000004000 r-xp 00000000 08:01 43 {lib}" for lib in libs]
    (proc / "maps").write_text("\n".join(lines) + "\n")
    return str(proc)


def test_a_single_threaded_process_without_gpu_libraries_is_safe_to_fork(tmp_path: Path) -> None:
    safety = check_fork_safety(_fake_proc(tmp_path, 1, []))
    assert safety.safe, safety.reason
    assert safety.threads == 1 and safety.gpu_libraries == ()


def test_a_second_thread_makes_fork_unsafe_and_the_reason_says_how_many(tmp_path: Path) -> None:
    safety = check_fork_safety(_fake_proc(tmp_path, 2, []))
    assert not safety.safe
    assert "2 threads" in safety.reason


@pytest.mark.parametrize("lib", ["/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                 "/opt/rocm/lib/libamdhip64.so.6",
                                 "/opt/rocm/lib/libhsa-runtime64.so.1",
                                 "/usr/lib/libnvidia-ptxjitcompiler.so.1"])
def test_a_mapped_gpu_driver_library_makes_fork_unsafe_and_is_named(tmp_path: Path,
                                                                    lib: str) -> None:
    safety = check_fork_safety(_fake_proc(tmp_path, 1, [lib]))
    assert not safety.safe
    assert lib in safety.reason and safety.gpu_libraries == (lib,)


def test_a_library_that_only_mentions_cuda_in_its_folder_is_not_a_driver(tmp_path: Path) -> None:
    """The check looks at file names: a venv under /opt/cuda-tools is not libcuda."""
    safety = check_fork_safety(_fake_proc(tmp_path, 1, ["/opt/cuda-tools/lib/libz.so.1"]))
    assert safety.safe, safety.reason


def test_an_unreadable_proc_is_not_called_safe(tmp_path: Path) -> None:
    safety = check_fork_safety(str(tmp_path / "no-such-proc"))
    assert not safety.safe and "unknown" in safety.reason


def test_messages_round_trip_and_unknown_names_are_rejected() -> None:
    assert decode(encode(Msg.EXITED, {"pid": 5, "status": -11})) == \
        (Msg.EXITED, {"pid": 5, "status": -11})
    with pytest.raises(ValueError):
        decode(b'["reboot", {}]')
    with pytest.raises(ValueError):
        decode(b'["exited", 3]')


def test_the_real_server_says_it_is_safe_to_fork_here() -> None:
    server = ForkServer.start(sys.executable, _env(), startup_timeout_s=_STARTUP_S)
    try:
        assert server.hello["fork_safe"] is True
        assert server.hello["threads"] == 1 and server.hello["gpu_libraries"] == []
        assert server.hello["pid"] == server.pid and server.alive()
    finally:
        server.close()
    assert not server.alive()


def test_the_server_refuses_to_fork_with_a_second_thread_running() -> None:
    with pytest.raises(ForkServerUnsafe, match="2 threads"):
        ForkServer.start(sys.executable, _env(), startup_timeout_s=_STARTUP_S,
                         extra_args=["--test-thread"])


def test_the_server_refuses_to_fork_with_a_gpu_driver_library_mapped(fault_lib: Path,
                                                                     tmp_path: Path) -> None:
    """A library named like the CUDA driver, preloaded into the server, stands in for a
    driver that something initialized before the fork."""
    fake = tmp_path / "libcuda.so.1"
    shutil.copy(fault_lib, fake)
    with pytest.raises(ForkServerUnsafe, match="libcuda.so.1"):
        ForkServer.start(sys.executable, _env(LD_PRELOAD=str(fake)),
                         startup_timeout_s=_STARTUP_S)


def test_a_server_that_dies_before_hello_is_reported_down_with_its_output(tmp_path: Path) -> None:
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'no runtime in this stack' >&2\nexit 3\n")
    fake_python.chmod(0o755)
    with pytest.raises(ForkServerDown, match="no runtime in this stack"):
        ForkServer.start(str(fake_python), _env(), startup_timeout_s=_STARTUP_S)


def test_the_exit_family_names_six_paths_and_only_sigterm_expects_a_signal_death() -> None:
    from stress.engine import exitpaths
    from stress.engine.exitpaths import ExitPath, expected_returncode

    assert set(exitpaths.FAMILY) == {"exit-clean", "exit-alive", "exit-inflight", "exit-thread",
                                     "exit-sigterm", "exit-os-exit"}
    assert {p.value: expected_returncode(p) for p in ExitPath if expected_returncode(p)} == \
        {"exit-sigterm": -15}
    # the control arm and the signal death are the two that skip exit handlers
    assert {p for p in ExitPath if not p.runs_exit_handlers} == {ExitPath.OS_EXIT,
                                                                 ExitPath.SIGTERM}
    for name in exitpaths.FAMILY:
        assert exitpaths.PATTERNS[name].name == name and exitpaths.PATTERNS[name].summary


def test_a_worker_runs_the_exit_family_beside_the_in_process_patterns() -> None:
    from stress.engine import exitpaths, patterns, worker

    assert set(worker.RUNS) == {*patterns.PATTERNS, *exitpaths.FAMILY}
    assert all(worker.RUNS[name] is exitpaths.PATTERNS[name] for name in exitpaths.FAMILY)
    assert not set(patterns.PATTERNS) & set(exitpaths.FAMILY)  # neither hides the other


def test_leave_with_nothing_pending_returns_for_paths_that_exit_normally() -> None:
    from stress.engine import exitpaths
    from stress.engine.exitpaths import ExitPath

    assert exitpaths.pending() is None
    for path in (None, ExitPath.CLEAN, ExitPath.ALIVE, ExitPath.THREAD):
        exitpaths.leave(path)  # returns: the caller exits normally


# A fork request served by a real Server, whose child first runs after its server has died
#   (as on a loaded machine: the server answered `forked` and was killed before the child was
#   scheduled). The child's first calls (os.getppid, which the old code read first, and its
#   own process group) wait for that death; this process is the subreaper, so the orphan comes
#   back to it to be waited for.
_LATE_CHILD = """
import ctypes, os, socket, time
from stress.engine import forkserver
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
r, w = os.pipe()
server = os.fork()
if server == 0:
    me, real, own_group = os.getpid(), os.getppid, forkserver._own_group
    def first_run_after_the_server_died():
        while real() == me:
            time.sleep(0.005)
        return real()
    def late_own_group(pid):
        if pid == 0:  # the child's own (the server's call names the child)
            first_run_after_the_server_died()
        own_group(pid)
    os.getppid = first_run_after_the_server_died  # only the child asks
    forkserver._own_group = late_own_group
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv = forkserver.Server(ours, 0)
    fds = [os.open(os.devnull, os.O_WRONLY) for _ in range(3)]
    if srv.on_fork({"id": 1, "argv": []}, fds) is not None:
        os._exit(0)  # the child, set up: it would run its job now
    os.write(w, str(next(iter(srv.children))).encode())
    os._exit(0)  # the server dies
os.close(w)
child = int(os.read(r, 32))
os.waitpid(server, 0)
print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")
def test_a_child_that_first_runs_after_its_server_died_leaves_at_once() -> None:
    """It must not live on, adopted, waiting for jobs that never come: the server's pid is
    taken before the fork (read in the child, it was the adopter's: a killed server's child
    outlived it in test_forked_exits under load)."""
    out = subprocess.run([sys.executable, "-c", _LATE_CHILD], capture_output=True, text=True,
                         env=_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(EXIT_CHILD_SETUP)]
