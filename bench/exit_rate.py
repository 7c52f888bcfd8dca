"""Exits per second of short-lived job processes (issue 17 item 3), three shapes, same work:

  (a) spawn    a fresh `python -m stress.engine.worker` per job: the real worker, paying
               interpreter start-up and imports every time (the spawn fallback)
  (b) bare     a parent that imported numpy + iree.runtime forks children that create an
               instance, driver and device, load the program, invoke, read back, check, release
               in order and exit normally: no harness at all
  (c) server   the fork server driven through forkclient, children running the real worker
               with the `exit-clean` pattern (journal, messages, checks)

Each job: one device, N checked invocations, release, normal exit. All shapes keep the same
number of processes running at once (--concurrency). Rounds are interleaved (the order rotates)
and the medians are compared: targets c/a >= 10 and c/b >= 0.9.

    python bench/exit_rate.py [--program NAME] [--target cpu] [--device local-task]
                              [--vmfb FILE | --artifacts DIR] [--out FILE]

On a GPU: `--target cuda --device cuda --artifacts DIR` (from `iree-stress compile --export`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_PROGRAM: str = "binary.add.f32.3x5x7+3x5x7"  # the smallest real program: the bench
#   measures process life and death, not kernels
TARGET_VS_SPAWN: float = 10.0  # issue 17: the fork server >= 10x spawn-per-job
TARGET_VS_BARE: float = 0.9  # issue 17: >= 0.9x a bare fork-and-exit loop doing the same work
_JOB_TIMEOUT_S: float = 120.0  # one job never takes this long unless something hangs


def _driver_of(device: str) -> str:
    return device.split("://")[0].split(":")[0]


# ---- (b) the bare fork loop, run in a helper process that imported only the runtime ---------
def bare_parent(args: argparse.Namespace) -> Callable[[], int] | None:
    """Serves `N C` lines on stdin (answers `wall_s ok`). Returns, in a forked child only, the
    job to run: the child leaves every loop before it works and exits."""
    for key in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):  # as in the fork server
        os.environ.setdefault(key, "1")
    import numpy as np
    from iree.runtime import _binding as b

    from stress.programs import corpus, dtypes, reference
    from stress.programs.program import Role, make_inputs

    program = corpus.by_name()[args.program]
    out_dtype = np.dtype(dtypes.get(program.results[0].dtype).storage)
    elts = [getattr(b.HalElementType, dtypes.get(a.dtype).hal) for a in program.args]
    driver_name = _driver_of(args.device)

    def read_back(device: Any, view: Any) -> Any:
        """Maps host-visible results (cpu); DMA-copies device memory (GPU) into a host
        staging buffer first, as the worker does."""
        buf = view.get_buffer()
        visible = int(b.MemoryType.HOST_VISIBLE)
        if buf.memory_type() & visible == visible:
            source = buf
        else:
            source = device.allocator.allocate_buffer(
                memory_type=b.MemoryType.HOST_LOCAL | b.MemoryType.DEVICE_VISIBLE,
                allowed_usage=b.BufferUsage.TRANSFER_TARGET | b.BufferUsage.MAPPING_SCOPED,
                allocation_size=buf.byte_length())
            sem = device.create_semaphore(0)
            device.queue_copy(buf, source, wait_semaphores=b.HalFence.create_at(sem, 0),
                              signal_semaphores=b.HalFence.create_at(sem, 1))
            b.HalFence.create_at(sem, 1).wait()
        mapping = source.map()
        out = np.array(mapping.asarray(tuple(view.shape), out_dtype), copy=True)
        del mapping
        return out

    def job() -> int:
        """What a job process must do itself, as the worker does: read the module, derive
        the inputs and the reference from the job's seed, then the HAL work."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        blob = Path(args.vmfb).read_bytes()
        inputs = make_inputs(program, 11)
        ins = [x for x, a in zip(inputs, program.args, strict=True) if a.role is Role.INPUT]
        expected = reference.evaluate(program.op, program.dtype, ins)
        instance = b.VmInstance()
        driver = b.create_hal_driver(driver_name)
        device = driver.create_device_by_uri(args.device)
        hal = b.create_hal_module(instance, device)
        module = b.VmModule.copy_buffer(instance, blob)
        ctx = b.VmContext(instance, [hal, module])
        fn = module.lookup_function(program.entry)
        ok = 0
        for _ in range(args.invocations):
            arg_list = b.VmVariantList(len(inputs))
            for arr, elt in zip(inputs, elts, strict=True):
                arg_list.push_ref(device.allocator.allocate_buffer_copy(
                    memory_type=b.MemoryType.DEVICE_LOCAL, allowed_usage=b.BufferUsage.DEFAULT,
                    device=device, buffer=arr, element_type=elt))
            rets = b.VmVariantList(1)
            ctx.invoke(fn, arg_list, rets)
            view = rets.get_as_object(0, b.HalBufferView)
            out = read_back(device, view)
            del view, rets, arg_list
            ok += reference.matches(program.results[0].dtype, out, expected)
        del fn, ctx, module, hal, device, driver, instance  # dependency order, as the worker
        return 0 if ok == args.invocations else 1

    print("ready", flush=True)
    for line in sys.stdin:
        n, concurrency = (int(x) for x in line.split())
        t0 = time.perf_counter()
        running: set[int] = set()
        started = ok = 0
        while started < n or running:
            while started < n and len(running) < concurrency:
                pid = os.fork()
                if pid == 0:
                    return job
                running.add(pid)
                started += 1
            pid, status = os.wait()
            running.discard(pid)
            ok += os.waitstatus_to_exitcode(status) == 0
        print(f"{time.perf_counter() - t0} {ok}", flush=True)
    return None


