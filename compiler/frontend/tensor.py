"""The lazy ``Tensor``: builds an IR graph; nothing computes until ``.realize()`` / ``.numpy()``.

Only the primitives in ``compiler.frontend.autograd`` create nodes; every other op here
is composed from them (and so differentiable for free). Shape and dtype errors
are raised by the call that is wrong, naming the op and the shapes (``compiler.frontend.shapes``).
Elementwise math and reductions are in ``compiler.frontend.mathops``, movement ops in
``compiler.frontend.movement``, indexing in ``compiler.frontend.indexing``: mixins of Tensor that
never import this module (they make new tensors with ``self._apply``, ``type(self)`` and Tensor's
own methods). Neural-network functions (conv, pooling, norms, losses) are in
``compiler.frontend.functional`` and attached to Tensor as methods at the end of that module.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from compiler.frontend import autograd as ag
from compiler.ir import dtypes
from compiler.ir import engine
from compiler.ir.dtypes import DType
from compiler.ir.graph import Node, Ops, fmt_shape
from compiler.frontend.indexing import IndexingMixin
from compiler.frontend.mathops import MathMixin
from compiler.frontend.movement import MovementMixin
from compiler.frontend.shapes import (MAX_NUMEL, ArgumentError, ShapeError, UsageError, broadcast_shape, check_shape,
                                      flag, norm_axis, shape_error)


class Tensor(MathMixin, MovementMixin, IndexingMixin):
    """A lazy n-d array with a dtype (float32, int8, int32, bool) and optional gradient tracking."""

    __array_priority__ = 1000  # numpy scalars defer to Tensor's operators

    def __init__(self, data, dtype=None, requires_grad: bool = False):
        if isinstance(data, Node):
            dt = None if dtype is None else dtypes.to_dtype(dtype)
            node = data if dt is None or data.dtype == dt else ag.cast(data, dt)
        elif isinstance(data, Tensor):
            node = data.node
        else:
            arr = _data_array(data, dtype)
            dt = dtypes.from_numpy(arr.dtype)
            node = Node(Ops.BUFFER, dt, (), arr)
        self.node: Node = node
        self._ctx = None
        self.grad: Tensor | None = None
        self.requires_grad = False
        if flag("tensor", "requires_grad", requires_grad):
            self.requires_grad_(True)

    # -------------------------------------------------------------- basics
    @property
    def shape(self) -> tuple:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[norm_axis("size", self.shape, dim)]

    def numel(self) -> int:
        return math.prod(self.shape)

    def __iter__(self):
        if not self.shape:
            raise ArgumentError("iteration over a 0-d tensor")
        if not isinstance(self.shape[0], int):
            raise ArgumentError(f"iteration over a dynamic dimension ({self.shape[0]}); use tc.loop")
        return (self[i] for i in range(self.shape[0]))

    def __len__(self) -> int:
        if not self.shape:
            raise ArgumentError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        if self.node.op is Ops.BUFFER:
            return f"Tensor({np.array2string(self.node.arg, separator=', ')}, dtype={self.dtype})"
        return f"<Tensor {self.node.op.name} shape={fmt_shape(self.shape)} dtype={self.dtype} (lazy)>"

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        flag = _flag("requires_grad", "flag", flag)
        if flag and self._ctx is not None:
            raise UsageError("requires_grad_: only leaf tensors (not results of ops) can be made parameters")
        if flag and not self.dtype.is_float:
            raise ArgumentError(f"requires_grad: only float tensors can require gradients, got {self.dtype}")
        self.requires_grad = flag
        return self

    def detach(self) -> "Tensor":
        return Tensor(self.node)

    def graph(self) -> str:
        """The IR graph that computes this tensor, one node a line."""
        from compiler.ir.graph import to_text
        return to_text([self.node])

    def realize(self, feeds: dict | None = None, device=None) -> "Tensor":
        engine.realize([self], feeds, device)
        return self

    def numpy(self, feeds: dict | None = None, device=None) -> np.ndarray:
        if self.node.op is Ops.BUFFER:
            return np.array(self.node.arg)
        if feeds is not None:  # graphs with placeholders are not cached: compute each time
            return np.array(engine.compute([self.node], feeds, device)[0])
        return np.array(self.realize(device=device).node.arg)

    def item(self):
        if self.numel() != 1:
            raise ShapeError(f"item: tensor of shape {fmt_shape(self.shape)} has {self.numel()} elements")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def backward(self, gradient: "Tensor | None" = None) -> None:
        if not self.requires_grad:
            raise UsageError("backward: tensor does not require grad (no parameter on its tape)")
        if gradient is None:
            if self.numel() != 1:
                raise shape_error("backward", [self.shape], "gradient can be implied only for a single-element tensor")
            g = ag.const(self.node, 1.0)
        else:
            g = as_tensor(gradient, self.dtype).node
            if g.shape != self.shape:
                raise shape_error("backward", [self.shape, g.shape], "gradient shape differs from tensor shape")
        ag.backward(self, g)

    # -------------------------------------------------------------- applying primitives
    @staticmethod
    def _apply(fn_cls, *parents: "Tensor", **kw) -> "Tensor":
        ctx = fn_cls(*parents)
        out = Tensor(ctx.forward(*[p.node for p in parents], **kw))
        if ag.grad_enabled() and out.dtype.is_float and any(p.requires_grad for p in parents):
            out.requires_grad, out._ctx = True, ctx
        return out

    # -------------------------------------------------------------- creation
    @staticmethod
    def full(shape, value, dtype=None) -> "Tensor":
        return Tensor._full(check_shape("full", shape), value, dtype)

    @staticmethod
    def _full(shape: tuple, value, dtype=None) -> "Tensor":
        """``full`` of a shape already checked (a tensor's own, which may have a dynamic dimension)."""
        natural = dtypes.scalar_dtype(value)          # refuses a value that is not a scalar
        dt = dtypes.to_dtype(dtype) if dtype is not None else natural
        c = Tensor(Node(Ops.CONST, dt, (), ag.cast_scalar(value, dt)))
        return c.reshape((1,) * len(shape)).expand(shape) if shape else c

    @staticmethod
    def zeros(*shape, dtype=dtypes.float32) -> "Tensor":
        return Tensor.full(shape, 0, dtype)

    @staticmethod
    def ones(*shape, dtype=dtypes.float32) -> "Tensor":
        return Tensor.full(shape, 1, dtype)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None) -> "Tensor":
        if stop is None:
            start, stop = 0, start
        for what, v in (("start", start), ("stop", stop), ("step", step)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
                raise ArgumentError(f"arange: {what} must be a finite number, got {v!r}")
        start, stop, step = (v.item() if isinstance(v, np.generic) else v for v in (start, stop, step))
        if step == 0:
            raise ShapeError("arange: step must not be 0")
        if any(abs(v) > np.iinfo(np.int64).max for v in (start, stop, step)):
            raise ShapeError(f"arange: start, stop and step must be within int64, got {start}, {stop}, {step}")
        check_shape("arange", (max(0, math.ceil((stop - start) / step)),))
        arr = np.arange(start, stop, step)
        dt = dtypes.to_dtype(dtype) if dtype is not None else (
            dtypes.int32 if all(isinstance(v, int) for v in (start, stop, step)) else dtypes.float32)
        return Tensor(arr, dt)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype=dtypes.float32) -> "Tensor":
        n, m = check_shape("eye", (n, n if m is None else m))
        return Tensor(np.eye(n, m), dtype)

    @staticmethod
    def linspace(start, end, steps: int, dtype=dtypes.float32) -> "Tensor":
        check_shape("linspace", (steps,))
        for what, v in (("start", start), ("end", end)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ArgumentError(f"linspace: {what} must be a number, got {v!r}")
        return Tensor(np.linspace(start, end, steps), dtype)

    @staticmethod
    def placeholder(name: str, shape, dtype=dtypes.float32) -> "Tensor":
        """A named graph input fed at run time; a ``str`` entry in ``shape`` is a dynamic dimension."""
        if not isinstance(name, str) or not name:
            raise ArgumentError(f"placeholder: the name must be a non-empty string, got {name!r}")
        return Tensor(Node(Ops.INPUT, dtypes.to_dtype(dtype), (), (name, check_shape("placeholder", shape, True))))

    def zeros_like(self, dtype=None) -> "Tensor":
        return Tensor._full(self.shape, 0, dtype or self.dtype)

    def ones_like(self, dtype=None) -> "Tensor":
        return Tensor._full(self.shape, 1, dtype or self.dtype)

    def full_like(self, value, dtype=None) -> "Tensor":
        return Tensor._full(self.shape, value, dtype or self.dtype)

    # -------------------------------------------------------------- dtype
    def cast(self, dtype) -> "Tensor":
        dt = dtypes.to_dtype(dtype)
        return self if dt == self.dtype else Tensor._apply(ag.Cast, self, dtype=dt)

    def float(self) -> "Tensor":
        return self.cast(dtypes.float32)

    def int(self) -> "Tensor":
        return self.cast(dtypes.int32)

    def bool(self) -> "Tensor":
        return self.cast(dtypes.bool_)

    def _f(self) -> "Tensor":
        """self as a float tensor (for transcendental ops on integer inputs, as PyTorch does)."""
        return self if self.dtype.is_float else self.cast(dtypes.float32)

    # -------------------------------------------------------------- broadcasting
    def _broadcasted(self, other, op: str, reverse: bool = False, dtype: DType | None = None):
        reverse = flag(op, "reverse", reverse)
        a = self
        b = other if isinstance(other, Tensor) else Tensor.full((), other, dtypes.scalar_dtype(other, self.dtype))
        if reverse:
            a, b = b, a
        dt = dtype or dtypes.promote(a.dtype, b.dtype)
        a, b = a.cast(dt), b.cast(dt)
        shape = broadcast_shape(op, a.shape, b.shape)
        return a._broadcast_to(shape), b._broadcast_to(shape)

    def _broadcast_to(self, shape) -> "Tensor":
        if self.shape == tuple(shape):
            return self
        x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if self.ndim < len(shape) else self
        return Tensor._apply(ag.Expand, x, shape=tuple(shape))

    # -------------------------------------------------------------- elementwise arithmetic
    def add(self, o, reverse=False):
        return Tensor._apply(ag.Add, *self._broadcasted(o, "add", reverse))

    def mul(self, o, reverse=False):
        return Tensor._apply(ag.Mul, *self._broadcasted(o, "mul", reverse))

    def neg(self):
        if self.dtype == dtypes.bool_:
            raise shape_error("neg", [self.shape], "negation of a bool tensor (use logical_not)")
        return Tensor._apply(ag.Neg, self)

    def sub(self, o, reverse=False):
        a, b = self._broadcasted(o, "sub", reverse)
        return a.add(b.neg())

    def div(self, o, reverse=False):
        a, b = self._broadcasted(o, "div", reverse)
        return a._f().mul(b._f().reciprocal())

    def reciprocal(self):
        return Tensor._apply(ag.Recip, self._f())

    def pow(self, o, reverse=False):
        reverse = flag("pow", "reverse", reverse)
        if not reverse and not isinstance(o, Tensor) and not isinstance(o, (int, float, np.number)):
            raise ArgumentError(f"pow: the exponent must be a number or a Tensor, got {type(o).__name__} {o!r}")
        if not reverse and not isinstance(o, Tensor) and math.isfinite(o) and float(o) == int(o) and abs(o) <= 8:
            e = int(o)
            out, base = None, self if e >= 0 else self._f().reciprocal()
            for _ in range(abs(e)):
                out = base if out is None else out * base
            return out if out is not None else self.ones_like()
        if not reverse and not isinstance(o, Tensor) and o == 0.5:
            return self.sqrt()
        a, b = self._broadcasted(o, "pow", reverse)
        a, b = a._f(), b._f()
        return a.log().mul(b).exp()

    __add__ = add
    __mul__ = mul
    __sub__ = sub
    __truediv__ = div
    __pow__ = pow
    __neg__ = neg
    def __radd__(self, o): return self.add(o, True)
    def __rmul__(self, o): return self.mul(o, True)
    def __rsub__(self, o): return self.sub(o, True)
    def __rtruediv__(self, o): return self.div(o, True)
    def __rpow__(self, o): return self.pow(o, True)
    def __matmul__(self, o): return self.matmul(o)
    def __rmatmul__(self, o): return as_tensor(o, self.dtype).matmul(self)

    # -------------------------------------------------------------- comparisons and selection
    def lt(self, o, reverse=False):
        return Tensor._apply(ag.CmpLt, *self._broadcasted(o, "lt", reverse))

    def eq(self, o):
        return Tensor._apply(ag.CmpEq, *self._broadcasted(o, "eq"))

    def gt(self, o): return self.lt(o, True)
    def le(self, o): return self.gt(o).logical_not()
    def ge(self, o): return self.lt(o).logical_not()
    def ne(self, o): return self.eq(o).logical_not()

    def logical_not(self):
        return Tensor._apply(ag.CmpEq, self.bool(), Tensor._full(self.shape, False, dtypes.bool_))

    def logical_and(self, o): return self.bool().mul(as_tensor(o, dtypes.bool_).bool())
    def logical_or(self, o): return self.bool().add(as_tensor(o, dtypes.bool_).bool())

    __lt__ = lt
    __gt__ = gt
    __le__ = le
    __ge__ = ge
    __eq__ = eq  # type: ignore[assignment]
    __ne__ = ne  # type: ignore[assignment]
    __hash__ = object.__hash__
    def __invert__(self): return self.logical_not()
    def __and__(self, o): return self.logical_and(o)
    def __or__(self, o): return self.logical_or(o)

    def __bool__(self):
        raise ArgumentError("the truth value of a lazy Tensor is not known; use .item(), tc.where or tc.cond")

    def where(self, x, y):
        """``x`` where self is true else ``y`` (broadcast)."""
        return where(self, x, y)

    def maximum(self, o):
        return Tensor._apply(ag.Max, *self._broadcasted(o, "maximum"))

    def minimum(self, o):
        a, b = self._broadcasted(o, "minimum")
        if a.dtype.is_float:
            return a.neg().maximum(b.neg()).neg()
        return where(a.lt(b), a, b)

    def clamp(self, min=None, max=None):  # noqa: A002 (PyTorch's names)
        out = self
        if min is not None:
            out = out.maximum(min)
        if max is not None:
            out = out.minimum(max)
        return out

    clip = clamp

    # -------------------------------------------------------------- linear algebra
    def matmul(self, o) -> "Tensor":
        a, b = self, as_tensor(o, self.dtype)
        if a.ndim == 0 or b.ndim == 0:
            raise shape_error("matmul", [a.shape, b.shape], "both operands need at least one dimension")
        va, vb = a.ndim == 1, b.ndim == 1
        if va:
            a = a.unsqueeze(0)
        if vb:
            b = b.unsqueeze(-1)
        if a.shape[-1] != b.shape[-2]:
            raise shape_error("matmul", [self.shape, as_tensor(o).shape], "contracted dimensions differ")
        broadcast_shape("matmul", a.shape[:-2], b.shape[:-2])
        dt = dtypes.promote(a.dtype, b.dtype)
        out = (a.cast(dt).unsqueeze(-1) * b.cast(dt).unsqueeze(-3)).sum(-2, dtype=dt)
        if va:
            out = out.squeeze(-2)
        if vb:
            out = out.squeeze(-1)
        return out

    def dot(self, o) -> "Tensor":
        return self.matmul(o)

    def linear(self, weight: "Tensor", bias: "Tensor | None" = None) -> "Tensor":
        out = self.matmul(weight.T)
        return out if bias is None else out + bias


# ---------------------------------------------------------------------------- free functions

_flag = flag          # requires_grad_'s parameter is named flag


def as_tensor(x, dtype: DType | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float, np.number)):
        return Tensor.full((), x, dtypes.scalar_dtype(x, dtype))
    return Tensor(x)


