"""compare between two TheRock-like tarball stacks holding the stand-in libamdhip64 (issue 37):
`rocm-clean` holds a clean build, `rocm-teardown-fault` one with a teardown fault compiled in
(release-spin: hipStreamSynchronize spins when a device releases its streams, p = 0.3 per
stream release); IREE's real hip driver
loads each through the stack's IREE_HIP_DYLIB_PATH binding. Expected: `B worse`, every trial's
stack.json naming the library the driver loaded (its path, sha256, and the HIP libraries the
worker had mapped). Then a stack that binds the clean library while another copy is loaded
(LD_PRELOAD) must be refused: its trials are no results (inconclusive, exit 3).

A fault in the library's own cleanup (cleanup-segv) fires in every worker's first driver
release, the facts step, before the worker says hello: a trial whose workers all die there has
no runtime reported, and is still a failure of its stack (`trial_problem`: a failure recorded
is a result). A release fault leaves the facts step alone.

    python bench/hip_tarball_compare.py [--duration 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import ROOT, header  # noqa: E402

from tests.helpers import fakehip  # noqa: E402

_SOAK: tuple[str, ...] = ("--target", "rocm", "--programs", "transfer.slice.*", "--patterns",
                          "per-call,process-per-job", "--workers", "2", "--teardown-timeout",
                          "2s")


def compare(a: str, b: str, stacks: Path, results: Path, duration: float) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-m", "stress", "compare", a, b, "--stacks",
                          str(stacks), *_SOAK, "--duration", f"{duration:g}s", "--results",
                          str(results)], capture_output=True, text=True, cwd=ROOT,
                         timeout=3600)
    return out.returncode, out.stdout + out.stderr


def trials(results: Path) -> list[str]:
    """One line per trial: stack, library path, sha256 (12), the HIP libraries mapped."""
    lines = []
    for p in sorted(results.glob("**/stack.json")):
        d = json.loads(p.read_text())
        lines.append(f"  {p.parent.name} {d.get('stack')}: binds {d.get('hip_library')}, "
                     f"loaded {d.get('hip_library_loaded')} sha256 "
                     f"{(d.get('hip_library_sha256') or '?')[:12]}"
                     f" mapped {', '.join(d.get('hip_library_mapped') or []) or 'none'}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    out = [header()]
    with tempfile.TemporaryDirectory(prefix="hip-tarballs-") as tmp:
        t = Path(tmp)
        clean = fakehip.build(t / "clean")
        bad = fakehip.build(t / "bad", fault="release-spin", prob=0.3)
        other = fakehip.build(t / "other")  # the same bytes, another path
        stacks = t / "stacks.toml"
        stacks.write_text(
            f'[stacks.rocm-clean]\nrocm = "{fakehip.rocm_tarball(clean, t / "clean.tar.gz")}"\n\n'
            f'[stacks.rocm-teardown-fault]\n'
            f'rocm = "{fakehip.rocm_tarball(bad, t / "bad.tar.gz")}"\n\n'
            f'[stacks.rocm-clean-other-loaded]\nrocm = "{t / "clean.tar.gz"}"\n'
            f'env = {{ LD_PRELOAD = "{other}" }}\n')
        for a, b, want in (("rocm-clean", "rocm-teardown-fault", "B worse (exit 1)"),
                           ("rocm-clean", "rocm-clean-other-loaded",
                            "refused: inconclusive (exit 3)")):
            rc, text = compare(a, b, stacks, t / f"{a}-vs-{b}", args.duration)
            verdict = [ln for ln in text.splitlines()
                       if ln.startswith(("VERDICT", "  A ", "  B ", "  sequential", "driver"))
                       or "inconclusive" in ln.lower() or "loaded" in ln]
            out += [f"## compare {a} {b}: expected {want}; exit {rc}", *verdict[:14],
                    "trials (stack.json):", *trials(t / f"{a}-vs-{b}")[:16]]
            print("\n".join(out[-(len(verdict[:14]) + 2):]), flush=True)
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
