"""The fault matrix on a real target (issue 24 item 6): every fault of the project's fault
library (tests/native/libfault.c, LD_PRELOAD) x the patterns where it can fire, one soak per
cell, and for each cell what a user would check first:

  expected class   segv -> crash; spin -> teardown_hang (busy); block -> teardown_hang
                   (blocked); an exit fault on exit-os-exit (no exit handlers run) -> none
  recorded         the classes the soak recorded (and the fault library's own count of
                   faults fired: the ground truth, independent of the tool)
  state            busy / blocked of the signature (hangs)
  frame            the library's faulting frame (iree_fault_segv / _spin / _block) found in
                   the signature's stack, and by which tool
  rate             the signature's rate per exposure with its 95% interval, next to the
                   injected probability (exit faults fire once per process exit; a join fault
                   per pthread_join, several per device release)

    python bench/gpu_fault_matrix.py [--target cuda --artifacts DIR] [--duration 20]
                                     [--debuggers on|off] [--faults ...] [--out FILE]

`--debuggers off` runs every soak with a PATH that has no gdb, cuda-gdb or rocgdb (on the H200
image cuda-gdb is the only gdb): the verdicts, counts and busy/blocked states must not depend
on them; a native frame is then required only where py-spy can read one (`frame_expected`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, add_target_args, build_fault_lib, header, soak_target  # noqa: E402

PROGRAMS: str = "unary.*.f32.*"
_DEBUGGERS: tuple[str, ...] = ("gdb", "cuda-gdb", "rocgdb")


@dataclass(frozen=True)
class Fault:
    name: str
    env: tuple[tuple[str, str], ...]  # the library's variables
    prob: float
    patterns: tuple[str, ...]  # where it can fire
    mode: str  # segv | spin | block

    def expected(self, pattern: str) -> str:
        if self.name.startswith("exit-") and pattern == "exit-os-exit":
            return "none"  # os._exit skips the ELF destructors the fault lives in
        return "crash" if self.mode == "segv" else "teardown_hang"

    def state(self) -> str:
        return {"segv": "-", "spin": "busy", "block": "blocked"}[self.mode]


def _join(mode: str, p: float) -> Fault:
    return Fault(f"join-{mode}", (("IREE_FAULT_JOIN", mode), ("IREE_FAULT_JOIN_PROB", str(p))),
                 p, ("per-call", "churn", "exit-clean"), mode)


def _exit(mode: str, p: float) -> Fault:
    return Fault(f"exit-{mode}", (("IREE_FAULT_EXIT", mode), ("IREE_FAULT_EXIT_PROB", str(p))),
                 p, ("exit-clean", "process-per-job", "exit-os-exit"), mode)


FAULTS: tuple[Fault, ...] = (_join("segv", 0.3), _join("spin", 0.1), _join("block", 0.1),
                             _exit("segv", 0.3), _exit("spin", 0.1), _exit("block", 0.1))



def path_without_debuggers() -> str:
    """PATH with every folder that holds a gdb, cuda-gdb or rocgdb left out."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and
                           not any(os.access(os.path.join(d, g), os.X_OK) for g in _DEBUGGERS))


def cell(fault: Fault, pattern: str, args: argparse.Namespace, lib: Path,
         folder: Path) -> dict[str, Any]:
    count = folder / f"{fault.name}-{pattern}.fired"
    return run_cell(folder / f"{fault.name}-{pattern}", args,
                    [*soak_target(args), "--patterns", pattern, "--programs", PROGRAMS,
                     "--env", f"LD_PRELOAD={lib}", "--env", f"IREE_FAULT_COUNT_FILE={count}",
                     *[x for k, v in fault.env for x in ("--env", f"{k}={v}")]],
                    count, f"{fault.name.split('-')[0]} {fault.mode}")


def run_cell(run: Path, args: argparse.Namespace, options: list[str], count: Path,
             want: str) -> dict[str, Any]:
    """One cell's soak (`options`: target, pattern, programs, the fault's environment) and
    its report; `fired`: the lines of the fault library's count file that begin with `want`."""
    env = dict(os.environ)
    if args.debuggers == "off":
        env["PATH"] = path_without_debuggers()
    argv = [sys.executable, "-m", "stress", "soak", *options, "--duration",
            f"{args.duration:g}s", "--workers", str(args.workers), "--timeout", "5s",
            "--teardown-timeout", f"{args.teardown_timeout:g}s", "--max-worker-restarts",
            "100000", "--json", "-q", "--results", str(run)]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=args.duration * 6 + 600)
    if out.returncode not in (0, 1):
        return {"error": f"soak exit {out.returncode}: {out.stderr.strip()[-300:]}"}
    s = json.loads(out.stdout)
    rep = subprocess.run([sys.executable, "-m", "stress", "report", str(run), "--format",
                          "json"], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=600)
    sigs = json.loads(rep.stdout)["signatures"] if rep.returncode in (0, 1) else []
    fired = count.read_text().split("\n") if count.exists() else []
    if getattr(args, "reports", None):
        keep_report(run, Path(args.reports), env)
    return {"summary": s, "signatures": sigs,
            "fired": sum(1 for line in fired if line.startswith(want))}


