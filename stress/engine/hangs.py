"""Workers past a deadline (hangs, teardown hangs): the watchdog's scan over a run's live
workers, then evidence of every stuck one while it is still alive (telemetry, every thread's
stack and state), then SIGTERM -> grace -> SIGKILL of the group, telemetry again, and one
failure each. What the session does with each ended worker comes back as a capture.Ending.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Container, Generator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from stress.engine import corekill, evidence, gilwait, postmortem, procstate, telemetry, watchdog
from stress.engine.attribution import attribute
from stress.engine.capture import Ending, job_of, job_text, rerun_jobs
from stress.engine.journal import Step
from stress.engine.recorder import Recorder, failed_outcome
from stress.engine.watchdog import STARTUP_STEP, Stuck
from stress.engine.workermanage import State, WorkerHandle, kill_groups, signal_group
from stress.vocab import FailureClass, signal_name

_RESCAN_S: float = 0.1  # deadline scans while hang evidence is taken (the watchdog period)
_RESCAN_FOR_S: float = 10.0  # after this, on_stuck finishes its batches and lets tick run


class Deadlines:
    """The watchdog's scan over a run's live workers: each one's journal (watchdog.scan), or
    its runner's judge for a process without one."""

    def __init__(self, limits: watchdog.Limits, workers: Mapping[int, WorkerHandle],
                 clock_ns: Callable[[], int] = time.monotonic_ns):
        self.limits, self.workers, self.clock_ns = limits, workers, clock_ns
        self.last_scan_ns: int | None = None  # the previous scan (a hang's timing)

    def gap(self) -> float | None:
        """Seconds since the previous deadline scan (None before the first); marks this one."""
        now_ns = self.clock_ns()
        gap_s = None if self.last_scan_ns is None else (now_ns - self.last_scan_ns) / 1e9
        self.last_scan_ns = now_ns
        return gap_s

    def find(self, skip: Container[int] = ()) -> list[tuple[WorkerHandle, Stuck]]:
        """Every live worker past a deadline, with the step to blame; `skip`: id()s of
        handles already being handled (not looked at: their evidence is being taken)."""
        now_ns = self.clock_ns()
        stuck = []
        for h in list(self.workers.values()):
            if h.state is State.EXITED or id(h) in skip:
                continue
            if h.judge is not None:  # a process without our journal: its runner's deadlines
                found = h.judge.watch(now_ns)
            else:
                reader = h.journal()
                gil = gilwait.GilCheck(h.pid, reader.native_tid) if reader else None
                found = watchdog.scan(
                    reader, now_ns, self.limits, started_ns=int(h.started * 1e9),
                    bye_ns=int(h.bye_at * 1e9) if h.bye_at is not None else None,
                    stop_ns=int(h.stop_sent_at * 1e9) if h.stop_sent_at is not None else None,
                    gil_waiter=gil)
                if found is not None and gil is not None:
                    found = watchdog.with_reads(found, gil.reads)
            if found is not None and not procstate.exiting(h.pid):  # one dying (writing its
                #   core as the deadline passed) is a crash: on_exit records it
                stuck.append((h, found))
        return stuck


class Supervisor(Protocol):
    """What on_stuck asks of the session while it takes evidence (the Session is one)."""

    def drain(self, h: WorkerHandle) -> None:
        """Handles every message the worker wrote (results that reached the pipe count)."""

    def interrupted(self) -> bool:
        """SIGINT/SIGTERM came: batches in flight kill at once, without cores."""

    def may_declare(self) -> bool:
        """Whether more hangs may be declared now (not stopping, interrupted or capped)."""


_EVIDENCE_BATCHES: int = 4  # hang batches whose evidence is taken at once (8 stack tools each)


