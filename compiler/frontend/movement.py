"""Movement ops (reshape, permute, expand, pad, shrink, flip, strides, split, repeat): a mixin
of ``Tensor``. Each is a primitive (``compiler.frontend.autograd``) or composed from them; a strided
slice, for one, is pad + reshape + shrink. The mixin does not import ``compiler.frontend.tensor``:
new tensors come from ``self._apply``, ``type(self)`` (the Tensor class) and Tensor's own methods.
"""
from __future__ import annotations

import math
from typing import Self

import numpy as np

from isa.ints import cdiv

from compiler.frontend import autograd as ag
from compiler.frontend.shapes import ShapeError, check_shape, int_arg, norm_axis, shape_arg, shape_error
from compiler.ir import dtypes
from compiler.ir.graph import fmt_shape, is_static


class MovementMixin:
    # -------------------------------------------------------------- movement
    def reshape(self, *shape) -> Self:
        shape = _sizes("reshape", shape_arg(shape))
        if shape.count(-1) > 1:
            raise shape_error("reshape", [self.shape], f"only one -1 allowed in {shape}")
        if -1 in shape:
            if not is_static(tuple(d for d in shape if d != -1)):
                raise shape_error("reshape", [self.shape], f"cannot infer -1 next to a dynamic dimension in {shape}")
            known = math.prod(d for d in shape if d != -1)
            total = self.numel() if is_static(self.shape) else None
            if total is None or known == 0 or total % known:
                raise shape_error("reshape", [self.shape], f"cannot infer -1 in {shape}")
            shape = tuple(total // known if d == -1 else d for d in shape)
        check_shape("reshape", shape, dynamic=True)
        if shape == self.shape:
            return self
        if is_static(self.shape) and is_static(shape) and math.prod(shape) != self.numel():
            raise shape_error("reshape", [self.shape], f"cannot reshape {self.numel()} elements to {fmt_shape(shape)}")
        try:
            return self._apply(ag.Reshape, self, shape=shape)
        except ValueError as e:
            raise shape_error("reshape", [self.shape], str(e)) from None

    view = reshape

    def flatten(self, start_dim=0, end_dim=-1) -> Self:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = norm_axis("flatten", self.shape, start_dim), norm_axis("flatten", self.shape, end_dim)
        return self.reshape(self.shape[:s] + (-1,) + self.shape[e + 1:]) if is_static(self.shape[s:e + 1]) else self

    def unsqueeze(self, dim: int) -> Self:
        dim = int_arg("unsqueeze", "dimension", dim)
        d = dim % (self.ndim + 1) if -self.ndim - 1 <= dim <= self.ndim else None
        if d is None:
            raise shape_error("unsqueeze", [self.shape], f"dimension {dim} out of range")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def squeeze(self, dim=None) -> Self:
        if dim is None:
            return self.reshape(tuple(d for d in self.shape if d != 1))
        d = norm_axis("squeeze", self.shape, dim)
        return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

    def permute(self, *order) -> Self:
        order = tuple(norm_axis("permute", self.shape, a) for a in shape_arg(order))
        if sorted(order) != list(range(self.ndim)):
            raise shape_error("permute", [self.shape], f"{order} is not a permutation of {self.ndim} dimensions")
        return self if order == tuple(range(self.ndim)) else self._apply(ag.Permute, self, order=order)

    def transpose(self, dim0=-2, dim1=-1) -> Self:
        order = list(range(self.ndim))
        a, b = norm_axis("transpose", self.shape, dim0), norm_axis("transpose", self.shape, dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Self:
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape) -> Self:
        shape = _sizes("expand", shape_arg(shape))
        if len(shape) < self.ndim:
            raise shape_error("expand", [self.shape], f"cannot expand to fewer dimensions {shape}")
        own = (1,) * (len(shape) - self.ndim) + self.shape
        shape = tuple(o if s == -1 else s for s, o in zip(shape, own))
        check_shape("expand", shape, dynamic=True)
        if any(o != s and o != 1 for o, s in zip(own, shape)):
            raise shape_error("expand", [self.shape], f"cannot expand to {fmt_shape(shape)}")
        return self._broadcast_to(shape)

    def pad(self, padding, value=0) -> Self:
        """``padding`` is one ``(before, after)`` pair per dimension (None = no padding); negative values crop."""
        padding = _pairs("pad", self.shape, padding, "(before, after)")
        if isinstance(value, (str, bytes)) or not isinstance(value, (bool, int, float, np.number)):
            raise ShapeError(f"pad: value must be a number, got {type(value).__name__} {value!r:.40}")
        x = self
        if any(b < 0 or a < 0 for b, a in padding):
            x = x.shrink([(-min(b, 0), d + min(a, 0)) for (b, a), d in zip(padding, self.shape)])
            padding = [(max(b, 0), max(a, 0)) for b, a in padding]
        if all(p == (0, 0) for p in padding):
            return x
        check_shape("pad", tuple(d + b + a if isinstance(d, int) else d for d, (b, a) in zip(x.shape, padding)),
                    dynamic=True)
        out = self._apply(ag.Pad, x, pads=tuple(padding))
        if value == 0:
            return out
        mask = self._apply(ag.Pad, type(self)._full(x.shape, True, dtypes.bool_), pads=tuple(padding))
        return mask.where(out, value)

    def shrink(self, bounds) -> Self:
        pairs = _pairs("shrink", self.shape, bounds, "(start, end)", dynamic=True)
        bounds = tuple((0, d) if b is None or isinstance(d, str) and p == (0, d) else p
                       for b, p, d in zip(bounds, pairs, self.shape))
        if all(b == (0, d) for b, d in zip(bounds, self.shape)):
            return self
        if any(isinstance(d, str) and b != (0, d) for b, d in zip(bounds, self.shape)):
            raise shape_error("shrink", [self.shape], "a dynamic dimension can only be kept whole")
        if any(not 0 <= s <= e <= d for (s, e), d in zip(bounds, self.shape) if isinstance(d, int)):
            raise shape_error("shrink", [self.shape], f"bounds {bounds} out of range")
        return self._apply(ag.Shrink, self, bounds=bounds)

    def flip(self, dims) -> Self:
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        axes = tuple(sorted({norm_axis("flip", self.shape, d) for d in dims}))
        return self._apply(ag.Flip, self, axes=axes) if axes else self

    def _stride(self, axis: int, step: int) -> Self:
        """Every ``step``-th element along ``axis`` (pad, reshape, shrink; no strided primitive)."""
        if step == 1:
            return self
        n = self.shape[axis]
        m = cdiv(n, step)
        x = self.pad([(0, m * step - n) if i == axis else (0, 0) for i in range(self.ndim)])
        x = x.reshape(self.shape[:axis] + (m, step) + self.shape[axis + 1:])
        x = x.shrink([(0, 1) if i == axis + 1 else None for i in range(x.ndim)])
        return x.reshape(self.shape[:axis] + (m,) + self.shape[axis + 1:])

    def contiguous(self) -> Self:
        """No-op: the IR has no memory layout; the chip compiler chooses layouts."""
        return self

    def split(self, split_size, dim=0):
        d = norm_axis("split", self.shape, dim)
        n = self.shape[d]
        if isinstance(split_size, (list, tuple)):
            sizes = [int_arg("split", "a split size", s, 0) for s in split_size]
        else:
            split_size = int_arg("split", "split_size", split_size, 1)
            sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
        if sum(sizes) != n:
            raise shape_error("split", [self.shape], f"sizes {sizes} do not add up to {n} along dimension {d}")
        out, start = [], 0
        for s in sizes:
            out.append(self.shrink([(start, start + s) if i == d else None for i in range(self.ndim)]))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim=0):
        n = self.shape[norm_axis("chunk", self.shape, dim)]
        chunks = int_arg("chunk", "chunks", chunks, 1)
        return self.split(max(cdiv(n, chunks), 1), dim)

    def repeat(self, *repeats) -> Self:
        """PyTorch's repeat (numpy's tile): repeat the whole tensor ``repeats[i]`` times along dim i."""
        reps = check_shape("repeat", repeats)
        if len(reps) < self.ndim:
            raise shape_error("repeat", [self.shape], f"need at least {self.ndim} repeat counts, got {reps}")
        shape = (1,) * (len(reps) - self.ndim) + self.shape
        check_shape("repeat", tuple(r * d if isinstance(d, int) else d for r, d in zip(reps, shape)), dynamic=True)
        x = self.reshape(tuple(v for d in shape for v in (1, d)))
        x = x.expand(tuple(v for r, d in zip(reps, shape) for v in (r, d)))
        return x.reshape(tuple(r * d for r, d in zip(reps, shape)))

    def tile(self, *reps) -> Self:
        reps = check_shape("tile", reps)
        return self.repeat((1,) * (self.ndim - len(reps)) + reps)

    def repeat_interleave(self, repeats: int, dim=0) -> Self:
        d = norm_axis("repeat_interleave", self.shape, dim)
        repeats = int_arg("repeat_interleave", "repeats", repeats, 0)
        if isinstance(self.shape[d], int):
            check_shape("repeat_interleave", self.shape[:d] + (self.shape[d] * repeats,) + self.shape[d + 1:],
                        dynamic=True)
        x = self.unsqueeze(d + 1)
        x = x.expand(x.shape[:d + 1] + (repeats,) + x.shape[d + 2:])
        return x.reshape(self.shape[:d] + (self.shape[d] * repeats,) + self.shape[d + 1:])


def _sizes(op: str, shape: tuple) -> tuple:
    """The sizes of a target shape (``reshape``, ``expand``): ints >= -1 (-1: inferred or kept) or dynamic names."""
    return tuple(d if isinstance(d, str) and d else int_arg(op, "a size", d, -1) for d in shape)


def _pairs(op: str, shape: tuple, pairs, what: str, dynamic: bool = False) -> list:
    """One ``what`` pair of ints (or None) per dimension of ``shape``, as a list of int pairs."""
    if not isinstance(pairs, (list, tuple)) or len(pairs) != len(shape):
        raise shape_error(op, [shape], f"need one {what} pair per dimension, got {pairs!r}")
    out = []
    for p, d in zip(pairs, shape):
        if p is None:
            out.append((0, 0) if op == "pad" else (0, d))
            continue
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            raise shape_error(op, [shape], f"need one {what} pair per dimension, got {pairs!r}")
        if dynamic and isinstance(d, str) and tuple(p) == (0, d):
            out.append((0, d))
            continue
        out.append((int_arg(op, what, p[0]), int_arg(op, what, p[1])))
    return out
