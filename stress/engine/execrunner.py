"""The Runner of `--engine exec -- CMD`: every job runs the user's own command (a ctest test, a
Catch2 binary, a script) as one process, judged like a worker without a journal.

The command runs without a shell, `{seed}`, `{job}` and `{gpu}` substituted in its arguments, in
its own process group, in the directory iree-stress was started from (relative paths in the
command mean what they mean in the user's shell), with core dumps on (`postmortem.
prepare_child`, so a crash leaves a core for its native stacks). Its deadlines are its own
(`watch`): `--timeout` for the whole command and, once its output matched `--done-regex` (the
test said it finished its work), `--teardown-timeout` for its exit: past that it is a teardown
hang at `worker-exit`, the fusilli stall. At its exit `finish` turns the exit into the messages
a Python worker would have sent (job_done, bye). The session does everything else: evidence,
classification, store rows, reports.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.engine import postmortem, testlog
from stress.engine.children import CHILD_CORES, ChildCrash, GroupWatch, sweep_leftovers
from stress.engine.invocation import JobResult
from stress.engine.jobs import Job
from stress.engine.journal import Step
from stress.engine.toolproc import Slots, exit_fd, job_paths, spawn
from stress.engine.watchdog import Stuck
from stress.engine.workermanage import LaunchSpec, Proc, WorkerHandle, signal_group
from stress.keys import blank_numbers
from stress.programs.program import Arg, Program
from stress.stacktext import faulthandler_top

EXEC_PATTERN: str = "exec"  # the one lifecycle "pattern" of exec jobs: the command itself
RUN_STEP: str = "run"  # the step blamed while the command runs (before its done marker)
PLACEHOLDERS: tuple[str, ...] = ("seed", "job", "gpu")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
_LAUNCHERS: frozenset[str] = frozenset({
    "python", "python3", "sh", "bash", "env", "timeout", "taskset", "numactl", "uv",
    })  # a command whose own name says little: the program is its first operand (a test
#   runner is named by its test paths instead: _RUNNERS)
OUTPUT_KEY_LINES: int = 3  # last non-empty lines of output in a signature: enough to tell
#   "SIGSEGV after 'Tests passed'" from a failed assertion, few enough to stay stable
_OUTPUT_KEY_LINE_CHARS: int = 160
_CARRY_MAX: int = 4096  # a partial line kept between reads (a marker split across writes)
_PATH = re.compile(r"(?:/[\w.+@-]+){2,}/?")


# ---- pure helpers -----------------------------------------------------------------------
def substitute(argv: Sequence[str], values: Mapping[str, object]) -> list[str]:
    """`{seed}`, `{job}`, `{gpu}` in each argument replaced by `values` (no shell, so no other
    expansion); other braces (JSON, shell syntax) stay as they are. Pure."""
    return [_PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), a) for a in argv]


def program_name(argv: Sequence[str], cwd: Path | None = None, name: str | None = None
                 ) -> str:
    """A stable name for the command, so reports group its jobs and keep two suites apart:
    `exec:NAME` with NAME `name` (`--name`) when given; else the command's basename, or for a
    launcher (python, sh, pytest, ...) that and its first operand's basename
    (`exec:python:test_device.py`); for a test runner (pytest, also as `python -m pytest`;
    ctest) the runner and the paths it was given, where the folder it ran in prefixes a
    relative one (`exec:pytest:proj/tests`; none given: the folder, `exec:ctest:build`), so
    two suites run by `python -m pytest` are two programs. Pure but for `cwd`'s listing."""
    if name:
        return f"exec:{name}"
    if not argv:
        return "exec:?"
    head = os.path.basename(argv[0])
    operands = [a for a in argv[1:] if not a.startswith("-") and "=" not in a]
    module = argv[argv.index("-m") + 1] if "-m" in argv[1:-1] else None
    runner = module if module in _RUNNERS else re.sub(r"[\d.]+$", "", head) \
        if re.sub(r"[\d.]+$", "", head) in _RUNNERS else None
    if runner is not None:
        return f"exec:{runner}:{_suite_paths(argv, cwd, runner)}"
    name = head
    if re.sub(r"[\d.]+$", "", head) in _LAUNCHERS and operands:
        name = f"{head}:{os.path.basename(operands[0].rstrip('/'))}"
    return f"exec:{name}"


