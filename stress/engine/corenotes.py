"""A core file's ELF notes, read without a debugger: whose process it is (NT_PRPSINFO's pid,
session, group, name), which thread took the signal and which signal (NT_PRSTATUS), and the files
it had mapped (NT_FILE). Cheap (the notes come first in the file): read before a core is
trusted as a process's own (issue 36: in a shared folder, `core` is someone's until proven),
and the move that makes a core in a shared folder one process's own (`claim`).

The notes also say where a crash happened without any stack memory: the crashing thread's
program counter (NT_PRSTATUS), whether the kernel raised the signal for a fault (NT_SIGINFO's
si_code > 0) and which mapped file holds that address (NT_FILE): its `fault_site`, a module and
offset as a crash reporter keys a crash it has no symbols for. The evidence budget's processes
dump cores of their headers and notes only (`notes_only`: coredump_filter 0), a few KiB that
hold all of it; a core cut at a size limit does too (the kernel writes notes before memory)."""

from __future__ import annotations

import dataclasses
import functools
import os
import resource
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.engine import elfsyms
from stress.fs import new_file_mode


@dataclass
class CoreNotes:
    """From a core's ELF notes: the process id, the thread that took the signal (the kernel
    writes its NT_PRSTATUS first), that signal, and every thread id; from its NT_PRPSINFO the
    process's session and group (which exec job's group it belonged to), its name (`comm`,
    15 characters) and the start of its arguments; from NT_FILE the files it had mapped (the
    executable among them: `executable`)."""

    pid: int
    crashed_tid: int
    signal: int
    tids: list[int]
    uid: int | None = None  # NT_PRPSINFO's: whose process it was
    sid: int | None = None
    pgrp: int | None = None
    name: str = ""
    args: str = ""
    files: list[str] = field(default_factory=list)
    pc: int | None = None  # the crashing thread's program counter
    si_code: int | None = None  # NT_SIGINFO: > 0 raised by the kernel for a fault; <= 0 sent
    #   (kill, tgkill: a handler re-raising, abort), where the registers are the sender's
    si_addr: int | None = None  # the faulting address (SIGSEGV, SIGBUS, SIGILL, SIGFPE)
    maps: list[tuple[int, int, int, str]] = field(default_factory=list)  # NT_FILE: (start,
    #   end, file offset in bytes, path) of every file mapping
    sp: int | None = None  # the crashing thread's stack pointer
    memory: bool = True  # the file holds the crashing thread's stack (False: a notes-only core,
    #   its memory left out by coredump_filter 0 or cut at its size limit)
    whole: bool = True  # the notes segment read in full, NT_PRPSINFO (the pid) among it: a
    #   core still being written may hold only its crashing thread's NT_PRSTATUS so far

    def executable(self) -> str | None:
        """The mapped file whose name the process bears (its comm is the executable's
        basename cut to 15 characters), else the first one mapped (the kernel lists mappings
        by address; an executable's own lie below its libraries')."""
        named = [f for f in self.files if self.name and
                 os.path.basename(f)[:15] == self.name[:15]]
        return named[0] if named else self.files[0] if self.files else None

    def fault_site(self) -> FaultSite | None:
        """Where the crashing thread faulted: the mapped file holding its program counter and
        the offset in that file. None when the signal was sent rather than raised by a fault
        (a handler that re-raised it, such as Python's faulthandler: the registers are then
        in libc's raise), or the address is in no mapped file (JIT code, an executable IREE
        loaded into anonymous memory)."""
        if self.pc is None or self.si_code is None or self.si_code <= 0 or \
                self.signal not in _FAULT_SIGNALS:  # (SI_KERNEL is > 0 for SIGXCPU too)
            return None
        for start, end, offset, path in self.maps:
            if start <= self.pc < end:
                return FaultSite(path.removesuffix(_DELETED), self.pc - start + offset,
                                 self.si_addr, deleted=path.endswith(_DELETED))
        return None


@dataclass(frozen=True)
class FaultSite:
    """A fault's module (path) and offset in that file (`libfault.so.1+0x1149`); `function`
    when the module's symbol table names it (`stress.engine.elfsyms`)."""

    module: str
    offset: int
    addr: int | None = None
    function: str | None = None
    deleted: bool = False  # the file was unlinked since it was mapped (a library rebuilt
    #   under the soak): the file at its path now is another, and names no function of it

    def key(self) -> str:
        """What two crashes share when they faulted in one place: the function and module
        when named (one function faults at several instructions: a copy loop's body or its
        tail), else the module and offset."""
        base = os.path.basename(self.module)
        return f"{self.function} [{base}]" if self.function else f"{base}+{self.offset:#x}"

    def text(self) -> str:
        base = f"{os.path.basename(self.module)}+{self.offset:#x}"
        return f"{self.function} ({base})" if self.function else base

    def as_dict(self) -> dict[str, Any]:
        return {"module": self.module, "offset": self.offset, "function": self.function,
                "addr": self.addr, "key": self.key(), "text": self.text()}


