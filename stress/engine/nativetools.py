"""IREE's own tools as a native job runs them: where a runtime stack keeps its binaries, what
runtime they were built from, and their command lines (pure functions, tested without a
process)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stress.engine.toolproc import is_elf

_TOOLS: dict[str, str] = {"run": "iree-run-module", "bench": "iree-benchmark-module",
                          "dump": "iree-dump-replay", "replay": "iree-run-replay"}


class ToolsMissing(Exception):
    """The stack has no iree-run-module (the message says where it looked)."""


@dataclass(frozen=True)
class NativeTools:
    folder: Path

    def path(self, key: str) -> Path:
        return self.folder / _TOOLS[key]

    def has(self, key: str) -> bool:
        return os.access(self.path(key), os.X_OK)


_VERSION_LINE = re.compile(r'^(VERSION|REVISIONS)\s*=\s*(.+)$', re.M)


def tool_facts(tools: NativeTools) -> dict[str, Any]:
    """The runtime the tools were built from, for the run's manifest: the version file beside
    them in a wheel's `_runtime_libs` (read, not imported), and their folder."""
    facts: dict[str, Any] = {"iree_runtime_path": str(tools.folder)}
    try:
        text = (tools.folder / "version.py").read_text()
    except OSError:
        return facts
    for key, value in _VERSION_LINE.findall(text):
        try:
            parsed = json.loads(value.strip())
        except ValueError:
            continue
        facts["iree_runtime" if key == "VERSION" else "iree_revisions"] = parsed
    return facts


def find_tools(python: str) -> NativeTools:
    """The tools of the stack whose interpreter is `python`: the binaries in its iree
    package's `_runtime_libs` folder (a venv's `bin/iree-run-module` is a Python script that
    starts them: ~40 ms of interpreter per job, and faults preloaded into the job would hit
    Python first), else binaries beside the interpreter, else on PATH."""
    env_root = Path(python).parent.parent
    found = sorted(env_root.glob("lib/python3*/site-packages/iree/_runtime_libs"))
    looked = [str(env_root / "lib/python3*/site-packages/iree/_runtime_libs")]
    if not found:
        run = subprocess.run([python, "-c", "import iree._runtime_libs as m, os; "
                              "print(os.path.dirname(m.__file__))"], capture_output=True,
                             text=True, timeout=60)
        if run.returncode == 0 and run.stdout.strip():
            found = [Path(run.stdout.strip())]
    for folder in [*found, Path(python).parent]:
        looked.append(str(folder))
        if is_elf(folder / _TOOLS["run"]):
            return NativeTools(folder)
    which = shutil.which(_TOOLS["run"])
    if which and is_elf(Path(which)):
        return NativeTools(Path(which).parent)
    raise ToolsMissing(f"no {_TOOLS['run']} binary in {', '.join(looked)} or on PATH "
                       "(install iree-base-runtime in that interpreter's environment)")


# ---- pure argv builders -----------------------------------------------------------------
def run_argv(tools: NativeTools, vmfb: Path, device: str, entry: str, inputs: list[Path],
             output: Path | str, replay_path: Path | None = None) -> list[str]:
    return run_prefix(tools, vmfb, device, entry, inputs) + run_tail(output, replay_path)


def run_prefix(tools: NativeTools, vmfb: Path, device: str, entry: str,
               inputs: list[Path]) -> list[str]:
    """The part of a native-run argv that is the same for every job of a program."""
    return [str(tools.path("run")), f"--module={vmfb}", f"--device={device}",
            f"--function={entry}", *[f"--input=@{p}" for p in inputs]]


def run_tail(output: Path | str, replay_path: Path | None = None) -> list[str]:
    """The part of a native-run argv that is the job's own."""
    return [f"--output=@{output}"] + ([f"--device_replay_output={replay_path}"]
                                      if replay_path else [])


def bench_argv(tools: NativeTools, vmfb: Path, device: str, entry: str, inputs: list[Path],
               invocations: int, replay_path: Path | None = None) -> list[str]:
    argv = [str(tools.path("bench")), f"--module={vmfb}", f"--device={device}",
            f"--function={entry}", *[f"--input=@{p}" for p in inputs],
            f"--benchmark_min_time={invocations}x"]
    return argv + ([f"--device_replay_output={replay_path}"] if replay_path else [])


def replay_argv(tools: NativeTools, replay_path: Path, device: str) -> list[str]:
    return [str(tools.path("replay")), f"--device={device}", str(replay_path)]
