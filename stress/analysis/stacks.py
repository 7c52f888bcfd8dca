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

from stress.analysis.framerules import key_frames, meaningful
from stress.stacktext import StackDump, StackTool, parse, parse_faulthandler

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
    for dump in dumps:
        th = dump.failing(tid, crashed_tid, crash=row["class"] == "crash")
        if th is None or not th.frames:
            continue
        crashed = row["class"] == "crash" and dump.tool in (StackTool.GDB_CORE,
                                                            StackTool.FAULTHANDLER)
        good = meaningful(th.frames, crashed=crashed)
        if not good and dump.tool is not StackTool.FAULTHANDLER:
            continue
        keys = key_frames(good)
        return StackEvidence(keys, tuple(f.module for f in good[:len(keys)]),
                             tuple(f.display() for f in good[:DISPLAY_FRAMES]),
                             dump.tool.describe(), th.name, th.tid)
    return StackEvidence(source=str(ev.get("stack_source") or "none"))


def thread_state(row: dict[str, Any]) -> str:
    """busy | blocked for hangs (issue 17 item 5: the failing thread's CPU use across the
    evidence window), else "". Read from the row's evidence (`activity` of `activity_tid`,
    `threads` {tid: {state}}, or `busy_tids` / `blocked_tids`), else from failure.json."""
    if row["class"] not in HANG_CLASSES:
        return ""
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
