"""Processes and cores for tests that need no real crash: pids of reaped processes, fake ELF
cores whose notes name their process and session as the kernel's do, and worker handles of a
process that already ended."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from stress.engine.workermanage import WorkerHandle


def fake_core(path: Path, pid: int, tids: list[int], signum: int, *, sid: int = 0,
              name: str = "", args: str = "", files: tuple[str, ...] = (),
              uid: int | None = None) -> Path:
    """A minimal ELF64 core: a header, one PT_NOTE, NT_PRSTATUS per thread (the crashing one
    first, as the kernel writes it), NT_PRPSINFO (pid, process group and session `sid`,
    comm `name`, `args`) and, with `files`, NT_FILE (each mapped once), laid out as on
    x86-64."""

    def note(ntype: int, desc: bytes) -> bytes:
        name = b"CORE\0\0\0\0"
        return struct.pack("<III", 5, len(desc), ntype) + name + desc + b"\0" * (-len(desc) % 4)

    notes = b""
    for tid in tids:
        prstatus = bytearray(336)
        struct.pack_into("<h", prstatus, 12, signum)
        struct.pack_into("<i", prstatus, 32, tid)
        notes += note(1, bytes(prstatus))
    prpsinfo = bytearray(136)
    struct.pack_into("<iiii", prpsinfo, 24, pid, sid, sid, sid)  # pid, ppid, pgrp, sid
    struct.pack_into("<I", prpsinfo, 16, os.getuid() if uid is None else uid)  # pr_uid
    prpsinfo[40:40 + len(name[:15])] = name[:15].encode()
    prpsinfo[56:56 + len(args[:79])] = args[:79].encode()
    notes += note(3, bytes(prpsinfo))
    if files:
        table = struct.pack("<QQ", len(files), 4096) + b"".join(
            struct.pack("<QQQ", 0x1000 * (i + 1), 0x1000 * (i + 2), 0)
            for i in range(len(files)))
        notes += note(0x46494C45, table + b"".join(f.encode() + b"\0" for f in files))
    ehdr = bytearray(64)
    ehdr[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<HH", ehdr, 16, 4, 62)  # ET_CORE, x86-64
    struct.pack_into("<Q", ehdr, 0x20, 64)  # e_phoff
    struct.pack_into("<HHH", ehdr, 0x36, 56, 1, 0)  # e_phentsize, e_phnum
    phdr = struct.pack("<IIQQQQQQ", 4, 0, 64 + 56, 0, 0, len(notes), 0, 4)
    path.write_bytes(bytes(ehdr) + phdr + notes)
    return path


def dead_pids(n: int) -> list[int]:
    """Pids of processes that ran and were reaped (dead, not yet reused)."""
    out = []
    for _ in range(n):
        p = subprocess.Popen(["true"])
        p.wait()
        out.append(p.pid)
    return out


def ended_handle(tmp_path: Path, journal: Path, ephemeral: bool = False) -> WorkerHandle:
    """A handle of a process that already exited 0, its message pipe's write end closed;
    `journal` is where its journal is (or would be)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    return WorkerHandle(0, 0, proc, read_fd, journal, tmp_path / "o", tmp_path / "e", ephemeral)
