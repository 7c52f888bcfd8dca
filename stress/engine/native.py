"""The Runner of `--engine native`: jobs run as IREE's own tools, the C runtime without Python.

Lifecycle shapes are what the tools can do:

* `native-run`: one `iree-run-module` process (device create, module load, one invocation,
  output written with `--output=@F.npy`, teardown): process per job;
* `native-bench`: one `iree-benchmark-module` process running `BENCH_INVOCATIONS`
  invocations on one device: many invocations per process.

`--parallel N` processes run at once and share the device (several processes on one GPU).
Tools come from the active stack's iree-base-runtime (`nativetools.find_tools`). Each
program's inputs are written once (`.npy`, from a fixed seed) and its numpy reference computed
once; every `native-run` output is checked against it in the parent. The output file is the
tool's "done" marker: once it exists the process's exit is under `--teardown-timeout` (a
teardown hang at worker-exit), before it the whole run is under `--timeout` (a hang at
`invoke`). `--record` adds `--device_replay_output` (replay.py: which replays stay, what a
failure folder gets).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stress.engine import postmortem, replay
from stress.engine.invocation import FailureNote, JobResult
from stress.engine.jobs import Job
from stress.engine.journal import Step
from stress.engine.nativetools import (
    NativeTools,
    bench_argv,
    run_prefix,
    run_tail,
)
from stress.engine.toolproc import CoreLimit, Slots, exit_fd, spawn_fast
from stress.engine.watchdog import Stuck
from stress.engine.workermanage import LaunchSpec, Proc, WorkerHandle
from stress.programs import dtypes
from stress.programs.program import Program, Role, make_inputs
from stress.vocab import Family, Numerics, family

NATIVE_PATTERNS: tuple[str, ...] = family(Family.NATIVE)  # (the registry's, stress/vocab.py)
NATIVE_RUN, NATIVE_BENCH = NATIVE_PATTERNS
BENCH_INVOCATIONS: int = 100  # per iree-benchmark-module process: ~50 ms of a small program
_SLOT_MARKER: str = ".slot"  # keeps a slot's core folder non-empty (never tidied away)
_LOG_KEEP_BYTES: int = 256 << 10  # a slot's log is emptied past this (a tool's banner is ~50 B)
INPUT_SEED: int = 0  # inputs are written once per program (the native engine's fixed input)
ONE_PROCESS_SCALE: float = 1 / 20  # jobs.invocations_for's default is 20 per job; a native
#   job is one process (`-n` counts processes)
_STATUS_LINE = re.compile(r"\b([A-Z_]{4,}); ")  # IREE status text: "...: INTERNAL; message"
_INVOKE: str = Step.INVOKE.label  # (an enum property: read per job otherwise)
def unsupported(program: Program) -> str | None:
    """Why the tools cannot run `program` with checked outputs, or None. bf16 has no numpy
    dtype (.npy would say uint16); output arguments (torch style) are not results."""
    if any(a.dtype == "bf16" for a in (*program.args, *program.results)):
        return "bf16 (no .npy dtype)"
    if any(a.role is Role.OUTPUT for a in program.args):
        return "output arguments"
    if len(program.results) != 1:
        return "not exactly one result"
    return None


def status_message(stderr: str) -> str:
    """The IREE status line of a tool that failed (its last line naming a status code), else
    its last non-empty line."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    hits = [x for x in lines if _STATUS_LINE.search(x)]
    return (hits or lines or ["(no output)"])[-1][:2000]


# ---- inputs and expected outputs, once per program ----------------------------------------
@dataclass
class ProgramData:
    inputs: list[Path]
    expected: np.ndarray[Any, Any] | None
    dtype: str
    golden: bytes | None = None  # without a reference: the first output seen
    golden_file: bytes | None = None  # the first output file that passed `check`
    unchecked: bool = False  # --numerics off, or a device that runs no kernels


def prepare(program: Program, folder: Path, seed: int = INPUT_SEED,
            numerics: Numerics = Numerics.REFERENCE) -> ProgramData:
    from stress.programs import reference

    folder.mkdir(parents=True, exist_ok=True)
    arrays = make_inputs(program, seed)
    paths = []
    for i, a in enumerate(arrays):
        p = folder / f"in{i}.npy"
        np.save(p, a)
        paths.append(p)
    expected = reference.evaluate(program.op, program.dtype, arrays) \
        if program.has_reference and numerics is Numerics.REFERENCE else None
    return ProgramData(paths, expected, program.results[0].dtype,
                       unchecked=numerics is Numerics.OFF)


