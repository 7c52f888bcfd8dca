"""Call-stack text as the tools print it, parsed: one `ThreadStack` of `Frame`s per thread,
from gdb's `thread apply all bt` (attached or on a core file), `py-spy dump` (live, `--native`,
`--nonblocking` or `--core`), `pystack core` and Python's faulthandler; also the kernel's
fault lines. Pure functions of text, shared by the engine (live and post-mortem stacks:
`engine.callstacks`) and analysis (signatures from a failure folder: `analysis.stacks`), so
one regex per format decides what a frame is.

A stacks.txt the engine writes starts with `# <tool>` lines (`parse` reads them); older
folders have no header and the tool is recognised from the text.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection
from dataclasses import dataclass, field


class StackTool(enum.Enum):
    """Which text format a dump was read as (analysis names its frames' source with it)."""

    PYSPY = "py-spy"
    GDB = "gdb"  # attached to a live process
    GDB_CORE = "gdb-core"  # on a core file: the crashing thread is known
    PYSTACK = "pystack"  # on a core file (`parse` does not dispatch to it: see tool_of)
    FAULTHANDLER = "faulthandler"  # Python frames only
    UNKNOWN = "unknown"

    def describe(self) -> str:
        return {StackTool.PYSPY: "py-spy dump --native", StackTool.GDB: "gdb (attached)",
                StackTool.GDB_CORE: "gdb on the core file",
                StackTool.PYSTACK: "pystack on the core file",
                StackTool.FAULTHANDLER: "faulthandler (Python frames only)",
                StackTool.UNKNOWN: "unrecognised stack text"}[self]


_SO_VERSION = re.compile(r"(\.so)(\.\d+)+$")
_PY_ABI_TAG = re.compile(r"\.(cpython|pypy)\d*[-\w]*(?=\.so$)|\.abi3(?=\.so$)")
_NAME_VERSION = re.compile(r"-\d+(\.\d+)+(?=\.so$)")  # libfoo-1.2.3.so
_HEX = re.compile(r"0x[0-9a-fA-F]+")


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
    """One frame. `function` is None when the tool had no symbol; `address` is what it printed
    instead when that was an address (py-spy's `0x7f...`); `module` the normalised library
    (native) or source file name (Python); `python` for interpreted frames."""

    function: str | None
    module: str = ""
    source: str = ""  # file:line when the tool knew it (display only)
    python: bool = False
    address: str = ""  # display only: never in a signature key

    def text(self) -> str:
        """What siglists rules match: `function [module]`."""
        return f"{self.function or '??'} [{self.module}]"

    def key(self) -> str:
        """The frame as it enters a signature key: stable across tools and builds of one
        binary (no address, no line, no version)."""
        if self.function is None:
            return f"?? [{self.module}]"
        return f"{self.function} [{self.module}]" if self.python else self.function

    def label(self) -> str:
        """The name alone, as the engine writes frames into failure.json, threads.json and
        the stacks.txt header: the function, else the address, else `??`."""
        return self.function or self.address or "??"

    def display(self) -> str:
        where = self.module or self.source
        return f"{self.function or '??'} ({where})" if where else (self.function or "??")


@dataclass
class ThreadStack:
    """One thread's frames, innermost first (gdb's `<signal handler called>` is a frame)."""

    tid: int | None  # native (OS) thread id (LWP) when the tool gives it
    ident: int | None = None  # Python thread ident / pthread_t (faulthandler, gdb, py-spy)
    name: str = ""
    state: str = ""  # py-spy's idle/active, when given
    frames: list[Frame] = field(default_factory=list)
    current: bool = False  # the crashing thread (core file) / faulthandler's current thread

    def labels(self) -> list[str]:
        return [f.label() for f in self.frames]


@dataclass
class StackDump:
    """Every thread of one tool's output. `signal` is the signal name a core file or
    faulthandler reports; `current_tid` gdb's current thread (on a core: the one that took
    the signal), whether or not the text says it is a core."""

    tool: StackTool
    threads: list[ThreadStack] = field(default_factory=list)
    signal: str | None = None  # core files: the signal that ended the process
    current_tid: int | None = None

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
# `Thread 5315 (idle): "MainThread"` live; `Thread 5113: "crasher"` from --core (no state).
_PYSPY_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+)(?: \(([^)]*)\))?(?::\s*"(.*)")?')
_PYSPY_FRAME = re.compile(r"^\s{2,}(\S.*?)(?: \(([^()]*)\))?\s*$")


def _pyspy_thread(line: str) -> re.Match[str] | None:
    m = _PYSPY_THREAD.match(line)
    return m if m and (m.group(2) is not None or m.group(3) is not None) else None


def _source_or_module(where: str) -> tuple[str, str, bool]:
    """py-spy's parenthesis: `file.py:12` (Python), `file.c:76` (native with debug info) or a
    library path (native without)."""
    m = re.match(r"^(.*):(\d+)$", where)
    if m:
        base = m.group(1).rsplit("/", 1)[-1]
        return "", f"{base}:{m.group(2)}", base.endswith(".py")
    return normalize_module(where), "", False


