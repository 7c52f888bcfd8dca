"""Numpy references for corpus ops, and the output check the worker runs after each invocation.

Kept free of anything but numpy: it runs inside workers under a runtime stack's own interpreter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from stress.programs import dtypes

Array = npt.NDArray[np.float64]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(a: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-a))


FLOAT_OPS: dict[str, Callable[..., Array]] = {
    "abs": np.abs, "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda a: 1.0 / np.sqrt(a), "tanh": np.tanh, "sigmoid": _sigmoid,
    "relu": lambda a: np.maximum(a, 0.0), "floor": np.floor, "ceil": np.ceil, "sin": np.sin,
    "erf": _erf, "reciprocal": lambda a: 1.0 / a,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power,
    "select": lambda a, b: np.where(a > b, a, -b),
    # chains (3-5 scalar ops each)
    "bias_relu_scale": lambda a, b: np.maximum(a + b, 0.0) * 0.5,
    "silu": lambda a: a * _sigmoid(a),
    "exp_mul_add": lambda a, b: np.exp(a) * b + a,
    "abs_sqrt_log": lambda a: np.log(np.sqrt(np.abs(a)) + 1.0),
    "tanh_mul_sub": lambda a, b: np.tanh(a) * b - a,
}


# Transfer-only programs (corpus kind `transfer`): data movement the compiler turns into queue
#   copies and fills, no dispatch, so a device that runs no kernels still computes them
SLICE_ROWS: tuple[int, int] = (16, 48)  # rows kept of a 64-row input
PAD_ROWS: int = 1  # rows added above and below
PAD_VALUE: float = 1.5  # exact in every float dtype
TRANSFER_OPS: dict[str, Callable[..., Any]] = {
    "slice": lambda a: a[SLICE_ROWS[0]:SLICE_ROWS[1]],
    "concat": lambda a, b: np.concatenate([a, b]),
    "pad": lambda a: np.pad(a, ((PAD_ROWS, PAD_ROWS), (0, 0)), constant_values=PAD_VALUE),
}
FLOAT_OPS.update(TRANSFER_OPS)


def _wrap(fn: Callable[..., Any]) -> Callable[..., npt.NDArray[np.generic]]:
    def call(*args: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        with np.errstate(over="ignore"):
            return np.asarray(fn(*args))

    return call


INT_OPS: dict[str, Callable[..., npt.NDArray[np.generic]]] = {
    "abs": _wrap(np.abs), "neg": _wrap(np.negative),
    "relu": _wrap(lambda a: np.maximum(a, np.zeros_like(a))),
    "add": _wrap(np.add), "sub": _wrap(np.subtract), "mul": _wrap(np.multiply),
    "max": _wrap(np.maximum), "min": _wrap(np.minimum),
    "select": _wrap(lambda a, b: np.where(a > b, a, np.negative(b))),
}


def has_reference(op: str, dtype: str) -> bool:
    return op in (FLOAT_OPS if dtypes.get(dtype).is_float else INT_OPS)


def evaluate(op: str, dtype: str, inputs: list[npt.NDArray[np.generic]]) -> npt.NDArray[np.generic]:
    """Reference output: float64 values for float dtypes, storage dtype for integers."""
    dt = dtypes.get(dtype)
    if dt.is_float:
        with np.errstate(all="ignore"):
            return np.asarray(FLOAT_OPS[op](*[dt.decode(x) for x in inputs]), dtype=np.float64)
    return np.asarray(INT_OPS[op](*inputs)).astype(dt.storage)


def matches(dtype: str, actual: npt.NDArray[np.generic], expected: npt.NDArray[np.generic],
            rtol: float | None = None, atol: float | None = None) -> bool:
    """True when `actual` (host storage) matches `expected` (from `evaluate`) within tolerance."""
    dt = dtypes.get(dtype)
    if actual.shape != expected.shape:
        return False
    if not dt.is_float:
        return bool(np.array_equal(actual, expected))
    return bool(np.allclose(dt.decode(actual), expected, equal_nan=True,
                            rtol=dt.rtol if rtol is None else rtol,
                            atol=dt.atol if atol is None else atol))


def max_error(dtype: str, actual: npt.NDArray[np.generic],
              expected: npt.NDArray[np.generic]) -> float:
    """Largest absolute difference, for the failure message."""
    dt = dtypes.get(dtype)
    if actual.shape != expected.shape:
        return math.inf
    a = dt.decode(actual) if dt.is_float else actual.astype(np.float64)
    e = expected.astype(np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(a - e)
    return float(np.nanmax(diff)) if diff.size else 0.0