_NT_PRSTATUS, _NT_PRPSINFO, _NT_SIGINFO, _NT_FILE = 1, 3, 0x53494749, 0x46494C45
_PT_LOAD, _PT_NOTE = 1, 4
_PR_REG: int = 112  # elf_prstatus's registers, on 64-bit Linux
_REG_SLOTS: dict[int, dict[str, int]] = {62: {"pc": 16, "sp": 19}, 183: {"pc": 32, "sp": 31}}
#   e_machine -> the program counter's and stack pointer's index in them: x86-64's
#   user_regs_struct (rip, rsp), aarch64's user_pt_regs (pc, sp)
_DELETED: str = " (deleted)"  # NT_FILE's name of a file unlinked since it was mapped (a
#   library rebuilt under the soak): the same module
_FAULT_SIGNALS: frozenset[int] = frozenset({4, 5, 7, 8, 11, 31})  # SIGILL, SIGTRAP, SIGBUS,
#   SIGFPE, SIGSEGV, SIGSYS: raised at the instruction its program counter names


def read_core_notes(path: Path) -> CoreNotes | None:
    """Parse a 64-bit little-endian ELF core's PT_NOTE segment (x86-64 and aarch64 share the
    prstatus/prpsinfo layout used here); None for anything else or a damaged file."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            if struct.unpack_from("<H", head, 16)[0] != 4:  # ET_CORE
                return None
            machine = struct.unpack_from("<H", head, 18)[0]
            phoff = struct.unpack_from("<Q", head, 0x20)[0]
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            size = os.fstat(f.fileno()).st_size
            note: tuple[int, int] | None = None
            loads: list[Load] = []
            for i in range(phnum):
                p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz = struct.unpack_from(
                    "<IIQQQQQ", table, i * phentsize)
                if p_type == _PT_NOTE and note is None:
                    note = p_offset, p_filesz
                elif p_type == _PT_LOAD:
                    loads.append((p_vaddr, p_memsz, p_offset, p_filesz, p_flags))
            if note is None:
                return None
            f.seek(note[0])
            want = min(note[1], 64 << 20)
            data = f.read(want)
            notes = _parse_notes(data, len(data) == want, machine)
            if notes is not None:
                notes.memory = _holds_stack(notes.sp, loads, size)
            return notes
    except (OSError, struct.error):
        return None


Load = tuple[int, int, int, int, int]  # a PT_LOAD: vaddr, memsz, file offset, filesz, flags
_PF_W, _PF_R = 2, 4


def _holds_stack(sp: int | None, loads: list[Load], size: int) -> bool:
    """Whether the file holds the crashing thread's stack: the whole segment at stack pointer
    `sp` (its callers' frames lie above it, later in the file), or for an `sp` in a guard
    page (a thread's stack overflow: no access, no bytes) the segment just above it. An `sp`
    in no segment (an overflow past the main stack's guard gap) or none at all: whether the
    file holds the process's writable memory at all (a notes-only core holds only the vDSO's
    pages, none writable) and every segment to its end."""
    def whole(load: Load) -> bool:
        return load[3] > 0 and load[2] + load[3] <= size

    for va, mem, off, fs, flags in loads:
        if sp is not None and va <= sp < va + mem:
            if flags & _PF_R:
                return whole((va, mem, off, fs, flags))
            above = [ld for ld in loads if ld[0] == va + mem]
            return bool(above) and whole(above[0])
    return any(ld[4] & _PF_W and ld[3] > 0 for ld in loads) and \
        size >= max((ld[2] + ld[3] for ld in loads), default=0)


def _parse_notes(data: bytes, whole: bool = True, machine: int = 0) -> CoreNotes | None:
    pid: int | None = None
    tids: list[int] = []
    sig, p = 0, 0
    extra: dict[str, Any] = {}
    while p + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, p)
        desc = p + 12 + ((namesz + 3) & ~3)
        if desc + descsz > len(data):
            break  # cut short (a core still being written)
        if ntype == _NT_PRSTATUS and descsz >= 36:
            if not tids:
                sig = struct.unpack_from("<h", data, desc + 12)[0]  # pr_cursig
                for name, slot in _REG_SLOTS.get(machine, {}).items():
                    if descsz >= _PR_REG + 8 * (slot + 1):
                        extra[name] = struct.unpack_from("<Q", data, desc + _PR_REG + 8 * slot)[0]
            tids.append(struct.unpack_from("<i", data, desc + 32)[0])  # pr_pid
        elif ntype == _NT_SIGINFO and descsz >= 24 and "si_code" not in extra:
            signo, _, code = struct.unpack_from("<iii", data, desc)  # the dumping thread's
            extra["si_code"] = code
            if signo in _ADDR_SIGNALS and code > 0:
                extra["si_addr"] = struct.unpack_from("<Q", data, desc + 16)[0]
        elif ntype == _NT_PRPSINFO and descsz >= 28:
            pid = struct.unpack_from("<i", data, desc + 24)[0]  # pr_pid
            extra["uid"] = struct.unpack_from("<I", data, desc + 16)[0]  # pr_uid
            if descsz >= 136 and desc + 136 <= len(data):  # pr_pgrp, pr_sid, fname, psargs
                extra["pgrp"], extra["sid"] = struct.unpack_from("<ii", data, desc + 32)
                extra["name"] = _cstr(data[desc + 40:desc + 56])
                extra["args"] = _cstr(data[desc + 56:desc + 136]).strip()
        elif ntype == _NT_FILE and descsz >= 16:
            extra["maps"] = _mappings(data[desc:desc + descsz])
            extra["files"] = list(dict.fromkeys(m[3] for m in extra["maps"]))
        p = desc + ((descsz + 3) & ~3)
    if not tids:
        return None
    return CoreNotes(pid if pid is not None else tids[0], tids[0], sig, tids,
                     whole=whole and pid is not None, **extra)


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


_ADDR_SIGNALS: frozenset[int] = frozenset({4, 7, 8, 11})  # SIGILL, SIGBUS, SIGFPE, SIGSEGV


def _mappings(desc: bytes) -> list[tuple[int, int, int, str]]:
    """NT_FILE: count, page size, count x (start, end, offset in pages), then count names:
    (start, end, offset in bytes, name) of each."""
    count, page = struct.unpack_from("<QQ", desc, 0)
    if 16 + 24 * count > len(desc):
        return []
    names = desc[16 + 24 * count:].split(b"\0")[:count]
    out = []
    for i, name in enumerate(names):
        start, end, pgoff = struct.unpack_from("<QQQ", desc, 16 + 24 * i)
        if name:
            out.append((start, end, pgoff * page, name.decode(errors="replace")))
    return out


# ---- notes-only cores ---------------------------------------------------------------
NOTES_CORE_BYTES: int = 64 << 20  # the core size limit of a process the evidence budget reads
#   no stacks of: with coredump_filter 0 its core is headers, notes and the vDSO (measured: 13
#   KiB of program headers and 29 KiB of notes for a Python + IREE local-task process here),
#   enough for its fault site (`fault_site`); the limit only bounds a filter that did not hold
_FILTER_NONE: str = "0x0"  # /proc/PID/coredump_filter: no memory mapping dumped
_NOTES_MIN_BYTES: int = 1 << 20  # a hard core limit below this may cut a notes-only core's notes


def notes_only(pid: int) -> bool:
    """Makes live process `pid` (and the processes it starts) dump a core of its headers and
    notes only: its coredump_filter to 0 (no memory mapping) and its soft core limit to
    NOTES_CORE_BYTES. False, and nothing changed, where the filter cannot be set."""
    try:
        Path(f"/proc/{pid}/coredump_filter").write_text(_FILTER_NONE)
        _, hard = resource.prlimit(pid, resource.RLIMIT_CORE)
        limit = NOTES_CORE_BYTES if hard == resource.RLIM_INFINITY else \
            min(hard, NOTES_CORE_BYTES)
        if limit < _NOTES_MIN_BYTES:
            raise ValueError("hard core limit below a notes-only core")
        resource.prlimit(pid, resource.RLIMIT_CORE, (limit, hard))
        return True
    except (OSError, ValueError):
        set_filter(pid, default_filter())
        return False


@functools.cache
def default_filter() -> str:
    """The coredump_filter processes are given: this process's own at its first call (they
    inherit it), or the kernel's default 0x33 where that is 0 (a soak run as another soak's
    notes-only command) or unreadable."""
    try:  # (printed as 8 hex digits without 0x: written back as is, it would read as octal)
        value = int(Path("/proc/self/coredump_filter").read_text(), 16)
    except (OSError, ValueError):
        value = 0
    return f"0x{value or 0x33:x}"


def set_filter(pid: int, value: str) -> bool:
    """Writes live process `pid`'s coredump_filter; whether it could."""
    try:
        Path(f"/proc/{pid}/coredump_filter").write_text(value)
        return True
    except OSError:
        return False


