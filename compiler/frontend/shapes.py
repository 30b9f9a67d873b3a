"""Shape rules of the frontend and the error they raise (a leaf: ``tensor`` and its mixins import it).

A shape or dtype error is a ``ShapeError`` raised by the call that is wrong, naming the op and the
shapes (``shape_error``); an argument of the wrong kind (a string where a size goes) is an
``ArgumentError``. Both are ``isa.TetrachipError``s (one line, no traceback, on the CLI) and keep the
builtin they refine (``ValueError``, ``TypeError``) as a base.

``check_shape`` is the one rule for a shape a user gives (``tc.zeros``, ``tc.randn``, ``reshape``...):
non-negative ints (not bools), at most ``MAX_NUMEL`` elements, checked before anything is allocated.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from isa.errors import TetrachipError

from compiler.ir.graph import fmt_shape

#: the most elements a frontend tensor may hold (1 GiB of float32): larger shapes are refused before
#: anything is allocated (the chip's largest preset DRAM is 4 GiB of int8; the reference runs in host memory)
MAX_NUMEL = 1 << 28


class ShapeError(TetrachipError, ValueError):
    """A shape or dtype error raised where the user wrote the call."""


class ArgumentError(TetrachipError, TypeError):
    """An argument of the wrong kind (a float, bool, None or string where an int goes, an unknown dtype)."""


class UsageError(TetrachipError, RuntimeError):
    """A call in the wrong state (``backward`` of a tensor without parameters; a parameter made of an op's result)."""


def shape_error(op: str, shapes, msg: str) -> ShapeError:
    return ShapeError(f"{op}: {msg} (shapes: {', '.join(fmt_shape(s) for s in shapes)})")


def broadcast_shape(op: str, *shapes) -> tuple:
    nd = max(len(s) for s in shapes)
    padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise shape_error(op, shapes, "shapes cannot broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def norm_axes(op: str, shape, axis) -> tuple:
    """``axis`` (one dimension or a sequence of them; None: all) as sorted distinct indices into ``shape``."""
    if axis is None:
        return tuple(range(len(shape)))
    if isinstance(axis, (tuple, list)):
        return tuple(sorted({norm_axis(op, shape, a) for a in axis}))
    return (norm_axis(op, shape, axis),)


def norm_axis(op: str, shape, axis: int) -> int:
    """``axis`` (negative counts from the end) as an index into ``shape``."""
    axis = int_arg(op, "dimension", axis)
    nd = len(shape)
    if not -nd <= axis < max(nd, 1):
        raise shape_error(op, [shape], f"dimension {axis} out of range for rank {nd}")
    return axis % nd if nd else 0


def static_dim(op: str, shape, d):
    """``d``, which must be a static size (not a dynamic dimension's name)."""
    if not isinstance(d, int):
        raise shape_error(op, [shape], f"needs a static size, dimension is dynamic ({d})")
    return d


def shape_arg(shape) -> tuple:
    """A shape given as ``f(2, 3)`` or ``f((2, 3))`` (or one int, ``f(3)``)."""
    if isinstance(shape, numbers.Integral):
        return (shape,)
    if not isinstance(shape, (tuple, list)):
        raise ArgumentError(f"a shape is a tuple of ints, got {type(shape).__name__} {shape!r}")
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(shape)


def int_arg(op: str, what: str, v, minimum: int | None = None, maximum: int | None = None) -> int:
    """``v`` as an int (a Python or numpy integer, not a bool), within ``minimum..maximum`` where given."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ArgumentError(f"{op}: {what} must be an int, got {type(v).__name__} {v!r}")
    v = int(v)
    if minimum is not None and v < minimum:
        raise ShapeError(f"{op}: {what} must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ShapeError(f"{op}: {what} must be <= {maximum}, got {v}")
    return v


def flag(op: str, what: str, v) -> bool:
    """A yes/no argument (``keepdim``, ``requires_grad``): a bool, or the int 0 or 1."""
    if isinstance(v, (bool, np.bool_)) or isinstance(v, numbers.Integral) and v in (0, 1):
        return bool(v)
    raise ArgumentError(f"{op}: {what} must be True or False, got {type(v).__name__} {v!r}")


def check_shape(op: str, shape, dynamic: bool = False) -> tuple:
    """``shape`` (``shape_arg``'s forms) checked: every size a non-negative int (a non-empty name too, a dynamic
    dimension, where ``dynamic``), at most ``MAX_NUMEL`` elements (of the static sizes); the shape as a tuple."""
    shape = shape_arg(shape)
    out = []
    for d in shape:
        if dynamic and isinstance(d, str) and d:
            out.append(d)
            continue
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise ArgumentError(f"{op}: shape {shape!r}: a size must be an int, got {type(d).__name__} {d!r}")
        if d < 0:
            raise ShapeError(f"{op}: shape {shape!r}: negative size {d}")
        if d > MAX_NUMEL:
            raise ShapeError(f"{op}: shape {shape!r}: size {d} exceeds the limit of {MAX_NUMEL} elements")
        out.append(int(d))
    n = math.prod(d for d in out if isinstance(d, int))
    if n > MAX_NUMEL:
        raise ShapeError(f"{op}: shape {fmt_shape(tuple(out))} holds {n} elements, more than the limit of "
                         f"{MAX_NUMEL}")
    return tuple(out)


def pair(v, op: str = "pair", what: str = "size", minimum: int = 0) -> tuple[int, int]:
    """A 2-D size (kernel, stride, padding) given as one int or a pair of ints, each >= ``minimum``."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ShapeError(f"{op}: {what} must be an int or a pair of ints, got {v!r}")
        return tuple(int_arg(op, what, x, minimum, MAX_NUMEL) for x in v)
    x = int_arg(op, what, v, minimum, MAX_NUMEL)
    return (x, x)
