"""Building a runtime stack (`spec.Stack`) into an environment workers run under: its own
cached venv (pip or uv, argv built in pure functions and run apart), the HIP library of its
ROCm side bound by path, the env for a user command under `--engine exec` (`command_env`),
and after each trial `check_facts` / `preflight`: did the workers load what the stack names
(a mismatch is a StackError: the trial is not a result). See `spec` for the stacks file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from stress.fs import atomic_write
from stress.runtimes.spec import Stack, StackError
from stress.ui import Status, duration_text

_PIP_TIMEOUT_S: float = 1800.0  # a TheRock wheel set is ~2 GB: slow links take many minutes
_PROBE_TIMEOUT_S: float = 120.0  # import of rocm_sdk / pip freeze in a fresh venv
_IMPORTED: str = "iree-stress: imported"  # the start-up check's line once its imports worked
_ERROR_TAIL: int = 6  # last lines of pip's / uv's output quoted in a one-line error
HIP_LIBRARY: str = "libamdhip64.so"
ENV_HIP_DYLIB: str = "IREE_HIP_DYLIB_PATH"
STACKS_DIR: str = "stacks"  # under the user cache dir (the artifact cache's root)
LAST_USED: str = ".last-used"  # touched at each use (stress/housekeeping.py reads it)


# --- building (argv in pure functions; running them apart) -------------------------------------

def venv_argv(base_python: str, venv: Path, uv: str | None) -> list[str]:
    if uv:
        return [uv, "venv", "--quiet", "--python", base_python, str(venv)]
    return [base_python, "-m", "venv", str(venv)]


def install_argv(venv: Path, requirements: Sequence[str], index_url: str,
                 find_links: Sequence[str], uv: str | None) -> list[str]:
    """One install step. `--index-url` replaces PyPI (TheRock's index: PyPI has an unrelated
    `rocm`); find_links folders add saved wheels."""
    python = str(venv / "bin" / "python")
    argv = [uv, "pip", "install", "--python", python] if uv else \
        [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    if index_url:
        argv += ["--index-url", index_url]
    for link in find_links:
        argv += ["--find-links", link]
    return argv + list(requirements)


def freeze_argv(venv: Path, uv: str | None) -> list[str]:
    python = str(venv / "bin" / "python")
    return [uv, "pip", "freeze", "--python", python] if uv else \
        [python, "-m", "pip", "freeze", "--disable-pip-version-check"]


def compiler_requirement(version: str) -> str:
    return f"iree-base-compiler=={version}"


@dataclass
class Built:
    """A stack ready to run: the worker interpreter, its env, and what it resolved to."""

    stack: Stack
    python: str
    env: dict[str, str] = field(default_factory=dict)
    freeze: list[str] = field(default_factory=list)
    venv: str = ""
    hip_library: str = ""
    compiler: str = ""  # iree-compile of this stack ('' = the tool's own)
    leases: list[IO[str]] = field(default_factory=list, repr=False, compare=False)
    #   its cached folders' lock files, held shared while the stack is in use (`release`)

    def release(self) -> None:
        """The stack is no longer in use: `clean --cache` may remove its folders."""
        for lease in self.leases:
            lease.close()
        self.leases.clear()

    def manifest(self) -> dict[str, Any]:
        return {"stack": self.stack.name, "python": self.python, "venv": self.venv,
                "freeze": self.freeze, "hip_library": self.hip_library,
                "compiler": self.compiler, "runtime_version": self.stack.runtime_version,
                "env": dict(self.stack.env)}


def _run(argv: list[str], what: str, stack: Stack, timeout: float = _PIP_TIMEOUT_S,
         status: Status | None = None, step: str = "") -> str:
    """Runs one build step and returns its stdout, read as it comes so that `status` can say
    the step, the time it has taken and what pip (or uv) is doing now (an install of
    TheRock's wheels takes minutes). A StackError carries the last lines of its output."""
    started = time.monotonic()
    lines: list[str] = []
    with tempfile.TemporaryFile(mode="w+") as errors:  # stderr apart: stdout is the answer
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, text=True,
                                    bufsize=1)
        except OSError as exc:
            raise StackError(f"{stack.where()}: stack {stack.name!r}: {what} failed: "
                             f"{exc}") from None
        killer = threading.Timer(timeout, proc.kill)  # a stuck install ends (rc -9)
        killer.start()
        collected = 0
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                text = line.strip()
                collected += text.startswith(("Collecting ", "Downloading ", " + "))
                if status is not None and text:
                    status.update(f"stack {stack.name}: {step or what}, "
                                  f"{duration_text(time.monotonic() - started)}"
                                  f"{f', {collected} package step(s)' if collected else ''}: "
                                  f"{text[:70]}")
            rc = proc.wait()
        finally:
            killer.cancel()
        errors.seek(0)
        stderr = errors.read()
    if rc != 0:
        tail = [x.strip() for x in (stderr.splitlines() or lines) if x.strip()]
        msg = " | ".join(tail[-_ERROR_TAIL:])[:1200]
        if rc == -9 and time.monotonic() - started >= timeout:
            msg = f"timed out after {timeout:g} s; {msg}"
        raise StackError(f"{stack.where()}: stack {stack.name!r}: {what} exited {rc}: {msg}")
    return "".join(lines)


