"""A failure folder's stack dumps, parsed: the engine's stacks.txt (py-spy `dump --native`,
gdb `thread apply all bt` on an attached process or a core file) and faulthandler's report in
stderr.tail, each turned into threads of frames by `stress.stacktext`; then the failing
thread's meaningful frames that signatures key on (signatures.py) and reports show, and for
hangs whether that thread was busy or blocked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stress.analysis import lifecycle, threadwords
from stress.analysis.framerules import key_frames, meaningful, rules
from stress.stacktext import Frame, StackDump, StackTool, ThreadStack, parse, parse_faulthandler

STACKS_FILE = "stacks.txt"
STDERR_FILE = "stderr.tail"
_MAX_TEXT: int = 4_000_000  # bytes read from one dump: gdb on 200 threads is ~1 MB
DISPLAY_FRAMES: int = 8  # meaningful frames shown in reports (with their modules)
NON_STACK_CLASSES: frozenset[str] = frozenset({"error", "miscompare"})
HANG_CLASSES: frozenset[str] = frozenset({"hang", "teardown_hang"})
STATUS_CLASSES: frozenset[str] = frozenset({"failed"})  # one row per process, no stack: an
#   exit status
_THREAD_STATES: frozenset[str] = frozenset({"busy", "blocked"})


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


@dataclass
class StackEvidence:
    frames: tuple[str, ...] = ()  # key frames
    modules: tuple[str, ...] = ()  # each key frame's module ("" unknown): not in the id
    display: tuple[str, ...] = ()  # meaningful frames with modules, for reports
    source: str = "none"  # which tool the frames came from
    thread_name: str = ""
    tid: int | None = None  # the thread the frames are from
    functions: tuple[str, ...] = ()  # every named native function of that thread, innermost
    #   first (what the upstream shapes match: upstream.py)
    phase: str = ""  # the lifecycle phase its frames (or the blamed thread's) say: lifecycle.py
    phase_detail: str = ""
    threads: str = ""  # hangs: what the stuck threads do ("busy in an event loop; main thread
    #   joining a thread at exit"), from siglists/waits.txt


def folder_meta(folder: str | None) -> dict[str, Any]:
    """A failure folder's failure.json ({} when there is none)."""
    if not folder:
        return {}
    try:
        meta = json.loads((Path(folder) / "failure.json").read_text())
        return meta if isinstance(meta, dict) else {}
    except (OSError, ValueError):
        return {}


def as_tid(v: Any) -> int | None:
    """A thread id from a row or failure.json (None for nothing, 0 or junk)."""
    try:
        return int(v) if v not in (None, "", 0, "0") else None
    except (TypeError, ValueError):
        return None


def failing_stack(row: dict[str, Any], dumps: list[StackDump] | None = None) -> StackEvidence:
    """The failing thread's frames for one failure row: the crashing thread of a core file or
    faulthandler dump, else the journal's failing thread by native tid; its meaningful frames
    (framerules.py) and those that make a signature's key."""
    if row["class"] in NON_STACK_CLASSES or row["class"] in STATUS_CLASSES:
        return StackEvidence()
    ev = row.get("evidence") or {}
    meta = folder_meta(row.get("artifacts"))
    tid = as_tid(row.get("native_tid")) or as_tid(meta.get("native_tid"))
    crashed_tid = as_tid(ev.get("crashed_tid"))
    dumps = dumps if dumps is not None else read_folder(row.get("artifacts"))
    hang = row["class"] in HANG_CLASSES
    for dump in dumps:
        lead = spinning_thread(dump, row, tid) if hang else None
        th = lead or dump.failing(tid, crashed_tid, crash=row["class"] == "crash")
        if th is None or not th.frames:
            continue
        crashed = row["class"] == "crash" and dump.tool in (StackTool.GDB_CORE,
                                                            StackTool.FAULTHANDLER)
        good = meaningful(th.frames, crashed=crashed)
        if not good and dump.tool is not StackTool.FAULTHANDLER:
            continue
        keys = key_frames(good)
        blamed = dump.thread(tid) if hang else None
        named = [rules().renamed(f) for f in th.frames]
        voices = [named] + ([[rules().renamed(f) for f in blamed.frames]]
                            if blamed is not None and blamed is not th else [])
        step = row.get("last_step")
        hit = next((h for v in voices for h in [lifecycle.rules().of_frames(v, step)] if h),
                   None)
        return StackEvidence(keys, tuple(f.module for f in good[:len(keys)]),
                             tuple(f.display() for f in good[:DISPLAY_FRAMES]),
                             dump.tool.describe(), th.name, th.tid,
                             tuple(f.function for f in named if f.function and not f.python),
                             hit[0].value if hit else "", hit[1] if hit else "",
                             stuck_threads(dump, row, th, blamed) if hang else "")
    return StackEvidence(source=str(ev.get("stack_source") or "none"))


