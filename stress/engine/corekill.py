"""A hung process's native stacks when no live reader could give them: its core, dumped by the
kill itself, read after the verdict.

Live readers that cannot harm the process come first (`evidence.dump_stacks`: py-spy, plain
gdb). Where none of them gave native frames (py-spy cannot read a process past interpreter
finalization; cuda-gdb must not attach to a CUDA process, rocgdb to a HIP one), the hang is
already decided, so the process may die: it is killed by a signal whose default action dumps
core (SIGQUIT, else SIGABRT: one it has no handler for, so no code of the process runs), and
that core is read like a crash's (`postmortem.native_stacks`: gdb or cuda-gdb on the core,
which is safe on the H200, then pystack, then py-spy). The stacks are the process's at the
moment of the kill, every thread included.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from stress.engine import postmortem, procstate
from stress.engine.callstacks import Stacks, StackSource, find_gdb, find_pyspy
from stress.vocab import signal_name

LIVE_NATIVE: frozenset[StackSource] = frozenset({StackSource.PYSPY, StackSource.GDB_ATTACH})
_CORE_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGQUIT, signal.SIGABRT)  # default
#   action: terminate with a core; Python installs no handler for either (faulthandler, when
#   enabled, handles SIGABRT and re-raises it, so SIGQUIT comes first)
CORE_WAIT_S: float = 30.0  # the kernel writes the core before the process is gone: ~0.05 s
#   for a cpu worker here, ~1 s for a CUDA process on the H200 (901 MiB); a slow disk more
CORES_PER_BATCH: int = 2  # hung processes of one batch whose core is taken: a GPU-wide stall
#   hangs every worker at once, and each CUDA core is ~1 GiB to write and read


def wanted(stacks: Stacks, own_cwd: bool) -> bool:
    """Whether a core should be taken of a hung process whose live stacks are `stacks`: only
    where no live reader gave native frames, the process did not die already, no thread is in
    uninterruptible wait (the dump would wait for it), its cwd is a folder of ours (`own_cwd`:
    a user's command runs in the user's own folder, and no core is left there), and something
    here can read a core."""
    if stacks.tool in LIVE_NATIVE or stacks.died or stacks.tool is StackSource.PYSPY_NONBLOCKING:
        return False
    return own_cwd and (find_gdb() is not None or find_pyspy() is not None or
                        postmortem.pystack_available())


def ours(cwd: Path, run_dir: Path) -> bool:
    """Whether `cwd` is one of this run's worker folders (where only our cores land)."""
    try:
        cwd.resolve().relative_to((run_dir / postmortem.CORES_FOLDER).resolve())
        return True
    except (ValueError, OSError):
        return False


@dataclass
class CoreKill:
    """What the kill that dumps a core did: the signal sent (None: none could be), whether
    the process was gone within the wait, and why not when it was not sent."""

    signal: str | None
    ended: bool
    note: str = ""
    seconds: float = 0.0
    other: int | None = None  # the exit code when it died of something else first (a signal
    #   an evidence tool sent, still being delivered when ours was)


def dump(pid: int, poll: Callable[[], int | None], wait_s: float = CORE_WAIT_S) -> CoreKill:
    """Kills process `pid` (not its group) with the first of SIGQUIT, SIGABRT it has no
    handler for, then waits up to `wait_s` for it to end (`poll`: its Popen-style poll, which
    reaps it). Never raises."""
    t0 = time.monotonic()
    caught = procstate.caught_signals(pid)
    if caught is None:
        return CoreKill(None, poll() is not None, "the process was gone")
    sig = next((s for s in _CORE_SIGNALS if s not in caught), None)
    if sig is None:
        return CoreKill(None, False, "it handles SIGQUIT and SIGABRT: no core signal sent")
    note = postmortem.allow_core(pid)  # the evidence budget may have turned its cores off
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return CoreKill(None, True, "the process was gone")
    deadline = time.monotonic() + wait_s
    while poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    rc = poll()
    if rc is not None and rc != -int(sig):
        return CoreKill(None, True, f"it died by {signal_name(rc) or rc} before "
                        f"our {sig.name} arrived", time.monotonic() - t0, other=rc)
    if rc is None:
        note = "; ".join(n for n in (note, f"still there {wait_s:g} s after {sig.name}") if n)
    return CoreKill(sig.name, rc is not None, note, time.monotonic() - t0)


def settle(poll: Callable[[], int | None], wait_s: float = CORE_WAIT_S) -> int | None:
    """The exit code of a process seen dying (writing its core takes a while), once it is
    gone, or None if it is not within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while (rc := poll()) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return rc


def read(pid: int, exe: str, cwd: Path, *, tids: Collection[int] = (),
         since_wall: float | None = None) -> Stacks:
    """The core of dead process `pid` (its cwd `cwd`), read and deleted as a crash's is."""
    return postmortem.native_stacks(pid, exe, cwd, "", since_wall=since_wall, tids=tids)


def merge(live: Stacks, post: Stacks, how: str) -> Stacks:
    """The stacks a hang keeps: the core's when it gave threads (the live attempts and `how`
    the core came to be in its `tried`), else the live ones with the core's failure noted."""
    if post.threads:
        # the thread that took our (or the evidence tool's) signal says nothing of the hang
        post.crashed_tid = post.signal = None
        post.tried = [*live.tried, f"{how}: {post.tool.value}: {len(post.threads)} threads"]
        post.died = live.died
        post.note = "; ".join(n for n in (live.note, post.note) if n)
        return post
    live.tried = [*live.tried, f"{how}: {post.tool.value}"
                  + (f" ({post.note})" if post.note else "")]
    return live


def after_verdict(rc: int | None, stacks: Stacks) -> str:
    """What happened to a hung process while its evidence was taken, when it ended by
    itself: said inside the hang's record, never as a verdict of its own."""
    how = f"died by {signal_name(rc)}" if rc is not None and rc < 0 else \
        f"exited with status {rc}"
    during = f"during {stacks.died}" if stacks.died else "while its evidence was taken"
    return f"{how} {during}"
