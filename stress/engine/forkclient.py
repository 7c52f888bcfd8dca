"""Parent side of the fork server (stress.engine.forkserver): start it, ask it to fork job
processes, and watch them like subprocess.Popen objects.

Imports neither iree nor numpy: this runs in the session. The server is the forked processes'
real parent, so their exit statuses arrive as `exited` messages on the server's socket: the
session selects on `fileno()` and calls `pump()`, and `ForkedProcess.poll()` pumps too.

When the server dies or stops answering (`ForkServerDown`), the children it forked die with it
(PR_SET_PDEATHSIG) or are left without anyone to report them: they stay watchable by pid through
/proc, and once gone their status is unknown. Then `returncode` is RETURNCODE_LOST and `lost` is
True: never a real status (exit codes are 0-255, signals negative), so a caller that does not
know about `lost` still sees a failed exit rather than a clean one.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from stress.engine.forkserver import CHILD_MSG_FD, Msg, decode, encode, recv_message

__all__ = ["CHILD_MSG_FD", "RETURNCODE_LOST", "ForkServer", "ForkServerDown",
           "ForkServerUnsafe", "ForkedProcess"]

RETURNCODE_LOST: int = 1 << 16  # status unknown (server gone): outside every real returncode
DEFAULT_STARTUP_TIMEOUT_S: float = 60.0  # the server imports numpy + iree.runtime: ~0.3 s
#   here, seconds on a cold disk or a loaded CI machine
REPLY_TIMEOUT_S: float = 10.0  # a fork answers in milliseconds (the server forks and replies
#   before anything else); past this the server is hung and treated as down
_CLOSE_GRACE_S: float = 2.0  # the server leaves at EOF at once; then SIGKILL
_LOST_POLL_S: float = 0.02  # how often wait() looks at /proc when no server reports exits
_LOG_TAIL_BYTES: int = 4096  # of the server's output, quoted when it fails to start


class ForkServerUnsafe(Exception):
    """The server says forking is unsafe here (a second thread, a GPU driver already mapped, a
    failed import): use spawn. `str()` is the server's reason, fit for one line."""


class ForkServerDown(Exception):
    """The server died or did not answer within a bound."""