class Bare:
    def __init__(self, args: argparse.Namespace, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--bare-parent", "--vmfb", str(args.vmfb), "--program",
             args.program, "--device", args.device, "--invocations", str(args.invocations)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("bare parent did not start")

    def round(self, n: int, concurrency: int) -> tuple[float, int]:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"{n} {concurrency}\n")
        self.proc.stdin.flush()
        wall, ok = self.proc.stdout.readline().split()
        return float(wall), int(ok)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=_JOB_TIMEOUT_S)


# ---- (a) and (c): the real worker, spawned or forked ------------------------------------
class Jobs:
    """Worker argv, config and per-job files of one shape."""

    def __init__(self, args: argparse.Namespace, work: Path):
        from stress.programs import corpus

        program = corpus.by_name()[args.program]
        self.work = work
        self.config = work / "config.json"
        self.config.write_text(json.dumps({
            "driver": _driver_of(args.device), "device_uri": args.device, "threads": 1,
            "seed": 1, "inject": [],
            "programs": {program.name: {"program": program.to_dict(), "vmfb": str(args.vmfb)}}}))
        self.program = program.name
        self.invocations = args.invocations
        self.count = 0

    def next(self, msg_fd: int) -> tuple[list[str], bytes]:
        self.count += 1
        job = {"index": self.count, "program": self.program, "pattern": "exit-clean",
               "seed": 11, "invocations": self.invocations}
        argv = ["--config", str(self.config), "--worker-id", "0", "--journal",
                str(self.work / f"j{self.count}.bin"), "--msg-fd", str(msg_fd)]
        return argv, (json.dumps(["job", job]) + "\n").encode()


def _checked(msg_r: int, invocations: int) -> bool:
    """The job's results reached us and every invocation matched the reference."""
    data = b""
    while chunk := os.read(msg_r, 1 << 16):
        data += chunk
    os.close(msg_r)
    done = [p for name, p in map(json.loads, data.splitlines()) if name == "job_done"]
    return bool(done) and done[0]["result"]["ok"] == invocations


