"""Native engine throughput (issue 12): `soak --engine native` against a bare shell loop of the
same `iree-run-module` commands at the same parallelism, and the disk a recorded soak keeps.

  bare   `xargs -P N` running JOBS times the command a native-run job runs (same binary, same
         module, device and input file, output to a file): no checks, no records, nothing else
  soak   `iree-stress soak --engine native --parallel N -n JOBS` of the same program: each job's
         output checked against the numpy reference, one store row per job and per process
  floor  the least a Python parent can do for the same jobs (`floor_rate`): posix_spawn, wait
         on a pidfd, compare the output's bytes with the first one's, delete it; no store, no
         deadlines, no evidence. soak/floor is the cost of the harness's own bookkeeping;
         floor/bare that of a Python parent as such

Rate = jobs per second; the soak's from its first job's start to its last job's end (the bare
loop's from start to end). Rounds interleave in ABBA order (bare then soak, soak then bare, ...)
and the median of the per-round ratios is reported, with its quartiles: target soak/bare
>= 0.90 with >= 1,000 jobs per soak. Then one `--record` soak of RECORD_S seconds: the replays
it kept against replay.DISK_CAP_BYTES.

    python bench/native_throughput.py [--program NAME] [--parallel N] [--jobs N] [--rounds R]
                                      [--record-s S] [--target T --artifacts DIR]
"""

from __future__ import annotations

import argparse
import os
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    add_target_args,
    artifact,
    device_uri,
    header,
    soak,
    soak_target,
    steady_rate,
)
from stress.engine import replay  # noqa: E402
from stress.engine.native import prepare  # noqa: E402
from stress.engine.nativetools import find_tools, run_argv  # noqa: E402
from stress.programs import corpus  # noqa: E402


def bare_rate(argv: list[str], out_dir: Path, jobs: int, parallel: int) -> float:
    """Jobs per second of `xargs -P parallel` running argv `jobs` times (output per job; the
    tool exec'd by xargs itself, no shell per job)."""
    cmd = shlex.join(argv[:-1]) + " --output=@" + shlex.quote(str(out_dir)) + "/o{}.npy"
    script = f"seq {jobs} | xargs -P {parallel} -I{{}} {cmd} >/dev/null"
    t0 = time.perf_counter()
    subprocess.run(["sh", "-c", script], check=True)
    return jobs / (time.perf_counter() - t0)


def floor_rate(argv: list[str], out_dir: Path, jobs: int, parallel: int) -> float:
    """Jobs per second of a minimal Python launcher (module doc: floor) of argv[:-1] plus an
    output file per job, `parallel` at once."""
    env = dict(os.environ)
    devnull = os.open(os.devnull, os.O_WRONLY)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
    golden: bytes | None = None
    live: dict[int, tuple[int, str]] = {}
    started = done = 0
    t0 = time.perf_counter()
    while done < jobs:
        while len(live) < parallel and started < jobs:
            out = f"{out_dir}/f{started}.npy"
            pid = os.posix_spawn(argv[0], [*argv[:-1], f"--output=@{out}"], env,
                                 file_actions=actions, setsid=True)
            live[os.pidfd_open(pid)] = (pid, out)
            started += 1
        ready, _, _ = select.select(list(live), [], [], 1.0)
        for fd in ready:
            pid, out = live.pop(fd)
            os.close(fd)
            os.waitpid(pid, 0)
            with open(out, "rb") as f:
                raw = f.read()
            os.unlink(out)
            golden = raw if golden is None else golden
            if raw != golden:
                raise SystemExit(f"floor: output {out} differs from the first")
            done += 1
    os.close(devnull)
    return jobs / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", default="unary.exp.f32.64x64")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--record-s", type=float, default=60.0)
    add_target_args(ap)
    args = ap.parse_args()
    header()
    prog = corpus.select([args.program])[0]
    art = artifact(prog.name, args)
    tools = find_tools(sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(prog, Path(tmp) / "in")
        argv = run_argv(tools, art, device_uri(args), prog.entry, data.inputs, Path(tmp) / "o.npy")
        print(f"# program {prog.name} on {device_uri(args)}, {args.parallel} at once, "
              f"{args.jobs} jobs per run, tool {argv[0]}")
        ratios: list[float] = []
        per_job: list[float] = []  # the soak parent's CPU per job (its summary's parent_cpu)
        def soak_round(r: int) -> tuple[dict[str, Any], float]:
            run = Path(tmp) / f"soak{r}"
            s = soak("--engine", "native", *soak_target(args), "--programs", prog.name,
                     "--parallel", str(args.parallel), "-n", str(args.jobs), "--seed", "1",
                     "--results", str(run))
            return s, steady_rate(str(run))

        floors: list[float] = []
        for r in range(args.rounds):
            rates: dict[str, float] = {}
            order = ["bare", "floor", "soak"]
            if r % 2:  # ABBA: odd rounds run in reverse, so a drift of the machine's speed
                #   over a round does not favour one arm
                order.reverse()
            for arm in order:
                if arm == "bare":
                    rates[arm] = bare_rate(argv, Path(tmp), args.jobs, args.parallel)
                elif arm == "floor":
                    rates[arm] = floor_rate(argv, Path(tmp), args.jobs, args.parallel)
                else:
                    s, rates[arm] = soak_round(r)
            bare, rate = rates["bare"], rates["soak"]
            ratios.append(rate / bare)
            floors.append(rates["floor"] / bare)
            cpu = s["phases"]["parent_cpu"]
            per_job.append(1000 * cpu["seconds"] / max(1, cpu["count"]))
            print(f"round {r}: bare {bare:6.1f}  floor {rates['floor']:6.1f}  soak {rate:6.1f}"
                  f" jobs/s ({s['jobs']} jobs, {sum(s['failures'].values())} failures, parent "
                  f"CPU {per_job[-1]:.2f} ms/job)  floor/bare {floors[-1]:.3f}  soak/bare "
                  f"{rate / bare:.3f}", flush=True)
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        over_floor = statistics.median(r / f for r, f in zip(ratios, floors, strict=True))
        print(f"median soak/bare over {args.rounds} rounds: {statistics.median(ratios):.3f} "
              f"(quartiles {q[0]:.3f}-{q[2]:.3f}; target >= 0.90); median floor/bare "
              f"{statistics.median(floors):.3f}; median soak/floor {over_floor:.3f}; median "
              f"parent CPU {statistics.median(per_job):.2f} ms/job")
        if args.record_s > 0:
            run = Path(tmp) / "record"
            s = soak("--engine", "native", *soak_target(args), "--programs", prog.name,
                     "--parallel", str(args.parallel), "-d", f"{args.record_s:g}s",
                     "--record", "--results", str(run))
            kept = replay.size_of(run)
            print(f"recorded soak {args.record_s:g} s: {s['jobs']} jobs, "
                  f"{sum(s['failures'].values())} failures;"
                  f" replays kept {kept / 2**20:.2f} MiB "
                  f"({len(list(run.rglob('*.ireereplay')))} files) of the "
                  f"{replay.DISK_CAP_BYTES / 2**20:.0f} MiB cap")


if __name__ == "__main__":
    main()
