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
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stress.engine import evidence, telemetry
from stress.engine.attribution import Attribution, attribute, window_tokens
from stress.engine.config import SoakConfig
from stress.engine.failures import FailureClass, signal_name
from stress.engine.jobs import Job, schedule
from stress.engine.journal import Phase, Step
from stress.engine.phases import Phases
from stress.engine.progress import Progress
from stress.engine.workermanage import State, WorkerHandle, spawn
from stress.programs.cache import atomic_write
from stress.store.db import RunStore

_TICK_S: float = 0.05  # crash noticed within one tick (+ the pipe EOF wakes us at once)
_WATCHDOG_PERIOD_S: float = 0.1  # journal scans are cheap, but not free at 300 wake-ups/s
_HEALTHY_SAMPLE_PERIOD_S: float = 0.2  # healthy journal windows: the baseline of correlation
_HEALTHY_SAMPLES_MAX: int = 4000  # per run (a reservoir: uniform over the whole run)
_SAMPLE_RECORDS: int = 40  # per thread: a 12-step window plus what is still in flight
_STARTUP_TIMEOUT_S: float = 120.0  # importing numpy + iree.runtime on a loaded box
_MAX_FAILURE_FOLDERS: int = 200  # past this, failures are recorded without a folder
_PROCESS_PER_JOB = "process-per-job"


class Interrupted(Exception):
    """SIGINT/SIGTERM to the parent: stop everything, keep what was recorded."""


