"""The lazy ``Tensor``: builds an IR graph; nothing computes until ``.realize()`` / ``.numpy()``.

Only the primitives in ``compiler.autograd`` create nodes; every other op here
is composed from them (and so differentiable for free). Shape and dtype errors
are raised by the call that is wrong, naming the op and the shapes.
Neural-network functions (conv, pooling, norms, losses) are in
``compiler.functional`` and attached to Tensor as methods at the end of that
module.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from . import autograd as ag
from . import dtypes, engine
from .dtypes import DType
from .ir import Node, Ops, fmt_shape, is_static


class ShapeError(ValueError):
    """A shape or dtype error raised where the user wrote the call."""


def _err(op: str, shapes, msg: str) -> ShapeError:
    return ShapeError(f"{op}: {msg} (shapes: {', '.join(fmt_shape(s) for s in shapes)})")


def broadcast_shape(op: str, *shapes) -> tuple:
    nd = max(len(s) for s in shapes)
    padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise _err(op, shapes, "shapes cannot broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _axis(op: str, shape, axis: int) -> int:
    nd = len(shape)
    if not -nd <= axis < max(nd, 1):
        raise _err(op, [shape], f"dimension {axis} out of range for rank {nd}")
    return axis % nd if nd else 0


def _static(op: str, shape, d):
    if not isinstance(d, int):
        raise _err(op, [shape], f"needs a static size, dimension is dynamic ({d})")
    return d


class Tensor:
    """A lazy n-d array with a dtype (float32, int8, int32, bool) and optional gradient tracking."""

    __array_priority__ = 1000  # numpy scalars defer to Tensor's operators

    def __init__(self, data, dtype=None, requires_grad: bool = False):
        if isinstance(data, Node):
            node = data if dtype is None or data.dtype == dtypes.to_dtype(dtype) else ag.cast(data, dtypes.to_dtype(dtype))
        elif isinstance(data, Tensor):
            node = data.node
        else:
            arr = np.asarray(data)
            dt = dtypes.to_dtype(dtype) if dtype is not None else dtypes.from_numpy(arr.dtype)
            arr = np.array(arr, dtype=dt.np, copy=True)
            arr.setflags(write=False)
            node = Node(Ops.BUFFER, dt, (), arr)
        self.node: Node = node
        self._ctx = None
        self.grad: Tensor | None = None
        self.requires_grad = False
        if requires_grad:
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
        return self.shape if dim is None else self.shape[_axis("size", self.shape, dim)]

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        if self.node.op is Ops.BUFFER:
            return f"Tensor({np.array2string(self.node.arg, separator=', ')}, dtype={self.dtype})"
        return f"<Tensor {self.node.op.name} shape={fmt_shape(self.shape)} dtype={self.dtype} (lazy)>"

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        if flag and self._ctx is not None:
            raise RuntimeError("requires_grad_: only leaf tensors (not results of ops) can be made parameters")
        if flag and not self.dtype.is_float:
            raise TypeError(f"requires_grad: only float tensors can require gradients, got {self.dtype}")
        self.requires_grad = flag
        return self

    def detach(self) -> "Tensor":
        return Tensor(self.node)

    def graph(self) -> str:
        """The IR graph that computes this tensor, one node a line."""
        from .ir import to_text
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
            raise ValueError(f"item: tensor of shape {fmt_shape(self.shape)} has {self.numel()} elements")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def backward(self, gradient: "Tensor | None" = None) -> None:
        if not self.requires_grad:
            raise RuntimeError("backward: tensor does not require grad (no parameter on its tape)")
        if gradient is None:
            if self.numel() != 1:
                raise _err("backward", [self.shape], "gradient can be implied only for a single-element tensor")
            g = ag.const(self.node, 1.0)
        else:
            g = _as_tensor(gradient, self.dtype).node
            if g.shape != self.shape:
                raise _err("backward", [self.shape, g.shape], "gradient shape differs from tensor shape")
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
        shape = _shape_arg(shape)
        dt = dtypes.to_dtype(dtype) if dtype is not None else dtypes.scalar_dtype(value)
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
        arr = np.arange(start, stop, step)
        dt = dtypes.to_dtype(dtype) if dtype is not None else (
            dtypes.int32 if all(isinstance(v, int) for v in (start, stop, step)) else dtypes.float32)
        return Tensor(arr, dt)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype=dtypes.float32) -> "Tensor":
        return Tensor(np.eye(n, m), dtype)

    @staticmethod
    def linspace(start, end, steps: int, dtype=dtypes.float32) -> "Tensor":
        return Tensor(np.linspace(start, end, steps), dtype)

    @staticmethod
    def placeholder(name: str, shape, dtype=dtypes.float32) -> "Tensor":
        """A named graph input fed at run time; a ``str`` entry in ``shape`` is a dynamic dimension."""
        return Tensor(Node(Ops.INPUT, dtypes.to_dtype(dtype), (), (name, tuple(shape))))

    def zeros_like(self, dtype=None) -> "Tensor":
        return Tensor.full(self.shape, 0, dtype or self.dtype)

    def ones_like(self, dtype=None) -> "Tensor":
        return Tensor.full(self.shape, 1, dtype or self.dtype)

    def full_like(self, value, dtype=None) -> "Tensor":
        return Tensor.full(self.shape, value, dtype or self.dtype)

    # -------------------------------------------------------------- dtype
    def cast(self, dtype) -> "Tensor":
        dt = dtypes.to_dtype(dtype)
        return self if dt == self.dtype else Tensor._apply(ag.Cast, self, dtype=dt)

    to = cast

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
            raise _err("neg", [self.shape], "negation of a bool tensor (use logical_not)")
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
        if not reverse and not isinstance(o, Tensor) and float(o) == int(o) and abs(o) <= 8:
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
    def __rmatmul__(self, o): return _as_tensor(o, self.dtype).matmul(self)

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
        return Tensor._apply(ag.CmpEq, self.bool(), Tensor.full(self.shape, False, dtypes.bool_))

    def logical_and(self, o): return self.bool().mul(_as_tensor(o, dtypes.bool_).bool())
    def logical_or(self, o): return self.bool().add(_as_tensor(o, dtypes.bool_).bool())

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
        raise TypeError("the truth value of a lazy Tensor is not known; use .item(), tc.where or tc.cond")

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

    # -------------------------------------------------------------- unary math
    def exp(self): return Tensor._apply(ag.Exp, self._f())
    def log(self): return Tensor._apply(ag.Log, self._f())
    def sqrt(self): return Tensor._apply(ag.Sqrt, self._f())
    def sin(self): return Tensor._apply(ag.Sin, self._f())
    def atan(self): return Tensor._apply(ag.Atan, self._f())
    def rsqrt(self): return self.sqrt().reciprocal()
    def square(self): return self * self
    def exp2(self): return (self._f() * math.log(2)).exp()
    def log2(self): return self.log() * (1 / math.log(2))
    def cos(self): return (self._f() + math.pi / 2).sin()
    def tan(self): return self.sin() / self.cos()
    def asin(self): x = self._f(); return (x / (1 - x * x).sqrt()).atan()
    def acos(self): return math.pi / 2 - self.asin()
    def acosh(self): x = self._f(); return (x + (x * x - 1).sqrt()).log()
    def asinh(self): x = self._f(); return (x + (x * x + 1).sqrt()).log()
    def atanh(self): x = self._f(); return ((1 + x) / (1 - x)).log() * 0.5

    def sign(self):
        return self.gt(0).cast(self.dtype) - self.lt(0).cast(self.dtype)

    def abs(self):
        return self * self.sign() if self.dtype.is_float else where(self.lt(0), self.neg(), self)

    def relu(self): return where(self.gt(0), self, 0)
    def sigmoid(self): return (1 + (-self._f()).exp()).reciprocal()
    def tanh(self): return 2.0 * (2.0 * self._f()).sigmoid() - 1.0
    def silu(self): return self * self.sigmoid()
    def softplus(self): x = self._f(); return x.relu() + (1 + (-x.abs()).exp()).log()
    def leaky_relu(self, slope=0.01): return where(self.gt(0), self, self * slope)
    def elu(self, alpha=1.0): return where(self.gt(0), self, alpha * (self._f().exp() - 1))

    def selu(self):
        alpha, scale = 1.6732632423543772, 1.0507009873554805
        return scale * self.elu(alpha)

    def erf(self):
        """Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7)."""
        x = self._f()
        a = x.abs()
        t = (1 + 0.3275911 * a).reciprocal()
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        return x.sign() * (1 - poly * (-(a * a)).exp())

    def gelu(self, approximate: str = "none"):
        x = self._f()
        if approximate == "tanh":
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())

    # -------------------------------------------------------------- reductions
    def _axes(self, op, axis) -> tuple:
        if axis is None:
            return tuple(range(self.ndim))
        axis = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = sorted({_axis(op, self.shape, a) for a in axis})
        return tuple(axes)

    def _reduce(self, fn, op, axis, keepdim):
        axes = self._axes(op, axis)
        out = Tensor._apply(fn, self, axes=axes) if axes else self
        if keepdim:
            return out
        return out.reshape(tuple(d for i, d in enumerate(self.shape) if i not in axes))

    def sum(self, axis=None, keepdim=False, dtype=None):
        dt = dtypes.to_dtype(dtype) if dtype is not None else (self.dtype if self.dtype.is_float else dtypes.int32)
        return self.cast(dt)._reduce(ag.Sum, "sum", axis, keepdim)

    def prod(self, axis=None, keepdim=False):
        x = self if self.dtype.is_float else self.cast(dtypes.int32)
        return x._reduce(ag.Prod, "prod", axis, keepdim)

    def max(self, axis=None, keepdim=False):
        x = self if self.dtype != dtypes.bool_ else self.cast(dtypes.int32)
        return x._reduce(ag.RMax, "max", axis, keepdim).cast(self.dtype)

    def min(self, axis=None, keepdim=False):
        x = self if self.dtype.is_float else self.cast(dtypes.int32)
        return x.neg().max(axis, keepdim).neg().cast(self.dtype)

    def mean(self, axis=None, keepdim=False):
        axes = self._axes("mean", axis)
        count = math.prod(_static("mean", self.shape, self.shape[a]) for a in axes)
        return self._f().sum(axis, keepdim) * (1.0 / count if count else float("nan"))

    def var(self, axis=None, keepdim=False, correction: int = 1):
        axes = self._axes("var", axis)
        count = math.prod(self.shape[a] for a in axes)
        d = self._f() - self._f().mean(axes, keepdim=True)
        return (d * d).sum(axes, keepdim) / max(count - correction, 0)

    def std(self, axis=None, keepdim=False, correction: int = 1):
        return self.var(axis, keepdim, correction).sqrt()

    def logsumexp(self, axis=None, keepdim=False):
        m = self._f().max(axis, keepdim=True).detach()
        out = (self - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.reshape(tuple(d for i, d in enumerate(self.shape) if i not in self._axes("logsumexp", axis)))

    def any(self, axis=None, keepdim=False):
        return self.bool().cast(dtypes.int32).max(axis, keepdim).bool()

    def all(self, axis=None, keepdim=False):
        return self.bool().logical_not().any(axis, keepdim).logical_not()

    def argmax(self, axis=None, keepdim=False):
        """Index of the first maximum along ``axis`` (of the flattened tensor when None), int32."""
        if axis is None:
            return self.reshape(-1).argmax(0)
        ax = _axis("argmax", self.shape, axis)
        n = self.shape[ax]
        x = self if self.dtype.is_float else self.cast(dtypes.int32)
        is_max = x.eq(x.max(ax, keepdim=True)).cast(dtypes.int32)
        rev = Tensor(np.arange(n, 0, -1, dtype=np.int32)).reshape((n,) + (1,) * (self.ndim - ax - 1))
        return (n - (is_max * rev).max(ax, keepdim)).cast(dtypes.int32)

    def argmin(self, axis=None, keepdim=False):
        x = self if self.dtype.is_float else self.cast(dtypes.int32)
        return x.neg().argmax(axis, keepdim)

    # -------------------------------------------------------------- movement
    def reshape(self, *shape) -> "Tensor":
        shape = _shape_arg(shape)
        if shape.count(-1) > 1:
            raise _err("reshape", [self.shape], f"only one -1 allowed in {shape}")
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            total = self.numel() if is_static(self.shape) else None
            if total is None or known == 0 or total % known:
                raise _err("reshape", [self.shape], f"cannot infer -1 in {shape}")
            shape = tuple(total // known if d == -1 else d for d in shape)
        if shape == self.shape:
            return self
        if is_static(self.shape) and is_static(shape) and math.prod(shape) != self.numel():
            raise _err("reshape", [self.shape], f"cannot reshape {self.numel()} elements to {fmt_shape(shape)}")
        try:
            return Tensor._apply(ag.Reshape, self, shape=shape)
        except ValueError as e:
            raise _err("reshape", [self.shape], str(e)) from None

    view = reshape

    def flatten(self, start_dim=0, end_dim=-1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        s, e = _axis("flatten", self.shape, start_dim), _axis("flatten", self.shape, end_dim)
        return self.reshape(self.shape[:s] + (-1,) + self.shape[e + 1:]) if is_static(self.shape[s:e + 1]) else self

    def unsqueeze(self, dim: int) -> "Tensor":
        d = dim % (self.ndim + 1) if -self.ndim - 1 <= dim <= self.ndim else None
        if d is None:
            raise _err("unsqueeze", [self.shape], f"dimension {dim} out of range")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def squeeze(self, dim=None) -> "Tensor":
        if dim is None:
            return self.reshape(tuple(d for d in self.shape if d != 1))
        d = _axis("squeeze", self.shape, dim)
        return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

    def permute(self, *order) -> "Tensor":
        order = tuple(_axis("permute", self.shape, a) for a in _shape_arg(order))
        if sorted(order) != list(range(self.ndim)):
            raise _err("permute", [self.shape], f"{order} is not a permutation of {self.ndim} dimensions")
        return self if order == tuple(range(self.ndim)) else Tensor._apply(ag.Permute, self, order=order)

    def transpose(self, dim0=-2, dim1=-1) -> "Tensor":
        order = list(range(self.ndim))
        a, b = _axis("transpose", self.shape, dim0), _axis("transpose", self.shape, dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> "Tensor":
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape) -> "Tensor":
        shape = _shape_arg(shape)
        if len(shape) < self.ndim:
            raise _err("expand", [self.shape], f"cannot expand to fewer dimensions {shape}")
        own = (1,) * (len(shape) - self.ndim) + self.shape
        shape = tuple(o if s == -1 else s for s, o in zip(shape, own))
        if any(o != s and o != 1 for o, s in zip(own, shape)):
            raise _err("expand", [self.shape], f"cannot expand to {fmt_shape(shape)}")
        return self._broadcast_to(shape)

    def pad(self, padding, value=0) -> "Tensor":
        """``padding`` is one ``(before, after)`` pair per dimension (None = no padding); negative values crop."""
        if len(padding) != self.ndim:
            raise _err("pad", [self.shape], f"need one (before, after) pair per dimension, got {padding}")
        padding = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
        x = self
        if any(b < 0 or a < 0 for b, a in padding):
            x = x.shrink([(-min(b, 0), d + min(a, 0)) for (b, a), d in zip(padding, self.shape)])
            padding = [(max(b, 0), max(a, 0)) for b, a in padding]
        if all(p == (0, 0) for p in padding):
            return x
        out = Tensor._apply(ag.Pad, x, pads=tuple(padding))
        if value == 0:
            return out
        mask = Tensor._apply(ag.Pad, Tensor.full(x.shape, True, dtypes.bool_), pads=tuple(padding))
        return where(mask, out, value)

    def shrink(self, bounds) -> "Tensor":
        if len(bounds) != self.ndim:
            raise _err("shrink", [self.shape], f"need one (start, end) per dimension, got {bounds}")
        bounds = tuple((0, d) if b is None or isinstance(d, str) and tuple(b) == (0, d) else (int(b[0]), int(b[1]))
                       for b, d in zip(bounds, self.shape))
        if all(b == (0, d) for b, d in zip(bounds, self.shape)):
            return self
        if any(isinstance(d, str) and b != (0, d) for b, d in zip(bounds, self.shape)):
            raise _err("shrink", [self.shape], "a dynamic dimension can only be kept whole")
        if any(not 0 <= s <= e <= d for (s, e), d in zip(bounds, self.shape) if isinstance(d, int)):
            raise _err("shrink", [self.shape], f"bounds {bounds} out of range")
        return Tensor._apply(ag.Shrink, self, bounds=bounds)

    def flip(self, dims) -> "Tensor":
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        axes = tuple(sorted({_axis("flip", self.shape, d) for d in dims}))
        return Tensor._apply(ag.Flip, self, axes=axes) if axes else self

    def _stride(self, axis: int, step: int) -> "Tensor":
        """Every ``step``-th element along ``axis`` (pad, reshape, shrink; no strided primitive)."""
        if step == 1:
            return self
        n = self.shape[axis]
        m = -(-n // step)
        x = self.pad([(0, m * step - n) if i == axis else (0, 0) for i in range(self.ndim)])
        x = x.reshape(self.shape[:axis] + (m, step) + self.shape[axis + 1:])
        x = x.shrink([(0, 1) if i == axis + 1 else None for i in range(x.ndim)])
        return x.reshape(self.shape[:axis] + (m,) + self.shape[axis + 1:])

    def contiguous(self) -> "Tensor":
        """No-op: the IR has no memory layout; the chip compiler chooses layouts."""
        return self

    def __getitem__(self, idx) -> "Tensor":
        from .indexing import getitem
        return getitem(self, idx)

    def __setitem__(self, idx, value):
        raise TypeError("Tensor is immutable (lazy graph); build a new tensor with tc.where or tc.cat")

    def split(self, split_size, dim=0):
        d = _axis("split", self.shape, dim)
        n = self.shape[d]
        sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else []) \
            if isinstance(split_size, int) else list(split_size)
        if sum(sizes) != n:
            raise _err("split", [self.shape], f"sizes {sizes} do not add up to {n} along dimension {d}")
        out, start = [], 0
        for s in sizes:
            out.append(self.shrink([(start, start + s) if i == d else None for i in range(self.ndim)]))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim=0):
        n = self.shape[_axis("chunk", self.shape, dim)]
        return self.split(max(-(-n // chunks), 1), dim)

    def repeat(self, *repeats) -> "Tensor":
        """PyTorch's repeat (numpy's tile): repeat the whole tensor ``repeats[i]`` times along dim i."""
        reps = _shape_arg(repeats)
        if len(reps) < self.ndim:
            raise _err("repeat", [self.shape], f"need at least {self.ndim} repeat counts, got {reps}")
        shape = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape(tuple(v for d in shape for v in (1, d)))
        x = x.expand(tuple(v for r, d in zip(reps, shape) for v in (r, d)))
        return x.reshape(tuple(r * d for r, d in zip(reps, shape)))

    def tile(self, *reps) -> "Tensor":
        reps = _shape_arg(reps)
        return self.repeat((1,) * (self.ndim - len(reps)) + reps)

    def repeat_interleave(self, repeats: int, dim=0) -> "Tensor":
        d = _axis("repeat_interleave", self.shape, dim)
        x = self.unsqueeze(d + 1)
        x = x.expand(x.shape[:d + 1] + (repeats,) + x.shape[d + 2:])
        return x.reshape(self.shape[:d] + (self.shape[d] * repeats,) + self.shape[d + 1:])

    # -------------------------------------------------------------- linear algebra
    def matmul(self, o) -> "Tensor":
        a, b = self, _as_tensor(o, self.dtype)
        if a.ndim == 0 or b.ndim == 0:
            raise _err("matmul", [a.shape, b.shape], "both operands need at least one dimension")
        va, vb = a.ndim == 1, b.ndim == 1
        if va:
            a = a.unsqueeze(0)
        if vb:
            b = b.unsqueeze(-1)
        if a.shape[-1] != b.shape[-2]:
            raise _err("matmul", [self.shape, _as_tensor(o).shape], "contracted dimensions differ")
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

def _shape_arg(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(shape)


def _as_tensor(x, dtype: DType | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float, np.number)):
        return Tensor.full((), x, dtypes.scalar_dtype(x, dtype))
    return Tensor(x)


def where(cond, x, y) -> Tensor:
    """Elementwise select, broadcast over all three; x and y promote to a common dtype."""
    c = _as_tensor(cond).bool()
    xt = x if isinstance(x, Tensor) else None
    yt = y if isinstance(y, Tensor) else None
    ref = xt if xt is not None else yt
    if ref is None:
        xt, yt = _as_tensor(x), _as_tensor(y)
    else:
        xt = xt if xt is not None else _as_tensor(x, ref.dtype)
        yt = yt if yt is not None else _as_tensor(y, ref.dtype)
    dt = dtypes.promote(xt.dtype, yt.dtype)
    shape = broadcast_shape("where", c.shape, xt.shape, yt.shape)
    return Tensor._apply(ag.Where, c._broadcast_to(shape), xt.cast(dt)._broadcast_to(shape),
                         yt.cast(dt)._broadcast_to(shape))


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim``: each piece is padded to the full length, then they are added."""
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("cat: needs at least one tensor")
    first = tensors[0]
    d = _axis("cat", first.shape, dim)
    shapes = [t.shape for t in tensors]
    for t in tensors:
        if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d):
            raise _err("cat", shapes, f"shapes must match except in dimension {d}")
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
    tensors = [_as_tensor(t) for t in tensors]
    if len({t.shape for t in tensors}) > 1:
        raise _err("stack", [t.shape for t in tensors], "all tensors must have one shape")
    d = dim % (tensors[0].ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], d)


def vstack(tensors) -> Tensor:
    return cat([t.reshape(1, -1) if t.ndim == 1 else t for t in map(_as_tensor, tensors)], 0)


def hstack(tensors) -> Tensor:
    tensors = [_as_tensor(t) for t in tensors]
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


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