def thread_state(row: dict[str, Any]) -> str:
    """busy | blocked for hangs (issue 17 item 5: the failing thread's CPU use across the
    evidence window; busy whenever any thread of the process spun, issue 39), else "". Read
    from the row's evidence (`busy_tids`; `activity` of `activity_tid`, `threads` {tid:
    {state}}, or `blocked_tids`), else from failure.json."""
    if row["class"] not in HANG_CLASSES:
        return ""
    if _busy_tids(row):  # a process is busy when any of its threads spins (issue 39)
        return "busy"
    meta = folder_meta(row.get("artifacts"))
    tid = as_tid(row.get("native_tid")) or as_tid(meta.get("native_tid"))
    if tid is None:
        return ""
    for ev in (row.get("evidence") or {}, meta):
        act = ev.get("activity")
        if isinstance(act, str) and act.lower() in _THREAD_STATES and \
                as_tid(ev.get("activity_tid")) in (None, tid):
            return act.lower()
        threads = ev.get("threads")
        info = threads.get(str(tid)) if isinstance(threads, dict) else None
        state = info.get("state") or info.get("activity") if isinstance(info, dict) else None
        if isinstance(state, str) and state.lower() in _THREAD_STATES:
            return state.lower()
        for name in ("busy", "blocked"):
            tids = ev.get(f"{name}_tids")
            if isinstance(tids, list) and tid in tids:
                return name
    return ""


def _busy_tids(row: dict[str, Any]) -> list[int]:
    """The threads sampled busy (burning a core) during a hang's evidence window. A thread
    other than the journal's stuck one counts only when it used more CPU over the window than
    a parked thread does (threads.json's `core_fraction`, where the folder has it): a worker
    pool that spins briefly by design, caught running at both reads, must not turn every
    blocked hang busy and lead its signature (review of issue 39). Not half a core: a real
    spinner on a loaded 2-core machine was measured at 0.49 of one."""
    meta = folder_meta(row.get("artifacts"))
    stuck = as_tid(row.get("native_tid")) or as_tid(meta.get("native_tid"))
    for ev in (row.get("evidence") or {}, meta):
        tids = ev.get("busy_tids")
        if isinstance(tids, list) and tids:
            cpu = _core_fractions(row.get("artifacts"))
            return [t for t in (as_tid(x) for x in tids) if t is not None and
                    (t == stuck or cpu.get(t, 1.0) > PARKED_CORE_FRACTION)]
    return []


PARKED_CORE_FRACTION: float = 0.05  # what a parked thread may still use (procstate's blocked
#   line): a thread at or below it was only caught running


def _core_fractions(folder: str | None) -> dict[int, float]:
    """{tid: share of a core it used over the window} from a failure folder's threads.json."""
    try:
        doc = json.loads((Path(folder) / "threads.json").read_text()) if folder else {}
    except (OSError, ValueError):
        return {}
    out: dict[int, float] = {}
    for t in doc.get("threads") or [] if isinstance(doc, dict) else []:
        tid = as_tid(t.get("tid")) if isinstance(t, dict) else None
        if tid is not None and isinstance(t.get("core_fraction"), (int, float)):
            out[tid] = float(t["core_fraction"])
    return out


def spinning_thread(dump: StackDump, row: dict[str, Any], tid: int | None) -> ThreadStack | None:
    """A hang is judged over every thread (issue 39): when the journal's stuck thread did not
    spin but another thread did, the spinning one leads (the spin is the symptom: the stuck
    clock; the thread that waits on it only follows). None: the journal's thread leads."""
    busy = _busy_tids(row)
    if not busy or tid in busy:
        return None
    return next((t for b in busy for t in [dump.thread(b)]
                 if t is not None and meaningful(t.frames)), None)


def stuck_threads(dump: StackDump, row: dict[str, Any], lead: ThreadStack,
                  blamed: ThreadStack | None) -> str:
    """`busy in an event loop; main thread joining a thread at exit`: the leading thread's
    state and what it does, then what the journal's stuck thread and the main thread do."""
    state = thread_state(row) or "stuck"
    parts = [f"{state} {threadwords.words(_named(lead))}"]
    pid = as_tid(row.get("pid"))
    main = dump.thread(pid)
    for other in (blamed, main):
        if other is None or other is lead or not other.frames or \
                (other is main and blamed is main and len(parts) > 1):
            continue
        frames = _named(other)
        phase = lifecycle.rules().of_frames(frames)
        at = f" {_AT[phase[0]]}" if phase else ""
        who = "main thread" if other.tid is not None and other.tid == pid else \
            f"thread {other.name or other.tid}"
        parts.append(f"{who} {threadwords.words(frames)}{at}")
    return "; ".join(parts)


_AT: dict[lifecycle.Phase, str] = {lifecycle.Phase.PROCESS_EXIT: "at exit",
                                   lifecycle.Phase.DRIVER_DESTROY: "at driver destroy",
                                   lifecycle.Phase.DEVICE_RELEASE: "at device release",
                                   lifecycle.Phase.WORK: "at work"}


def _named(th: ThreadStack) -> list[Frame]:
    return [rules().renamed(f) for f in th.frames]
