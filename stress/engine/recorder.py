"""Where a soak's failures are written: one row each (committed at once), an evidence folder
for crashes and hangs (up to a cap), the evidence budget that decides which crashes get their
core read, and the post-mortem stack reads still under way. capture.py and hangs.py decide
what a failure is; this writes it down; the session owns one Recorder.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.engine import evidence, mismatch, postmortem
from stress.engine.attribution import Attribution
from stress.engine.config import SoakConfig
from stress.engine.corenotes import pattern_collides
from stress.engine.jobs import Job
from stress.engine.observer import Outcome
from stress.engine.progress import Progress
from stress.engine.records import Records
from stress.engine.tally import RunTally
from stress.engine.workermanage import WorkerHandle
from stress.fs import atomic_write
from stress.vocab import Engine, FailureClass, signal_name

MAX_FAILURE_FOLDERS: int = 200  # crash/hang folders per run; errors take none
MAX_MISCOMPARE_FOLDERS: int = 50  # miscompare folders per run, one per program at most: its
#   inputs, expected and actual results (a wrong program is wrong the same way every time;
#   the counts carry the rest)
_CRASH_READERS: int = 2  # post-mortem stack readers at once: gdb is CPU-bound; more would
#   slow the workers under test more than it speeds up the evidence
_CORE_SAMPLE_EVERY: int = 8  # once every crash mode has its evidence, one new process in
#   this many keeps core dumps on: a storm of one mode stops paying for cores nobody reads,
#   and a new mode still gets its first core within a few processes


@dataclass
class PendingCrash:
    """A crash recorded at once, whose post-mortem stacks are still being read."""

    future: Future[evidence.CrashEvidence]
    row: int
    folder: Path | None
    meta: dict[str, Any]  # failure.json so far
    facts: dict[str, Any]  # the row's evidence so far
    tids: list[int] = field(default_factory=list)  # the journal's threads


def failed_outcome(cls: FailureClass, h: WorkerHandle | None, job: Job | None) -> Outcome:
    """A process failure as the observer sees it: its job (or none) failed in `cls`."""
    return Outcome(job, h.pid if h else 0, True, (cls.value,))


def evidence_key(cls: FailureClass, sig: str | None, step: str | None,
                 pattern: str | None) -> str:
    """The mode a crash's evidence budget is counted in, known before its core is read:
    class, signal, step and pattern (a raw fact each: two modes that share a class and a
    signal at different steps or patterns keep a budget each)."""
    return f"{cls.value}|{sig or ''}|{step or ''}|{pattern or ''}"


NOTES_CORES_ENV: str = "IREE_STRESS_NOTES_CORES"  # "0": the budget's processes dump no core
#   at all (no fault sites for counted crashes), as before notes-only cores


def notes_cores(cfg: SoakConfig) -> bool:
    """Whether the budget's processes may dump notes-only cores (`no_cores`): processes that
    are not Python workers (those run faulthandler, which re-raises the signal: no fault site,
    measured 0.911x the exits per second of no cores in a crash storm,
    bench/results/evidence_budget-cpu-notes.txt), where no two of them write one file (a
    core_pattern without the pid: absolute, or relative with copies of an exec command in one
    folder; each such `core` would replace the one a sampled crash is about to have read), and
    NOTES_CORES_ENV is not "0"."""
    pattern, uses_pid = postmortem.read_core_pattern()
    shared = pattern_collides(pattern, uses_pid) and (
        pattern.startswith("/") or Engine.of(cfg.engine) is Engine.EXEC and cfg.workers > 1)
    return os.environ.get(NOTES_CORES_ENV) != "0" and \
        Engine.of(cfg.engine) is not Engine.PYTHON and not shared


def no_cores(pid: int, notes: bool = True) -> bool:
    """Turns full core dumps off for process `pid` (the evidence budget's processes that need
    none): where `notes` (`notes_cores`) and core_pattern writes files, a core of its headers
    and notes only (`postmortem.notes_only`: a crash's fault site for a few KiB), else its soft
    RLIMIT_CORE to 0 (a |pipe handler is given the whole core whatever the limit). The hard
    limit is left as it is, so that a hang's kill can raise it again (corekill.dump). Called
    at launch and again at the worker's hello: the worker's own prepare_child raises the soft
    limit when it starts. Returns whether it may still dump a full core (True when nothing
    could be changed)."""
    if notes and not postmortem.read_core_pattern()[0].startswith("|") and \
            postmortem.notes_only(pid):
        return False
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


class Recorder:
    """A run's failure records and evidence folders (module doc)."""

    def __init__(self, config: SoakConfig, run_id: str, run_dir: Path, store: Records,
                 tally: RunTally, progress: Progress, python: str):
        self.cfg, self.run_id, self.run_dir = config, run_id, run_dir
        self.store, self.tally, self.progress, self.python = store, tally, progress, python
        self.folders = 0  # evidence folders written (crashes and hangs only)
        self.miscompared: set[str] = set()  # programs whose miscompare has a folder
        self.evidence_seen: Counter[str] = Counter()  # cored crashes per mode (the budget)
        self.notes_cores = notes_cores(config)  # its other processes dump their notes
        self.core_launches = 0  # processes started once every mode had its evidence
        self.pending: list[PendingCrash] = []  # stacks still being read
        self.batch_exits: Counter[int] = Counter()  # exit-family waves: processes ended
        self._readers: ThreadPoolExecutor | None = None

    def record(self, cls: FailureClass, h: WorkerHandle | None, job: Job | None,
               sig: str | None, attr: Attribution, message: str, folder: Path | None,
               count: bool = True, evidence_facts: dict[str, Any] | None = None,
               exposure: str | None = None) -> int:
        """One failure row (committed at once). `count`: a process-level failure (crash,
        hang): counted here; errors and miscompares are counted from the job's result."""
        if count:
            self.tally.process_failed(cls)
        row = self.store.add_failure(self.run_id, {
            "class": cls.value, "signal": sig, "job_index": job.index if job else None,
            "program": job.program if job else None, "pattern": job.pattern if job else None,
            "seed": job.seed if job else None, "worker": h.worker_id if h else None,
            "pid": h.pid if h else None, "last_step": attr.last_step,
            "in_flight": attr.in_flight, "steps": attr.steps,
            "artifacts": str(folder) if folder else None, "message": message,
            "attribution": attr.method, "elapsed_s": time.monotonic() - self.tally.started,
            "native_tid": attr.native_tid or None, "evidence": evidence_facts or {},
            "exposure": exposure})
        if h is not None:
            self.progress.failure(cls, h, job, attr, sig, folder)
        return row

    def job_done(self, h: WorkerHandle, job: Job, payload: dict[str, Any]) -> bool:
        """A job's result (a job_done message): its row, its failure counts, a row for each
        failure it noted (errors and miscompares: no folder, counted from the result).
        Returns whether it failed."""
        res = payload["result"]
        failed = self.tally.job_ended(job.pattern, res["invocations"], res["errors"],
                                      res["miscompare"])
        self.store.add_job(self.run_id, h.worker_id, payload, "failed" if failed else "ok")
        if res.get("counts"):
            self.store.add_failure_counts(self.run_id, payload["job"], res["counts"])
        for note in res["failures"]:
            attr = Attribution("worker-report", last_step=note["step"],
                               in_flight=note.get("in_flight", []), steps=note.get("steps", []),
                               native_tid=note.get("native_tid", 0))
            folder = self._miscompare_folder(h, job, attr, note)
            self.record(FailureClass(note["class"]), h, job, None, attr, note["message"],
                        folder=folder, count=False)
        return failed

    def _miscompare_folder(self, h: WorkerHandle, job: Job, attr: Attribution,
                           note: dict[str, Any]) -> Path | None:
        """The folder of a program's first miscompare that came with its evidence: inputs,
        expected, actual, tolerance (mismatch.write), the job and its repro.sh."""
        ev = note.get("evidence")
        if not isinstance(ev, dict) or job.program in self.miscompared or \
                len(self.miscompared) >= MAX_MISCOMPARE_FOLDERS:
            return None
        self.miscompared.add(job.program)
        folder = self.run_dir / "failures" / \
            f"m{len(self.miscompared):03d}-miscompare-{job.program}"
        folder.mkdir(parents=True, exist_ok=True)
        self.write_evidence(folder, h, job, attr, {"failure.json": json.dumps(
            {"class": FailureClass.MISCOMPARE.value, "last_step": note["step"],
             "message": note["message"], "program": job.program, "pattern": job.pattern,
             "seed": job.seed, "invocation": note.get("invocation")}, indent=1)})
        mismatch.write(folder, ev)
        return folder

    def new_folder(self, cls: FailureClass, name: str) -> Path | None:
        """A fresh evidence folder, or None past the cap (the failure is still recorded)."""
        if self.folders >= MAX_FAILURE_FOLDERS:
            return None
        self.folders += 1
        folder = self.run_dir / "failures" / f"{self.folders:04d}-{cls.value}-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def write_evidence(self, folder: Path | None, h: WorkerHandle, job: Job | None,
                       attr: Attribution, extra: dict[str, str]) -> None:
        if folder is not None:
            evidence.write_folder(folder, self.cfg, h.tail(h.stderr_path),
                                  h.tail(h.stdout_path), job, attr.journal_text, extra)
            if h.judge is not None:
                h.judge.add_evidence(folder)

    def end_worker(self, h: WorkerHandle, rc: int | None, reason: str, outcome: str) -> None:
        """The worker's row: how it ended, and what its exit exposed (a process that used a
        device and then exited is one exposure of the driver's exit path); for exit-family
        waves, the order in which the processes of its batch ended."""
        job = next(iter(h.recent.values()), None) if h.ephemeral else None
        if job is None and h.ephemeral:
            job = next(iter(h.outstanding.values()), None)
        facts = {**(h.facts or {}), **({"bye": h.bye} if h.bye else {})}
        order = None
        if h.batch is not None:
            self.batch_exits[h.batch] += 1
            order = self.batch_exits[h.batch]
        pattern = job.pattern if job else ("pool" if not h.ephemeral else None)
        self.tally.processes_ended += 1
        self.store.end_worker(h.db_row, rc, signal_name(rc), reason, facts or None,
                              outcome=outcome, device_used=int(bool(h.recent)),
                              pattern=pattern, job_index=job.index if job else None,
                              bye_at=h.bye_at,
                              exit_path=pattern if h.batch is not None else None,
                              batch=h.batch, exit_order=order)

    # ---- the evidence budget and post mortems --------------------------------------------
    def cores_wanted(self) -> bool:
        """Whether the next process may dump a core: while any crash mode seen has less than
        its evidence budget of cored crashes (a mode seen in a process without cores is
        counted at 0), else one process in _CORE_SAMPLE_EVERY (the budget's later samples,
        and the first core of a mode not seen yet). A core costs its writing before the
        death is seen: ~0.1 s for a cpu worker here (112 MiB), ~1 s for a CUDA one."""
        budget = self.cfg.evidence_budget
        if budget <= 0 or not self.evidence_seen or \
                any(n < budget for n in self.evidence_seen.values()):
            return True
        self.core_launches += 1
        return self.core_launches % _CORE_SAMPLE_EVERY == 0

    def read_crash(self, pid: int, exe: str, core_dir: Path, stderr: str, since_wall: float,
                   tids: list[int], claim_dir: Path | None = None
                   ) -> Future[evidence.CrashEvidence]:
        """A crash's native stacks, read post mortem (core + gdb, ...) in the background: gdb
        on a core takes ~1 s (10 s for a CUDA process), so a crash storm (the incident's
        40-60% of exits) never stalls the soak or its other workers."""
        if claim_dir is not None:  # out of the shared folder now, not when a reader is free
            postmortem.claim_cores(pid, core_dir, claim_dir)
        if self._readers is None:
            self._readers = ThreadPoolExecutor(_CRASH_READERS, thread_name_prefix="post-mortem")
        return self._readers.submit(evidence.collect_crash, pid, exe, core_dir, stderr,
                                    since_wall=since_wall, tids=tids, claim_dir=claim_dir)

    def collect_finished(self, wait: bool = False) -> None:
        """Completes the crashes whose stacks are read: their files, failure.json and the
        row's evidence and crashed thread. `wait`: all of them (end of run; each read is
        bounded)."""
        for p in list(self.pending):
            if not wait and not p.future.done():
                continue
            self.pending.remove(p)
            try:
                crash = p.future.result(timeout=postmortem.stacks_timeout_s() + 15)
                facts = {**p.facts, **crash.summary()}
                files = crash.files()
            except Exception as exc:  # a tool that hung past its bound, a parser bug: say so
                facts = {**p.facts, "stack_source": "none",
                         "note": f"post mortem failed: {exc!r}"}
                files = {"stacks.txt": f"# none\npost mortem failed: {exc!r}\n"}
            tid = facts.get("crashed_tid") if not p.meta.get("native_tid") else None
            if facts.get("crashed_tid") and p.meta.get("native_tid") and \
                    facts["crashed_tid"] != p.meta["native_tid"] and \
                    facts["crashed_tid"] in p.tids:
                # the journal blamed one thread, the core says another took the signal
                facts["blame_conflict"] = (f"the core says thread {facts['crashed_tid']} took "
                                           f"the signal; the journal blamed thread "
                                           f"{p.meta['native_tid']} "
                                           f"({p.meta.get('attribution')})")
            if p.folder is not None:
                meta = {**p.meta, **facts, **({"native_tid": tid} if tid else {})}
                for name, text in {**files, "failure.json": json.dumps(meta, indent=1)}.items():
                    atomic_write(p.folder / name, text.encode())
            self.store.update_failure(p.row, facts, tid)

    def close(self) -> None:
        """Stops the stack readers that have not begun (those under way are bounded)."""
        if self._readers is not None:
            self._readers.shutdown(wait=False, cancel_futures=True)

    def record_startup(self, failure: dict[str, Any]) -> Outcome:
        """A failure of the stack seen before the soak began (the driver probe loaded the
        driver, then crashed or stalled in its teardown): recorded like any other, and the
        run goes on. Returns it for the observer."""
        cls = FailureClass(failure["class"])
        folder = self.new_folder(cls, "probe")
        attr = Attribution("probe", last_step=failure["step"],
                           native_tid=failure.get("native_tid") or 0)
        if folder is not None:
            for name, text in failure.get("files", {}).items():
                (folder / name).write_text(text)
        self.record(cls, None, None, failure.get("signal"), attr, failure["message"], folder,
                    evidence_facts=failure.get("evidence", {}), exposure="process_exit")
        return failed_outcome(cls, None, None)
