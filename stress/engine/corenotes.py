"""A core file's ELF notes, read without a debugger: whose process it is (NT_PRPSINFO's pid,
session, group, name), which thread took the signal and which signal (NT_PRSTATUS), and the files
it had mapped (NT_FILE). Cheap (the notes come first in the file): read before a core is
trusted as a process's own (issue 36: in a shared folder, `core` is someone's until proven)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
                    return _parse_notes(f.read(min(p_filesz, 64 << 20)))
    except (OSError, struct.error):
        return None
    return None


def _parse_notes(data: bytes) -> CoreNotes | None:
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
    return CoreNotes(pid if pid is not None else tids[0], tids[0], sig, tids, **extra)


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def _mapped_files(desc: bytes) -> list[str]:
    """NT_FILE: count, page size, count x (start, end, offset), then count names; each
    file once, in the order of its first mapping."""
    count = struct.unpack_from("<Q", desc, 0)[0]
    names = desc[16 + 24 * count:].split(b"\0")[:count]
    return list(dict.fromkeys(n.decode(errors="replace") for n in names if n))
