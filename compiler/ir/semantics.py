"""The reference meaning of each IR primitive, as a numpy function.

``apply(node, *arrays)`` computes one non-source, non-control node from the
values of its sources. The reference evaluator (``compiler.ir.evaluate``, which
is ``Device("numpy")``) calls it; the chip compiler's lowering is judged against
it. Results are always cast to the node's dtype, so integer ops wrap like the
chip's int lanes.
"""
from __future__ import annotations

import numpy as np

from isa.errors import TetrachipError

from compiler.ir.graph import Node, Ops, is_static


class FeedError(TetrachipError, ValueError):
    """A fed graph input of the wrong rank, shape or kind (a ``ValueError`` too)."""


class MissingFeedError(TetrachipError, KeyError):
    """A graph input that was not fed (a ``KeyError`` too)."""

    def __str__(self) -> str:             # the message, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class _Bound:
    """A node's op, dtype, shape and arg with its dynamic dimensions filled in."""
    __slots__ = ("op", "dtype", "shape", "arg")

    def __init__(self, op, dtype, shape, arg):
        self.op, self.dtype, self.shape, self.arg = op, dtype, shape, arg

_UNARY = {
    Ops.NEG: np.negative, Ops.RECIP: np.reciprocal, Ops.SQRT: np.sqrt, Ops.EXP: np.exp,
    Ops.LOG: np.log, Ops.SIN: np.sin, Ops.ATAN: np.arctan,
}
_BINARY = {
    Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
    Ops.CMPLT: np.less, Ops.CMPEQ: np.equal,
}
_REDUCE = {Ops.SUM: np.sum, Ops.PROD: np.prod, Ops.RMAX: np.max}


def _where(n, c, x, y):
    return np.where(c, x, y)


def _reshape(n, x):
    return x.reshape(n.shape)


def concrete(v, dims: dict):
    """``v`` (a shape, or nested tuples like SHRINK bounds) with dynamic dims replaced by their values."""
    if isinstance(v, str):
        if v not in dims:
            raise KeyError(f"dynamic dimension {v!r} is not bound by any fed input")
        return dims[v]
    if isinstance(v, tuple):
        return tuple(concrete(e, dims) for e in v)
    return v


def _permute(n, x):
    return np.transpose(x, n.arg)


def _expand(n, x):
    return np.broadcast_to(x, n.shape)


def _pad(n, x):
    out = np.zeros(n.shape, dtype=x.dtype)
    out[tuple(slice(b, b + d) for (b, _), d in zip(n.arg, x.shape))] = x
    return out


def _shrink(n, x):
    return x[tuple(slice(b, e) for b, e in n.arg)]


def _flip(n, x):
    return np.flip(x, n.arg)


def _cast(n, x):
    return x


_OTHER = {
    Ops.WHERE: _where, Ops.RESHAPE: _reshape, Ops.PERMUTE: _permute, Ops.EXPAND: _expand,
    Ops.PAD: _pad, Ops.SHRINK: _shrink, Ops.FLIP: _flip, Ops.CAST: _cast,
}


def apply(n: Node, *xs: np.ndarray, dims: dict | None = None) -> np.ndarray:
    """Value of node ``n`` given the values of its sources; ``dims`` binds dynamic dimensions."""
    if dims and not is_static(n.shape):
        n = _Bound(n.op, n.dtype, concrete(n.shape, dims), concrete(n.arg, dims))
    op = n.op
    if op in _UNARY:
        out = _UNARY[op](xs[0])
    elif op in _BINARY:
        out = _BINARY[op](xs[0], xs[1])
    elif op in _REDUCE:
        out = _REDUCE[op](xs[0], axis=n.arg, keepdims=True) if n.arg else xs[0]
    elif op in _OTHER:
        out = _OTHER[op](n, *xs)
    elif op is Ops.COMPOSITE:
        out = n.arg.evaluate(*xs)
    else:
        raise ValueError(f"{op.name} has no elementwise reference semantics (it is a source or control op)")
    return np.asarray(out).astype(n.dtype.np, copy=False)


def source_value(n: Node, feeds: dict) -> np.ndarray:
    """Value of a CONST, BUFFER or INPUT node (INPUT from ``feeds`` by name)."""
    if n.op is Ops.CONST:
        return np.asarray(n.arg, dtype=n.dtype.np)
    if n.op is Ops.BUFFER:
        return n.arg
    name = n.arg[0]
    if name not in feeds:
        raise KeyError(f"graph input {name!r} was not fed (feeds given: {sorted(feeds)})")
    return feeds[name]


def bind_inputs(inputs: dict, feeds: dict) -> dict:
    """Check fed arrays against INPUT placeholders (dynamic dims bound consistently). Returns name -> array."""
    return bind_inputs_and_dims(inputs, feeds)[0]


def bind_inputs_and_dims(inputs: dict, feeds: dict) -> tuple[dict, dict]:
    """As ``bind_inputs``, also returning the dynamic dims: (name -> array, dim name -> size)."""
    dims, out = {}, {}
    for name, node in inputs.items():
        if name not in feeds:
            raise MissingFeedError(f"graph input {name!r} was not fed (feeds given: {sorted(map(str, feeds))})")
        try:
            a = np.asarray(feeds[name].numpy() if hasattr(feeds[name], "node") else feeds[name])
        except (TypeError, ValueError) as e:
            raise FeedError(f"input {name!r}: not an array of numbers ({e})") from None
        if a.dtype.kind not in "biuf":
            raise FeedError(f"input {name!r}: must be numbers (bool, int or float), got numpy dtype {a.dtype}")
        if a.ndim != len(node.shape):
            raise FeedError(f"input {name!r}: expected rank {len(node.shape)} shape {node.shape}, got {a.shape}")
        for want, got in zip(node.shape, a.shape):
            if isinstance(want, str):
                if dims.setdefault(want, got) != got:
                    raise FeedError(f"input {name!r}: dynamic dim {want} bound to {dims[want]} and {got}")
            elif want != got:
                raise FeedError(f"input {name!r}: expected shape {node.shape}, got {a.shape}")
        out[name] = a.astype(node.dtype.np, copy=False)
    return out, dims
