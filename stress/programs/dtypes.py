"""Element types: MLIR spelling, numpy storage, HAL element type, encode/decode, tolerance.

bf16 has no numpy dtype; it is stored as uint16 bit patterns and decoded through float32, so
the tool needs no extra dependency for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class DType:
    name: str  # our name and the MLIR scalar type
    storage: str  # numpy dtype of the host buffer
    hal: str  # attribute of iree.runtime.HalElementType
    is_float: bool
    rtol: float
    atol: float

    def encode(self, values: npt.NDArray[np.float64]) -> npt.NDArray[np.generic]:
        """Round float64 values to this dtype; returns the host storage array."""
        if self.name == "bf16":
            bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
            return rounded.astype(np.uint16)
        if self.is_float:
            return values.astype(self.storage)
        info = np.iinfo(self.storage)
        return np.clip(np.rint(values), info.min, info.max).astype(self.storage)

    def decode(self, stored: npt.NDArray[np.generic]) -> npt.NDArray[np.float64]:
        """Host storage array -> float64 values (exact for every supported dtype)."""
        if self.name == "bf16":
            return (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return stored.astype(np.float64)

    def mlir_const(self, value: float) -> str:
        if self.is_float:
            return f"{float(value)!r}"
        return str(int(value))


# Tolerances: f32 allows a few ulp of IREE's polynomial approximations of exp/log/erf/pow;
# f16/bf16 allow the rounding of intermediates that IREE may or may not keep in f32.
DTYPES: dict[str, DType] = {
    "f32": DType("f32", "float32", "FLOAT_32", True, 1e-4, 1e-5),
    "f16": DType("f16", "float16", "FLOAT_16", True, 1e-2, 2e-3),
    "bf16": DType("bf16", "uint16", "BFLOAT_16", True, 2e-2, 2e-2),
    "i32": DType("i32", "int32", "SINT_32", False, 0.0, 0.0),
    "i8": DType("i8", "int8", "SINT_8", False, 0.0, 0.0),
}

# Torch dialect spellings (fusilli writes !torch.vtensor<[2,16],f32>).
TORCH_DTYPES: dict[str, str] = {"f32": "f32", "f16": "f16", "bf16": "bf16", "si32": "i32",
                                "si8": "i8", "i32": "i32", "i8": "i8"}


def get(name: str) -> DType:
    return DTYPES[name]


def in_name(program: str) -> str:
    """The element type a corpus program's name carries (`binary.pow.f16.2x16...` -> f16);
    "" for a name without one (a user's program)."""
    return next((part for part in program.split(".")[1:] if part in DTYPES), "")
