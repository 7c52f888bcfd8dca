"""What was tested, said first in every output (pytest's session header): the tool, the
runtime and compiler with their builds, target, device, driver library, host, seed, and the
one command that reproduces the run. Read from the runs' manifests (store rows or
summary.json), so a report of an old run says what that run tested, not what is installed
now."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from stress.vocab import Engine, Numerics

REPEATABILITY_ONLY: str = "repeatability only (no reference)"
REVISION_CHARS: int = 12  # of a commit hash: unique in IREE's history, short enough to read
# options of the recorded command that name where the run was written: a rerun there would
# be refused (the folder holds a run), so the rerun line leaves them out
_FOLDER_OPTIONS: frozenset[str] = frozenset({"--results"})


def rerun_command(command: str) -> str:
    """The recorded command line without its results folder (a rerun gets a fresh one);
    a `cd DIR && ` before it (an exec command with relative paths) stays."""
    where, sep, rest = command.partition(" && ")
    if sep and where.startswith("cd "):
        return f"{where}{sep}{rerun_command(rest)}"
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--":
            out += argv[i:]
            break
        if a in _FOLDER_OPTIONS:
            skip = True
            continue
        if a.split("=", 1)[0] in _FOLDER_OPTIONS:
            continue
        out.append(a)
    return shlex.join(out)


def short_revision(rev: str) -> str:
    return rev[:REVISION_CHARS] if len(rev) > REVISION_CHARS and rev.isalnum() else rev


def _compiler(text: str | None) -> str:
    if not text:
        return "none (prebuilt artifacts or the command's own)"
    version, _, rest = text.partition(" @ ")
    if not rest:
        return text
    rev, _, more = rest.partition(" ")
    return f"{version} @ {short_revision(rev)}" + (f" {more}" if more else "")


def _runtime(m: dict[str, Any], engine: Engine) -> str:
    version = m.get("iree_runtime")
    if engine is Engine.EXEC and not version:
        return "the command's own (not seen by iree-stress)"
    revs = m.get("iree_revisions") or {}
    build = ", ".join(f"{k} {short_revision(str(v))}" for k, v in sorted(revs.items()))
    where = m.get("iree_runtime_path")
    py = m.get("worker_python")
    out = str(version or "unknown")
    if build:
        out += f" ({build})"
    if where:
        out += f" from {where}"
    if py:
        out += f", Python {py}"
    return out


def _device(m: dict[str, Any], engine: Engine) -> str:
    uri = m.get("device_uri") or ""
    if engine is Engine.EXEC and not uri:
        return "the command's own"
    names = sorted({str(d.get("name")) for d in m.get("devices") or [] if d.get("name")})
    used = [u for u in m.get("devices_used") or [] if u and u != uri]
    out = uri or "?"
    if used:
        out += f" (also {', '.join(used)})"
    if names:
        out += f": {', '.join(names)}"
    return out


def _driver(m: dict[str, Any], engine: Engine) -> str:
    if engine is Engine.EXEC:
        return "the command's own"
    libs = [*(m.get("loaded_gpu_libraries") or []),
            *([m["hip_library"]] if m.get("hip_library") else [])]
    icds = {p.rsplit("/", 1)[-1] for p in m.get("vulkan_icds") or []}
    lib = ", ".join(_library_role(p, icds) for p in dict.fromkeys(libs)) or \
        "none loaded (built into the runtime)"
    return f"{m.get('driver') or '?'}, library {lib}"


def _library_role(path: str, icds: set[str]) -> str:
    """A mapped library, with its part where it is a Vulkan one: the loader, or an ICD (a
    driver its manifest names: the loader maps every installed one, whichever has the
    device)."""
    name = path.rsplit("/", 1)[-1]
    if name.startswith("libvulkan.so"):
        return f"{path} (Vulkan loader)"
    return f"{path} (Vulkan ICD)" if name in icds else path


def _host(m: dict[str, Any]) -> str:
    parts = [str(m.get(k)) for k in ("host", "os", "cpu") if m.get(k)]
    if m.get("cores"):
        parts.append(f"{m['cores']} cores")
    return ", ".join(parts) or "unknown"


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def numerics(m: dict[str, Any]) -> str:
    """How results were checked: against numpy, only against the program's own first result
    (a user program has no reference: a wrong answer given every time passes), or not at all
    (`--numerics off`, or a device that runs no kernels: then which programs still were)."""
    cfg = m.get("config") or {}
    if Engine.of(cfg.get("engine")) is Engine.EXEC:
        return "not checked by iree-stress (the command's own exit status)"
    programs = list(cfg.get("programs") or [])
    off = list(cfg.get("unchecked") or [])
    only = cfg.get("repeatability_only")
    if only is None:  # a store from before the key: user programs have no reference
        only = [p for p in programs if p.startswith("user.")]
    unchecked = ""
    if off:
        why = cfg.get("unchecked_why") or f"--numerics {Numerics.OFF.value}"
        checked = [p for p in programs if p not in off]
        if not checked:
            return f"{Numerics.OFF.describe()} ({why})"
        unchecked = f"{Numerics.OFF.describe()} for {len(off)} of {len(programs)} ({why}); "
        programs = checked
    named = f" for {_names(programs)}" if off else ""
    if cfg.get("numerics") == Numerics.REPEAT.value:
        return f"{unchecked}{Numerics.REPEAT.describe()} (--numerics repeat){named}"
    if not only:
        return f"{unchecked}numpy reference{named}"
    rest = len(programs) - len(only)
    return (f"{unchecked}{REPEATABILITY_ONLY}: {_names(only)} (each result against the first)"
            + (f"; numpy reference for the other {rest}" if rest > 0 else ""))


def shared_cores(m: dict[str, Any]) -> str:
    """Why an exec run's copies may lose each other's cores, and what helps (issue 36): "" when
    they cannot (one copy, a pattern with %p or a pipe, core_uses_pid). Where core_pattern is
    `core`, copies that share a working directory write one file: a core can be replaced by
    another copy's before it is read (the failure then says so; it is never read as the
    wrong process's)."""
    cfg = m.get("config") or {}
    pattern = m.get("core_pattern")
    if Engine.of(cfg.get("engine")) is not Engine.EXEC or int(cfg.get("workers") or 1) < 2 or \
            not isinstance(pattern, list) or len(pattern) != 2:
        return ""
    text, uses_pid = str(pattern[0]), bool(pattern[1])
    if text.startswith("|") or "%p" in text or uses_pid:
        return ""
    where = cfg.get("exec_cwd") or "one folder"
    return (f"core_pattern {text!r} names no pid and {cfg.get('workers')} copies run in "
            f"{where}: a crash's core can be overwritten by another copy's before it is read "
            "(the failure then says so). To keep them apart, run each copy in its own folder "
            "(`-- sh -c 'mkdir -p copy{gpu} && cd copy{gpu} && exec CMD'`, or `{job}` in the "
            "command's paths), or set kernel.core_uses_pid=1 (root)")