def check(data: ProgramData, out: np.ndarray[Any, Any]) -> str | None:
    """None when `out` matches the reference (else the first output seen); else why not."""
    from stress.programs import reference

    if data.unchecked:
        return None
    if data.expected is not None:
        if out.dtype != np.dtype(dtypes.get(data.dtype).storage):
            return f"output dtype {out.dtype}, expected {dtypes.get(data.dtype).storage}"
        if not reference.matches(data.dtype, out, data.expected):
            return ("output 0 differs from the numpy reference (max abs error "
                    f"{reference.max_error(data.dtype, out, data.expected):.3g})")
        return None
    if data.golden is None:
        data.golden = out.tobytes()
        return None
    return None if out.tobytes() == data.golden else \
        "output 0 differs from the first result of this program"


# ---- one process --------------------------------------------------------------------------
@dataclass
class NativeJudge:
    """Deadlines, end and evidence of one tool process (its handle's workermanage.Judge)."""

    handle: WorkerHandle | None
    job: Job
    data: ProgramData
    started_ns: int
    started_wall: float
    timeout_s: float
    teardown_timeout_s: float
    output: str | None  # native-run: the done marker and the result (a str: the os calls
    #   on it run per job, and pathlib's cost per call showed in the parent's profile)
    tools: NativeTools
    keeper: replay.ReplayKeeper | None
    replay_path: Path | None
    done_ns: int | None = None
    settled: bool = False
    kept: bool | None = None  # the keeper kept its replay (False: not written, or over the cap)
    facts_cache: dict[str, Any] = field(default_factory=dict)
    exe: str = ""  # the tool (its core's executable)
    step: str = _INVOKE  # blamed when nothing else names a step
    group: None = None  # a tool starts no processes of its own that we watch

    def watch(self, now_ns: int) -> Stuck | None:
        if self.done_ns is None and self.output is not None and os.path.exists(self.output):
            self.done_ns = now_ns
        if self.done_ns is not None:
            age = (now_ns - self.done_ns) / 1e9
            if age > self.teardown_timeout_s:
                return Stuck(None, Step.WORKER_EXIT, Step.WORKER_EXIT.label, True, age)
            return None
        age = (now_ns - self.started_ns) / 1e9
        if age > self.timeout_s:
            return Stuck(None, Step.INVOKE, Step.INVOKE.label, False, age)
        return None

    def finish(self, rc: int) -> list[tuple[str, dict[str, Any]]]:
        """job_done (+ bye) for a tool that got its work done (or failed it with an IREE
        status: an error, its clean way to end); nothing for one that died while working."""
        h = self.handle
        pid = h.pid if h else 0  # (its process group is killed by the session's on_exit)
        res = JobResult()
        raw = self._take_output()
        done = self.output is None and rc == 0 or raw is not None
        if done:  # it ran the function, on the one device it created
            res.devices_created = 1
        if raw is not None:
            res.invocations = 1
            why = self._check(raw)
            if why is None:
                res.ok = 1
            else:
                self._note(res, "miscompare", Step.CHECK.label, why)
        elif done:
            res.invocations = res.ok = BENCH_INVOCATIONS
        elif rc > 0 and h is not None:  # an IREE status error: the tool reported it
            res.invocations = 1
            self._note(res, "error", Step.INVOKE.label, status_message(h.tail(h.stderr_path)))
            h.expected_rc = rc
        else:
            self._settle(True)
            return []
        res.add_latency((time.monotonic_ns() - self.started_ns) / 1e9)
        failed = bool(res.errors or res.miscompare) or (h is not None and rc != h.expected_rc)
        self._settle(failed)
        return [("job_done", {"job": self.job.as_dict(), "started": self.started_wall,
                              "ended": time.time(), "result": res.as_dict(), "pid": pid}),
                ("bye", {})]  # (pid and exit status are columns of its row already)

    def _take_output(self) -> bytes | Exception | None:
        """The output file's bytes, deleted once read (one open, no exists() first); None when
        the tool wrote none, the error when it cannot be read."""
        if self.output is None:
            return None
        try:
            with open(self.output, "rb") as f:
                raw: bytes | Exception = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raw = exc
        try:
            os.unlink(self.output)
        except FileNotFoundError:
            pass
        return raw

    def _check(self, raw: bytes | Exception) -> str | None:
        """The output against the reference; a file byte-identical to one that matched it
        before passes without decoding (the common case, ~0.4 ms less per job)."""
        if isinstance(raw, Exception):
            return f"output file unreadable: {raw}"
        if raw == self.data.golden_file:
            return None
        try:
            out = np.load(io.BytesIO(raw))
        except ValueError as exc:
            return f"output file unreadable: {exc}"
        why = check(self.data, out)
        if why is None and self.data.golden_file is None:
            self.data.golden_file = raw
        return why

    def _note(self, res: JobResult, cls: str, step: str, message: str) -> None:
        note = FailureNote(cls, step, message, invocation=0, device=0)
        if cls == "error":
            res.errors += 1
        else:
            res.miscompare += 1
        res.failures.append(note)
        res.counts[note.key()] = res.counts.get(note.key(), 0) + 1

    def _settle(self, failed: bool) -> None:
        if self.keeper is not None and self.replay_path is not None and not self.settled:
            self.settled = True
            self.kept = self.keeper.settle(self.replay_path, self.job.program, failed)

    def child_crash(self) -> None:
        return None

    def facts(self) -> dict[str, Any]:
        return {"native_tool": self.tools.folder.name, "output_written": self.done_ns is not None
                or bool(self.output and os.path.exists(self.output)), **self.facts_cache}

    def add_evidence(self, folder: Path) -> None:
        """The replay and its JSONL tail into the failure folder (--record)."""
        if self.replay_path is None:
            return
        self._settle(True)
        tool = self.tools.path("dump") if self.tools.has("dump") else None
        facts = replay.write_evidence(tool, self.replay_path, folder)
        if self.kept is False and self.keeper is not None:
            facts["replay_note"] = (
                f"not kept: the run's replays reached the {self.keeper.cap_bytes >> 20} MiB "
                f"cap ({self.keeper.kept_bytes >> 20} MiB kept), or none was written")
        (folder / "replay.json").write_text(json.dumps(facts, indent=1))