def spawn_round(jobs: Jobs, env: dict[str, str], n: int, concurrency: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    running: dict[int, tuple[subprocess.Popen[bytes], int]] = {}
    started = ok = 0
    while started < n or running:
        while started < n and len(running) < concurrency:
            msg_r, msg_w = os.pipe()
            argv, stdin = jobs.next(msg_w)
            proc = subprocess.Popen([sys.executable, "-m", "stress.engine.worker", *argv],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, pass_fds=[msg_w], env=env,
                                    cwd=jobs.work, start_new_session=True)
            os.close(msg_w)
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.close()
            running[proc.pid] = (proc, msg_r)
            started += 1
        pid, status = os.wait()
        entry = running.pop(pid, None)
        if entry is not None:
            entry[0].returncode = os.waitstatus_to_exitcode(status)
            ok += entry[0].returncode == 0 and _checked(entry[1], jobs.invocations)
    return time.perf_counter() - t0, ok


def server_round(server: Any, jobs: Jobs, n: int, concurrency: int) -> tuple[float, int]:
    from stress.engine.forkclient import CHILD_MSG_FD

    devnull = os.open(os.devnull, os.O_WRONLY)
    t0 = time.perf_counter()
    running: list[tuple[Any, int]] = []
    started = ok = 0
    while started < n or running:
        while started < n and len(running) < concurrency:
            msg_r, msg_w = os.pipe()
            in_r, in_w = os.pipe()
            argv, stdin = jobs.next(CHILD_MSG_FD)
            os.write(in_w, stdin)
            os.close(in_w)
            proc = server.fork(argv, msg_w, devnull, devnull, stdin_fd=in_r, cwd=jobs.work)
            os.close(msg_w)
            os.close(in_r)
            running.append((proc, msg_r))
            started += 1
        select.select([server], [], [], _JOB_TIMEOUT_S)
        server.pump()
        for entry in [e for e in running if e[0].poll() is not None]:
            running.remove(entry)
            ok += entry[0].returncode == 0 and _checked(entry[1], jobs.invocations)
    os.close(devnull)
    return time.perf_counter() - t0, ok


# ---- the run ------------------------------------------------------------------------------
def soak_round(args: argparse.Namespace, env: dict[str, str], seconds: float,
               concurrency: int) -> tuple[float, int, int]:
    """(d) the real thing: `iree-stress soak --patterns exit-clean` (fork server, batches,
    journal, store, watchdog). Exits per second from the first process's start to the last
    one's end (the soak's own start-up, the probe and the final summary not counted, as for
    the other shapes). Returns (seconds, exits, failed)."""
    import sqlite3

    with tempfile.TemporaryDirectory(prefix="exit-rate-soak-") as tmp:
        argv = [sys.executable, "-m", "stress", "soak", "--patterns", "exit-clean", "--programs",
                args.program, "--workers", str(concurrency), "--threads", "1", "--duration",
                f"{seconds:g}s", "--seed", "1", "-q", "--results", f"{tmp}/run"]
        if args.artifacts:
            argv += ["--artifacts", args.artifacts]
        else:
            argv += ["--target", args.target]
        argv += ["--device", args.device]
        subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=seconds + 300)
        db = sqlite3.connect(f"{tmp}/run/stress.db")
        n, t0, t1, bad = db.execute(
            "SELECT COUNT(*), MIN(started_at), MAX(ended_at), "
            "SUM(outcome != 'clean') FROM workers WHERE pattern='exit-clean' "
            "AND ended_at IS NOT NULL").fetchone()
        db.close()
    return (t1 - t0) if n else 1.0, int(n or 0), int(bad or 0)


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "stress", "bench",
                                ":!bench/results"],  # other benches' outputs are not code
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return head + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _resolve_vmfb(args: argparse.Namespace) -> Path:
    if args.vmfb:
        return Path(args.vmfb).resolve()
    if args.artifacts:
        from stress.programs.cache import load_export

        _, found = load_export(Path(args.artifacts))
        return found[args.program][1].resolve()
    sys.path.insert(0, str(ROOT / "bench"))
    from _common import vmfb

    return vmfb(args.program, args.target).resolve()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", default=DEFAULT_PROGRAM)
    ap.add_argument("--target", default="cpu", help="compile target when no artifact is given")
    ap.add_argument("--device", default="local-task", help="device URI (driver: its prefix)")
    ap.add_argument("--vmfb", help="a prebuilt module for --program")
    ap.add_argument("--artifacts", help="an exported artifacts folder (compile --export)")
    ap.add_argument("--invocations", type=int, default=4, help="checked invocations per job")
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--spawn-jobs", type=int, default=8, help="jobs per spawn round")
    ap.add_argument("--fork-jobs", type=int, default=80, help="jobs per bare/server round")
    ap.add_argument("--soak-seconds", type=float, default=8.0, help="(d): soak length")
    ap.add_argument("--out", type=Path, help="also write the report here")
    ap.add_argument("--bare-parent", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare_parent:
        job = bare_parent(args)
        return job() if job is not None else 0

    from stress.engine.forkclient import ForkServer

    args.vmfb = _resolve_vmfb(args)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    say(f"command: {shlex.join([Path(sys.executable).name, *sys.argv])}")
    say(f"commit: {_git_commit()}")
    say(f"machine: {platform.node()} {os.cpu_count()} cpus, python {platform.python_version()}"
        f", {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    say(f"job: {args.program} on {args.device}, {args.invocations} checked invocations, "
        f"concurrency {args.concurrency}")
    with tempfile.TemporaryDirectory(prefix="exit-rate-") as tmp:
        work = Path(tmp)
        jobs = Jobs(args, work)
        bare = Bare(args, env)
        server = ForkServer.start(sys.executable, env, cwd=work)
        say(f"fork server: {server.hello['reason']}")
        shapes: dict[str, Callable[[int], tuple[float, int]]] = {
            "spawn": lambda n: spawn_round(jobs, env, n, args.concurrency),
            "bare": lambda n: bare.round(n, args.concurrency),
            "server": lambda n: server_round(server, jobs, n, args.concurrency),
        }
        sizes = {"spawn": args.spawn_jobs, "bare": args.fork_jobs, "server": args.fork_jobs}
        rates: dict[str, list[float]] = {k: [] for k in [*shapes, "soak"]}
        failed: dict[str, int] = dict.fromkeys([*shapes, "soak"], 0)
        for run in shapes.values():  # warm-up: page cache, first-import costs
            run(max(2, args.concurrency))
        order = [*shapes, "soak"]
        for r in range(args.rounds):
            for name in order[r % 4:] + order[:r % 4]:
                if name == "soak":
                    wall, n, bad = soak_round(args, env, args.soak_seconds, args.concurrency)
                    rates[name].append(n / wall)
                    failed[name] += bad
                    continue
                wall, ok = shapes[name](sizes[name])
                rates[name].append(sizes[name] / wall)
                failed[name] += sizes[name] - ok
            say(f"round {r + 1}: " + "  ".join(f"{k} {v[-1]:6.2f}/s" for k, v in rates.items()))
        server.close()
        bare.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    # each round's shapes ran back to back: per-round ratios cancel load that drifts between
    # rounds (other work on a shared machine), so their median is the figure compared
    per_round = {pair: statistics.median(rates["server"][i] / rates[pair][i]
                                         for i in range(args.rounds))
                 for pair in ("spawn", "bare")}
    for name, what in (("spawn", "(a) spawn per job (real worker)"),
                       ("bare", "(b) bare fork-and-exit loop"),
                       ("server", "(c) fork server + real worker, exit-clean"),
                       ("soak", "(d) iree-stress soak --patterns exit-clean")):
        say(f"{what:44s} median {med[name]:7.2f} exits/s  (failed jobs: {failed[name]})")
    soak_ratios = {pair: statistics.median(rates["soak"][i] / rates[pair][i]
                                           for i in range(args.rounds))
                   for pair in ("spawn", "bare")}
    say(f"d/a = {soak_ratios['spawn']:5.2f} (soak vs spawn per job, median of per-round ratios)"
        f"  target >= {TARGET_VS_SPAWN:g}  "
        f"{'OK' if soak_ratios['spawn'] >= TARGET_VS_SPAWN else 'BELOW TARGET'}")
    say(f"d/b = {soak_ratios['bare']:5.2f} (soak vs bare fork loop, median of per-round ratios)"
        f"  target >= {TARGET_VS_BARE:g}  "
        f"{'OK' if soak_ratios['bare'] >= TARGET_VS_BARE else 'BELOW TARGET'}")
    vs_spawn, vs_bare = per_round["spawn"], per_round["bare"]
    say(f"c/a = {vs_spawn:5.2f} (median of per-round ratios; ratio of medians "
        f"{med['server'] / med['spawn']:.2f})  target >= {TARGET_VS_SPAWN:g}  "
        f"{'OK' if vs_spawn >= TARGET_VS_SPAWN else 'BELOW TARGET'}")
    say(f"c/b = {vs_bare:5.2f} (median of per-round ratios; ratio of medians "
        f"{med['server'] / med['bare']:.2f})  target >= {TARGET_VS_BARE:g}  "
        f"{'OK' if vs_bare >= TARGET_VS_BARE else 'BELOW TARGET'}")
    say(f"load average during the run (1 min, at the end): {os.getloadavg()[0]:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0 if not any(failed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
