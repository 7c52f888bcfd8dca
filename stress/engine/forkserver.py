"""Fork server: pays interpreter start-up and imports once, then forks short-lived job processes.

Started by the parent as `python -m stress.engine.forkserver --sock FD --parent-pid PID`, under
the worker interpreter (stdlib + numpy + iree.runtime only, like stress.engine.worker). It
imports numpy, iree.runtime and the worker code once and never creates a HAL driver or device:
CUDA and HIP are not fork-safe once initialized, and a process with a second thread forks a
child in which that thread's locks stay locked forever. Before it says `hello`, and again
before every fork, it checks both by reading /proc (`check_fork_safety`): a check that can fail,
whose verdict and reason are in `hello` (and a `refused` answer), so the parent falls back to
spawn and says why.

Protocol (one SOCK_SEQPACKET message per `[name, payload]` JSON pair, fds by SCM_RIGHTS):
  server -> parent  hello   {pid, fork_safe, reason, threads, gpu_libraries}
  parent -> server  fork    {id, argv, cwd, env, stdin}  fds: msg, stdout, stderr[, stdin]
  server -> parent  forked  {id, pid}  |  refused {id, reason}
  server -> parent  exited  {pid, status, core_dumped}  (status Popen-style: -signal or code)
The parent closing its end is the only shutdown: the server leaves by os._exit (it never
touched a driver, and its own exit must not run exit handlers that tests count), and its
children, which die with it (PR_SET_PDEATHSIG), go too.

A forked child takes its own process group, its fds (stdin, stdout, stderr, and the
message pipe at CHILD_MSG_FD), the request's cwd and environment, then runs the worker and
leaves through the *normal* exit path: `main` returns into `sys.exit`, so Py_Finalize, atexit,
the C library's exit() and the ELF destructors run, which is where a GPU driver's teardown
lives. (`multiprocessing` children leave by os._exit and skip exactly that.)

No gc.freeze() before fork, although it makes a child's exit ~4x cheaper here (its final
collection would not write to, and so copy, every page of the inherited heap): frozen objects
are never collected, so the binding's own teardown never runs at the child's exit, and an exit
that crashes a spawned process (local-task 3.13 with results alive) then exits 0 when forked.
A forked exit must be the same exit as a spawned one (tests/system/test_forked_exits.py).
"""

from __future__ import annotations

import argparse
import array
import ctypes
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, NoReturn

GPU_LIBRARY_MARKERS: tuple[str, ...] = ("libcuda", "libamdhip64", "libhsa-runtime64",
                                        "libnvidia-")  # driver libraries whose state a fork
#   cannot carry: mapped means a driver was (or is being) initialized in this process
CHILD_MSG_FD: int = 3  # the message pipe's fd number in a forked child: the first free one
#   after stdio, so `--msg-fd 3` is the same in every child whatever fd the server received
MAX_MESSAGE: int = 1 << 20  # an argv plus a full environment is ~10 KiB; a SEQPACKET message
#   larger than the receive buffer would be truncated, so both sides use this bound
MAX_FDS: int = 4  # msg, stdout, stderr, stdin
EXIT_CHILD_SETUP: int = 71  # EX_OSERR: a forked child could not be set up and ran no worker
_REAP_POLL_MS: int = 1000  # SIGCHLD wakes the loop at once; this bounds a lost wake-up
_PR_SET_PDEATHSIG: int = 1  # linux prctl: signal us when our parent dies
_THREAD_LIMITS: dict[str, str] = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                                  "MKL_NUM_THREADS": "1"}  # numpy's BLAS starts a thread pool
#   at import (one thread per core); the server must stay single-threaded to fork safely, and
#   the workers use numpy only for small reference computations


class Msg(str, Enum):
    """Message names of the fork protocol (both directions)."""

    HELLO = "hello"
    FORK = "fork"
    FORKED = "forked"
    REFUSED = "refused"
    EXITED = "exited"


def encode(name: Msg, payload: dict[str, Any]) -> bytes:
    return json.dumps([name.value, payload], separators=(",", ":")).encode()


def decode(data: bytes) -> tuple[Msg, dict[str, Any]]:
    """Raises ValueError for a message that is not `[known name, object]`."""
    name, payload = json.loads(data)
    if not isinstance(payload, dict):
        raise ValueError(f"payload of {name!r} is not an object")
    return Msg(name), payload


def recv_message(sock: socket.socket, flags: int = 0) -> tuple[bytes, list[int]]:
    """One message and the fds it carries (socket.recv_fds ignores `flags` before 3.12)."""
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(MAX_MESSAGE,
                                                socket.CMSG_LEN(MAX_FDS * fds.itemsize), flags)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def returncode_of(status: int) -> int:
    """A waitpid status as Popen's returncode: -signal for a signal death, else the exit code."""
    return os.waitstatus_to_exitcode(status)


