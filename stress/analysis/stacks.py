"""Stack dumps, parsed: py-spy `dump --native`, gdb `thread apply all bt` (on an attached
process or on a core file) and Python's faulthandler. The evidence keeps the raw text; this
module turns it into threads of frames so that signatures can pick the failing thread's
meaningful frames (signatures.py) and reports can show them.

A failure folder's stacks.txt starts with `# <tool>` (the tool that wrote it); older folders have
no header and the tool is recognised from the text. stderr.tail holds faulthandler's output.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path

STACKS_FILE = "stacks.txt"
STDERR_FILE = "stderr.tail"
_MAX_TEXT: int = 4_000_000  # bytes read from one dump: gdb on 200 threads is ~1 MB


class StackTool(enum.Enum):
    PYSPY = "py-spy"
    GDB = "gdb"  # attached to a live process
    GDB_CORE = "gdb-core"  # on a core file: the crashing thread is known
    FAULTHANDLER = "faulthandler"  # Python frames only
    UNKNOWN = "unknown"

    def describe(self) -> str:
        return {StackTool.PYSPY: "py-spy dump --native", StackTool.GDB: "gdb (attached)",
                StackTool.GDB_CORE: "gdb on the core file",
                StackTool.FAULTHANDLER: "faulthandler (Python frames only)",
                StackTool.UNKNOWN: "unrecognised stack text"}[self]


_SO_VERSION = re.compile(r"(\.so)(\.\d+)+$")
_PY_ABI_TAG = re.compile(r"\.(cpython|pypy)\d*[-\w]*(?=\.so$)|\.abi3(?=\.so$)")
_NAME_VERSION = re.compile(r"-\d+(\.\d+)+(?=\.so$)")  # libfoo-1.2.3.so


def normalize_module(path: str) -> str:
    """A library path as signatures name it: base name without version suffixes, ABI tags or
    address: `/usr/lib/libcuda.so.580.159.04` -> `libcuda.so`, `libfault.so.1` -> `libfault.so`,
    `_runtime.cpython-311-x86_64-linux-gnu.so` -> `_runtime.so`."""
    name = path.strip().rsplit("/", 1)[-1]
    name = re.sub(r"\+0x[0-9a-fA-F]+$", "", name)
    name = _SO_VERSION.sub(r"\1", name)
    name = _PY_ABI_TAG.sub("", name)
    return _NAME_VERSION.sub("", name)


@dataclass(frozen=True)
class Frame:
    """One frame. `function` is None when the tool had no symbol (an address only); `module`
    the normalised library (native) or source file name (Python); `python` for interpreted
    frames."""

    function: str | None
    module: str = ""
    source: str = ""  # file:line when the tool knew it (display only)
    python: bool = False

    def text(self) -> str:
        """What siglists rules match: `function [module]`."""
        return f"{self.function or '??'} [{self.module}]"

    def key(self) -> str:
        """The frame as it enters a signature key: stable across tools and builds of one
        binary (no address, no line, no version)."""
        if self.function is None:
            return f"?? [{self.module}]"
        return f"{self.function} [{self.module}]" if self.python else self.function

    def display(self) -> str:
        where = self.module or self.source
        return f"{self.function or '??'} ({where})" if where else (self.function or "??")


@dataclass
class ThreadStack:
    tid: int | None  # native (OS) thread id
    ident: int | None = None  # Python thread ident / pthread_t (faulthandler, gdb)
    name: str = ""
    state: str = ""  # py-spy's idle/active, when given
    frames: list[Frame] = field(default_factory=list)
    current: bool = False  # the crashing thread (core file) / faulthandler's current thread


@dataclass
class StackDump:
    tool: StackTool
    threads: list[ThreadStack] = field(default_factory=list)
    signal: str | None = None  # core files: the signal that ended the process

    @property
    def crashed(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.current), None)

    def thread(self, tid: int | None) -> ThreadStack | None:
        if tid is None:
            return None
        return next((t for t in self.threads if t.tid == tid), None)

    def failing(self, native_tid: int | None, crashed_tid: int | None = None,
                crash: bool = True) -> ThreadStack | None:
        """The thread that failed. For a crash, the crashing thread when known (`crashed_tid`,
        or the one the dump marks: a core file's current thread, faulthandler's current
        thread); otherwise (and for hangs, where faulthandler's "current" thread is merely
        the one that handled SIGUSR1) the one with the journal's native tid."""
        if crash:
            hit = self.thread(crashed_tid)
            if hit is not None:
                return hit
            if self.crashed is not None:
                return self.crashed
        return self.thread(native_tid)


