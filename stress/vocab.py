"""Vocabulary every stage shares (engine, store, analysis, verdicts): failure classes, signal
names, engine kinds, run statuses, stop reasons, worker outcomes and the pattern registry.
The lowest module of the package: it imports nothing of ours."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass


class FailureClass(str, enum.Enum):
    CRASH = "crash"
    HANG = "hang"
    TEARDOWN_HANG = "teardown_hang"
    ERROR = "error"
    MISCOMPARE = "miscompare"
    FAILED = "failed"  # exec jobs only: the user's command said its tests failed (a non-zero
    #   exit, no signal, no process of its group killed by one); a rated class, as errors are

    def describe(self) -> str:
        return {
            FailureClass.CRASH: "a process died by a signal (a worker, the user's command or a "
                                "process it started), or a worker's non-zero exit we did not "
                                "cause",
            FailureClass.HANG: "a step ran past --timeout",
            FailureClass.TEARDOWN_HANG: "work done, but release or process exit never finished",
            FailureClass.ERROR: "IREE returned an error status",
            FailureClass.MISCOMPARE: "wrong result (vs numpy reference or first result)",
            FailureClass.FAILED: "the command exited non-zero, no process of it killed by a "
                                 "signal: its tests failed",
        }[self]


ALL_CLASSES: tuple[str, ...] = tuple(c.value for c in FailureClass)


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


class Engine(str, enum.Enum):
    """What runs a soak's jobs (docs/exec.md, docs/native.md)."""

    PYTHON = "python"  # our workers: every device they create is counted
    NATIVE = "native"  # iree-run-module / iree-benchmark-module: one device per tool process
    EXEC = "exec"  # the user's own command: its devices are its own business

    @classmethod
    def of(cls, name: str | None) -> Engine:
        try:
            return cls(name or cls.PYTHON.value)
        except ValueError:
            return cls.PYTHON

    @property
    def knows_devices(self) -> bool:
        """Whether we know the devices its jobs create (exec: we never see them)."""
        return self is not Engine.EXEC

    @property
    def counts_releases(self) -> bool:
        """Whether its jobs count their device releases (full teardowns, handle releases):
        only our workers see them; a tool or a command releases its devices unseen."""
        return self is Engine.PYTHON

    @property
    def journals(self) -> bool:
        """Whether its threads journal their HAL steps (what other threads did is known)."""
        return self is Engine.PYTHON

    def process_exits(self) -> str:
        """What a process exit of this engine is, in the summary's exposure line."""
        return {Engine.PYTHON: "process exits after device use",
                Engine.NATIVE: "tool process exits",
                Engine.EXEC: "command process exits"}[self]

    def describe(self) -> str:
        return {Engine.PYTHON: "Python workers", Engine.NATIVE: "IREE's tool processes",
                Engine.EXEC: "the command after `--`"}[self]


class Numerics(str, enum.Enum):
    """How a soak checks each invocation's results (`--numerics`)."""

    REFERENCE = "reference"  # the numpy reference where the program has one, else REPEAT
    REPEAT = "repeat"  # each result against the job's first (nondeterminism shows)
    OFF = "off"  # not checked: a program with no trustworthy answer, a device that runs no
    #   kernels

    def describe(self) -> str:
        return {Numerics.REFERENCE: "numpy reference",
                Numerics.REPEAT: "each result against the first",
                Numerics.OFF: "results not checked"}[self]


# What a HAL device's name says when it runs no kernels (tests/native/fakehip.c, the stand-in
#   libamdhip64): its dispatches' results are garbage, only its transfers are real
NO_KERNELS_MARK: str = "kernels not run"


class RunStatus(str, enum.Enum):
    """A run's status as the store keeps it (runs.status, summary.json `status`)."""

    RUNNING = "running"
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    FAILED = "failed"  # the harness could not finish it (store unwritable, internal error)

    def describe(self) -> str:
        return {RunStatus.RUNNING: "still running (or killed before it could end the run)",
                RunStatus.COMPLETED: "ran to its stop reason",
                RunStatus.INTERRUPTED: "stopped by SIGINT/SIGTERM; what ran is recorded",
                RunStatus.FAILED: "the harness itself failed; the result cannot be vouched for"
                }[self]


# worst first: a merged store's status is the worst of its runs'
STATUS_ORDER: tuple[RunStatus, ...] = (RunStatus.FAILED, RunStatus.INTERRUPTED,
                                       RunStatus.RUNNING, RunStatus.COMPLETED)