@dataclass(frozen=True)
class ForkSafety:
    """Whether this process may fork a child that uses the runtime, and why (or why not)."""

    safe: bool
    reason: str
    threads: int
    gpu_libraries: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"fork_safe": self.safe, "reason": self.reason, "threads": self.threads,
                "gpu_libraries": list(self.gpu_libraries)}


def check_fork_safety(proc: str = "/proc/self") -> ForkSafety:
    """Reads the threads (`proc`/task) and mappings (`proc`/maps) of a process: safe when it
    has exactly one thread and maps no GPU driver library (GPU_LIBRARY_MARKERS)."""
    try:
        threads = len(os.listdir(f"{proc}/task"))
        with open(f"{proc}/maps", "rb") as f:
            maps = f.read()
    except OSError as exc:
        return ForkSafety(False, f"cannot read {proc} ({exc.strerror}): fork safety unknown",
                          0, ())
    libs: set[str] = set()
    # a file name starting with a marker follows a "/": one bytes search per marker (this runs
    # before every fork), lines parsed only when one is there
    if any(b"/" + m.encode() in maps for m in GPU_LIBRARY_MARKERS):
        for line in maps.decode(errors="replace").splitlines():
            path = line.rsplit(None, 1)[-1] if "/" in line else ""
            if any(os.path.basename(path).startswith(m) for m in GPU_LIBRARY_MARKERS):
                libs.add(path)
    found = tuple(sorted(libs))
    problems = []
    if threads != 1:
        problems.append(f"{threads} threads (a fork copies only the calling one; locks the "
                        "others hold stay locked in the child)")
    if found:
        problems.append(f"GPU driver library mapped: {', '.join(found)} (a driver initialized "
                        "before fork is unusable in the child)")
    if problems:
        return ForkSafety(False, "; ".join(problems), threads, found)
    return ForkSafety(True, "1 thread, no GPU driver library mapped", threads, found)


@dataclass(frozen=True)
class ChildSpec:
    """What a forked child runs once it has left the server loop."""

    argv: list[str]


class Server:
    def __init__(self, sock: socket.socket, parent_pid: int):
        self.sock = sock
        self.parent_pid = parent_pid
        self.children: set[int] = set()
        self.pid = os.getpid()
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)

    def send(self, name: Msg, payload: dict[str, Any]) -> None:
        self.sock.send(encode(name, payload))

    def serve(self) -> ChildSpec | None:
        """The request loop. Returns None in the server when the parent closed its end, and
        a ChildSpec in a freshly forked child (which then unwinds out of here before running
        anything, so no server frame is on its stack when it exits)."""
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _ignore_signal)  # a Python handler: wakes poll() below
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            try:
                child = self._once(poller)
            except ConnectionError:
                return None  # the parent is gone
            if child is not None:
                return child if isinstance(child, ChildSpec) else None

    def _once(self, poller: select.poll) -> ChildSpec | bool | None:
        """One wake-up: reap, then read requests. A ChildSpec in a new child, True at EOF."""
        self.reap()
        for fd, _ in poller.poll(_REAP_POLL_MS):
            if fd == self._wake_r:
                _drain(self._wake_r)
                continue
            data, fds = recv_message(self.sock)
            if not data:
                return True  # the parent closed its end
            try:
                child = self.on_request(data, fds)
            finally:
                if os.getpid() == self.pid:  # the child closed its copies already
                    for f in fds:
                        os.close(f)
            if child is not None:
                return child
        return None

    def on_request(self, data: bytes, fds: list[int]) -> ChildSpec | None:
        name, payload = decode(data)
        if name is not Msg.FORK:
            raise ValueError(f"unknown request {name.value!r}")
        return self.on_fork(payload, fds)

    def on_fork(self, req: dict[str, Any], fds: list[int]) -> ChildSpec | None:
        """A `fork` request: check, fork, answer `forked` (or `refused`)."""
        want = 4 if req.get("stdin") else 3
        if len(fds) != want:
            self.send(Msg.REFUSED, {"id": req["id"], "reason": f"got {len(fds)} fds, want {want}"})
            return None
        safety = check_fork_safety()
        if not safety.safe:
            self.send(Msg.REFUSED, {"id": req["id"], "reason": safety.reason})
            return None
        server_pid = os.getpid()  # taken before the fork: see _die_with
        pid = os.fork()
        if pid == 0:
            try:
                self._become_child(req, fds, server_pid)
            except BaseException:  # never let a child return into the server loop
                os._exit(EXIT_CHILD_SETUP)
            return ChildSpec([str(a) for a in req["argv"]])
        self.children.add(pid)
        _own_group(pid)  # done before `forked`: a signal to the group then reaches the child
        self.send(Msg.FORKED, {"id": req["id"], "pid": pid})
        return None

    def _become_child(self, req: dict[str, Any], fds: list[int], server_pid: int) -> None:
        """In the forked child: its own process group, its fds at 0-3, the request's cwd and
        environment, the server's sockets closed and its signal set-up undone, death with the
        server."""
        _own_group(0)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # move the received fds above 0-3 first: one of them may already sit where another goes
        high = [_dup_high(f) for f in fds]
        for f in (*fds, self.sock.fileno(), self._wake_r, self._wake_w):
            _close_quietly(f)
        self.sock.detach()
        msg, out, err = high[:3]
        stdin = high[3] if len(high) > 3 else os.open(os.devnull, os.O_RDONLY)
        for src, dst in ((stdin, 0), (out, 1), (err, 2), (msg, CHILD_MSG_FD)):
            os.dup2(src, dst)
        for f in {stdin, out, err, msg}:
            os.close(f)
        _die_with(server_pid)
        if req.get("cwd"):
            os.chdir(req["cwd"])
        env = req.get("env")
        if env is not None:
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in env.items()})

    def reap(self) -> None:
        """Reports every child that exited (non-blocking)."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.send(Msg.EXITED, {"pid": pid, "status": returncode_of(status),
                                   "core_dumped": os.WCOREDUMP(status)})


def _own_group(pid: int) -> None:
    """Makes `pid` (0: ourselves) the leader of a new process group. Both the server and the
    child call it, as shells do, so the group exists before either goes on, without waiting
    for the other. A group, not a session (setsid): only the child itself could create one,
    and the server would have to wait for it; the server's session has no terminal, so a
    group is all that signal_group needs."""
    try:
        os.setpgid(pid, pid)
    except OSError:  # EACCES/ESRCH: the other side did it first, or the child already left
        pass


def _ignore_signal(_sig: int, _frame: Any) -> None:
    pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _dup_high(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _prctl(option: int, arg: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _die_with(parent_pid: int) -> None:
    """SIGKILL when `parent_pid` dies (PR_SET_PDEATHSIG); gone already: leave at once.
    `parent_pid` must be known before the fork: read in the child, a parent that died before
    the child first ran is already its adopter (the suite under load had a forked child outlive
    its killed server that way, waiting on its stdin for good)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(EXIT_CHILD_SETUP)


