"""Reverse-mode autodiff over the IR primitives.

Each primitive is a ``Function`` whose ``forward`` builds the forward node and
whose ``backward`` builds the gradient nodes from the output gradient — both
lazily, as graph nodes. Composed ops (everything in ``compiler.frontend.tensor``) get
their gradients by the chain rule through these, so adding an op to the
frontend never needs a gradient rule. ``backward`` walks the tape of
Functions recorded on Tensors (``Tensor._ctx``).
"""
from __future__ import annotations

import math

from compiler.ir import dtypes
from compiler.ir.graph import Node, Ops

_grad_enabled = [True]


class no_grad:
    """Context manager (and decorator) that stops recording the tape."""

    def __enter__(self):
        self.prev = _grad_enabled[0]
        _grad_enabled[0] = False

    def __exit__(self, *exc):
        _grad_enabled[0] = self.prev

    def __call__(self, fn):
        def wrapped(*a, **k):
            with no_grad():
                return fn(*a, **k)
        return wrapped


def grad_enabled() -> bool:
    return _grad_enabled[0]


# ---------------------------------------------------------------------------- node helpers

def n(op: Ops, *src: Node, arg=None, dtype=None) -> Node:
    return Node(op, dtype if dtype is not None else src[0].dtype, tuple(src), arg)


def const(like: Node, value) -> Node:
    """A scalar broadcast to ``like``'s shape and dtype."""
    c = Node(Ops.CONST, like.dtype, (), cast_scalar(value, like.dtype))
    if not like.shape:
        return c
    return n(Ops.EXPAND, n(Ops.RESHAPE, c, arg=(1,) * len(like.shape)), arg=like.shape)


def cast_scalar(value, dt):
    """A Python scalar as a constant of type ``dt``: refused (``ShapeError``) where ``dt`` cannot hold it
    (NaN, inf or an out-of-range number as an integer type, a finite number beyond float32), not wrapped."""
    import math

    import numpy as np
    from compiler.frontend.shapes import ShapeError
    if dt == dtypes.bool_:
        return bool(value)
    if dt.is_int:
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            raise ShapeError(f"the scalar {value} cannot be a {dt} constant")
        info = np.iinfo(dt.np)
        if not info.min <= value <= info.max:
            raise ShapeError(f"the scalar {value} does not fit {dt} ({info.min}..{info.max})")
        return int(np.array(value).astype(np.int64).astype(dt.np))
    if math.isfinite(value) and abs(value) > np.finfo(np.float32).max:
        raise ShapeError(f"the scalar {value} is beyond float32's range ({np.finfo(np.float32).max:.3g})")
    return float(value)


def cast(x: Node, dt) -> Node:
    return x if x.dtype == dt else n(Ops.CAST, x, arg=dt, dtype=dt)


# ---------------------------------------------------------------------------- the primitives

class Function:
    def __init__(self, *parents):
        self.parents = parents

    def forward(self, *xs: Node, **kw) -> Node:
        raise NotImplementedError

    def backward(self, g: Node):
        raise NotImplementedError


class Neg(Function):
    def forward(self, x): return n(Ops.NEG, x)
    def backward(self, g): return (n(Ops.NEG, g),)


class Recip(Function):
    def forward(self, x):
        self.y = n(Ops.RECIP, x)
        return self.y
    def backward(self, g): return (n(Ops.NEG, n(Ops.MUL, g, n(Ops.MUL, self.y, self.y))),)


class Sqrt(Function):
    def forward(self, x):
        self.y = n(Ops.SQRT, x)
        return self.y
    def backward(self, g): return (n(Ops.MUL, g, n(Ops.RECIP, n(Ops.MUL, self.y, const(self.y, 2.0)))),)


class Exp(Function):
    def forward(self, x):
        self.y = n(Ops.EXP, x)
        return self.y
    def backward(self, g): return (n(Ops.MUL, g, self.y),)


