"""The HIP fault matrix on the stand-in libamdhip64 (issue 37): IREE's real hip driver (the
installed iree-base-runtime) runs on tests/native/fakehip.c, and each of the stand-in's faults
is turned on in one soak per pattern where it fires. Each cell is judged as in
bench/gpu_fault_matrix.py (its `judge`): the class recorded (segv -> crash; spin ->
teardown_hang, busy; block -> teardown_hang, blocked), the faulting frame found in the
signature's stack, busy vs blocked, and the rate per exposure beside the fault's probability,
against the stand-in's own count of faults fired (the ground truth).

The events-* faults stall a thread that is not the one stuck in the HAL step: IREE's driver
release (dlclose) waits in the stand-in's cleanup, joining an async-events thread that spins
or blocks. The failing thread is then `blocked` either way, its frame the cleanup's wait
(`fakehip_cleanup`); what tells spin from block is the process: a process whose other thread
burns a core is `busy` (failure.json's `process_activity`, the column `process`).

    python bench/hip_fault_matrix.py [--duration 20] [--faults ...] [--out FILE]

The stand-in runs no kernels: the soaks run the transfer-only corpus programs (results checked
end to end). Where a fault fires: the library-cleanup faults (events-*, cleanup-segv) at every
unload of the library (IREE's driver dlcloses it when it is destroyed: the worker's facts step,
instance-churn, process exit); dlclose-segv at the exit of a process that unloaded it after
hipInit; release-* in hipStreamSynchronize when a device releases its streams.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import header  # noqa: E402
from gpu_fault_matrix import (  # noqa: E402
    _DEBUGGERS,
    add_matrix_args,
    finish,
    judge,
    keep_odd,
    run_cell,
)

from tests.helpers import fakehip  # noqa: E402

PROGRAMS: str = "transfer.*"
_CLEANUP: tuple[str, ...] = ("instance-churn", "exit-clean", "process-per-job")
_RELEASE: tuple[str, ...] = ("per-call", "churn", "exit-clean")


@dataclass(frozen=True)
class HipFault:
    name: str  # FAKEHIP_FAULT's value
    prob: float
    patterns: tuple[str, ...]
    mode: str  # segv | spin | block
    frame: str  # the function a signature's stack must name
    process: str = ""  # the stalled process's activity (busy | blocked), where it differs
    failing: str = ""  # the failing thread's state, where not the fault's own (events-*)

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return (("FAKEHIP_FAULT", self.name), ("FAKEHIP_FAULT_PROB", str(self.prob)))

    def expected(self, pattern: str) -> str:
        return "crash" if self.mode == "segv" else "teardown_hang"

    def state(self) -> str:
        return self.failing or {"segv": "-", "spin": "busy", "block": "blocked"}[self.mode]


FAULTS: tuple[HipFault, ...] = (
    HipFault("events-spin", 0.5, _CLEANUP, "spin", "fakehip_cleanup", "busy", "blocked"),
    HipFault("events-block", 0.5, _CLEANUP, "block", "fakehip_cleanup", "blocked", "blocked"),
    HipFault("cleanup-segv", 0.5, _CLEANUP, "segv", "fakehip_wake_events_thread"),
    # the handler's code is gone when exit calls it: the frame is exit's, none of ours
    HipFault("dlclose-segv", 0.3, ("exit-clean", "process-per-job"), "segv",
             "__run_exit_handlers"),
    HipFault("release-spin", 0.1, _RELEASE, "spin", "fakehip_release_spin"),
    HipFault("release-block", 0.1, _RELEASE, "block", "fakehip_release_block"),
)


def cell(fault: HipFault, pattern: str, args: argparse.Namespace, lib: Path,
         folder: Path) -> dict[str, Any]:
    count = folder / f"{fault.name}-{pattern}.fired"
    return run_cell(folder / f"{fault.name}-{pattern}", args,
                    ["--target", "rocm", "--patterns", pattern, "--programs", PROGRAMS,
                     "--env", f"{fakehip.ENV_DYLIB}={fakehip.dylib_env(lib)}",
                     "--env", f"FAKEHIP_COUNT_FILE={count}",
                     *[x for k, v in fault.env for x in ("--env", f"{k}={v}")]],
                    count, fault.name.replace("-", " "))


def process_activity(fault: HipFault, got: dict[str, Any]) -> str:
    """The stalled processes' activity (failure.json's `process_activity`) over the failures
    of the fault's class, each value once; "-" where the fault does not say one."""
    if not fault.process or "error" in got:
        return "-"
    seen: list[str] = []
    for f in got["summary"].get("failures_detail", []):
        if f["class"] != fault.expected(""):
            continue
        try:
            meta = json.loads((Path(f.get("artifacts") or "") / "failure.json").read_text())
        except (OSError, ValueError):
            continue
        seen.append(str(meta.get("process_activity") or "?"))
    return ", ".join(dict.fromkeys(seen)) or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_matrix_args(ap, [f.name for f in FAULTS])
    args = ap.parse_args()
    head = header()
    lib = fakehip.build()
    print(f"# stand-in {lib}; debuggers {args.debuggers}: "
          + (", ".join(f"{g}={shutil.which(g)}" for g in _DEBUGGERS if shutil.which(g))
             if args.debuggers == "on" else "none on PATH"), flush=True)
    chosen = [f for f in FAULTS if f.name in args.faults.split(",")]
    cols = ("fault", "pattern", "p", "fired", "expected", "recorded", "state", "process",
            "frame", "rate per exposure [95%]", "cell")
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="hip-fault-matrix-") as tmp:
        for fault in chosen:
            for pattern in fault.patterns:
                got = cell(fault, pattern, args, lib, Path(tmp))
                row = judge(fault, pattern, got, args.debuggers)  # type: ignore[arg-type]
                proc = process_activity(fault, got)
                row.insert(7, proc)
                if fault.process and row[-1] == "OK" and proc != fault.process:
                    row[-1] = "MISMATCH"  # spin and block told apart by the process
                if args.keep_odd and row[-1] == "MISMATCH":
                    keep_odd(got, fault.expected(pattern), Path(args.keep_odd),
                             f"{fault.name}-{pattern}")
                rows.append(row)
                print("  ".join(row), flush=True)
    return finish(cols, rows, f"target rocm on the stand-in HIP library (IREE's hip driver, "
                  f"kernels not run), programs {PROGRAMS}, {args.duration:g} s soaks, "
                  f"{args.workers} workers, teardown deadline {args.teardown_timeout:g} s",
                  head, args.out)


if __name__ == "__main__":
    sys.exit(main())
