"""The kernel log since a moment, for a failure's folder (kernel.log): the lines that name a GPU
or memory fault, a reset or a hung task, then the last few whatever they say; from `dmesg`, else
`journalctl -k`, each run bounded. Moved out of procstate.py (issue 25), which reads /proc."""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from stress.engine.procstate import run_bounded

KERNEL_LOG_MAX_LINES: int = 200  # enough for a burst of Xid/ring-timeout lines, small on disk
_KERNEL_LOG_LAST_LINES: int = 10  # context: what the kernel said last, whatever it was
_KERNEL_LOG_TIMEOUT_S: float = 5.0  # dmesg/journalctl read memory or a local journal: well
#   under a second normally; a bound in case journald is wedged with the rest of the machine
_KERNEL_LOG_SLACK_S: float = 2.0  # printk's clock and the wall clock drift apart a little
#   (and suspend is not counted): include lines from just before `since_wall`
_INTERESTING = re.compile(
    r"\bNVRM\b|\bXid\b|amdgpu|\bkfd\b|ring \S+ timeout|ring timeout|gpu reset|"
    r"reset.*\bgpu\b|page fault|segfault|general protection|hung_task|"
    r"blocked for more than|trap divide error|invalid opcode|out of memory|oom-kill|"
    r"\bmce\b|machine check|soft lockup|hard lockup", re.IGNORECASE)


@dataclass
class KernelLog:
    """Kernel log lines since a moment: those that name a GPU or memory fault, a reset or a
    hung task, then the last few lines whatever they say. `source` is "dmesg",
    "journalctl -k" or None (`note` says why nothing was readable)."""

    source: str | None
    lines: list[str] = field(default_factory=list)
    note: str | None = None
    since_wall: float = 0.0
    left_out: int = 0  # fault lines of other processes dropped (`only`)

    @property
    def text(self) -> str:
        """kernel.log for a failure folder."""
        head = (f"# kernel log via {self.source} since "
                f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(self.since_wall))}Z"
                if self.source else f"# kernel log not readable: {self.note}")
        if self.left_out:
            head += (f"\n# {self.left_out} line(s) about faults of other processes (not this "
                     "job's) left out")
        if self.source and not self.lines:
            head += "\n# (nothing logged since then)"
        return head + "\n" + "".join(line + "\n" for line in self.lines)

    def stamped(self) -> list[tuple[float | None, str]]:
        """Each line with the wall-clock time it was logged (None: not stamped): the lines
        kept include a slack before `since_wall` and the last few whatever their time."""
        stamp = _DMESG_TIME if self.source == "dmesg" else _JOURNAL_TIME
        boot = _boot_wall() if self.source == "dmesg" else 0.0
        return [(boot + float(m.group(1)) if m else None, line) for line in self.lines
                for m in [stamp.match(line)]]


    def only(self, tids: Collection[int]) -> KernelLog:
        """This log without the lines about a fault of a process whose thread is not in
        `tids` (`comm[tid]: segfault at ...`, `traps: comm[tid] general protection ...` and
        the `Code:` line after one): another process's crash, another copy's, is not this
        job's evidence. Lines naming no process (a GPU's Xid, a reset) stay. Pure."""
        kept: list[str] = []
        dropped = 0
        skip_code = False
        for line in self.lines:
            body = _STAMP.sub("", line)
            if skip_code and body.startswith("Code:"):
                dropped += 1
                continue
            m = _FAULT_OF.search(body)
            skip_code = m is not None and int(m.group(1)) not in tids
            if skip_code:
                dropped += 1
                continue
            kept.append(line)
        return KernelLog(self.source, kept, self.note, self.since_wall,
                         self.left_out + dropped)


_FAULT_OF = re.compile(r"(?:^|\s)\S+\[(\d+)\]:? (?:segfault at|general protection|trap )")
_STAMP = re.compile(r"^(?:\[\s*\d+\.\d+\]|\d+\.\d+ \S+ kernel:)\s*")
_DMESG_TIME = re.compile(r"^\[\s*(\d+\.\d+)\]")
_JOURNAL_TIME = re.compile(r"^(\d+\.\d+)\s")


def select_lines(stamped: Sequence[tuple[float | None, str]], since_wall: float,
                 max_lines: int) -> list[str]:
    """Lines at or after `since_wall` (minus a small slack) that match the GPU/fault patterns,
    plus the last few lines, in log order, at most `max_lines` (the newest win). Pure."""
    recent = [line for t, line in stamped if t is None or t >= since_wall - _KERNEL_LOG_SLACK_S]
    keep = {i for i, line in enumerate(recent) if _INTERESTING.search(line)}
    keep.update(range(max(0, len(recent) - _KERNEL_LOG_LAST_LINES), len(recent)))
    chosen = [recent[i] for i in sorted(keep)]
    return chosen[-max_lines:] if max_lines > 0 else []


def _boot_wall() -> float:
    # printk stamps are seconds on the kernel's local clock, which counts like CLOCK_MONOTONIC
    return time.time() - time.monotonic()


def kernel_log_tail(since_wall: float, max_lines: int = KERNEL_LOG_MAX_LINES) -> KernelLog:
    """The kernel log since `since_wall` (a `time.time()` value, e.g. the worker's start):
    `dmesg`, else `journalctl -k` (dmesg_restrict hides the ring from non-root users; the
    journal may still be readable). Keeps lines naming NVRM/Xid, amdgpu, ring timeouts, GPU
    resets, page faults, segfaults, general protection, hung tasks, OOM kills, plus the last
    10 lines. Each tool is bounded by 5 s; never raises."""
    notes = []
    run = run_bounded(["dmesg"], _KERNEL_LOG_TIMEOUT_S)
    if run.rc == 0 and run.stdout.strip():
        boot = _boot_wall()
        stamped: list[tuple[float | None, str]] = []
        last: float | None = None
        for line in run.stdout.splitlines():
            m = _DMESG_TIME.match(line)
            last = boot + float(m.group(1)) if m else last  # continuation: the line's stamp
            stamped.append((last, line))
        return KernelLog("dmesg", select_lines(stamped, since_wall, max_lines), None,
                         since_wall)
    notes.append(run.describe() + (f" ({run.stderr.strip()[:120]})" if run.stderr else ""))
    since = int(since_wall - _KERNEL_LOG_SLACK_S)
    run = run_bounded(["journalctl", "-k", "--no-pager", "-q", "-o", "short-unix",
                       f"--since=@{since}"], _KERNEL_LOG_TIMEOUT_S)
    if run.rc == 0:
        stamped, last = [], None
        for line in run.stdout.splitlines():
            m = _JOURNAL_TIME.match(line)
            last = float(m.group(1)) if m else last
            stamped.append((last, line))
        return KernelLog("journalctl -k", select_lines(stamped, since_wall, max_lines), None,
                         since_wall)
    notes.append(run.describe() + (f" ({run.stderr.strip()[:120]})" if run.stderr else ""))
    return KernelLog(None, [], "; ".join(notes), since_wall)
