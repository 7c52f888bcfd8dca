"""What the session does when a worker fails: evidence first, then the kill, then one failure
record attributed to the job that was running ("worker w3 crashed while running ...").

Crashes are seen at exit (the process is already gone: its journal, stderr and a post-mortem
stack are what is left); hangs are seen by the watchdog (the process is alive: telemetry, every
thread's stack and state, then SIGTERM -> grace -> SIGKILL of the group, telemetry again).
"""

from __future__ import annotations

import enum
import json
import re
import resource
import signal
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stress.engine import corekill, evidence, postmortem, telemetry
from stress.engine.attribution import Attribution, attribute
from stress.engine.children import ChildCrash
from stress.engine.forkclient import RETURNCODE_LOST
from stress.engine.forkserver import EXIT_CHILD_SETUP
from stress.engine.journal import Step
from stress.engine.observer import Outcome
from stress.engine.watchdog import STARTUP_STEP, Stuck
from stress.engine.workermanage import Judge, WorkerHandle, kill_groups, signal_group
from stress.fs import atomic_write
from stress.vocab import FailureClass, signal_name

if TYPE_CHECKING:
    from stress.engine.jobs import Job
    from stress.engine.session import Session

_RESCAN_S: float = 0.1  # deadline scans while hang evidence is taken (the watchdog period)
_RESCAN_FOR_S: float = 10.0  # after this, on_stuck finishes its batches and lets tick run
_MAX_FAILURE_FOLDERS: int = 200  # crash/hang folders per run; errors and miscompares take none
EXIT_HARNESS: int = 70  # worker.EXIT_HARNESS: iree-stress's own code failed in the worker


def record(s: Session, cls: FailureClass, h: WorkerHandle | None, job: Job | None,
           sig: str | None, attr: Attribution, message: str, folder: Path | None,
           count: bool = True, evidence_facts: dict[str, Any] | None = None,
           exposure: str | None = None) -> int:
    """One failure row (committed at once). `count`: a process-level failure (crash, hang):
    counted here; errors and miscompares are counted from the job's result instead."""
    if count:
        s.tally.process_failed(cls)
    row = s.store.add_failure(s.run_id, {
        "class": cls.value, "signal": sig, "job_index": job.index if job else None,
        "program": job.program if job else None, "pattern": job.pattern if job else None,
        "seed": job.seed if job else None, "worker": h.worker_id if h else None,
        "pid": h.pid if h else None, "last_step": attr.last_step, "in_flight": attr.in_flight,
        "steps": attr.steps, "artifacts": str(folder) if folder else None, "message": message,
        "attribution": attr.method, "elapsed_s": time.monotonic() - s.tally.started,
        "native_tid": attr.native_tid or None, "evidence": evidence_facts or {},
        "exposure": exposure})
    if h is not None:
        s.progress.failure(cls, h, job, attr, sig, folder)
    if count and s.observer is not None:
        s.observe(Outcome(job, h.pid if h else 0, True, (cls.value,)))
    return row


@dataclass
class PendingCrash:
    """A crash recorded at once, whose post-mortem stacks are still being read."""

    future: Future[evidence.CrashEvidence]
    row: int
    folder: Path | None
    meta: dict[str, Any]  # failure.json so far
    facts: dict[str, Any]  # the row's evidence so far
    tids: list[int] = field(default_factory=list)  # the journal's threads


