"""The parent control loop of a soak: schedule -> workers -> records, with the watchdog.

Never blocks without a timeout: each tick selects on the workers' message pipes for at most
_TICK_S, then checks exits (crash), the journals (hang, teardown hang) and the end conditions.
The session acts; others decide: the job supply (scheduler), the pool (pool), what an ended
process means (capture, hangs: an Ending the session applies), where failures are written
(recorder).
"""

from __future__ import annotations

import select
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

from stress.engine import capture, hangs, postmortem, watchdog
from stress.engine.capture import Ending
from stress.engine.config import SoakConfig
from stress.engine.forkrunner import ForkRunner
from stress.engine.healthy import HealthySampler
from stress.engine.interrupts import Interrupts
from stress.engine.jobs import Job
from stress.engine.observer import Observer as Observer  # (re-exported: soak, gate)
from stress.engine.observer import Outcome as Outcome
from stress.engine.phases import Phases
from stress.engine.pool import RestartWindow, WorkerPool
from stress.engine.progress import Progress
from stress.engine.recorder import Recorder, no_cores
from stress.engine.records import Records
from stress.engine.runfiles import RunFiles
from stress.engine.scheduler import JobSupply, Queue
from stress.engine.tally import RunTally
from stress.engine.timeline import RunTimeline
from stress.engine.workermanage import LaunchSpec, Runner, SpawnRunner, State, WorkerHandle
from stress.vocab import Engine, RunStatus, StopReason, exit_path_of, signal_name

_TICK_S: float = 0.05  # crash noticed within one tick (+ the pipe EOF wakes us at once)
_WATCHDOG_PERIOD_S: float = 0.1  # journal scans are cheap, but not free at 300 wake-ups/s
_HEALTHY_SAMPLE_PERIOD_S: float = 0.2  # healthy journal windows: the baseline of correlation
_STARTUP_TIMEOUT_S: float = 120.0  # interpreter start-up to a journal file on a loaded box
_STOP_GRACE_S: float = 5.0  # after `stop`: a worker's last job + teardown, beyond the deadlines
_OBSERVE_PERIOD_S: float = 1.0  # how often an observer (the gate) may stop the run


class Interrupted(Exception):
    """SIGINT/SIGTERM to the parent: stop everything, keep what was recorded."""