def on_stuck(rec: Recorder, deadlines: Deadlines, boss: Supervisor,
             stuck: list[tuple[WorkerHandle, Stuck]], scan_gap_s: float | None = None
             ) -> Generator[tuple[WorkerHandle, Ending], None, None]:
    """Workers past a deadline: drain their results, take the evidence (telemetry, stacks) of
    each batch while all its workers are alive, then kill them, then record one failure each.

    The evidence is taken in a background thread while this loop goes on scanning (every
    watchdog period): a worker that passes its deadline meanwhile is declared then, and its
    evidence taken at once in a batch of its own, instead of after this batch is done (hangs
    in a burst were declared up to an evidence time late). Each batch is killed and recorded
    as soon as its evidence is in, the kill in the background too. New batches start only for
    _RESCAN_FOR_S, and not once the session is stopping, interrupted or at --max-failures:
    the session's own tick (exits, interrupts, the stop conditions) waits while this loops;
    each worker it ends is yielded with its Ending, for the session to apply at once.
    `workers_stuck` in a failure's timing counts its batch. scan_gap_s: the time since the
    previous deadline scan; far above the scan period, the parent was busy (a crash's
    evidence, a slow tick)."""
    backend = rec.cfg.target.backend.value
    pool = ThreadPoolExecutor(_EVIDENCE_BATCHES, thread_name_prefix="hang-evidence")
    batches: dict[Future[_Taken],
                  tuple[list[tuple[WorkerHandle, Stuck]], float, float | None]] = {}
    handled: dict[int, WorkerHandle] = {}  # by id(), holding the handles (no id reuse)

    def start(group: list[tuple[WorkerHandle, Stuck]], gap: float | None) -> None:
        t0 = time.monotonic()
        for h, _ in group:
            handled[id(h)] = h
            boss.drain(h)  # jobs that finished while it hung keep their results
        fut = pool.submit(_take_and_kill, [h for h, _ in group], backend,
                          # SIGUSR1 (the faulthandler fallback) only where a handler is
                          # installed: our workers once they said hello (and dump_stacks
                          # checks that it still is)
                          {h.pid: h.stderr_path for h, _ in group
                           if h.hello_at is not None and h.judge is None},
                          min(h.started_wall for h, _ in group), rec.run_dir, rec.python,
                          cancel)
        batches[fut] = (group, t0, gap)

    rescan_until = time.monotonic() + _RESCAN_FOR_S
    cancel = threading.Event()  # an interrupt: batches kill at once, without cores
    try:
        start(stuck, scan_gap_s)
        while batches:
            if boss.interrupted():
                cancel.set()
            done, _ = wait(list(batches), timeout=_RESCAN_S, return_when=FIRST_COMPLETED)
            for fut in done:
                group, t0, gap = batches.pop(fut)
                yield from _finish_stuck(rec, boss, group, fut.result(), t0, gap)
            if batches and len(batches) < _EVIDENCE_BATCHES and boss.may_declare() \
                    and time.monotonic() < rescan_until:
                gap = deadlines.gap()
                more = deadlines.find(skip=handled)
                if more:
                    start(more, gap)
    except BaseException:
        # the session kills every worker next: batches still in flight are not waited for
        # (their evidence is bounded; their kill only repeats what the session does)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)  # nothing is left in flight here


@dataclass
class _Taken:
    """What a background batch did: its evidence, then its kill, then telemetry. A process's
    stacks may have come from its core, dumped by the kill (`corekill`) or by a death during
    the evidence, after the verdict."""

    hang: evidence.HangEvidence
    t_stacks: float
    codes: dict[int, int | None]  # pid -> exit code of the workers it killed (None: unkillable)
    t_killed: float
    after: dict[str, Any]
    ended: dict[int, int] = field(default_factory=dict)  # pid -> exit code of those that ended
    #   by themselves while their evidence was taken (their hang stands)
    cored: dict[int, corekill.CoreKill] = field(default_factory=dict)  # killed to dump a core
    core_s: float = 0.0  # reading those cores


