"""Which thread failed, what it was doing, and what else was in flight: read off the journal."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from stress.engine.journal import NO_JOB, Entry, JournalReader, Phase, SlotView, Step

STEPS_KEPT: int = 24  # journal entries of the failing thread stored with each failure
OTHER_STEPS_KEPT: int = 24  # ... and of every other thread (what it was doing meanwhile)

_CURRENT_THREAD = re.compile(r"Current thread (0x[0-9a-f]+)")


@dataclass
class Attribution:
    method: str  # watchdog | inject-marker | faulthandler | latest-in-flight | latest-record | none
    slot: int | None = None
    job_index: int | None = None
    last_step: str | None = None
    in_flight: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    journal_text: str = ""
    native_tid: int = 0  # the failing thread's OS thread id (to find it in stack dumps)
    last_record_ns: int = 0  # newest record of the failing thread (CLOCK_MONOTONIC)
    step_begin_ns: int = 0  # begin of its innermost in-flight step


def _innermost(view: SlotView) -> Entry | None:
    flight = [e for e in view.in_flight() if e.step is not Step.JOB]
    if flight:
        return flight[-1]
    begun = [e for e in view.entries if e.phase is Phase.BEGIN and e.step is not Step.JOB]
    return begun[-1] if begun else None


def attribute(reader: JournalReader | None, stderr_text: str = "",
              slot_hint: int | None = None, views: list[SlotView] | None = None) -> Attribution:
    """Finds the failing thread (see the module doc). `views` lets a caller that already
    decoded the journal (the healthy sampler) reuse that decoding."""
    if reader is None:
        return Attribution("none")
    views = views if views is not None else reader.all_slots()
    if not views:
        return Attribution("none")
    chosen: SlotView | None = None
    method = "none"
    by_slot = {v.slot: v for v in views}
    if slot_hint is not None and slot_hint in by_slot:
        chosen, method = by_slot[slot_hint], "watchdog"
    if chosen is None:
        marked = [v for v in views if v.last and v.last.step is Step.INJECT]
        if marked:
            chosen, method = max(marked, key=lambda v: v.last.ts_ns if v.last else 0), \
                "inject-marker"
    if chosen is None:
        m = _CURRENT_THREAD.search(stderr_text)
        if m:
            ident = int(m.group(1), 16)
            # a thread's ident is its pthread address, reused by the next thread started after
            # it ended: of the slots that share it, the one alive at the crash wrote last
            hits = [v for v in views if v.py_ident == ident]
            if hits:
                chosen, method = max(hits, key=lambda v: v.last.ts_ns if v.last else 0), \
                    "faulthandler"
    if chosen is None:
        flying = [(e.ts_ns, v) for v in views for e in [_innermost(v)] if e and v.in_flight()]
        if flying:
            chosen, method = max(flying, key=lambda p: p[0])[1], "latest-in-flight"
    if chosen is None:
        chosen, method = max(views, key=lambda v: v.last.ts_ns if v.last else 0), "latest-record"

    inner = _innermost(chosen)
    marker = chosen.last if chosen.last and chosen.last.step is Step.INJECT else None
    last_step = Step(marker.detail).label if marker else (inner.step.label if inner else None)
    job = next((e.job for e in reversed(chosen.entries) if e.job != NO_JOB), None)
    in_flight = [f"t{chosen.slot}:{e.step.label}" for e in chosen.in_flight()
                 if e.step is not Step.JOB]
    for v in views:
        if v is not chosen:
            in_flight += [f"t{v.slot}:{e.step.label}" for e in v.in_flight()
                          if e.step is not Step.JOB]
    steps = [entry_dict(e, True, chosen.native_tid) for e in chosen.entries[-STEPS_KEPT:]]
    for v in views:
        if v is not chosen:
            steps += [entry_dict(e, False, v.native_tid) for e in v.entries[-OTHER_STEPS_KEPT:]]
    lines = []
    for v in [chosen] + [v for v in views if v is not chosen]:
        lines.append(f"== thread slot {v.slot} (tid {v.native_tid}, ident {v.py_ident:#x})"
                     + ("  <- failing thread" if v is chosen else ""))
        base = v.entries[-1].ts_ns if v.entries else 0
        for e in v.entries[-(STEPS_KEPT if v is chosen else OTHER_STEPS_KEPT * 2):]:
            lines.append(f"  {(e.ts_ns - base) / 1e6:+10.3f} ms  {e.describe()}")
    return Attribution(method, chosen.slot, job, last_step, in_flight, steps, "\n".join(lines),
                       chosen.native_tid, chosen.last.ts_ns if chosen.last else 0,
                       inner.ts_ns if inner else 0)


def window_tokens(steps: list[dict[str, Any]], k: int = 12) -> list[str]:
    """The failing (or sampled) thread's last k steps as `phase:step` tokens, oldest first,
    without the job brackets and injection marks (harness bookkeeping, not HAL calls)."""
    out = [f"{s['phase']}:{s['step']}" for s in steps
           if s.get("failing") and s["step"] not in ("job", "inject")]
    return out[-k:]


def entry_dict(e: Entry, failing: bool, tid: int = 0) -> dict[str, Any]:
    """A journal entry as stored with failures and sampled windows (raw facts: analysis
    derives tokens and features from these)."""
    return {"t": e.ts_ns, "slot": e.slot, "tid": tid, "step": e.step.label,
            "phase": e.phase.name.lower(), "device": e.device,
            "job": None if e.job == NO_JOB else e.job, "failing": failing}