class Session:
    def __init__(self, config: SoakConfig, run_id: str, run_dir: Path,
                 phases: Phases | None = None):
        self.cfg = config
        self.phases = phases or Phases()
        self.run_id, self.run_dir = run_id, run_dir
        self.store = RunStore(run_dir)
        self.stream: Iterator[Job] = schedule(config.seed, config.programs, config.patterns,
                                              config.shard, config.job_scale, config.job_seed)
        self.pool_queue: deque[Job] = deque()
        self.ppj_queue: deque[Job] = deque()
        self.pool_patterns = [p for p in config.patterns if p != _PROCESS_PER_JOB]
        self.ppj_enabled = _PROCESS_PER_JOB in config.patterns
        self.planned_invocations = 0
        self.stream_done = False
        self.workers: dict[int, WorkerHandle] = {}
        self.next_worker_id = 0
        self.generation: Counter[int] = Counter()
        self.restarts = 0
        self.failure_count = 0
        self.failures_by_class: Counter[str] = Counter()
        self.invocations_by_pattern: Counter[str] = Counter()
        self.invocations = 0
        self.stopping = False
        self.stop_reason = ""
        self.started = time.monotonic()
        self.facts: dict[str, Any] = {}
        self.python = config.python or sys.executable
        self.config_path = run_dir / "worker-config.json"
        self.progress = Progress(config, self)
        self.last_watchdog = 0.0
        self.last_sample = 0.0
        self.healthy_samples = 0
        self.sample_rng = random.Random(config.seed)
        # process-per-job runs beside the pool on half the worker budget (all of it when alone)
        self.ppj_slots = config.workers if not self.pool_patterns else max(1, config.workers // 2)

    # ---- setup -------------------------------------------------------------------------
    def worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        env["PYTHONFAULTHANDLER"] = "1"
        env.update(self.cfg.env)
        return env

    def write_worker_config(self) -> None:
        cfg = {"driver": self.cfg.driver, "device_uri": self.cfg.device_uri,
               "threads": self.cfg.threads, "seed": self.cfg.seed, "inject": self.cfg.inject,
               "programs": {p.name: {"program": p.to_dict(),
                                     "vmfb": str(self.cfg.artifacts[p.name])}
                            for p in self.cfg.programs}}
        atomic_write(self.config_path, json.dumps(cfg).encode())

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
                "driver_error": self.facts.get("driver_error"),
                "worker_python": self.facts.get("python"), "worker_executable": self.python,
                "host": platform.node(), "kernel": platform.release(),
                "os": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
                "parent_python": sys.version.split()[0], "seed": self.cfg.seed,
                "command": self.cfg.command, "config": self.cfg.as_dict()}

    # ---- scheduling --------------------------------------------------------------------
    def _pull(self) -> bool:
        """Moves one job from the seeded stream into its queue. False when the plan is done."""
        if self.stream_done or self.stopping:
            return False
        limit = self.cfg.invocations
        if limit is not None and self.planned_invocations >= limit:
            self.stream_done = True
            return False
        job = next(self.stream)
        self.planned_invocations += job.invocations
        (self.ppj_queue if job.pattern == _PROCESS_PER_JOB else self.pool_queue).append(job)
        return True

    def next_job(self, ppj: bool) -> Job | None:
        queue = self.ppj_queue if ppj else self.pool_queue
        if (ppj and not self.ppj_enabled) or (not ppj and not self.pool_patterns):
            return None
        while not queue:
            if not self._pull():
                return None
        return queue.popleft()

    def top_up(self) -> None:
        if self.stopping:
            return
        pool = [h for h in self.workers.values() if not h.ephemeral]
        if self.pool_patterns and len(pool) < self.cfg.workers:
            for _ in range(self.cfg.workers - len(pool)):
                if not self.pool_queue and not self._peek_more(False):
                    break
                self.start_worker(ephemeral=False)
        for h in pool:
            batch: list[Job] = []
            while h.state is State.RUNNING and \
                    len(h.outstanding) + len(batch) < 2 * self.cfg.threads:
                job = self.next_job(False)
                if job is None:
                    break
                batch.append(job)
            h.send_jobs(batch)
            if h.state is State.RUNNING and not h.outstanding and self.stream_done \
                    and not self.pool_queue:
                h.stop()
        ephemeral = [h for h in self.workers.values() if h.ephemeral]
        while self.ppj_enabled and len(ephemeral) < self.ppj_slots:
            job = self.next_job(True)
            if job is None:
                break
            h = self.start_worker(ephemeral=True)
            h.send_job(job)
            h.stop()
            ephemeral.append(h)

    def _peek_more(self, ppj: bool) -> bool:
        job = self.next_job(ppj)
        if job is None:
            return False
        (self.ppj_queue if ppj else self.pool_queue).appendleft(job)
        return True

    def start_worker(self, ephemeral: bool) -> WorkerHandle:
        wid = self.next_worker_id
        self.next_worker_id += 1
        return self._spawn(wid, ephemeral)

    def _spawn(self, wid: int, ephemeral: bool) -> WorkerHandle:
        gen = self.generation[wid]
        self.generation[wid] += 1
        h = spawn(wid, gen, python=self.python, config_path=self.config_path,
                  run_dir=self.run_dir, env=self.worker_env(), ephemeral=ephemeral,
                  facts=not self.facts)
        h.db_row = self.store.add_worker(self.run_id, wid, gen, h.pid)
        self.workers[wid] = h
        return h

    # ---- messages ----------------------------------------------------------------------
    def dispatch(self, h: WorkerHandle, name: str, payload: dict[str, Any]) -> None:
        handler = getattr(self, f"on_{name}", None)
        if handler is None:
            raise ValueError(f"unknown message {name!r} from worker {h.name}")
        handler(h, payload)

    def on_hello(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires once per worker after it imported the runtime (with facts for the first)."""
        h.facts = payload
        if not self.facts and "iree_runtime" in payload:
            self.facts = payload
            self.store.update_manifest(self.run_id, self.manifest())

    def on_job_done(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires when a worker thread finished a job (whatever its outcome)."""
        job = Job.from_dict(payload["job"])
        h.finished(job.index)
        res = payload["result"]
        outcome = "ok" if not (res["errors"] or res["miscompare"]) else "failed"
        self.store.add_job(self.run_id, h.worker_id, payload, outcome)
        self.invocations += res["invocations"]
        self.invocations_by_pattern[job.pattern] += res["invocations"]
        self.failures_by_class[FailureClass.ERROR.value] += res["errors"]
        self.failures_by_class[FailureClass.MISCOMPARE.value] += res["miscompare"]
        if res.get("counts"):
            self.store.add_failure_counts(self.run_id, payload["job"], res["counts"])
        for note in res["failures"]:
            steps = [{"phase": ph, "step": st, "failing": True} for ph, st in note["window"]]
            self.record_failure(FailureClass(note["class"]), h, job, None,
                                Attribution("worker-report", last_step=note["step"],
                                            steps=steps),
                                note["message"], folder=None, count=False)
        self.failure_count += res["errors"] + res["miscompare"]

    def on_bye(self, h: WorkerHandle, payload: dict[str, Any]) -> None:
        """Fires when a worker finished its teardown and is about to exit."""
        h.bye_at = time.monotonic()

    # ---- failures ----------------------------------------------------------------------
    def record_failure(self, cls: FailureClass, h: WorkerHandle, job: Job | None,
                       sig: str | None, attr: Attribution, message: str,
                       folder: Path | None, count: bool = True) -> None:
        if count:
            self.failures_by_class[cls.value] += 1
            self.failure_count += 1
        self.store.add_failure(self.run_id, {
            "class": cls.value, "signal": sig, "job_index": job.index if job else None,
            "program": job.program if job else None, "pattern": job.pattern if job else None,
            "seed": job.seed if job else None, "worker": h.worker_id, "pid": h.pid,
            "last_step": attr.last_step, "in_flight": attr.in_flight, "steps": attr.steps,
            "artifacts": str(folder) if folder else None, "message": message,
            "attribution": attr.method, "elapsed_s": time.monotonic() - self.started})
        self.progress.failure(cls, h, job, attr, sig, folder)

    def failure_folder(self, cls: FailureClass, h: WorkerHandle) -> Path | None:
        n = self.failure_count + 1
        if n > _MAX_FAILURE_FOLDERS:
            return None
        folder = self.run_dir / "failures" / f"{n:04d}-{cls.value}-{h.name}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def write_evidence(self, folder: Path | None, h: WorkerHandle, job: Job | None,
                       attr: Attribution, extra: dict[str, str]) -> None:
        if folder is not None:
            evidence.write_folder(folder, self.cfg, h.tail(h.stderr_path),
                                  h.tail(h.stdout_path), job, attr.journal_text, extra)

    def handle_exit(self, h: WorkerHandle, rc: int) -> None:
        """A worker process ended. A crash unless it said bye and exited 0, or we killed it."""
        noticed_ns = time.monotonic_ns()
        while h.pump():
            pass
        self._drain(h)
        sig = signal_name(rc)
        reason = "exit" if rc == 0 else (sig or f"exit {rc}")
        if not h.killed_by_us and (rc != 0 or h.bye_at is None):
            stderr = h.tail(h.stderr_path)
            attr = attribute(h.journal(), stderr)
            job = self._job_of(h, attr)
            folder = self.failure_folder(FailureClass.CRASH, h)
            after = telemetry.snapshot(self.cfg.target.backend.value)
            what = f"killed by {sig}" if sig else f"exited with status {rc}"
            if rc == 0:
                what = "exited 0 before finishing its jobs"
            message = f"worker {h.name} {what} while running {self._job_text(job)}"
            self.write_evidence(folder, h, job, attr, {
                "telemetry_after.json": json.dumps(after, indent=1),
                "stacks.txt": "process was already dead; see stderr.tail for faulthandler's "
                              "stacks of every thread\n",
                "failure.json": json.dumps({
                    "class": "crash", "signal": sig, "exit_code": rc,
                    "last_step": attr.last_step, "in_flight": attr.in_flight,
                    "attribution": attr.method,
                    # upper bound: the last journal record precedes the death
                    "timing": {"noticed_after_last_record_s":
                               (noticed_ns - attr.last_record_ns) / 1e9
                               if attr.last_record_ns else None}}, indent=1)})
            self.record_failure(FailureClass.CRASH, h, job, sig, attr, message, folder)
            self.requeue(h, job)
            self.restart(h)
        self.store.end_worker(h.db_row, rc, sig, reason, h.facts)
        self.retire(h)

    def handle_hang(self, h: WorkerHandle, slot: int | None, step: Step) -> None:
        """The watchdog found a step past its deadline: evidence first, then the kill."""
        cls = FailureClass.TEARDOWN_HANG if step.is_teardown() else FailureClass.HANG
        backend = self.cfg.target.backend.value
        declared_ns = time.monotonic_ns()
        t0 = time.monotonic()
        before = telemetry.snapshot(backend)
        stacks = evidence.dump_stacks(h.pid, h.stderr_path)
        t_stacks = time.monotonic()
        rc = h.kill_group()
        t_killed = time.monotonic()
        after = telemetry.snapshot(backend)
        attr = attribute(h.journal(), "", slot_hint=slot)
        if attr.last_step is None:
            attr.last_step = step.label
        job = self._job_of(h, attr)
        folder = self.failure_folder(cls, h)
        deadline = self.cfg.teardown_timeout_s if cls is FailureClass.TEARDOWN_HANG \
            else self.cfg.timeout_s
        message = (f"worker {h.name} stuck in {attr.last_step} for more than {deadline:g} s "
                   f"while running {self._job_text(job)}")
        timing = {"stacks_s": t_stacks - t0, "kill_s": t_killed - t_stacks,
                  "evidence_and_kill_s": t_killed - t0, "deadline_s": deadline,
                  "declared_after_step_begin_s": (declared_ns - attr.step_begin_ns) / 1e9
                  if attr.step_begin_ns else None}
        self.write_evidence(folder, h, job, attr, {
            "stacks.txt": f"# {stacks.tool}\n{stacks.text}",
            "telemetry_before.json": json.dumps(before, indent=1),
            "telemetry_after.json": json.dumps(after, indent=1),
            "failure.json": json.dumps({"class": cls.value, "last_step": attr.last_step,
                                        "in_flight": attr.in_flight, "timing": timing,
                                        "native_tid": attr.native_tid,
                                        "attribution": attr.method}, indent=1)})
        self.record_failure(cls, h, job, None, attr, message, folder)
        self.requeue(h, job)
        self.store.end_worker(h.db_row, rc, signal_name(rc), cls.value, h.facts)
        self.restart(h)
        self.retire(h)

    def _job_of(self, h: WorkerHandle, attr: Attribution) -> Job | None:
        if attr.job_index is not None:
            job = h.outstanding.get(attr.job_index) or h.recent.get(attr.job_index)
            if job is not None:
                return job
        if h.ephemeral:
            jobs = list(h.outstanding.values()) or list(h.recent.values())
            return jobs[0] if jobs else None
        return None

    @staticmethod
    def _job_text(job: Job | None) -> str:
        return job.describe() if job else "no job (setup or teardown)"

    def requeue(self, h: WorkerHandle, failed: Job | None) -> None:
        """Jobs sent to a dead worker and never started elsewhere go back to the front."""
        lost = [j for j in h.outstanding.values() if failed is None or j.index != failed.index]
        for job in sorted(lost, key=lambda j: -j.index):
            (self.ppj_queue if job.pattern == _PROCESS_PER_JOB else self.pool_queue) \
                .appendleft(job)
        h.outstanding.clear()

    def restart(self, h: WorkerHandle) -> None:
        if h.ephemeral or self.stopping:
            return
        if self.restarts >= self.cfg.max_worker_restarts:
            self.stop(f"more than {self.cfg.max_worker_restarts} worker restarts")
            return
        self.restarts += 1
        self.workers.pop(h.worker_id, None)
        self._spawn(h.worker_id, ephemeral=False)

    def retire(self, h: WorkerHandle) -> None:
        h.close()
        if self.workers.get(h.worker_id) is h:
            del self.workers[h.worker_id]

    def _drain(self, h: WorkerHandle) -> None:
        while h.inbox:
            name, payload = h.inbox.popleft()
            self.dispatch(h, name, payload)

    def sample_healthy(self) -> None:
        """Snapshots the recent steps of every busy thread of one random worker: what threads
        do when nothing fails. Failure windows are compared against these. Kept as a
        reservoir, so a long run's sample stays uniform over the whole run."""
        live = [h for h in self.workers.values() if h.state is State.RUNNING and h.outstanding]
        if not live:
            return
        h = self.sample_rng.choice(live)
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
                                  window_tokens(attr.steps), attr.in_flight, slot)

    # ---- watchdog ----------------------------------------------------------------------
    def watchdog(self, h: WorkerHandle) -> None:
        now = time.monotonic()
        reader = h.journal()
        if reader is None:
            if now - h.started > _STARTUP_TIMEOUT_S:
                self.handle_hang(h, None, Step.INSTANCE_CREATE)
            return
        now_ns = time.monotonic_ns()
        for slot, ts, step_code, phase, _job in reader.latest():
            if phase != Phase.BEGIN or step_code == Step.JOB:
                continue
            step = Step(step_code)
            limit = self.cfg.teardown_timeout_s if step.is_teardown() else self.cfg.timeout_s
            if (now_ns - ts) / 1e9 > limit:
                self.handle_hang(h, slot, step)
                return
        if h.bye_at is not None and now - h.bye_at > self.cfg.teardown_timeout_s:
            self.handle_hang(h, None, Step.WORKER_EXIT)

    # ---- main loop ---------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        if not self.stopping:
            self.stopping, self.stop_reason = True, reason
            for h in self.workers.values():
                h.stop()

    def tick(self) -> None:
        fds = {h.msg_fd: h for h in self.workers.values() if h.state is not State.EXITED}
        if fds:
            ready, _, _ = select.select(list(fds), [], [], _TICK_S)
        else:
            ready = []
            time.sleep(_TICK_S)
        for fd in ready:
            fds[fd].pump()
        now = time.monotonic()
        scan = now - self.last_watchdog >= _WATCHDOG_PERIOD_S
        if scan:
            self.last_watchdog = now
        for h in list(self.workers.values()):
            self._drain(h)
            rc = h.poll()
            if rc is not None:
                self.handle_exit(h, rc)
            elif scan:
                self.watchdog(h)
        if now - self.last_sample >= _HEALTHY_SAMPLE_PERIOD_S:
            self.last_sample = now
            self.sample_healthy()
        elapsed = time.monotonic() - self.started
        if self.cfg.duration_s is not None and elapsed >= self.cfg.duration_s:
            self.stop("duration reached")
        if self.cfg.max_failures is not None and self.failure_count >= self.cfg.max_failures:
            self.stop(f"--max-failures {self.cfg.max_failures} reached")
        if self.stream_done and not self.pool_queue and not self.ppj_queue and \
                not any(h.outstanding for h in self.workers.values()):
            self.stop("all planned invocations done")
        self.top_up()
        self.progress.tick()

    def run(self) -> str:
        """Runs until done; returns the final status: completed | interrupted."""
        self.write_worker_config()
        self.store.start_run(self.run_id, self.cfg.seed, self.cfg.command, self.manifest(),
                             self.cfg.as_dict())
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def interrupt(signum: int, frame: object) -> None:
            raise Interrupted(signal.Signals(signum).name)

        for s in previous:
            signal.signal(s, interrupt)
        status = "completed"
        try:
            with self.phases.phase("soak"):
                self.top_up()
                while not self.stopping:
                    self.tick()
            with self.phases.phase("teardown"):  # stop sent: jobs finish, workers exit
                while self.workers:
                    self.tick()
        except Interrupted as exc:
            status = "interrupted"
            self.stop_reason = f"interrupted by {exc}"
            self.stopping = True
            for h in list(self.workers.values()):
                h.kill_group(grace_s=0.5)
                self.store.end_worker(h.db_row, h.proc.returncode, None, "interrupted")
                self.retire(h)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            self.phases.count("soak", self.invocations)
            self.phases.count("teardown", self.next_worker_id)
            self.store.set_phases(self.run_id, self.phases.rows())
            self.store.end_run(self.run_id, status, self.stop_reason)
            self.store.close()
            self.progress.done()
        return status