class ForkedProcess:
    """A job process forked by the server, with the part of subprocess.Popen the session uses.
    Its pid leads its own process group (the server called setsid), so signal_group works."""

    stdin: IO[bytes] | None = None

    def __init__(self, server: ForkServer, pid: int, argv: Sequence[str]):
        self._server = server
        self.pid = pid
        self.args = list(argv)
        self.returncode: int | None = None
        self.lost = False  # exit status unknown (see RETURNCODE_LOST)
        self.core_dumped = False
        self._starttime = _start_time(pid)  # tells our pid from a recycled one

    def poll(self) -> int | None:
        if self.returncode is None:
            self._server.pump()
        if self.returncode is None and not self._server.alive() and not self._exists():
            self._server.pump()  # an exit report may still sit in the socket
            if self.returncode is None:
                self.returncode, self.lost = RETURNCODE_LOST, True
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Raises subprocess.TimeoutExpired like Popen.wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rc = self.poll()
            if rc is not None:
                return rc
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._server.wait_readable(_LOST_POLL_S if left is None else min(left, 1.0))

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _exists(self) -> bool:
        """Whether our process is still there (a zombie counts as gone)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return False
        if fields[0] in ("Z", "X"):
            return False
        return self._starttime is None or fields[19] == self._starttime


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class ForkServer:
    """One running fork server. Not thread-safe: the session's loop owns it."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket, log: IO[bytes]):
        self.proc = proc
        self._sock = sock
        self._log = log
        self.hello: dict[str, Any] = {}
        self.down: str | None = None  # why the server is down, once it is
        self._next_id = 1
        self._replies: dict[int, tuple[Msg, dict[str, Any]]] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, dict[str, Any]] = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(cls, python: str, env: dict[str, str], cwd: Path | str | None = None,
              startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
              extra_args: Sequence[str] = ()) -> ForkServer:
        """Starts `python -m stress.engine.forkserver` (its own session; it dies with us) and
        waits for its `hello`. Native libraries see `env` as it is here, at load: LD_PRELOAD
        and variables read by a library's constructor are the server's for every child.
        Raises ForkServerUnsafe (server already gone) or ForkServerDown."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = tempfile.TemporaryFile()  # noqa: SIM115 -- owned by the server object, closed in close()
        try:
            proc = subprocess.Popen(
                [python, "-m", "stress.engine.forkserver", "--sock", str(theirs.fileno()),
                 "--parent-pid", str(os.getpid()), *extra_args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=[theirs.fileno()],
                env=env, cwd=cwd, start_new_session=True)
        except BaseException:
            ours.close()
            log.close()
            raise
        finally:
            theirs.close()
        server = cls(proc, ours, log)
        server._await_hello(startup_timeout_s)
        return server

    def _await_hello(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.hello:
            if not self._receive(deadline):
                reason = f"{self.down or 'no hello'}{self._log_tail()}"
                self.close()
                raise ForkServerDown(f"fork server did not start: {reason}")
        if not self.hello.get("fork_safe"):
            self.close()
            raise ForkServerUnsafe(str(self.hello.get("reason", "unsafe")))

    def fork(self, argv: Sequence[str], msg_fd: int, stdout_fd: int, stderr_fd: int,
             stdin_fd: int | None = None, cwd: Path | str | None = None,
             env: dict[str, str] | None = None) -> ForkedProcess:
        """Forks one job process running `worker.main(argv)`. In the
        child, `msg_fd` becomes CHILD_MSG_FD (argv must say `--msg-fd 3`), stdin is `stdin_fd`
        or /dev/null; `cwd` and `env` replace the server's. Our fds stay open: close them
        after this returns, as after Popen. Raises ForkServerUnsafe when the server refuses
        (its fork check failed) and ForkServerDown when it is gone or does not answer."""
        if self.down is not None:
            raise ForkServerDown(self.down)
        rid = self._next_id
        self._next_id += 1
        fds = [msg_fd, stdout_fd, stderr_fd] + ([stdin_fd] if stdin_fd is not None else [])
        req = {"id": rid, "argv": list(argv), "cwd": str(cwd) if cwd else None, "env": env,
               "stdin": stdin_fd is not None}
        try:
            socket.send_fds(self._sock, [encode(Msg.FORK, req)], fds)
        except OSError as exc:
            self._mark_down(f"fork server gone ({exc.strerror or exc})")
            raise ForkServerDown(self.down) from None
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while rid not in self._replies:
            if not self._receive(deadline):
                if self.down is None:
                    self._mark_down(f"fork server did not answer within {REPLY_TIMEOUT_S:g} s")
                    self._kill()
                raise ForkServerDown(self.down)
        name, payload = self._replies.pop(rid)
        if name is Msg.REFUSED:
            raise ForkServerUnsafe(str(payload.get("reason")))
        proc = ForkedProcess(self, int(payload["pid"]), argv)
        self._children[proc.pid] = proc
        early = self._early_exits.pop(proc.pid, None)
        if early is not None:
            self.on_exited(early)
        return proc

    def fileno(self) -> int:
        return self._sock.fileno()

    def pump(self) -> bool:
        """Handles every message already there, without blocking; False once the server is
        down (then the session restarts it; its children are watched through /proc)."""
        while self.down is None and self._receive_one(block=False):
            pass
        if self.down is None and self.proc.poll() is not None:
            self._receive_all_left()
            self._mark_down(f"fork server exited ({self.proc.returncode})")
        return self.down is None

    def alive(self) -> bool:
        return self.pump()

    def wait_readable(self, timeout_s: float) -> None:
        """Sleeps until the server says something or `timeout_s` passes."""
        if self.down is None:
            select.select([self._sock], [], [], max(0.0, timeout_s))
        else:
            time.sleep(max(0.0, min(timeout_s, _LOST_POLL_S)))

    def close(self, grace_s: float = _CLOSE_GRACE_S) -> None:
        """Closes our end (the server leaves at EOF, and its running children die with it),
        then reaps the server, killing it after `grace_s`."""
        if self._sock.fileno() >= 0:
            self._sock.close()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._kill()
        if self.down is None:
            self.down = "closed"
        self._log.close()

    # ---- messages ------------------------------------------------------------------------
    def on_hello(self, payload: dict[str, Any]) -> None:
        """First message: pid, fork_safe, reason, threads, gpu_libraries."""
        self.hello = payload

    def on_forked(self, payload: dict[str, Any]) -> None:
        """Answer to a fork request: the child's pid."""
        self._replies[int(payload["id"])] = (Msg.FORKED, payload)

    def on_refused(self, payload: dict[str, Any]) -> None:
        """Answer to a fork request the server would not carry out (reason)."""
        self._replies[int(payload["id"])] = (Msg.REFUSED, payload)

    def on_exited(self, payload: dict[str, Any]) -> None:
        """A child the server forked has exited (status: Popen-style returncode)."""
        pid = int(payload["pid"])
        proc = self._children.pop(pid, None)
        if proc is None:  # reported before our fork() saw its pid
            self._early_exits[pid] = payload
            return
        proc.returncode = int(payload["status"])
        proc.core_dumped = bool(payload.get("core_dumped"))

    def on_fork(self, payload: dict[str, Any]) -> None:
        raise ValueError("the fork server sent a request")

    # ---- plumbing ------------------------------------------------------------------------
    def _dispatch(self, data: bytes) -> None:
        name, payload = decode(data)
        getattr(self, f"on_{name.value}")(payload)

    def _receive(self, deadline: float) -> bool:
        """Waits up to `deadline` for one message; False when none came or the server is
        down."""
        while self.down is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self._sock], [], [], min(left, 0.5))
            if ready:
                return self._receive_one(block=False)
            if self.proc.poll() is not None:
                self._receive_all_left()
                self._mark_down(f"fork server exited ({self.proc.returncode})")
        return False

    def _receive_one(self, block: bool) -> bool:
        try:
            data, fds = recv_message(self._sock, 0 if block else socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            self._mark_down(f"fork server connection lost ({exc.strerror or exc})")
            return False
        for fd in fds:  # the server never sends fds; do not leak any
            os.close(fd)
        if not data:
            self._mark_down("fork server closed its end")
            return False
        self._dispatch(data)
        return True

    def _receive_all_left(self) -> None:
        while self._receive_one(block=False):
            pass

    def _mark_down(self, why: str) -> None:
        if self.down is None:
            self.down = why

    def _kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=_CLOSE_GRACE_S)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _log_tail(self) -> str:
        try:
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - _LOG_TAIL_BYTES))
            text = self._log.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""
        return f"\n{text}" if text else ""
