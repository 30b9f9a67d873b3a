"""Products of two activations (``q @ k.T``, ``p @ v``, any batched matmul): the kernel and its meaning.

``SUM(MUL(view(a), view(b)))`` where both operands are activations is a batched matmul. Output axes
along which both views vary are **slice** axes (batch, heads): one GEMM per slice, whose weights are
the slice of ``b``; axes where only ``a`` varies are M, only ``b`` N, the summed axes K::

    out[s, m, n] = mult * sum_k a[Ga[s, m, k]] * b[Gb[s, k, n]]

``mult`` is a scalar constant the lifter folds in (attention's ``1/sqrt(d)``). On the chip each slice
is an ordinary GEMM kernel (``compiler.lower.emit``) whose weight tiles are first copied from ``b``'s
DRAM layout into the tiled weight layout by strided DMA (``compiler.lower.bmm_lower``). Quantized,
``a`` and ``b`` are int8 tensors with one scale each, the product is requantized to the output's
int8 scale with ``mult * s_a * s_b / s_out``: ``bmm_int`` is the bit-exact reference.

This module holds only numpy (no imports of the lifter): ``compiler.lower.schedule`` builds the
kernel with ``split_axes``/``gathers``, ``compiler.lower.quantize`` evaluates it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class BmmKernel:
    """A batched matmul of two activation tensors (indices into the schedule's tensor list)."""
    name: str
    a: int
    b: int
    ga: np.ndarray                  # (S, M, K) margin-space indices into tensor a
    gb: np.ndarray                  # (S, K, N) margin-space indices into tensor b
    out: int
    s_axes: tuple                   # output base axes making up S, M and N (row-major each)
    m_axes: tuple
    n_axes: tuple
    mult: float = 1.0
    relu: bool = False
    op_text: str = ""
    clamp: tuple | None = None      # never set: a clip after a batched matmul is a lookup-table kernel

    @property
    def src(self) -> int:
        return self.a

    @property
    def S(self) -> int:
        return self.ga.shape[0]

    @property
    def M(self) -> int:
        return self.ga.shape[1]

    @property
    def K(self) -> int:
        return self.ga.shape[2]

    @property
    def N(self) -> int:
        return self.gb.shape[2]

    @property
    def macs(self) -> int:
        return self.S * self.M * self.K * self.N

    def reads(self) -> list[int]:
        return [self.a, self.b]


def varies(x: np.ndarray, axis: int) -> bool:
    """Does the (index) array take more than one value along ``axis``?"""
    if x.shape[axis] <= 1 or x.strides[axis] == 0:
        return False
    return bool((np.take(x, [0], axis=axis) != x).any())


def split_axes(a: np.ndarray, b: np.ndarray, red: tuple) -> tuple[list, list, list]:
    """(slice, M, N) output axes of ``SUM(MUL(a, b), red)`` for the two broadcast index arrays."""
    s_axes, m_axes, n_axes = [], [], []
    for ax in range(a.ndim):
        if ax in red:
            continue
        va, vb = varies(a, ax), varies(b, ax)
        (s_axes if va and vb else n_axes if vb else m_axes).append(ax)
    return s_axes, m_axes, n_axes


def gathers(a: np.ndarray, b: np.ndarray, red: tuple, s_axes, m_axes, n_axes) -> tuple[np.ndarray, np.ndarray]:
    """``Ga`` (S, M, K) and ``Gb`` (S, K, N) from the broadcast index arrays (full product shape)."""
    shape = a.shape
    S = math.prod(shape[x] for x in s_axes)
    M = math.prod(shape[x] for x in m_axes)
    K = math.prod(shape[x] for x in red)
    N = math.prod(shape[x] for x in n_axes)
    a0 = a[tuple(0 if x in n_axes else slice(None) for x in range(len(shape)))]
    rest = [x for x in range(len(shape)) if x not in n_axes]
    ga = np.transpose(a0, [rest.index(x) for x in list(s_axes) + list(m_axes) + list(red)]).reshape(S, M, K)
    b0 = b[tuple(0 if x in m_axes else slice(None) for x in range(len(shape)))]
    rest = [x for x in range(len(shape)) if x not in m_axes]
    gb = np.transpose(b0, [rest.index(x) for x in list(s_axes) + list(red) + list(n_axes)]).reshape(S, K, N)
    return np.ascontiguousarray(ga), np.ascontiguousarray(gb)


def bmm_float(k: BmmKernel, av: np.ndarray, bv: np.ndarray) -> np.ndarray:
    """(S, M, N) float64 result from the gathered operands ``av`` (S, M, K) and ``bv`` (S, K, N)."""
    y = k.mult * np.matmul(av, bv)
    return np.maximum(y, 0) if k.relu else y


def to_base(y: np.ndarray, shape: tuple, k: BmmKernel) -> np.ndarray:
    """An (S, M, N) result as the output tensor's base-shape array (summed axes have size 1)."""
    order = list(k.s_axes) + list(k.m_axes) + list(k.n_axes)
    srt = sorted(order)
    y = np.reshape(y, [shape[x] for x in order])
    return np.transpose(y, [order.index(x) for x in srt]).reshape(shape)


def from_base(x: np.ndarray, shape: tuple, k: BmmKernel) -> np.ndarray:
    """The inverse of ``to_base``: (S, M, N)."""
    order = list(k.s_axes) + list(k.m_axes) + list(k.n_axes)
    srt = sorted(order)
    x = np.reshape(x, [shape[a] for a in srt])
    return np.transpose(x, [srt.index(a) for a in order]).reshape(k.S, k.M, k.N)


__all__ = ["BmmKernel", "bmm_float", "from_base", "gathers", "split_axes", "to_base", "varies"]
