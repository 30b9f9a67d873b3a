"""Shape rules of the frontend and the error they raise (a leaf: ``tensor`` and its mixins import it).

A shape or dtype error is a ``ShapeError`` raised by the call that is wrong, naming the op and the
shapes (``shape_error``).
"""
from __future__ import annotations

from compiler.ir.graph import fmt_shape


class ShapeError(ValueError):
    """A shape or dtype error raised where the user wrote the call."""


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


def norm_axis(op: str, shape, axis: int) -> int:
    """``axis`` (negative counts from the end) as an index into ``shape``."""
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
    """A shape given as ``f(2, 3)`` or ``f((2, 3))``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(shape)


def pair(v) -> tuple[int, int]:
    """A 2-D size (kernel, stride, padding) given as one int or a pair."""
    return (v, v) if isinstance(v, int) else tuple(v)
