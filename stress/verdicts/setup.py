"""A stack's setup is never a verdict (issue 38): what shows that a trial's command could not
run *in* its stack, found before it runs (`exec_preflight`) or in what its soak recorded
(`setup_problem`). Each is a reason in one line that makes a compare or bisect inconclusive
(exit 3) instead of a result of the stack: a test runner the stack's interpreter lacks, an
interpreter or runtime from outside the stack, programs the stack's runtime cannot load, a
Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stress.vocab import Engine, RunStatus

if TYPE_CHECKING:
    from stress.soak.options import SoakOptions

_PYTHON = re.compile(r"python[0-9.]*")  # an interpreter's file name: what a command
#   starting with it imports is decided by that interpreter's own sys.path
_NO_MODULE = re.compile(r"No module named '?([A-Za-z0-9_.]+)'?")
_NOT_LOADABLE = re.compile(r"NOT_FOUND[^\n]{0,80}required module[^\n]{0,120}")
#   the runtime's own words when a module needs what it lacks ("NOT_FOUND; required module
#   'hal' version 7 ..."): a module from a newer compiler on an older runtime
_RUNTIME_DISTS: frozenset[str] = frozenset({"iree-base-runtime", "iree-runtime"})
_DIST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a freeze line's or requirement's name
_PROBE_TIMEOUT_S: float = 60.0  # one interpreter start and two find_spec calls
_PROBE = """import importlib.util as u, json, os, sys
def where(name):
    try:
        s = u.find_spec(name)
    except (ImportError, ValueError):
        return None
    return (s.origin or next(iter(s.submodule_search_locations or []), "?")) if s else None
print(json.dumps({"module": where(sys.argv[1]) if sys.argv[1] else "",
                  "runtime": where("iree.runtime")}), flush=True)
os._exit(0)
"""  # find_spec, not import, and _exit (no exit handlers nor destructors): a preloaded fault
#   that kills or stalls the process at exit (what is hunted) or a runtime that crashes on
#   import must not make the check itself fail or wait out its timeout


def command_path(argv0: str, cwd: Path, env: Mapping[str, str]) -> str:
    """The file the command starts, as named (a venv's bin/python is a link out of the venv:
    resolving it would lose where it stands); '' when not found."""
    if os.sep in argv0:
        return os.path.abspath(cwd / argv0)
    return shutil.which(argv0, path=env.get("PATH")) or ""


def _inside(path: str, folder: str) -> bool:
    """`path` lies in `folder`, as named or through links to the folders on the way (a venv
    reached through a linked cache folder); never through `path`'s own link (a venv's
    bin/python links out of the venv)."""
    named = os.path.abspath(path)
    return Path(named).is_relative_to(os.path.abspath(folder)) or Path(
        os.path.realpath(os.path.dirname(named))).is_relative_to(os.path.realpath(folder))


def has_own_runtime(built: Any) -> bool:
    """Whether the stack's venv brings an IREE runtime (its requirements or `pip freeze` name
    one). A stack without one is its ROCm side alone (`stacks` without --iree-runtime): the
    command brings its own IREE, so an interpreter or runtime from outside the venv is how it
    runs, not a bypass."""
    for line in [*built.stack.requirements, *built.freeze]:
        m = _DIST_NAME.match(line.strip())
        if m and re.sub(r"[-_.]+", "-", m.group(0)).lower() in _RUNTIME_DISTS:
            return True
    return False


def _script_interpreter(path: str) -> str:
    """The Python interpreter a script names by absolute path in its `#!` line (pip's console
    scripts: `pytest`, `ctest` wrappers); '' for anything else (`#!/usr/bin/env python3` finds
    the stack's own on the jobs' PATH)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return ""
    if not first.startswith(b"#!"):
        return ""
    words = first[2:].decode(errors="replace").split()
    return words[0] if words and _PYTHON.fullmatch(os.path.basename(words[0])) else ""