_RUNNERS: frozenset[str] = frozenset({"pytest", "py.test", "ctest"})  # named by their paths
_SUITE_NAME_CHARS: int = 120  # a name that lists many test paths is cut (it stays distinct)


def _exists(cwd: Path | None, name: str) -> bool:
    try:
        return cwd is not None and (cwd / name).exists()
    except (OSError, ValueError):  # a name too long for a path (`python -c CODE`)
        return False


def _suite_paths(argv: Sequence[str], cwd: Path | None, runner: str) -> str:
    """The test paths a runner was given (operands that are paths: with a slash, a `.py`, or
    there in `cwd`; ctest's `--test-dir DIR`), a relative one prefixed with `cwd`'s name;
    none: `cwd`'s name."""
    paths: list[str] = []
    for i, a in enumerate(argv[1:], 1):
        if argv[i - 1] == "--test-dir" or a.startswith("--test-dir="):
            a = a.split("=", 1)[-1]
        elif a.startswith("-") or "{" in a or (runner != "ctest" and a == runner) or \
                not ("/" in a or a.endswith(".py") or _exists(cwd, a)):
            continue  # an option, a placeholder, the runner's module, an option's value
        a = a.split("::", 1)[0].rstrip("/") or "/"
        if not a.startswith("/") and cwd is not None:
            a = f"{cwd.name}/{a}" if a != "." else cwd.name
        paths.append(a)
    if not paths:
        return cwd.name if cwd is not None else "."
    return ",".join(dict.fromkeys(paths))[:_SUITE_NAME_CHARS]


def normalize_line(line: str) -> str:
    """An output line with paths, addresses and numbers blanked: lines that differ only in a
    pid, a time or a temp folder read the same. Pure."""
    return blank_numbers(_PATH.sub("<path>", line.strip()))[:_OUTPUT_KEY_LINE_CHARS]


def output_key(text: str, lines: int = OUTPUT_KEY_LINES,
               skip: re.Pattern[str] | None = None) -> list[str]:
    """The last `lines` non-empty lines of `text`, normalized (for signatures), but those
    matching `skip` (the done marker: a runner's "3 passed in 2.1s" says nothing of what
    failed after it). Pure."""
    kept = [normalize_line(x) for x in text.splitlines()
            if x.strip() and (skip is None or not skip.search(x))]
    return kept[-lines:]


def resolve_executable(argv0: str, cwd: Path, env: Mapping[str, str]) -> str:
    """The file a core of this command belongs to (for gdb): a path as given (relative to
    `cwd`), else found on the command's PATH; the name itself when nothing matches."""
    if os.sep in argv0:
        return str((cwd / argv0).resolve())
    found = shutil.which(argv0, path=env.get("PATH"))
    return found or argv0


@dataclass
class OutputWatch:
    """Follows a process's output files and notes when a line first matches `pattern`."""

    paths: tuple[Path, ...]
    pattern: re.Pattern[str] | None
    offsets: list[int] = field(default_factory=list)
    carry: list[bytes] = field(default_factory=list)
    matched_ns: int | None = None

    def __post_init__(self) -> None:
        self.offsets = [0] * len(self.paths)
        self.carry = [b""] * len(self.paths)

    def poll(self, now_ns: int) -> int | None:
        """Reads what was written since the last call; returns when the marker was first
        seen (the time of the read that saw it), or None."""
        if self.pattern is None or self.matched_ns is not None:
            return self.matched_ns
        for i, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[i])
                    chunk = f.read()
            except OSError:
                continue
            if not chunk:
                continue
            self.offsets[i] += len(chunk)
            *lines, rest = (self.carry[i] + chunk).split(b"\n")
            self.carry[i] = rest[-_CARRY_MAX:]
            if any(self.pattern.search(x.decode(errors="replace")) for x in [*lines, rest]):
                self.matched_ns = now_ns
                break
        return self.matched_ns