def collect_finished(s: Session, wait: bool = False) -> None:
    """Completes the crashes whose stacks are read: their files, failure.json and the row's
    evidence and crashed thread. `wait`: all of them (end of run; each read is bounded)."""
    for p in list(s.pending_crashes):
        if not wait and not p.future.done():
            continue
        s.pending_crashes.remove(p)
        try:
            crash = p.future.result(timeout=postmortem.NATIVE_STACKS_TIMEOUT_S + 15)
            facts = {**p.facts, **crash.summary()}
            files = crash.files()
        except Exception as exc:  # a tool that hung past its bound, a parser bug: say so
            facts = {**p.facts, "stack_source": "none", "note": f"post mortem failed: {exc!r}"}
            files = {"stacks.txt": f"# none\npost mortem failed: {exc!r}\n"}
        tid = facts.get("crashed_tid") if not p.meta.get("native_tid") else None
        if facts.get("crashed_tid") and p.meta.get("native_tid") and \
                facts["crashed_tid"] != p.meta["native_tid"] and \
                facts["crashed_tid"] in p.tids:
            # the journal blamed one thread, the core says another took the signal: say so
            facts["blame_conflict"] = (f"the core says thread {facts['crashed_tid']} took the "
                                       f"signal; the journal blamed thread "
                                       f"{p.meta['native_tid']} ({p.meta.get('attribution')})")
        if p.folder is not None:
            meta = {**p.meta, **facts, **({"native_tid": tid} if tid else {})}
            for name, text in {**files, "failure.json": json.dumps(meta, indent=1)}.items():
                atomic_write(p.folder / name, text.encode())
        s.store.update_failure(p.row, facts, tid)


def new_folder(s: Session, cls: FailureClass, name: str) -> Path | None:
    """A fresh evidence folder, or None past the cap (the failure is still recorded)."""
    if s.folders >= _MAX_FAILURE_FOLDERS:
        return None
    s.folders += 1
    folder = s.run_dir / "failures" / f"{s.folders:04d}-{cls.value}-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_evidence(s: Session, folder: Path | None, h: WorkerHandle, job: Job | None,
                   attr: Attribution, extra: dict[str, str]) -> None:
    if folder is not None:
        evidence.write_folder(folder, s.cfg, h.tail(h.stderr_path), h.tail(h.stdout_path),
                              job, attr.journal_text, extra)
        if h.judge is not None:
            h.judge.add_evidence(folder)


def _tidy(h: WorkerHandle) -> None:
    """A clean one-job process whose job passed leaves nothing worth keeping: its journal,
    empty logs and core folder go (10 exits a second would otherwise leave tens of thousands
    of files an hour).
    A process its runner judges (h.judge: a native tool, an exec command) is left to that
    runner: its folder is the user's own working directory (exec: removed here when empty, so
    the next copy could not start) or a slot folder reused by the next job (native), its logs
    are reused per slot (native) or deleted by the runner at a clean exit (exec), and it keeps
    no journal."""
    if not h.ephemeral or h.judge is not None or h.job_failed:  # a failed job's journal stays
        return
    for path in (h.journal_path, h.stdout_path, h.stderr_path):
        try:
            if path == h.journal_path or path.stat().st_size == 0:
                path.unlink()
        except OSError:
            pass
    if h.cwd is not None:
        try:
            h.cwd.rmdir()  # only when empty
        except OSError:
            pass


def _python_exception(h: WorkerHandle) -> str:
    """The exception line of a worker that died of an uncaught Python exception before its
    hello (an import error, a missing library under a runtime stack): an infrastructure
    failure of the stack's environment, not a runtime crash. '' when it was not that."""
    lines = h.tail(h.stderr_path).strip().splitlines()
    if not any(line.startswith("Traceback (most recent call last)") for line in lines):
        return ""
    last = lines[-1] if lines else ""
    return last if _EXCEPTION_LINE.match(last) else ""


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b")


def evidence_key(cls: FailureClass, sig: str | None, step: str | None,
                 pattern: str | None) -> str:
    """The mode a crash's evidence budget is counted in, known before its core is read:
    class, signal, step and pattern (a raw fact each: two modes that share a class and a
    signal at different steps or patterns keep a budget each)."""
    return f"{cls.value}|{sig or ''}|{step or ''}|{pattern or ''}"


def no_cores(pid: int) -> bool:
    """Turns core dumps off for process `pid` (the evidence budget's processes that need
    none): its soft RLIMIT_CORE to 0, the hard limit left as it is, so that a hang's kill can
    raise it again (corekill.dump). Called at launch and again at the worker's hello: the
    worker's own prepare_child raises the soft limit when it starts. Returns whether it may
    still dump a core (True when the limit could not be changed)."""
    try:
        _, hard = resource.prlimit(pid, resource.RLIMIT_CORE)
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, hard))
        return False
    except (OSError, ValueError):
        return True


