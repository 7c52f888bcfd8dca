"""Runtime stacks: named environments (IREE wheels, TheRock wheels or tarball, extra env) that
`compare` and `bisect` run soaks under, each in its own cached venv.

    # stacks.toml
    [stacks.iree-3.12]
    requirements = ["iree-base-runtime==3.12.0", "numpy"]

    [stacks.therock-1201]
    requirements = ["iree-base-runtime==3.10.0rc20251201", "numpy"]
    find_links = ["/data/wheels"]               # saved wheels (nightlies get deleted)
    rocm_requirements = ["rocm[libraries]==7.11.0a20251201"]
    rocm_index_url = "$THEROCK_INDEX/v2/gfx94X-dcgpu/"   # --index-url, never --extra-index-url
    compiler = "3.10.0rc20251201"               # artifacts from this iree-base-compiler
    env = { AMD_LOG_LEVEL = "1" }

    [stacks.tarball-1201]
    requirements = ["iree-base-runtime==3.10.0rc20251201", "numpy"]
    rocm = "/data/therock-dist-linux-gfx94X-dcgpu-7.11.0a20251201.tar.gz"   # or a folder

A stack with no requirements runs under the tool's own interpreter (an env-only stack: the
same runtime with an injected fault, a different `HSA_*` setting). Every `iree-*` or `rocm*`
requirement pins its version with `==`: a stack that does not say which runtime it is cannot
be checked against what the workers loaded. Nothing here passes through a shell: every
command is an argv list.

The HIP library of a stack with a ROCm side is bound explicitly (`IREE_HIP_DYLIB_PATH=
file:PATH` in the workers' env); otherwise IREE's `dlopen("libamdhip64.so")` silently takes
whatever the loader finds (often /opt/rocm). After each trial `check_facts` compares what the
workers report (runtime version, iree.runtime path, loaded GPU libraries) with the stack: a
mismatch is a StackError (the trial is not a result).

Under `--engine exec` (the user's own command) a stack is an environment for that command:
its env, its venv's bin/ first on PATH, and for a ROCm side its tree's bin/ and lib/ first on
PATH and LD_LIBRARY_PATH (`command_env`). Nothing then reports what the command loaded, so
`check_facts` has nothing to check for it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stress.errors import UsageError
from stress.fs import atomic_write
from stress.ui import Status, duration_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_KEYS: frozenset[str] = frozenset({
    "requirements", "index_url", "find_links", "rocm_requirements", "rocm_index_url", "rocm",
    "compiler", "env", "python"})
_LIST_KEYS: frozenset[str] = frozenset({"requirements", "find_links", "rocm_requirements"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_REQUIREMENT = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?P<extras>\[[A-Za-z0-9_.,\- ]+\])?\s*"
    r"(?:(?P<op>==|>=|<=|~=|!=|>|<)\s*(?P<version>[A-Za-z0-9_.+*!-]+))?")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PINNED_PREFIXES: tuple[str, ...] = ("iree-", "iree_", "rocm")  # must say which runtime/ROCm
_PIP_TIMEOUT_S: float = 1800.0  # a TheRock wheel set is ~2 GB: slow links take many minutes
_PROBE_TIMEOUT_S: float = 120.0  # import of rocm_sdk / pip freeze in a fresh venv
_ERROR_TAIL: int = 6  # last lines of pip's / uv's output quoted in a one-line error
HIP_LIBRARY: str = "libamdhip64.so"
ENV_HIP_DYLIB: str = "IREE_HIP_DYLIB_PATH"
STACKS_DIR: str = "stacks"  # under the user cache dir (the artifact cache's root)
LAST_USED: str = ".last-used"  # touched at each use (stress/housekeeping.py reads it)


class StackError(Exception):
    """A stack cannot be built or did not run what it names: an infrastructure failure (the
    verdict is inconclusive), never a runtime result."""


@dataclass(frozen=True)
class Stack:
    """One named stack as the file defines it; `line` is where its table starts."""

    name: str
    requirements: tuple[str, ...] = ()
    index_url: str = ""
    find_links: tuple[str, ...] = ()
    rocm_requirements: tuple[str, ...] = ()
    rocm_index_url: str = ""
    rocm: str = ""  # a TheRock tarball or an unpacked /opt/rocm-like folder
    compiler: str = ""  # iree-base-compiler version for this stack's artifacts
    env: tuple[tuple[str, str], ...] = ()
    python: str = ""  # base interpreter of the venv (default: ours)
    path: str = ""
    line: int = 0

    @property
    def isolated(self) -> bool:
        """Whether the stack has its own venv (else: the tool's own interpreter)."""
        return bool(self.requirements or self.rocm_requirements or self.compiler)

    @property
    def runtime_version(self) -> str:
        """The iree-base-runtime version it pins ('' when it uses ours)."""
        for r in self.requirements:
            m = _REQUIREMENT.fullmatch(r.strip())
            if m and _canon(m["name"]) in ("iree-base-runtime", "iree-runtime") and m["op"] == "==":
                return m["version"] or ""
        return ""

    @property
    def rocm_side(self) -> bool:
        return bool(self.rocm_requirements or self.rocm)

    def key(self) -> str:
        """What the venv is built from: same key, same venv (the freeze then says what it
        resolved to). Local find_links folders count with their file names."""
        listing = {f: sorted(os.listdir(f)) if os.path.isdir(f) else [] for f in self.find_links}
        blob = json.dumps([self.requirements, self.index_url, listing, self.rocm_requirements,
                           self.rocm_index_url, self.compiler, self.python or sys.executable,
                           sys.version_info[:2]])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def describe(self) -> str:
        parts = list(self.requirements) + list(self.rocm_requirements)
        if self.rocm:
            parts.append(f"rocm={self.rocm}")
        parts += [f"{k}={v}" for k, v in self.env]
        return f"{self.name} ({', '.join(parts) or 'this interpreter'})"


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# --- the file ---------------------------------------------------------------------------------

def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Line of each table header and key, by path (('stacks', 'a'), ('stacks', 'a', 'env'),
    ...): tomllib gives values, not where they are."""
    out: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = re.fullmatch(r"\[([^\[\]]+)\]\s*(#.*)?", line)
        if m:
            table = _dotted(m.group(1))
            out.setdefault(table, n)
            continue
        m = re.match(r"((?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-.])+)\s*=", line)
        if m:
            key = _dotted(m.group(1))
            out.setdefault(table + key, n)
    return out


def _dotted(text: str) -> tuple[str, ...]:
    """`stacks."iree-3.12".env` -> ('stacks', 'iree-3.12', 'env')."""
    return tuple(a or b or c for a, b, c in
                 re.findall(r'\s*(?:"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_-]+))\s*\.?', text))


def load(path: Path) -> dict[str, Stack]:
    """Reads and checks a stacks file. Any problem is one UsageError line naming the file,
    the line and the reason (exit 2, before anything runs)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the stacks file: {exc.strerror}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {exc}") from None
    lines = _key_lines(text)

    def fail(where: tuple[str, ...], reason: str) -> UsageError:
        n = next((lines[where[:i]] for i in range(len(where), 0, -1) if where[:i] in lines), 1)
        return UsageError(f"{path}:{n}: {reason}")

    unknown_top = sorted(set(doc) - {"stacks"})
    if unknown_top:
        raise fail((unknown_top[0],), f"unknown key {unknown_top[0]!r} (expected [stacks.NAME])")
    tables = doc.get("stacks", {})
    if not isinstance(tables, dict) or not tables:
        raise fail(("stacks",), "no stack defined (expected [stacks.NAME] tables)")
    base = path.resolve().parent
    out: dict[str, Stack] = {}
    for name, spec in tables.items():
        here = ("stacks", name)
        if not _NAME.fullmatch(name):
            raise fail(here, f"stack name {name!r}: letters, digits, '.', '_', '-' only")
        if not isinstance(spec, dict):
            raise fail(here, f"stack {name!r} must be a table")
        out[name] = _stack(name, spec, here, base, str(path), lines.get(here, 1), fail)
    return out


def _stack(name: str, spec: dict[str, Any], here: tuple[str, ...], base: Path, path: str,
           line: int, fail: Any) -> Stack:
    for key, value in spec.items():
        if key not in _KEYS and isinstance(value, dict):
            raise fail(here + (key,), f"stack {name!r}: {key!r} is a table: a stack name with "
                                      f'a dot needs quotes ([stacks."{name}.{key}"])')
        if key not in _KEYS:
            raise fail(here + (key,), f"stack {name!r}: unknown key {key!r} (known: "
                                      f"{', '.join(sorted(_KEYS))})")
        if key in _LIST_KEYS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail(here + (key,), f"stack {name!r}: {key} must be a list of strings")
        elif key == "env":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise fail(here + (key,), f"stack {name!r}: env must be a table of strings")
            bad = [k for k in value if not _ENV_KEY.fullmatch(k)]
            if bad:
                raise fail(here + (key,), f"stack {name!r}: env name {bad[0]!r} is not a "
                                          "variable name")
        elif not isinstance(value, str):
            raise fail(here + (key,), f"stack {name!r}: {key} must be a string")
    for key in ("requirements", "rocm_requirements"):
        for req in spec.get(key, []):
            m = _REQUIREMENT.fullmatch(req.strip())
            if not m:
                raise fail(here + (key,), f"stack {name!r}: cannot read requirement {req!r}")
            if _canon(m["name"]).startswith(_PINNED_PREFIXES) and m["op"] != "==":
                raise fail(here + (key,), f"stack {name!r}: {req!r} has no version: pin it "
                                          f"with == (a stack must say which runtime it is)")
    if spec.get("compiler") and not re.fullmatch(r"[0-9][A-Za-z0-9_.+!-]*", spec["compiler"]):
        raise fail(here + ("compiler",), f"stack {name!r}: compiler wants a version, e.g. "
                                         f"3.12.0, got {spec['compiler']!r}")
    names = [_canon(m["name"]) for r in spec.get("requirements", [])
             if (m := _REQUIREMENT.fullmatch(r.strip()))]
    isolated = any(spec.get(k) for k in ("requirements", "rocm_requirements", "compiler"))
    if isolated and not any(n in ("iree-base-runtime", "iree-runtime") for n in names):
        raise fail(here + ("requirements",), f"stack {name!r}: requirements name no "
                                             "iree-base-runtime==VERSION (a stack with its own "
                                             "venv needs its runtime)")
    links = tuple(_local(v, base) for v in spec.get("find_links", []))
    for raw, link in zip(spec.get("find_links", []), links, strict=True):
        if "://" not in link and not os.path.isdir(link):
            raise fail(here + ("find_links",), f"stack {name!r}: find_links folder {raw!r} "
                                               "does not exist")
    rocm = _local(spec["rocm"], base) if spec.get("rocm") else ""
    if rocm and not os.path.exists(rocm):
        raise fail(here + ("rocm",), f"stack {name!r}: rocm {spec['rocm']!r} does not exist")
    if spec.get("rocm_requirements") and rocm:
        raise fail(here + ("rocm",), f"stack {name!r}: rocm (a tarball or folder) and "
                                     "rocm_requirements (wheels) exclude each other")
    return Stack(name, tuple(spec.get("requirements", [])), spec.get("index_url", ""), links,
                 tuple(spec.get("rocm_requirements", [])), spec.get("rocm_index_url", ""),
                 rocm, spec.get("compiler", ""), tuple(sorted(spec.get("env", {}).items())),
                 spec.get("python", ""), path, line)


def _local(value: str, base: Path) -> str:
    if "://" in value:
        return value
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else base / p)