def _take_and_kill(handles: list[WorkerHandle], backend: str, stderr_paths: dict[int, Path],
                   since_wall: float, run_dir: Path, python: str,
                   cancel: threading.Event | None = None) -> _Taken:
    """A batch's evidence, then the kill of those still alive (a core-dumping signal first for
    up to corekill.CORES_PER_BATCH whose live stacks have no native frames), then the cores
    read, then telemetry: off the main thread, which only scans meanwhile and never polls
    these handles."""
    for h in handles:  # its verdict stands and it will die: whatever kills it (an evidence
        #   tool, our kill) leaves a core, even where the evidence budget turned cores off
        if h.cwd is not None and corekill.ours(h.cwd, run_dir):
            postmortem.allow_core(h.pid)
    hang = evidence.collect_many([h.pid for h in handles], stderr_paths=stderr_paths,
                                 backend=backend, since_wall=since_wall)
    t_stacks = time.monotonic()
    ended = {h.pid: rc for h in handles
             for rc in [corekill.settle(h.proc.poll) if hang.processes[h.pid].stacks.died
                        else h.proc.poll()] if rc is not None}
    cored: dict[int, corekill.CoreKill] = {}
    for h in handles:
        if len(cored) >= corekill.CORES_PER_BATCH or h.pid in ended or \
                (cancel is not None and cancel.is_set()):
            continue
        own = h.cwd is not None and corekill.ours(h.cwd, run_dir)
        if corekill.wanted(hang.processes[h.pid].stacks, own) and \
                not hang.processes[h.pid].in_d_state():
            h.killed_by_us = True
            k = corekill.dump(h.pid, h.proc.poll)
            if k.other is not None:  # an evidence tool's signal got there first
                ended[h.pid] = k.other
            cored[h.pid] = k
    for pid in ended:
        signal_group(pid, signal.SIGKILL)  # whatever a worker that died left in its group
    alive = [h for h in handles if h.pid not in ended]
    codes = kill_groups(alive)  # the rest, and what the cored ones left in their groups
    t_killed = time.monotonic()
    for h in handles:
        rc = ended.get(h.pid, codes.get(h.pid))
        by_core = h.pid in cored and cored[h.pid].signal is not None and cored[h.pid].ended
        died_by_signal = h.pid in ended and rc is not None and rc < 0
        if h.cwd is None or not (by_core or died_by_signal) or \
                (cancel is not None and cancel.is_set()):
            continue
        if not corekill.ours(h.cwd, run_dir):
            postmortem.discard_core(h.pid, h.cwd,  # never left in a user's folder
                                    h.judge.group.dest if h.judge is not None and
                                    h.judge.group is not None else None)
            continue
        reader = h.journal()
        tids = [v.native_tid for v in reader.all_slots()] if reader is not None else []
        post = corekill.read(h.pid, h.judge.exe if h.judge else python, h.cwd, tids=tids,
                             since_wall=since_wall)
        how = f"core dumped by our {cored[h.pid].signal} after the verdict" if by_core else \
            f"core of its death by {signal_name(rc)} during the evidence"
        live = hang.processes[h.pid].stacks
        hang.processes[h.pid].stacks = corekill.merge(live, post, how)
    for pid, kill in cored.items():
        if kill.signal is None:
            hang.processes[pid].stacks.tried.append(f"core after the verdict: {kill.note}")
    return _Taken(hang, t_stacks, codes, t_killed, telemetry.snapshot(backend), ended, cored,
                  time.monotonic() - t_killed)


