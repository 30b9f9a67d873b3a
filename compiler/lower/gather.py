"""Embedding lookup: rows of a constant table selected by an integer input (``W[idx]``,
``nn.Embedding``, ``F.embedding``), one kernel kind of the ordinary pipeline.

The frontend spells ``W[idx]`` as a one-hot contraction (``compiler.frontend.indexing._gather``):
``sum_j W[j, :] * (wrap(idx) == arange(V)[j])`` with ``wrap(i) = i + V if i < 0 else i``. ``match``
finds that pattern in a prepared graph (a SUM over the last axis of a constant times a comparison of
an integer input against an arange) and checks, by evaluating the graph's own nodes on probe
indices, that every position selects exactly the row the chip selects (``chip_rows``): a negative
index counts from the end, and an index outside ``-V..V-1`` selects no row (zeros), as in the
frontend. ``compiler.lower.schedule.lift`` turns a match into a ``GatherKernel``.

Quantized form: the table in int8 with one scale (``s = max|W| / 127``), which is the output's scale,
so the kernel only moves bytes: the integer reference is ``W_q[rows]`` (a zero row for an index
outside the table). The chip's code is ``compiler.lower.gather_lower``.

This module holds only numpy and the IR (no imports of the lifter), like ``compiler.lower.bmm``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.ir import semantics
from compiler.ir.graph import Node, Ops
from compiler.lower.bmm import varies

_MOVES = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP}
_ELEMENTWISE = {Ops.NEG, Ops.CAST, Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPEQ, Ops.WHERE}
#: the largest one-hot checked at every row position (``_probe``)
_FULL = 1 << 21
#: the int32 extremes, always among the probe indices
_I32 = (int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max))


@dataclass
class GatherKernel:
    """``out[t, :] = table[chip_rows(idx[pos[t]])]`` for every token ``t``: the table's rows (a zero
    row for an index outside it) selected by an int32 input tensor."""
    name: str
    src: int                        # the int32 index tensor (a graph input)
    out: int                        # its output: tokens x d, row-major (token axes first)
    pos: np.ndarray                 # (ntok,) margin-space indices into the index tensor
    table: np.ndarray               # (V, d) float
    relu: bool = False
    clamp: tuple | None = None
    macs: int = 0

    @property
    def V(self) -> int:
        return self.table.shape[0]

    @property
    def d(self) -> int:
        return self.table.shape[1]

    @property
    def ntok(self) -> int:
        return len(self.pos)


@dataclass
class QGather:
    """The int8 table (``V + 1`` rows: the last is the zero row an outside index selects) and its scale."""
    table_q: np.ndarray             # (V + 1, d) int8
    scale: float


def chip_rows(idx: np.ndarray, V: int) -> np.ndarray:
    """The table row the chip reads for each index: ``i + V`` for a negative ``i``; ``V`` (the zero
    row) for an index outside ``-V..V-1``."""
    r = np.asarray(idx, np.int64)
    r = np.where(r < 0, r + V, r)
    return np.where((r >= 0) & (r < V), r, V)


def quantize_gather(k: GatherKernel) -> QGather:
    amax = float(np.max(np.abs(k.table))) if k.table.size else 0.0
    s = amax / 127.0 if amax > 0 else 1.0
    tq = np.clip(np.rint(k.table / s), -127, 127).astype(np.int8)
    return QGather(np.concatenate([tq, np.zeros((1, k.d), np.int8)]), s)


def gather_values(table: np.ndarray, k: GatherKernel, idx: np.ndarray, shape: tuple) -> np.ndarray:
    """``table`` ((V + 1, d), zero last row) read at the tokens' indices ``idx`` (ntok,), in the output's shape."""
    return table[chip_rows(idx, k.V)].reshape(shape)


# ---------------------------------------------------------------------------------------------- matching

@dataclass
class _Idx:
    """A value computed elementwise from one integer input: ``f(x)`` (x the whole input array),
    element ``o`` reading the input's element ``pos[o]`` (flat, base shape)."""
    inp: Node
    pos: np.ndarray
    f: object


@dataclass
class Match:
    """A one-hot contraction that is a table lookup: the SUM node, the index input, each token's
    flat element in it and the (V, d) table."""
    node: Node
    inp: Node
    pos: np.ndarray
    table: np.ndarray


def _sym(n: Node, memo: dict):
    """``n`` as a constant array, an ``_Idx`` or None (anything else)."""
    if id(n) in memo:
        return memo[id(n)]
    v = None
    if n.op in (Ops.CONST, Ops.BUFFER):
        v = np.asarray(semantics.source_value(n, {}))
    elif n.op is Ops.INPUT:
        if np.dtype(n.dtype.np).kind in "iu" and all(isinstance(d, int) for d in n.arg[1]):
            shape = tuple(n.arg[1])
            v = _Idx(n, np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape), lambda x: x)
    elif n.op in _MOVES or n.op in _ELEMENTWISE:
        srcs = [_sym(s, memo) for s in n.src]
        if all(s is not None for s in srcs):
            v = _apply(n, srcs)
    memo[id(n)] = v
    return v