class Session:
    def __init__(self, config: SoakConfig, run_id: str, run_dir: Path, store: Records,
                 phases: Phases | None = None, runner: Runner | None = None,
                 startup_failures: list[dict[str, Any]] | None = None,
                 observer: Observer | None = None,
                 stream: Callable[[], Iterable[Job]] | None = None):
        self.cfg = config
        self.phases = phases or Phases()
        self.run_id, self.run_dir, self.store = run_id, run_dir, store
        self.runner: Runner = runner or SpawnRunner()
        self.observer = observer
        self.last_observed = 0.0
        self.startup_failures = startup_failures or []
        self.supply = JobSupply(config, stream)
        self.tally = RunTally()
        self.files = RunFiles(config, run_dir)
        self.python = self.files.python
        self.pool = WorkerPool(self.runner, lambda: ForkRunner(self.python,
                                                               self.files.worker_env(), run_dir),
                               lambda: self.store.update_manifest(self.run_id, self.manifest()))
        self.restart_window = RestartWindow(config.max_worker_restarts)
        self.batch = 0  # exit-family jobs start in waves (batches) whose exits overlap
        self.workers = self.pool.workers
        self.harness_errors: list[str] = []  # our own failures: the run cannot be trusted
        self.unreaped = self.pool.unreaped
        self.interrupts = Interrupts()  # (the caller handles signals: interrupts.handled())
        self.stopping = False
        self.stop_reason = ""
        self.facts: dict[str, Any] = {}
        self.facts_requested = False  # asked of one worker; asked again if it dies first
        self.progress = Progress(config, self.tally, self.workers)
        self.recorder = Recorder(config, run_id, run_dir, store, self.tally, self.progress,
                                 self.python)
        self.deadlines = hangs.Deadlines(
            watchdog.Limits(config.timeout_s, config.teardown_timeout_s, _STARTUP_TIMEOUT_S,
                            _STOP_GRACE_S), self.workers, time.monotonic_ns)
        self.healthy = HealthySampler(store, run_id, config.seed)
        self.timeline = RunTimeline(store, run_id, config.driver, self.files.devices)
        self.last_watchdog = self.last_sample = 0.0
        # process-per-job runs beside the pool on half the worker budget (all of it when alone)
        self.ppj_slots = config.workers if not self.supply.enabled[Queue.POOL] else \
            max(1, config.workers // 2)

    def manifest(self) -> dict[str, Any]:
        return self.files.manifest(self.facts, self.timeline.note, self.pool.exit_runner_note)

    # ---- scheduling --------------------------------------------------------------------
    def top_up(self) -> None:
        """Pool workers started and fed up to 2 x threads jobs each; one-job processes started
        within their slots (exit-family ones in waves)."""
        if self.stopping:
            return
        pool = [h for h in self.workers.values() if not h.ephemeral]
        if self.supply.enabled[Queue.POOL] and len(pool) < self.cfg.workers:
            for _ in range(self.cfg.workers - len(pool)):
                if not self.supply.peek(Queue.POOL):
                    break
                self._spawn(self.pool.new_id(), ephemeral=False)
        for h in pool:
            if h.state is State.RUNNING:
                h.send_jobs(self.supply.for_pool(len(h.outstanding),
                                                 h.room(2 * self.cfg.threads)))
            if h.state is State.RUNNING and not h.outstanding and (
                    h.retiring or (self.supply.exhausted(Queue.POOL) and
                                 not self.supply.queued(Queue.POOL))):
                h.stop()
        ephemeral = [h for h in self.workers.values() if h.ephemeral and not
                     (h.judge is not None and h.proc.returncode is not None)]  # exited tool
        exiting = any(h.batch is not None for h in ephemeral)
        wave: int | None = None
        while self.supply.enabled[Queue.ONE_JOB] and len(ephemeral) < self.ppj_slots:
            if not self.runner.ready():  # a runner may hold launches back
                break
            job = self.supply.next_process(wave_running=exiting and wave is None)
            if job is None:
                break
            exit_path = exit_path_of(job.pattern)
            h = self._spawn(self.pool.new_id(), True, exit_path is not None, job)
            if exit_path is not None:
                if wave is None:
                    self.batch += 1
                    wave = self.batch
                h.batch, h.expected_rc = wave, exit_path.expected_returncode
            h.send_job(job)
            h.stop()
            ephemeral.append(h)

    def _spawn(self, wid: int, ephemeral: bool, exit_job: bool = False,
               job: Job | None = None) -> WorkerHandle:
        gen = self.pool.next_generation(wid)
        spec = LaunchSpec(wid, gen, self.python, self.files.config_for(wid), self.run_dir,
                          self.files.worker_env(), ephemeral, facts=not self.facts_requested,
                          job=job, timeout_s=self.cfg.timeout_s,
                          teardown_timeout_s=self.cfg.teardown_timeout_s)
        self.facts_requested = True
        h = self.pool.launch(spec, exit_job)
        h.facts_worker = spec.facts
        if not self.recorder.cores_wanted():
            h.cores = no_cores(h.pid, self.recorder.notes_cores)
        if not ephemeral and self.cfg.max_jobs_per_worker is not None:
            h.job_limit = self.pool.job_limit(self.cfg.max_jobs_per_worker, self.cfg.workers)
        h.db_row = self.store.add_worker(self.run_id, wid, gen, h.pid)
        if self.tally.soak_started is None and Engine.of(self.cfg.engine) is not Engine.PYTHON:
            self.tally.soak_started = time.monotonic()  # a tool process runs its job at once
        if len(self.files.devices) > 1:
            self.timeline.worker_device(h.db_row, self.files.device_for(wid))
        self.workers[wid] = h
        return h

    # ---- messages ----------------------------------------------------------------------
    def dispatch(self, h: WorkerHandle, name: str, payload: dict[str, Any]) -> None:
        handler = getattr(self, f"on_{name}", None)
        if handler is None:
            raise ValueError(f"unknown message {name!r} from worker {h.name}")
        try:
            handler(h, payload)
        except (KeyError, TypeError, ValueError) as exc:  # a malformed message: our bug
            self.harness_errors.append(f"worker {h.name}: bad {name!r} message ({exc!r})")

    def on_garbled(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires for a message line that is not JSON: the protocol broke (a harness error)."""
        self.harness_errors.append(f"worker {h.name}: garbled message {payload['line']!r}")

    def on_hello(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires once per worker after it imported the runtime (with facts for the first)."""
        h.facts = payload
        h.hello_at = time.monotonic()
        if not h.cores:  # its start-up (prepare_child) raised the core limit again
            no_cores(h.pid, self.recorder.notes_cores)
        if self.tally.soak_started is None:
            self.tally.soak_started = h.hello_at  # the worker takes its first job now
        if not self.facts and "iree_runtime" in payload:
            self.facts = payload
            self.store.update_manifest(self.run_id, self.manifest())

    def on_job_done(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires when a worker thread finished a job (whatever its outcome)."""
        job = Job.from_dict(payload["job"])
        h.finished(job.index)
        failed = self.recorder.job_done(h, job, payload)
        h.job_failed |= failed
        if self.observer is not None:
            self.observe(Outcome(job, payload.get("pid") or h.pid, failed, tuple(sorted(
                {n["class"] for n in payload["result"]["failures"]}))))

    def observe(self, outcome: Outcome) -> None:
        """A job's end (or a failure pinned on none) to the observer; its stop reason stops
        the run at once."""
        reason = self.observer.job(outcome) if self.observer is not None else None
        if reason:
            self.stop(reason)

    def on_jobs_dropped(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires when a stopping worker gave back jobs it held but had not begun: never run,
        in no count (the summary's stop reason says how many)."""
        for index in payload["jobs"]:
            if h.outstanding.pop(int(index), None) is not None:
                self.tally.jobs_not_started += 1

    def on_bye(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires when a worker finished its teardown and is about to exit."""
        h.bye_at = time.monotonic()
        h.bye = payload

    # ---- ended workers -----------------------------------------------------------------
    def exited(self, h: WorkerHandle, rc: int) -> None:
        """A process ended: what it wrote is handled first (a tool's output read as its
        messages), then capture judges the exit and the session applies its Ending."""
        noticed_ns = time.monotonic_ns()
        self.drain(h)
        if h.judge is not None and not h.killed_by_us:
            h.inbox.extend(h.judge.finish(rc))  # a tool process's results, from its output
            self.drain(h)
        self.end(h, capture.on_exit(self.recorder, h, rc, noticed_ns))

    def end(self, h: WorkerHandle, e: Ending) -> None:
        """Applies what capture or hangs decided of an ended worker (Ending's order)."""
        if e.ask_facts_again:
            self.facts_requested = False
        if e.harness_error:
            self.harness_errors.append(e.harness_error)
        if e.failed is not None:
            self.observe(e.failed)
        self.supply.give_back(e.rerun)
        if e.replace:
            self.restart(h)
        if e.count_restart and not self.restart_window.allow():
            self.stop(self.restart_window.describe())
        self.retire(h)

    def restart(self, h: WorkerHandle) -> None:
        """Replaces a dead pool worker, within --max-worker-restarts per restart window."""
        replace = self.pool.replace(h, self.restart_window, self.stopping)
        if replace is None:
            self.stop(self.restart_window.describe())
        elif replace:
            self.tally.restarts += 1
            self._spawn(h.worker_id, ephemeral=False)

    def retire(self, h: WorkerHandle) -> None:
        if self.pool.retire(h, self.stopping):
            self._spawn(h.worker_id, ephemeral=False)

    def drain(self, h: WorkerHandle) -> None:
        """Reads and handles everything the worker wrote: results that reached the pipe before
        a death or a kill are never lost."""
        while h.pump():
            if not h.inbox:
                break
            self._handle_inbox(h)
        self._handle_inbox(h)

    def _handle_inbox(self, h: WorkerHandle) -> None:
        while h.inbox:
            name, payload = h.inbox.popleft()
            self.dispatch(h, name, payload)

    def interrupted(self) -> bool:
        return self.interrupts.first is not None

    def may_declare(self) -> bool:
        """Whether hangs may still be declared while evidence is taken (hangs.Supervisor)."""
        return not self.stopping and not self.interrupted() and \
            not self.tally.at_max_failures(self.cfg.max_failures)

    def scan(self) -> None:
        """Every worker past a deadline: evidence of all of them first (a GPU-wide stall hangs
        several at once), then the kills (`hangs.on_stuck`, which goes on scanning while it
        takes evidence); each worker it ends is applied as it comes."""
        gap_s = self.deadlines.gap()
        stuck = self.deadlines.find()
        if stuck:
            with closing(hangs.on_stuck(self.recorder, self.deadlines, self, stuck,
                                        scan_gap_s=gap_s)) as ended:
                for h, ending in ended:
                    self.end(h, ending)

    # ---- main loop ---------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        if not self.stopping:
            self.stopping, self.stop_reason = True, reason
            self.supply.close()
            for h in self.workers.values():
                h.stop(drop_queued=not h.ephemeral)  # a job process's one job is its work

    def tick(self) -> None:
        fds = {h.msg_fd: h for h in self.workers.values()
               if h.state is not State.EXITED and not h.eof and
               (h.messages or h.proc.returncode is None)}  # a closed pipe, or the exit fd
        #   of a reaped process, would spin
        if fds:
            ready, _, _ = select.select(list(fds), [], [], _TICK_S)
        else:
            ready = []
            time.sleep(_TICK_S)
        for fd in ready:
            if fds[fd].messages:
                fds[fd].pump()
            else:  # an exit fd (pidfd), readable once its process ended: not read, and not
                fds[fd].eof = True  # selected again (a poll that cannot reap it would
                #   otherwise wake every tick until the deadline)
        now = time.monotonic()
        exited = []
        for h in list(self.workers.values()):
            self._handle_inbox(h)
            rc = h.poll()
            if rc is not None:
                exited.append((h, rc))
        # only tool processes (h.judge), counted out once exited (the worker count below tells
        #   whether on_exit ended anything else); a failed exec job first: its test's `core`
        #   moves before a successor's test in the same build folder can crash over it
        topped_up = bool(exited) and Engine.of(self.cfg.engine) is not Engine.PYTHON and \
            all(h.judge is not None and (h.judge.group is None or rc == 0) for h, rc in exited)
        queued: tuple[int, int, int] | None = None
        if topped_up:
            # tool processes: replacements start before the exits are handled (output checks,
            # evidence, store rows), so no slot idles while the parent works
            self.top_up()
            queued = (self.supply.queued(Queue.ONE_JOB), self.supply.queued(Queue.POOL),
                      len(self.workers))
        for h, rc in exited:
            self.exited(h, rc)
        if self.recorder.pending:
            self.recorder.collect_finished()
        if now - self.last_watchdog >= _WATCHDOG_PERIOD_S:
            self.last_watchdog = now
            self.scan()
        for h in list(self.unreaped):
            rc = h.poll()
            if rc is not None:
                self.unreaped.remove(h)
                self.store.end_worker(h.db_row, rc, signal_name(rc), "reaped after SIGKILL")
        if now - self.last_sample >= _HEALTHY_SAMPLE_PERIOD_S:
            self.last_sample = now
            self.healthy.sample(self.workers.values())
        clock = time.monotonic()
        if self.cfg.duration_s is not None and \
                clock - self.tally.soak_clock(clock, _STARTUP_TIMEOUT_S) >= self.cfg.duration_s:
            self.stop(StopReason.DURATION.text())
        if self.tally.at_max_failures(self.cfg.max_failures):
            self.stop(StopReason.MAX_FAILURES.text(f"{self.cfg.max_failures} reached"))
        if self.supply.drained() and \
                not any(h.outstanding for h in self.workers.values()):
            self.stop(StopReason.PLAN_DONE.text())
        if self.interrupts.first is not None:
            raise Interrupted(self.interrupts.first)
        if self.observer is not None and now - self.last_observed >= _OBSERVE_PERIOD_S:
            self.last_observed = now
            if reason := self.observer.should_stop():
                self.stop(reason)
        if not topped_up or queued != (self.supply.queued(Queue.ONE_JOB),
                                       self.supply.queued(Queue.POOL),
                                       len(self.workers) + len(exited)):
            self.top_up()  # (after the early one, only when exits put jobs back or ended
            #   other workers: a second call per job was ~3% of the parent's time)
        self.timeline.record()
        self.store.tick()
        self.progress.tick()

    def run(self) -> str:
        """Runs until done; returns the final status: completed | interrupted | failed. Call it
        inside `interrupts.handled()` so that an interrupt stops it cleanly."""
        self.files.write_worker_configs()
        self.store.start_run(self.run_id, self.cfg.seed, self.cfg.command, self.manifest(),
                             self.cfg.as_dict())
        status = RunStatus.COMPLETED
        try:
            for failure in self.startup_failures:
                self.observe(self.recorder.record_startup(failure))
            if self.timeline.start():
                self.store.update_manifest(self.run_id, self.manifest())
            cpu0 = time.process_time()
            with self.timeline.phase(self.phases, "soak"):
                self.top_up()
                while not self.stopping:
                    self.tick()
            # stop sent: jobs finish, workers exit
            with self.timeline.phase(self.phases, "teardown"):
                while self.workers:
                    self.tick()
            # the harness's own cost: the parent's CPU (all its threads) while jobs ran, per
            # job ended (the native engine's throughput is bounded by it on a busy machine)
            self.phases.record("parent_cpu", time.process_time() - cpu0, self.tally.jobs_ended)
            self.timeline.cooldown(self.phases, self.interrupted, self.store.tick)
            if self.interrupts.first is not None:  # interrupted while cooling down: still said so
                raise Interrupted(self.interrupts.first)
        except Interrupted as exc:
            status = RunStatus.INTERRUPTED
            self.stop_reason = StopReason.INTERRUPTED.text(str(exc))
            self._kill_all("interrupted")
        except (sqlite3.Error, OSError) as exc:  # e.g. the results disk is full
            status = RunStatus.FAILED
            self.stop_reason = StopReason.STORE_ERROR.text(str(exc))
            self._kill_all("store error")
        except Exception as exc:  # our own bug: one line, every worker stopped, store closed
            status = RunStatus.FAILED
            self.stop_reason = StopReason.INTERNAL_ERROR.text(f"{type(exc).__name__}: {exc}")
            self.harness_errors.append(self.stop_reason)
            sys.stderr.write(f"iree-stress: {self.stop_reason}\n")
            self._kill_all("internal error")
        finally:
            try:
                self.timeline.record(final=True)
                self.recorder.collect_finished(wait=True)  # every crash gets its stacks
            except (sqlite3.Error, OSError):
                pass
            self.recorder.close()
            self.pool.close()
            postmortem.sweep_cores(self.run_dir)  # cores nobody read (cap reached, races)
            if self.tally.jobs_not_started:
                self.stop_reason += f"; {self.tally.jobs_not_started} queued job(s) not started"
            if self.unreaped:
                self.stop_reason += (f"; {len(self.unreaped)} worker(s) survived SIGKILL (stuck "
                                     "in the kernel, D state)")
            if self.harness_errors:
                self.stop_reason += f"; harness errors: {'; '.join(self.harness_errors[:3])}"
            self.phases.count("soak", self.tally.invocations)
            self.phases.count("teardown", self.pool.next_worker_id)
            try:
                self.store.set_phases(self.run_id, self.phases.rows())
                self.store.end_run(self.run_id, status.value, self.stop_reason)
                self.store.close()
            except (sqlite3.Error, OSError) as exc:
                status = RunStatus.FAILED
                self.stop_reason += f"; store not closed: {exc}"
            self.progress.done()
        return status.value

    def _kill_all(self, reason: str) -> None:
        self.stopping = True
        for h in list(self.workers.values()):
            rc = h.kill_group(grace_s=0.5)
            try:
                self.drain(h)
                self.store.end_worker(h.db_row, rc, signal_name(rc), reason)
            except (sqlite3.Error, OSError, ValueError):
                pass
            self.retire(h)
