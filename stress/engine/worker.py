"""Code that runs inside a worker process.

Started by the parent as `python -m stress.engine.worker --config F --worker-id N ...`, possibly
under another interpreter (a runtime stack's venv holding only iree-base-runtime and numpy, with
this package on PYTHONPATH): nothing here may import click, sqlite3 or the parent's modules.

Protocol: the parent writes `[name, payload]` JSON lines to our stdin ("job", "stop": exit
after the jobs held, or with `drop_queued` after those begun); we write `[name, payload]` lines
to the message fd ("hello", "job_done", "jobs_dropped", "bye"). Progress is not sent as
heartbeats: the parent reads our journal file directly.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from stress.engine import exitpaths, inject, postmortem
from stress.engine.invocation import Device, Expectation, FailureNote, JobResult
from stress.engine.jobs import Job
from stress.engine.journal import JournalWriter, SlotWriter, Step
from stress.engine.patterns import PATTERNS, Pattern, ThreadState, Work, WorkerContext
from stress.programs.program import Program, make_inputs
from stress.vocab import Numerics, exit_path_of, pattern

_PR_SET_PDEATHSIG = 1  # linux prctl: signal us when the parent dies (no orphans, even on SIGKILL)
_PR_SET_PTRACER = 0x59616D61  # linux prctl (Yama): let this pid ptrace us (stacks, non-root CI)
EXIT_HARNESS: int = 70  # EX_SOFTWARE: the worker's own code failed (not the runtime under test)
# every pattern a worker runs: the in-process family and process-per-job, and the `exit` family
#   (selected by name or by `--patterns exit`)
RUNS: dict[str, Pattern] = {**PATTERNS, **exitpaths.PATTERNS}


class Messenger:
    def __init__(self, fd: int):
        self._fd = fd
        self._lock = threading.Lock()

    def send(self, name: str, payload: dict[str, Any]) -> None:
        data = (json.dumps([name, payload], separators=(",", ":")) + "\n").encode()
        with self._lock:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]


def _die_with_parent(parent_pid: int, tracer_pid: int = 0) -> None:
    """SIGKILL us when the parent dies; if it died before prctl took effect, leave now. The
    check compares with the parent's real pid: under a subreaper an orphan's new parent is
    not pid 1. `parent_pid` 0 skips the check (a fork server's child: its parent forked it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if parent_pid and os.getppid() != parent_pid:
            os._exit(EXIT_HARNESS)
        # py-spy/gdb run as the session's children: allowed under Yama ptrace_scope=1
        libc.prctl(_PR_SET_PTRACER, tracer_pid or parent_pid or os.getppid(), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _runtime_facts(driver_name: str, writer: SlotWriter) -> dict[str, Any]:
    """Versions and device facts for the run manifest (what a bug report needs). The driver's
    creation and release are journaled steps under the watchdog's deadlines like any other:
    a runtime that stalls or crashes here is a finding, not a harness hang."""
    facts: dict[str, Any] = {"python": sys.version.split()[0], "executable": sys.executable,
                             "pid": os.getpid()}
    try:
        import iree.runtime
        import iree.runtime.version as v

        facts["iree_runtime"] = getattr(v, "VERSION", "?")
        facts["iree_revisions"] = getattr(v, "REVISIONS", {})
        facts["iree_runtime_path"] = str(Path(iree.runtime.__file__).parent)
        facts["numpy_path"] = str(Path(np.__file__).parent)
    except ImportError:
        facts["iree_runtime"] = "?"
    try:
        from iree.runtime import _binding

        writer.begin(Step.DRIVER_CREATE)
        drv = _binding.create_hal_driver(driver_name)
        devices = drv.query_available_devices()
        facts["devices"] = [{k: str(d[k]) for k in ("device_id", "path", "name") if k in d}
                            for d in devices]
        if devices:
            facts["device_info"] = drv.dump_device_info(devices[0]["device_id"])[:4000]
        # while the driver lives: a driver that dlcloses its library at release (hip) leaves
        #   no trace of it in the maps read below
        facts["driver_libraries"] = _gpu_libraries()
        facts["stack_libraries"] = stack_libraries()
        writer.end(Step.DRIVER_CREATE)
        # IREE's HIP and Vulkan drivers unload their library at driver destroy, and the Vulkan
        #   loader maps its ICDs only while a device lives: read them while they are mapped
        _MAPPED_EARLIER.update(facts["driver_libraries"])
        if devices and driver_name in _LIBRARIES_WITH_A_DEVICE:
            _with_a_device(drv, writer)
        if _vulkan_icd_libraries():
            facts["vulkan_icds"] = sorted(_vulkan_icd_libraries())
        writer.begin(Step.DRIVER_RELEASE)
        del drv
        writer.end(Step.DRIVER_RELEASE)
    except Exception as exc:  # reported, not fatal: the jobs will fail with the real error
        writer.fail(Step.DRIVER_CREATE)
        facts["driver_error"] = str(exc)
    facts["loaded_gpu_libraries"] = _gpu_libraries()
    facts["stack_libraries"] = sorted({*facts.get("stack_libraries", []), *stack_libraries()})
    return facts


STACK_LIBRARIES: tuple[str, ...] = ("libamdhip64", "libhsa-runtime64", "/iree/_runtime_libs/")
#   what makes two runtime stacks the same to a worker: HIP, HSA and IREE's runtime


def stack_libraries() -> list[str]:
    """The files of the HIP, HSA and IREE runtime libraries this process mapped (the parent
    hashes them into the manifest: two nightlies whose workers loaded the same bytes are one
    stack)."""
    found: set[str] = set()
    try:
        with open(f"/proc/{os.getpid()}/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1].strip() if "/" in line else ""
                if ".so" in path and any(k in path for k in STACK_LIBRARIES):
                    found.add(path)
    except OSError:
        pass
    return sorted(found)


def _gpu_libraries() -> list[str]:
    """Which HIP/CUDA/HSA libraries this process mapped (which ROCm did we really load?)."""
    # and Vulkan's: the loader, and an ICD by the name its manifest gives (NVIDIA's is
    #   libGLX_nvidia); with those read while a driver or a device lived (_MAPPED_EARLIER)
    icds = {Path(i).name for i in _vulkan_icd_libraries()}
    found: set[str] = set(_MAPPED_EARLIER)
    try:
        with open(f"/proc/{os.getpid()}/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1].strip() if "/" in line else ""
                # shared libraries only: a run folder named for rocm maps its journal too
                if ".so" not in os.path.basename(path):
                    continue
                if any(k in path.lower() for k in _GPU_LIBRARY_KEYS) or Path(path).name in icds:
                    found.add(path)
    except OSError:
        pass
    return sorted(found)


# drivers whose API library loads more only when a device is made: the Vulkan loader maps the
#   ICDs (lavapipe's libvulkan_lvp.so, a GPU vendor's) at device creation and unmaps them at
#   its release, so a driver that only listed its devices shows the loader alone
_LIBRARIES_WITH_A_DEVICE: frozenset[str] = frozenset({"vulkan"})
_GPU_LIBRARY_KEYS: tuple[str, ...] = ("amdhip", "hsa-runtime", "libcuda", "libnvrtc",
                                      "libvulkan", "rocm", "therock")
_MAPPED_EARLIER: set[str] = set()  # GPU libraries read while the driver or a device lived
# where the Vulkan loader looks for ICD manifests (its documented defaults, after the
#   variables that replace or extend them)
_ICD_ENV: tuple[str, ...] = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")
_ICD_DIRS: tuple[str, ...] = ("/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d",
                              "/usr/share/vulkan/icd.d")


def _with_a_device(drv: Any, writer: SlotWriter) -> None:
    """Reads the GPU libraries mapped while one device of `drv` lives (made and released as
    the jobs' devices are, journaled so that a stall or crash in it is a finding)."""
    try:
        writer.begin(Step.DEVICE_CREATE)
        device = drv.create_default_device()
    except Exception:  # the jobs' own device creation will fail and say why
        writer.fail(Step.DEVICE_CREATE)
        return
    writer.end(Step.DEVICE_CREATE)
    _MAPPED_EARLIER.update(_gpu_libraries())
    writer.begin(Step.DEVICE_RELEASE)
    del device
    writer.end(Step.DEVICE_RELEASE)


def _vulkan_icd_libraries() -> set[str]:
    """The libraries the installed Vulkan ICD manifests name (`ICD.library_path`), as written
    there: a bare name or a path."""
    files: list[Path] = []
    for var in _ICD_ENV:
        for part in os.environ.get(var, "").split(os.pathsep):
            if part:
                files += sorted(Path(part).glob("*.json")) if Path(part).is_dir() else [Path(part)]
    for folder in _ICD_DIRS:
        files += sorted(Path(folder).glob("*.json"))
    out: set[str] = set()
    for f in files:
        try:
            lib = json.loads(f.read_text()).get("ICD", {}).get("library_path")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(lib, str) and lib:
            out.add(lib)
    return out


class Artifacts(dict[str, bytes]):
    """Program name -> vmfb bytes, read on first use: a one-job process (process-per-job, the
    exit family) reads one artifact, not the whole corpus's."""

    def __init__(self, paths: dict[str, Path]):
        super().__init__()
        self._paths = paths
        self._lock = threading.Lock()

    def __missing__(self, name: str) -> bytes:
        with self._lock:
            if name not in self:
                self[name] = self._paths[name].read_bytes()
            return dict.__getitem__(self, name)


class Worker:
    def __init__(self, config: dict[str, Any], worker_id: int, journal: JournalWriter,
                 messenger: Messenger):
        self.config = config
        self.worker_id = worker_id
        self.journal = journal
        self.msg = messenger
        self.threads = int(config["threads"])
        self.last_shared_job = 0xFFFFFFFF  # the shared device's teardown is attributed to it
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        # exit-family jobs run on the main thread (as a test script's device work does): the
        # thread that then leaves by the path, runs Py_Finalize and the exit handlers is the
        # one that created the device (IREE's cuda HAL makes its context current only there)
        self.main_jobs: queue.Queue[Job | None] = queue.Queue()
        self.harness_error = False
        self.programs = {name: Program.from_dict(p["program"])
                         for name, p in config["programs"].items()}
        self.vmfbs = Artifacts({name: Path(p["vmfb"]) for name, p in config["programs"].items()})
        self.numerics = {name: Numerics(p.get("numerics") or Numerics.REFERENCE.value)
                         for name, p in config["programs"].items()}
        specs = [inject.parse(s) for s in config.get("inject", [])]
        specs += inject.parse_env(os.environ.get(inject.ENV_VAR))
        self.injector = inject.Injector(specs, hash((config.get("seed", 0), worker_id,
                                                     os.getpid())),
                                        str(journal.path)) if specs else None
        if self.injector is not None:
            journal.on_begin = self.injector
        self.ctx = WorkerContext(config["driver"], config["device_uri"], journal, self.programs,
                                 self.vmfbs,
                                 self.injector.corrupt_pending if self.injector else None)

    def read_commands(self) -> None:
        """stdin reader thread: jobs in, `stop` (or EOF: the parent is gone) ends the worker.
        Whatever happens here, the job threads are told to finish: a reader that died would
        otherwise leave them waiting forever (and the worker exits as a harness error)."""
        try:
            for line in sys.stdin:
                name, payload = json.loads(line)
                if name == "job":
                    self.jobs.put(Job.from_dict(payload))
                elif name == "stop":
                    if payload.get("drop_queued"):
                        self.drop_queued()
                    break
                else:
                    raise ValueError(f"unknown command {name!r}")
        except BaseException:
            traceback.print_exc()
            self.harness_error = True
        finally:
            for _ in range(self.threads):
                self.jobs.put(None)

    def drop_queued(self) -> None:
        """Takes back the jobs no thread has begun and tells the parent (`jobs_dropped`); a
        job a thread takes meanwhile runs and reports as usual."""
        dropped = []
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                dropped.append(job.index)
        if dropped:
            self.msg.send("jobs_dropped", {"jobs": dropped})

    def thread_main(self) -> None:
        writer = self.journal.acquire()
        state = ThreadState(writer)
        try:
            while True:
                job = self.jobs.get()
                if job is None:
                    break
                if exit_path_of(job.pattern) is not None:
                    self.main_jobs.put(job)
                    continue
                self.run_job(state, job)
        finally:
            self.main_jobs.put(None)  # one per job thread: the main thread counts them
            # The slot keeps the index of its last job: a per-thread device released here is
            # attributed to the job that used it last.
            state.close(self.ctx)

    def run_job(self, state: ThreadState, job: Job) -> None:
        writer = state.writer
        writer.job = job.index
        program = self.programs[job.program]
        result = JobResult()
        started = time.time()
        writer.begin(Step.JOB, aux=job.invocations)
        try:
            inputs = make_inputs(program, job.seed)
            expect = Expectation(program, job.seed, inputs, self.numerics[job.program])
            work = Work(job, program, inputs, expect, result)
            RUNS[job.pattern].run(self.ctx, state, work)
        except Exception as exc:
            result.errors += 1
            step = getattr(exc, "step", None)
            label = step.label if isinstance(step, Step) else "job"
            message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
            # raised on a helper thread: that thread's window, not this one's
            result.note(FailureNote("error", label, message, -1, 0), writer,
                        getattr(exc, "failure_window", None))
        writer.end(Step.JOB, aux=job.invocations)
        spec = pattern(job.pattern)
        if spec is not None and spec.shares_device:
            self.last_shared_job = job.index
        self.msg.send("job_done", {"job": job.as_dict(), "started": started,
                                   "ended": time.time(), "result": result.as_dict(),
                                   "pid": os.getpid()})

    def run(self) -> None:
        main_writer = self.journal.acquire()
        self.ctx.start(main_writer)
        reader = threading.Thread(target=self.read_commands, name="commands", daemon=True)
        reader.start()
        threads = [threading.Thread(target=self.thread_main, name=f"job-{i}")
                   for i in range(self.threads)]
        for th in threads:
            th.start()
        main_state, ended = ThreadState(main_writer), 0
        while ended < len(threads):
            job = self.main_jobs.get()
            if job is None:
                ended += 1
            else:
                self.run_job(main_state, job)
        for th in threads:
            th.join()
        main_writer.job = self.last_shared_job
        self.ctx.close(main_writer)
        main_writer.begin(Step.WORKER_EXIT)
        td = self.ctx.teardown
        self.msg.send("bye", {"pid": os.getpid(), "full_teardowns": td.full_teardowns,
                              "handle_releases": td.handle_releases,
                              "devices_alive": Device.live,
                              "harness_error": self.harness_error})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="stress.engine.worker")
    ap.add_argument("--config", required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    ap.add_argument("--journal", required=True)
    ap.add_argument("--msg-fd", type=int, required=True)
    ap.add_argument("--facts", action="store_true", help="report runtime/device facts in hello")
    ap.add_argument("--parent-pid", type=int, default=0, help="the parent's pid (orphan check)")
    ap.add_argument("--tracer-pid", type=int, default=0, help="may ptrace us (the session)")
    args = ap.parse_args(argv)
    _die_with_parent(args.parent_pid, args.tracer_pid)
    postmortem.prepare_child()  # a fatal signal leaves a core in our cwd for the parent
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    config = json.loads(Path(args.config).read_text())
    threads = int(config["threads"])
    journal = JournalWriter(Path(args.journal), slots=threads * 3 + 4)
    messenger = Messenger(args.msg_fd)
    if args.facts:
        writer = journal.acquire()
        facts = _runtime_facts(config["driver"], writer)
        journal.release(writer)
    else:
        facts = {"pid": os.getpid()}
    messenger.send("hello", facts)
    worker = Worker(config, args.worker_id, journal, messenger)
    worker.run()
    # after `bye`: an exit-family job leaves by its path (os._exit and SIGTERM never return)
    exitpaths.leave()
    return EXIT_HARNESS if worker.harness_error else 0


if __name__ == "__main__":
    sys.exit(main())
