"""Tracing: a model (a Module or a function of Tensors) called on placeholders gives the graph IR
the lowerers start from (``compiler.lower.dispatch`` traces every model; ``compiler.lower.dynamic``
traces once more to find which output axes carry a symbolic dimension). An integer example input
gives an int32 placeholder (an index, e.g. of ``nn.Embedding``), any other a float32 one."""
from __future__ import annotations

import numpy as np

from compiler.frontend.tensor import Tensor
from compiler.ir.graph import Ops, recording_sites
from compiler.lower.schedule import ChipCompileError


def example_array(a) -> np.ndarray:
    """An example input as the placeholder's value: integers stay integers (int32: an index input,
    e.g. of ``nn.Embedding``), everything else is float32."""
    a = np.asarray(a.numpy() if hasattr(a, "numpy") else a)
    if a.dtype.kind in "iu":
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise ChipCompileError(f"an integer input holds values outside int32 ({a.min()}..{a.max()})")
        return a.astype(np.int32)
    return a.astype(np.float32)


def index_inputs(nodes) -> list[str]:
    """Names of the integer (index) inputs among ``nodes``."""
    return [n.arg[0] for n in nodes if n.op is Ops.INPUT and np.dtype(n.dtype.np).kind in "iu"]


def trace(model_or_fn, example_inputs) -> tuple[list, list[str], bool, list[dict]]:
    """Graph outputs, input names and example feeds of a model called on placeholders."""
    if isinstance(example_inputs, dict):
        names = list(example_inputs)
        arrays = [example_inputs[k] for k in names]
    else:
        arrays = list(example_inputs) if isinstance(example_inputs, (list, tuple)) else [example_inputs]
        names = [f"x{i}" if len(arrays) > 1 else "x" for i in range(len(arrays))]
    arrays = [example_array(a) for a in arrays]
    fn = model_or_fn
    if hasattr(fn, "eval") and hasattr(fn, "forward"):
        fn.eval()
    phs = [Tensor.placeholder(n, a.shape, a.dtype) for n, a in zip(names, arrays)]
    with recording_sites():                 # ChipCompileError names the user's line of each node
        out = fn(*phs)
    single = not isinstance(out, (list, tuple))
    outs = [out] if single else list(out)
    for o in outs:
        if not isinstance(o, Tensor):
            raise ChipCompileError(f"the model must return Tensors, got {type(o).__name__}")
    return [o.node for o in outs], names, single, [dict(zip(names, arrays))]
