"""iree-compile: locating it, its version and options, pure argv building, and running it."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from stress.errors import UsageError
from stress.programs.program import Program
from stress.programs.targets import Target

_COMPILE_TIMEOUT_S: float = 600.0  # 8M-element programs take seconds; a stuck compile is a bug
_DIAGNOSTIC_LINES: int = 12  # first lines of compiler output shown for a failed program
_RUNNING: set[subprocess.Popen[str]] = set()  # compiles running now (stop_all)
_RUNNING_LOCK = threading.Lock()  # compiles start and end on the cache's pool threads


@dataclass(frozen=True)
class CompilerInfo:
    path: str
    version: str  # "3.13.0rc20261016 @ 89ece87..."
    option_names: frozenset[str]


class CompileError(Exception):
    """One program failed to compile; carries everything needed to rerun it by hand."""

    def __init__(self, program: str, argv: list[str], returncode: int, stdout: str, stderr: str):
        self.program, self.argv, self.returncode = program, argv, returncode
        self.stdout, self.stderr = stdout, stderr
        super().__init__(self.describe())

    def one_line(self) -> str:
        """The first diagnostic (`FILE:LINE:COL: error: ...`, FILE the user's own file), or
        how the compiler ended: what a usage error shows."""
        lines = [x.strip() for x in (self.stderr or self.stdout).splitlines() if x.strip()]
        first = next((x for x in lines if "error:" in x), lines[0] if lines else
                     f"iree-compile exited {self.returncode} and printed nothing")
        return f"{self.program}: {first}"

    def describe(self) -> str:
        lines = (self.stderr or self.stdout).strip().splitlines()[:_DIAGNOSTIC_LINES]
        body = "\n    ".join(lines)
        return (f"{self.program}: iree-compile exited {self.returncode}\n"
                f"    {body}\n  argv: {' '.join(self.argv)}")


def find_compiler(explicit: str | None = None) -> str:
    """The iree-compile next to this interpreter, else on PATH."""
    if explicit:
        if not Path(explicit).exists():
            raise UsageError(f"compiler not found: {explicit}")
        return explicit
    beside = Path(sys.executable).parent / "iree-compile"
    if beside.exists():
        return str(beside)
    found = shutil.which("iree-compile")
    if not found:
        raise UsageError("iree-compile not found (beside this Python or on PATH): pip install "
                         "iree-base-compiler, or compile on another machine with `iree-stress "
                         "compile --export DIR` and pass --artifacts DIR")
    return found


@functools.cache
def info(path: str) -> CompilerInfo:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{path} --version failed: {exc}") from None
    text = (out.stdout + out.stderr).strip()
    match = re.search(r"IREE compiler version (\S+ @ \S+)", text)
    if match is None and (out.returncode != 0 or not text):
        raise UsageError(f"{path} --version exited {out.returncode}"
                         f"{': ' + text.splitlines()[-1] if text else ' and printed nothing'}"
                         "; is it a working iree-compile?")
    version = match.group(1) if match else text.splitlines()[0]
    helptext = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    names = frozenset(re.findall(r"(--iree-[a-z0-9-]+)", helptext.stdout))
    return CompilerInfo(path, version, names)


def build_compile_argv(compiler: str, program: Program, target: Target,
                       option_names: frozenset[str], source: Path, output: Path,
                       extra_flags: tuple[str, ...] = ()) -> list[str]:
    """The full iree-compile command line for one program and target. Pure: no I/O."""
    argv = [compiler, str(source), *target.compile_flags(option_names)]
    if program.input_type != "none":
        argv.append(f"--iree-input-type={program.input_type}")
    argv.extend(extra_flags)
    argv.extend(["-o", str(output)])
    return argv


def cache_argv(argv: list[str]) -> list[str]:
    """argv without the compiler path, source and output paths: the part that shapes the output."""
    out = argv[2:]
    if "-o" in out:
        i = out.index("-o")
        out = out[:i] + out[i + 2:]
    return out


def user_paths(text: str, program: Program, source: str) -> str:
    """Compiler output with the cache's copy of a user program (`source`, verbatim: the same
    lines and columns) named by the user's own file instead."""
    if program.source in ("", "corpus") or not source:
        return text
    return text.replace(source, program.source)


def run_compile(program: Program, argv: list[str]) -> None:
    """Runs one compile; raises CompileError carrying argv, stdout and stderr (diagnostics
    of a user program point at the user's file, not at the cache's copy)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
    try:
        stdout, stderr = proc.communicate(timeout=_COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise CompileError(program.name, argv, -1, "", f"timed out after {exc.timeout} s") from None
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
    if proc.returncode != 0:
        source = argv[1] if len(argv) > 1 else ""
        raise CompileError(program.name, argv, proc.returncode,
                           user_paths(stdout, program, source),
                           user_paths(stderr, program, source))


def stop_all() -> None:
    """Kills the compiles running now (an interrupt: Ctrl-C, or SIGINT sent to iree-stress
    alone, which its compiler processes do not get), so that the interrupted run ends at
    once instead of waiting for them."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for proc in running:
        try:
            proc.kill()
        except OSError:
            pass
