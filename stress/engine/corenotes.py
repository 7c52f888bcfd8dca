"""A core file's ELF notes, read without a debugger: whose process it is (NT_PRPSINFO's pid,
session, group, name), which thread took the signal and which signal (NT_PRSTATUS), and the files
it had mapped (NT_FILE). Cheap (the notes come first in the file): read before a core is
trusted as a process's own (issue 36: in a shared folder, `core` is someone's until proven),
and the move that makes a core in a shared folder one process's own (`claim`)."""

from __future__ import annotations

import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    sid: int | None = None
    pgrp: int | None = None
    name: str = ""
    args: str = ""
    files: list[str] = field(default_factory=list)
    whole: bool = True  # the notes segment read in full, NT_PRPSINFO (the pid) among it: a
    #   core still being written may hold only its crashing thread's NT_PRSTATUS so far

    def executable(self) -> str | None:
        """The mapped file whose name the process bears (its comm is the executable's
        basename cut to 15 characters), else the first one mapped (the kernel lists mappings
        by address; an executable's own lie below its libraries')."""
        named = [f for f in self.files if self.name and
                 os.path.basename(f)[:15] == self.name[:15]]
        return named[0] if named else self.files[0] if self.files else None


_NT_PRSTATUS, _NT_PRPSINFO, _NT_FILE = 1, 3, 0x46494C45
_PT_NOTE = 4


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
            phoff = struct.unpack_from("<Q", head, 0x20)[0]
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", table,
                                                                         i * phentsize)
                if p_type == _PT_NOTE:
                    f.seek(p_offset)
                    want = min(p_filesz, 64 << 20)
                    data = f.read(want)
                    return _parse_notes(data, len(data) == want)
    except (OSError, struct.error):
        return None
    return None


def _parse_notes(data: bytes, whole: bool = True) -> CoreNotes | None:
    pid: int | None = None
    tids: list[int] = []
    sig, p = 0, 0
    extra: dict[str, Any] = {}
    while p + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, p)
        desc = p + 12 + ((namesz + 3) & ~3)
        if ntype == _NT_PRSTATUS and descsz >= 36:
            if not tids:
                sig = struct.unpack_from("<h", data, desc + 12)[0]  # pr_cursig
            tids.append(struct.unpack_from("<i", data, desc + 32)[0])  # pr_pid
        elif ntype == _NT_PRPSINFO and descsz >= 28:
            pid = struct.unpack_from("<i", data, desc + 24)[0]  # pr_pid
            if descsz >= 136 and desc + 136 <= len(data):  # pr_pgrp, pr_sid, fname, psargs
                extra["pgrp"], extra["sid"] = struct.unpack_from("<ii", data, desc + 32)
                extra["name"] = _cstr(data[desc + 40:desc + 56])
                extra["args"] = _cstr(data[desc + 56:desc + 136]).strip()
        elif ntype == _NT_FILE and descsz >= 16:
            extra["files"] = _mapped_files(data[desc:desc + descsz])
        p = desc + ((descsz + 3) & ~3)
    if not tids:
        return None
    return CoreNotes(pid if pid is not None else tids[0], tids[0], sig, tids,
                     whole=whole and pid is not None, **extra)


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def _mapped_files(desc: bytes) -> list[str]:
    """NT_FILE: count, page size, count x (start, end, offset), then count names; each
    file once, in the order of its first mapping."""
    count = struct.unpack_from("<Q", desc, 0)[0]
    names = desc[16 + 24 * count:].split(b"\0")[:count]
    return list(dict.fromkeys(n.decode(errors="replace") for n in names if n))


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