def _module_of(argv: Sequence[str]) -> str:
    """`-m MOD`'s module in a Python command line ('' when none)."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
        if not arg.startswith("-"):  # a script: what follows is the script's
            return ""
    return ""


def _probe(python: str, module: str, env: Mapping[str, str], cwd: Path) -> dict[str, Any]:
    """Where `python` finds `module` and iree.runtime under `env` (None: not found); {} when
    the probe printed nothing readable (then nothing is judged)."""
    try:
        proc = subprocess.run([python, "-c", _PROBE, module], env=dict(env), cwd=cwd,
                              capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    for line in reversed(proc.stdout.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {}


def exec_preflight(built: Any, base: SoakOptions) -> str:
    """Can the command run *in* the stack? '' when it can. Its executable must be found (on
    the PATH the jobs get: the stack's venv first) and executable; a Python interpreter must
    be the stack's own when the stack's venv has an IREE runtime (an absolute path to another
    venv would run another runtime in every arm alike; a stack of its ROCm side alone leaves
    the IREE side to the command's own interpreter), must have `-m`'s module (a test runner
    the stack's venv lacks fails every job the same way in every arm), and must import
    iree.runtime from the stack's venv when the stack has one. `provision.preflight` asks the
    stack's interpreter to import iree.runtime, which says nothing about the user's
    command."""
    from stress.runtimes.provision import command_env

    if not base.command:
        return "--engine exec needs a command after `--`"
    if "{" in base.command[0]:  # a placeholder in the executable: known per job only
        return ""
    env = {**os.environ, **base.env, **command_env(built, base.env)}
    if built.venv:
        env["PATH"] = os.pathsep.join([str(Path(built.python).parent), env.get("PATH", "")])
    cwd = Path(base.cwd) if base.cwd else Path.cwd()
    exe = command_path(base.command[0], cwd, env)
    if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        return f"the command {base.command[0]!r} is not an executable file under this stack"
    name = built.stack.name
    pinned = bool(built.venv) and has_own_runtime(built)  # the venv's runtime is the stack's
    if not _PYTHON.fullmatch(os.path.basename(exe)):
        interpreter = _script_interpreter(exe)
        if pinned and interpreter and not _inside(interpreter, built.venv):
            return (f"the command {base.command[0]!r} is {exe}, a script of {interpreter}, "
                    f"outside stack {name}'s venv ({built.venv}): it would run its own "
                    f"runtime under every stack; add its package to the stack's requirements "
                    f"or run it as `python -m ...`")
        return ""
    if pinned and not _inside(exe, built.venv):
        return (f"the command's interpreter {exe} is not stack {name}'s ({built.python}): it "
                f"would run its own runtime under every stack; start the command with "
                f"`python` (the stack's venv comes first on PATH)")
    module = _module_of(base.command)
    found = _probe(exe, module, env, cwd)
    if module and "module" in found and found["module"] is None:
        return (f"stack {name}'s interpreter {exe} has no module {module} (`-m {module}`): "
                f"every job would fail before any test ran; add it to the stack's "
                f"requirements" + ("" if pinned or not built.venv else
                                   ", or start the command with your own interpreter's path "
                                   "(the stack pins no IREE runtime: the command brings its "
                                   "own)"))
    runtime = found.get("runtime")
    if pinned and runtime and not _inside(str(runtime), built.venv):
        return (f"the runtime {exe} imports ({Path(str(runtime)).parent}) is not stack "
                f"{name}'s (its venv {built.venv}): PYTHONPATH or a .pth file puts another "
                f"first")
    return ""


def _failure_texts(summary: Mapping[str, Any]) -> list[str]:
    return [f"{s.get('key', '')}\n{s.get('description', '')}"
            for s in summary.get("signatures", [])] + \
        [str(f.get("message", "")) for f in summary.get("failures_detail", [])]


def _not_loadable(said: str, engine: Engine, stack: str, runtime_version: str,
                  compiler: str) -> str:
    """The one line for programs a runtime cannot load: which pin would fix it, when one can.
    Under --engine exec the programs are the command's own (the stack's `compiler` makes only
    our corpus's); a stack whose compiler pin is its runtime's has no pin left to change."""
    if engine is Engine.EXEC:
        return (f"under stack {stack} the command's runtime cannot load its programs ({said}): "
                f"they were compiled by another IREE version than the runtime the command "
                f"imported; rebuild them with that runtime's compiler")
    if compiler and compiler == runtime_version:
        return (f"stack {stack}'s runtime cannot load the programs of its own compiler "
                f"{compiler} ({said}): its runtime and compiler pins do not fit together")
    pin = f'compiler = "{runtime_version}"' if runtime_version else \
        "compiler = \"<its runtime's version>\""
    return (f"stack {stack}'s runtime cannot load the programs ({said}): they were compiled "
            f"by another IREE version; the stack needs `{pin}`")


def setup_problem(engine: Engine, summary: Mapping[str, Any], stack: str,
                  runtime_version: str, compiler: str = "") -> str:
    """Why a finished soak says nothing about its stack, from what it recorded ('' when it
    may be a result): it was interrupted (Ctrl-C: its jobs were cut short, not failed);
    the stack's runtime could not load the programs (a compiler the stack does not pin, or
    under --engine exec the command's own programs); `compiler`: the one the stack pins;
    every job of the user's command failed on a missing module before any test ran."""
    status = summary.get("status")
    if status == RunStatus.INTERRUPTED:
        said = str(summary.get("stop_reason") or RunStatus.INTERRUPTED.value)
        return (f"{said}: not a result; "
                f"rerun the same command to resume (finished trials are kept)")
    texts = _failure_texts(summary)
    for text in texts:
        m = _NOT_LOADABLE.search(text)
        if m:
            return _not_loadable(m.group(0).strip().rstrip("'\" ;:"), engine, stack,
                                 runtime_version, compiler)
    failed = sum(int(v) for v in summary.get("failures", {}).values())
    outputs = texts[:len(summary.get("signatures", []))]  # what the jobs said (the failures'
    #   own messages say only how each worker ended: "exited with status 1 while running")
    if engine is Engine.EXEC and outputs and failed >= int(summary.get("jobs", 0)) > 0:
        missing = {m.group(1) for t in outputs for m in [_NO_MODULE.search(t)] if m}
        every = all(_NO_MODULE.search(t) for t in outputs)
        if every and len(missing) == 1:
            return (f"every job failed before any test ran: No module named {missing.pop()} "
                    f"(the command's interpreter under stack {stack} lacks it: add it to the "
                    f"stack's requirements)")
    return ""
