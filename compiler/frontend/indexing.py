"""``Tensor.__getitem__``: ints, slices (any step), None, Ellipsis and tensor (advanced) indices;
a mixin of ``Tensor`` that does not import ``compiler.frontend.tensor`` (``type(self)`` is the
Tensor class).

Basic indices become SHRINK / FLIP / RESHAPE; a step is pad+reshape+shrink.
Tensor indices gather by a one-hot product summed over the indexed axes (no
gather primitive), following NumPy/PyTorch placement: the index dimensions go
where the first indexed axis was when the indexed axes are adjacent, else first.
"""
from __future__ import annotations

from typing import Self

import numpy as np

from isa.ints import cdiv

from compiler.frontend.shapes import broadcast_shape, shape_error
from compiler.ir import dtypes


class IndexingMixin:
    def __getitem__(self, idx) -> Self:
        return _getitem(self, idx)

    def __setitem__(self, idx, value):
        raise TypeError("Tensor is immutable (lazy graph); build a new tensor with tc.where or tc.cat")


def _normalize(x, idx) -> list:
    T = type(x)
    if not isinstance(idx, tuple):
        idx = (idx,)
    idx = [T(i) if isinstance(i, (list, np.ndarray)) else i for i in idx]
    used = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise shape_error("getitem", [x.shape], "only one Ellipsis allowed")
    if used > x.ndim:
        raise shape_error("getitem", [x.shape], f"too many indices ({used}) for {x.ndim} dimensions")
    if Ellipsis in [i for i in idx if not isinstance(i, T)]:
        k = next(j for j, i in enumerate(idx) if i is Ellipsis)
        return idx[:k] + [slice(None)] * (x.ndim - used) + idx[k + 1:]
    return idx + [slice(None)] * (x.ndim - used)


def _getitem(x, idx):
    idx = _normalize(x, idx)
    bounds, flips, strides, out_shape, tensor_axes = [], [], [], [], []
    dim = 0
    for i in idx:
        if i is None:
            out_shape.append(1)
            continue
        n = x.shape[dim]
        if isinstance(n, str):  # a dynamic dimension can only be taken whole
            if not (isinstance(i, slice) and i == slice(None)):
                raise shape_error("getitem", [x.shape], f"dimension {dim} is dynamic ({n}); only ':' can index it")
            bounds.append((0, n)); flips.append(False); strides.append(1); out_shape.append(n)
            dim += 1
            continue
        if isinstance(i, type(x)):
            if i.dtype.is_float:
                raise shape_error("getitem", [x.shape, i.shape],
                                  f"tensor indices must be integer or bool, got {i.dtype}")
            tensor_axes.append((len(out_shape), i))
            bounds.append((0, n)); flips.append(False); strides.append(1); out_shape.append(n)
        elif isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            k = int(i)
            if not -n <= k < n:
                raise shape_error("getitem", [x.shape], f"index {k} out of range for dimension {dim} of size {n}")
            k %= n
            bounds.append((k, k + 1)); flips.append(False); strides.append(1)
        elif isinstance(i, slice):
            if any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)))
                   for v in (i.start, i.stop, i.step)):
                raise shape_error("getitem", [x.shape], f"slice {i!r}: bounds and step must be ints or None")
            if i.step == 0:
                raise shape_error("getitem", [x.shape], f"slice {i!r}: the step must not be 0")
            start, stop, step = i.indices(n)
            if step > 0:
                length = max(0, cdiv(stop - start, step))
                bounds.append((start, start + max(0, (length - 1) * step + 1) if length else start))
                flips.append(False)
            else:
                length = max(0, cdiv(start - stop, -step))
                lo = start - (length - 1) * -step if length else start
                bounds.append((lo, start + 1) if length else (0, 0))
                flips.append(True)
            strides.append(abs(step)); out_shape.append(length)
        else:
            raise shape_error("getitem", [x.shape], f"unsupported index {i!r}")
        dim += 1
    y = x.shrink(bounds)
    fl = [d for d, f in enumerate(flips) if f]
    if fl:
        y = y.flip(fl)
    for d, s in enumerate(strides):
        y = y._stride(d, s)
    y = y.reshape(tuple(out_shape))
    return _gather(y, tensor_axes) if tensor_axes else y


def _gather(y, tensor_axes):
    axes = [a for a, _ in tensor_axes]
    idxs = []
    for a, t in tensor_axes:
        if t.dtype == dtypes.bool_:
            raise shape_error("getitem", [y.shape, t.shape],
                              "boolean mask indexing has a data-dependent shape; use tc.where")
        n = y.shape[a]
        t = t.cast(dtypes.int32)
        idxs.append((t.lt(0)).where(t + n, t))
    s = broadcast_shape("getitem", *[t.shape for t in idxs])
    rest = [d for d in range(y.ndim) if d not in axes]
    # y laid out as (rest..., indexed...), then lifted over the index shape
    yp = y.permute(rest + axes)
    yp = yp.reshape((1,) * len(s) + yp.shape)
    onehot = None
    for k, (a, t) in enumerate(zip(axes, idxs)):
        n = y.shape[a]
        oh = t.expand(s).unsqueeze(-1).eq(type(y).arange(n))  # s + (n,)
        shape = s + (1,) * len(rest) + tuple(n if j == k else 1 for j in range(len(axes)))
        oh = oh.reshape(shape)
        onehot = oh if onehot is None else onehot.logical_and(oh)
    sel = onehot.cast(y.dtype if y.dtype != dtypes.bool_ else dtypes.int32)
    out = (yp.cast(sel.dtype) * sel).sum(tuple(range(-len(axes), 0)), dtype=sel.dtype).cast(y.dtype)
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    if adjacent and axes[0] > 0:
        p, ns = axes[0], len(s)
        order = list(range(ns, ns + p)) + list(range(ns)) + list(range(ns + p, out.ndim))
        out = out.permute(order)
    return out