class Log(Function):
    def forward(self, x):
        self.x = x
        return n(Ops.LOG, x)
    def backward(self, g): return (n(Ops.MUL, g, n(Ops.RECIP, self.x)),)


class Sin(Function):
    def forward(self, x):
        self.x = x
        return n(Ops.SIN, x)
    def backward(self, g):
        cos = n(Ops.SIN, n(Ops.ADD, self.x, const(self.x, math.pi / 2)))
        return (n(Ops.MUL, g, cos),)


class Atan(Function):
    def forward(self, x):
        self.x = x
        return n(Ops.ATAN, x)
    def backward(self, g):
        x = self.x
        return (n(Ops.MUL, g, n(Ops.RECIP, n(Ops.ADD, const(x, 1.0), n(Ops.MUL, x, x)))),)


class Cast(Function):
    def forward(self, x, dtype):
        self.src_dtype = x.dtype
        return cast(x, dtype)
    def backward(self, g):
        return (cast(g, self.src_dtype) if self.src_dtype.is_float else None,)


class Add(Function):
    def forward(self, a, b): return n(Ops.ADD, a, b)
    def backward(self, g): return g, g


class Mul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return n(Ops.MUL, a, b)
    def backward(self, g): return n(Ops.MUL, g, self.b), n(Ops.MUL, g, self.a)


class Max(Function):
    """Elementwise maximum; at ties the gradient is split equally (as PyTorch does)."""
    def forward(self, a, b):
        self.a, self.b = a, b
        return n(Ops.MAX, a, b)
    def backward(self, g):
        a, b = self.a, self.b
        gt = cast(n(Ops.CMPLT, b, a, dtype=dtypes.bool_), g.dtype)
        eq = n(Ops.MUL, cast(n(Ops.CMPEQ, a, b, dtype=dtypes.bool_), g.dtype), const(g, 0.5))
        wa = n(Ops.ADD, gt, eq)
        wb = n(Ops.ADD, n(Ops.NEG, wa), const(g, 1.0))
        return n(Ops.MUL, g, wa), n(Ops.MUL, g, wb)


class CmpLt(Function):
    def forward(self, a, b): return n(Ops.CMPLT, a, b, dtype=dtypes.bool_)
    def backward(self, g): return None, None


class CmpEq(Function):
    def forward(self, a, b): return n(Ops.CMPEQ, a, b, dtype=dtypes.bool_)
    def backward(self, g): return None, None


class Where(Function):
    def forward(self, c, x, y):
        self.c = c
        return n(Ops.WHERE, c, x, y, dtype=x.dtype)
    def backward(self, g):
        z = const(g, 0.0)
        return None, n(Ops.WHERE, self.c, g, z, dtype=g.dtype), n(Ops.WHERE, self.c, z, g, dtype=g.dtype)


class Sum(Function):
    def forward(self, x, axes):
        self.shape = x.shape
        return n(Ops.SUM, x, arg=axes)
    def backward(self, g): return (n(Ops.EXPAND, g, arg=self.shape),)


class Prod(Function):
    """Product; its gradient ``g * prod / x`` assumes no zero in the reduced slice."""
    def forward(self, x, axes):
        self.x, self.y = x, n(Ops.PROD, x, arg=axes)
        return self.y
    def backward(self, g):
        gy = n(Ops.EXPAND, n(Ops.MUL, g, self.y), arg=self.x.shape)
        return (n(Ops.MUL, gy, n(Ops.RECIP, self.x)),)


class RMax(Function):
    """Max reduction; the gradient is shared equally among the maxima of a slice."""
    def forward(self, x, axes):
        self.x, self.axes = x, axes
        self.y = n(Ops.RMAX, x, arg=axes)
        return self.y
    def backward(self, g):
        x = self.x
        mask = cast(n(Ops.CMPEQ, x, n(Ops.EXPAND, self.y, arg=x.shape), dtype=dtypes.bool_), g.dtype)
        count = n(Ops.EXPAND, n(Ops.SUM, mask, arg=self.axes), arg=x.shape)
        return (n(Ops.MUL, n(Ops.MUL, mask, n(Ops.RECIP, count)), n(Ops.EXPAND, g, arg=x.shape)),)


