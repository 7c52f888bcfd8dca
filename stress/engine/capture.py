"""What a process's end means: clean, a harness error, or a failure recorded with its evidence
and attributed to the job that was running ("worker w3 crashed while running ..."). Crashes
are seen at exit (the process is already gone: its journal, stderr and a post-mortem stack are
what is left); hangs are seen by the watchdog (hangs.py).

These functions decide; the session acts: each returns an `Ending` (which jobs run again,
whether a successor starts, what the observer is told) that the session applies, as
pytest-xdist's scheduler answers and its DSession acts.
"""

from __future__ import annotations

import enum
import json
import re
import signal
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from stress.engine import evidence, postmortem, telemetry
from stress.engine.attribution import Attribution, attribute
from stress.engine.children import ChildCrash, GroupWatch
from stress.engine.forkclient import RETURNCODE_LOST
from stress.engine.forkserver import EXIT_CHILD_SETUP
from stress.engine.jobs import Job
from stress.engine.journal import Step
from stress.engine.observer import Outcome
from stress.engine.recorder import (
    MAX_FAILURE_FOLDERS,
    PendingCrash,
    Recorder,
    evidence_key,
    failed_outcome,
    spend,
)
from stress.engine.workermanage import Judge, WorkerHandle, signal_group
from stress.stacktext import faulthandler_top
from stress.vocab import FailureClass, signal_name

_DUMP_BYTES: int = 64 << 10  # stderr read for the head of faulthandler's report (each thread
#   of the process adds its frames after it)

EXIT_HARNESS: int = 70  # worker.EXIT_HARNESS: iree-stress's own code failed in the worker


@dataclass
class Ending:
    """What the session does with a process that ended, in this order: tell the observer of
    its failure, give its jobs back, replace it (a pool worker, within the restart window),
    count a start that failed, retire it."""

    rerun: list[Job] = field(default_factory=list)  # jobs it held that another worker runs
    replace: bool = False  # a pool worker that died: a successor on its id
    count_restart: bool = False  # a one-job process that could not start: in the window too
    harness_error: str = ""  # iree-stress's own failure: the run cannot be trusted
    failed: Outcome | None = None  # the failure pinned on its job (or on none), observed
    ask_facts_again: bool = False  # it was to report the runtime facts and never said hello


def job_of(h: WorkerHandle, attr: Attribution) -> Job | None:
    """The job a failure of `h` is pinned on: the journal's, else a one-job process's own."""
    if attr.job_index is not None:
        job = h.outstanding.get(attr.job_index) or h.recent.get(attr.job_index)
        if job is not None:
            return job
    if h.ephemeral:
        jobs = list(h.outstanding.values()) or list(h.recent.values())
        return jobs[0] if jobs else None
    return None


def rerun_jobs(h: WorkerHandle, failed: Job | None) -> list[Job]:
    """The jobs sent to a dead worker that run again elsewhere (taken off it): all but the
    one that failed and, when the failure could not be pinned on a job, every job the worker
    had begun (one of them caused it: rerunning it elsewhere would spread the blame)."""
    begun: set[int] = set()
    if failed is None:
        reader = h.journal()
        if reader is not None:
            begun = {e.job for v in reader.all_slots() for e in v.entries}
    lost = [j for j in h.outstanding.values()
            if (failed is None or j.index != failed.index) and j.index not in begun]
    h.outstanding.clear()
    return lost


def job_text(job: Job | None) -> str:
    return job.describe() if job else "no job (setup or teardown)"


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


def on_exit(rec: Recorder, h: WorkerHandle, rc: int, noticed_ns: int) -> Ending:
    """A worker process ended (the session handled what it wrote first, a tool's output
    included). Clean when it said bye and exited as expected; a hang we killed was recorded
    by on_stuck; anything else is a failure (the exit status wins over what the worker
    said). `noticed_ns`: when the session saw the exit."""
    if h.killed_by_us:
        if h.cwd is not None:  # our SIGKILL leaves no core; SIGABRT might
            postmortem.discard_core(h.pid, h.cwd, h.judge.group.dest if h.judge is not None
                                    and h.judge.group is not None else None)
        if h.judge is not None and h.judge.group is not None:
            h.judge.group.discard()  # a hang's group: its processes' cores are not its evidence
        return Ending()
    signal_group(h.pid, signal.SIGKILL)  # whatever the worker left running in its group
    said_bye = h.bye_at is not None
    group = h.judge.group if h.judge is not None else None
    ask = h.facts_worker and h.hello_at is None  # the next worker reports the facts instead
    kind, why = classify_exit(rc, said_bye=said_bye, said_hello=h.hello_at is not None,
                              expected_rc=h.expected_rc, exec_group=group is not None,
                              python_exception=_python_exception(h) if rc == 1 else "")
    if kind is ExitKind.HARNESS:
        rerun = rerun_jobs(h, None)
        rec.end_worker(h, None if rc == RETURNCODE_LOST else rc, "harness error", "harness")
        return Ending(rerun, replace=True, ask_facts_again=ask,
                      count_restart=h.ephemeral,  # job processes that cannot start share the
                      #   restart budget
                      harness_error=f"worker {h.name} {why} (see {h.stderr_path})")
    if kind is ExitKind.CLEAN:
        ending = Ending(ask_facts_again=ask)
        if h.outstanding:  # a job thread died outside its job's handling: not a result
            ending.harness_error = (f"worker {h.name} exited cleanly with "
                                    f"{len(h.outstanding)} job(s) unreported")
            ending.rerun = rerun_jobs(h, None)
        rec.end_worker(h, rc, "exit", "clean")
        _tidy(h)
        return ending
    job, cls = _record_failure(rec, h, rc, said_bye, group, noticed_ns)
    # after end_worker (in _record_failure): it names the job a process-per-job worker ran
    return Ending(rerun_jobs(h, job), replace=True, failed=failed_outcome(cls, h, job),
                  ask_facts_again=ask)