def where(cond, x, y) -> Tensor:
    """Elementwise select, broadcast over all three; x and y promote to a common dtype."""
    c = as_tensor(cond).bool()
    xt = x if isinstance(x, Tensor) else None
    yt = y if isinstance(y, Tensor) else None
    ref = xt if xt is not None else yt
    if ref is None:
        xt, yt = as_tensor(x), as_tensor(y)
    else:
        xt = xt if xt is not None else as_tensor(x, ref.dtype)
        yt = yt if yt is not None else as_tensor(y, ref.dtype)
    dt = dtypes.promote(xt.dtype, yt.dtype)
    shape = broadcast_shape("where", c.shape, xt.shape, yt.shape)
    return Tensor._apply(ag.Where, c._broadcast_to(shape), xt.cast(dt)._broadcast_to(shape),
                         yt.cast(dt)._broadcast_to(shape))


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim``: each piece is padded to the full length, then they are added."""
    tensors = [as_tensor(t) for t in _sequence("cat", tensors)]
    if not tensors:
        raise ShapeError("cat: needs at least one tensor")
    first = tensors[0]
    if any(t.ndim == 0 for t in tensors):
        raise shape_error("cat", [t.shape for t in tensors], "a 0-d tensor cannot be concatenated (stack them)")
    d = norm_axis("cat", first.shape, dim)
    shapes = [t.shape for t in tensors]
    for t in tensors:
        if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d):
            raise shape_error("cat", shapes, f"shapes must match except in dimension {d}")
    dt = first.dtype
    for t in tensors[1:]:
        dt = dtypes.promote(dt, t.dtype)
    total = sum(t.shape[d] for t in tensors)
    out, start = None, 0
    for t in tensors:
        p = t.cast(dt if dt != dtypes.bool_ else dtypes.int32).pad(
            [(start, total - start - t.shape[d]) if i == d else (0, 0) for i in range(t.ndim)])
        out = p if out is None else out + p
        start += t.shape[d]
    return out.cast(dt)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = [as_tensor(t) for t in _sequence("stack", tensors)]
    if not tensors:
        raise ShapeError("stack: needs at least one tensor")
    if len({t.shape for t in tensors}) > 1:
        raise shape_error("stack", [t.shape for t in tensors], "all tensors must have one shape")
    d = norm_axis("stack", tensors[0].shape + (1,), dim)
    return cat([t.unsqueeze(d) for t in tensors], d)


def vstack(tensors) -> Tensor:
    return cat([t.reshape(1, -1) if t.ndim == 1 else t for t in map(as_tensor, _sequence("vstack", tensors))], 0)


def hstack(tensors) -> Tensor:
    tensors = [as_tensor(t) for t in _sequence("hstack", tensors)]
    return cat(tensors, 0 if tensors and tensors[0].ndim == 1 else 1)


def _sequence(op: str, tensors) -> list:
    """The tensors of ``cat``/``stack``: a list or tuple (of Tensors, arrays or numbers)."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise ArgumentError(f"{op}: takes a list or tuple of tensors, got {type(tensors).__name__}")
    return list(tensors)