def keep_report(run: Path, into: Path, env: dict[str, str]) -> None:
    """The cell's text report (what a user reads: classes, phases, busy/blocked in words,
    stacks) and its summary.json, under `into` by the cell's name, to read after the machine
    that ran it is given back."""
    into.mkdir(parents=True, exist_ok=True)
    text = subprocess.run([sys.executable, "-m", "stress", "report", str(run)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    (into / f"{run.name}.txt").write_text(text.stdout + text.stderr)
    if (run / "summary.json").exists():
        shutil.copy(run / "summary.json", into / f"{run.name}-summary.json")


def frame_expected(fault: Fault, pattern: str, debuggers: str) -> bool:
    """Whether the faulting native frame must be in the signature. With a debugger, always
    (gdb reads a crash's core and attaches to a stall). Without one, only where py-spy can
    read it: a stall in a process whose interpreter is still alive (a join fault in mid-run
    teardown, per-call or churn). A crash leaves only a core, which no tool but a debugger
    reads (faulthandler gives Python frames), and a stall in an exit-family pattern happens
    past interpreter finalization, where py-spy finds no interpreter."""
    if debuggers == "on":
        return True
    return fault.mode != "segv" and fault.name.startswith("join-") and \
        pattern in ("per-call", "churn")


def judge(fault: Fault, pattern: str, got: dict[str, Any], debuggers: str = "on") -> list[str]:
    """One printed row: fault, pattern, p, fired, expected, recorded, state, frame, rate,
    verdict."""
    expected = fault.expected(pattern)
    if "error" in got:
        return [fault.name, pattern, f"{fault.prob:g}", "?", expected, got["error"], "", "", "",
                "ERROR"]
    # the driver probe runs before the soak in the workers' environment, so the fault fires
    #   in its exit too: its failure is recorded (the first of the run), but belongs to no
    #   pattern's cell; it is said apart and taken off the library's count
    detail = got["summary"]["failures_detail"]
    probe = [f for f in detail if f["message"].startswith("driver probe")]
    counts = {k: v for k, v in got["summary"]["failures"].items() if v}
    for f in probe:
        counts[f["class"]] -= 1
        if not counts[f["class"]]:
            del counts[f["class"]]
    got["fired"] -= len(probe)
    # a class other than the expected one says at which steps it was recorded, so an odd cell
    #   explains itself
    steps: dict[str, Counter[str]] = {}
    for f in detail:
        if f not in probe and f["class"] != expected:
            steps.setdefault(f["class"], Counter())[f.get("last_step") or "?"] += 1
    recorded = ", ".join(
        f"{k} {v}" + (f" (at {', '.join(f'{s} {n}' for s, n in sorted(steps[k].items()))})"
                      if k in steps else "")
        for k, v in sorted(counts.items())) or "none"
    if probe:
        recorded += f" (+ probe {', '.join(f['class'] for f in probe)})"
    frame_fn = getattr(fault, "frame", "") or f"iree_fault_{fault.mode}"  # (a stand-in: its own)
    main = [g for g in got["signatures"] if g["class"] == expected]
    main.sort(key=lambda g: -g["count"])
    state = frame = rate = "-"
    ok = set(counts) <= {expected} if expected != "none" else not counts
    if main:
        g = main[0]
        state = g.get("thread_state") or "-"
        found = any(frame_fn in f for f in [*g.get("frames", []), *g.get("stack", [])])
        frame = f"yes ({g.get('stack_source')})" if found else f"no ({g.get('stack_source')})"
        need_frame = frame_expected(fault, pattern, debuggers)
        if not found and not need_frame:
            frame += ", not expected without a debugger"
        if g.get("rate_per_exposure") is not None:
            rate = (f"{g['rate_per_exposure']:.3f} [{g['ci_low']:.3f}, {g['ci_high']:.3f}] "
                    f"per {g['exposure']}")
        ok = ok and (found or not need_frame) and (fault.state() == "-" or state == fault.state())
    elif expected != "none":
        ok = False
    # the fault never fired (the runtime of this target never joined a thread there, say):
    #   the cell proves nothing either way, and says so instead of passing or failing
    unfired = expected != "none" and got["fired"] == 0
    n = counts.get(expected, 0)
    if fault.mode == "segv" and n != got["fired"]:
        ok = False  # a process dies at its first fired segv: one crash each, none missed
    if fault.mode != "segv" and expected != "none" and not 1 <= n <= got["fired"]:
        ok = False  # a stuck process may have fired in several threads: one hang
    return [fault.name, pattern, f"{fault.prob:g}", str(got["fired"]), expected, recorded,
            state, frame, rate, "NOT FIRED" if unfired and not counts else
            "OK" if ok and not unfired else "MISMATCH"]


def finish(cols: tuple[str, ...], rows: list[list[str]], what: str, head: str,
           out: str | None) -> int:
    """The aligned table with its count line (`what`: the run's settings), printed and
    written to `out`; 0 when every cell is OK or its fault never fired, else 1."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    table = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    table += ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in rows]
    bad = sum(r[-1] not in ("OK", "NOT FIRED") for r in rows)
    unfired = sum(r[-1] == "NOT FIRED" for r in rows)
    table.append(f"# {len(rows)} cells, {len(rows) - bad - unfired} OK, {bad} not, {unfired} "
                 f"where the fault never fired (nothing to judge); {what}")
    print("\n" + "\n".join(table))
    if out:
        Path(out).write_text("\n".join([head, *table]) + "\n")
    return 0 if not bad else 1


def keep_odd(got: dict[str, Any], expected: str, into: Path, name: str) -> None:
    """failure.json and stacks.txt of each failure of another class than expected, so that a
    mismatching cell on a machine given back afterwards can still be read."""
    for f in got.get("summary", {}).get("failures_detail", []):
        src = Path(f.get("artifacts") or "")
        if f["class"] == expected or not src.is_dir():
            continue
        dst = into / name / src.name
        dst.mkdir(parents=True, exist_ok=True)
        for part in ("failure.json", "stacks.txt", "journal.txt"):
            if (src / part).exists():
                shutil.copy(src / part, dst / part)


def add_matrix_args(ap: argparse.ArgumentParser, faults: list[str]) -> None:
    """The options every fault matrix takes (soak length, workers, deadline, debuggers, the
    faults run, where the table and odd evidence go)."""
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--teardown-timeout", type=float, default=2.0)
    ap.add_argument("--debuggers", choices=("on", "off"), default="on")
    ap.add_argument("--faults", default=",".join(faults))
    ap.add_argument("--out", help="also write the table here")
    ap.add_argument("--keep-odd", metavar="DIR",
                    help="copy the evidence of failures of an unexpected class here")
    ap.add_argument("--reports", metavar="DIR",
                    help="write each cell's text report and summary.json here")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_target_args(ap)
    add_matrix_args(ap, [f.name for f in FAULTS])
    args = ap.parse_args()
    head = header()
    chosen = [f for f in FAULTS if f.name in args.faults.split(",")]
    print(f"# debuggers {args.debuggers}: "
          + (", ".join(f"{g}={shutil.which(g)}" for g in _DEBUGGERS if shutil.which(g))
             if args.debuggers == "on" else "none on PATH") + "; py-spy "
          + str(shutil.which("py-spy") or Path(sys.executable).parent / "py-spy"), flush=True)
    cols = ("fault", "pattern", "p", "fired", "expected", "recorded", "state", "frame",
            "rate per exposure [95%]", "cell")
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="fault-matrix-") as tmp:
        lib = build_fault_lib(Path(tmp))
        for fault in chosen:
            for pattern in fault.patterns:
                got = cell(fault, pattern, args, lib, Path(tmp))
                row = judge(fault, pattern, got, args.debuggers)
                if args.keep_odd and row[-1] == "MISMATCH":
                    keep_odd(got, fault.expected(pattern), Path(args.keep_odd),
                             f"{fault.name}-{pattern}")
                rows.append(row)
                print("  ".join(row), flush=True)
    return finish(cols, rows, f"target {args.target}, {args.duration:g} s soaks, "
                  f"{args.workers} workers, teardown deadline {args.teardown_timeout:g} s",
                  head, args.out)


if __name__ == "__main__":
    sys.exit(main())