def spend(seen: Counter[str], key: str, budget: int) -> tuple[bool, int]:
    """(full evidence?, occurrence) for one more crash of mode `key` (`seen` counts them):
    the first `budget` in full, then the (budget*2^k)-th (a second mode hiding under the same
    key still shows, at a logarithmic cost), the others counted only; budget 0: all."""
    n = seen[key] = seen[key] + 1
    if budget <= 0 or n <= budget:
        return True, n
    doublings = n // budget
    return n % budget == 0 and doublings & (doublings - 1) == 0, n


def _step_after_bye(attr: Attribution, signalled: bool) -> str | None:
    """The step of the failing thread, begun after its worker-exit began (an exit path's own
    device work, such as exit-inflight's `queue`), that the failure belongs to: for an exit
    with a status, the last such step that failed; for a signal death, the one still in
    flight (a signal after such a step ended is the exit's own). None: the exit's."""
    mine = [e for e in attr.steps if e.get("failing")]
    exit_t = max((e["t"] for e in mine if e["step"] == Step.WORKER_EXIT.label and
                  e["phase"] == "begin"), default=None)
    if exit_t is None:
        return None
    after = [e for e in mine if e["t"] >= exit_t and e["step"] != Step.WORKER_EXIT.label]
    if not signalled:
        failed = [e for e in after if e["phase"] == "fail"]
        return str(failed[-1]["step"]) if failed else None
    open_steps: dict[str, bool] = {}
    for e in after:
        if e["phase"] == "begin":
            open_steps[e["step"]] = True
        elif e["phase"] in ("end", "fail"):
            open_steps.pop(e["step"], None)
    return str(list(open_steps)[-1]) if open_steps else None


def _job_text(job: Job | None) -> str:
    return job.describe() if job else "no job (setup or teardown)"


def end_worker(s: Session, h: WorkerHandle, rc: int | None, reason: str, outcome: str) -> None:
    """The worker's row: how it ended, and what its exit exposed (a process that used a device
    and then exited is one exposure of the driver's exit path); for exit-family waves, the
    order in which the processes of its batch ended."""
    job = next(iter(h.recent.values()), None) if h.ephemeral else None
    if job is None and h.ephemeral:
        job = next(iter(h.outstanding.values()), None)
    facts = {**(h.facts or {}), **({"bye": h.bye} if h.bye else {})}
    order = None
    if h.batch is not None:
        s.batch_exits[h.batch] += 1
        order = s.batch_exits[h.batch]
    pattern = job.pattern if job else ("pool" if not h.ephemeral else None)
    s.store.end_worker(h.db_row, rc, signal_name(rc), reason, facts or None,
                       outcome=outcome, device_used=int(bool(h.recent)),
                       pattern=pattern, job_index=job.index if job else None, bye_at=h.bye_at,
                       exit_path=pattern if h.batch is not None else None, batch=h.batch,
                       exit_order=order)


class ExitKind(enum.Enum):
    """How a process that we did not kill ended, from its exit status and what it said."""

    CLEAN = "clean"  # said bye, exited with the status its job expects
    HARNESS = "harness"  # iree-stress's own failure, or a worker that could not start
    FAILURE = "failure"  # anything else: a crash, an error exit (the exit status wins)

    def describe(self) -> str:
        return {ExitKind.CLEAN: "ended cleanly", ExitKind.HARNESS: "a harness error",
                ExitKind.FAILURE: "a failure of the process"}[self]


