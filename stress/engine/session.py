"""The parent control loop of a soak: schedule -> workers -> records, with the watchdog.

Never blocks without a timeout: each tick selects on the workers' message pipes for at most
_TICK_S, then checks exits (crash), the journals (hang, teardown hang) and the end conditions.
"""

from __future__ import annotations

import json
import os
import platform
import random
import select
import shutil
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stress.engine import (
    capture,
    exitpaths,
    postmortem,
    procstate,
    telemetry,
    timeline,
    watchdog,
)
from stress.engine.attribution import Attribution, attribute, window_tokens
from stress.engine.config import SoakConfig
from stress.engine.forkrunner import ForkRunner
from stress.engine.jobs import Job
from stress.engine.observer import Observer as Observer  # (re-exported: soak, gate)
from stress.engine.observer import Outcome as Outcome
from stress.engine.phases import Phases
from stress.engine.pool import RestartWindow, WorkerPool
from stress.engine.progress import Progress
from stress.engine.records import Records
from stress.engine.scheduler import JobSupply, Queue, is_exit_job
from stress.engine.tally import RunTally
from stress.engine.workermanage import LaunchSpec, Runner, SpawnRunner, State, WorkerHandle
from stress.fs import atomic_write
from stress.vocab import FailureClass, signal_name