# ---- the runner ---------------------------------------------------------------------------
class NativeRunner:
    """Launches each native job as an IREE tool process (module doc)."""

    name = "native"

    def __init__(self, tools: NativeTools, programs: dict[str, Program],
                 artifacts: dict[str, Path], device: str, run_dir: Path, record: bool = False,
                 env: dict[str, str] | None = None,
                 numerics: dict[str, Numerics] | None = None):
        self.tools, self.programs, self.artifacts = tools, programs, artifacts
        self.numerics = numerics or {}  # program -> how its results are checked
        self.device = device
        self.folder = run_dir.resolve() / "native"
        self.data: dict[str, ProgramData] = {}
        self.keeper = replay.ReplayKeeper(self.folder / "replays") if record else None
        self.env = {**os.environ, **(env or {})}
        self.parent = os.getpid()
        self.run_dir = run_dir.resolve()
        self.slots = Slots(on_exit=False, busy=self.core_pending)  # a slot is a core folder
        self.spare: list[tuple[Proc, int]] = []
        self.slot_logs: dict[int, tuple[Path, list[tuple[Path, int]], int]] = {}
        self.journal = self.run_dir / "journal" / "none.bin"  # tool processes keep none
        self.prefix: dict[str, list[str]] = {}  # program -> run_prefix (built once)
        self.core_limit: CoreLimit | None = None  # raised at the first launch, until close

    def program_data(self, name: str) -> ProgramData:
        if name not in self.data:
            self.data[name] = prepare(self.programs[name], self.folder / "inputs" / name,
                                      numerics=self.numerics.get(name, Numerics.REFERENCE))
        return self.data[name]

    def core_pending(self, slot: int) -> bool:
        """A core still in the slot's folder: its reader has not finished (then deletes it).
        Only a process killed by a signal can have left one (our SIGKILL leaves none, and its
        core is discarded): the folder is listed only then (a listdir per job cost ~3% of the
        parent's time per job)."""
        entry = self.slot_logs.get(slot)
        h = self.slots.held.get(slot)
        if entry is None or h is None or (h.proc.returncode or 0) >= 0:
            return False
        try:
            return any(n.startswith("core") for n in os.listdir(entry[0]))
        except OSError:
            return False

    def slot_files(self, slot: int) -> tuple[Path, Path, int, int]:
        """(core folder, log path, log fd, where the next process's output starts in it) for
        the next process of `slot`. Every metadata operation per job costs (creating,
        truncating, removing files took 0.5-2 ms each on this shared disk under load), so: two
        logs per slot used in turn, kept open, emptied only past _LOG_KEEP_BYTES (a process's
        output is read from its start offset on); stdout and stderr go to the same log (in
        order: the IREE status line of a failed tool is found in it all the same), which the
        tool's banner keeps from being tidied away as empty; the slot folder holds a marker so
        that it stays. The log not taken still holds the previous job's output until that
        job's exit is handled."""
        if slot not in self.slot_logs:
            cwd = postmortem.core_dir(self.run_dir, f"slot{slot}")
            (cwd / _SLOT_MARKER).touch()
            logs = self.run_dir / "workers"
            logs.mkdir(parents=True, exist_ok=True)
            turns = [(p, self._open_log(p)) for p in (logs / f"slot{slot}a.log",
                                                       logs / f"slot{slot}b.log")]
            self.slot_logs[slot] = (cwd, turns, 0)
        cwd, turns, turn = self.slot_logs[slot]
        self.slot_logs[slot] = (cwd, turns, 1 - turn)
        path, fd = turns[turn]
        st = os.fstat(fd)
        start = st.st_size
        if st.st_nlink == 0:  # tidied away after all
            os.close(fd)
            fd = self._open_log(path)
            turns[turn] = (path, fd)
            start = 0
        elif start > _LOG_KEEP_BYTES:
            os.ftruncate(fd, 0)
            start = 0
        return cwd, path, fd, start

    @staticmethod
    def _make_slot_dir(cwd: Path) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        (cwd / _SLOT_MARKER).touch()

    @staticmethod
    def _open_log(path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def launch(self, spec: LaunchSpec) -> WorkerHandle:
        job = spec.job
        if job is None:
            raise ValueError("a native job runs as its own process: LaunchSpec.job is needed")
        for p, fd in [x for x in self.spare if x[0].poll() is not None]:
            os.close(fd)
            self.spare.remove((p, fd))
        slot = self.slots.take()
        cwd, log_path, log_fd, log_from = self.slot_files(slot)
        prog = self.programs[job.program]
        data = self.program_data(job.program)
        replay_path = self.keeper.path(f"{spec.name}-j{job.index}") if self.keeper else None
        output: str | None = None
        if job.pattern == NATIVE_BENCH:
            argv = bench_argv(self.tools, self.artifacts[job.program], self.device, prog.entry,
                              data.inputs, BENCH_INVOCATIONS, replay_path)
        else:
            output = f"{cwd}/{spec.name}.out.npy"  # per process: the slot's previous job
            #   may still be unchecked when this one starts
            if job.program not in self.prefix:
                self.prefix[job.program] = run_prefix(self.tools, self.artifacts[job.program],
                                                      self.device, prog.entry, data.inputs)
            argv = self.prefix[job.program] + run_tail(output, replay_path)
        if self.core_limit is None:
            self.core_limit = CoreLimit()
        try:
            proc = spawn_fast(argv, stdout_fd=log_fd, stderr_fd=log_fd, env=self.env, cwd=cwd,
                              parent_pid=self.parent, limit_raised=True)
        except FileNotFoundError:
            if os.path.isdir(cwd):
                raise  # (the tool itself is gone)
            self._make_slot_dir(cwd)  # tidied away after all (checked only now: a stat per
            #   job showed in the parent's profile)
            proc = spawn_fast(argv, stdout_fd=log_fd, stderr_fd=log_fd, env=self.env, cwd=cwd,
                              parent_pid=self.parent, limit_raised=True)
        fd, spare = exit_fd(proc)
        if spare is not None:
            self.spare.append((proc, spare))
        h = WorkerHandle(spec.worker_id, spec.generation, proc, fd, self.journal, log_path,
                         log_path, ephemeral=True, messages=False, log_from=log_from)
        self.slots.hold(slot, h)
        h.judge = NativeJudge(h, job, data, time.monotonic_ns(), time.time(), spec.timeout_s,
                              spec.teardown_timeout_s, output, self.tools, self.keeper,
                              replay_path, exe=argv[0], step=_INVOKE)
        h.cwd = cwd
        return h

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        if self.core_limit is not None:
            self.core_limit.close()
            self.core_limit = None  # a later launch raises it again
        for _, fd in self.spare:
            os.close(fd)
        self.spare.clear()
        for _, turns, _ in self.slot_logs.values():
            for _, fd in turns:
                os.close(fd)
        self.slot_logs.clear()

    def summary(self) -> dict[str, Any]:
        return {"tools": str(self.tools.folder), "python": sys.executable,
                "replays": self.keeper.summary() if self.keeper else None}
