"""Seeded random tensors. Values are drawn eagerly from one numpy Generator (so a seed
reproduces a run exactly) and enter the graph as BUFFER constants."""
from __future__ import annotations

import numpy as np

from compiler.ir import dtypes
import math

from compiler.frontend.shapes import MAX_NUMEL, ArgumentError, ShapeError, check_shape, int_arg
from compiler.frontend.tensor import Tensor

_rng = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    """Reset the generator behind rand/randn/uniform/bernoulli/randint and parameter init."""
    _rng[0] = np.random.default_rng(int_arg("manual_seed", "seed", seed, 0))


def generator() -> np.random.Generator:
    return _rng[0]


def rand(*shape, dtype=dtypes.float32, requires_grad=False) -> Tensor:
    return Tensor(_rng[0].random(check_shape("rand", shape)), dtype, requires_grad)


def randn(*shape, dtype=dtypes.float32, requires_grad=False) -> Tensor:
    return Tensor(_rng[0].standard_normal(check_shape("randn", shape)), dtype, requires_grad)


def uniform(*shape, low=0.0, high=1.0, dtype=dtypes.float32, requires_grad=False) -> Tensor:
    for what, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise ArgumentError(f"uniform: {what} must be a finite number, got {v!r}")
    if low > high:
        raise ShapeError(f"uniform: low {low} is above high {high}")
    return Tensor(_rng[0].uniform(low, high, check_shape("uniform", shape)), dtype, requires_grad)


def randint(low: int, high: int, shape, dtype=dtypes.int32) -> Tensor:
    low, high = int_arg("randint", "low", low), int_arg("randint", "high", high)
    if low >= high:
        raise ShapeError(f"randint: low {low} must be below high {high}")
    return Tensor(_rng[0].integers(low, high, check_shape("randint", shape)), dtype)


def bernoulli(p, shape=()) -> Tensor:
    """Bool tensor, true with probability ``p`` (a float, or a Tensor of probabilities)."""
    if isinstance(p, Tensor):
        return rand(p.shape).lt(p)
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) or not 0 <= p <= 1:
        raise ArgumentError(f"bernoulli: p must be a probability in [0, 1] or a Tensor, got {p!r}")
    return Tensor(_rng[0].random(check_shape("bernoulli", shape)) < p, dtypes.bool_)


def randperm(n: int) -> Tensor:
    return Tensor(_rng[0].permutation(int_arg("randperm", "n", n, 0, MAX_NUMEL)), dtypes.int32)

