"""Composed elementwise math, activations and reductions: a mixin of ``Tensor``.

Everything here is built from the primitives applied through ``self._apply``
(see ``compiler.frontend.autograd``), so each op is differentiable without a rule of its own.
The mixin does not import ``compiler.frontend.tensor``: new tensors come from ``self._apply``,
``type(self)`` (the Tensor class) and Tensor's own methods.
"""
from __future__ import annotations

import math
from typing import Self

import numpy as np

from compiler.frontend import autograd as ag
from compiler.frontend.shapes import ShapeError, flag, int_arg, norm_axes, norm_axis, shape_error, static_dim
from compiler.ir import dtypes


class MathMixin:
    # -------------------------------------------------------------- unary math
    def exp(self) -> Self: return self._apply(ag.Exp, self._f())
    def log(self) -> Self: return self._apply(ag.Log, self._f())
    def sqrt(self) -> Self: return self._apply(ag.Sqrt, self._f())
    def sin(self) -> Self: return self._apply(ag.Sin, self._f())
    def atan(self) -> Self: return self._apply(ag.Atan, self._f())
    def rsqrt(self) -> Self: return self.sqrt().reciprocal()
    def square(self) -> Self: return self * self
    def exp2(self) -> Self: return (self._f() * math.log(2)).exp()
    def log2(self) -> Self: return self.log() * (1 / math.log(2))
    def cos(self) -> Self: return (self._f() + math.pi / 2).sin()
    def tan(self) -> Self: return self.sin() / self.cos()
    def asin(self) -> Self: x = self._f(); return (x / (1 - x * x).sqrt()).atan()
    def acos(self) -> Self: return math.pi / 2 - self.asin()
    def acosh(self) -> Self: x = self._f(); return (x + (x * x - 1).sqrt()).log()
    def asinh(self) -> Self: x = self._f(); return (x + (x * x + 1).sqrt()).log()
    def atanh(self) -> Self: x = self._f(); return ((1 + x) / (1 - x)).log() * 0.5

    def sign(self) -> Self:
        return self.gt(0).cast(self.dtype) - self.lt(0).cast(self.dtype)

    def abs(self) -> Self:
        return self * self.sign() if self.dtype.is_float else self.lt(0).where(self.neg(), self)

    def relu(self) -> Self: return self.gt(0).where(self, 0)
    def sigmoid(self) -> Self: return (1 + (-self._f()).exp()).reciprocal()
    def tanh(self) -> Self: return 2.0 * (2.0 * self._f()).sigmoid() - 1.0
    def silu(self) -> Self: return self * self.sigmoid()
    def softplus(self) -> Self: x = self._f(); return x.relu() + (1 + (-x.abs()).exp()).log()
    def leaky_relu(self, slope=0.01) -> Self: return self.gt(0).where(self, self * slope)
    def elu(self, alpha=1.0) -> Self: return self.gt(0).where(self, alpha * (self._f().exp() - 1))

    def selu(self) -> Self:
        alpha, scale = 1.6732632423543772, 1.0507009873554805
        return scale * self.elu(alpha)

    def erf(self) -> Self:
        """Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7)."""
        x = self._f()
        a = x.abs()
        t = (1 + 0.3275911 * a).reciprocal()
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        return x.sign() * (1 - poly * (-(a * a)).exp())

    def gelu(self, approximate: str = "none") -> Self:
        if not isinstance(approximate, str) or approximate not in ("none", "tanh"):
            raise ShapeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r:.40}")
        x = self._f()
        if approximate == "tanh":
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())

    # -------------------------------------------------------------- reductions
    def _axes(self, op, axis) -> tuple:
        return norm_axes(op, self.shape, axis)

    def _reduce(self, fn, op, axis, keepdim) -> Self:
        axes = self._axes(op, axis)
        keepdim = flag(op, "keepdim", keepdim)
        out = self._apply(fn, self, axes=axes) if axes else self
        if keepdim:
            return out
        return out.reshape(tuple(d for i, d in enumerate(self.shape) if i not in axes))

    def sum(self, axis=None, keepdim=False, dtype=None) -> Self:
        dt = dtypes.to_dtype(dtype) if dtype is not None else (self.dtype if self.dtype.is_float else dtypes.int32)
        return self.cast(dt)._reduce(ag.Sum, "sum", axis, keepdim)

    def prod(self, axis=None, keepdim=False) -> Self:
        x = self if self.dtype.is_float else self.cast(dtypes.int32)
        return x._reduce(ag.Prod, "prod", axis, keepdim)

    def max(self, axis=None, keepdim=False) -> Self:
        if any(self.shape[a] == 0 for a in self._axes("max", axis)):
            raise shape_error("max", [self.shape], f"a maximum over an empty dimension (axis {axis}) has no value")
        x = self if self.dtype != dtypes.bool_ else self.cast(dtypes.int32)
        return x._reduce(ag.RMax, "max", axis, keepdim).cast(self.dtype)

    def min(self, axis=None, keepdim=False) -> Self:
        x = self if self.dtype.is_float else self.cast(dtypes.int32)
        return x.neg().max(axis, keepdim).neg().cast(self.dtype)

    def mean(self, axis=None, keepdim=False) -> Self:
        axes = self._axes("mean", axis)
        count = math.prod(static_dim("mean", self.shape, self.shape[a]) for a in axes)
        return self._f().sum(axis, keepdim) * (1.0 / count if count else float("nan"))

    def var(self, axis=None, keepdim=False, correction: int = 1) -> Self:
        axes = self._axes("var", axis)
        correction = int_arg("var", "correction", correction, 0)
        count = math.prod(self.shape[a] for a in axes)
        d = self._f() - self._f().mean(axes, keepdim=True)
        return (d * d).sum(axes, keepdim) / max(count - correction, 0)

    def std(self, axis=None, keepdim=False, correction: int = 1) -> Self:
        return self.var(axis, keepdim, correction).sqrt()

    def logsumexp(self, axis=None, keepdim=False) -> Self:
        keepdim = flag("logsumexp", "keepdim", keepdim)
        m = self._f().max(axis, keepdim=True).detach()
        out = (self - m).exp().sum(axis, keepdim=True).log() + m
        if keepdim:
            return out
        return out.reshape(tuple(d for i, d in enumerate(self.shape) if i not in self._axes("logsumexp", axis)))

    def any(self, axis=None, keepdim=False) -> Self:
        return self.bool().cast(dtypes.int32).max(axis, keepdim).bool()

    def all(self, axis=None, keepdim=False) -> Self:
        return self.bool().logical_not().any(axis, keepdim).logical_not()

    def argmax(self, axis=None, keepdim=False) -> Self:
        """Index of the first maximum along ``axis`` (of the flattened tensor when None), int32."""
        keepdim = flag("argmax", "keepdim", keepdim)
        if axis is None:
            return self.reshape(-1).argmax(0)
        ax = norm_axis("argmax", self.shape, axis)
        n = self.shape[ax]
        x = self if self.dtype.is_float else self.cast(dtypes.int32)
        is_max = x.eq(x.max(ax, keepdim=True)).cast(dtypes.int32)
        rev = type(self)(np.arange(n, 0, -1, dtype=np.int32)).reshape((n,) + (1,) * (self.ndim - ax - 1))
        return (n - (is_max * rev).max(ax, keepdim)).cast(dtypes.int32)

    def argmin(self, axis=None, keepdim=False) -> Self:
        x = self if self.dtype.is_float else self.cast(dtypes.int32)
        return x.neg().argmax(axis, keepdim)