def _move(n: Node, x):
    if n.op is Ops.RESHAPE:
        return np.reshape(x, n.shape)
    if n.op is Ops.PERMUTE:
        return np.transpose(x, n.arg)
    if n.op is Ops.EXPAND:
        return np.broadcast_to(x, n.shape)
    if n.op is Ops.SHRINK:
        return x[tuple(slice(b, e) for b, e in n.arg)]
    return np.flip(x, n.arg)


def _apply(n: Node, srcs: list):
    idx = [s for s in srcs if isinstance(s, _Idx)]
    if not idx:
        return np.asarray(_move(n, srcs[0]) if n.op in _MOVES else semantics.apply(n, *srcs))
    if n.op in _MOVES:
        s = srcs[0]
        return _Idx(s.inp, _move(n, s.pos), lambda x, f=s.f: _move(n, f(x)))
    a = idx[0]
    for b in idx[1:]:                       # one input element per output element
        if b.inp is not a.inp or b.pos.shape != a.pos.shape or not np.array_equal(b.pos, a.pos):
            return None
    pos = np.broadcast_to(a.pos, n.shape)
    if pos.shape != n.shape:
        return None

    def f(x, srcs=srcs):
        return semantics.apply(n, *[s.f(x) if isinstance(s, _Idx) else s for s in srcs])
    return _Idx(a.inp, pos, f)


def _reaches_cmpeq(n: Node) -> bool:
    while n.op in _MOVES or n.op is Ops.CAST:
        n = n.src[0]
    return n.op is Ops.CMPEQ


def match(n: Node, memo: dict) -> Match | None:
    """``n`` (a SUM) as a table lookup, or None when it is not one."""
    if n.op is not Ops.SUM or len(n.src) != 1 or n.src[0].op is not Ops.MUL:
        return None
    m = n.src[0]
    if tuple(n.arg) != (len(m.shape) - 1,) or m.shape[-1] < 1:
        return None
    ops = [s for s in m.src if _reaches_cmpeq(s)]
    if len(ops) != 1:
        return None
    oh = _sym(ops[0], memo)
    tab = _sym(m.src[1] if ops[0] is m.src[0] else m.src[0], memo)
    if not isinstance(oh, _Idx) or not isinstance(tab, np.ndarray) or tab.dtype.kind != "f":
        return None
    shape, V = m.shape[:-1], m.shape[-1]
    pos, tab = np.broadcast_to(oh.pos, m.shape), np.broadcast_to(tab, m.shape)
    if varies(pos, len(shape)):
        return None
    pos = pos[..., 0]
    k = max((a + 1 for a in range(len(shape)) if varies(pos, a)), default=0)
    if any(varies(tab, a) for a in range(k)):
        return None
    tok = pos[(Ellipsis,) + (0,) * (len(shape) - k)].reshape(-1)
    table = np.array(tab[(0,) * k].reshape(-1, V).T, np.float64)
    if not _probe(oh, m.shape, tok, V, k):
        return None
    return Match(n, oh.inp, tok, table)


def _probe(oh: _Idx, shape: tuple, tok: np.ndarray, V: int, k: int) -> bool:
    """Does the one-hot select ``chip_rows`` for every token, on indices at the edges of the table and
    outside it (``-V-3..-V+2``, ``-3..2``, ``V-3..V+2``, ``+-2V``, the int32 extremes) and a sample
    inside, each at every position in turn? Every row position is compared when the one-hot holds
    at most ``_FULL`` elements, else the first and the last (its positions do not vary along them)."""
    edges = {v for c in (-V, 0, V) for v in range(c - 3, c + 3)} | {-2 * V, 2 * V, *_I32}
    probes = np.array(sorted(edges | set(np.linspace(-V, V - 1, 64).astype(np.int64).tolist())), np.int64)
    ishape = tuple(oh.inp.arg[1])
    numel = int(np.prod(ishape))
    rows = int(np.prod(shape[k:-1], dtype=np.int64))
    ar = np.arange(V)
    for j in range(0, len(probes), max(numel, 1)):
        x = probes[(np.arange(numel) + j) % len(probes)].astype(np.int32).reshape(ishape)
        got = np.asarray(oh.f(x))
        want = chip_rows(x.reshape(-1)[tok], V)[:, None] == ar
        parts = [got.reshape(len(tok), rows, V)] if got.size <= _FULL else \
            [got[(Ellipsis,) + (e,) * (len(shape) - 1 - k) + (slice(None),)].reshape(len(tok), 1, V) for e in (0, -1)]
        if any(not np.array_equal(p != 0, np.broadcast_to(want[:, None, :], p.shape)) for p in parts):
            return False
    return True


__all__ = ["GatherKernel", "Match", "QGather", "chip_rows", "gather_values", "match", "quantize_gather"]