def rows(manifests: Sequence[dict[str, Any]], commands: Sequence[str] = ()
         ) -> list[tuple[str, str]]:
    """(label, text) lines of the header of one or more runs; a fact that differs between
    runs lists each value once, in run order."""
    if not manifests:
        return []

    def one(fn: Any) -> str:
        return " | ".join(dict.fromkeys(fn(m) for m in manifests))

    def engine(m: dict[str, Any]) -> Engine:
        return Engine.of((m.get("config") or {}).get("engine"))

    cmds = list(dict.fromkeys(rerun_command(c) for c in commands if c)) or \
        list(dict.fromkeys(rerun_command(str(m["command"])) for m in manifests
                           if m.get("command")))
    out = [("iree-stress", one(lambda m: f"{m.get('tool_version') or '?'}, "
                                         f"{engine(m).value} engine")),
           ("runtime", one(lambda m: _runtime(m, engine(m)))),
           ("compiler", one(lambda m: _compiler(m.get("iree_compiler")))),
           ("target", one(lambda m: str((m.get("config") or {}).get("target") or "?"))),
           ("device", one(lambda m: _device(m, engine(m)))),
           ("driver", one(lambda m: _driver(m, engine(m)))),
           *([("telemetry", one(lambda m: str(m.get("telemetry") or "none")))]
             if any(m.get("telemetry") for m in manifests) else []),
           ("host", one(_host)),
           ("numerics", one(numerics)),
           ("seed", one(lambda m: str(m.get("seed", "?"))))]
    shared = [c for m in manifests for c in [shared_cores(m)] if c]
    if shared:
        out.append(("cores", shared[0]))
    if len(cmds) == 1:
        out.append(("rerun", cmds[0]))
    elif cmds:
        out.append(("rerun", f"{len(cmds)} commands (one per run): {cmds[0]} ..."))
    return out