def classify_exit(rc: int, *, said_bye: bool, said_hello: bool, expected_rc: int,
                  exec_group: bool, python_exception: str) -> tuple[ExitKind, str]:
    """(kind, why) of a process's end; `why` says what the harness error was. An exec job's
    (exec_group) exit status is the user's command's own: never ours to call a harness error.
    `python_exception`: the uncaught exception line its stderr ends with ('' none)."""
    cannot_start = rc == 1 and not said_hello and not exec_group and python_exception
    if cannot_start:
        return ExitKind.HARNESS, f"could not start: {python_exception}"
    if rc == RETURNCODE_LOST:
        return ExitKind.HARNESS, "exit status lost with the fork server"
    if not exec_group and rc == EXIT_CHILD_SETUP:
        return ExitKind.HARNESS, "could not be set up by the fork server"
    if not exec_group and rc == EXIT_HARNESS:
        return ExitKind.HARNESS, "failed in iree-stress's own code"
    if said_bye and rc == expected_rc:
        return ExitKind.CLEAN, ""
    return ExitKind.FAILURE, ""


def on_exit(s: Session, h: WorkerHandle, rc: int) -> None:
    """A worker process ended. Clean when it said bye and exited 0; a hang we killed was
    recorded by on_stuck; anything else is a failure (the exit status wins over what the
    worker said)."""
    noticed_ns = time.monotonic_ns()
    s.drain(h)
    if h.judge is not None and not h.killed_by_us:
        h.inbox.extend(h.judge.finish(rc))  # a tool process's results, parsed from its output
        s.drain(h)
    if h.killed_by_us:
        if h.cwd is not None:
            postmortem.discard_core(h.pid, h.cwd)  # our SIGKILL leaves no core; SIGABRT might
        if h.judge is not None and h.judge.group is not None:
            h.judge.group.discard()  # a hang's group: its processes' cores are not its evidence
        s.retire(h)
        return
    signal_group(h.pid, signal.SIGKILL)  # whatever the worker left running in its group
    sig = signal_name(rc)
    group = h.judge.group if h.judge is not None else None
    said_bye = h.bye_at is not None
    if h.facts_worker and h.hello_at is None:
        s.facts_requested = False  # the next worker reports the runtime facts instead
    kind, why = classify_exit(rc, said_bye=said_bye, said_hello=h.hello_at is not None,
                              expected_rc=h.expected_rc, exec_group=group is not None,
                              python_exception=_python_exception(h) if rc == 1 else "")
    if kind is ExitKind.HARNESS:
        s.harness_errors.append(f"worker {h.name} {why} (see {h.stderr_path})")
        s.requeue(h, None)
        end_worker(s, h, None if rc == RETURNCODE_LOST else rc, "harness error", "harness")
        s.restart(h)
        if h.ephemeral:  # job processes that cannot start share the restart budget
            s.count_restart()
        s.retire(h)
        return
    if kind is ExitKind.CLEAN:
        if h.outstanding:  # a job thread died outside its job's handling: not a result
            s.harness_errors.append(f"worker {h.name} exited cleanly with "
                                    f"{len(h.outstanding)} job(s) unreported")
            s.requeue(h, None)
        end_worker(s, h, rc, "exit", "clean")
        s.retire(h)
        _tidy(h)
        return
    stderr = h.tail(h.stderr_path)
    attr = attribute(h.journal(), stderr)
    if attr.last_step is None and h.judge is not None:
        attr.last_step = h.judge.step
    exposure = None
    failed_step = _step_after_bye(attr, sig is not None) if said_bye else None
    if failed_step:  # a step its exit path journaled failed before the exit itself
        attr.last_step = failed_step
    elif said_bye:  # its work was done and reported: the process's exit itself failed
        attr.last_step = Step.WORKER_EXIT.label
        exposure = "process_exit"
    job = s.job_of(h, attr)
    cls = FailureClass.ERROR if said_bye and sig is None else FailureClass.CRASH
    child = None
    if group is not None:  # an exec job: its group's processes (children.py)
        cls, child = exec_class(h.judge, sig, said_bye, cls)
        sig = child.signal if child is not None else sig
    # the core to read: the process's own, or the crashed child's (moved into the run folder)
    core_pid, core_dir, core_exe = h.pid, h.cwd, h.judge.exe if h.judge else s.python
    if child is not None:
        core_pid, core_exe = child.pid or 0, child.exe or child.name
        core_dir = child.core_path.parent if child.core_path else group.dest \
            if child.pid and group is not None else None
    crash: Future[evidence.CrashEvidence] | None = None
    pending_tids: list[int] = []
    budget: dict[str, Any] | None = None
    full = True
    if sig is not None:  # a signal death: its core and stacks cost a debugger's CPU-second
        key = evidence_key(cls, sig, attr.last_step, job.pattern if job else None) + \
            (f"|child {child.name}" if child else "")
        if h.cores or child is not None:  # (a child's: its core, else a kernel or output line)
            full, n = spend(s.evidence_seen, key, s.cfg.evidence_budget)
        else:  # no core to read: counted, and the mode's count (0 if new) asks for cores
            s.evidence_seen[key] += 0
            full, n = False, s.evidence_seen[key]
        budget = {"key": key, "occurrence": n, "full": full, "budget": s.cfg.evidence_budget,
                  "cores": h.cores if child is None else child.core_path is not None}
    keep = child.pid if child is not None and full and \
        s.folders < _MAX_FAILURE_FOLDERS else None
    if group is not None:
        group.discard(keep=keep)  # every core of its group but the one read (never left)
    if sig is not None and core_dir is not None and (s.folders >= _MAX_FAILURE_FOLDERS or
                                                     not full):
        postmortem.discard_core(core_pid, core_dir)  # no folder to put its stacks in, or counted
    elif sig is not None and core_dir is not None:  # native stacks post mortem (core + gdb, ...)
        reader = h.journal()
        tids = [v.native_tid for v in reader.all_slots()] if reader is not None else []
        tids += child.tids if child is not None else []
        pending_tids = tids
        # gdb on a core takes ~1 s (10 s for a CUDA process): in the background, so a crash
        # storm (the incident's 40-60% of exits) never stalls the soak or its other workers
        crash = s.crash_pool().submit(evidence.collect_crash, core_pid, core_exe, core_dir,
                                      stderr if child is None else "",
                                      since_wall=h.started_wall, tids=tids)
    folder = new_folder(s, cls, h.name) if full else None
    what = f"killed by {sig}" if sig and child is None else f"exited with status {rc}"
    if rc == 0:
        what = "exited 0 before finishing its jobs"
    if child is not None:
        what += f"; {child.describe()},"
    when = f"at {failed_step}, after its work was done and reported, before its exit" \
        if failed_step else "after its work was done and reported" if said_bye else \
        f"while running {_job_text(job)}"
    message = f"worker {h.name} {what} {when}"
    after = telemetry.snapshot(s.cfg.target.backend.value) if full else {}
    facts: dict[str, Any] = {"stack_source": "pending" if crash else "none"}
    if budget is not None:
        facts["evidence_budget"] = budget
    if h.judge is not None:
        facts.update(h.judge.facts())
    if child is not None:
        facts["child_crash"] = child.as_dict()
    meta = {"class": cls.value, "signal": sig, "exit_code": rc, "said_bye": said_bye,
            "last_step": attr.last_step, "in_flight": attr.in_flight,
            "attribution": attr.method, "native_tid": attr.native_tid, **facts,
            # upper bound: the last journal record precedes the death
            "timing": {"noticed_after_last_record_s": (noticed_ns - attr.last_record_ns) / 1e9
                       if attr.last_record_ns else None}}
    files = {} if crash else {
        "stacks.txt": "# none\nthe process exited with a status, not a signal: no stack\n"
        + (f"its child died by {child.signal}: {child.line}\n" if child else "")}
    write_evidence(s, folder, h, job, attr, {
        **files, "telemetry_after.json": json.dumps(after, indent=1),
        "failure.json": json.dumps(meta, indent=1)})
    row = record(s, cls, h, job, sig, attr, message, folder, evidence_facts=facts,
                 exposure=exposure)
    if crash is not None:
        s.pending_crashes.append(PendingCrash(crash, row, folder, meta, facts, pending_tids))
    end_worker(s, h, rc, f"exit {rc}" if child or not sig else sig, _OUTCOMES.get(cls, "error"))
    s.requeue(h, job)  # after end_worker: it names the job a process-per-job worker ran
    s.restart(h)
    s.retire(h)


