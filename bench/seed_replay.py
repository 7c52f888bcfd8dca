"""The seed replayed as commands (issue 38), on cpu with a real fault: from "CI is flaky" to
"nightly X broke it, these component commits". An index of simulated TheRock nightlies is
served over HTTP on 127.0.0.1 (tests/helpers/nightly_index.py); each tarball's libamdhip64 is
built from tests/native/nightlyhip.c and from 10.0.0a20251201 on segfaults at the exit of 40%
of the processes that used it; a fusilli-shaped test program (tests/native/fusilli_like.c)
loads whichever libamdhip64 its environment gives it (tests/helpers/nightly_build.py).

What is real: the listing, the downloads, the stacks file, every trial (the program runs under
each nightly's tree, and crashes at exit when that library makes it), the posterior and what
changed. What is simulated: the nightlies (their library is a stand-in; the component commits
in their manifests are hashes made up for the demo).

    python bench/seed_replay.py [--jobs 2] [--soak-jobs 20]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import header  # noqa: E402

from tests.helpers.nightly_build import NIGHTLIES, program, simulated_nightlies  # noqa: E402
from tests.helpers.nightly_index import serve, write_index  # noqa: E402

TRIAL_LINE = ("trial ", "  ")  # bisect's and compare's per-trial progress lines


def cli(args: list[str], subs: dict[str, str], cwd: Path, quiet_trials: bool = True) -> int:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "stress", *args], capture_output=True,
                         text=True, cwd=cwd, timeout=1800)

    def clean(text: str) -> str:
        for old, new in subs.items():
            text = text.replace(old, new)
        return text

    print(clean(f"$ iree-stress {' '.join(args)}"))
    err = clean(out.stderr).splitlines()
    kept = [x for x in err if not (quiet_trials and x.startswith(TRIAL_LINE)
                                   and not x.startswith("  + "))]  # (trials counted from disk)
    print("\n".join(kept))
    print(clean(out.stdout))
    left = len(err) - len(kept)
    note = f"; {left} per-trial progress lines left out" if left else ""
    print(f"[exit {out.returncode}, {time.monotonic() - t0:.0f} s{note}]\n", flush=True)
    return out.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2, help="runs of the program a trial")
    ap.add_argument("--soak-jobs", type=int, default=20, help="runs of the first soak")
    args = ap.parse_args()
    header()
    with tempfile.TemporaryDirectory(prefix="seed-replay-") as tmp:
        t = Path(tmp)
        nightlies = simulated_nightlies(t / "work")
        exe = program(t / "work", nightlies[0].library)
        write_index(t / "index", nightlies)
        ci = t / "ci-rocm"  # the nightly the CI machine has (what /opt/rocm holds there)
        (t / "ci.tar.gz").write_bytes((t / "index" / "bucket" / nightlies[-1].filename)
                                      .read_bytes())
        with tarfile.open(t / "ci.tar.gz") as tf:
            tf.extractall(ci, filter="data")
        cache = ["--cache-dir", str(t / "cache")]
        ex = ["--engine", "exec", "--workers", "1", "--done-regex", "^All tests passed$"]
        with serve(t / "index") as base:
            subs = {str(t): "$TMP", base: "$INDEX"}
            print("\n## 1. CI is flaky: soak the team's own test where CI runs it "
                  f"(TheRock {NIGHTLIES[-1]} in $TMP/ci-rocm)\n")
            cli(["soak", *ex, "-n", str(args.soak_jobs), "--seed", "1", "--env",
                 f"LD_LIBRARY_PATH={ci / 'lib'}", "--results", str(t / "ci-soak"), "-q",
                 "--", str(exe)], subs, t)
            print("## 2. the nightlies between the last good one and today's, by build date\n")
            cli(["stacks", "--index", f"{base}/bucket/", "--from", NIGHTLIES[0], "--to",
                 NIGHTLIES[-1], "-o", str(t / "nightlies.toml"), "-q", *cache], subs, t)
            print("## 3. is today's nightly worse than the last good one? (its trials count "
                  "in step 4)\n")
            stacks = ["--stacks", str(t / "nightlies.toml")]
            cli(["compare", NIGHTLIES[0], NIGHTLIES[-1], *stacks, *ex, "-n", str(args.jobs),
                 "--trials", "10", "--seed", "100", "--results", str(t / "runs" / "compare"),
                 *cache, "--", str(exe)], subs, t)
            print("## 4. which nightly broke it, and what changed\n")
            cli(["bisect", *stacks, "--good", NIGHTLIES[0], "--bad", NIGHTLIES[-1], *ex, "-n",
                 str(args.jobs), "--seed", "1", "--results", str(t / "runs" / "bisect"),
                 *cache, "--", str(exe)], subs, t)


if __name__ == "__main__":
    main()