class Reshape(Function):
    def forward(self, x, shape):
        self.shape = x.shape
        return n(Ops.RESHAPE, x, arg=tuple(shape))
    def backward(self, g): return (n(Ops.RESHAPE, g, arg=self.shape),)


class Permute(Function):
    def forward(self, x, order):
        self.order = tuple(order)
        return n(Ops.PERMUTE, x, arg=self.order)
    def backward(self, g):
        inv = tuple(sorted(range(len(self.order)), key=lambda i: self.order[i]))
        return (n(Ops.PERMUTE, g, arg=inv),)


class Expand(Function):
    def forward(self, x, shape):
        self.shape = x.shape
        return n(Ops.EXPAND, x, arg=tuple(shape))
    def backward(self, g):
        axes = tuple(i for i, (a, b) in enumerate(zip(self.shape, g.shape)) if a != b)
        return (n(Ops.SUM, g, arg=axes) if axes else g,)


class Pad(Function):
    def forward(self, x, pads):
        self.x_shape = x.shape
        self.pads = tuple(pads)
        return n(Ops.PAD, x, arg=self.pads)
    def backward(self, g):
        return (n(Ops.SHRINK, g, arg=tuple((b, b + d) for (b, _), d in zip(self.pads, self.x_shape))),)


class Shrink(Function):
    def forward(self, x, bounds):
        self.x_shape, self.bounds = x.shape, tuple(bounds)
        return n(Ops.SHRINK, x, arg=self.bounds)
    def backward(self, g):
        return (n(Ops.PAD, g, arg=tuple((b, d - e) for (b, e), d in zip(self.bounds, self.x_shape))),)


class Flip(Function):
    def forward(self, x, axes):
        self.axes = tuple(axes)
        return n(Ops.FLIP, x, arg=self.axes)
    def backward(self, g): return (n(Ops.FLIP, g, arg=self.axes),)


# ---------------------------------------------------------------------------- the tape walk

def backward(root, grad_node: Node, sink: dict | None = None, boundary=None) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every tensor on ``root``'s tape that requires it.

    With ``sink``, nothing is written to ``.grad``: the gradient of each leaf, and of each tensor for
    which ``boundary(t)`` is true (the walk stops there), goes to ``sink[id(t)] = (t, node)``.
    Control flow uses this to differentiate a branch body on its own."""
    def stop(t):
        return t._ctx is None or (boundary is not None and t is not root and boundary(t))

    order, seen, stack = [], set(), [(root, False)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in seen or stop(t):
            continue
        seen.add(id(t))
        stack.append((t, True))
        stack.extend((p, False) for p in t._ctx.parents if p.requires_grad and id(p) not in seen)
    grads = {id(root): grad_node}
    for t in reversed(order):
        g = grads.pop(id(t), None)
        if g is None:
            continue
        pgs = t._ctx.backward(g)
        for p, pg in zip(t._ctx.parents, pgs):
            if pg is None or not p.requires_grad:
                continue
            assert pg.shape == p.shape, (type(t._ctx).__name__, pg.shape, p.shape)
            if stop(p) and sink is not None:
                sink[id(p)] = (p, pg if id(p) not in sink else n(Ops.ADD, sink[id(p)][1], pg))
            elif p._ctx is None:  # a leaf: accumulate into .grad
                p.grad = type(p)(pg) if p.grad is None else type(p)(n(Ops.ADD, p.grad.node, pg))
            else:
                grads[id(p)] = pg if id(p) not in grads else n(Ops.ADD, grads[id(p)], pg)