class StopReason(str, enum.Enum):
    """Why a run stopped: the kind of its stored `stop_reason` text. The text is what the
    store keeps (unchanged format); the kind is derived from it (`of`), so old runs read."""

    DURATION = "duration reached"
    MAX_FAILURES = "--max-failures"
    PLAN_DONE = "all planned invocations done"
    RESTARTS = "more than"  # "more than N worker restarts within S s"
    GATE = "gate decided:"
    INTERRUPTED = "interrupted by"
    STORE_ERROR = "results store unwritable:"
    INTERNAL_ERROR = "internal error:"
    UNKNOWN = ""

    @classmethod
    def of(cls, text: str | None) -> StopReason:
        """The kind of a stored stop reason (its first `; `-separated part)."""
        first = (text or "").split("; ", 1)[0]
        return next((r for r in cls if r.value and first.startswith(r.value)), cls.UNKNOWN)

    def text(self, detail: str = "") -> str:
        """The stored text of this kind: `detail` follows the kind's own words."""
        return f"{self.value} {detail}".strip() if detail else self.value

    def describe(self) -> str:
        return {StopReason.DURATION: "its --duration was up",
                StopReason.MAX_FAILURES: "it reached --max-failures",
                StopReason.PLAN_DONE: "every planned invocation ran",
                StopReason.RESTARTS: "workers restarted too often (--max-worker-restarts)",
                StopReason.GATE: "the gate's sequential test decided",
                StopReason.INTERRUPTED: "a signal interrupted it",
                StopReason.STORE_ERROR: "its results store could not be written",
                StopReason.INTERNAL_ERROR: "iree-stress's own code failed",
                StopReason.UNKNOWN: "no reason recorded"}[self]


class WorkerOutcome(str, enum.Enum):
    """How a worker process ended, as its row keeps it (workers.outcome)."""

    CLEAN = "clean"
    CRASH = "crash"
    HANG = "hang"
    ERROR = "error"
    FAILED = "failed"  # exec: the command said its tests failed
    HARNESS = "harness"  # iree-stress's own code in the worker failed

    def describe(self) -> str:
        return {WorkerOutcome.CLEAN: "said bye and exited as expected",
                WorkerOutcome.CRASH: "died by a signal or an exit status we did not cause",
                WorkerOutcome.HANG: "killed past a deadline",
                WorkerOutcome.ERROR: "exited with an IREE error",
                WorkerOutcome.FAILED: "the command exited non-zero: its tests failed",
                WorkerOutcome.HARNESS: "failed in iree-stress's own code"}[self]


class ExitPath(str, enum.Enum):
    """How a job process of the `exit` family leaves once its work is reported."""

    CLEAN = "exit-clean"
    ALIVE = "exit-alive"
    INFLIGHT = "exit-inflight"
    THREAD = "exit-thread"
    SIGTERM = "exit-sigterm"
    OS_EXIT = "exit-os-exit"

    def describe(self) -> str:
        return _EXIT_DESCRIPTIONS[self]

    @property
    def runs_exit_handlers(self) -> bool:
        """Whether the process leaves through atexit, exit() and the ELF destructors."""
        return self not in (ExitPath.SIGTERM, ExitPath.OS_EXIT)

    @property
    def expected_returncode(self) -> int:
        """The Popen-style returncode its process ends with when nothing goes wrong."""
        return -int(signal.SIGTERM) if self is ExitPath.SIGTERM else 0


_EXIT_DESCRIPTIONS: dict[ExitPath, str] = {
    ExitPath.CLEAN: "release everything in order, then exit normally",
    ExitPath.ALIVE: "exit normally with the device, program and buffers still alive",
    ExitPath.INFLIGHT: "exit normally with queued copies still in flight (never waited on)",
    ExitPath.THREAD: "exit normally while a second thread still invokes on the device",
    ExitPath.SIGTERM: "SIGTERM arrives while a second thread invokes (expected: that death)",
    ExitPath.OS_EXIT: "release everything, then os._exit: no exit handlers (control arm)",
}
# stored exit_path values of the control arm (os._exit skips the exit handlers): today's name
#   and the names of stores from before the family was named
CONTROL_EXIT_PATHS: frozenset[str] = frozenset({ExitPath.OS_EXIT.value, "os-exit", "os._exit"})


class Family(str, enum.Enum):
    """A group of patterns, selected together by `--patterns FAMILY` (core: by `all`)."""

    CORE = "all"  # the default: in-process patterns and process-per-job
    EXIT = "exit"  # opt-in: exit-alive finds the known local-task exit-order crash every run
    DRIVER = "driver"  # opt-in: the HAL driver itself created and destroyed per job
    NATIVE = "native"  # --engine native: IREE's tools
    EXEC = "exec"  # --engine exec: the user's command

    def describe(self) -> str:
        return {Family.CORE: "device lifecycles inside our workers, and process-per-job",
                Family.EXIT: "one process per job, leaving by a chosen exit path",
                Family.DRIVER: "a new HAL driver per job, destroyed with its device",
                Family.NATIVE: "IREE's own tools, one process per job",
                Family.EXEC: "the user's command, one run per job"}[self]