def cross(iree: Stack, rocm: Stack) -> Stack:
    """`iree`'s IREE side (requirements, indexes, compiler, base python) with `rocm`'s ROCm
    side (wheels and their index, or tarball); env from both, the ROCm side's winning (HSA_*
    and AMD_* settings belong to it). Named IREE+rocm-of-ROCM."""
    env = {**dict(iree.env), **dict(rocm.env)}
    return replace(iree, name=f"{iree.name}+rocm-of-{rocm.name}",
                   rocm_requirements=rocm.rocm_requirements,
                   rocm_index_url=rocm.rocm_index_url, rocm=rocm.rocm,
                   find_links=tuple(dict.fromkeys(iree.find_links + rocm.find_links)),
                   env=tuple(sorted(env.items())))


def pick(stacks: Mapping[str, Stack], names: Sequence[str]) -> list[Stack]:
    missing = [n for n in names if n not in stacks]
    if missing:
        raise UsageError(f"no stack named {missing[0]!r} (defined: {', '.join(stacks)})")
    return [stacks[n] for n in names]


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


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # two runs building one venv: the second waits
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


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
        with _locked(venv.parent / f"{venv.name}.lock"):
            if not marker.exists():
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
                outputs = [_run(argv, what, stack, limit, status,
                                f"step {k}/{len(steps)} {what}")
                           for k, (what, argv, limit) in enumerate(steps, 1)]
                freeze = outputs[-1].split("\n")
                if status is not None:
                    status.done(f"stack {stack.name}: built in "
                                f"{duration_text(time.monotonic() - started)}")
                atomic_write(marker, json.dumps({"stack": stack.name, "freeze": [
                    x for x in freeze if x.strip()]}, indent=1).encode())
        recorded = json.loads(marker.read_text())
        try:
            (venv / LAST_USED).touch()  # `iree-stress clean --cache` removes by last use
        except OSError:
            pass
        python = str(venv / "bin" / "python")
        compiler = str(venv / "bin" / "iree-compile") if stack.compiler else ""
        built = Built(stack, python, env, recorded["freeze"], str(venv), compiler=compiler)
    hip = _hip_library(stack, built, cache_dir)
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
            root = _unpack(root, cache_dir, stack)
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


def _unpack(tarball: Path, cache_dir: Path, stack: Stack) -> Path:
    digest = hashlib.sha256(f"{tarball.resolve()}:{tarball.stat().st_size}:"
                            f"{tarball.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    dest = cache_dir / STACKS_DIR / f"rocm-{digest}"
    marker = dest / ".unpacked"
    with _locked(dest.parent / f"{dest.name}.lock"):
        if not marker.exists():
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
        loaded = [p for p in manifest.get("loaded_gpu_libraries") or [] if "amdhip" in p]
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
        proc = subprocess.run([built.python, "-c", "import numpy, iree.runtime"], env=env,
                              capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{built.python} cannot start: {exc}"
    if proc.returncode == 0:
        return ""
    tail = [x.strip() for x in (proc.stderr or proc.stdout).splitlines() if x.strip()]
    return f"{built.python} exited {proc.returncode}: {' | '.join(tail[-_ERROR_TAIL:])[:800]}"
