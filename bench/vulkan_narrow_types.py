"""Who is wrong when a Vulkan soak miscompares (issue 37): every corpus program, compiled for
IREE's default Vulkan target and for one that declares 8- and 16-bit storage, run once on the
Vulkan device here (Mesa's lavapipe in CI) and checked against the numpy reference with the
soak's own tolerance; then IREE's own tools on the smallest case (`iree-run-module` on a negate
of a constant), and the arithmetic op of each negate's SPIR-V as IREE dumped it.

    python bench/vulkan_narrow_types.py [--targets vulkan,vulkan:valhall] [--seeds 2]
                                        [--out FILE]

A program wrong for one target and right for the other, on the same device and inputs, was
miscompiled for the first: the device ran what it was given.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, emit, header  # noqa: E402

SKIP: tuple[str, ...] = ("2048x4096",)  # 8M elements: minutes each on lavapipe, same ops
NEGATES: tuple[str, ...] = ("unary.neg.i8.64x64", "unary.neg.f16.64x64", "unary.neg.f32.64x64")


def export(target: str, folder: Path) -> dict[str, tuple[object, Path]]:
    from stress.programs import cache

    subprocess.run([sys.executable, "-m", "stress", "compile", "--target", target, "--export",
                    str(folder), "-q"], check=True, cwd=ROOT)
    return cache.load_export(folder)[1]  # type: ignore[return-value]


def sweep(arts: dict[str, tuple[object, Path]], seeds: int, tmp: Path) -> dict[str, str]:
    """program -> "bad/total" elements outside the soak's tolerance over `seeds` inputs."""
    from iree.runtime import _binding as b

    from stress.engine import mismatch
    from stress.engine.invocation import LoadedProgram
    from stress.engine.journal import JournalWriter
    from stress.programs import dtypes, reference
    from stress.programs.program import Program, make_inputs

    device = b.create_hal_driver("vulkan").create_device_by_uri("vulkan")
    instance = b.VmInstance()
    writer = JournalWriter(tmp / f"journal-{len(arts)}.bin", slots=1).acquire()
    out = {}
    for name, (prog, vmfb) in sorted(arts.items()):
        assert isinstance(prog, Program)
        if any(s in name for s in SKIP):
            continue
        lp = LoadedProgram(instance, device, b.VmModule.copy_buffer(instance, vmfb.read_bytes()),
                           prog)
        bad = total = 0
        dt = dtypes.get(prog.dtype)
        for seed in range(seeds):
            inputs = make_inputs(prog, seed)
            actual = lp.call(inputs, writer, 0)[0]
            expected = reference.evaluate(prog.op, prog.dtype, inputs)
            bad += int(mismatch.differing(prog.dtype, actual, expected, dt.rtol, dt.atol).sum())
            total += actual.size
        lp.close()
        out[name] = f"{bad}/{total}"
    return out


def iree_tools(tmp: Path, target_flags: list[str], label: str) -> list[str]:
    """iree-run-module on each negate of a constant 3, and the SPIR-V op IREE emitted."""
    from stress.programs import corpus

    bindir = Path(sys.executable).parent
    lines = []
    for name in NEGATES:
        src = tmp / f"{name}.mlir"
        src.write_text(corpus.by_name()[name].mlir)
        dump = tmp / f"dump-{label}-{name}"
        vmfb = tmp / f"{label}-{name}.vmfb"
        subprocess.run([str(bindir / "iree-compile"), "--iree-hal-target-device=vulkan",
                        *target_flags, str(src), "-o", str(vmfb),
                        f"--iree-hal-dump-executable-intermediates-to={dump}"], check=True)
        elt = name.split(".")[2]
        run = subprocess.run([str(bindir / "iree-run-module"), "--device=vulkan",
                              f"--module={vmfb}", "--function=main",
                              f"--input=64x64x{elt}=3"], capture_output=True, text=True)
        result = next((x for x in run.stdout.splitlines() if x.startswith("64x64x")), run.stderr)
        ops = [x.strip() for f in sorted(dump.glob("*.spirv.mlir"))
               for x in f.read_text().splitlines()
               if any(op in x for op in ("spirv.ISub", "spirv.SNegate", "spirv.FNegate"))]
        lines.append(f"# {label} {name}: iree-run-module --input=64x64x{elt}=3 -> "
                     f"{result[:70]} ...")
        lines += [f"#   SPIR-V: {op}" for op in ops]
    # what the target declares: its arch, compute and storage widths (IREE's own attribute)
    text = "".join(f.read_text() for f in sorted(tmp.glob(f"dump-{label}-*/*.spirv.mlir")))
    m = re.search(r'#iree_gpu\.target<arch = "([^"]+)".*?compute = ([^,]+), storage = ([^,]+),',
                  text)
    if m:
        lines.append(f"# {label}: target arch {m.group(1)}, compute {m.group(2)}, storage "
                     f"{m.group(3)}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="vulkan,vulkan:valhall")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    head = header()
    from iree.runtime import _binding as b

    drv = b.create_hal_driver("vulkan")
    name = drv.query_available_devices()[0]["name"]
    targets = args.targets.split(",")
    with tempfile.TemporaryDirectory(prefix="vk-narrow-") as tmp:
        results = {t: sweep(export(t, Path(tmp) / t.replace(":", "-")), args.seeds, Path(tmp))
                   for t in targets}
        tools = []
        for t in targets:
            arch = t.partition(":")[2]
            tools += iree_tools(Path(tmp), [f"--iree-vulkan-target={arch}"] if arch else [],
                                t)
    names = sorted(set().union(*results.values()))
    table = [f"# device: {name}; {args.seeds} input seeds per program; an entry is the "
             "elements outside the soak's tolerance (reference.matches) / elements checked",
             "  ".join(["program".ljust(38), *(t.ljust(16) for t in targets)])]
    table += ["  ".join([n.ljust(38), *(results[t].get(n, "-").ljust(16) for t in targets)])
              for n in names]
    from stress.programs import dtypes

    for t in targets:
        by: dict[str, list[int]] = {}
        for n, v in results[t].items():
            bad, _ = (int(x) for x in v.split("/"))
            by.setdefault(dtypes.in_name(n), [0, 0])[bool(bad)] += 1
        table.append(f"# {t}: " + ", ".join(f"{d} {w} of {r + w} programs wrong"
                                             for d, (r, w) in sorted(by.items())))
    out = [head, *table, *tools]
    return emit(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
