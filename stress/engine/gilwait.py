"""Which late thread only waits for the GIL: read from /proc/PID/task/TID/syscall (a timed
futex wait is how CPython's threads wait for it), before any evidence tool touches the
process. The watchdog asks it (a GilCheck per worker) when several threads are late at once:
the GIL's waiters are victims of whichever thread holds it, not the one that stalled.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from stress.engine import procstate

# futex(2) on the architectures we run on (x86_64, aarch64), and the wait commands
_FUTEX_SYSCALLS: frozenset[int] = frozenset({202, 98})
_FUTEX_CMD_MASK: int = 0x7F  # FUTEX_PRIVATE_FLAG (128) and FUTEX_CLOCK_REALTIME (256) cleared
_FUTEX_WAITS: frozenset[int] = frozenset({0, 9})  # FUTEX_WAIT, FUTEX_WAIT_BITSET
GIL_SAMPLES: int = 7  # a GIL waiter wakes every 5 ms (sys.getswitchinterval), takes the GIL's
#   mutex (an untimed futex wait when contended) and waits again: seven reads a millisecond
#   apart, at least GIL_TIMED_SAMPLES of them in a timed wait, and it is not the thread that
#   stalled. With eight waiters on two cores ~7% of reads catch one running (all three of
#   three reads in a wait missed ~7% of them: a victim blamed for the hang, seen on cuda)
GIL_TIMED_SAMPLES: int = 3
_GIL_SAMPLE_GAP_S: float = 0.001


def parse_syscall(text: str) -> tuple[int, list[int]] | None:
    """(syscall number, its six arguments) of a /proc/PID/task/TID/syscall line; None when the
    thread runs in user space ("running") or is not in a syscall ("-1 ...")."""
    parts = text.split()
    if not parts or not parts[0].isdigit():  # "running" (user space) or "-1" (no syscall)
        return None
    try:
        return int(parts[0]), [int(a, 16) for a in parts[1:7]]
    except ValueError:
        return None


def in_timed_futex_wait(text: str) -> bool:
    """Whether a /proc/.../syscall line is a futex wait with a timeout: how CPython's threads
    wait for the GIL (a condition variable waited on 5 ms at a time), unlike a thread join,
    a lock or a stall, which wait with none (or spin)."""
    call = parse_syscall(text)
    if call is None or call[0] not in _FUTEX_SYSCALLS or len(call[1]) < 4:
        return False
    _uaddr, op, _val, timeout = call[1][:4]
    return (op & _FUTEX_CMD_MASK) in _FUTEX_WAITS and timeout != 0


def describe_syscall(text: str) -> str:
    """A /proc/.../syscall line in a few words, for a failure's record of what the watchdog
    read: `running`, `no syscall`, `futex wait, timed`, `futex wait`, `futex op N`,
    `syscall N`. Pure."""
    call = parse_syscall(text)
    if call is None:
        return "no syscall" if text.split()[:1] == ["-1"] else "running"
    number, args = call
    if number not in _FUTEX_SYSCALLS or len(args) < 4:
        return f"syscall {number}"
    if args[1] & _FUTEX_CMD_MASK not in _FUTEX_WAITS:
        return f"futex op {args[1] & _FUTEX_CMD_MASK}"
    return "futex wait, timed" if args[3] else "futex wait"


def waits_for_gil(pid: int, tid: int, samples: int = GIL_SAMPLES,
                  needed: int = GIL_TIMED_SAMPLES, reads: list[str] | None = None) -> bool:
    """Whether thread `tid` of `pid` looks like it waits for the GIL (`needed` of `samples`
    reads a timed futex wait): a victim of whichever thread holds it, not the one that
    stalled (spinning, blocked without a timeout, asleep: no timed futex wait). False when it
    cannot be read (gone, no permission): the caller then keeps its own rule. `reads`: each
    read made, described (`describe_syscall`), appended."""
    path = Path(f"/proc/{pid}/task/{tid}/syscall")
    timed = 0
    for i in range(samples):
        text = procstate.read_proc(path)
        if text is None:
            if reads is not None:
                reads.append("unreadable")
            return False
        if reads is not None:
            reads.append(describe_syscall(text))
        timed += in_timed_futex_wait(text)
        if timed >= needed:
            return True
        if timed + samples - i - 1 < needed:
            return False
        time.sleep(_GIL_SAMPLE_GAP_S)
    return False


class GilCheck:
    """`waits_for_gil` by journal slot (`tid_of(slot)`: the slot's native thread id), for
    `watchdog.scan`; the reads of each slot asked are kept (`reads`) for the failure's
    record."""

    def __init__(self, pid: int, tid_of: Callable[[int], int]) -> None:
        self.pid = pid
        self.tid_of = tid_of
        self.reads: dict[int, list[str]] = {}

    def __call__(self, slot: int) -> bool:
        tid = self.tid_of(slot)
        reads = self.reads[slot] = []
        return tid > 0 and waits_for_gil(self.pid, tid, reads=reads)
