"""Runtime stacks as the user writes them: named environments (IREE wheels, TheRock wheels or
tarball, extra env) that `compare` and `bisect` run soaks under, read from a stacks file and
checked before anything runs; `provision` builds each into its own cached venv.

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

import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stress.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_KEYS: frozenset[str] = frozenset({
    "requirements", "index_url", "find_links", "rocm_requirements", "rocm_index_url", "rocm",
    "compiler", "env", "python"})
_LIST_KEYS: frozenset[str] = frozenset({"requirements", "find_links", "rocm_requirements"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")  # '+': TheRock versions (`+bkc.DATE`)
_REQUIREMENT = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?P<extras>\[[A-Za-z0-9_.,\- ]+\])?\s*"
    r"(?:(?P<op>==|>=|<=|~=|!=|>|<)\s*(?P<version>[A-Za-z0-9_.+*!-]+))?")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PINNED_PREFIXES: tuple[str, ...] = ("iree-", "iree_", "rocm")  # must say which runtime/ROCm


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
            raise fail(here, f"stack name {name!r}: letters, digits, '.', '_', '+', '-' only")
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
    iree_side = any(spec.get(k) for k in ("requirements", "compiler"))  # (a venv of ROCm
    #   wheels alone is a stack for `--engine exec`, whose command brings its own IREE)
    if iree_side and not any(n in ("iree-base-runtime", "iree-runtime") for n in names):
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