def exec_class(judge: Judge | None, sig: str | None, said_bye: bool, cls: FailureClass
               ) -> tuple[FailureClass, ChildCrash | None]:
    """An exec job's class, and the process of its group to blame. The command killed by a
    signal: its own crash (its children's cores are not read). Else a process of its group
    killed by one (a compiler the test ran; `children.GroupWatch.crashed`): a `crash` with
    that process's signal, led by its frames, whatever the command printed. Else a non-zero
    exit before its done marker is `failed`: the command said its tests failed. After the
    marker it stays an `error` at worker-exit (the work was done; its exit failed)."""
    if sig is not None or judge is None or judge.group is None:
        return cls, None
    child = judge.child_crash()
    if child is not None:
        return FailureClass.CRASH, child
    return (cls if said_bye else FailureClass.FAILED), None


_OUTCOMES: dict[FailureClass, str] = {FailureClass.CRASH: "crash",
                                      FailureClass.FAILED: "failed"}  # a worker row's outcome
#   ("failed" is never a process-exit exposure: it failed while running, at step `run`)


_EVIDENCE_BATCHES: int = 4  # hang batches whose evidence is taken at once (8 stack tools each)


def on_stuck(s: Session, stuck: list[tuple[WorkerHandle, Stuck]],
             scan_gap_s: float | None = None) -> None:
    """Workers past a deadline: drain their results, take the evidence (telemetry, stacks) of
    each batch while all its workers are alive, then kill them, then record one failure each.

    The evidence is taken in a background thread while this loop goes on scanning (every
    watchdog period): a worker that passes its deadline meanwhile is declared then, and its
    evidence taken at once in a batch of its own, instead of after this batch is done (hangs
    in a burst were declared up to an evidence time late). Each batch is killed and recorded
    as soon as its evidence is in, the kill in the background too. New batches start only for
    _RESCAN_FOR_S, and not once the session is stopping, interrupted or at --max-failures:
    the session's own tick (exits, interrupts, the stop conditions) waits while this loops.
    `workers_stuck` in a failure's timing counts its batch. scan_gap_s: the time since the
    previous deadline scan; far above the scan period, the parent was busy (a crash's
    evidence, a slow tick)."""
    backend = s.cfg.target.backend.value
    pool = ThreadPoolExecutor(_EVIDENCE_BATCHES, thread_name_prefix="hang-evidence")
    batches: dict[Future[_Taken],
                  tuple[list[tuple[WorkerHandle, Stuck]], float, float | None]] = {}
    handled: dict[int, WorkerHandle] = {}  # by id(), holding the handles (no id reuse)

    def start(group: list[tuple[WorkerHandle, Stuck]], gap: float | None) -> None:
        t0 = time.monotonic()
        for h, _ in group:
            handled[id(h)] = h
            s.drain(h)  # jobs that finished while it hung keep their results
        fut = pool.submit(_take_and_kill, [h for h, _ in group], backend,
                          # SIGUSR1 (the faulthandler fallback) only where a handler is
                          # installed: our workers once they said hello (and dump_stacks
                          # checks that it still is)
                          {h.pid: h.stderr_path for h, _ in group
                           if h.hello_at is not None and h.judge is None},
                          min(h.started_wall for h, _ in group), s.run_dir, s.python,
                          cancel)
        batches[fut] = (group, t0, gap)

    rescan_until = time.monotonic() + _RESCAN_FOR_S
    cancel = threading.Event()  # an interrupt: batches kill at once, without cores
    try:
        start(stuck, scan_gap_s)
        while batches:
            if s.interrupt is not None:
                cancel.set()
            done, _ = wait(list(batches), timeout=_RESCAN_S, return_when=FIRST_COMPLETED)
            for fut in done:
                group, t0, gap = batches.pop(fut)
                _finish_stuck(s, group, fut.result(), t0, gap)
            capped = s.cfg.max_failures is not None and \
                s.tally.failure_count >= s.cfg.max_failures
            if batches and len(batches) < _EVIDENCE_BATCHES and not s.stopping and not capped \
                    and s.interrupt is None and time.monotonic() < rescan_until:
                gap = s.scan_gap()
                more = s.find_stuck(skip=handled)
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
            postmortem.discard_core(h.pid, h.cwd)  # never left in a user's folder
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


