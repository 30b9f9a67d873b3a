"""Composite recognition: rewrite rules over the IR in tinygrad's pattern-matcher style.

The frontend spells every layer with ~30 primitives (``compiler.frontend.functional`` and
``mathops``): a softmax is ``e * RECIP(EXPAND(SUM(e)))`` with ``e = EXP(x + NEG(EXPAND(RMAX(x))))``,
a LayerNorm a dozen nodes around a ``RECIP(SQRT(...))``. A back end that has a kernel for the
whole layer wants it back as one node. This module finds such subgraphs and replaces each by one
``Ops.COMPOSITE`` node whose ``arg`` is a ``Composite`` (kind, axes, eps, affine flags, constants,
causal flag) and whose reference meaning (``Composite.evaluate``, called by
``compiler.ir.semantics.apply``) is the float subgraph it replaced.

* ``UPat(op, src, name, arg, pred, view)``: a node pattern. ``src`` sub-patterns match the sources
  in order (either order for the commutative ADD and MUL); ``name`` captures the node, and a name
  met twice must capture structurally equal nodes (``same``: the frontend builds ``x - mean(x)``
  twice in a LayerNorm); ``view=True`` first looks through broadcasts (EXPAND, and RESHAPEs that
  only add or drop size-1 axes). ``scalar(name)`` matches a broadcast scalar constant (also a
  ``RECIP``/``NEG`` of one) and captures its float value.
* ``PatternMatcher([(UPat, fn), ...])``: ``fn(node, **captures)`` returns a replacement or None.
* ``graph_rewrite(outputs, pm)``: the rules applied bottom-up (``compiler.ir.passes.rewrite``)
  until nothing changes: inner composites are found first and outer rules match them (SiLU is
  ``x * COMPOSITE(sigmoid, x)``, tanh ``2 sigmoid(2x) - 1``, attention a matmul of a softmax).

``recognise(outputs)`` runs ``COMPOSITES``: softmax (with the max subtraction), LayerNorm and
RMSNorm (their weight and bias folded in when constant), GELU (erf and tanh forms), SiLU, sigmoid,
tanh, erf, a softmax of constant-masked scores (``where(mask, s, -inf)`` or ``s + mask``: a masked
softmax) and attention (``q @ k^T``, a scale, an additive, boolean or causal mask, softmax, ``@ v``).
It is not in the default pass list (``compiler.ir.passes.PASSES``): devices evaluate the primitives;
the chip compiler calls it (``compiler.lower.schedule.lift``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from compiler.ir.graph import Node, Ops, toposort

_ANY = object()


# ---------------------------------------------------------------------------------------------- composites

@dataclass(frozen=True)
class Composite:
    """The ``arg`` of an ``Ops.COMPOSITE`` node: which layer, and its constants.

    Sources: ``x`` (then the weight and the bias, each of ``x``'s shape, when ``affine`` says so) for
    the norms; ``x`` for the elementwise kinds; ``x`` (then a constant mask of ``x``'s shape when
    ``mask`` is ``"add"``: ``softmax(x + mask)``, or ``"bool"``: ``softmax(where(mask, x, -inf))``)
    for softmax; ``q, k, v`` (then the mask when ``mask`` is ``"add"`` or ``"bool"``) for attention,
    with ``q (..., Lq, d)``, ``k (..., Lk, d)``, ``v (..., Lk, dv)``."""
    kind: str                       # softmax layernorm rmsnorm gelu silu sigmoid tanh erf attention
    axes: tuple = ()                # reduced axes (softmax, norms)
    eps: float = 0.0
    affine: tuple = (False, False)  # (weight, bias) sources present (norms)
    consts: tuple = ()              # erf: (p, a1..a5) of the A&S form; gelu: ("erf", erf consts) or ("tanh", k, c)
    scale: float = 1.0              # attention: the scores' scale
    causal: bool = False
    mask: str = ""                  # softmax, attention: "", "add" (added) or "bool" (where(mask, s, -inf))

    def __str__(self) -> str:
        parts = [self.kind]
        if self.axes:
            parts.append(f"axes={self.axes}")
        if self.kind in ("layernorm", "rmsnorm"):
            parts.append(f"eps={self.eps:g}")
            parts += [n for n, f in zip(("weight", "bias"), self.affine) if f]
        if self.kind == "gelu":
            parts.append(self.consts[0])
        if self.kind == "softmax" and self.mask:
            parts.append(f"mask={self.mask}")
        if self.kind == "attention":
            parts.append(f"scale={self.scale:g}")
            parts += ["causal"] * self.causal + ([f"mask={self.mask}"] if self.mask else [])
        return " ".join(parts)

    def shape_of(self, src: tuple) -> tuple:
        """The node's shape (``compiler.ir.graph.infer_shape``); raises ValueError when the sources
        do not fit the kind."""
        x = src[0]
        if self.kind == "attention":
            q, k, v = src[:3]
            ok = (len(q.shape) >= 2 and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
                  and q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2])
            s_shape = q.shape[:-1] + (k.shape[-2],)
            if not ok or len(src) != 3 + (self.mask in ("add", "bool")) or \
                    any(m.shape != s_shape for m in src[3:]):
                raise ValueError("attention needs q (..., Lq, d), k (..., Lk, d), v (..., Lk, dv) and a mask of "
                                 "the scores' shape")
            return q.shape[:-1] + (v.shape[-1],)
        extra = sum(self.affine) + (self.kind == "softmax" and self.mask in ("add", "bool"))
        if len(src) != 1 + extra or any(s.shape != x.shape for s in src[1:]):
            raise ValueError(f"{self.kind} takes x and {extra} operand(s) of x's shape")
        if any(not 0 <= a < len(x.shape) for a in self.axes):
            raise ValueError(f"axes {self.axes} out of range")
        return x.shape

    def evaluate(self, *xs: np.ndarray) -> np.ndarray:
        """The float meaning (float64), the same formula the frontend composes."""
        xs = [np.asarray(a, np.float64) if np.asarray(a).dtype != np.bool_ else np.asarray(a) for a in xs]
        x, ax = xs[0], self.axes
        with np.errstate(all="ignore"):
            if self.kind == "softmax":
                x = masked(x, xs[1], self.mask) if self.mask else x
                e = np.exp(x - x.max(axis=ax, keepdims=True))
                return e / e.sum(axis=ax, keepdims=True)
            if self.kind in ("layernorm", "rmsnorm"):
                xc = x - x.mean(axis=ax, keepdims=True) if self.kind == "layernorm" else x
                y = xc / np.sqrt((xc * xc).mean(axis=ax, keepdims=True) + self.eps)
                rest = iter(xs[1:])
                y = y * next(rest) if self.affine[0] else y
                return y + next(rest) if self.affine[1] else y
            if self.kind == "sigmoid":
                return 1.0 / (1.0 + np.exp(-x))
            if self.kind == "tanh":
                return 2.0 / (1.0 + np.exp(-2.0 * x)) - 1.0
            if self.kind == "silu":
                return x / (1.0 + np.exp(-x))
            if self.kind == "erf":
                return _erf(x, self.consts)
            if self.kind == "gelu":
                if self.consts[0] == "tanh":
                    _, k, c = self.consts
                    return 0.5 * x * (1.0 + np.tanh(k * (x + c * x * x * x)))
                return 0.5 * x * (1.0 + _erf(x * self.consts[1], self.consts[2]))
            if self.kind == "attention":
                q, k, v = xs[:3]
                s = np.matmul(q, np.swapaxes(k, -1, -2)) * self.scale
                if self.causal:
                    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
                if self.mask:
                    s = masked(s, xs[3], self.mask)
                return np.matmul(Composite("softmax", (s.ndim - 1,)).evaluate(s), v)
        raise ValueError(f"unknown composite kind {self.kind!r}")


def masked(x: np.ndarray, mask: np.ndarray, kind: str) -> np.ndarray:
    """Scores ``x`` under a mask: ``x + mask`` (``kind="add"``) or ``where(mask, x, -inf)`` (``"bool"``)."""
    return np.where(mask, x, -np.inf) if kind == "bool" else x + mask


def _erf(y: np.ndarray, c: tuple) -> np.ndarray:
    """The Abramowitz-Stegun 7.1.26 form with the coefficients ``c = (p, a1, .., a5)`` found in the graph."""
    p, *a = c
    ay = np.abs(y)
    t = 1.0 / (1.0 + p * ay)
    poly = t * (a[0] + t * (a[1] + t * (a[2] + t * (a[3] + t * a[4]))))
    return np.sign(y) * (1.0 - poly * np.exp(-(ay * ay)))


def composite(kind: str, src, dtype=None, **kw) -> Node:
    """An ``Ops.COMPOSITE`` node of ``kind`` over ``src`` (dtype: the first source's)."""
    src = tuple(src)
    return Node(Ops.COMPOSITE, dtype or src[0].dtype, src, Composite(kind, **kw))


def is_composite(n: Node, *kinds: str) -> bool:
    return n.op is Ops.COMPOSITE and (not kinds or n.arg.kind in kinds)


# ---------------------------------------------------------------------------------------------- matching

def strip_view(n: Node) -> Node:
    """``n`` without the broadcasts on top of it: EXPANDs, and RESHAPEs that only add or drop size-1 axes."""
    while (n.op is Ops.EXPAND or (n.op is Ops.RESHAPE and
           [d for d in n.shape if d != 1] == [d for d in n.src[0].shape if d != 1])):
        n = n.src[0]
    return n


def _arg_key(a):
    if isinstance(a, np.ndarray):
        return ("nd", id(a))
    return a


def same(a: Node, b: Node, _memo: dict | None = None) -> bool:
    """Structural equality: the same op, dtype and arg over structurally equal sources (BUFFERs: the same array)."""
    if a is b:
        return True
    memo = {} if _memo is None else _memo
    key = (id(a), id(b))
    if key not in memo:
        memo[key] = (a.op is b.op and a.dtype == b.dtype and a.shape == b.shape and len(a.src) == len(b.src)
                     and a.op not in (Ops.INPUT, Ops.IF, Ops.LOOP) and _arg_eq(a.arg, b.arg)
                     and all(same(x, y, memo) for x, y in zip(a.src, b.src)))
    return memo[key]


def _arg_eq(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is b
    return a == b


@dataclass(frozen=True)
class UPat:
    """A node pattern; see the module docstring."""
    op: Any = None                  # an Ops, a tuple of Ops, or None (any)
    src: tuple | None = None
    name: str | None = None
    arg: Any = _ANY
    pred: Callable[[Node], bool] | None = None
    view: bool = False

    def match(self, n: Node, caps: dict) -> bool:
        """Does ``n`` match? On success ``caps`` holds the captures (it is left as it was otherwise)."""
        if self.view:
            n = strip_view(n)
        ops = self.op if isinstance(self.op, tuple) else (self.op,)
        if self.op is not None and n.op not in ops:
            return False
        if self.arg is not _ANY and not _arg_eq(n.arg, self.arg):
            return False
        if self.pred is not None and not self.pred(n):
            return False
        if self.name is not None and self.name in caps and not same(caps[self.name], n):
            return False
        if self.src is not None:
            if len(n.src) != len(self.src):
                return False
            orders = [n.src] + ([n.src[::-1]] if n.op in (Ops.ADD, Ops.MUL) and len(n.src) == 2 else [])
            for order in orders:
                c = dict(caps)
                if all(p.match(s, c) for p, s in zip(self.src, order)):
                    caps.update(c)
                    break
            else:
                return False
        if self.name is not None:
            caps.setdefault(self.name, n)
        return True


def scalar_value(n: Node) -> float | None:
    """The value of a broadcast scalar constant (through RESHAPE/EXPAND, RECIP, NEG, MUL of two), else None.
    A one-element BUFFER counts (an imported model's scalar initializer: ONNX's -inf fill, a norm's eps)."""
    n = strip_view(n)
    if n.op is Ops.CONST and not isinstance(n.arg, bool):
        return float(n.arg)
    if n.op is Ops.BUFFER and np.size(n.arg) == 1 and np.asarray(n.arg).dtype.kind == "f":
        return float(np.asarray(n.arg).reshape(()))
    if n.op in (Ops.RECIP, Ops.NEG):
        v = scalar_value(n.src[0])
        if v is None:
            return None
        return -v if n.op is Ops.NEG else (1.0 / v if v else None)
    if n.op is Ops.MUL:
        a, b = (scalar_value(s) for s in n.src)
        return None if a is None or b is None else a * b
    return None


@dataclass(frozen=True)
class _Scalar(UPat):
    """A broadcast scalar constant; captures its float value under ``name``."""

    def match(self, n: Node, caps: dict) -> bool:
        v = scalar_value(n)
        if v is None:
            return False
        if self.name in caps and not math.isclose(caps[self.name], v, rel_tol=1e-6):
            return False
        caps[self.name] = v
        return True


def scalar(name: str) -> UPat:
    return _Scalar(name=name)


@dataclass
class PatternMatcher:
    """Rules ``(UPat, fn)``: the first whose pattern matches and whose ``fn(node, **captures)`` returns a node wins."""
    rules: list = field(default_factory=list)

    def rewrite(self, n: Node) -> Node | None:
        for pat, fn in self.rules:
            caps: dict = {}
            if pat.match(n, caps):
                out = fn(n, **caps)
                if out is not None:
                    return out
        return None


def graph_rewrite(outputs, pm: PatternMatcher, max_rounds: int = 16) -> list[Node]:
    """``pm``'s rules applied bottom-up until the graph no longer changes."""
    from compiler.ir.passes import rewrite
    outputs = list(outputs)
    for _ in range(max_rounds):
        new = rewrite(outputs, pm.rewrite)
        if all(a is b for a, b in zip(new, outputs)):
            return new
        outputs = new
    return outputs


# ---------------------------------------------------------------------------------------------- rules

def _P(op=None, *src, **kw) -> UPat:
    return UPat(op, tuple(src) if src else None, **kw)


def _rsqrt(inner: UPat) -> UPat:
    """``1 / sqrt(inner)`` however it is broadcast: RECIP(SQRT) with views above either."""
    return _P(Ops.RECIP, _P(Ops.SQRT, inner, view=True), view=True)


def _mean(inner: UPat, s: str, n: str, view: bool = False) -> UPat:
    """``SUM(inner) * c`` (a mean when ``c`` is 1/count: checked by the rule)."""
    return _P(Ops.MUL, _P(Ops.SUM, inner, name=s), scalar(n), view=view)


def _count(x: Node, axes) -> float:
    """Elements per reduction (NaN when a reduced axis is dynamic: no constant can match it)."""
    dims = [x.shape[a] for a in axes]
    return math.prod(dims) if all(isinstance(d, int) for d in dims) else math.nan


def _no_inputs(n: Node) -> bool:
    return not any(m.op is Ops.INPUT for m in toposort([n]))


def _softmax(n, x, e, mx, s):
    if mx.arg != s.arg or x.shape != n.shape or not x.dtype.is_float:
        return None
    return composite("softmax", [x], n.dtype, axes=tuple(s.arg))


_E = _P(Ops.EXP, _P(Ops.ADD, UPat(name="x"), _P(Ops.NEG, _P(Ops.RMAX, UPat(name="x"), name="mx", view=True))),
        name="e")
SOFTMAX = _P(Ops.MUL, _E, _P(Ops.RECIP, _P(Ops.SUM, _E, name="s", view=True), view=True))


def _mask_of(x: Node) -> tuple[Node, Node, str] | None:
    """``(scores, mask, kind)`` when ``x`` is ``where(mask, s, -inf)`` (``"bool"``) or ``s + mask`` (``"add"``)
    with a constant mask; else None."""
    if x.op is Ops.WHERE and scalar_value(x.src[2]) == -math.inf and _no_inputs(x.src[0]) \
            and not _no_inputs(x.src[1]):
        return x.src[1], x.src[0], "bool"
    if x.op is Ops.ADD:
        for a, b in (x.src, x.src[::-1]):
            if _no_inputs(b) and not _no_inputs(a) and scalar_value(b) is None:
                return a, b, "add"
    return None


def _masked_softmax(n: Node, **_) -> Node | None:
    """``softmax(where(mask, s, -inf))`` or ``softmax(s + mask)`` with a constant mask: one masked softmax."""
    if n.arg.kind != "softmax" or n.arg.mask:
        return None
    m = _mask_of(n.src[0])
    if m is None or m[0].shape != n.shape or m[1].shape != n.shape:
        return None
    return Node(Ops.COMPOSITE, n.dtype, (m[0], m[1]), replace(n.arg, mask=m[2]))


def _norm(kind):
    def fn(n, x, xc, sq, inv, eps, **kw):
        axes = tuple(sq.arg)
        if not x.dtype.is_float or xc.shape != n.shape:
            return None
        if kind == "layernorm" and (kw["sm"].arg != sq.arg or not math.isclose(kw["inv_m"] * _count(x, axes), 1,
                                                                               rel_tol=1e-5)):
            return None
        if not math.isclose(inv * _count(x, axes), 1, rel_tol=1e-5):
            return None
        return composite(kind, [x], n.dtype, axes=axes, eps=eps)
    return fn


def _norm_pat(xc: UPat) -> UPat:
    var = _mean(_P(Ops.MUL, UPat(name="xc"), UPat(name="xc")), "sq", "inv")
    return _P(Ops.MUL, xc, _rsqrt(_P(Ops.ADD, var, scalar("eps"))))


_XC = _P(Ops.ADD, UPat(name="x"), _P(Ops.NEG, _mean(UPat(name="x"), "sm", "inv_m", view=True)), name="xc")
LAYERNORM = _norm_pat(_XC)
RMSNORM = _norm_pat(UPat(name="xc"))


def _rms(n, xc, sq, inv, eps):
    return _norm("rmsnorm")(n, xc, xc, sq, inv, eps)


def _affine(which):
    def fn(n, c, w):
        if not _no_inputs(w) or w.shape != n.shape or c.arg.affine[which] or (which == 0 and c.arg.affine[1]):
            return None
        aff = (True, c.arg.affine[1]) if which == 0 else (c.arg.affine[0], True)
        return Node(Ops.COMPOSITE, n.dtype, c.src + (w,), replace(c.arg, affine=aff))
    return fn


_NORM_C = UPat(Ops.COMPOSITE, name="c", pred=lambda m: m.arg.kind in ("layernorm", "rmsnorm"))
WEIGHT = _P(Ops.MUL, _NORM_C, UPat(name="w"))
BIAS = _P(Ops.ADD, _NORM_C, UPat(name="w"))

SIGMOID = _P(Ops.RECIP, _P(Ops.ADD, scalar("one"), _P(Ops.EXP, _P(Ops.NEG, UPat(name="x")))))
ONE_TIMES = _P(Ops.MUL, scalar("one"), UPat(name="y"))


def _sig_of(name: str) -> UPat:
    return UPat(Ops.COMPOSITE, (UPat(name=name),), pred=lambda m: m.arg.kind == "sigmoid")


TANH = _P(Ops.ADD, _P(Ops.MUL, scalar("two"), _sig_of("x2")), scalar("m1"))
_X2 = _P(Ops.MUL, scalar("two_in"), UPat(name="x"))
SILU = _P(Ops.MUL, UPat(name="x"), _sig_of("x"))


def _sign(y: str) -> UPat:
    """``sign(y)`` as the frontend spells it: ``CAST(0 < y) - CAST(y < 0)``."""
    zero = scalar("zero")
    return _P(Ops.ADD, _P(Ops.CAST, _P(Ops.CMPLT, zero, UPat(name=y))),
              _P(Ops.NEG, _P(Ops.CAST, _P(Ops.CMPLT, UPat(name=y), zero))))


def _erf_pat() -> UPat:
    a = _P(Ops.MUL, UPat(name="y"), _sign("y"), name="a")
    t = _P(Ops.RECIP, _P(Ops.ADD, scalar("one"), _P(Ops.MUL, scalar("p"), a)), name="t")
    poly = _P(Ops.MUL, t, scalar("a5"))
    for c in ("a4", "a3", "a2", "a1"):
        poly = _P(Ops.MUL, t, _P(Ops.ADD, scalar(c), poly))
    body = _P(Ops.ADD, scalar("one"), _P(Ops.NEG, _P(Ops.MUL, poly, _P(Ops.EXP, _P(Ops.NEG, _P(Ops.MUL, a, a))))))
    return _P(Ops.MUL, _sign("y"), body)


ERF = _erf_pat()


def _erf_rule(n, y, zero, one, p, a1, a2, a3, a4, a5, **_):
    if zero != 0 or one != 1 or not y.dtype.is_float:
        return None
    return composite("erf", [y], n.dtype, consts=(p, a1, a2, a3, a4, a5))


_HALF_X = _P(Ops.MUL, scalar("half"), UPat(name="x"))
GELU_ERF = _P(Ops.MUL, _HALF_X, _P(Ops.ADD, scalar("one"), UPat(Ops.COMPOSITE, (_P(Ops.MUL, UPat(name="x"),
                                                                                   scalar("k")),),
                                                                  name="erf", pred=lambda m: m.arg.kind == "erf")))
_CUBE = _P(Ops.MUL, _P(Ops.MUL, _P(Ops.MUL, scalar("c"), UPat(name="x")), UPat(name="x")), UPat(name="x"))
GELU_TANH = _P(Ops.MUL, _HALF_X, _P(Ops.ADD, scalar("one"), UPat(Ops.COMPOSITE, (
    _P(Ops.MUL, scalar("k"), _P(Ops.ADD, UPat(name="x"), _CUBE)),), pred=lambda m: m.arg.kind == "tanh")))


def _gelu_erf(n, x, half, one, k, erf):
    if half != 0.5 or one != 1 or not math.isclose(k, 1 / math.sqrt(2), rel_tol=1e-6):
        return None
    return composite("gelu", [x], n.dtype, consts=("erf", k, erf.arg.consts))


def _gelu_tanh(n, x, half, one, k, c):
    if half != 0.5 or one != 1 or not math.isclose(k, math.sqrt(2 / math.pi), rel_tol=1e-6):
        return None
    return composite("gelu", [x], n.dtype, consts=("tanh", k, c))


# --- attention -----------------------------------------------------------------------------------

def matmul_operands(n: Node) -> tuple[Node, Node] | None:
    """``(a, b)`` when ``n`` is ``a @ b`` as ``Tensor.matmul`` spells it (both at least 2-D):
    ``RESHAPE(SUM(MUL(EXPAND(RESHAPE(a)), EXPAND(RESHAPE(b))), axes=(-2,)))``, the unsqueezes
    maybe merged with reshapes below them (then ``a``/``b`` are rebuilt as reshapes)."""
    if n.op is not Ops.RESHAPE or n.src[0].op is not Ops.SUM:
        return None
    s = n.src[0]
    m = s.src[0]
    nd = len(m.shape)
    if m.op is not Ops.MUL or nd < 3 or tuple(s.arg) != (nd - 2,) or n.shape != m.shape[:-2] + m.shape[-1:]:
        return None
    for u, v in (m.src, m.src[::-1]):
        u0, v0 = (x.src[0] if x.op is Ops.EXPAND else x for x in (u, v))
        if u0.shape[-1] == 1 and u0.shape[:-1] == m.shape[:-1] and v0.shape[-3] == 1 \
                and v0.shape[:-3] + v0.shape[-2:] == m.shape[:-3] + m.shape[-2:] and m.shape[-1] != 1:
            return _unsqueezed(u0, u0.shape[:-1]), _unsqueezed(v0, v0.shape[:-3] + v0.shape[-2:])
    return None


def _unsqueezed(x: Node, shape: tuple) -> Node:
    """The operand below an unsqueeze: ``x``'s source when it has ``shape``, else a reshape of ``x``."""
    if x.op is Ops.RESHAPE and x.src[0].shape == shape:
        return x.src[0]
    return Node(Ops.RESHAPE, x.dtype, (x,), shape)


def _swap_last(x: Node) -> Node:
    """``x`` with its last two axes swapped (undoing a PERMUTE that did so)."""
    nd = len(x.shape)
    perm = tuple(range(nd - 2)) + (nd - 1, nd - 2)
    if x.op is Ops.PERMUTE and tuple(x.arg) == perm:
        return x.src[0]
    return Node(Ops.PERMUTE, x.dtype, (x,), perm)


def _scores(s: Node) -> tuple[Node, Node, float] | None:
    """``(q, k, scale)`` of ``s = (q @ k^T) * scale`` (or without the scale)."""
    mm = matmul_operands(s)
    if mm is not None:
        return mm[0], _swap_last(mm[1]), 1.0
    if s.op is Ops.MUL:
        for a, b in (s.src, s.src[::-1]):
            c, mm = scalar_value(b), matmul_operands(a)
            if c is not None and mm is not None:
                return mm[0], _swap_last(mm[1]), c
    return None


def _is_causal(mask: Node) -> bool:
    """Is a constant boolean mask the lower triangle (key index <= query index) in every batch element?"""
    if not _no_inputs(mask) or len(mask.shape) < 2:
        return False
    from compiler.ir.evaluate import evaluate
    (m,) = evaluate([mask], {})
    lq, lk = mask.shape[-2:]
    return bool(np.array_equal(m, np.broadcast_to(np.tril(np.ones((lq, lk), bool)), m.shape)))


def _attention(n: Node, **_) -> Node | None:
    """``softmax(mask(scale * q @ k^T)) @ v`` (softmax over the keys) -> one attention composite."""
    mm = matmul_operands(n)
    if mm is None or not is_composite(mm[0], "softmax"):
        return None
    p, v = mm
    s = p.src[0]
    if tuple(p.arg.axes) != (len(s.shape) - 1,):
        return None
    mask, kind = None, ""
    if p.arg.mask:                                  # a masked softmax (``_masked_softmax``)
        mask, kind = p.src[1], p.arg.mask
    elif s.op is Ops.WHERE and scalar_value(s.src[2]) == -math.inf:
        mask, kind, s = s.src[0], "bool", s.src[1]
    elif s.op is Ops.ADD:
        for a, b in (s.src, s.src[::-1]):
            if _scores(a) is not None and scalar_value(b) is None:
                mask, kind, s = b, "add", a
                break
    qk = _scores(s)
    if qk is None:
        return None
    q, k, scale = qk
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        return None
    causal = kind == "bool" and _is_causal(mask)
    src = [q, k, v] + ([mask] if kind and not causal else [])
    return composite("attention", src, n.dtype, scale=scale, causal=causal, mask="" if causal else kind)


_ONE_TIMES_RULE = (ONE_TIMES, lambda n, one, y: y if one == 1 and is_composite(y) and y.shape == n.shape else None)

#: The chip compiler's composites, most specific first (LayerNorm before RMSNorm: its core is an RMSNorm of x - mean).
COMPOSITES = PatternMatcher([
    (SOFTMAX, _softmax),
    (UPat(Ops.COMPOSITE), _masked_softmax),
    (LAYERNORM, _norm("layernorm")),
    (RMSNORM, _rms),
    (WEIGHT, _affine(0)),
    (BIAS, _affine(1)),
    (SIGMOID, lambda n, x, one: composite("sigmoid", [x], n.dtype) if one == 1 and x.dtype.is_float else None),
    _ONE_TIMES_RULE,
    (TANH, lambda n, x2, two, m1: _tanh(n, x2, two, m1)),
    (SILU, lambda n, x: composite("silu", [x], n.dtype)),
    (ERF, _erf_rule),
    (GELU_ERF, _gelu_erf),
    (GELU_TANH, _gelu_tanh),
    (UPat(Ops.RESHAPE), _attention),
])


def _tanh(n, x2, two, m1):
    caps: dict = {}
    if two != 2 or m1 != -1 or not _X2.match(x2, caps) or caps["two_in"] != 2:
        return None
    return composite("tanh", [caps["x"]], n.dtype)


def recognise(outputs) -> list[Node]:
    """``outputs`` with every subgraph ``COMPOSITES`` knows replaced by one ``Ops.COMPOSITE`` node."""
    return graph_rewrite(outputs, COMPOSITES)


__all__ = ["Composite", "UPat", "PatternMatcher", "graph_rewrite", "recognise", "scalar", "scalar_value",
           "same", "strip_view", "composite", "is_composite", "matmul_operands", "masked", "COMPOSITES"]
