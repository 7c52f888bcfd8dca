"""The built-in corpus: pointwise programs rendered from stress/programs/mlir/elementwise.mlir.in,
and a few transfer-only ones (mlir/transfer.mlir.in: copies and fills, no dispatch).

Names are stable and greppable: KIND.OP.DTYPE.SHAPE, e.g. binary.add.f16.2x16x64x64+1x16x1x1.
"""

from __future__ import annotations

import fnmatch
import functools
from pathlib import Path
from string import Template

from stress.errors import UsageError
from stress.programs import dtypes, reference
from stress.programs.program import Arg, Program

# Package data (pyproject.toml), so an installed iree-stress finds it wherever it runs from.
MLIR_DIR: Path = Path(__file__).resolve().parent / "mlir"
EXAMPLES_DIR: Path = MLIR_DIR / "examples"  # user-program examples (--program FILE)
_TEMPLATE_NAME = "elementwise.mlir.in"
_TRANSFER_TEMPLATE = "transfer.mlir.in"
TRANSFER = "transfer"  # the kind (and tag) of the programs that compile to no dispatch

FLOATS = ("f32", "f16", "bf16")
INTS = ("i32", "i8")

UNARY_FLOAT = ("abs", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "floor",
               "ceil", "sin", "erf", "reciprocal")
UNARY_INT = ("abs", "neg", "relu")
BINARY_FLOAT = ("add", "sub", "mul", "div", "max", "min", "pow", "select")
BINARY_INT = ("add", "sub", "mul", "max", "min", "select")

# fusilli's bias-add shape: a 4-D activation broadcast against a per-channel tensor.
FUSILLI_BROADCAST = ((2, 16, 64, 64), (1, 16, 1, 1))
UNARY_SHAPE = (64, 64)
LARGE_SHAPE = (2048, 4096)  # 8,388,608 elements

# Inputs per op: positive domains where the op needs them, no values near zero for division.
_POSITIVE = {"log", "sqrt", "rsqrt", "pow", "abs_sqrt_log"}
_NONZERO = {"div", "reciprocal"}


def _body(op: str, elt: str, is_float: bool) -> list[str]:
    """Scalar MLIR for one op on %a (and %b), leaving the value in %r."""
    c = dtypes.get(elt).mlir_const
    if is_float:
        simple_unary = {"abs": "math.absf", "neg": "arith.negf", "exp": "math.exp",
                        "log": "math.log", "sqrt": "math.sqrt", "rsqrt": "math.rsqrt",
                        "tanh": "math.tanh", "floor": "math.floor", "ceil": "math.ceil",
                        "sin": "math.sin", "erf": "math.erf"}
        simple_binary = {"add": "arith.addf", "sub": "arith.subf", "mul": "arith.mulf",
                         "div": "arith.divf", "max": "arith.maximumf", "min": "arith.minimumf",
                         "pow": "math.powf"}
        if op in simple_unary:
            return [f"%r = {simple_unary[op]} %a : {elt}"]
        if op in simple_binary:
            return [f"%r = {simple_binary[op]} %a, %b : {elt}"]
        one = f"%one = arith.constant {c(1)} : {elt}"
        zero = f"%zero = arith.constant {c(0)} : {elt}"
        sigmoid = [f"%n = arith.negf %a : {elt}", f"%e = math.exp %n : {elt}", one,
                   f"%d = arith.addf %one, %e : {elt}"]
        bodies = {
            "sigmoid": sigmoid + [f"%r = arith.divf %one, %d : {elt}"],
            "relu": [zero, f"%r = arith.maximumf %a, %zero : {elt}"],
            "reciprocal": [one, f"%r = arith.divf %one, %a : {elt}"],
            "select": [f"%c = arith.cmpf ogt, %a, %b : {elt}", f"%nb = arith.negf %b : {elt}",
                       f"%r = arith.select %c, %a, %nb : {elt}"],
            "bias_relu_scale": [zero, f"%half = arith.constant {c(0.5)} : {elt}",
                                f"%s = arith.addf %a, %b : {elt}",
                                f"%m = arith.maximumf %s, %zero : {elt}",
                                f"%r = arith.mulf %m, %half : {elt}"],
            "silu": sigmoid + [f"%s = arith.divf %one, %d : {elt}",
                               f"%r = arith.mulf %a, %s : {elt}"],
            "exp_mul_add": [f"%e = math.exp %a : {elt}", f"%m = arith.mulf %e, %b : {elt}",
                            f"%r = arith.addf %m, %a : {elt}"],
            "abs_sqrt_log": [one, f"%x = math.absf %a : {elt}", f"%q = math.sqrt %x : {elt}",
                             f"%p = arith.addf %q, %one : {elt}", f"%r = math.log %p : {elt}"],
            "tanh_mul_sub": [f"%t = math.tanh %a : {elt}", f"%m = arith.mulf %t, %b : {elt}",
                             f"%r = arith.subf %m, %a : {elt}"],
        }
        return bodies[op]
    zero = f"%zero = arith.constant 0 : {elt}"
    int_bodies = {
        "abs": [f"%r = math.absi %a : {elt}"],
        "neg": [zero, f"%r = arith.subi %zero, %a : {elt}"],
        "relu": [zero, f"%r = arith.maxsi %a, %zero : {elt}"],
        "add": [f"%r = arith.addi %a, %b : {elt}"],
        "sub": [f"%r = arith.subi %a, %b : {elt}"],
        "mul": [f"%r = arith.muli %a, %b : {elt}"],
        "max": [f"%r = arith.maxsi %a, %b : {elt}"],
        "min": [f"%r = arith.minsi %a, %b : {elt}"],
        "select": [zero, f"%c = arith.cmpi sgt, %a, %b : {elt}",
                   f"%nb = arith.subi %zero, %b : {elt}", f"%r = arith.select %c, %a, %nb : {elt}"],
    }
    return int_bodies[op]