def parse_pyspy(text: str) -> StackDump:
    """Threads of `py-spy dump`: a thread line, then indented `function (file:line)` or
    `function (library)` frames. A hex thread id (no native id known) gives tid None."""
    dump = StackDump(StackTool.PYSPY)
    cur: ThreadStack | None = None
    for line in text.splitlines():
        m = _pyspy_thread(line)
        if m:
            raw = m.group(1)
            hexid = raw.lower().startswith("0x")
            cur = ThreadStack(None if hexid else int(raw), int(raw, 16) if hexid else None,
                              m.group(3) or "", m.group(2) or "")
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
        address = name if _HEX.fullmatch(name) else ""
        cur.frames.append(Frame(None if address else name, module, source, python, address))
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
    """Threads of gdb's `thread apply all bt`; on a core file (gdb says "Core was generated
    by" or "Program terminated with signal"), the current thread is marked as the crashed
    one and the signal kept."""
    core = "Core was generated by" in text or "Program terminated with signal" in text
    dump = StackDump(StackTool.GDB_CORE if core else StackTool.GDB)
    cur: ThreadStack | None = None
    for line in text.splitlines():
        m = _GDB_SIGNAL.match(line)
        if m:
            dump.signal = m.group(1)
        m = _GDB_CURRENT.match(line)
        if m:
            dump.current_tid = int(m.group(1))
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
    if core and dump.current_tid is not None:
        for t in dump.threads:
            t.current = t.tid == dump.current_tid
    return dump


# --- pystack ---------------------------------------------------------------------------------

_PYSTACK_THREAD = re.compile(r"^Traceback for thread (\d+)(?: \(([^)]*)\))?")
_PYSTACK_FRAME = re.compile(r"^\s+\((Python|C)\) File .*, in (\S+)")


def parse_pystack(text: str) -> StackDump:
    """Threads of `pystack core`: `Traceback for thread N (name)` then `(Python)`/`(C)` frame
    lines, outermost first (reversed here to innermost first)."""
    dump = StackDump(StackTool.PYSTACK)
    for line in text.splitlines():
        m = _PYSTACK_THREAD.match(line)
        if m:
            dump.threads.append(ThreadStack(int(m.group(1)), name=m.group(2) or ""))
        elif dump.threads:
            f = _PYSTACK_FRAME.match(line)
            if f:
                dump.threads[-1].frames.insert(0, Frame(f.group(2),
                                                        python=f.group(1) == "Python"))
    return dump


# --- faulthandler ----------------------------------------------------------------------------

_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_FH_FRAME = re.compile(r'^\s+File "([^"]+)", line \d+ in (\S+)')
_FH_SIGNAL = re.compile(r"^Fatal Python error: (\w[\w ]*)")
FAULT_TOP_FRAMES: int = 2  # frames of a dump's top in a frameless key: the function that
#   faulted and its caller; deeper ones are the test runner's, the same for every test
_FH_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
               "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


def faulthandler_text(stderr_text: str) -> str | None:
    """faulthandler's report in a worker's stderr ("Fatal Python error: ..." onward), the last
    one if several."""
    at = stderr_text.rfind("Fatal Python error")
    return stderr_text[at:] if at >= 0 else None


def faulthandler_top(stderr_text: str, frames: int = FAULT_TOP_FRAMES) -> list[str]:
    """The top of faulthandler's last report in `stderr_text`: its first line ("Fatal Python
    error: Segmentation fault"), then the first `frames` frames of the thread it names as
    current, most recent call first, each as `function [file]`; [] without a report. What is
    most specific to the fault (issue 36): the tail of a dump is boilerplate every process
    prints (`<frozen runpy>` frames, "Extension modules: ...")."""
    text = faulthandler_text(stderr_text)
    if text is None:
        return []
    dump = parse_faulthandler(text)
    head = text.split("\n", 1)[0].strip()
    current = dump.crashed or (dump.threads[0] if dump.threads else None)
    top = [f"{f.function} [{f.module}]" for f in (current.frames if current else [])[:frames]]
    return [head, *top]


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


# --- the kernel's fault lines ----------------------------------------------------------------

_KERNEL_FAULT = re.compile(r"\b\S+\[(\d+)\]:? (segfault at|general protection|trap )")


def kernel_fault_lines(lines: Collection[str], tids: Collection[int]) -> tuple[list[str],
                                                                                 int | None]:
    """The kernel's fault lines (`comm[TID]: segfault at ... in lib.so[...]`) for any of
    `tids`, and the tid of the last one."""
    hits, tid = [], None
    for line in lines:
        m = _KERNEL_FAULT.search(line)
        if m and int(m.group(1)) in tids:
            hits.append(line)
            tid = int(m.group(1))
    return hits, tid


# --- dispatch --------------------------------------------------------------------------------

def tool_of(header: str) -> StackTool | None:
    """The tool named on a stacks.txt header line (`# py-spy dump --native`, `# gdb attach`,
    `# core+gdb`, `# core+py-spy`, `# faulthandler`). `# core+pystack` is not dispatched:
    signatures have never read pystack's text, and reading it now would change them."""
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
        elif _pyspy_thread(body) or body.startswith("Process "):
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
