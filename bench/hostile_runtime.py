"""Repeated soaks against a runtime that fails in its own teardown (issue 8's "Done when"):
the fault library of tests/native (LD_PRELOAD) makes the runtime's pthread_join segfault with
p = 0.3, or stall (a futex wait that never returns) with p = 0.05.

For each run it prints: exit code (must be 1: tested, never 2: refused), wall time against the
bound duration + --timeout + --teardown-timeout + evidence allowance, failures recorded,
and, from the library's own count file, how many worker processes stalled and whether every
one of them has a recorded hang whose stacks show the stuck native frame.

    python bench/hostile_runtime.py [--runs 10] [--duration 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_EVIDENCE_ALLOWANCE_S: float = 20.0  # stacks + kill (bounded ~15 s) + start-up and summary


def build_lib(out: Path) -> Path:
    lib = out / "libfault.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-g", "-o", str(lib),
                    str(ROOT / "tests" / "native" / "libfault.c"), "-ldl", "-lpthread"],
                   check=True)
    return lib


def one(run: Path, lib: Path, mode: str, prob: str, duration: float, timeout: float) -> dict:  # type: ignore[type-arg]
    count = run.with_suffix(".count")
    argv = [sys.executable, "-m", "stress", "soak", "--target", "cpu", "--duration",
            f"{duration:g}s", "--timeout", f"{timeout:g}s", "--teardown-timeout",
            f"{timeout:g}s", "--workers", "2", "--json", "-q", "--results", str(run),
            "--programs", "unary.*.f32.*,binary.add.*.2x16x64x64+1x16x1x1",
            "--env", f"LD_PRELOAD={lib}", "--env", f"IREE_FAULT_COUNT_FILE={count}",
            "--env", f"IREE_FAULT_JOIN={mode}", "--env", f"IREE_FAULT_JOIN_PROB={prob}"]
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=900)
    wall = time.monotonic() - t0
    fired = [line.split() for line in count.read_text().splitlines()] if count.exists() else []
    db = sqlite3.connect(run / "stress.db")
    rows = db.execute("SELECT class, pid, artifacts, evidence FROM failures").fetchall()
    workers = {r[0] for r in db.execute("SELECT pid FROM workers")}
    db.close()
    stalled = {int(pid) for _, m, pid in fired if m == "block"} & workers
    hung = {pid: art for cls, pid, art, _ in rows if cls in ("hang", "teardown_hang")}
    recorded = {p for p in stalled if p in hung and art_has(hung[p], "iree_fault_block")}
    native = sum(1 for cls, _, _, ev in rows if cls == "crash" and
                 (json.loads(ev or "{}").get("crash_frames") or [""])[0] == "iree_fault_segv")
    crashes = sum(1 for r in rows if r[0] == "crash")
    return {"rc": out.returncode, "wall": wall, "bound": duration + 2 * timeout +
            _EVIDENCE_ALLOWANCE_S, "crashes": crashes, "native": native,
            "hangs": len(hung), "stalled": len(stalled), "stalls_recorded": len(recorded),
            "argv": argv}


def art_has(folder: str | None, text: str) -> bool:
    return bool(folder) and text in Path(folder, "stacks.txt").read_text(errors="replace")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--timeout", type=float, default=2.0)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    print(f"# {shlex.join([sys.executable.split('/')[-1], *sys.argv])}  (commit {commit}, "
          f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)")
    tmp = Path(tempfile.mkdtemp(prefix="hostile-"))
    lib = build_lib(tmp)
    ok = True
    for mode, prob in (("segv", "0.3"), ("block", "0.05")):
        print(f"\n## runtime pthread_join -> {mode} with p = {prob}")
        print("run  exit  wall_s  bound_s  crashes  native_frames  hangs  stalled_workers  "
              "stalls_recorded_with_frame")
        for i in range(args.runs):
            r = one(tmp / f"{mode}{i}", lib, mode, prob, args.duration, args.timeout)
            good = r["rc"] == 1 and r["wall"] <= r["bound"] and \
                r["stalls_recorded"] == r["stalled"] and r["native"] == r["crashes"]
            ok &= good
            print(f"{i:3d}  {r['rc']:4d}  {r['wall']:6.1f}  {r['bound']:7.1f}  {r['crashes']:7d}  "
                  f"{r['native']:13d}  {r['hangs']:5d}  {r['stalled']:15d}  "
                  f"{r['stalls_recorded']:26d}{'' if good else '  <- NOT OK'}")
    print(f"\nall runs: {'OK' if ok else 'NOT OK'} (exit 1, within the bound, every stalled "
          "worker recorded with its stuck frame, every crash with its native frame)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