def _lock_file(path: Path, mode: int) -> IO[str]:
    """`path` opened and flocked (`mode`); the lock is on the file that is at `path` when it
    is granted (`clean` unlinks a stack's lock file with the stack: a lock taken on the old
    file meanwhile would guard nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        # (read-only: flock needs no write access, and in a cache a group shares the lock
        #   file may be another user's 0644 one; made only when missing)
        f = os.fdopen(os.open(path, os.O_RDONLY | os.O_CREAT, 0o644))
        fcntl.flock(f, mode)
        try:
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                return f
        except FileNotFoundError:
            pass
        f.close()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    f = _lock_file(path, fcntl.LOCK_EX)  # two runs building one venv: the second waits
    try:
        yield
    finally:
        f.close()


def lock_path(folder: Path) -> Path:
    """The lock beside a cached stack folder (a venv, an unpacked ROCm tree): held exclusive
    while it is built, shared while a run uses it; `iree-stress clean` removes the folder only
    under the exclusive lock, so never one in use."""
    return folder.parent / f"{folder.name}.lock"


def _lease(folder: Path, ready: Path, make: Callable[[], None]) -> IO[str]:
    """The folder made (`make()`, under the exclusive lock) until `ready` exists, then its
    lock held shared: the open file is the lease (closing it, or the process ending, ends
    it). (flock cannot turn an exclusive lock into a shared one atomically: a `clean` may
    come between the two, so a folder it removed meanwhile is made again.)"""
    lock = lock_path(folder)
    while True:
        lease = _lock_file(lock, fcntl.LOCK_SH)
        if ready.exists():
            return lease
        lease.close()
        with _locked(lock):
            if not ready.exists():
                make()


def build(stack: Stack, cache_dir: Path, log: Any = None) -> Built:
    """The stack's venv (built once, then reused: a `.built.json` marker written last), its
    HIP library bound, its compiler found. A StackError carries pip's / uv's last lines."""
    env = dict(stack.env)
    if not stack.isolated:
        built = Built(stack, sys.executable, env, _freeze_current(), "")
    else:
        uv = shutil.which("uv")
        venv = cache_dir / STACKS_DIR / f"{stack.name}-{stack.key()}"
        marker = venv / ".built.json"

        def make() -> None:
            if venv.exists():
                shutil.rmtree(venv)  # an interrupted build
            if log:
                log(f"building stack {stack.name} in {venv} ({'uv' if uv else 'venv + pip'})")
            status = log if isinstance(log, Status) else None
            reqs = list(stack.requirements)
            if stack.compiler:
                reqs.append(compiler_requirement(stack.compiler))
            steps = [("venv", venv_argv(stack.python or sys.executable, venv, uv),
                      _PIP_TIMEOUT_S)]
            if stack.rocm_requirements:
                steps.append(("install of rocm_requirements", install_argv(
                    venv, stack.rocm_requirements, stack.rocm_index_url, stack.find_links,
                    uv), _PIP_TIMEOUT_S))
            if reqs:
                steps.append(("install of requirements", install_argv(
                    venv, reqs, stack.index_url, stack.find_links, uv), _PIP_TIMEOUT_S))
            steps.append(("pip freeze", freeze_argv(venv, uv), _PROBE_TIMEOUT_S))
            started = time.monotonic()
            outputs = [_run(argv, what, stack, limit, status, f"step {k}/{len(steps)} {what}")
                       for k, (what, argv, limit) in enumerate(steps, 1)]
            freeze = outputs[-1].split("\n")
            if status is not None:
                status.done(f"stack {stack.name}: built in "
                            f"{duration_text(time.monotonic() - started)}")
            atomic_write(marker, json.dumps({"stack": stack.name, "freeze": [
                x for x in freeze if x.strip()]}, indent=1).encode())

        leases = [_lease(venv, marker, make)]  # held until the run using the stack ends
        recorded = json.loads(marker.read_text())
        try:
            (venv / LAST_USED).touch()  # `iree-stress clean --cache` removes by last use
        except OSError:
            pass
        python = str(venv / "bin" / "python")
        compiler = str(venv / "bin" / "iree-compile") if stack.compiler else ""
        built = Built(stack, python, env, recorded["freeze"], str(venv), compiler=compiler,
                      leases=leases)
    try:
        hip = _hip_library(stack, built, cache_dir)
    except StackError:
        built.release()
        raise
    if hip:
        built.hip_library = hip
        built.env[ENV_HIP_DYLIB] = f"file:{hip}"
    return built


_COMMAND_PATHS: tuple[tuple[str, str], ...] = (("PATH", "bin"), ("LD_LIBRARY_PATH", "lib"))
#   what a ROCm tree gives a user's command (exec engine): its tools first on PATH (ctest
#   finds hipcc, rocminfo...), its libraries first for the loader (a test linked against
#   libamdhip64 or hipBLASLt takes the stack's, not /opt/rocm's)


def command_env(built: Built, inherited: Mapping[str, str]) -> dict[str, str]:
    """The environment a user's command (`--engine exec`) gets under this stack: the stack's
    env and, for a ROCm side, the tree holding its HIP library first on PATH and
    LD_LIBRARY_PATH (before `inherited`'s, else the process's own). A variable the stack's
    env sets itself is left as it says. Our workers need none of this: IREE's HIP driver is
    bound by IREE_HIP_DYLIB_PATH alone."""
    env = dict(built.env)
    if not built.hip_library:
        return env
    lib_dir = Path(built.hip_library).parent
    root = lib_dir.parent if lib_dir.name == "lib" else lib_dir
    for key, sub in _COMMAND_PATHS:
        folder = lib_dir if sub == "lib" else root / sub
        if key in dict(built.stack.env) or not folder.is_dir():
            continue
        rest = inherited.get(key, os.environ.get(key, ""))
        env[key] = os.pathsep.join([str(folder), rest]) if rest else str(folder)
    return env


def _freeze_current() -> list[str]:
    from importlib import metadata

    return sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                  if d.metadata["Name"])


def _hip_library(stack: Stack, built: Built, cache_dir: Path) -> str:
    if stack.rocm:
        root = Path(stack.rocm)
        if root.is_file():
            root = _unpack(root, cache_dir, stack, built)
        return find_hip_in_tree(root, stack)
    if stack.rocm_requirements:
        code = ("import rocm_sdk; print([str(p) for p in "
                "rocm_sdk.find_libraries('amdhip64')][0])")
        out = _run([built.python, "-c", code], "rocm_sdk.find_libraries('amdhip64')", stack,
                   _PROBE_TIMEOUT_S).strip().splitlines()
        if not out or not os.path.isfile(out[-1]):
            raise StackError(f"{stack.where()}: stack {stack.name!r}: the ROCm wheels name no "
                             f"{HIP_LIBRARY} ({out[-1] if out else 'nothing printed'})")
        return out[-1]
    return ""


def find_hip_in_tree(root: Path, stack: Stack) -> str:
    """The HIP library of an /opt/rocm-like tree: lib/libamdhip64.so* (the shortest name: the
    unversioned link when there is one, else libamdhip64.so.7)."""
    found = sorted((p for p in (root / "lib").glob(f"{HIP_LIBRARY}*") if p.is_file()),
                   key=lambda p: (len(p.name), p.name))
    if not found:
        found = sorted(root.rglob(f"{HIP_LIBRARY}*"), key=lambda p: (len(str(p)), str(p)))
    if not found:
        raise StackError(f"{stack.where()}: stack {stack.name!r}: no {HIP_LIBRARY}* under {root}")
    return str(found[0])


def _unpack(tarball: Path, cache_dir: Path, stack: Stack, built: Built) -> Path:
    digest = hashlib.sha256(f"{tarball.resolve()}:{tarball.stat().st_size}:"
                            f"{tarball.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    dest = cache_dir / STACKS_DIR / f"rocm-{digest}"
    marker = dest / ".unpacked"

    def make() -> None:
        if dest.exists():
            shutil.rmtree(dest)
        try:
            with tarfile.open(tarball) as tf:
                if hasattr(tarfile, "data_filter"):
                    tf.extractall(dest, filter="data")
                else:  # pragma: no cover - Python without extraction filters
                    tf.extractall(dest)  # noqa: S202  # our own user's tarball
        except (OSError, tarfile.TarError) as exc:
            raise StackError(f"{stack.where()}: stack {stack.name!r}: cannot unpack "
                             f"{tarball}: {exc}") from None
        marker.write_text(str(tarball))

    built.leases.append(_lease(dest, marker, make))  # its HIP library is used from there
    return dest


# --- checking what the workers really ran -----------------------------------------------------

def check_facts(built: Built, manifest: Mapping[str, Any]) -> list[str]:
    """What is wrong with a trial's worker facts for this stack (empty: it ran what it names).
    A trial whose workers never reported facts (none started) is judged elsewhere."""
    problems: list[str] = []
    if not manifest.get("iree_runtime"):
        return problems
    pinned = built.stack.runtime_version
    version = str(manifest.get("iree_runtime"))
    if pinned and not version.startswith(pinned):
        problems.append(f"workers ran iree.runtime {version}, the stack names {pinned}")
    path = str(manifest.get("iree_runtime_path") or "")
    if built.venv and not _inside(path, built.venv):
        problems.append(f"workers imported iree.runtime from {path or '?'}, not from the "
                        f"stack's venv {built.venv}")
    if built.hip_library:
        loaded = [p for p in [*(manifest.get("loaded_gpu_libraries") or []),
                              *(manifest.get("hip_library_mapped") or [])] if "amdhip" in p]
        want = os.path.realpath(built.hip_library)
        wrong = [p for p in loaded if os.path.realpath(p) != want]
        if wrong:
            problems.append(f"workers loaded {wrong[0]}, the stack binds {built.hip_library}")
        from stress.engine.telemetry import hip_library_path

        reported = manifest.get("hip_library") or hip_library_path(manifest.get("device_info"))
        if reported and os.path.realpath(str(reported)) != want:
            problems.append(f"the HIP driver reports {reported}, the stack binds "
                            f"{built.hip_library}")
    return problems


def _inside(path: str, folder: str) -> bool:
    try:
        return Path(path).resolve().is_relative_to(Path(folder).resolve())
    except (OSError, ValueError):
        return False


def preflight(built: Built, extra_env: Mapping[str, str]) -> str:
    """Can the stack's interpreter import what a worker needs, with the workers' env? '' when
    it can, else the interpreter's or loader's own last lines (the reason a compare reports as
    inconclusive: the soak's driver probe only says that the driver did not load)."""
    env = {**os.environ, **extra_env, **built.env}
    try:
        proc = subprocess.run([built.python, "-c", f"import numpy, iree.runtime, os; "
                               f"print({_IMPORTED!r}, flush=True); os._exit(0)"], env=env,
                              #   (_exit: no exit handlers nor library destructors, where the
                              #   fault being hunted may stall the check until its timeout)
                              capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{built.python} cannot start: {exc}"
    if proc.returncode == 0 or _IMPORTED in proc.stdout.splitlines():  # the imports worked;
        #   only the check's own exit failed: the fault being hunted (a preloaded library
        #   that segfaults at exit) kills the check too, and the soak will record it
        return ""
    tail = [x.strip() for x in (proc.stderr or proc.stdout).splitlines() if x.strip()]
    said = " | ".join(tail[-_ERROR_TAIL:])[:800] or \
        "nothing printed, before `import numpy, iree.runtime` finished"
    how = f"was killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 and \
        -proc.returncode in signal.valid_signals() else f"exited {proc.returncode}"
    return f"{built.python} {how}: {said}"
