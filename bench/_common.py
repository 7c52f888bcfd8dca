"""Helpers shared by the benchmark scripts (they print ratios measured within one run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEASURED: tuple[str, ...] = ("stress", "bench", "tests/native")  # the code a committed output
#   measures: the tool, the scripts, and the native libraries they build (the stand-in HIP
#   library, the fault library)


def header() -> str:
    """First line of every committed output: the command line, the commit, date and cores
    (printed, and returned for outputs written to a file too)."""
    import shlex
    import time

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                            *MEASURED], capture_output=True, text=True,
                           cwd=ROOT).stdout.strip()
    if dirty:  # the code measured is not the commit named: said, never hidden
        commit += " + uncommitted changes"
    line = (f"# python {shlex.join(sys.argv)}  (commit {commit}, {time.strftime('%Y-%m-%d')}, "
            f"{os.cpu_count()} cores)")
    print(line, flush=True)
    return line


def emit(lines: list[str], out: str | None) -> int:
    """Prints an output's lines, and writes them to `out` when given (a committed result);
    returns 0, the script's exit status."""
    print("\n".join(lines))
    if out:
        Path(out).write_text("\n".join(lines) + "\n")
    return 0


def soak(*args: str, timeout: float = 900) -> dict[str, Any]:
    env = {**os.environ}
    out = subprocess.run([sys.executable, "-m", "stress", "soak", "--json", "-q", *args],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
    if out.returncode not in (0, 1):
        raise SystemExit(f"soak failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def steady_rate(run_dir: str) -> float:
    """Invocations per second from the first job's start to the last job's end: counts the
    harness's own gaps between jobs, but not interpreter start-up (nor does the bare loop)."""
    import sqlite3

    db = sqlite3.connect(Path(run_dir) / "stress.db")
    inv, t0, t1 = db.execute("SELECT SUM(invocations), MIN(started_at), MAX(ended_at) "
                             "FROM jobs").fetchone()
    return float(inv) / (t1 - t0)


def per_worker_rates(run_dir: str) -> tuple[float, float]:
    """(invocations/s, devices created/s) summed over the soak's worker processes, each from
    its first job's start to its last job's end: how bench/bare_loop.py's processes are
    summed (each times its own loop). A soak's workers start one after another; on a GPU each
    creates a context first (~0.2 s, serialized in the driver), so a short soak's run-wide
    span counts the later workers' start-up as the harness's time."""
    import sqlite3

    db = sqlite3.connect(Path(run_dir) / "stress.db")
    rows = db.execute("SELECT SUM(invocations), SUM(devices_created), MIN(started_at), "
                      "MAX(ended_at) FROM jobs GROUP BY worker").fetchall()
    db.close()
    spans = [(inv, dev, t1 - t0) for inv, dev, t0, t1 in rows if t1 > t0]
    return (sum(inv / span for inv, _, span in spans),
            sum(dev / span for _, dev, span in spans))


def add_target_args(ap: Any) -> None:
    """--target, --device and --artifacts (a `compile --export` folder, for machines without
    a compiler, e.g. the H200): the same options in every script."""
    ap.add_argument("--target", default="cpu", help="cpu | cuda | rocm (compile target)")
    ap.add_argument("--device", help="device URI (default: the target's, e.g. local-task)")
    ap.add_argument("--artifacts", help="prebuilt artifacts (iree-stress compile --export)")


def soak_target(args: Any) -> list[str]:
    """The soak options naming the target of `add_target_args`."""
    out = ["--target", args.target]
    if args.artifacts:
        out += ["--artifacts", args.artifacts]
    if args.device:
        out += ["--device", args.device]
    return out


def device_uri(args: Any) -> str:
    from stress.programs import targets

    return str(args.device or targets.parse(args.target).device_uri)


def artifact(program: str, args: Any) -> Path:
    """The module of `program` for the target: from --artifacts, else compiled (cached)."""
    if args.artifacts:
        from stress.programs.cache import load_export

        _, found = load_export(Path(args.artifacts))
        return Path(found[program][1]).resolve()
    return vmfb(program, args.target)


def vmfb(program: str, target: str = "cpu") -> Path:
    from stress.fs import default_cache_dir
    from stress.programs import corpus, targets
    from stress.programs.cache import ArtifactCache

    cache = ArtifactCache(default_cache_dir())
    return cache.get_or_compile(corpus.by_name()[program], targets.parse(target)).path


def build_fault_lib(out: Path) -> Path:
    """tests/native/libfault.c built as an LD_PRELOAD library under `out` (the runtime stand-in
    that segfaults or stalls in its own teardown: see the C file)."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("no C compiler for tests/native/libfault.c")
    lib = out / "libfault.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-g", "-o", str(lib),
                    str(ROOT / "tests" / "native" / "libfault.c"), "-ldl", "-lpthread"],
                   check=True)
    return lib