def _finish_stuck(rec: Recorder, boss: Supervisor, stuck: list[tuple[WorkerHandle, Stuck]],
                  taken: _Taken, t0: float, scan_gap_s: float | None
                  ) -> Generator[tuple[WorkerHandle, Ending], None, None]:
    """One batch of stuck workers, evidence taken and killed: one failure each. The verdict
    was fixed when the deadline passed: a worker that died while its evidence was taken (a
    debugger that killed it, a stall that ended by itself) is still the hang it was, and that
    death is said inside its record."""
    hang, codes, after = taken.hang, taken.codes, taken.after
    t_stacks, t_killed = taken.t_stacks, taken.t_killed
    for h, st in stuck:
        boss.drain(h)
        rc = taken.ended[h.pid] if h.pid in taken.ended else codes.get(h.pid)
        cls = FailureClass.TEARDOWN_HANG if st.teardown else FailureClass.HANG
        stacks = hang.processes[h.pid].stacks
        slot = _culprit_slot(h, st.slot, stacks)
        attr = attribute(h.journal(), "", slot_hint=slot)
        if st.slot is None or attr.last_step is None:
            attr.last_step = st.label
        if h.judge is not None and not attr.native_tid:  # no journal names a thread: the
            attr.native_tid = _main_tid(h)  # main thread is where a tool process waits
        job = job_of(h, attr)
        folder = rec.new_folder(cls, h.name)
        deadline = rec.cfg.teardown_timeout_s if st.teardown else rec.cfg.timeout_s
        where = "starting up" if st.label == STARTUP_STEP else f"stuck in {attr.last_step}"
        if st.age_s < deadline:  # blamed with another thread past its deadline first
            where += (f" for {st.age_s:.1f} s (another thread, stuck behind it, passed the "
                      f"{deadline:g} s deadline first)")
        else:
            where += f" for more than {deadline:g} s"
        message = f"worker {h.name} {where} while running {job_text(job)}"
        if len(stuck) > 1:
            message += f" ({len(stuck)} workers stuck at once)"
        timing = {"stacks_s": hang.seconds, "kill_s": t_killed - t_stacks,
                  "evidence_and_kill_s": t_killed - t0, "deadline_s": deadline,
                  "declared_after_step_begin_s": st.age_s, "workers_stuck": len(stuck),
                  "scan_gap_s": scan_gap_s, "core_s": taken.core_s if taken.cored else None}
        facts: dict[str, Any] = hang.processes[h.pid].summary(attr.native_tid or _main_tid(h))
        if st.late:  # several threads late: which ones, and what the blame was decided from
            facts["late_threads"] = [t.as_dict() for t in st.late]
        if h.pid in taken.ended:
            facts["after_verdict"] = corekill.after_verdict(rc, stacks)
            message += f"; it {facts['after_verdict']}"
        if h.pid in taken.cored:
            k = taken.cored[h.pid]
            facts["core_after_verdict"] = {"signal": k.signal, "ended": k.ended,
                                           "note": k.note or None}
        if h.judge is not None:
            facts.update(h.judge.facts())
        exposure = "process_exit" if st.step is Step.WORKER_EXIT else None
        rec.write_evidence(folder, h, job, attr, {
            **hang.files(h.pid, _group_tids(h)),
            "telemetry_after.json": json.dumps(after, indent=1),
            "failure.json": json.dumps({"class": cls.value, "last_step": attr.last_step,
                                        "in_flight": attr.in_flight, "timing": timing,
                                        "native_tid": attr.native_tid,
                                        "attribution": attr.method, "unkillable": h.unkillable,
                                        "exit_code": rc, **facts}, indent=1)})
        rec.record(cls, h, job, None, attr, message, folder, evidence_facts=facts,
                   exposure=exposure)
        reason = "unkillable (D state)" if h.unkillable else cls.value
        rec.end_worker(h, rc, reason, "hang")
        yield h, Ending(rerun=rerun_jobs(h, job), replace=True,
                        failed=failed_outcome(cls, h, job))


def _group_tids(h: WorkerHandle) -> list[int]:
    """The threads and processes of an exec job's group seen alive (`children.GroupWatch`):
    its kernel log keeps their faults too."""
    group = getattr(h.judge, "group", None)
    if group is None:
        return []
    return [*group.tids, *group.tids.values(), *group.names]


_GIL_WAIT: tuple[str, ...] = ("take_gil", "PyEval_RestoreThread", "PyEval_AcquireThread",
                               "PyGILState_Ensure")  # frames of a thread waiting for the GIL
_GIL_WAIT_DEPTH: int = 8  # innermost frames looked at


def _waits_for_gil(stacks: evidence.Stacks, tid: int) -> bool:
    t = stacks.thread(tid)
    return t is not None and any(g in f for f in t.labels()[:_GIL_WAIT_DEPTH] for g in _GIL_WAIT)


def _culprit_slot(h: WorkerHandle, slot: int | None, stacks: evidence.Stacks) -> int | None:
    """The watchdog's slot, unless its thread is only waiting for the GIL while another
    thread with a step in flight is not: that one holds it (a native stall with the GIL held
    makes every other thread late)."""
    reader = h.journal()
    if slot is None or reader is None:
        return slot
    views = {v.slot: v for v in reader.all_slots()}
    blamed = views.get(slot)
    if blamed is None or not _waits_for_gil(stacks, blamed.native_tid):
        return slot
    others = [(flight[-1].ts_ns, v.slot) for v in views.values() if v.slot != slot
              for flight in [[e for e in v.in_flight() if e.step is not Step.JOB]]
              if flight and not _waits_for_gil(stacks, v.native_tid)]
    return max(others)[1] if others else slot


def _main_tid(h: WorkerHandle) -> int:
    """The thread to judge busy/blocked when no journal slot is to blame (start-up, exit):
    the process's main thread, whose native id is its pid."""
    return h.pid