@functools.cache
def _template() -> Template:
    return Template((MLIR_DIR / _TEMPLATE_NAME).read_text())


def render(name: str, op: str, dtype: str, shapes: tuple[tuple[int | None, ...], ...]) -> str:
    """MLIR text of one elementwise program (inputs may broadcast size-1 dims onto the output)."""
    out_shape = tuple(max(dims, key=lambda d: -1 if d is None else d) if None not in dims else None
                      for dims in zip(*shapes, strict=True))
    out_arg = Arg(out_shape, dtype)
    rank = len(out_shape)
    dvars = ", ".join(f"d{i}" for i in range(rank))
    maps = []
    for shape in (*shapes, out_shape):
        exprs = ", ".join(f"d{i}" if shape[i] == out_shape[i] else "0" for i in range(rank))
        maps.append(f"affine_map<({dvars}) -> ({exprs})>")
    names = ["%a", "%b", "%c2"][: len(shapes)]
    in_types = [Arg(s, dtype).mlir_type() for s in shapes]
    dim_ops, dyn = [], []
    for i, d in enumerate(out_shape):
        if d is None:
            dim_ops.append(f"  %c{i}i = arith.constant {i} : index\n"
                           f"  %dim{i} = tensor.dim %in0, %c{i}i : {in_types[0]}\n")
            dyn.append(f"%dim{i}")
    return _template().substitute(
        name=name,
        args=", ".join(f"%in{i}: {t}" for i, t in enumerate(in_types)),
        result_type=out_arg.mlir_type(),
        dim_ops="".join(dim_ops),
        dyn_dims=", ".join(dyn),
        maps=", ".join(maps),
        iters=", ".join(['"parallel"'] * rank),
        ins=", ".join(f"%in{i}" for i in range(len(shapes))),
        in_types=", ".join(in_types),
        bb_args=", ".join(f"{n}: {dtype}" for n in names),
        elt=dtype,
        body="\n".join(f"    {line}" for line in _body(op, dtype, dtypes.get(dtype).is_float)),
    )


def _make(kind: str, op: str, dtype: str, shapes: tuple[tuple[int | None, ...], ...],
          tags: tuple[str, ...] = ()) -> Program:
    def text(s: tuple[int | None, ...]) -> str:
        return "x".join("N" if d is None else str(d) for d in s) if s else "scalar"

    name = f"{kind}.{op}.{dtype}.{'+'.join(text(s) for s in shapes)}"
    out_shape = tuple(None if None in dims else max(d for d in dims if d is not None)
                      for dims in zip(*shapes, strict=True))
    domain = (0.1, 4.0) if op in _POSITIVE else (-4.0, 4.0)
    if op == "pow":
        domain = (0.5, 2.0)
    return Program(
        name=name, kind=kind, op=op, dtype=dtype,
        args=tuple(Arg(s, dtype) for s in shapes), results=(Arg(out_shape, dtype),),
        mlir=render(name, op, dtype, shapes), domain=domain, nonzero=op in _NONZERO,
        has_reference=True, tags=tags,
    )