def of_runs(runs: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The header of the runs a store holds (rundata's run rows: manifest, config, command):
    what a report and a gate on those folders begin with."""
    return rows([{**(r.get("manifest") or {}), "config": r.get("config") or {}} for r in runs],
                [str(r.get("command") or "") for r in runs])


_BEFORE_ANY_RUN: tuple[str, ...] = ("iree-stress", "target", "host")  # known without a trial


def of_arms(arms: Sequence[tuple[str, Sequence[dict[str, Any]]]], command: str,
            seed: str, before: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """The header of a compare or bisect: each arm (its label, like `A iree-3.12`, and the
    manifests of its trials' runs) tested under the same plan. A fact that is the same for
    every arm is one line; one that differs (the runtime, most often) gets a line per arm,
    `runtime (A iree-3.12): ...`. `seed` says how the trials' seeds were chosen, `command` is
    the compare's or bisect's own command line (a trial's soak is not what a user reruns).
    A fact only some stacks reported is labelled with theirs (`runtime (C, D): ...`); the
    stacks of which no trial ran (one that cannot start) are one line, `not run: A, B`. When
    none ran, `before` (a manifest of what is known without a trial: tool, target, host) gives
    those lines."""
    per = [(label, dict(rows(ms))) for label, ms in arms if ms]
    untried = [label for label, ms in arms if not ms]
    out: list[tuple[str, str]] = []
    if not per and before is not None:
        out += [(k, v) for k, v in rows([before]) if k in _BEFORE_ANY_RUN]
    keys: dict[str, None] = {}  # (every arm's: a fact the first arm's runs did not report
    for _, facts in per:        #   may come from a later one)
        keys.update(dict.fromkeys(facts))
    for key in keys:
        if key in ("seed", "rerun"):
            continue
        values = {label: facts[key] for label, facts in per if key in facts}
        if len(set(values.values())) == 1:
            # (a value some stacks did not report is theirs only: `runtime (C, D): ...`; the
            #   tool, target and host are every stack's, whichever ran)
            everyone = len(values) == len(arms) or key in _BEFORE_ANY_RUN
            shared = key if everyone else f"{key} ({', '.join(values)})"
            out.append((shared, next(iter(values.values()))))
        else:
            out += [(f"{key} ({label})", value) for label, value in values.items()]
    if untried:
        out.append(("not run", ", ".join(untried)))
    out.append(("seed", seed))
    if command:
        out.append(("rerun", command))
    return out


def as_dict(header: Sequence[tuple[str, str]]) -> dict[str, str]:
    return dict(header)


def text(header: Sequence[tuple[str, str]], markdown: bool = False) -> str:
    """`label: value` lines (pytest's header); in markdown, the same lines as a code block."""
    body = "\n".join(f"{k}: {v}" for k, v in header)
    return f"```text\n{body}\n```" if markdown else body
