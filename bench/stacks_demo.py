"""`iree-stress stacks`, identical stacks, what changed and `history` on a simulated index of
TheRock nightlies (tests/helpers/nightly_index.py: tarballs holding a stand-in
lib/libamdhip64.so.7 and a TheRock manifest, served over HTTP on 127.0.0.1 as an S3 ListBucket
XML listing and an HTML page of links; a +bkc build; the 7.11 -> 10.0 prefix jump; two
consecutive nightlies byte-identical in their libraries; rocm-systems moved at nightly K).

What is real here: the listing, the downloads, the stacks file, the fingerprints, the
bisection's posterior and trial choices, the what-changed block and the history posterior.
What is NOT: the trials. No soak runs; a STAND-IN trial fails with probability --p from
nightly K on and never before (seeded), and the history's gate runs are summary.json files in
the format `gate` writes, drawn the same way. The end-to-end run with real trials (a user's
command under each tarball) is tests/system's bisect --engine exec test.

    python bench/stacks_demo.py [--p 0.45] [--seed 3] [--gate-runs 16]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, header  # noqa: E402

from tests.helpers.nightly_index import Nightly, serve, stand_in_trials, write_index  # noqa: E402

BUILDS = ["7.11.0a20251124", "7.11.0a20251125", "7.11.0a20251125+bkc.20251128",
          "7.11.0a20251126", "7.11.0a20251127", "7.11.0a20251128", "10.0.0a20251201",
          "10.0.0a20251202", "10.0.0a20251203"]
NIGHTLIES = [b for b in BUILDS if "bkc" not in b]
FIRST_BAD = "10.0.0a20251201"
SAME = ("7.11.0a20251127", "7.11.0a20251128")  # byte-identical libraries and pins


def nightlies() -> list[Nightly]:
    out = []
    for v in BUILDS:
        base = SAME[0] if v in SAME else v.split("+")[0]
        bad = NIGHTLIES.index(v.split("+")[0]) >= NIGHTLIES.index(FIRST_BAD)
        pins = {"TheRock": hashlib.sha1(f"rock {base}".encode()).hexdigest(),
                "rocm-systems": hashlib.sha1(f"systems {bad}".encode()).hexdigest(),
                "rocm-libraries": hashlib.sha1(b"libraries").hexdigest()}
        out.append(Nightly(v, library=f"stand-in HIP built from {base}".encode(), pins=pins,
                           files={"lib/libhsa-runtime64.so.1": b"stand-in HSA, never changed"}))
    return out


def cli(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "stress", *args], capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    return f"$ iree-stress {' '.join(args)}\n{out.stdout}{out.stderr}[exit {out.returncode}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--p", type=float, default=0.45)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--gate-runs", type=int, default=16)
    args = ap.parse_args()
    header()
    with tempfile.TemporaryDirectory(prefix="stacks-demo-") as tmp:
        t = Path(tmp)
        write_index(t / "index", nightlies())
        cache = ["--cache-dir", str(t / "cache")]
        with serve(t / "index") as base:
            print(f"\n## the index: {base}/bucket/ (S3 XML, 3 keys a page) and "
                  f"{base}/index.html (links), listed by name\n")
            print(cli("stacks", "--index", f"{base}/bucket/", "--from", BUILDS[0], "--to",
                      BUILDS[-1], "-o", str(t / "stacks.toml"), "-q", *cache)
                  .replace(str(t), "$TMP").replace(base, "$INDEX"))
            print(cli("stacks", "--index", f"{base}/index.html", "--from", BUILDS[0], "--to",
                      BUILDS[-1], "--include-bkc", "-o", str(t / "bkc.toml"), "-q", *cache)
                  .replace(str(t), "$TMP").replace(base, "$INDEX"))
        text = (t / "stacks.toml").read_text().replace(str(t), "$TMP")
        print("\n## stacks.toml (first two stacks)\n")
        print("\n".join(text.split("\n\n")[:3]))
        print("\n## bisect with STAND-IN trials (no soak; fail with p = "
              f"{args.p} from {FIRST_BAD} on)\n")
        from click.testing import CliRunner

        import stress.verdicts.compare as compare_mod
        from stress.cli import cli as group

        stand_in = stand_in_trials(NIGHTLIES, FIRST_BAD, args.p)
        compare_mod.SoakTrials = stand_in  # type: ignore[misc]
        cmd = ["bisect", "--stacks", str(t / "stacks.toml"), "--good", NIGHTLIES[0], "--bad",
               NIGHTLIES[-1], "-t", "cpu", "--seed", str(args.seed), "--results",
               str(t / "bisect"), *cache]
        res = CliRunner().invoke(group, cmd)
        print(f"$ iree-stress {' '.join(cmd)}".replace(str(t), "$TMP"))
        lines = res.output.replace(str(t), "$TMP").splitlines()
        print("\n".join(x for x in lines if not x.startswith("trial ")))
        print(f"[exit {res.exit_code}; {len(stand_in.runs)} stand-in trials; "
              f"{sum(x.startswith('trial ') for x in lines)} trial lines left out above]")
        print(f"\n## history over {args.gate_runs} simulated gate runs a nightly "
              f"(summary.json as gate writes it; a run fails with p = {args.p} from "
              f"{FIRST_BAD} on)\n")
        rng = random.Random(args.seed)
        for v in NIGHTLIES:
            bad = NIGHTLIES.index(v) >= NIGHTLIES.index(FIRST_BAD)
            for k in range(args.gate_runs):
                failed = bad and rng.random() < args.p
                run = t / "gates" / v / f"shard-{k}"
                run.mkdir(parents=True)
                (run / "summary.json").write_text(json.dumps({
                    "status": "completed", "jobs": 40, "failed": 2 if failed else 0,
                    "failures": {"crash": 2} if failed else {}, "harness_errors": 0,
                    "manifest": {"iree_runtime": "3.10.0"}}))
        print(cli("history", str(t / "gates")).replace(str(t), "$TMP"))


if __name__ == "__main__":
    main()
