"""Cold corpus compile with -j 2 vs -j 1 (issue #2: -j 2 measurably faster)."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import header


def cold(jobs: int, target: str, globs: list[str]) -> float:
    from stress.programs import corpus, targets
    from stress.programs.cache import ArtifactCache

    progs = corpus.select(globs)
    with tempfile.TemporaryDirectory() as tmp:
        cache = ArtifactCache(Path(tmp))
        t0 = time.perf_counter()
        report = cache.compile_all(progs, targets.parse(target), jobs=jobs)
        elapsed = time.perf_counter() - t0
        assert not report.errors and report.compiled == len(progs)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--programs", default="unary.*", help="comma list of globs")
    args = ap.parse_args()
    globs = args.programs.split(",")
    from stress.programs import corpus

    header()
    n = len(corpus.select(globs))
    j1 = cold(1, args.target, globs)
    j2 = cold(2, args.target, globs)
    print(f"{args.target} cold compile of '{args.programs}' ({n} programs): -j 1 {j1:.1f} s, "
          f"-j 2 {j2:.1f} s, speed-up {j1 / j2:.2f}x")


if __name__ == "__main__":
    main()