def fault_site(notes: CoreNotes | None) -> dict[str, Any] | None:
    """The fault site of a core's notes (`CoreNotes.fault_site`) with its function named by
    the module's own symbol table where it has one (`elfsyms`), as failure facts; None when
    the signal was sent, not raised by a fault, or the address is in no mapped file."""
    site = notes.fault_site() if notes is not None else None
    if site is None:
        return None
    if site.deleted:
        return site.as_dict()
    return dataclasses.replace(site, function=elfsyms.function_at(site.module, site.offset)
                               ).as_dict()


# ---- taking a core out of a shared folder ----------------------------------------------
_CLAIMING: str = ".claiming-"  # a core being claimed: renamed, its notes not read yet
_UNCLAIMED: str = "unclaimed"  # one whose notes never came whole and could not go back
CLAIM_WAIT_S: float = 1.0  # another reader's claim in flight (two renames and a notes read:
#   milliseconds; a loaded box may stall it for a while)


def claim(path: Path, dest: Path) -> tuple[Path, CoreNotes] | None:
    """Takes core `path` out of a folder that several processes dump into: renamed (atomic,
    same filesystem) into `dest`, its notes read *after* the move, then named by its own
    pid, `dest/core.PID`. What was moved is what is read: where core_pattern names no pid the
    kernel unlinks `core` and writes another process's in its place at any moment, so notes
    read before a move prove nothing (issue 36). None when `path` is gone, not a core (yet),
    or on another filesystem (left where it is)."""
    if read_core_notes(path) is None:
        return None
    tmp = dest / f"{_CLAIMING}{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
    try:
        dest.mkdir(parents=True, exist_ok=True)
        os.rename(path, tmp)
    except OSError:
        return None
    notes = _whole_notes(tmp)
    if notes is None:  # not a core, or one whose notes are still not written: back it goes
        try:
            os.link(tmp, path)  # (never over a newer one)
        except OSError:  # a newer core is there: out of the way of claims in flight (the
            _rename(tmp, dest / f"{_UNCLAIMED}{tmp.name}")  # run's end sweeps it)
        else:
            _unlink(tmp)
        return None
    target = dest / f"core.{notes.pid}"
    try:
        os.rename(tmp, target)
    except OSError:
        return None
    try:  # the kernel writes cores 0600: evidence must be as readable as the rest of the run
        os.chmod(target, new_file_mode())
    except OSError:
        pass
    return target, notes


