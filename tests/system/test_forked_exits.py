"""Real worker processes forked by the fork server (issue 17 items 2-3): they leave through the
normal exit path (C destructors run) unless they are the os._exit control arm, their exit
statuses come back as Popen's would, and a server that dies or hangs is reported as down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stress.engine import forkclient
from stress.engine.exitpaths import ExitPath, expected_returncode
from stress.engine.forkclient import (
    CHILD_MSG_FD,
    RETURNCODE_LOST,
    ForkedProcess,
    ForkServer,
    ForkServerDown,
)
from stress.engine.journal import JournalReader, Phase, Step

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
PROGRAM = "binary.add.f32.3x5x7+3x5x7"
_STARTUP_S: float = 120.0  # numpy + iree.runtime imports on a loaded 2-core machine
_CHILD_S: float = 60.0  # one short job; generous for a loaded machine


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def _config(tmp_path: Path, artifacts: dict[str, Path] | None) -> Path:
    programs: dict[str, Any] = {}
    if artifacts is not None:
        from stress.programs import corpus

        prog = next(p for p in corpus.corpus() if p.name == PROGRAM)
        programs[PROGRAM] = {"program": prog.to_dict(), "vmfb": str(artifacts[PROGRAM])}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"driver": "local-task", "device_uri": "local-task",
                                "threads": 1, "seed": 1, "inject": [], "programs": programs}))
    return path


@dataclass
class Child:
    proc: ForkedProcess
    msg_r: int
    stdin_w: int | None
    journal: Path
    log: Path

    def messages(self) -> list[tuple[str, dict[str, Any]]]:
        data = b""
        while chunk := os.read(self.msg_r, 1 << 16):
            data += chunk
        return [tuple(json.loads(line)) for line in data.splitlines()]  # type: ignore[misc]

    def close(self) -> None:
        for fd in (self.msg_r, self.stdin_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


def fork_worker(server: ForkServer, tmp_path: Path, config: Path, name: str,
                jobs: list[dict[str, Any]] | None = None, keep_stdin: bool = False,
                argv: list[str] | None = None) -> Child:
    """Forks a real worker: `jobs` written to its stdin, then EOF unless `keep_stdin`."""
    msg_r, msg_w = os.pipe()
    in_r, in_w = os.pipe()
    journal, log = tmp_path / f"{name}.bin", tmp_path / f"{name}.log"
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(in_w, "".join(json.dumps(["job", j]) + "\n" for j in jobs or []).encode())
    if argv is None:
        argv = ["--config", str(config), "--worker-id", "0", "--journal", str(journal),
                "--msg-fd", str(CHILD_MSG_FD)]
    try:
        proc = server.fork(argv, msg_w, out, out, stdin_fd=in_r, cwd=tmp_path)  # server env
    finally:
        for fd in (msg_w, in_r, out):
            os.close(fd)
    if not keep_stdin:
        os.close(in_w)
    return Child(proc, msg_r, in_w if keep_stdin else None, journal, log)


def job(path: ExitPath, invocations: int = 4) -> dict[str, Any]:
    return {"index": 7, "program": PROGRAM, "pattern": path.value, "seed": 11,
            "invocations": invocations}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ForkServer]:
    s = ForkServer.start(sys.executable, _env(), startup_timeout_s=_STARTUP_S)
    yield s
    s.close()
    for core in tmp_path.glob("core*"):  # of children that crashed: hundreds of MiB each
        core.unlink()


def test_a_forked_worker_leads_its_own_process_group_and_exits_0_at_end_of_input(
        server: ForkServer, tmp_path: Path) -> None:
    child = fork_worker(server, tmp_path, _config(tmp_path, None), "idle", keep_stdin=True)
    try:
        assert os.getpgid(child.proc.pid) == child.proc.pid
        assert child.proc.poll() is None and child.proc.stdin is None
        with pytest.raises(subprocess.TimeoutExpired):
            child.proc.wait(timeout=0.2)
        assert child.stdin_w is not None
        os.close(child.stdin_w)
        child.stdin_w = None
        assert child.proc.wait(timeout=_CHILD_S) == 0
        assert [name for name, _ in child.messages()] == ["hello", "bye"]
    finally:
        child.close()


def test_exit_statuses_come_back_as_popen_returncodes(server: ForkServer, tmp_path: Path) -> None:
    """SIGTERM from outside, a plain exit code (argparse's 2 for a bad command line) and 0."""
    config = _config(tmp_path, None)
    waiting = fork_worker(server, tmp_path, config, "term", keep_stdin=True)
    bad = fork_worker(server, tmp_path, config, "bad", argv=["--no-such-option"])
    clean = fork_worker(server, tmp_path, config, "clean")
    try:
        assert bad.proc.wait(timeout=_CHILD_S) == 2
        assert clean.proc.wait(timeout=_CHILD_S) == 0
        waiting.proc.terminate()
        assert waiting.proc.wait(timeout=_CHILD_S) == -signal.SIGTERM
    finally:
        for c in (waiting, bad, clean):
            c.close()


@pytest.fixture
def fault_server(fault_lib: Path, tmp_path: Path) -> Iterator[tuple[ForkServer, Path]]:
    """A server whose children crash in an ELF destructor at exit (the fault library's exit
    mode, loaded into the server: children inherit it), counting each firing."""
    count = tmp_path / "fired.txt"
    s = ForkServer.start(sys.executable, _env(LD_PRELOAD=str(fault_lib), IREE_FAULT_EXIT="segv",
                                              IREE_FAULT_COUNT_FILE=str(count)),
                         startup_timeout_s=_STARTUP_S)
    yield s, count
    s.close()
    for core in tmp_path.glob("core*"):  # the crashing children's cores: hundreds of MiB
        core.unlink()


def _fired_for(count: Path, pid: int) -> list[str]:
    lines = count.read_text().splitlines() if count.exists() else []
    return [line for line in lines if line.split()[-1] == str(pid)]


def test_a_forked_worker_that_exits_normally_runs_c_destructors_and_its_sigsegv_is_reported(
        fault_server: tuple[ForkServer, Path], tmp_path: Path) -> None:
    server, count = fault_server
    child = fork_worker(server, tmp_path, _config(tmp_path, None), "idle")
    try:
        assert child.proc.wait(timeout=_CHILD_S) == -signal.SIGSEGV
        assert _fired_for(count, child.proc.pid) == [f"exit segv {child.proc.pid}"]
        assert [name for name, _ in child.messages()] == ["hello", "bye"]
    finally:
        child.close()
    assert _fired_for(count, server.pid) == []  # the server itself never forked and exited


def test_exit_clean_runs_the_exit_destructors_and_exit_os_exit_skips_them(
        fault_server: tuple[ForkServer, Path], tmp_path: Path,
        cpu_artifacts: dict[str, Path]) -> None:
    server, count = fault_server
    config = _config(tmp_path, cpu_artifacts)
    clean = fork_worker(server, tmp_path, config, "clean", [job(ExitPath.CLEAN)])
    control = fork_worker(server, tmp_path, config, "control", [job(ExitPath.OS_EXIT)])
    try:
        assert clean.proc.wait(timeout=_CHILD_S) == -signal.SIGSEGV
        assert control.proc.wait(timeout=_CHILD_S) == 0
        assert len(_fired_for(count, clean.proc.pid)) == 1
        assert _fired_for(count, control.proc.pid) == []
        for c in (clean, control):  # the job's results reached the parent before the exit
            done = [p for name, p in c.messages() if name == "job_done"]
            assert done and done[0]["result"]["ok"] == 4
    finally:
        clean.close()
        control.close()


@pytest.mark.parametrize("path", [ExitPath.CLEAN, ExitPath.INFLIGHT, ExitPath.SIGTERM,
                                  ExitPath.OS_EXIT])
def test_each_exit_path_reports_its_checked_results_then_ends_as_expected(
        server: ForkServer, tmp_path: Path, cpu_artifacts: dict[str, Path],
        path: ExitPath) -> None:
    child = fork_worker(server, tmp_path, _config(tmp_path, cpu_artifacts), path.value,
                        [job(path)])
    try:
        rc = child.proc.wait(timeout=_CHILD_S)
        messages = child.messages()
        assert [name for name, _ in messages] == ["hello", "job_done", "bye"], \
            child.log.read_text()[-2000:]
        result = messages[1][1]["result"]
        assert result["ok"] == 4 and result["errors"] == 0 and result["miscompare"] == 0
        assert rc == expected_returncode(path), child.log.read_text()[-2000:]
        alive = messages[2][1]["devices_alive"]
        assert alive == (0 if path in (ExitPath.CLEAN, ExitPath.OS_EXIT) else 1)
    finally:
        child.close()


@pytest.mark.parametrize("path", [ExitPath.ALIVE, ExitPath.THREAD])
def test_paths_that_leave_the_device_to_exit_say_so_and_exit_thread_still_invokes_at_exit(
        server: ForkServer, tmp_path: Path, cpu_artifacts: dict[str, Path],
        path: ExitPath) -> None:
    """Their exit status is the runtime's business (a crash here is a finding, recorded by the
    soak): what the job process guarantees is the device alive at `bye` and, for exit-thread,
    a second thread invoking after the worker began its exit."""
    child = fork_worker(server, tmp_path, _config(tmp_path, cpu_artifacts), path.value,
                        [job(path)])
    try:
        child.proc.wait(timeout=_CHILD_S)
        messages = dict(child.messages())
        assert messages["job_done"]["result"]["ok"] == 4
        assert messages["bye"]["devices_alive"] == 1
    finally:
        child.close()
    reader = JournalReader(child.journal)
    try:
        entries = [e for v in reader.all_slots() for e in v.entries]
    finally:
        reader.close()
    exit_began = min(e.ts_ns for e in entries
                     if e.step is Step.WORKER_EXIT and e.phase is Phase.BEGIN)
    late_invokes = [e for e in entries if e.step is Step.INVOKE and e.ts_ns > exit_began]
    assert bool(late_invokes) == (path is ExitPath.THREAD)


def test_a_killed_server_is_reported_down_and_its_children_as_lost(
        server: ForkServer, tmp_path: Path) -> None:
    child = fork_worker(server, tmp_path, _config(tmp_path, None), "orphan", keep_stdin=True)
    try:
        assert child.proc.poll() is None
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait(timeout=_CHILD_S)
        assert not server.pump() and not server.alive()
        with pytest.raises(ForkServerDown):
            fork_worker(server, tmp_path, _config(tmp_path, None), "after")
        # the child died with its server (PR_SET_PDEATHSIG); nobody can tell its status
        assert child.proc.wait(timeout=_CHILD_S) == RETURNCODE_LOST and child.proc.lost
    finally:
        child.close()


def test_a_server_that_stops_answering_is_reported_down(
        server: ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkclient, "REPLY_TIMEOUT_S", 1.0)
    os.kill(server.pid, signal.SIGSTOP)
    with pytest.raises(ForkServerDown, match="did not answer"):
        fork_worker(server, tmp_path, _config(tmp_path, None), "stalled")
    assert not server.alive()


@pytest.mark.parametrize("path", [ExitPath.ALIVE, ExitPath.CLEAN])
def test_a_forked_job_ends_exactly_as_a_spawned_one(server: ForkServer, tmp_path: Path,
                                                     cpu_artifacts: dict[str, Path],
                                                     path: ExitPath) -> None:
    """The fork must not change how a process ends: with gc.freeze() in the server, the
    children never tore down the binding's import-time objects, and exit-alive exited 0 where
    a spawned process dies by SIGSEGV (local-task 3.13: results alive at exit). Whatever the
    runtime does at exit, both ways must agree."""
    config = _config(tmp_path, cpu_artifacts)
    forked = fork_worker(server, tmp_path, config, "forked", [job(path)])
    try:
        forked_rc = forked.proc.wait(timeout=_CHILD_S)
    finally:
        forked.close()
    msg_r, msg_w = os.pipe()
    spawned = subprocess.Popen(
        [sys.executable, "-m", "stress.engine.worker", "--config", str(config),
         "--worker-id", "0", "--journal", str(tmp_path / "spawned.bin"), "--msg-fd",
         str(msg_w)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, pass_fds=[msg_w], env=_env(), cwd=tmp_path)
    os.close(msg_w)
    try:
        assert spawned.stdin is not None
        spawned.stdin.write((json.dumps(["job", job(path)]) + "\n").encode())
        spawned.stdin.close()
        spawned_rc = spawned.wait(timeout=_CHILD_S)
    finally:
        os.close(msg_r)
        for core in tmp_path.glob("core*"):
            core.unlink()
    assert forked_rc == spawned_rc