# ---- one process ------------------------------------------------------------------------
@dataclass
class ExecJudge:
    """The deadlines, end and evidence of one command process (its handle's
    workermanage.Judge)."""

    job: Job | None
    pid: int
    started_ns: int
    started_wall: float
    timeout_s: float
    teardown_timeout_s: float
    output: OutputWatch
    logs: tuple[Path, Path]
    group: GroupWatch | None = None  # the other processes of its group, and their cores
    keep_logs: bool = False
    exe: str = ""  # the command's program, resolved (its core's executable)
    step: str = RUN_STEP  # blamed when nothing else names a step
    runner: ExecRunner | None = None  # told of the exit (a crashed copy's core in the cwd)
    name: str = ""  # what a user calls the command's process (`pytest`): testlog.command_name
    cwd: Path | None = None  # where the command runs (test paths are shown relative to it)
    runner_marker: bool = False  # the marker is the test runner's own summary (no
    #   --done-regex): a plain non-zero status after it is its tests' verdict, not its exit's

    def done_ns(self, now_ns: int) -> int | None:
        return self.output.poll(now_ns)

    def watch(self, now_ns: int) -> Stuck | None:
        """Past `--teardown-timeout` after the done marker: a teardown hang at worker-exit;
        else past `--timeout` since the start: a hang in `run`. The group's processes and
        cores are looked at on the way (`children.GroupWatch.tick`)."""
        if self.group is not None:
            self.group.tick(now_ns / 1e9)
        done = self.done_ns(now_ns)
        if done is not None:
            age = (now_ns - done) / 1e9
            if age > self.teardown_timeout_s:
                return Stuck(None, Step.WORKER_EXIT, Step.WORKER_EXIT.label, True, age)
            return None
        age = (now_ns - self.started_ns) / 1e9
        if age > self.timeout_s:
            return Stuck(None, None, RUN_STEP, False, age)
        return None

    def finish(self, rc: int) -> list[tuple[str, dict[str, Any]]]:
        """The messages of a command that ended: job_done and bye when it did its work
        (printed its done marker, or exited 0 without one being asked for or seen), so a
        death after the marker is a failure of the process's exit; nothing when it died or
        failed while working (the session records a crash while running the job). Whatever
        it left running in its process group is killed. After a clean exit the cores of its
        group (a death test's, a crash the test expected) are deleted: nothing failed."""
        if self.runner is not None:
            self.runner.note_exit(self.pid, rc)
        signal_group(self.pid, signal.SIGKILL)
        if self.group is not None and rc == 0:
            self.group.discard()
        done = self.done_ns(time.monotonic_ns()) is not None
        if done and rc > 0 and self.runner_marker:
            done = False  # "1 failed, 3 passed", then exit 1: failed while running
        tests = self.tests()
        if rc == 0 and tests.ran() == 0:
            return []  # a job that ran no test is not clean (capture: `failed`, said why)
        if not (done or rc == 0) or self.job is None:
            return []
        res = JobResult(invocations=1, ok=int(rc == 0))
        res.add_latency((time.monotonic_ns() - self.started_ns) / 1e9)
        payload = {"job": self.job.as_dict(), "started": self.started_wall,
                   "ended": time.time(), "result": res.as_dict(), "pid": self.pid,
                   **({"tests": tests.counted()} if tests.runner else {})}
        if rc == 0 and not self.keep_logs:
            for p in self.logs:  # a clean job's output is not evidence of anything
                p.unlink(missing_ok=True)
        return [("job_done", payload), ("bye", {})]  # (pid, status: columns of its row)

    def facts(self) -> dict[str, Any]:
        """For the failure's evidence: the last lines of output (normalized) that signatures
        of exec jobs use (for a Python command that crashed, the top of faulthandler's dump
        instead: the tail of its output is the dump's boilerplate), whether the done marker
        was seen, the runner's failing tests and the processes the output says died by a
        signal (`testlog`)."""
        text = "".join(_tail(p) for p in self.logs)
        top = faulthandler_top(_tail(self.logs[1], _DUMP_BYTES))  # a Python command's crash
        out: dict[str, Any] = {"output_key": [normalize_line(x) for x in top] if top else
                               output_key(text, skip=self.output.pattern), "done_marker_seen":
                               self.output.matched_ns is not None}
        report = "".join(_tail(p, _REPORT_BYTES) for p in self.logs)
        tests = testlog.summarize(report)
        if tests.runner:
            out["tests"] = tests.as_dict()
        if tests.ran() == 0:  # its mode is "no test ran", whatever it printed last
            counts = ", ".join(f"{n} {k}" for k, n in tests.counts.items() if n)
            out["output_key"] = [normalize_line(f"{tests.runner} ran no test"
                                                f"{f' ({counts})' if counts else ''}")]
        deaths = testlog.signal_deaths(report)
        if deaths:
            out["signal_deaths"] = [d.as_dict() for d in deaths[:_DEATHS_KEPT]]
        out["command_name"] = self.name
        running = testlog.running_test(report, str(self.cwd) if self.cwd else None)
        if deaths and tests.failed:  # a process a test started died: the test that failed
            running = next((t for t in tests.failed if any(
                t in line for line in report.splitlines() if deaths[0].name in line)),
                tests.failed[0])
        if running:
            out["running_test"] = running
        if self.group is not None:
            out["group"] = self.group.summary()
        return out

    def tests(self) -> testlog.TestSummary:
        """What the test runner printed about its tests (`testlog.summarize`)."""
        return testlog.summarize("".join(_tail(p, _REPORT_BYTES) for p in self.logs))

    def signal_deaths(self) -> list[testlog.SignalDeath]:
        """The processes the command's output says died by a signal (`testlog`)."""
        return testlog.signal_deaths("".join(_tail(p, _REPORT_BYTES) for p in self.logs))

    def child_crash(self) -> ChildCrash | None:
        """The process of its group killed by a signal (`children.GroupWatch.crashed`), with
        its whole command line from the output when it was not seen alive."""
        if self.group is None:
            return None
        deaths = self.signal_deaths()
        child = self.group.crashed(deaths)
        if child is not None and not child.command:
            child.command = next((d.command for d in deaths
                                  if d.name == child.name and d.command), "")
        return child

    def add_evidence(self, folder: Path) -> None:
        """Nothing of its own: its output is in the folder already."""


