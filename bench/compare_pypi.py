"""iree-base-runtime 3.12.0 against 3.13.0, both venvs built from the package index (cached
in the user cache dir after the first run): the verdict and each trial's manifest.

    python bench/compare_pypi.py [--trials 5] [--invocations 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ROOT, header  # noqa: E402

STACKS: str = """[stacks."iree-3.12"]
requirements = ["iree-base-runtime==3.12.0", "numpy"]

[stacks."iree-3.13"]
requirements = ["iree-base-runtime==3.13.0", "numpy"]
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5, help="most pairs")
    ap.add_argument("--invocations", type=int, default=30, help="per trial")
    args = ap.parse_args()
    header()
    with tempfile.TemporaryDirectory(prefix="compare-pypi-") as tmp:
        f = Path(tmp) / "stacks.toml"
        f.write_text(STACKS)
        out = Path(tmp) / "out"
        argv = ["compare", "iree-3.12", "iree-3.13", "--stacks", str(f), "-t", "cpu", "-w",
                "2", "--threads", "2", "-n", str(args.invocations), "--trials",
                str(args.trials), "--seed", "11", "--results", str(out)]
        print(f"$ iree-stress {' '.join(argv)}\n{STACKS}")
        proc = subprocess.run([sys.executable, "-m", "stress", *argv], capture_output=True,
                              text=True, cwd=ROOT)
        print(proc.stderr.replace(tmp, "$TMP"), proc.stdout.replace(tmp, "$TMP"),
              f"exit {proc.returncode}", sep="\n")
        print("\nper-trial manifests (stack.json):")
        for m in sorted(out.glob("*/trial-*/stack.json")):
            d = json.loads(m.read_text())
            print(f"  {m.parent.parent.name}/{m.parent.name}: runtime {d['iree_runtime']} from "
                  f"{d['iree_runtime_path']}; python {d['python']}; freeze "
                  f"{', '.join(x for x in d['freeze'] if x.startswith('iree'))}")


if __name__ == "__main__":
    main()