_TICK_S: float = 0.05  # crash noticed within one tick (+ the pipe EOF wakes us at once)
_WATCHDOG_PERIOD_S: float = 0.1  # journal scans are cheap, but not free at 300 wake-ups/s
_HEALTHY_SAMPLE_PERIOD_S: float = 0.2  # healthy journal windows: the baseline of correlation
_HEALTHY_SAMPLES_MAX: int = 4000  # per run (a reservoir: uniform over the whole run)
_SAMPLE_RECORDS: int = 40  # per thread: a 12-step window plus what is still in flight
_STARTUP_TIMEOUT_S: float = 120.0  # interpreter start-up to a journal file on a loaded box
_STOP_GRACE_S: float = 5.0  # after `stop`: a worker's last job + teardown, beyond the deadlines
_CRASH_READERS: int = 2  # post-mortem stack readers at once: gdb is CPU-bound; more would
#   slow the workers under test more than it speeds up the evidence
_OBSERVE_PERIOD_S: float = 1.0  # how often an observer (the gate) may stop the run
_CORE_SAMPLE_EVERY: int = 8  # once every crash mode has its evidence, one new process in
#   this many keeps core dumps on: a storm of one mode stops paying for cores nobody reads,
#   and a new mode still gets its first core within a few processes
_COOLDOWN_S: float = 8.0  # GPU runs keep sampling this long after the last worker exited: a
#   clock that never comes down after a clean teardown shows there (the "busy while idle"
#   detector needs more than its 5 s threshold of it)


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
        self.run_id, self.run_dir = run_id, run_dir
        self.store = store
        self.runner: Runner = runner or SpawnRunner()
        self.observer = observer
        self.last_observed = 0.0
        self.startup_failures = startup_failures or []
        self.supply = JobSupply(config, stream)
        self.tally = RunTally()
        self.pool = WorkerPool(self.runner, lambda: ForkRunner(self.python, self.worker_env(),
                                                               self.run_dir),
                               lambda: self.store.update_manifest(self.run_id, self.manifest()))
        self.restart_window = RestartWindow(config.max_worker_restarts)
        self.batch = 0  # exit-family jobs start in waves (batches) whose exits overlap
        self.batch_exits: Counter[int] = Counter()
        self.workers = self.pool.workers
        self.pool_started = 0  # pool workers started (the first --workers stagger their limits)
        self.folders = 0  # evidence folders written (crashes and hangs only)
        self.evidence_seen: Counter[str] = Counter()  # cored crashes per mode (the budget)
        self.core_launches = 0  # processes started once every mode had its evidence
        self.harness_errors: list[str] = []  # our own failures: the run cannot be trusted
        self.unreaped = self.pool.unreaped
        self.pending_crashes: list[capture.PendingCrash] = []  # stacks still being read
        self._crash_pool: ThreadPoolExecutor | None = None
        self.interrupt: str | None = None
        self.interrupts = 0
        self.stopping = False
        self.stop_reason = ""
        self.facts: dict[str, Any] = {}
        self.facts_requested = False  # asked of one worker; asked again if it dies first
        self.python = config.python or sys.executable
        self.config_path = run_dir / "worker-config.json"
        self.progress = Progress(config, self.tally, self.workers)
        self.last_watchdog = 0.0
        self.last_scan_ns: int | None = None  # the previous deadline scan (a hang's timing)
        self.spawn_env: dict[str, str] | None = None
        self.last_sample = 0.0
        self.healthy_samples = 0
        self.sample_rng = random.Random(config.seed)
        # several devices (--device A,B or --gpus): workers spread over them by worker id, so a
        # restarted worker keeps its GPU and each failure's GPU is its worker's
        self.devices = [u for u in config.device_uri.split(",") if u] or [config.device_uri]
        self.gpu_ordinals = telemetry.device_ordinals(self.devices)
        self.sampler: timeline.Sampler | None = None
        # the store's time line part (a test's fake store may have none: then no time line)
        self.timeline_store = store if isinstance(store, timeline.TimelineRecords) else None
        self.telemetry_note = ""
        # process-per-job runs beside the pool on half the worker budget (all of it when alone)
        self.ppj_slots = config.workers if not self.supply.enabled[Queue.POOL] else \
            max(1, config.workers // 2)

    # ---- setup -------------------------------------------------------------------------
    def worker_env(self) -> dict[str, str]:
        """Our environment, PYTHONPATH to this package *alone* (a folder holding only a link to
        it: the parent's site-packages, with its own iree.runtime and numpy, must not shadow a
        runtime stack's), then the user's --env."""
        env = dict(os.environ)
        # under another interpreter (a stack's venv) our own PYTHONPATH could shadow its
        # packages: only the link to this package goes there
        inherited = env.get("PYTHONPATH") if not self.cfg.python else None
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.worker_path()), inherited)
                                            if p)
        env["PYTHONFAULTHANDLER"] = "1"
        env.update(self.cfg.env)
        return env

    def worker_path(self) -> Path:
        """RUN_DIR/worker-path/stress: a copy of this package taken once, at the run's start
        (about 1 MiB, with its bytecode). Every worker of the run imports the code the parent
        runs, even when the checkout or the installed package changes under a long soak (a
        link to the live package gave a worker started after an update an ImportError on
        the H200: docs/gpu-runs.md)."""
        folder = self.run_dir.resolve() / "worker-path"
        copy = folder / "stress"
        if not copy.exists():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".stress-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(Path(__file__).resolve().parents[1], tmp, symlinks=True)
            tmp.rename(copy)
        return folder

    def device_for(self, wid: int) -> str:
        return self.devices[wid % len(self.devices)]

    def config_for(self, wid: int) -> Path:
        """The worker config naming this worker's device (one file per device)."""
        if len(self.devices) == 1:
            return self.config_path
        return self.config_path.with_name(f"worker-config-{wid % len(self.devices)}.json")

    def write_worker_config(self) -> None:
        for i, uri in enumerate(self.devices):
            self._write_worker_config(uri, self.config_for(i))

    def _write_worker_config(self, device_uri: str, path: Path) -> None:
        cfg = {"driver": self.cfg.driver, "device_uri": device_uri,
               "threads": self.cfg.threads, "seed": self.cfg.seed, "inject": self.cfg.inject,
               "programs": {p.name: {"program": p.to_dict(),
                                     "vmfb": str(self.cfg.artifacts[p.name])}
                            for p in self.cfg.programs}}
        atomic_write(path, json.dumps(cfg).encode())

    def manifest(self) -> dict[str, Any]:
        from stress import __version__

        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next((line.split(":", 1)[1].strip() for line in f
                            if line.startswith("model name")), "")
        except OSError:
            pass
        return {"tool_version": __version__, "iree_compiler": self.cfg.compiler_version,
                "iree_runtime": self.facts.get("iree_runtime"),
                "iree_revisions": self.facts.get("iree_revisions"),
                "driver": self.cfg.driver, "device_uri": self.cfg.device_uri,
                "devices": self.facts.get("devices"), "device_info": self.facts.get("device_info"),
                "loaded_gpu_libraries": self.facts.get("loaded_gpu_libraries"),
                "devices_used": self.devices,
                "hip_library": telemetry.hip_library_path(self.facts.get("device_info")),
                "telemetry": self.telemetry_note or None,
                "driver_error": self.facts.get("driver_error"),
                "worker_python": self.facts.get("python"), "worker_executable": self.python,
                "iree_runtime_path": self.facts.get("iree_runtime_path"),
                "exit_runner": self.pool.exit_runner_note or None,
                "host": platform.node(), "kernel": platform.release(),
                "os": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
                "parent_python": sys.version.split()[0], "seed": self.cfg.seed,
                "command": self.cfg.command, "config": self.cfg.as_dict()}

    # ---- scheduling --------------------------------------------------------------------
    def top_up(self) -> None:
        if self.stopping:
            return
        pool = [h for h in self.workers.values() if not h.ephemeral]
        if self.supply.enabled[Queue.POOL] and len(pool) < self.cfg.workers:
            for _ in range(self.cfg.workers - len(pool)):
                if not self.supply.peek(Queue.POOL):
                    break
                self.start_worker(ephemeral=False)
        for h in pool:
            batch: list[Job] = []
            room = 2 * self.cfg.threads if h.job_limit is None else \
                min(2 * self.cfg.threads, h.job_limit - h.jobs_sent + len(h.outstanding))
            while h.state is State.RUNNING and len(h.outstanding) + len(batch) < room:
                job = self.supply.next(Queue.POOL)
                if job is None:
                    break
                batch.append(job)
            h.send_jobs(batch)
            if h.state is State.RUNNING and not h.outstanding and (
                    h.retiring or (self.supply.done and not self.supply.queued(Queue.POOL))):
                h.stop()
        ephemeral = [h for h in self.workers.values() if h.ephemeral and not
                     (h.judge is not None and h.proc.returncode is not None)]  # exited tool
        exiting = [h for h in ephemeral if h.batch is not None]
        wave: int | None = None
        while self.supply.enabled[Queue.ONE_JOB] and len(ephemeral) < self.ppj_slots:
            if not self.runner.ready():  # a runner may hold launches back
                break
            job = self.supply.next(Queue.ONE_JOB)
            if job is None:
                break
            exit_job = is_exit_job(job)
            if exit_job and exiting and wave is None:
                # a batch starts together and exits together: wait for the last of the wave
                self.supply.put_back(job)
                break
            h = self.start_worker(ephemeral=True, exit_job=exit_job, job=job)
            if exit_job:
                if wave is None:
                    self.batch += 1
                    wave = self.batch
                h.batch = wave
                h.expected_rc = exitpaths.expected_returncode(exitpaths.ExitPath(job.pattern))
            h.send_job(job)
            h.stop()
            ephemeral.append(h)

    def start_worker(self, ephemeral: bool, exit_job: bool = False,
                     job: Job | None = None) -> WorkerHandle:
        wid = self.pool.new_id()
        return self._spawn(wid, ephemeral, exit_job, job)

    def _spawn(self, wid: int, ephemeral: bool, exit_job: bool = False,
               job: Job | None = None) -> WorkerHandle:
        gen = self.pool.next_generation(wid)
        if self.spawn_env is None:  # the same for every worker: built once (~1 ms each)
            self.spawn_env = self.worker_env()
        spec = LaunchSpec(wid, gen, self.python, self.config_for(wid), self.run_dir,
                          self.spawn_env, ephemeral, facts=not self.facts_requested,
                          job=job, timeout_s=self.cfg.timeout_s,
                          teardown_timeout_s=self.cfg.teardown_timeout_s)
        self.facts_requested = True
        h = self.pool.launch(spec, exit_job)
        h.facts_worker = spec.facts
        if not self.cores_wanted():
            h.cores = capture.no_cores(h.pid)
        if not ephemeral and self.cfg.max_jobs_per_worker is not None:
            h.job_limit = self._job_limit()
        h.db_row = self.store.add_worker(self.run_id, wid, gen, h.pid)
        if self.tally.soak_started is None and self.cfg.engine != "python":
            self.tally.soak_started = time.monotonic()  # a tool process runs its job at once
        if len(self.devices) > 1 and self.timeline_store is not None:
            self.timeline_store.set_worker_device(h.db_row, self.device_for(wid))
        self.workers[wid] = h
        return h

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

    def _job_limit(self) -> int:
        """--max-jobs-per-worker, staggered for the first pool workers (k of W gets (k+1)/W of
        it), so that they do not all retire, and restart, at the same moment."""
        limit = self.cfg.max_jobs_per_worker or 1
        k = self.pool_started
        self.pool_started += 1
        if k < self.cfg.workers:
            return max(1, limit * (k + 1) // self.cfg.workers)
        return limit

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
            capture.no_cores(h.pid)
        if self.tally.soak_started is None:
            self.tally.soak_started = h.hello_at  # the worker takes its first job now
        if not self.facts and "iree_runtime" in payload:
            self.facts = payload
            self.store.update_manifest(self.run_id, self.manifest())

    def on_job_done(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires when a worker thread finished a job (whatever its outcome)."""
        job = Job.from_dict(payload["job"])
        h.finished(job.index)
        res = payload["result"]
        failed = self.tally.job_ended(job.pattern, res["invocations"], res["errors"],
                                      res["miscompare"])
        h.job_failed |= failed
        self.store.add_job(self.run_id, h.worker_id, payload, "failed" if failed else "ok")
        if res.get("counts"):
            self.store.add_failure_counts(self.run_id, payload["job"], res["counts"])
        for note in res["failures"]:
            attr = Attribution("worker-report", last_step=note["step"],
                               in_flight=note.get("in_flight", []), steps=note.get("steps", []),
                               native_tid=note.get("native_tid", 0))
            capture.record(self, FailureClass(note["class"]), h, job, None, attr,
                           note["message"], folder=None, count=False)
        if self.observer is not None:
            self.observe(Outcome(job, payload.get("pid") or h.pid, failed,
                                 tuple(sorted({n["class"] for n in res["failures"]}))))

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

    # ---- failures ----------------------------------------------------------------------
    def job_of(self, h: WorkerHandle, attr: Attribution) -> Job | None:
        if attr.job_index is not None:
            job = h.outstanding.get(attr.job_index) or h.recent.get(attr.job_index)
            if job is not None:
                return job
        if h.ephemeral:
            jobs = list(h.outstanding.values()) or list(h.recent.values())
            return jobs[0] if jobs else None
        return None

    def requeue(self, h: WorkerHandle, failed: Job | None) -> None:
        """Jobs sent to a dead worker go back to the front of their queue, except the one that
        failed and, when the failure could not be pinned on a job, every job the worker had
        begun (one of them caused it: rerunning it elsewhere would spread the blame)."""
        begun: set[int] = set()
        if failed is None:
            reader = h.journal()
            if reader is not None:
                begun = {e.job for v in reader.all_slots() for e in v.entries}
        lost = [j for j in h.outstanding.values()
                if (failed is None or j.index != failed.index) and j.index not in begun]
        self.supply.give_back(lost)
        h.outstanding.clear()

    def restart(self, h: WorkerHandle) -> None:
        """Replaces a dead pool worker, within --max-worker-restarts per restart window."""
        replace = self.pool.replace(h, self.restart_window, self.stopping)
        if replace is None:
            self.stop(self.restart_window.describe())
        elif replace:
            self.tally.restarts += 1
            self._spawn(h.worker_id, ephemeral=False)

    def count_restart(self) -> bool:
        """One more one-job process that could not start, in the restart window; False, and
        the run stops, past --max-worker-restarts."""
        if self.restart_window.allow():
            return True
        self.stop(self.restart_window.describe())
        return False

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

    def sample_healthy(self) -> None:
        """Snapshots the recent steps of every busy thread of every running worker: what
        threads do when nothing fails. Failure windows are compared against these. Kept as a
        reservoir, so a long run's sample stays uniform over the whole run. Raw entries of
        every thread are stored (the sampled one marked failing); analysis derives features."""
        for h in [h for h in self.workers.values()
                  if h.state is State.RUNNING and h.outstanding]:
            self._sample_worker(h)

    def _sample_worker(self, h: WorkerHandle) -> None:
        reader = h.journal()
        if reader is None:
            return
        views = reader.all_slots(last=_SAMPLE_RECORDS)
        for view in views:
            if not view.in_flight():
                continue
            attr = attribute(reader, "", slot_hint=view.slot, views=views)
            job = h.outstanding.get(attr.job_index) if attr.job_index is not None else None
            self.healthy_samples += 1
            slot = self.healthy_samples
            if slot > _HEALTHY_SAMPLES_MAX:
                slot = self.sample_rng.randint(1, self.healthy_samples)
                if slot > _HEALTHY_SAMPLES_MAX:
                    continue
            self.store.add_window(self.run_id, "healthy", job.pattern if job else None,
                                  window_tokens(attr.steps), attr.in_flight, slot,
                                  steps=attr.steps)

    def crash_pool(self) -> ThreadPoolExecutor:
        """Background readers of crashed workers' cores (gdb): created on the first crash."""
        if self._crash_pool is None:
            self._crash_pool = ThreadPoolExecutor(_CRASH_READERS, thread_name_prefix="post-mortem")
        return self._crash_pool

    # ---- watchdog ----------------------------------------------------------------------
    def limits(self) -> watchdog.Limits:
        return watchdog.Limits(self.cfg.timeout_s, self.cfg.teardown_timeout_s,
                               _STARTUP_TIMEOUT_S, _STOP_GRACE_S)

    def scan_gap(self) -> float | None:
        """Seconds since the previous deadline scan (None before the first); marks this one."""
        now_ns = time.monotonic_ns()
        gap_s = None if self.last_scan_ns is None else (now_ns - self.last_scan_ns) / 1e9
        self.last_scan_ns = now_ns
        return gap_s

    def find_stuck(self, skip: Container[int] = ()) -> list[tuple[WorkerHandle, watchdog.Stuck]]:
        """Every live worker past a deadline, with the step to blame; `skip`: id()s of
        handles already being handled (not looked at: their evidence is being taken)."""
        now_ns = time.monotonic_ns()
        limits = self.limits()
        stuck = []
        for h in list(self.workers.values()):
            if h.state is State.EXITED or id(h) in skip:
                continue
            if h.judge is not None:  # a process without our journal: its runner's deadlines
                found = h.judge.watch(now_ns)
            else:
                found = watchdog.scan(
                    h.journal(), now_ns, limits, started_ns=int(h.started * 1e9),
                    bye_ns=int(h.bye_at * 1e9) if h.bye_at is not None else None,
                    stop_ns=int(h.stop_sent_at * 1e9) if h.stop_sent_at is not None else None)
            if found is not None and not procstate.exiting(h.pid):  # one dying (writing its
                #   core as the deadline passed) is a crash: on_exit records it
                stuck.append((h, found))
        return stuck

    def scan(self) -> None:
        """Every worker past a deadline: evidence of all of them first (a GPU-wide stall hangs
        several at once), then the kills (`capture.on_stuck`, which goes on scanning while it
        takes evidence)."""
        gap_s = self.scan_gap()
        stuck = self.find_stuck()
        if stuck:
            capture.on_stuck(self, stuck, scan_gap_s=gap_s)

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
        # only tool processes (h.judge): the early top-up counts them out once exited, so the
        #   worker count below can tell whether on_exit ended anything else
        topped_up = bool(exited) and self.cfg.engine != "python" and \
            all(h.judge is not None for h, _ in exited)
        queued: tuple[int, int, int] | None = None
        if topped_up:
            # tool processes: replacements start before the exits are handled (output checks,
            # evidence, store rows), so no slot idles while the parent works
            self.top_up()
            queued = (self.supply.queued(Queue.ONE_JOB), self.supply.queued(Queue.POOL),
                      len(self.workers))
        for h, rc in exited:
            capture.on_exit(self, h, rc)
        if self.pending_crashes:
            capture.collect_finished(self)
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
            self.sample_healthy()
        if self.cfg.duration_s is not None and \
                time.monotonic() - self.soak_clock() >= self.cfg.duration_s:
            self.stop("duration reached")
        if self.cfg.max_failures is not None and \
                self.tally.failure_count >= self.cfg.max_failures:
            self.stop(f"--max-failures {self.cfg.max_failures} reached")
        if self.supply.drained() and \
                not any(h.outstanding for h in self.workers.values()):
            self.stop("all planned invocations done")
        if self.interrupt is not None:
            raise Interrupted(self.interrupt)
        if self.observer is not None and now - self.last_observed >= _OBSERVE_PERIOD_S:
            self.last_observed = now
            reason = self.observer.should_stop()
            if reason:
                self.stop(reason)
        if not topped_up or queued != (self.supply.queued(Queue.ONE_JOB),
                                       self.supply.queued(Queue.POOL),
                                       len(self.workers) + len(exited)):
            self.top_up()  # (after the early one, only when exits put jobs back or ended
            #   other workers: a second call per job was ~3% of the parent's time)
        self.record_telemetry()
        self.store.tick()
        self.progress.tick()

    def soak_clock(self) -> float:
        """When --duration began: the first job's start, or (no worker ever started a job)
        the end of the start-up allowance, so that a runtime that cannot start still ends."""
        t = self.tally
        if t.soak_started is not None:
            return t.soak_started
        if time.monotonic() - t.started > _STARTUP_TIMEOUT_S:
            t.soak_started = t.started + _STARTUP_TIMEOUT_S
            return t.soak_started
        return time.monotonic()

    # ---- telemetry time line -------------------------------------------------------------
    def start_telemetry(self) -> None:
        """The GPU time line's sampler child (none on cpu); said in the manifest."""
        period = float(getattr(self.cfg, "telemetry_period_s", timeline.DEFAULT_PERIOD_S))
        if self.timeline_store is None:
            return
        try:
            self.sampler = timeline.start(self.cfg.driver, period)
        except OSError as exc:
            self.telemetry_note = f"no time line: {exc}"
            return
        if self.sampler is not None:
            self.telemetry_note = f"{self.sampler.backend} every {period:g} s"
            self.store.update_manifest(self.run_id, self.manifest())

    def record_telemetry(self, final: bool = False) -> None:
        """Stores the samples the sampler printed since the last call (never blocks)."""
        if self.sampler is None or self.timeline_store is None:
            return
        samples = self.sampler.close() if final else self.sampler.poll()
        rows = [r for s in samples for r in timeline.rows(s, self.gpu_ordinals)]
        if rows:
            self.timeline_store.add_telemetry(self.run_id, rows)
        if final:
            self.sampler = None

    def mark(self, kind: str, label: str) -> None:
        if self.sampler is not None and self.timeline_store is not None:
            self.timeline_store.add_mark(self.run_id, time.time(), kind, label)

    @contextmanager
    def timed_phase(self, name: str) -> Iterator[None]:
        """A phase of the run, also marked on the time line."""
        self.mark("phase-start", name)
        try:
            with self.phases.phase(name):
                yield
        finally:
            self.mark("phase-end", name)

    def cooldown(self) -> None:
        """After the last worker exited: the time line goes on for _COOLDOWN_S, so a GPU that
        stays busy with nothing running is seen (stopped early by an interrupt)."""
        if self.sampler is None:
            return
        end = time.monotonic() + _COOLDOWN_S
        with self.timed_phase("cooldown"):
            while time.monotonic() < end and self.interrupt is None:
                time.sleep(min(_TICK_S * 4, max(0.0, end - time.monotonic())))
                self.record_telemetry()
                self.store.tick()

    def _on_signal(self, signum: int, frame: object) -> None:
        """SIGINT/SIGTERM: noted here, acted on by the loop (never raised from an arbitrary
        line). A second one while we shut down only shortens nothing: the kill loop is
        already bounded."""
        self.interrupts += 1
        if self.interrupt is None:
            self.interrupt = signal.Signals(signum).name

    @contextmanager
    def signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM handled by flag for as long as the caller needs (the run, then its
        summary): a second Ctrl-C while we shut down or write the summary is noted, never a
        traceback."""
        # SIGHUP: the terminal or ssh session went away; the run ends as interrupted
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM,
                                                     signal.SIGHUP)}
        for s in previous:
            signal.signal(s, self._on_signal)
        try:
            yield
        finally:
            if self.interrupt is None:  # interrupted: the process is on its way out (exit
                #   3), and a further Ctrl-C while the CLI prints must not be a traceback
                for s, handler in previous.items():
                    signal.signal(s, handler)

    def run(self) -> str:
        """Runs until done; returns the final status: completed | interrupted | failed. Call it
        inside `signals()` so that an interrupt stops it cleanly."""
        self.write_worker_config()
        self.store.start_run(self.run_id, self.cfg.seed, self.cfg.command, self.manifest(),
                             self.cfg.as_dict())
        status = "completed"
        try:
            for failure in self.startup_failures:
                capture.record_startup(self, failure)
            self.start_telemetry()
            cpu0 = time.process_time()
            with self.timed_phase("soak"):
                self.top_up()
                while not self.stopping:
                    self.tick()
            with self.timed_phase("teardown"):  # stop sent: jobs finish, workers exit
                while self.workers:
                    self.tick()
            # the harness's own cost: the parent's CPU (all its threads) while jobs ran, per
            # job ended (the native engine's throughput is bounded by it on a busy machine)
            self.phases.record("parent_cpu", time.process_time() - cpu0, self.tally.jobs_ended)
            self.cooldown()
            if self.interrupt is not None:  # interrupted while cooling down: still said so
                raise Interrupted(self.interrupt)
        except Interrupted as exc:
            status = "interrupted"
            self.stop_reason = f"interrupted by {exc}"
            self._kill_all("interrupted")
        except (sqlite3.Error, OSError) as exc:  # e.g. the results disk is full
            status = "failed"
            self.stop_reason = f"results store unwritable: {exc}"
            self._kill_all("store error")
        except Exception as exc:  # our own bug: one line, every worker stopped, store closed
            status = "failed"
            self.stop_reason = f"internal error: {type(exc).__name__}: {exc}"
            self.harness_errors.append(self.stop_reason)
            sys.stderr.write(f"iree-stress: {self.stop_reason}\n")
            self._kill_all("internal error")
        finally:
            try:
                self.record_telemetry(final=True)
                capture.collect_finished(self, wait=True)  # every crash gets its stacks
            except (sqlite3.Error, OSError):
                pass
            if self._crash_pool is not None:
                self._crash_pool.shutdown(wait=False, cancel_futures=True)
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
                self.store.end_run(self.run_id, status, self.stop_reason)
                self.store.close()
            except (sqlite3.Error, OSError) as exc:
                status = "failed"
                self.stop_reason += f"; store not closed: {exc}"
            self.progress.done()
        return status

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