# --- py-spy ----------------------------------------------------------------------------------

_PYSPY_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \(([^)]*)\)(?::\s*"(.*)")?')
_PYSPY_FRAME = re.compile(r"^\s{2,}(\S.*?)(?: \(([^()]*)\))?\s*$")


def _source_or_module(where: str) -> tuple[str, str, bool]:
    """py-spy's parenthesis: `file.py:12` (Python), `file.c:76` (native with debug info) or a
    library path (native without)."""
    m = re.match(r"^(.*):(\d+)$", where)
    if m:
        base = m.group(1).rsplit("/", 1)[-1]
        return "", f"{base}:{m.group(2)}", base.endswith(".py")
    return normalize_module(where), "", False


def parse_pyspy(text: str) -> StackDump:
    dump = StackDump(StackTool.PYSPY)
    cur: ThreadStack | None = None
    for line in text.splitlines():
        m = _PYSPY_THREAD.match(line)
        if m:
            raw = m.group(1)
            hexid = raw.lower().startswith("0x")
            cur = ThreadStack(None if hexid else int(raw), int(raw, 16) if hexid else None,
                              m.group(3) or "", m.group(2))
            dump.threads.append(cur)
            continue
        if cur is None or not line.startswith("  "):
            continue
        f = _PYSPY_FRAME.match(line)
        if not f:
            continue
        name, where = f.group(1), f.group(2) or ""
        module, source, python = _source_or_module(where) if where else ("", "", False)
        if python:
            module = source.rsplit(":", 1)[0]
        func = None if re.fullmatch(r"0x[0-9a-fA-F]+", name) else name
        cur.frames.append(Frame(func, module, source, python))
    return dump


# --- gdb -------------------------------------------------------------------------------------

_GDB_THREAD = re.compile(r"^Thread (\d+) \((?:Thread (0x[0-9a-f]+) )?\(?(?:LWP|process) (\d+)\)?"
                         r"\)?(?: \"(.*)\")?")
_GDB_CURRENT = re.compile(r"^\[Current thread is \d+ \(.*?(?:LWP|process) (\d+)")
_GDB_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(.*)$")
_GDB_SIGNAL = re.compile(r"^Program terminated with signal (SIG\w+)")


def _gdb_frame(body: str) -> Frame:
    if body.startswith("<signal handler called>"):
        return Frame("<signal handler called>")
    lib = ""
    m = re.search(r" from (\S+)$", body)
    if m:
        lib = normalize_module(m.group(1))
        body = body[:m.start()]
    source = ""
    m = re.search(r" at (\S+):(\d+)$", body)
    if m:
        source = f"{m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}"
        body = body[:m.start()]
    i = body.find(" (")
    name = (body[:i] if i >= 0 else body).strip()
    return Frame(None if name in ("??", "") else name, lib, source)


def parse_gdb(text: str) -> StackDump:
    core = "Core was generated by" in text or "Program terminated with signal" in text
    dump = StackDump(StackTool.GDB_CORE if core else StackTool.GDB)
    current: int | None = None
    cur: ThreadStack | None = None
    for line in text.splitlines():
        m = _GDB_SIGNAL.match(line)
        if m:
            dump.signal = m.group(1)
        m = _GDB_CURRENT.match(line)
        if m:
            current = int(m.group(1))
            continue
        m = _GDB_THREAD.match(line)
        if m:
            cur = ThreadStack(int(m.group(3)), int(m.group(2), 16) if m.group(2) else None,
                              m.group(4) or "")
            dump.threads.append(cur)
            continue
        if cur is not None:
            f = _GDB_FRAME.match(line)
            if f:
                cur.frames.append(_gdb_frame(f.group(1).strip()))
    if core and current is not None:
        for t in dump.threads:
            t.current = t.tid == current
    return dump


