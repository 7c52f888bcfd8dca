"""What a miscompare shows a user: which program and dtype, how many elements are out of
tolerance and by how much, the first of them with their inputs, and the tolerance the check
used; for small arrays the inputs, the expected and the actual result whole (`.npy` files in
the failure's folder), so the wrong answer can be looked at without rerunning anything.

The worker builds the evidence (numpy only: it runs under a runtime stack's interpreter) and
sends it with its failure note; the parent writes it into the failure's folder.
"""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from stress.fs import atomic_write
from stress.programs import dtypes

HostArray = npt.NDArray[Any]

SMALL_ELEMENTS: int = 4096  # arrays kept whole (a 64x64 corpus program: 8-32 KiB each as
#   .npy); larger ones keep only their first differing elements
FIRST_DIFFERING: int = 16  # elements listed, with their inputs, in the message and the folder
_NUMBER_DIGITS: int = 6


def _fmt(x: float) -> str:
    return f"{x:.{_NUMBER_DIGITS}g}"


def _values(dtype: str, arr: HostArray) -> npt.NDArray[np.float64]:
    dt = dtypes.get(dtype)
    return dt.decode(arr) if dt.is_float else arr.astype(np.float64)


def differing(dtype: str, actual: HostArray, expected: HostArray, rtol: float,
              atol: float) -> npt.NDArray[np.bool_]:
    """Where `actual` is outside the check's tolerance of `expected` (the same test as
    `reference.matches`: |a - e| <= atol + rtol * |e|, NaN equal to NaN; integers exact)."""
    a, e = _values(dtype, actual), expected.astype(np.float64)
    if not dtypes.get(dtype).is_float:
        return np.asarray(a != e)
    with np.errstate(all="ignore"):
        return np.asarray(~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True))


def _npy(arr: HostArray) -> str:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode()


def evidence(program: Any, seed: int, inputs: list[HostArray], output: int, dtype: str,
             actual: HostArray, expected: HostArray, rtol: float, atol: float,
             arrays: bool = True) -> dict[str, Any]:
    """A miscompare as JSON-able data: what was run, the tolerance, how many elements differ,
    the first FIRST_DIFFERING of them (index, each input there, expected, actual and its
    stored bits), and the arrays themselves when small (base64 `.npy`) and `arrays`."""
    bad = differing(dtype, actual, expected, rtol, atol) if actual.shape == expected.shape \
        else np.ones(actual.shape, dtype=bool)
    a, e = _values(dtype, actual), expected.astype(np.float64)
    first = []
    for ix in np.argwhere(bad)[:FIRST_DIFFERING]:
        at = tuple(int(i) for i in ix)
        ins = []
        for x, arg in zip(inputs, program.args, strict=False):
            if x.shape and x.ndim == actual.ndim:  # inputs broadcast to the result's shape
                v = np.broadcast_to(x, actual.shape)[at]
            else:
                v = x.reshape(-1)[0] if x.size == 1 else None
            ins.append(None if v is None else float(_values(arg.dtype, np.asarray(v))))
        first.append({"index": list(at), "inputs": ins,
                      "expected": float(e[at]) if e.shape == a.shape else None,
                      "actual": float(a[at]),
                      "actual_bits": int(np.asarray(actual[at]).view(
                          f"u{actual.dtype.itemsize}")) if actual.dtype.kind != "b" else 0})
    out: dict[str, Any] = {
        "program": program.name, "dtype": dtype, "seed": seed, "output": output,
        "shape": list(actual.shape), "tolerance": {"rtol": rtol, "atol": atol,
                                                   "test": "|actual - expected| <= atol + "
                                                           "rtol * |expected|; NaN == NaN"
                                                   if dtypes.get(dtype).is_float else "exact"},
        "elements": int(actual.size), "differing": int(bad.sum()), "first": first,
        "max_abs_error": _max_abs(a, e), "arrays": {}}
    if arrays and actual.size <= SMALL_ELEMENTS and all(x.size <= SMALL_ELEMENTS for x in inputs):
        out["arrays"] = {**{f"input-{i}": _npy(x) for i, x in enumerate(inputs)},
                         "expected": _npy(expected), "actual": _npy(actual)}
    return out


def _max_abs(a: npt.NDArray[np.float64], e: npt.NDArray[np.float64]) -> float | None:
    if a.shape != e.shape or not a.size:
        return None
    with np.errstate(all="ignore"):
        m = float(np.nanmax(np.abs(a - e))) if not np.isnan(a - e).all() else math.nan
    return None if math.isnan(m) else m


def detail(ev: dict[str, Any]) -> str:
    """The message's second line: program, dtype, how many differ, the tolerance, the first
    differing element."""
    tol = ev["tolerance"]
    limit = f"rtol {_fmt(tol['rtol'])} + atol {_fmt(tol['atol'])}" \
        if tol["test"] != "exact" else "exact match"
    text = (f"{ev['program']} ({ev['dtype']}), input seed {ev['seed']}: {ev['differing']} of "
            f"{ev['elements']} elements outside {limit}")
    if ev["first"]:
        f = ev["first"][0]
        ins = ", ".join("?" if v is None else _fmt(v) for v in f["inputs"])
        exp = "?" if f["expected"] is None else _fmt(f["expected"])
        text += (f"; first at {f['index']}: inputs ({ins}), expected {exp}, "
                 f"got {_fmt(f['actual'])}")
    return text


def write(folder: Path, ev: dict[str, Any]) -> None:
    """The evidence in a failure's folder: `miscompare.json` (everything but the arrays),
    `miscompare.txt` (the first differing elements as a table) and the `.npy` arrays."""
    arrays = ev.get("arrays") or {}
    facts = {k: v for k, v in ev.items() if k != "arrays"}
    facts["files"] = sorted(f"{name}.npy" for name in arrays)
    atomic_write(folder / "miscompare.json", json.dumps(facts, indent=1).encode())
    lines = [detail(ev), f"tolerance: {ev['tolerance']['test']} (rtol {ev['tolerance']['rtol']}"
             f", atol {ev['tolerance']['atol']})",
             "arrays: " + (", ".join(facts["files"]) or
                           f"not kept (over {SMALL_ELEMENTS} elements; the inputs are "
                           f"make_inputs(program, seed {ev['seed']}), as repro.sh reruns them)"),
             "", f"{'index':<20} {'inputs':<32} {'expected':>14} {'actual':>14}  bits"]
    for f in ev["first"]:
        ins = ", ".join("?" if v is None else _fmt(v) for v in f["inputs"])
        exp = "?" if f["expected"] is None else _fmt(f["expected"])
        lines.append(f"{str(f['index']):<20} {ins:<32} {exp:>14} {_fmt(f['actual']):>14}  "
                     f"{f['actual_bits']:#x}")
    atomic_write(folder / "miscompare.txt", ("\n".join(lines) + "\n").encode())
    for name, data in arrays.items():
        atomic_write(folder / f"{name}.npy", base64.b64decode(data))
