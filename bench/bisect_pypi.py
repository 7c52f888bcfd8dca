"""`bisect` over real runtime stacks from the package index: iree-base-runtime 3.11.0 ->
3.12.0 -> 3.13.0, each in its own venv (built once, cached in the user cache dir), with a real
native fault from FIRST_BAD on: tests/native/libfault.c preloaded into that stack's workers
(its env: LD_PRELOAD, IREE_FAULT_JOIN=segv, IREE_FAULT_JOIN_PROB=P), which makes the runtime's
own thread joins segfault while devices are released. Each stack compiles its programs with
the iree-base-compiler of its own version (runtime 3.11 refuses a 3.13 module: "required
module ... NOT_FOUND" at module load). First a `compare` of the two ends (a few pairs, the
way a user finds out there is something to bisect), then `bisect` over the three in a folder
beside it: it counts the compare's trials (same plan, another seed) before running its own.
Does it name FIRST_BAD, and what posterior and how many trials does it print? Then the same
bisect again: it must run no trial (resume from the trials on disk). Each trial's manifest
shows the runtime it ran.

    python bench/bisect_pypi.py [--first-bad iree-3.12] [--p 0.02] [--invocations 30]
                                [--compare-pairs 4]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ROOT, header  # noqa: E402

VERSIONS: tuple[str, ...] = ("3.11.0", "3.12.0", "3.13.0")


def stacks_toml(lib: Path, first_bad: str, p: float) -> str:
    out, bad = [], False
    for v in VERSIONS:
        name = f"iree-{v.rsplit('.', 1)[0]}"
        bad = bad or name == first_bad
        out.append(f'[stacks."{name}"]\nrequirements = ["iree-base-runtime=={v}", "numpy"]\n')
        out.append(f'compiler = "{v}"\n')  # runtime 3.11 refuses a 3.13 module
        if bad:
            out.append(f'env = {{ LD_PRELOAD = "{lib}", IREE_FAULT_JOIN = "segv", '
                       f'IREE_FAULT_JOIN_PROB = "{p}" }}\n')
        out.append("\n")
    return "".join(out)


INDEXES = re.compile(r"Looking in indexes: .*")  # pip's progress names the package
#   indexes' addresses: not kept in a committed output


def run(argv: list[str], what: str, tmp: str) -> None:
    print(f"## {what}\n$ iree-stress {' '.join(argv)}".replace(tmp, "$TMP"), flush=True)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "stress", *argv], capture_output=True,
                          text=True, cwd=ROOT)
    print(f"({time.monotonic() - t0:.0f} s, exit {proc.returncode})")
    err = INDEXES.sub("Looking in indexes: (addresses left out)", proc.stderr)
    print(err.replace(tmp, "$TMP"), proc.stdout.replace(tmp, "$TMP"), sep="\n", flush=True)


def fault_stacks(tmp: str, first_bad: str, p: float) -> tuple[Path, str]:
    """libfault.c built into `tmp` and the stacks file written there: (its path, its text)."""
    lib = Path(tmp) / "libfault.so.1"
    subprocess.run([shutil.which("cc") or "cc", "-shared", "-fPIC", "-O1", "-g", "-o",
                    str(lib), str(ROOT / "tests" / "native" / "libfault.c"), "-ldl",
                    "-lpthread"], check=True)
    f = Path(tmp) / "stacks.toml"
    text = stacks_toml(lib, first_bad, p)
    f.write_text(text)
    print(f"stacks file:\n{text}".replace(tmp, "$TMP"))
    return f, text


def compare_then_bisect(plan: list[str], command: list[str], pairs: int, out: Path,
                        first_bad: str, tmp: str) -> None:
    """A compare of the two ends (`pairs` a stack; 0: none), then the bisect in a folder beside
    it, then the same bisect again (it must run no trial)."""
    if pairs:
        run(["compare", "iree-3.11", "iree-3.13", *plan, "--trials", str(pairs), "--seed",
             "101", "--results", str(Path(tmp) / "compare"), *command],
            "compare of the two ends", tmp)
    argv = ["bisect", "--good", "iree-3.11", "--bad", "iree-3.13", *plan, "--seed", "1",
            "--results", str(out), *command]
    for attempt in ("bisect", "the same bisect again (resume)"):
        run(argv, attempt, tmp)
        summary = json.loads((out / "bisect.json").read_text())
        print(f"named the right stack: {'yes' if summary['first_bad'] == first_bad else 'NO'}; "
              f"{summary['trials']} trials, {summary['ran']} run by this command\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first-bad", default="iree-3.12")
    ap.add_argument("--p", type=float, default=0.02, help="segv probability per thread join")
    ap.add_argument("--invocations", type=int, default=30, help="per trial")
    ap.add_argument("--compare-pairs", type=int, default=4, help="compare's trials per end "
                    "before the bisect (0: none)")
    args = ap.parse_args()
    header()
    with tempfile.TemporaryDirectory(prefix="bisect-pypi-") as tmp:
        f, _ = fault_stacks(tmp, args.first_bad, args.p)
        plan = ["--stacks", str(f), "-t", "cpu", "-w", "1", "--threads", "1", "-P", "per-call",
                "-p", "unary.exp.f32*", "-n", str(args.invocations)]
        compare_then_bisect(plan, [], args.compare_pairs, Path(tmp) / "bisect", args.first_bad,
                            tmp)
        print("per-trial manifests (stack.json) of the compare's and the bisect's trials: the "
              "runtime each stack's workers reported")
        seen: dict[str, set[str]] = {}
        for m in sorted(Path(tmp).glob("*/*/trial-*/stack.json")):
            d = json.loads(m.read_text())
            seen.setdefault(m.parent.parent.name, set()).add(
                f"{d['iree_runtime']} from {d['iree_runtime_path']}".replace(tmp, "$TMP"))
        for stack, runtimes in sorted(seen.items()):
            print(f"  {stack}: {'; '.join(sorted(runtimes))}")


if __name__ == "__main__":
    main()
