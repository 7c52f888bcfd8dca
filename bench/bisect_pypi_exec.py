"""`bisect --engine exec` over real runtime stacks from the package index (issue 38): the
user's own test command, not our corpus, under iree-base-runtime 3.11.0 -> 3.12.0 -> 3.13.0,
each stack its own venv (with its own iree-base-compiler: the test compiles what it runs).
The test (written below into $TMP/user_test.py) is what a project's test does: compile a small
program with the stack's compiler, create a local-task device, run, check, print `done`, exit.
From FIRST_BAD on, the stack's env preloads tests/native/libfault.c (IREE_FAULT_JOIN=segv with
probability P per thread join), so the test's own exit (the runtime's thread joins) segfaults
now and then: a crash after `done`, the shape of the fusilli incident. First a `compare` of the
two ends, then `bisect` in a folder beside it (it counts the compare's trials: same plan,
another seed), then the same bisect again (it must run no trial). Each job appends the runtime
it imported to a file: which runtime ran under which stack.

    python bench/bisect_pypi_exec.py [--first-bad iree-3.12] [--p 0.2] [--jobs 2]
                                     [--compare-pairs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ROOT, header  # noqa: E402
from bisect_pypi import run, stacks_toml  # noqa: E402

USER_TEST = '''"""A user's test: compile (once per interpreter: a cache, as fusilli keeps one), run
on local-task, check, say done, exit."""
import hashlib
import os
import sys
from importlib import metadata

import numpy as np
import iree.runtime as rt

MLIR = """func.func @main(%a: tensor<16xf32>) -> tensor<16xf32> {
  %0 = math.exp %a : tensor<16xf32>
  return %0 : tensor<16xf32>
}"""
cached = os.path.join(os.path.dirname(os.environ["SEEN_FILE"]),
                      hashlib.sha256(sys.prefix.encode()).hexdigest()[:12] + ".vmfb")
if not os.path.exists(cached):
    import iree.compiler as ic
    data = ic.compile_str(MLIR, target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=generic"])
    with open(cached + ".tmp", "wb") as f:
        f.write(data)
    os.replace(cached + ".tmp", cached)
with open(cached, "rb") as f:
    vmfb = f.read()
ctx = rt.SystemContext(config=rt.Config("local-task"))
ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
x = np.linspace(-1, 1, 16, dtype=np.float32)
got = ctx.modules.module.main(x).to_host()
assert np.allclose(got, np.exp(x), rtol=1e-5), got
seen = [sys.prefix, os.path.dirname(rt.__file__), metadata.version("iree-base-runtime")]
with open(os.environ["SEEN_FILE"], "a") as f:
    f.write(" ".join(seen) + "\\n")
print("done", flush=True)
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first-bad", default="iree-3.12")
    ap.add_argument("--p", type=float, default=0.2, help="segv probability per thread join")
    ap.add_argument("--jobs", type=int, default=2, help="runs of the test per trial")
    ap.add_argument("--compare-pairs", type=int, default=3, help="compare's trials per end "
                    "before the bisect (0: none)")
    args = ap.parse_args()
    header()
    with tempfile.TemporaryDirectory(prefix="bisect-pypi-exec-") as tmp:
        lib = Path(tmp) / "libfault.so.1"
        subprocess.run([shutil.which("cc") or "cc", "-shared", "-fPIC", "-O1", "-g", "-o",
                        str(lib), str(ROOT / "tests" / "native" / "libfault.c"), "-ldl",
                        "-lpthread"], check=True)
        f = Path(tmp) / "stacks.toml"
        text = stacks_toml(lib, args.first_bad, args.p)
        f.write_text(text)
        test = Path(tmp) / "user_test.py"
        test.write_text(USER_TEST)
        seen = Path(tmp) / "seen.txt"
        out = Path(tmp) / "bisect"
        plan = ["--stacks", str(f), "--engine", "exec", "-n", str(args.jobs), "--workers", "1",
                "--done-regex", "^done$", "--timeout", "120s", "--teardown-timeout", "30s",
                "--env", f"SEEN_FILE={seen}"]
        command = ["--", "python", str(test)]
        print(f"stacks file:\n{text}".replace(tmp, "$TMP"))
        print(f"the user's test ($TMP/user_test.py):\n{USER_TEST}")
        if args.compare_pairs:
            run(["compare", "iree-3.11", "iree-3.13", *plan, "--trials",
                 str(args.compare_pairs), "--seed", "101", "--results",
                 str(Path(tmp) / "compare"), *command], "compare of the two ends", tmp)
        argv = ["bisect", "--good", "iree-3.11", "--bad", "iree-3.13", *plan, "--seed", "1",
                "--results", str(out), *command]
        for attempt in ("bisect", "the same bisect again (resume)"):
            run(argv, attempt, tmp)
            summary = json.loads((out / "bisect.json").read_text())
            print(f"named the right stack: "
                  f"{'yes' if summary['first_bad'] == args.first_bad else 'NO'}; "
                  f"{summary['trials']} trials, {summary['ran']} run by this command\n")
        print("the runtime each job of the test imported (sys.prefix, iree.runtime, version), "
              "and how many jobs:")
        lines = seen.read_text().splitlines() if seen.exists() else []
        for line in sorted(set(lines)):
            print(f"  {lines.count(line):>4}  {line}".replace(tmp, "$TMP"))


if __name__ == "__main__":
    main()