def _record_failure(rec: Recorder, h: WorkerHandle, rc: int, said_bye: bool,
                    group: GroupWatch | None, noticed_ns: int) -> tuple[Job | None,
                                                                        FailureClass]:
    """A process's failure recorded with its evidence; (the job it is pinned on, its class)."""
    sig = signal_name(rc)
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
    job = job_of(h, attr)
    cls = FailureClass.ERROR if said_bye and sig is None else FailureClass.CRASH
    child = None
    if group is not None:  # an exec job: its group's processes (children.py)
        cls, child = exec_class(h.judge, sig, said_bye, cls)
        sig = child.signal if child is not None else sig
    # the core to read: the process's own, or the crashed child's (moved into the run folder)
    core_pid, core_dir, core_exe = h.pid, h.cwd, h.judge.exe if h.judge else rec.python
    shared = group.dest if group is not None and child is None else None  # copies share a
    #   cwd: the command's core is claimed out of it before it is trusted (issue 36)
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
        if h.cores:  # (a child's too: its core, else a kernel or output line; a command
            #   without full cores gives its children none either: their notes only)
            full, n = spend(rec.evidence_seen, key, rec.cfg.evidence_budget)
        else:  # no core to read: counted, and the mode's count (0 if new) asks for cores
            rec.evidence_seen[key] += 0
            full, n = False, rec.evidence_seen[key]
        budget = {"key": key, "occurrence": n, "full": full, "budget": rec.cfg.evidence_budget,
                  "cores": h.cores if child is None else child.core_path is not None}
    keep = child.pid if child is not None and full and \
        rec.folders < MAX_FAILURE_FOLDERS else None
    site = None  # where a crash whose stacks are not read faulted (its core's notes)
    if child is not None and child.core_path is not None and keep is None:
        site = postmortem.fault_site(postmortem.read_core_notes(child.core_path))
    if group is not None:
        group.discard(keep=keep)  # every core of its group but the one read (never left)
    if sig is not None and core_dir is not None and (rec.folders >= MAX_FAILURE_FOLDERS or
                                                     not full):  # no folder for its stacks,
        site = postmortem.site_and_discard(core_pid, core_dir, shared) or site  # or counted
    elif sig is not None and core_dir is not None:  # native stacks post mortem (core + gdb, ...)
        reader = h.journal()
        tids = [v.native_tid for v in reader.all_slots()] if reader is not None else []
        tids += child.tids if child is not None else []
        pending_tids = tids
        crash = rec.read_crash(core_pid, core_exe, core_dir, stderr if child is None else "",
                               since_wall=h.started_wall, tids=tids, claim_dir=shared)
    folder = rec.new_folder(cls, h.name) if full else None
    judged = h.judge.facts() if h.judge is not None else {}
    what = f"killed by {sig}" if sig and child is None else f"exited with status {rc}"
    if rc == 0:
        what = "exited 0 before finishing its jobs"
        if (judged.get("tests") or {}).get("ran") == 0:
            what = "exited 0, but its test runner ran no test (flagged: not a clean job)"
    if child is not None:
        what += f"; {child.describe()},"
    when = f"at {failed_step}, after its work was done and reported, before its exit" \
        if failed_step else "after its work was done and reported" if said_bye else \
        f"while running {job_text(job)}"
    message = f"worker {h.name} {what} {when}"
    after = telemetry.snapshot(rec.cfg.target.backend.value) if full else {}
    facts: dict[str, Any] = {"stack_source": "pending" if crash else "none"}
    if budget is not None:
        facts["evidence_budget"] = budget
        top = faulthandler_top(h.tail(h.stderr_path, _DUMP_BYTES)) if child is None else []
        if top:  # known for every crash, read or only counted (signatures join by it)
            facts["fault_top"] = top
        if site:  # (a crash whose stacks are read gets its site with them)
            facts["fault_site"] = site
    facts.update(judged)
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
    rec.write_evidence(folder, h, job, attr, {
        **files, "telemetry_after.json": json.dumps(after, indent=1),
        "failure.json": json.dumps(meta, indent=1)})
    row = rec.record(cls, h, job, sig, attr, message, folder, evidence_facts=facts,
                     exposure=exposure)
    if crash is not None:
        rec.pending.append(PendingCrash(crash, row, folder, meta, facts, pending_tids))
    rec.end_worker(h, rc, f"exit {rc}" if child or not sig else sig,
                   _OUTCOMES.get(cls, "error"))
    return job, cls




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
