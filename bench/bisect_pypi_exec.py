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
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import header  # noqa: E402
from bisect_pypi import compare_then_bisect, fault_stacks  # noqa: E402

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
        f, _ = fault_stacks(tmp, args.first_bad, args.p)
        test = Path(tmp) / "user_test.py"
        test.write_text(USER_TEST)
        seen = Path(tmp) / "seen.txt"
        plan = ["--stacks", str(f), "--engine", "exec", "-n", str(args.jobs), "--workers", "1",
                "--done-regex", "^done$", "--timeout", "120s", "--teardown-timeout", "30s",
                "--env", f"SEEN_FILE={seen}"]
        print(f"the user's test ($TMP/user_test.py):\n{USER_TEST}")
        compare_then_bisect(plan, ["--", "python", str(test)], args.compare_pairs,
                            Path(tmp) / "bisect", args.first_bad, tmp)
        print("the runtime each job of the test imported (sys.prefix, iree.runtime, version), "
              "and how many jobs:")
        lines = seen.read_text().splitlines() if seen.exists() else []
        for line in sorted(set(lines)):
            print(f"  {lines.count(line):>4}  {line}".replace(tmp, "$TMP"))


if __name__ == "__main__":
    main()