def _data_array(data, dtype) -> np.ndarray:
    """``tc.tensor(data, dtype)``'s values as a read-only array of the frontend type: data that is not a
    rectangular array of numbers, or values the type cannot hold (NaN or inf or out-of-range numbers as an
    integer type, a finite float64 beyond float32), are refused rather than wrapped or rounded to inf."""
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as e:     # ragged nested lists
        raise ArgumentError(f"tensor: data is not a rectangular array of numbers ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise ArgumentError(f"tensor: data must be numbers (bool, int or float), got {type(data).__name__} "
                            f"of numpy dtype {arr.dtype}")
    if arr.size > MAX_NUMEL:
        raise ShapeError(f"tensor: {arr.size} elements, more than the limit of {MAX_NUMEL}")
    dt = dtypes.to_dtype(dtype) if dtype is not None else dtypes.from_numpy(arr.dtype)
    if dt.is_int and arr.size and arr.dtype.kind in "iuf":
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ShapeError(f"tensor: NaN or inf cannot be stored as {dt}")
        info = np.iinfo(dt.np)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise ShapeError(f"tensor: values {lo}..{hi} do not fit {dt} ({info.min}..{info.max})")
    with np.errstate(over="ignore"):               # a float64 beyond float32: refused just below
        out = np.array(arr, dtype=dt.np, copy=True)
    if dt.is_float and arr.dtype.kind == "f" and arr.dtype.itemsize > 4 and out.size \
            and np.isinf(out).any() and np.isfinite(arr[np.isinf(out)]).any():
        raise ShapeError(f"tensor: a finite value beyond float32's range ({np.finfo(np.float32).max:.3g})")
    out.setflags(write=False)
    return out


def realize(*tensors: Tensor, feeds: dict | None = None, device=None) -> None:
    """Compute several tensors in one execution (shared subgraphs once)."""
    engine.realize(tensors, feeds, device)


def zeros(*shape, dtype=dtypes.float32, requires_grad=False):
    return Tensor.zeros(*shape, dtype=dtype).requires_grad_(requires_grad)


def ones(*shape, dtype=dtypes.float32, requires_grad=False):
    return Tensor.ones(*shape, dtype=dtype).requires_grad_(requires_grad)


def full(shape, value, dtype=None): return Tensor.full(shape, value, dtype)
def arange(start, stop=None, step=1, dtype=None): return Tensor.arange(start, stop, step, dtype)
def eye(n, m=None, dtype=dtypes.float32): return Tensor.eye(n, m, dtype)
def tensor(data, dtype=None, requires_grad=False): return Tensor(data, dtype, requires_grad)