def _preload() -> str | None:
    """Imports what every job needs; returns an error text when one import fails."""
    for key, value in _THREAD_LIMITS.items():
        os.environ.setdefault(key, value)
    try:
        import iree.runtime  # noqa: F401
        import numpy  # noqa: F401
        import numpy.random  # noqa: F401  (inputs: ~10 ms per child when left to it)

        import stress.engine.attribution  # noqa: F401  (failure notes)
        import stress.engine.exitpaths  # noqa: F401
        import stress.engine.worker  # noqa: F401
        import stress.programs.reference  # noqa: F401  (expected results)
    except Exception as exc:  # reported in hello: the parent falls back to spawn
        return f"import failed: {type(exc).__name__}: {exc}"
    _warm_up()
    return None


def _warm_up() -> None:
    """First uses that fill per-process caches every child would otherwise fill again: an
    argparse parse compiles its regexes and looks up message catalogs (~2 ms of a ~30 ms
    job on cpu; later parses with the same kinds of options cost ~0.3 ms)."""
    ap = argparse.ArgumentParser(prog="warm-up")
    ap.add_argument("--path", required=True)
    ap.add_argument("--number", type=int, default=0)
    ap.add_argument("--flag", action="store_true", help="a flag")
    ap.parse_args(["--path", "p", "--number", "1", "--flag"])


def run_child(spec: ChildSpec) -> int:
    """The job process's body, outside every server frame: the worker, which leaves by its
    job's exit path after `bye`."""
    from stress.engine import worker

    sys.argv = ["stress.engine.worker", *spec.argv]
    return worker.main(spec.argv)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="stress.engine.forkserver")
    ap.add_argument("--sock", type=int, required=True, help="our end of the SEQPACKET pair")
    ap.add_argument("--parent-pid", type=int, default=0, help="die with this process")
    ap.add_argument("--test-thread", action="store_true",
                    help="tests only: start a second thread, so the fork check must fail")
    args = ap.parse_args(argv)
    if args.parent_pid:
        _die_with(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    sock = socket.socket(fileno=args.sock)
    error = _preload()
    if args.test_thread:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True,
                         name="test-thread").start()
    safety = check_fork_safety()
    if error is not None:
        safety = ForkSafety(False, error, safety.threads, safety.gpu_libraries)
    server = Server(sock, args.parent_pid)
    server.send(Msg.HELLO, {"pid": os.getpid(), **safety.as_dict()})
    if not safety.safe:
        _leave_server()
    child = server.serve()
    if child is None:
        _leave_server()
    return run_child(child)


def _leave_server() -> NoReturn:
    """The server's own exit: no exit handlers (it never created a driver; tests count the
    destructors its children run)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