def _transfer(op: str, dtype: str) -> Program:
    """A transfer-only program on 64x64 inputs: `slice` (rows SLICE_ROWS), `concat` (two
    inputs along rows) or `pad` (PAD_ROWS rows of PAD_VALUE above and below)."""
    rows, cols = UNARY_SHAPE
    t_in = Arg(UNARY_SHAPE, dtype).mlir_type()
    lo, hi = reference.SLICE_ROWS
    n_in, out_rows, body = {
        "slice": (1, hi - lo, [f"%r = tensor.extract_slice %in0[{lo}, 0] [{hi - lo}, {cols}] "
                               f"[1, 1] : {t_in} to $out"]),
        "concat": (2, 2 * rows, [f"%r = tensor.concat dim(0) %in0, %in1 : ({t_in}, {t_in}) "
                                 "-> $out"]),
        "pad": (1, rows + 2 * reference.PAD_ROWS, [
            f"%v = arith.constant {dtypes.get(dtype).mlir_const(reference.PAD_VALUE)} : "
            f"{dtype}",
            f"%r = tensor.pad %in0 low[{reference.PAD_ROWS}, 0] high[{reference.PAD_ROWS}, 0] {{",
            f"^bb0(%i: index, %j: index):\n    tensor.yield %v : {dtype}",
            f"}} : {t_in} to $out"]),
    }[op]
    out = Arg((out_rows, cols), dtype)
    shapes = "+".join(["x".join(map(str, UNARY_SHAPE))] * n_in)
    name = f"{TRANSFER}.{op}.{dtype}.{shapes}"
    mlir = Template((MLIR_DIR / _TRANSFER_TEMPLATE).read_text()).substitute(
        name=name, args=", ".join(f"%in{i}: {t_in}" for i in range(n_in)),
        result_type=out.mlir_type(),
        body="\n".join(f"  {line}" for line in body).replace("$out", out.mlir_type()))
    return Program(name=name, kind=TRANSFER, op=op, dtype=dtype,
                   args=tuple(Arg(UNARY_SHAPE, dtype) for _ in range(n_in)), results=(out,),
                   mlir=mlir, has_reference=True, tags=(TRANSFER,))


@functools.cache
def corpus() -> tuple[Program, ...]:
    """Every built-in program, in a stable order."""
    progs: list[Program] = []
    for op in UNARY_FLOAT:
        for dt in FLOATS:
            progs.append(_make("unary", op, dt, (UNARY_SHAPE,)))
    for op in UNARY_INT:
        for dt in INTS:
            progs.append(_make("unary", op, dt, (UNARY_SHAPE,)))
    for op in BINARY_FLOAT:
        for dt in FLOATS:
            progs.append(_make("binary", op, dt, FUSILLI_BROADCAST, tags=("broadcast",)))
    for op in BINARY_INT:
        for dt in INTS:
            progs.append(_make("binary", op, dt, (UNARY_SHAPE, UNARY_SHAPE)))
    # Shape sweep, tiny to large.
    for shape in ((), (1,), (3, 5, 7), LARGE_SHAPE):
        tags = ("large",) if shape == LARGE_SHAPE else ("tiny",) if len(shape) < 2 else ()
        progs.append(_make("binary", "add", "f32", (shape, shape), tags=tags))
        progs.append(_make("unary", "relu", "f32", (shape,), tags=tags))
    progs.append(_make("binary", "mul", "f16", (LARGE_SHAPE, LARGE_SHAPE), tags=("large",)))
    # Fused chains.
    for dt in ("f32", "f16"):
        progs.append(_make("chain", "bias_relu_scale", dt, FUSILLI_BROADCAST, tags=("broadcast",)))
        progs.append(_make("chain", "silu", dt, (UNARY_SHAPE,)))
        progs.append(_make("chain", "exp_mul_add", dt, (UNARY_SHAPE, UNARY_SHAPE)))
        progs.append(_make("chain", "abs_sqrt_log", dt, (UNARY_SHAPE,)))
        progs.append(_make("chain", "tanh_mul_sub", dt, (UNARY_SHAPE, UNARY_SHAPE)))
    # Dynamic shapes: the runtime shape varies with the job seed.
    progs.append(_make("dynamic", "add", "f32", ((None, None), (None, None)), tags=("dynamic",)))
    progs.append(_make("dynamic", "exp", "f16", ((None, None),), tags=("dynamic",)))
    # Transfer-only: checked end to end even where kernels do not run (the stand-in HIP).
    progs += [_transfer("slice", "f32"), _transfer("concat", "f16"), _transfer("pad", "f32")]
    seen: set[str] = set()
    unique = []
    for p in progs:
        if p.name not in seen:
            seen.add(p.name)
            unique.append(p)
    return tuple(unique)


def select(patterns: tuple[str, ...] | list[str] = (), *, kind: str | None = None,
           op: str | None = None, dtype: str | None = None,
           exclude_tags: tuple[str, ...] = ()) -> list[Program]:
    """Corpus programs whose name matches any glob in `patterns` (all when empty) and filters.

    Raises UsageError when a glob matches nothing, listing a few names that exist.
    """
    progs = list(corpus())
    if patterns:
        chosen: list[Program] = []
        for pat in patterns:
            hits = [p for p in progs if fnmatch.fnmatchcase(p.name, pat) or p.name == pat]
            if not hits:
                kinds = sorted({p.kind for p in progs})
                raise UsageError(f"no corpus program matches {pat!r}; names look like "
                                 f"{progs[0].name!r}, kinds: {', '.join(kinds)} "
                                 f"(see 'iree-stress programs')")
            chosen.extend(h for h in hits if h not in chosen)
        progs = chosen
    progs = [p for p in progs if (kind is None or p.kind == kind) and (op is None or p.op == op)
             and (dtype is None or p.dtype == dtype)
             and not set(exclude_tags) & set(p.tags)]
    return progs


def by_name() -> dict[str, Program]:
    return {p.name: p for p in corpus()}
