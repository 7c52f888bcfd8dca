"""The function at an offset of an ELF file, from its own symbol tables (.symtab, else .dynsym),
read without a debugger: what names a fault site (`corenotes.FaultSite`) when its crash's stacks
are not read. Pure Python over the file's section headers, a table cached per file (a crash
storm names thousands of sites in a few libraries); a stripped library with no symbol over that
offset gives None, never the nearest name below it, which would be another function's."""

from __future__ import annotations

import bisect
import functools
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

_SHT_SYMTAB, _SHT_DYNSYM, _PT_LOAD, _STT_FUNC = 2, 11, 1, 2
_NESTED: int = 8  # starts below an offset looked at for one whose range holds it
_MAX_TABLE_BYTES: int = 64 << 20  # a symbol table past this is not read (a debug build's
#   .symtab is tens of MiB; read on the soak's own thread as a crash is recorded)


@dataclass(frozen=True)
class _Table:
    loads: tuple[tuple[int, int, int], ...]  # (file offset, vaddr, size) of each PT_LOAD
    starts: tuple[int, ...]  # function start addresses, sorted
    ends: tuple[int, ...]
    names: tuple[str, ...]


def function_at(path: str, offset: int) -> str | None:
    """The function whose code holds file offset `offset` of ELF file `path`; None when the
    file is gone, not a 64-bit little-endian ELF, or names no function there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    table = _table(path, st.st_size, st.st_mtime_ns)
    if table is None:
        return None
    vaddr = next((offset - off + va for off, va, size in table.loads
                  if off <= offset < off + size), None)
    if vaddr is None:
        return None
    i = bisect.bisect_right(table.starts, vaddr) - 1
    for j in range(i, max(i - _NESTED, -1), -1):  # the nearest start below that holds it (a
        if vaddr < table.ends[j]:  # function nested in another's range is found first)
            return table.names[j]
    return None


@functools.lru_cache(maxsize=16)
def _table(path: str, size: int, mtime_ns: int) -> _Table | None:
    """`path`'s loads and functions (`size` and `mtime_ns` key the cache: a rebuilt library
    is read again)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
            loads = []
            for i in range(phnum):
                p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                    "<IIQQQQ", ph, i * phentsize)
                if p_type == _PT_LOAD:
                    loads.append((p_offset, p_vaddr, p_filesz))
            f.seek(shoff)
            sh = f.read(shentsize * shnum)
            sections = [struct.unpack_from("<IIQQQQIIQQ", sh, i * shentsize)
                        for i in range(shnum)] if shentsize >= 64 else []
            funcs: dict[int, tuple[int, str]] = {}
            for kind in (_SHT_SYMTAB, _SHT_DYNSYM):  # the full table first, when not stripped
                for sec in sections:
                    if sec[1] == kind and 0 < sec[5] <= _MAX_TABLE_BYTES and \
                            sec[6] < len(sections):
                        _functions(f, sec, sections[sec[6]], funcs)
                if funcs:
                    break
    except (OSError, struct.error):
        return None
    items = sorted((start, start + size, name) for start, (size, name) in funcs.items())
    return _Table(tuple(loads), tuple(a for a, _, _ in items), tuple(b for _, b, _ in items),
                  tuple(n for _, _, n in items))


def _functions(f: BinaryIO, sec: tuple[int, ...], strsec: tuple[int, ...],
               out: dict[int, tuple[int, str]]) -> None:
    """The named functions of symbol table `sec` (a section header's fields) with a size,
    by start address (the first name of an address kept: aliases share one)."""
    f.seek(sec[4])
    data = f.read(sec[5])
    f.seek(strsec[4])
    strings = f.read(min(strsec[5], _MAX_TABLE_BYTES))
    for st_name, st_info, _, shndx, value, size in struct.iter_unpack("<IBBHQQ",
                                                                       data[:len(data) // 24 * 24]):
        if st_info & 0xF != _STT_FUNC or not size or not value or shndx == 0 or \
                value in out:
            continue
        end = strings.find(b"\0", st_name)
        name = strings[st_name:end if end >= 0 else None].decode(errors="replace")
        if name:
            out[value] = (size, name)


