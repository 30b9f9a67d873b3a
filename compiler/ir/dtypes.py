"""Element types of the tensor frontend and the rules that combine them.

Four types, ordered by promotion rank: ``bool < int8 < int32 < float32``.
A binary op on two tensors computes in the higher-ranked type; a Python
scalar takes the tensor's type unless it is a float meeting an integer tensor
(then float32), as in PyTorch. The chip's datapath is int8/int32; float32 is
the reference the quantizer is judged against.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.errors import TetrachipError


class DTypeError(TetrachipError, TypeError):
    """An unknown dtype, or a value that is not a scalar where one goes (a ``TypeError`` too)."""


@dataclass(frozen=True)
class DType:
    name: str
    rank: int
    np: type

    @property
    def is_float(self) -> bool:
        return self.name.startswith("float")

    @property
    def is_int(self) -> bool:
        return self.name.startswith("int")

    @property
    def itemsize(self) -> int:
        return np.dtype(self.np).itemsize

    def __repr__(self) -> str:
        return f"tc.{self.name}"

    def __str__(self) -> str:
        return self.name


bool_ = DType("bool", 0, np.bool_)
int8 = DType("int8", 1, np.int8)
int32 = DType("int32", 2, np.int32)
float32 = DType("float32", 3, np.float32)

ALL = (bool_, int8, int32, float32)
_BY_NAME = {d.name: d for d in ALL}
_BY_NP = {np.dtype(d.np): d for d in ALL}


def promote(a: DType, b: DType) -> DType:
    """The type a binary op on tensors of types ``a`` and ``b`` computes in."""
    return a if a.rank >= b.rank else b


def to_dtype(x) -> DType:
    """Accept a DType, its name, or a numpy dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    if x is bool:
        return bool_
    if x is int:
        return int32
    if x is float:
        return float32
    try:
        return _BY_NP[np.dtype(x)]
    except (TypeError, ValueError, KeyError):
        raise DTypeError(f"unsupported dtype {x!r}; known: {', '.join(_BY_NAME)}") from None


def from_numpy(dt) -> DType:
    """The frontend type an array of numpy dtype ``dt`` is stored as (float64 -> float32, int64 -> int32)."""
    dt = np.dtype(dt)
    if dt.kind == "f":
        return float32
    if dt.kind == "b":
        return bool_
    if dt.kind in "iu":
        return int8 if dt == np.int8 else int32
    raise DTypeError(f"unsupported numpy dtype {dt}")


def scalar_dtype(value, other: DType | None = None) -> DType:
    """The type a Python scalar takes next to a tensor of type ``other``."""
    if isinstance(value, (bool, np.bool_)):
        return other if other is not None else bool_
    if isinstance(value, (int, np.integer)):
        return other if other is not None and other != bool_ else int32
    if isinstance(value, (float, np.floating)):
        return other if other is not None and other.is_float else float32
    raise DTypeError(f"not a scalar: {value!r}")
