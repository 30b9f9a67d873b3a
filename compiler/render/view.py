"""Strided views: how a kernel reads a buffer through a chain of movement ops without copying.

A ``View`` maps an index over ``shape`` to ``offset + sum(idx[i] * strides[i])``
in a flat buffer, valid only where every ``mask[i] = (lo, hi)`` holds
(``lo <= idx[i] < hi``; invalid elements read as 0, which is what PAD means).
PERMUTE, EXPAND, SHRINK, FLIP and PAD always compose into a view; RESHAPE does
when the strides allow it (numpy's no-copy reshape rule), otherwise ``reshape``
returns None and the scheduler materialises the reshaped value first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def contiguous_strides(shape) -> tuple:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc if d != 1 else 0)
        acc *= d
    return tuple(reversed(out))


@dataclass(frozen=True)
class View:
    shape: tuple
    strides: tuple
    offset: int = 0
    mask: tuple | None = None  # per dim (lo, hi), or None when every index is valid

    @staticmethod
    def contiguous(shape) -> "View":
        shape = tuple(shape)
        return View(shape, contiguous_strides(shape), 0, None)

    def _masks(self):
        return self.mask if self.mask is not None else tuple((0, d) for d in self.shape)

    def _with(self, shape, strides, offset, mask) -> "View":
        if mask is not None and all(m == (0, d) for m, d in zip(mask, shape)):
            mask = None
        return View(tuple(shape), tuple(strides), offset, None if mask is None else tuple(mask))

    def permute(self, perm) -> "View":
        p = lambda t: tuple(t[i] for i in perm)  # noqa: E731
        return self._with(p(self.shape), p(self.strides), self.offset, None if self.mask is None else p(self.mask))

    def expand(self, new) -> "View":
        strides, mask = list(self.strides), list(self._masks())
        for i, (old, n) in enumerate(zip(self.shape, new)):
            if old != n:  # old == 1
                strides[i] = 0
                mask[i] = (0, n) if mask[i][0] < mask[i][1] else (0, 0)
        return self._with(new, strides, self.offset, mask)

    def shrink(self, bounds) -> "View":
        off = self.offset + sum(b * s for (b, _), s in zip(bounds, self.strides))
        mask = [(max(lo - b, 0), max(min(hi - b, e - b), 0)) for (lo, hi), (b, e) in zip(self._masks(), bounds)]
        mask = [(lo, max(lo, hi)) for lo, hi in mask]
        return self._with(tuple(e - b for b, e in bounds), self.strides, off, mask)

    def flip(self, axes) -> "View":
        strides, mask, off = list(self.strides), list(self._masks()), self.offset
        for a in axes:
            d = self.shape[a]
            off += (d - 1) * strides[a]
            strides[a] = -strides[a]
            lo, hi = mask[a]
            mask[a] = (d - hi, d - lo)
        return self._with(self.shape, strides, off, mask)

    def pad(self, pads) -> "View":
        off = self.offset - sum(b * s for (b, _), s in zip(pads, self.strides))
        mask = [(lo + b, hi + b) for (lo, hi), (b, _) in zip(self._masks(), pads)]
        shape = [d + b + a for d, (b, a) in zip(self.shape, pads)]
        return self._with(shape, self.strides, off, mask)

    def reshape(self, new) -> "View | None":
        new = tuple(new)
        if new == self.shape:
            return self
        if math.prod(new) == 0:
            return View.contiguous(new)
        if self.mask is not None:
            return self._reshape_masked(new)
        strides = _nocopy_strides(self.shape, self.strides, new)
        return None if strides is None else self._with(new, strides, self.offset, None)

    def _reshape_masked(self, new) -> "View | None":
        """Only adding or removing size-1 dims keeps a mask meaningful."""
        old = [(d, s, m) for d, s, m in zip(self.shape, self.strides, self.mask)]
        if [d for d in self.shape if d != 1] != [d for d in new if d != 1]:
            return None
        if any(d == 1 and m != (0, 1) for d, _, m in old):
            return None  # a size-1 dim that masks everything out cannot be dropped
        kept = [(d, s, m) for d, s, m in old if d != 1]
        shape, strides, mask, k = [], [], [], 0
        for d in new:
            if d == 1:
                shape.append(1); strides.append(0); mask.append((0, 1))
            else:
                shape.append(d); strides.append(kept[k][1]); mask.append(kept[k][2]); k += 1
        return self._with(shape, strides, self.offset, mask)


def _nocopy_strides(shape, strides, new):
    """Strides that view ``shape``/``strides`` as ``new`` without a copy, or None (numpy's rule)."""
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    out = [0] * len(new)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new) and oi < len(old):
        np_, op = new[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]; nj += 1
            else:
                op *= old[oj][0]; oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    return tuple(0 if d == 1 else s for d, s in zip(new, out))


def apply_movement(view: View, op_name: str, arg, out_shape) -> "View | None":
    """``view`` after one movement primitive (by its Ops name); None when it cannot be a view."""
    if op_name == "RESHAPE":
        return view.reshape(out_shape)
    if op_name == "PERMUTE":
        return view.permute(arg)
    if op_name == "EXPAND":
        return view.expand(out_shape)
    if op_name == "SHRINK":
        return view.shrink(arg)
    if op_name == "FLIP":
        return view.flip(arg)
    if op_name == "PAD":
        return view.pad(arg)
    raise ValueError(f"{op_name} is not a movement op")
