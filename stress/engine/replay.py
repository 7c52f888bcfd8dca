"""IREE HAL replays of native jobs (`--record`): which to keep, and what a failure folder gets.

`iree-run-module --device_replay_output=F` records every HAL operation of the process (device,
allocator, buffers, command buffers, semaphores, queue operations); `iree-dump-replay
--format=jsonl F` reads it back, one JSON object per record, also after the recording process
died by a signal. A replay costs ~28 KB for one small corpus invocation and ~90 MB/s under
`iree-benchmark-module`, so disk is bounded: every failed job's replay is kept, and of the
healthy ones the first of each program and one in `HEALTHY_SAMPLE_EVERY`, while the run's kept
replays stay under `DISK_CAP_BYTES`; the rest are deleted as their jobs end.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.engine import procstate
from stress.fs import new_file_mode

DISK_CAP_BYTES: int = 256 << 20  # kept replays per run: ~9,000 small-job replays, or ~3 s of
#   iree-benchmark-module; a failure past it keeps its JSONL tail (dumped before deletion)
HEALTHY_SAMPLE_EVERY: int = 50  # healthy replays kept: the baseline a failure is read against
TAIL_OPERATIONS: int = 200  # HAL records in a failure folder's tail: a few invocations' worth
_DUMP_TIMEOUT_S: float = 30.0  # iree-dump-replay reads ~100 MB/s; a capped replay takes < 3 s
_QUEUE_PREFIX: str = "device.queue_"  # operations that submit work signalling semaphores


@dataclass
class ReplayKeeper:
    """Decides, as each recorded job ends, whether its replay stays (module doc)."""

    folder: Path
    cap_bytes: int = DISK_CAP_BYTES
    kept_bytes: int = 0
    healthy_seen: int = 0
    kept: int = 0
    dropped: int = 0
    programs: set[str] = field(default_factory=set)  # with a healthy replay kept

    def path(self, name: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.folder / f"{name}.ireereplay"

    def settle(self, path: Path, program: str, failed: bool) -> bool:
        """Keeps or deletes `path` (a finished job's replay); True when kept."""
        try:
            size = path.stat().st_size
        except OSError:
            return False
        keep = failed
        if not failed:
            self.healthy_seen += 1
            keep = program not in self.programs or self.healthy_seen % HEALTHY_SAMPLE_EVERY == 0
        if keep and self.kept_bytes + size <= self.cap_bytes:
            self.kept_bytes += size
            self.kept += 1
            if not failed:
                self.programs.add(program)
            try:  # iree-run-module writes it 0640: others of a shared results folder and a CI
                #   artifact upload read it like every other file of the run
                os.chmod(path, new_file_mode())
            except OSError:
                pass
            return True
        path.unlink(missing_ok=True)
        self.dropped += 1
        return False

    def summary(self) -> dict[str, Any]:
        return {"kept": self.kept, "dropped": self.dropped, "kept_bytes": self.kept_bytes,
                "cap_bytes": self.cap_bytes, "healthy_sample_every": HEALTHY_SAMPLE_EVERY}


def dump(tool: Path, replay: Path, timeout_s: float = _DUMP_TIMEOUT_S) -> tuple[
        list[dict[str, Any]], str]:
    """Every record of `replay` (iree-dump-replay --format=jsonl), and a note when the dump
    failed or stopped early (a replay cut by SIGKILL ends mid-record: what came before is
    still returned)."""
    run = procstate.run_bounded([str(tool), "--format=jsonl", str(replay)], timeout_s)
    records = []
    for line in run.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    note = "" if run.rc == 0 else f"iree-dump-replay: {run.describe()} " \
                                  f"{run.stderr.strip()[:300]}"
    return records, note


def operations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The HAL records (objects and operations) in host-call order, without file headers."""
    return [r for r in records if r.get("kind") in ("operation", "object")]


def tail(records: list[dict[str, Any]], n: int = TAIL_OPERATIONS) -> list[dict[str, Any]]:
    return operations(records)[-n:]


def _signals(rec: dict[str, Any], key: str) -> list[tuple[int, int]]:
    payload = rec.get("payload")
    if not isinstance(payload, dict):
        return []
    return [(int(s["semaphore_id"]), int(s["value"])) for s in payload.get(key) or []
            if isinstance(s, dict) and "semaphore_id" in s]


def pending(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Queue operations whose signal no later recorded operation waited on (a queue
    operation's wait list or a semaphore operation at that value or above): work submitted
    and, as far as the host's recorded calls show, never seen done. The replay holds host
    calls, not device completions, so this is the host's view: for a crash or a hang it
    names the submissions the process was still waiting for."""
    ops = operations(records)
    waited: dict[int, int] = {}
    out = []
    for rec in reversed(ops):
        op = str(rec.get("operation") or "")
        for sem, value in _signals(rec, "wait_semaphores"):
            waited[sem] = max(waited.get(sem, 0), value)
        if op.startswith("semaphore."):
            sem = int(rec.get("object_id") or 0)
            waited[sem] = max(waited.get(sem, 0), 1 << 62)
        if op.startswith(_QUEUE_PREFIX):
            signals = _signals(rec, "signal_semaphores")
            if signals and all(waited.get(sem, -1) < value for sem, value in signals):
                out.append(rec)
    return list(reversed(out))


def last_operation(records: list[dict[str, Any]]) -> str | None:
    """The HAL operation recorded last (the one in flight, or the last begun)."""
    ops = [r for r in operations(records) if r.get("kind") == "operation"]
    return str(ops[-1].get("operation")) if ops else None


def write_evidence(tool: Path | None, replay: Path, folder: Path) -> dict[str, Any]:
    """A failure folder's replay evidence: the replay itself (moved in), `hal_tail.jsonl`
    (the last TAIL_OPERATIONS records) and `hal_pending.jsonl`. Returns facts for the
    failure (last operation, counts, notes). Never raises."""
    facts: dict[str, Any] = {}
    if not replay.exists():
        return {"replay": None, "replay_note": "no replay (not written, or dropped at the cap)"}
    records: list[dict[str, Any]] = []
    if tool is not None:
        records, note = dump(tool, replay)
        if note:
            facts["replay_note"] = note
    try:
        (folder / "hal_tail.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in tail(records)))
        (folder / "hal_pending.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in pending(records)))
        dest = folder / replay.name
        shutil.move(str(replay), dest)
        facts["replay"] = str(dest)
    except OSError as exc:
        facts["replay_note"] = f"{facts.get('replay_note', '')} {exc}".strip()
    facts.update({"hal_last_operation": last_operation(records),
                  "hal_records": len(operations(records)),
                  "hal_pending": len(pending(records))})
    return facts


def size_of(folder: Path) -> int:
    """Bytes of every replay under `folder` (tests and the bench check the cap with it)."""
    return sum(p.stat().st_size for p in folder.rglob("*.ireereplay") if p.is_file()) \
        if folder.exists() else 0
