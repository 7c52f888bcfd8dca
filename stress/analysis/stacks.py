"""A failure folder's stack dumps, parsed: the engine's stacks.txt (py-spy `dump --native`,
gdb `thread apply all bt` on an attached process or a core file) and faulthandler's report in
stderr.tail, each turned into threads of frames by `stress.stacktext` so that signatures can
pick the failing thread's meaningful frames (signatures.py) and reports can show them.
"""

from __future__ import annotations

from pathlib import Path

from stress.stacktext import StackDump, parse, parse_faulthandler

STACKS_FILE = "stacks.txt"
STDERR_FILE = "stderr.tail"
_MAX_TEXT: int = 4_000_000  # bytes read from one dump: gdb on 200 threads is ~1 MB


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