def _finish_stuck(s: Session, stuck: list[tuple[WorkerHandle, Stuck]], taken: _Taken,
                  t0: float, scan_gap_s: float | None) -> None:
    """One batch of stuck workers, evidence taken and killed: one failure each. The verdict
    was fixed when the deadline passed: a worker that died while its evidence was taken (a
    debugger that killed it, a stall that ended by itself) is still the hang it was, and that
    death is said inside its record."""
    hang, codes, after = taken.hang, taken.codes, taken.after
    t_stacks, t_killed = taken.t_stacks, taken.t_killed
    for h, st in stuck:
        s.drain(h)
        rc = taken.ended[h.pid] if h.pid in taken.ended else codes.get(h.pid)
        cls = FailureClass.TEARDOWN_HANG if st.teardown else FailureClass.HANG
        stacks = hang.processes[h.pid].stacks
        slot = _culprit_slot(h, st.slot, stacks)
        attr = attribute(h.journal(), "", slot_hint=slot)
        if st.slot is None or attr.last_step is None:
            attr.last_step = st.label
        if h.judge is not None and not attr.native_tid:  # no journal names a thread: the
            attr.native_tid = _main_tid(h)  # main thread is where a tool process waits
        job = s.job_of(h, attr)
        folder = new_folder(s, cls, h.name)
        deadline = s.cfg.teardown_timeout_s if st.teardown else s.cfg.timeout_s
        where = "starting up" if st.label == STARTUP_STEP else f"stuck in {attr.last_step}"
        message = (f"worker {h.name} {where} for more than {deadline:g} s while running "
                   f"{_job_text(job)}")
        if len(stuck) > 1:
            message += f" ({len(stuck)} workers stuck at once)"
        timing = {"stacks_s": hang.seconds, "kill_s": t_killed - t_stacks,
                  "evidence_and_kill_s": t_killed - t0, "deadline_s": deadline,
                  "declared_after_step_begin_s": st.age_s, "workers_stuck": len(stuck),
                  "scan_gap_s": scan_gap_s, "core_s": taken.core_s if taken.cored else None}
        facts: dict[str, Any] = hang.processes[h.pid].summary(attr.native_tid or _main_tid(h))
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
        write_evidence(s, folder, h, job, attr, {
            **hang.files(h.pid),
            "telemetry_after.json": json.dumps(after, indent=1),
            "failure.json": json.dumps({"class": cls.value, "last_step": attr.last_step,
                                        "in_flight": attr.in_flight, "timing": timing,
                                        "native_tid": attr.native_tid,
                                        "attribution": attr.method, "unkillable": h.unkillable,
                                        "exit_code": rc, **facts}, indent=1)})
        record(s, cls, h, job, None, attr, message, folder, evidence_facts=facts,
               exposure=exposure)
        reason = "unkillable (D state)" if h.unkillable else cls.value
        end_worker(s, h, rc, reason, "hang")
        s.requeue(h, job)
        s.restart(h)
        s.retire(h)


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


def record_startup(s: Session, failure: dict[str, Any]) -> None:
    """A failure of the stack seen before the soak began (the driver probe loaded the driver,
    then crashed or stalled in its teardown): recorded like any other, and the run goes on."""
    cls = FailureClass(failure["class"])
    folder = new_folder(s, cls, "probe")
    attr = Attribution("probe", last_step=failure["step"],
                       native_tid=failure.get("native_tid") or 0)
    if folder is not None:
        for name, text in failure.get("files", {}).items():
            (folder / name).write_text(text)
    record(s, cls, None, None, failure.get("signal"), attr, failure["message"], folder,
           evidence_facts=failure.get("evidence", {}), exposure="process_exit")