DEFAULT_INVOCATIONS: int = 20  # per job, for a pattern of no family (unknown to the registry)


@dataclass(frozen=True)
class PatternSpec:
    """What every stage knows of a lifecycle pattern (its code lives in engine/patterns.py,
    engine/exitpaths.py, engine/native.py, engine/execrunner.py)."""

    name: str
    family: Family
    invocations: int  # per job before the engine's job scale: sized so one job takes
    #   roughly 5-50 ms on cpu; a device (or process) per call is slow on GPUs by nature
    one_job_process: bool  # every job runs in a process of its own (one job, then exit)
    summary: str
    exit_path: ExitPath | None = None  # exit family: how its process leaves
    shares_device: bool = False  # its jobs share the process's one device (whose teardown is
    #   attributed to the last of them)
    driver_teardowns: int = 0  # HAL drivers each finished job created and destroyed (the GPU
    #   library opened and closed: IREE's HIP driver dlcloses libamdhip64 at its destroy)

    def describe(self) -> str:
        return self.summary


_NATIVE_ONE_PROCESS: str = "(the native engine's job scale makes it one process per job)"
PATTERNS: dict[str, PatternSpec] = {p.name: p for p in (
    PatternSpec("shared", Family.CORE, 100, False, "one device per process, used by all threads "
                "(each thread has its own context)", shares_device=True),
    PatternSpec("per-thread", Family.CORE, 100, False,
                "each thread owns a device for its whole lifetime"),
    PatternSpec("per-call", Family.CORE, 8, False,
                "device create -> module load -> invoke -> read back -> release, every call"),
    PatternSpec("churn", Family.CORE, 24, False, "devices created and released in bursts; some "
                "released while another thread still has an invocation in flight on them"),
    PatternSpec("instance-churn", Family.CORE, 12, False, "VM instance and HAL driver recreated "
                "too (with a gc pass), in chunks of a job", driver_teardowns=3),
    PatternSpec("cross-thread", Family.CORE, 24, False,
                "device created in one thread, used in a second, released in a third"),
    PatternSpec("process-per-job", Family.CORE, 20, True, "a fresh worker process per job (the "
                "ctest shape): create, run, release, exit"),
    PatternSpec("driver-churn", Family.DRIVER, 12, False, "a new HAL driver per job (not the "
                "cached one), a device on it, run, then device and driver released and "
                "collected: the GPU library opened and closed per job", driver_teardowns=1),
    # the exit family exists for its process exit: a few checked invocations, then the exit
    *(PatternSpec(p.value, Family.EXIT, 4, True, p.describe(), exit_path=p) for p in ExitPath),
    # one process per job: the engines' job scale (1/20) turns the default 20 into 1
    PatternSpec("native-run", Family.NATIVE, DEFAULT_INVOCATIONS, True,
                "one iree-run-module process: device, load, one invocation, teardown"),
    PatternSpec("native-bench", Family.NATIVE, DEFAULT_INVOCATIONS, True,
                "one iree-benchmark-module process: many invocations on one device"),
    PatternSpec("exec", Family.EXEC, DEFAULT_INVOCATIONS, True,
                "one run of the user's command"),
)}


def pattern(name: str) -> PatternSpec | None:
    """The registry's entry for a pattern name (None: a name no stage knows)."""
    return PATTERNS.get(name)


def family(fam: Family) -> tuple[str, ...]:
    """The names of a family's patterns, in registry order."""
    return tuple(p.name for p in PATTERNS.values() if p.family is fam)


def one_job_process(name: str, engine: str = Engine.PYTHON.value) -> bool:
    """Whether every job of this pattern is a process of its own: process-per-job, the exit
    family, and every job of a non-Python engine (a tool or a user's command)."""
    spec = PATTERNS.get(name)
    return Engine.of(engine) is not Engine.PYTHON or (spec is not None and spec.one_job_process)


def exit_path_of(name: str) -> ExitPath | None:
    spec = PATTERNS.get(name)
    return spec.exit_path if spec is not None else None


def driver_teardowns(name: str) -> int:
    """HAL drivers one finished job of this pattern created and destroyed (0: none; the
    driver of the process is released only at its exit)."""
    spec = PATTERNS.get(name)
    return spec.driver_teardowns if spec is not None else 0