# --- faulthandler ----------------------------------------------------------------------------

_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_FH_FRAME = re.compile(r'^\s+File "([^"]+)", line \d+ in (\S+)')
_FH_SIGNAL = re.compile(r"^Fatal Python error: (\w[\w ]*)")
_FH_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
               "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


def parse_faulthandler(text: str) -> StackDump:
    dump = StackDump(StackTool.FAULTHANDLER)
    cur: ThreadStack | None = None
    for line in text.splitlines():
        m = _FH_SIGNAL.match(line)
        if m:
            dump.signal = _FH_SIGNALS.get(m.group(1).strip())
        m = _FH_THREAD.match(line)
        if m:
            cur = ThreadStack(None, int(m.group(2), 16), current=m.group(1).startswith("Cur"))
            dump.threads.append(cur)
            continue
        f = _FH_FRAME.match(line)
        if f and cur is not None:
            path = f.group(1)
            cur.frames.append(Frame(f.group(2), path.rsplit("/", 1)[-1], path, python=True))
    return dump


# --- dispatch --------------------------------------------------------------------------------

def tool_of(header: str) -> StackTool | None:
    """The tool named on a stacks.txt header line (`# py-spy dump --native`, `# gdb attach`,
    `# core+gdb`, `# core+py-spy`, `# faulthandler`)."""
    h = header.lstrip("#").strip().lower()
    if "py-spy" in h:
        return StackTool.PYSPY
    if "gdb" in h:
        return StackTool.GDB_CORE if "core" in h else StackTool.GDB
    if "faulthandler" in h:
        return StackTool.FAULTHANDLER
    return None


_HEADER_CRASHED = re.compile(r"^# thread (\d+) took (SIG\w+)?")


def parse(text: str) -> StackDump:
    """Any supported dump; the `# <tool>` header lines if present (the engine's: tool, then
    optionally `# thread N took SIGSEGV; ...` and `# note: ...`), else recognised from the
    text."""
    lines = text.split("\n")
    header = []
    while lines and lines[0].startswith("# "):
        header.append(lines.pop(0))
    body = "\n".join(lines)
    tool = tool_of(header[0]) if header else None
    crashed: int | None = None
    signal: str | None = None
    for h in header[1:]:
        m = _HEADER_CRASHED.match(h)
        if m:
            crashed, signal = int(m.group(1)), m.group(2)
    if tool is None:
        if re.search(r"^Thread \d+ \(.*(LWP|process) \d+", body, re.M) or \
                re.search(r"^#\d+\s", body, re.M):
            tool = StackTool.GDB
        elif re.search(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call", body, re.M):
            tool = StackTool.FAULTHANDLER
        elif _PYSPY_THREAD.search(body) or body.startswith("Process "):
            tool = StackTool.PYSPY
        else:
            return StackDump(StackTool.UNKNOWN)
    if tool in (StackTool.GDB, StackTool.GDB_CORE):
        dump = parse_gdb(body)
        if tool is StackTool.GDB_CORE:
            dump.tool = StackTool.GDB_CORE
    elif tool is StackTool.FAULTHANDLER:
        dump = parse_faulthandler(body)
    else:
        dump = parse_pyspy(body)
    if crashed is not None and dump.thread(crashed) is not None:
        for t in dump.threads:
            t.current = t.tid == crashed
        dump.signal = dump.signal or signal
    return dump


def _read(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(_MAX_TEXT).decode(errors="replace")
    except OSError:
        return ""


def read_folder(folder: str | Path | None) -> list[StackDump]:
    """The dumps in a failure folder, best first: stacks.txt (native), then stderr.tail
    (faulthandler). Missing or unreadable files give fewer dumps, never an error."""
    if not folder:
        return []
    base = Path(folder)
    dumps = []
    text = _read(base / STACKS_FILE)
    if text.strip():
        d = parse(text)
        if d.threads:
            dumps.append(d)
    err = _read(base / STDERR_FILE)
    if "Current thread 0x" in err or "Thread 0x" in err:
        d = parse_faulthandler(err[err.find("Fatal Python error") if "Fatal Python error" in err
                                    else 0:])
        if d.threads:
            dumps.append(d)
    return dumps