def _whole_notes(path: Path) -> CoreNotes | None:
    """The notes of a core being claimed once the kernel has written them all: a core still
    being written (another copy's process dumping now) holds only part of them, the
    crashing thread's NT_PRSTATUS before the NT_PRPSINFO that names the process; named by
    that thread's id it would never be found by its process's reader (issue 36). The kernel
    writes on into the file moved (it holds it open), so this waits, bounded."""
    deadline = time.monotonic() + CLAIM_WAIT_S
    while True:
        notes = read_core_notes(path)
        if notes is not None and notes.whole or time.monotonic() >= deadline:
            return notes if notes is not None and notes.whole else None
        time.sleep(0.02)


def _rename(src: Path, dst: Path) -> None:
    try:
        os.rename(src, dst)
    except OSError:
        pass


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def claimed(pid: int, dest: Path, wait_s: float = 0.0) -> tuple[Path, CoreNotes] | None:
    """The core of `pid` that a claim (`claim`, by any reader) put into `dest`; `wait_s`:
    how long to wait for claims in flight to finish."""
    deadline = time.monotonic() + wait_s
    while wait_s > 0 and time.monotonic() < deadline and \
            any(p.name.startswith(_CLAIMING) for p in listdir(dest)):
        time.sleep(0.05)
    path = dest / f"core.{pid}"
    notes = read_core_notes(path)
    return (path, notes) if notes is not None and notes.pid == pid else None


def listdir(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def pattern_collides(pattern: str, uses_pid: bool) -> bool:
    """Whether core_pattern makes processes that share a working directory write one file
    (`core`, no %p, core_uses_pid off): their cores replace each other. Pure."""
    return not pattern.startswith("|") and "%p" not in pattern and not uses_pid


def dumped_since(dest: Path, pid: int, since_wall: float | None) -> list[int]:
    """Pids of other processes whose claimed cores in `dest` were written after
    `since_wall`."""
    if since_wall is None:
        return []
    out = []
    for p in listdir(dest):
        head, _, tail = p.name.partition(".")
        if head == "core" and tail.isdigit() and int(tail) != pid and _mtime(p) >= since_wall:
            out.append(int(tail))
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
