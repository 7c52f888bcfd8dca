"""Deadlines: which workers are stuck, decided from their journals and a clock (pure: the
session feeds it `now`, tests feed it a fake one).

Every step a worker takes has a deadline and a class: HAL steps (--timeout), teardown steps and
the worker's exit (--teardown-timeout: a teardown hang), interpreter start-up before the journal
exists, a job whose thread made no journal progress at all, and a worker told to stop that
neither finishes nor exits. When several threads are late, which one stalled is the only
question that needs more than the journal: the caller may say which threads wait for the GIL
(a cheap /proc read before any evidence is taken).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from stress.engine.journal import JournalReader, Phase, Step

STARTUP_STEP: str = "startup"  # label of the pre-journal phase (not a journal step)
STOP_STEP: str = "stop"  # label of "told to stop, never left" when no step is in flight
NEAR_FRACTION: float = 0.5  # of its deadline: a step in flight this long while another
#   thread's is past its deadline is stuck too (a HAL step takes milliseconds), and may be
#   the one to blame
JOB_SILENCE_FLOOR_S: float = 10.0  # a whole process silent this long inside a job is stuck


@dataclass(frozen=True)
class Limits:
    timeout_s: float  # a HAL step
    teardown_timeout_s: float  # release, driver release, gc, worker exit
    startup_s: float  # process start to journal file
    stop_grace_s: float  # after `stop`, beyond the two deadlines


@dataclass(frozen=True)
class Stuck:
    """One stuck worker: the slot and step to blame (slot None: no journal slot in flight)."""

    slot: int | None
    step: Step | None
    label: str
    teardown: bool
    age_s: float  # how long the step has been running
    late: tuple[LateThread, ...] = ()  # every thread past its deadline, when several were


@dataclass(frozen=True)
class LateThread:
    """One of several threads past their deadlines at a verdict, and what decided it: whether
    it looked like it waited for the GIL (None: not asked), and the /proc reads behind that
    (filled in by the caller, who made them)."""

    slot: int | None
    label: str
    age_s: float
    gil_waiter: bool | None = None
    reads: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"slot": self.slot, "step": self.label, "age_s": round(self.age_s, 3),
                "gil_waiter": self.gil_waiter, "reads": list(self.reads)}


def with_reads(stuck: Stuck, reads: Mapping[int, list[str]]) -> Stuck:
    """`stuck` with the /proc reads its caller made for each late thread (`reads` by slot)."""
    if not stuck.late:
        return stuck
    return replace(stuck, late=tuple(
        replace(t, reads=tuple(reads.get(t.slot, ()))) if t.slot is not None else t
        for t in stuck.late))


def scan(reader: JournalReader | None, now_ns: int, limits: Limits, *, started_ns: int,
         bye_ns: int | None, stop_ns: int | None,
         gil_waiter: Callable[[int], bool] | None = None) -> Stuck | None:
    """The first deadline this worker has passed, or None. `gil_waiter(slot)`: whether that
    slot's thread now waits for the GIL (read from /proc by the caller; None: not known)."""
    if reader is None:
        age = (now_ns - started_ns) / 1e9
        if age > limits.startup_s:
            return Stuck(None, None, STARTUP_STEP, False, age)
        return None
    latest = reader.latest()
    newest = max((ts for _, ts, _, _, _ in latest), default=started_ns)
    late: list[tuple[int, Stuck]] = []  # steps past NEAR_FRACTION of their deadline
    past = False  # whether any is past the deadline itself
    job_stuck: Stuck | None = None
    for slot, ts, step_code, phase, _job in latest:
        if phase != Phase.BEGIN:
            continue
        step = Step(step_code)
        age = (now_ns - ts) / 1e9
        if step is Step.JOB:
            # A job thread waiting on its helpers shows JOB begun and nothing since: normal
            # while any thread of the process moves. Stuck when the whole process is silent
            # (not less than JOB_SILENCE_FLOOR_S: inputs and numpy references are computed
            # between HAL steps, without journal records, and a loaded box is slow at it).
            silence = max(limits.timeout_s, JOB_SILENCE_FLOOR_S)
            if age > silence and (now_ns - newest) / 1e9 > silence:
                job_stuck = Stuck(slot, step, step.label, False, age)
            continue
        # once the worker said goodbye its jobs are done: a step in flight is an exit path's
        #   own device work (exit-inflight's `queue`, exit-thread's helper): it has the exit's
        #   deadline, and a stall in it is a hang at that step, not at worker-exit (the bye is
        #   noted when the parent reads it, which may be after the step began)
        after_bye = bye_ns is not None
        limit = limits.teardown_timeout_s if step.is_teardown() or after_bye else \
            limits.timeout_s
        if age > limit * NEAR_FRACTION:
            late.append((ts, Stuck(slot, step, step.label, step.is_teardown(), age)))
            past = past or age > limit
    if past:
        # Several threads past their deadlines: the ones waiting for the GIL are victims of
        # the thread that holds it, stuck in native code; a victim's step may have begun after
        # the culprit's (the GIL changed hands between the culprit's begin record and its
        # stall: a release, then another thread's readback waiting on a fence, seen on cuda).
        # Among the rest, blame the step begun last: a thread stuck holding the GIL stops
        # every other thread from running Python, so no record can follow its begin. A thread
        # counts as late here once past NEAR_FRACTION of its deadline, when any thread is past
        # its own: a victim whose step began a moment before the culprit's passes the deadline
        # first (an upload waiting while a release began and stalled holding the GIL: the
        # upload alone was late at that scan, seen on cuda).
        if len(late) == 1:
            return late[0][1]
        waiting: dict[int | None, bool] = {}
        if gil_waiter is not None:
            waiting = {x.slot: gil_waiter(x.slot) for _, x in late if x.slot is not None}
        culprits = [x for x in late if not waiting.get(x[1].slot, False)]
        blamed = max(culprits or late, key=lambda x: x[0])[1]
        return replace(blamed, late=tuple(
            LateThread(x.slot, x.label, x.age_s, waiting.get(x.slot)) for _, x in late))
    if job_stuck is not None:
        return job_stuck
    if bye_ns is not None:
        age = (now_ns - bye_ns) / 1e9
        if age > limits.teardown_timeout_s:
            return Stuck(None, Step.WORKER_EXIT, Step.WORKER_EXIT.label, True, age)
    elif stop_ns is not None:
        # from the stop or the worker's last progress, whichever is later: a one-job process
        # is told to stop at launch, and a pool worker may still run its queued jobs
        age = (now_ns - max(stop_ns, newest)) / 1e9
        if age > limits.timeout_s + limits.teardown_timeout_s + limits.stop_grace_s:
            return Stuck(None, None, STOP_STEP, True, age)
    return None
