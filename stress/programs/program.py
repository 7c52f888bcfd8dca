"""The Program record shared by every stage, and seeded input generation.

A Program is plain data (JSON round-trips) so that it can cross into a worker running under
another interpreter; the worker needs only numpy, iree.runtime and this package.
"""

from __future__ import annotations

import enum
import functools
import math
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from stress.programs import dtypes


class Role(str, enum.Enum):
    INPUT = "in"
    OUTPUT = "out"  # torch-style: a mutable argument the program overwrites in place


@dataclass(frozen=True)
class Arg:
    shape: tuple[int | None, ...]  # None marks a dynamic dimension
    dtype: str
    role: Role = Role.INPUT

    def mlir_type(self) -> str:
        dims = "".join(f"{'?' if d is None else d}x" for d in self.shape)
        return f"tensor<{dims}{self.dtype}>"


@dataclass(frozen=True)
class Program:
    name: str
    kind: str  # unary | binary | chain | dynamic | user
    op: str
    dtype: str
    args: tuple[Arg, ...]
    results: tuple[Arg, ...]
    mlir: str
    input_type: str = "none"  # "torch" for torch-dialect sources
    domain: tuple[float, float] = (-4.0, 4.0)
    nonzero: bool = False  # keep |x| >= 0.5 (division, reciprocal)
    has_reference: bool = False
    source: str = "corpus"
    entry: str = "main"
    tags: tuple[str, ...] = field(default=())

    @property
    def shape_text(self) -> str:
        return "+".join(_shape_text(a.shape) for a in self.args if a.role is Role.INPUT)

    @functools.cached_property
    def elements(self) -> int:
        out = self.results[0] if self.results else self.args[0]
        return math.prod(d or 64 for d in out.shape)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["args"] = [{**asdict(a), "role": a.role.value} for a in self.args]
        data["results"] = [{**asdict(a), "role": a.role.value} for a in self.results]
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Program:
        def arg(d: dict[str, Any]) -> Arg:
            return Arg(tuple(d["shape"]), d["dtype"], Role(d["role"]))

        fields = dict(data)
        fields["args"] = tuple(arg(a) for a in data["args"])
        fields["results"] = tuple(arg(a) for a in data["results"])
        fields["domain"] = tuple(data["domain"])
        fields["tags"] = tuple(data.get("tags", ()))
        return Program(**fields)


def _shape_text(shape: tuple[int | None, ...]) -> str:
    if not shape:
        return "scalar"
    return "x".join("N" if d is None else str(d) for d in shape)


def runtime_shape(shape: tuple[int | None, ...], seed: int) -> tuple[int, ...]:
    """Concrete shape for one run of a dynamic program; varies with the seed, 1..64 per dim."""
    sizes = np.random.default_rng([seed, 0xD1]).integers(1, 65, size=len(shape))
    return tuple(int(sizes[i]) if d is None else d for i, d in enumerate(shape))


def make_inputs(program: Program, seed: int) -> list[npt.NDArray[np.generic]]:
    """Host arrays for every argument (outputs zero-filled), reproducible from (program, seed)."""
    name_key = zlib.crc32(program.name.encode())
    rng = np.random.default_rng([seed, name_key])
    arrays: list[npt.NDArray[np.generic]] = []
    for arg in program.args:
        shape = runtime_shape(arg.shape, seed)  # same dims for every argument of one call
        dt = dtypes.get(arg.dtype)
        if arg.role is Role.OUTPUT:
            arrays.append(np.zeros(shape, dtype=dt.storage))
            continue
        lo, hi = program.domain
        if not dt.is_float:
            lo, hi = (-100, 100) if arg.dtype == "i8" else (-10_000, 10_000)
        values = rng.uniform(lo, hi, size=shape)
        if program.nonzero:
            values = np.where(np.abs(values) < 0.5, np.copysign(0.5, values) + values, values)
        arrays.append(np.array(dt.encode(np.asarray(values, dtype=np.float64)), order="C"))
    return arrays
