"""Seeded random tensors. Values are drawn eagerly from one numpy Generator (so a seed
reproduces a run exactly) and enter the graph as BUFFER constants."""
from __future__ import annotations

import numpy as np

from compiler.ir import dtypes
from compiler.frontend.shapes import shape_arg
from compiler.frontend.tensor import Tensor

_rng = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    """Reset the generator behind rand/randn/uniform/bernoulli/randint and parameter init."""
    _rng[0] = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    return _rng[0]


def rand(*shape, dtype=dtypes.float32, requires_grad=False) -> Tensor:
    return Tensor(_rng[0].random(shape_arg(shape)), dtype, requires_grad)


def randn(*shape, dtype=dtypes.float32, requires_grad=False) -> Tensor:
    return Tensor(_rng[0].standard_normal(shape_arg(shape)), dtype, requires_grad)


def uniform(*shape, low=0.0, high=1.0, dtype=dtypes.float32, requires_grad=False) -> Tensor:
    return Tensor(_rng[0].uniform(low, high, shape_arg(shape)), dtype, requires_grad)


def randint(low: int, high: int, shape, dtype=dtypes.int32) -> Tensor:
    return Tensor(_rng[0].integers(low, high, shape_arg((shape,) if isinstance(shape, int) else shape)), dtype)


def bernoulli(p, shape=()) -> Tensor:
    """Bool tensor, true with probability ``p`` (a float, or a Tensor of probabilities)."""
    if isinstance(p, Tensor):
        return rand(p.shape).lt(p)
    return Tensor(_rng[0].random(shape_arg(shape if isinstance(shape, tuple) else (shape,))) < p, dtypes.bool_)


def randperm(n: int) -> Tensor:
    return Tensor(_rng[0].permutation(n), dtypes.int32)