_TAIL_BYTES: int = 8192
_REPORT_BYTES: int = 256 << 10  # output read for the runner's summary and signal deaths: a
#   pytest report prints each failure's traceback before its short summary (6 KiB for 4 in
#   tests/data/testlogs/pytest.txt, one with subprocess.run's source); 256 KiB holds
#   dozens, and is read once per failed job
_DEATHS_KEPT: int = 5
_DUMP_BYTES: int = 64 << 10  # stderr read for faulthandler's report: its head must be in it
#   (4 KiB for a pytest process's one thread; every other thread adds its frames after it)


def _tail(path: Path, size: int = _TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


_CORE_READ_WAIT_S: float = postmortem.NATIVE_STACKS_TIMEOUT_S + 5.0  # a core's reader
#   deletes it within its timeout; past that the launches go on
_HANDLED_KEPT: int = 1024  # far more than the copies that can run at once


# ---- the runner -------------------------------------------------------------------------
@dataclass
class ExecCommand:
    """What exec jobs run: the argv template, where, and the done marker."""

    argv: list[str]
    cwd: Path
    done_regex: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # the user's --env

    def validate(self) -> None:
        """Raises ValueError (the CLI turns it into a usage error) for an empty command or a
        done regex that does not compile."""
        if not self.argv:
            raise ValueError("--engine exec needs a command after `--`")
        if self.done_regex is not None:
            try:
                re.compile(self.done_regex)
            except re.error as exc:
                raise ValueError(f"--done-regex {self.done_regex!r}: {exc}") from None


class ExecRunner:
    """Launches each exec job as the user's command (module doc)."""

    name = "exec"

    def __init__(self, command: ExecCommand, parent_pid: int | None = None,
                 popen: Callable[..., Any] = subprocess.Popen):
        command.validate()
        self.command = command
        self.pattern = re.compile(command.done_regex or testlog.done_marker(command.argv))
        self.parent_pid = parent_pid if parent_pid is not None else os.getpid()
        self.popen = popen
        self.slots = Slots()  # {gpu}: the copy's slot among those running
        self.handled: dict[int, None] = {}  # crashed pids noted once (the newest only)
        self.dumped: dict[int, float] = {}  # pid -> when: crashed copies whose core may
        #   still wait in the shared cwd for its (background) reader
        pattern, uses_pid = self.core_pattern = postmortem.read_core_pattern()
        self.cores_collide = not pattern.startswith("|") and "%p" not in pattern and \
            not uses_pid and not pattern.startswith("/")
        self.spare_fds: dict[int, tuple[Proc, int]] = {}  # exit_fd's pipe ends, no pidfd
        self.kernel_claimed: dict[int, None] = {}  # kernel fault lines a job blamed already
        self.sessions: dict[int, tuple[float, float | None]] = {}  # every command's pid (its
        #   session's id) -> (started, ended or None), wall clock: whose cores are the run's

    def _close_spares(self, every: bool = False) -> None:
        for pid, (p, fd) in list(self.spare_fds.items()):
            if every or p.poll() is not None:
                os.close(fd)
                del self.spare_fds[pid]

    def env(self, job: Job | None, slot: int) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONFAULTHANDLER"] = "1"  # a Python command's crash names its frames
        env.update({"IREE_STRESS_JOB": str(job.index if job else 0),
                    "IREE_STRESS_SEED": str(job.seed if job else 0),
                    "IREE_STRESS_GPU": str(slot)})
        env.update(self.command.env)
        return env

    def ready(self) -> bool:
        """False while a crashed copy's core waits in the shared cwd to be read: every copy
        runs in the user's folder, and where core_pattern names no pid a second crash would
        replace that core (the kernel unlinks a `core` of the same name). Bounded by the
        reader's own timeout, so a core that is never deleted cannot stall the run."""
        if not self.cores_collide:
            return True
        for h in self.slots.held.values():  # reaped, perhaps not handled yet
            if h.proc.returncode is not None:
                self.note_exit(h.pid, h.proc.returncode)
        now = time.monotonic()
        for pid, at in list(self.dumped.items()):
            core = self.command.cwd / "core"
            notes = postmortem.read_core_notes(core) if core.exists() else None
            if notes is None or notes.pid != pid or now - at > _CORE_READ_WAIT_S:
                del self.dumped[pid]
        return not self.dumped

    def note_exit(self, pid: int, rc: int) -> None:
        if pid in self.sessions and self.sessions[pid][1] is None:
            self.sessions[pid] = (self.sessions[pid][0], time.time())
        if rc < 0 and self.cores_collide and pid not in self.handled:
            self.dumped[pid] = time.monotonic()
            self.handled[pid] = None
            if len(self.handled) > _HANDLED_KEPT:
                del self.handled[next(iter(self.handled))]

    def launch(self, spec: LaunchSpec) -> WorkerHandle:
        journal, out_path, err_path = job_paths(spec)
        job = spec.job
        self._close_spares()
        slot = self.slots.take()
        values = {"seed": job.seed if job else 0, "job": job.index if job else 0, "gpu": slot}
        argv = substitute(self.command.argv, values)
        env = self.env(job, slot)
        cwd = self.command.cwd
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = spawn(argv, stdout=out, stderr=err, env=env, cwd=cwd,
                         parent_pid=self.parent_pid, popen=self.popen)
        self.sessions[proc.pid] = (time.time(), None)
        fd, spare = exit_fd(proc)
        if spare is not None:
            self.spare_fds[proc.pid] = (proc, spare)
        h = WorkerHandle(spec.worker_id, spec.generation, proc, fd, journal, out_path,
                         err_path, ephemeral=True, messages=False)
        self.slots.hold(slot, h)
        group = GroupWatch(proc.pid, cwd, spec.run_dir.resolve() / postmortem.CORES_FOLDER /
                           CHILD_CORES, time.time(), self.core_pattern, self.kernel_claimed)
        h.judge = ExecJudge(job, proc.pid, time.monotonic_ns(), time.time(), spec.timeout_s,
                            spec.teardown_timeout_s, OutputWatch((out_path, err_path),
                                                                 self.pattern),
                            (out_path, err_path), group,
                            exe=resolve_executable(argv[0], cwd, env), runner=self,
                            name=testlog.command_name(argv), cwd=cwd,
                            runner_marker=self.command.done_regex is None)
        h.cwd = cwd
        return h

    def close(self) -> None:
        for h in self.slots.live():
            if h.poll() is None:
                signal_group(h.pid, signal.SIGKILL)
        self._close_spares(every=True)
        if self.sessions:  # never a core of ours left in the user's folders
            sweep_leftovers(self.command.cwd, self.sessions, self.core_pattern)


ONE_RUN_SCALE: float = 1 / 20  # jobs.invocations_for gives a pattern it does not know 20
#   invocations per job; an exec job is one run of the command


def exec_program(argv: Sequence[str], cwd: Path | None = None, name: str | None = None
                 ) -> Program:
    """The command as the schedule's one "program" (its name groups reports: program_name)."""
    return Program(name=program_name(argv, cwd, name), kind="exec", op="exec", dtype="none",
                   args=(), results=(Arg((1,), "none"),), mlir="", source="exec")
