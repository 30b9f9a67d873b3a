"""ONNX models as frontend modules: ``load(path | bytes | ModelProto) -> OnnxModel``.

``OnnxModel.forward`` walks the graph's nodes in order and evaluates each with frontend ops
(``compiler.frontend``), so an imported model traces, compiles (``tc.compile``), runs on every
Device and differentiates like a model written with ``tc.nn``.

Values are of three kinds while the graph is walked:

* **static**: a numpy array known without the inputs' data: integer initializers, ``Constant``,
  ``Shape``/``Size`` (tensor shapes are always known when a graph is built) and any node all of whose
  inputs are static. Such nodes are *folded*: evaluated in numpy by ``onnx.reference`` and cached
  per set of input shapes, so shape arithmetic (``Shape -> Gather -> Unsqueeze -> Concat ->
  Reshape``) never becomes chip work.
* **parameters**: float initializers, ``nn.Parameter``-style Tensors (``requires_grad``) listed by
  ``named_parameters()`` under their ONNX names, so gradients and optimizers reach them.
* **tensors**: everything computed from the inputs.

Operators without a frontend rule are still accepted when all their inputs are static or
parameters (folded with the parameters' current values; no gradient flows through them). Every
other operator without a rule is refused at ``load`` in one ``OnnxImportError`` listing them all.
The operator table is ``docs/import.md``.
"""
from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compiler.frontend import functional as F
from compiler.frontend import nn
from compiler.frontend.shapes import ShapeError
from compiler.frontend.tensor import Tensor, cat, where
from compiler.importers import OnnxImportError
from compiler.ir import dtypes
from compiler.ir.graph import Ops

__all__ = ["OnnxModel", "load", "OnnxImportError", "SUPPORTED"]


# ------------------------------------------------------------------------------------------------ loading

def _read(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_model_from_string(bytes(model))
        except Exception as e:  # noqa: BLE001 - protobuf raises its own DecodeError types
            raise OnnxImportError(f"bytes are not an ONNX model ({type(e).__name__})") from None
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise OnnxImportError(f"{path}: no such file")
        try:
            proto = onnx.load(str(path))
        except Exception as e:  # noqa: BLE001
            raise OnnxImportError(f"{path}: not an ONNX model ({type(e).__name__}: {str(e)[:120]})") from None
        if not proto.graph.node and not proto.graph.output:
            raise OnnxImportError(f"{path}: not an ONNX model (no graph)")
        return proto
    raise OnnxImportError(f"load: expected a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


def load(model, *, check_shapes: bool = True) -> "OnnxModel":
    """Read an ONNX model (a file path, its bytes, or an ``onnx.ModelProto``) as an ``OnnxModel``.

    Unsupported operators raise one ``OnnxImportError`` naming each with its nodes. When every graph
    input has a static shape the graph is also walked once on placeholders (nothing is computed),
    which folds the constants and raises any attribute or shape error now rather than at the first
    call; ``check_shapes`` then compares each node's output shape with ONNX shape inference."""
    return OnnxModel(_read(model), check_shapes=check_shapes)


# ------------------------------------------------------------------------------------------------ helpers

_NP_OF = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float32, TensorProto.FLOAT16: np.float32,
          TensorProto.BFLOAT16: np.float32, TensorProto.INT64: np.int32, TensorProto.INT32: np.int32,
          TensorProto.INT16: np.int32, TensorProto.UINT8: np.int32, TensorProto.UINT16: np.int32,
          TensorProto.UINT32: np.int32, TensorProto.INT8: np.int8, TensorProto.BOOL: np.bool_}


def _tc_dtype(elem_type: int, what: str):
    if elem_type not in _NP_OF:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise OnnxImportError(f"{what}: element type {name} is not supported (float, int, bool)")
    return dtypes.to_dtype(_NP_OF[elem_type])


def _t(v) -> Tensor:
    """A value as a Tensor (a static array becomes a constant: int64 -> int32, float64 -> float32)."""
    if isinstance(v, Tensor):
        return v
    a = np.asarray(v)
    if a.dtype.kind in "iu" and a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        raise OnnxImportError(f"an integer constant holds values outside int32 ({a.min()}..{a.max()})")
    if a.size == 1:                         # a scalar constant, as ``x * 0.5`` writes it
        return Tensor.full(a.shape, a.reshape(()).item(), dtypes.from_numpy(a.dtype))
    return Tensor(a)


def _name(nd, i: int) -> str:
    """A node's name for messages: its own, else its index and first output."""
    return nd.name or f"#{i} -> {nd.output[0] if nd.output else '?'}"


def _operand(v, other):
    """A binary operand: a one-element static array that does not widen ``other`` becomes a Python
    scalar (the frontend's constant), anything else a Tensor."""
    if isinstance(v, np.ndarray) and v.size == 1 and v.ndim <= (other.ndim if isinstance(other, Tensor) else 0):
        return v.reshape(()).item()
    return _t(v)


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _str(v):
    return v.decode() if isinstance(v, bytes) else v


class _Node:
    """One ONNX node as a handler sees it: its inputs (None where absent), attributes, the opset."""

    def __init__(self, node, index: int, opset: int, inputs: list, model: "OnnxModel"):
        self.proto, self.index, self.opset, self.inputs, self.model = node, index, opset, inputs, model
        self.op = node.op_type
        self.name = _name(node, index)
        self.attrs = _attrs(node)

    def attr(self, name, default=None):
        v = self.attrs.get(name, default)
        return _str(v) if isinstance(v, bytes) else v

    def inp(self, i: int):
        return self.inputs[i] if i < len(self.inputs) else None

    def x(self, i: int = 0) -> Tensor:
        v = self.inp(i)
        if v is None:
            raise self.error(f"input {i} is missing")
        return _t(v)

    def const(self, i: int, what: str):
        """Input ``i`` as a numpy array known when the graph is built (None when absent)."""
        v = self.inp(i)
        if v is None or isinstance(v, np.ndarray):
            return v
        if v.node.op is Ops.BUFFER:               # an initializer (parameter): its current value
            return v.numpy()
        raise self.error(f"{what} (input {i}) must be a constant (an initializer or computed from "
                         f"constants and shapes), here it depends on the model's inputs")

    def axes(self, i: int, attr: str = "axes"):
        """Axes given as an attribute (older opsets) or as input ``i`` (newer ones); None if neither."""
        if attr in self.attrs:
            return [int(a) for a in self.attrs[attr]]
        a = self.const(i, attr) if self.inp(i) is not None else None
        return None if a is None else [int(v) for v in np.asarray(a).reshape(-1)]

    def error(self, msg: str) -> OnnxImportError:
        return OnnxImportError(f"ONNX node {self.name} ({self.op}): {msg}")

    def used(self, k: int) -> bool:
        return len(self.proto.output) > k and self.proto.output[k] in self.model._used


# ------------------------------------------------------------------------------------------------ operators

def _spatial(n: _Node, x: Tensor, kernel, what: str):
    """(pads as [(begin, end)] per spatial axis, strides, dilations) with auto_pad resolved."""
    nd = len(kernel)
    strides = list(n.attr("strides", [1] * nd))
    dil = list(n.attr("dilations", [1] * nd))
    auto = n.attr("auto_pad", "NOTSET")
    pads = list(n.attr("pads", [0] * (2 * nd)))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto != "NOTSET":
        raise n.error(f"auto_pad {auto!r} is not supported (NOTSET, SAME_UPPER, SAME_LOWER, VALID)")
    if nd not in (1, 2):
        raise n.error(f"{what} over {nd} spatial dimensions is not supported (1-D and 2-D)")
    return [(pads[i], pads[i + nd]) for i in range(nd)], strides, dil


def _as_2d(x: Tensor, nd: int) -> Tensor:
    return x.unsqueeze(2) if nd == 1 else x


def _from_2d(y: Tensor, nd: int) -> Tensor:
    return y.squeeze(2) if nd == 1 else y


def _conv(n: _Node):
    x, w = n.x(0), n.x(1)
    b = n.x(2) if n.inp(2) is not None else None
    kernel = list(n.attr("kernel_shape", w.shape[2:]))
    nd = len(kernel)
    pads, strides, dil = _spatial(n, x, kernel, "Conv")
    x2, w2 = _as_2d(x, nd), _as_2d(w, nd)
    pads2 = ([(0, 0)] if nd == 1 else []) + pads
    s2, d2 = ([1] if nd == 1 else []) + strides, ([1] if nd == 1 else []) + dil
    if all(p == q for p, q in pads2):
        y = F.conv2d(x2, w2, b, tuple(s2), tuple(p for p, _ in pads2), tuple(d2), n.attr("group", 1))
    else:
        x2 = x2.pad([None, None] + list(pads2))
        y = F.conv2d(x2, w2, b, tuple(s2), 0, tuple(d2), n.attr("group", 1))
    return _from_2d(y, nd)


def _conv_transpose(n: _Node):
    x, w = n.x(0), n.x(1)
    b = n.x(2) if n.inp(2) is not None else None
    kernel = list(n.attr("kernel_shape", w.shape[2:]))
    nd = len(kernel)
    if nd not in (1, 2):
        raise n.error(f"ConvTranspose over {nd} spatial dimensions is not supported (1-D and 2-D)")
    strides = list(n.attr("strides", [1] * nd))
    dil = list(n.attr("dilations", [1] * nd))
    opad = list(n.attr("output_padding", [0] * nd))
    pads = list(n.attr("pads", [0] * (2 * nd)))
    full = [(x.shape[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(nd)]
    auto = n.attr("auto_pad", "NOTSET")
    out_shape = n.attr("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(out_shape)[-nd:] if out_shape is not None else [x.shape[2 + i] * strides[i] for i in range(nd)]
        for i in range(nd):
            total = full[i] + opad[i] - target[i]
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nd] = (big, small) if auto == "SAME_LOWER" else (small, big)
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto != "NOTSET":
        raise n.error(f"auto_pad {auto!r} is not supported")
    x2, w2 = _as_2d(x, nd), _as_2d(w, nd)
    pre = [1] if nd == 1 else []
    group = n.attr("group", 1)
    if all(pads[i] == pads[i + nd] and opad[i] < max(strides[i], dil[i]) for i in range(nd)):
        y = F.conv_transpose2d(x2, w2, b, tuple(pre + strides), tuple([0] * len(pre) + pads[:nd]),
                               tuple([0] * len(pre) + opad), group, tuple(pre + dil))
        return _from_2d(y, nd)
    y = F.conv_transpose2d(x2, w2, None, tuple(pre + strides), 0, 0, group, tuple(pre + dil))
    crop = [(0, 0)] * len(pre) + [(-pads[i], opad[i] - pads[i + nd]) for i in range(nd)]
    y = y.pad([None, None] + crop)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return _from_2d(y, nd)


def _pool(n: _Node, kind: str):
    x = n.x(0)
    if n.used(1):
        raise n.error("the Indices output is not supported")
    kernel = list(n.attr("kernel_shape"))
    nd = len(kernel)
    pads, strides, dil = _spatial(n, x, kernel, n.op)
    if n.attr("storage_order", 0):
        raise n.error("storage_order=1 is not supported")
    ceil_extra = [0] * nd
    if n.attr("ceil_mode", 0):
        for i in range(nd):
            span = x.shape[2 + i] + pads[i][0] + pads[i][1]
            ext = (kernel[i] - 1) * dil[i] + 1
            out = -(-(span - ext) // strides[i]) + 1
            if (out - 1) * strides[i] >= x.shape[2 + i] + pads[i][0]:   # the last window starts in the end pad
                out -= 1
            ceil_extra[i] = max((out - 1) * strides[i] + ext - span, 0)
    x2 = _as_2d(x, nd)
    pre = [(0, 0)] if nd == 1 else []
    p2 = pre + pads
    e2 = [0] * len(pre) + ceil_extra
    k2, s2, d2 = tuple([1] * len(pre) + kernel), tuple([1] * len(pre) + strides), tuple([1] * len(pre) + dil)
    if kind == "max":
        if all(p == q for p, q in p2) and not any(e2):
            y = F.max_pool2d(x2, k2, s2, tuple(p for p, _ in p2), d2)
        else:
            xp = x2.pad([None, None] + [(p, q + e) for (p, q), e in zip(p2, e2)], value=float("-inf"))
            y = F.max_pool2d(xp, k2, s2, 0, d2)
        return _from_2d(y, nd)
    if any(d != 1 for d in dil):
        raise n.error("AveragePool with dilations is not supported")
    include = bool(n.attr("count_include_pad", 0))
    plain = not any(e2) and (include or not any(p or q for p, q in p2))
    if plain and all(p == q for p, q in p2):
        return _from_2d(F.avg_pool2d(x2, k2, s2, tuple(p for p, _ in p2)), nd)
    # the general case: window sums over the padded input divided by a constant count of the
    # positions each window may count (the padding when count_include_pad, never the ceil extension)
    h, w = x2.shape[2:]
    xp = x2.pad([None, None] + [(p, q + e) for (p, q), e in zip(p2, e2)])
    valid = np.zeros((h + p2[0][0] + p2[0][1] + e2[0], w + p2[1][0] + p2[1][1] + e2[1]), np.float32)
    if include:
        valid[: h + p2[0][0] + p2[0][1], : w + p2[1][0] + p2[1][1]] = 1
    else:
        valid[p2[0][0]: p2[0][0] + h, p2[1][0]: p2[1][0] + w] = 1
    win = np.lib.stride_tricks.sliding_window_view(valid, k2)[:: s2[0], :: s2[1]]
    count = win.sum((-2, -1))
    y = F.avg_pool2d(xp, k2, s2) * Tensor((k2[0] * k2[1]) / np.maximum(count, 1))
    return _from_2d(y, nd)


def _gemm(n: _Node):
    a, b = n.x(0), n.x(1)
    if n.attr("transA", 0):
        a = a.T
    if n.attr("transB", 0):
        b = b.T
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    y = a @ b
    if alpha != 1.0:
        y = y * alpha
    if n.inp(2) is not None and beta != 0.0:
        c = n.x(2)
        y = y + (c if beta == 1.0 else c * beta)
    return y


def _batch_norm(n: _Node):
    if n.attr("training_mode", 0) or any(n.used(k) for k in (1, 2)):
        raise n.error("training mode (running statistics as outputs) is not supported; export in eval mode")
    x = n.x(0)
    return F.batch_norm(x, n.x(3), n.x(4), n.x(1), n.x(2), training=False, eps=n.attr("epsilon", 1e-5))


def _layer_norm(n: _Node):
    if any(n.used(k) for k in (1, 2)):
        raise n.error("the Mean / InvStdDev outputs are not supported")
    x = n.x(0)
    axis = n.attr("axis", -1) % x.ndim
    scale = n.x(1)
    bias = n.x(2) if n.inp(2) is not None else None
    shape = x.shape[axis:]
    eps = n.attr("epsilon", 1e-5)
    if scale.shape == shape and (bias is None or bias.shape == shape):
        return F.layer_norm(x, shape, scale, bias, eps)
    y = F.layer_norm(x, shape, None, None, eps) * scale
    return y + bias if bias is not None else y


def _instance_norm(n: _Node):
    x, scale, bias = n.x(0), n.x(1), n.x(2)
    axes = tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    eps = n.attr("epsilon", 1e-5)
    y = (x - x.mean(axes, keepdim=True)) * (x.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    return y * scale.reshape(shape) + bias.reshape(shape)


def _group_norm(n: _Node):
    x, scale, bias = n.x(0), n.x(1), n.x(2)
    g = n.attr("num_groups")
    c = x.shape[1]
    if c % g:
        raise n.error(f"{c} channels do not split into {g} groups")
    xg = x.reshape((x.shape[0], g, -1))
    eps = n.attr("epsilon", 1e-5)
    y = ((xg - xg.mean(-1, keepdim=True)) * (xg.var(-1, keepdim=True, correction=0) + eps).rsqrt()).reshape(x.shape)
    if scale.shape[0] == g and g != c:          # opset 18: one scale and bias per group
        scale, bias = scale.repeat_interleave(c // g), bias.repeat_interleave(c // g)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * scale.reshape(shape) + bias.reshape(shape)


def _trilu(n: _Node):
    x = n.x(0)
    k = n.const(1, "k")
    k = 0 if k is None else int(np.asarray(k).reshape(()))
    rows, cols = x.shape[-2:]
    keep = np.triu(np.ones((rows, cols), bool), k) if n.attr("upper", 1) else np.tril(np.ones((rows, cols), bool), k)
    return where(Tensor(keep), x, 0)


def _softmax(n: _Node, log: bool):
    x = n.x(0)
    fn = F.log_softmax if log else F.softmax
    if n.opset >= 13:
        return fn(x, n.attr("axis", -1))
    axis = n.attr("axis", 1) % max(x.ndim, 1)          # opsets < 13: softmax of the 2-D flattening at axis
    y = fn(x.reshape(math.prod(x.shape[:axis]), -1), -1)
    return y.reshape(x.shape)


def _clip(n: _Node):
    x = n.x(0)
    if n.opset < 11:
        lo, hi = n.attr("min"), n.attr("max")
    else:
        lo, hi = n.const(1, "min"), n.const(2, "max")
        lo = None if lo is None else np.asarray(lo).item()
        hi = None if hi is None else np.asarray(hi).item()
    return x.clamp(lo, hi)


def _pow(n: _Node):
    x = n.x(0)
    e = n.inp(1)
    if isinstance(e, np.ndarray) or e.node.op is Ops.BUFFER:
        ev = n.const(1, "exponent")
        if ev.size == 1 and ev.ndim <= x.ndim:
            v = ev.reshape(()).item()
            return x.pow(int(v) if float(v).is_integer() else v)
    return x.pow(n.x(1))


def _reduce(n: _Node, fn):
    x = n.x(0)
    axes = n.axes(1)
    keep = bool(n.attr("keepdims", 1))
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.ndim))
    return fn(x, tuple(axes), keep)


_REDUCERS = {
    "ReduceMean": lambda x, a, k: x.mean(a, k),
    "ReduceSum": lambda x, a, k: x.sum(a, k),
    "ReduceMax": lambda x, a, k: x.max(a, k),
    "ReduceMin": lambda x, a, k: x.min(a, k),
    "ReduceProd": lambda x, a, k: x.prod(a, k),
    "ReduceSumSquare": lambda x, a, k: (x * x).sum(a, k),
    "ReduceL1": lambda x, a, k: x.abs().sum(a, k),
    "ReduceL2": lambda x, a, k: (x * x).sum(a, k).sqrt(),
    "ReduceLogSumExp": lambda x, a, k: x.logsumexp(a, k),
}


def _reshape_target(n: _Node, shape_in, shape) -> tuple:
    shape = [int(d) for d in np.asarray(shape).reshape(-1)]
    if not n.attr("allowzero", 0):
        shape = [shape_in[i] if d == 0 else d for i, d in enumerate(shape)]
    return tuple(shape)


def _reshape(n: _Node):
    x = n.x(0)
    return x.reshape(_reshape_target(n, x.shape, n.const(1, "shape")))


def _flatten(n: _Node):
    x = n.x(0)
    axis = n.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _split(n: _Node):
    x = n.x(0)
    axis = n.attr("axis", 0) % x.ndim
    sizes = n.axes(1, "split")
    k = len(n.proto.output)
    if sizes is None:
        k = n.attr("num_outputs", k)
        size = -(-x.shape[axis] // k)
        sizes = [min(size, x.shape[axis] - i * size) for i in range(k)]
    return list(x.split(sizes, axis))


def _slice(n: _Node):
    x = n.x(0)
    if n.opset < 10:
        starts, ends = n.attr("starts"), n.attr("ends")
        axes, steps = n.attr("axes"), None
    else:
        starts, ends = n.const(1, "starts"), n.const(2, "ends")
        axes, steps = n.const(3, "axes"), n.const(4, "steps")
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    ends = [int(v) for v in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [int(v) for v in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(v) for v in np.asarray(steps).reshape(-1)]
    idx = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise n.error("a step of 0")
        idx[a % x.ndim] = slice(s, e, st)
    return x[tuple(idx)]


def _gather(n: _Node):
    x = n.x(0)
    axis = n.attr("axis", 0) % x.ndim
    ind = n.inp(1)
    if isinstance(ind, np.ndarray):
        ind = int(ind) if ind.ndim == 0 else ind.astype(np.int32)
    elif ind.ndim == 0:
        ind = ind.reshape(1)
        return x[(slice(None),) * axis + (ind,)].squeeze(axis)
    return x[(slice(None),) * axis + (ind,)]


def _unsqueeze(n: _Node):
    x = n.x(0)
    axes = n.axes(1)
    rank = x.ndim + len(axes)
    axes = sorted(a % rank for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return x.reshape(tuple(shape))


def _squeeze(n: _Node):
    x = n.x(0)
    axes = n.axes(1)
    if axes is None:
        return x.reshape(tuple(d for d in x.shape if d != 1))
    axes = {a % x.ndim for a in axes}
    if any(x.shape[a] != 1 for a in axes):
        raise n.error(f"cannot squeeze axes {sorted(axes)} of shape {x.shape}")
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _expand(n: _Node):
    x = n.x(0)
    shape = tuple(int(d) for d in n.const(1, "shape").reshape(-1))
    try:
        out = np.broadcast_shapes(x.shape, shape)
    except ValueError:
        raise n.error(f"cannot expand shape {x.shape} to {shape}") from None
    return x.reshape((1,) * (len(out) - x.ndim) + x.shape).expand(out)


def _pad(n: _Node):
    x = n.x(0)
    mode = n.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise n.error(f"mode {mode!r} is not supported (constant, reflect, edge, wrap)")
    if n.opset < 11:
        pads, value, axes = list(n.attr("pads")), n.attr("value", 0.0), None
    else:
        pads = [int(v) for v in n.const(1, "pads").reshape(-1)]
        cv = n.const(2, "constant_value")
        value = 0 if cv is None or cv.size == 0 else cv.reshape(()).item()
        axes = n.axes(3)
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in axes]
    k = len(axes)
    full: list = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        full[a] = (pads[i], pads[i + k])
    if mode == "constant":
        return x.pad(full, value)
    x = x.pad([(min(b, 0), min(e, 0)) for b, e in full])            # negative pads crop first
    for a, (b, e) in enumerate(full):
        b, e, size = max(b, 0), max(e, 0), x.shape[a]
        if not b and not e:
            continue
        if mode == "reflect" and max(b, e) >= size or mode == "wrap" and max(b, e) > size:
            raise n.error(f"{mode} padding of {max(b, e)} along axis {a} of size {size}")
        pre = (slice(None),) * a
        if mode == "reflect":
            left, right = x[pre + (slice(1, b + 1),)].flip(a), x[pre + (slice(size - 1 - e, size - 1),)].flip(a)
        elif mode == "wrap":
            left, right = x[pre + (slice(size - b, size),)], x[pre + (slice(0, e),)]
        else:
            shape = list(x.shape)
            left = x[pre + (slice(0, 1),)].expand(tuple(shape[:a] + [b] + shape[a + 1:]))
            right = x[pre + (slice(size - 1, size),)].expand(tuple(shape[:a] + [e] + shape[a + 1:]))
        x = cat([t for t, w in ((left, b), (x, 1), (right, e)) if w], a)
    return x


def _cast(n: _Node):
    return n.x(0).cast(_tc_dtype(n.attr("to"), f"ONNX node {n.name} (Cast)"))


def _variadic(fn):
    def run(n: _Node):
        xs = [v for v in n.inputs if v is not None]
        out = _t(xs[0])
        for v in xs[1:]:
            out = fn(out, _operand(v, out))
        return out
    return run


def _binary(fn):
    def run(n: _Node):
        a, b = n.inp(0), n.inp(1)
        if isinstance(a, np.ndarray):
            return fn(_t(a), _operand(b, a)) if not isinstance(b, Tensor) else fn(_t(a), b)
        return fn(a, _operand(b, a))
    return run


def _div(a: Tensor, b):
    out = a / b
    if not a.dtype.is_float and not (isinstance(b, Tensor) and b.dtype.is_float) and not isinstance(b, float):
        out = out.cast(a.dtype)                     # integer division truncates, as in C
    return out


def _where(n: _Node):
    c, a, b = n.inp(0), n.inp(1), n.inp(2)
    if isinstance(c, np.ndarray) and isinstance(a, np.ndarray) and a.size == 1 and isinstance(b, Tensor):
        # masked_fill's spelling, where(mask, -inf, x), as where(~mask, x, -inf) with the mask still a
        # constant: the form the chip compiler's attention pattern (a causal or boolean mask) knows
        c, a, b = ~c.astype(bool), b, a
    ref = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    return where(_t(c), a if isinstance(a, Tensor) else _operand(a, ref),
                 b if isinstance(b, Tensor) else _operand(b, ref))


def _arg(n: _Node, fn):
    if n.attr("select_last_index", 0):
        raise n.error("select_last_index=1 is not supported")
    return fn(n.x(0), n.attr("axis", 0), bool(n.attr("keepdims", 1)))


def _concat(n: _Node):
    return cat([_t(v) for v in n.inputs if v is not None], n.attr("axis"))


def _transpose(n: _Node):
    x = n.x(0)
    perm = n.attr("perm", list(reversed(range(x.ndim))))
    return x.permute(*perm)


def _tile(n: _Node):
    return n.x(0).repeat(*[int(r) for r in n.const(1, "repeats").reshape(-1)])


def _prelu(n: _Node):
    x, slope = n.x(0), n.x(1)
    return where(x.gt(0), x, x * slope)


def _hard_sigmoid(n: _Node, alpha=None, beta=None):
    a = n.attr("alpha", 0.2) if alpha is None else alpha
    b = n.attr("beta", 0.5) if beta is None else beta
    return (n.x(0) * a + b).clamp(0.0, 1.0)


def _dropout(n: _Node):
    if n.used(1):
        raise n.error("the mask output is not supported (inference only)")
    return n.x(0)


#: op_type -> rule(node) returning a Tensor or a list of Tensors (one per output); any other operator is
#: folded when its inputs are static or initializers, refused at load otherwise (docs/import.md)
HANDLERS = {
    "Conv": _conv, "ConvTranspose": _conv_transpose,
    "MaxPool": lambda n: _pool(n, "max"), "AveragePool": lambda n: _pool(n, "avg"),
    "GlobalAveragePool": lambda n: n.x(0).mean(tuple(range(2, n.x(0).ndim)), keepdim=True),
    "GlobalMaxPool": lambda n: n.x(0).max(tuple(range(2, n.x(0).ndim)), keepdim=True),
    "Gemm": _gemm, "MatMul": lambda n: n.x(0) @ n.x(1),
    "BatchNormalization": _batch_norm, "LayerNormalization": _layer_norm,
    "Softmax": lambda n: _softmax(n, False), "LogSoftmax": lambda n: _softmax(n, True),
    "Relu": lambda n: n.x(0).relu(), "Sigmoid": lambda n: n.x(0).sigmoid(), "Tanh": lambda n: n.x(0).tanh(),
    "Erf": lambda n: n.x(0).erf(), "Gelu": lambda n: n.x(0).gelu(n.attr("approximate", "none")),
    "LeakyRelu": lambda n: n.x(0).leaky_relu(n.attr("alpha", 0.01)),
    "Elu": lambda n: n.x(0).elu(n.attr("alpha", 1.0)),
    "Selu": lambda n: n.attr("gamma", 1.0507009873554805) * n.x(0).elu(n.attr("alpha", 1.6732632423543772)),
    "Softplus": lambda n: n.x(0).softplus(), "PRelu": _prelu,
    "Softsign": lambda n: n.x(0) / (n.x(0).abs() + 1), "Mish": lambda n: n.x(0) * n.x(0).softplus().tanh(),
    "ThresholdedRelu": lambda n: where(n.x(0).gt(n.attr("alpha", 1.0)), n.x(0), 0.0),
    "InstanceNormalization": _instance_norm, "GroupNormalization": _group_norm, "Trilu": _trilu,
    "HardSigmoid": _hard_sigmoid, "HardSwish": lambda n: n.x(0) * _hard_sigmoid(n, 1 / 6, 0.5),
    "Clip": _clip,
    "Add": _binary(lambda a, b: a + b), "Sub": _binary(lambda a, b: a - b),
    "Mul": _binary(lambda a, b: a * b), "Div": _binary(_div), "Pow": _pow,
    "Sqrt": lambda n: n.x(0).sqrt(), "Neg": lambda n: -n.x(0), "Exp": lambda n: n.x(0).exp(),
    "Log": lambda n: n.x(0).log(), "Reciprocal": lambda n: n.x(0).reciprocal(), "Abs": lambda n: n.x(0).abs(),
    "Sign": lambda n: n.x(0).sign(), "Sin": lambda n: n.x(0).sin(), "Cos": lambda n: n.x(0).cos(),
    "Min": _variadic(lambda a, b: a.minimum(b)), "Max": _variadic(lambda a, b: a.maximum(b)),
    "Sum": _variadic(lambda a, b: a + b),
    "Mean": lambda n: _variadic(lambda a, b: a + b)(n) * (1.0 / sum(v is not None for v in n.inputs)),
    **{op: partial(_reduce, fn=fn) for op, fn in _REDUCERS.items()},
    "ArgMax": lambda n: _arg(n, lambda x, a, k: x.argmax(a, k)),
    "ArgMin": lambda n: _arg(n, lambda x, a, k: x.argmin(a, k)),
    "Reshape": _reshape, "Flatten": _flatten, "Transpose": _transpose, "Concat": _concat, "Split": _split,
    "Slice": _slice, "Gather": _gather, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Expand": _expand,
    "Tile": _tile, "Pad": _pad, "Where": _where, "Cast": _cast,
    "Identity": lambda n: n.x(0), "Dropout": _dropout,
    "Equal": _binary(lambda a, b: a.eq(b)), "Less": _binary(lambda a, b: a.lt(b)),
    "Greater": _binary(lambda a, b: a.gt(b)), "LessOrEqual": _binary(lambda a, b: a.le(b)),
    "GreaterOrEqual": _binary(lambda a, b: a.ge(b)), "Not": lambda n: n.x(0).logical_not(),
    "And": _binary(lambda a, b: a.logical_and(b)), "Or": _binary(lambda a, b: a.logical_or(b)),
    "Xor": _binary(lambda a, b: a.bool().ne(_t(b).bool())),
}

SUPPORTED = tuple(sorted(HANDLERS))

_SHAPE_OPS = ("Shape", "Size")          # static whatever their input: tensor shapes are always known


# ------------------------------------------------------------------------------------------------ the module

def _running_stats(g) -> set[str]:
    """Initializers read only as BatchNormalization's running mean / variance: buffers (in the
    state dict, not parameters), as ``nn.BatchNorm2d`` keeps them."""
    stats = {v for nd in g.node if nd.op_type == "BatchNormalization" for v in nd.input[3:5]}
    other = {v for nd in g.node for k, v in enumerate(nd.input) if not (nd.op_type == "BatchNormalization" and k >= 3)}
    return stats - other - {o.name for o in g.output}


#: the oldest default-domain opset read (older spellings of Softmax, Pad, Clip, Split, Squeeze, Slice and
#: the Reduce axes are handled from here on; older models convert with onnx.version_converter)
MIN_OPSET = 7


class OnnxModel(nn.Module):
    """An ONNX graph as a frontend module: ``forward(*inputs)`` in graph-input order or by input name
    (keywords); returns one Tensor, or a tuple when the graph has several outputs. Float
    initializers are parameters (``named_parameters()``, by ONNX name); integer ones are constants."""

    def __init__(self, proto: onnx.ModelProto, check_shapes: bool = True):
        self._proto = proto
        g = proto.graph
        opsets = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
        self.opset = opsets.get("ai.onnx", 1)
        newest = onnx.defs.onnx_opset_version()
        if not MIN_OPSET <= self.opset <= newest:
            raise OnnxImportError(
                f"the model uses opset {self.opset} of the default ONNX domain; this importer reads opsets "
                f"{MIN_OPSET} to {newest} (the installed onnx package's newest)"
                + (" - convert it first: onnx.version_converter.convert_version(model, 13)"
                   if self.opset < MIN_OPSET else ""))
        self._opsets = list(proto.opset_import)
        self._static: dict[str, np.ndarray] = {}
        self._params: dict[str, Tensor] = {}           # float initializers: parameters and buffers
        buffers = _running_stats(g)
        for init in g.initializer:
            try:
                arr = numpy_helper.to_array(init)
            except Exception as e:  # noqa: BLE001 - external data that was not found, odd types
                raise OnnxImportError(f"initializer {init.name!r}: cannot read ({type(e).__name__}: {e})") from None
            if arr.dtype.kind == "f":
                self._params[init.name] = Tensor(arr.astype(np.float32), dtypes.float32,
                                                 requires_grad=init.name not in buffers)
            else:
                self._static[init.name] = arr
        self.input_names = [i.name for i in g.input if i.name not in self._static and i.name not in self._params]
        self.output_names = [o.name for o in g.output]
        self._input_types = {}
        for i in g.input:
            if i.name in self.input_names:
                tt = i.type.tensor_type
                if not i.type.HasField("tensor_type"):
                    raise OnnxImportError(f"graph input {i.name!r}: only tensor inputs are supported")
                shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim) \
                    if tt.HasField("shape") else None
                self._input_types[i.name] = (_tc_dtype(tt.elem_type, f"graph input {i.name!r}"), shape)
        self._used = {name for nd in g.node for name in nd.input} | set(self.output_names)
        self._fold_cache: dict = {}
        self._evaluators: dict = {}
        self._inferred: dict[str, tuple] = {}
        self._check()
        if check_shapes:
            try:
                inf = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
                for vi in list(inf.graph.value_info) + list(inf.graph.output):
                    tt = vi.type.tensor_type
                    if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                        self._inferred[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
            except Exception:  # noqa: BLE001,S110 - shape inference is a cross-check only
                pass
        if all(shape is not None and None not in shape for _, shape in self._input_types.values()):
            # every input shape is known: walk the graph once on placeholders (folds, raises now)
            self.forward(*[Tensor.placeholder(name, shape, dt) for name, (dt, shape) in self._input_types.items()])
        self._inferred = {}

    # ---------------------------------------------------------------- nn.Module
    def named_tensors(self, prefix: str = ""):
        for name, t in self._params.items():
            yield prefix + name, t

    def __repr__(self) -> str:
        g = self._proto.graph
        return (f"OnnxModel({g.name or 'graph'!r}, opset {self.opset}, {len(g.node)} nodes, "
                f"inputs {self.input_names}, outputs {self.output_names}, {len(self._params)} parameters)")

    # ---------------------------------------------------------------- load-time check
    def _check(self) -> None:
        """Refuse the model now if some node has no rule and cannot be folded: one error listing all."""
        kind = {name: "static" for name in self._static} | {name: "param" for name in self._params}
        bad: dict[str, list[str]] = {}
        for i, nd in enumerate(self._proto.graph.node):
            ins = [kind.get(v, "tensor") for v in nd.input if v]
            subgraph = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in nd.attribute)
            domain = nd.domain not in ("", "ai.onnx")
            if not domain and not subgraph and (nd.op_type in _SHAPE_OPS or all(k == "static" for k in ins)):
                out = "static"
            elif not domain and nd.op_type in HANDLERS:
                out = "tensor"
            elif not domain and not subgraph and all(k in ("static", "param") for k in ins):
                out = "param"                                   # folded with the parameters' values
            else:
                op = f"{nd.domain}.{nd.op_type}" if domain else nd.op_type
                bad.setdefault(op, []).append(_name(nd, i))
                out = "tensor"
            for o in nd.output:
                kind[o] = out
        if bad:
            parts = [f"{op} (node{'s' if len(names) > 1 else ''} {', '.join(names)})" for op, names in bad.items()]
            raise OnnxImportError("unsupported ONNX operators: " + "; ".join(parts))

    # ---------------------------------------------------------------- inputs
    def _bind(self, args, kw) -> dict:
        names = self.input_names
        if len(args) > len(names):
            raise OnnxImportError(f"the model takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
        feeds = dict(zip(names, args))
        for k, v in kw.items():
            if k not in names:
                raise OnnxImportError(f"unknown input {k!r} (inputs: {', '.join(names)})")
            if k in feeds:
                raise OnnxImportError(f"input {k!r} given twice")
            feeds[k] = v
        missing = [n for n in names if n not in feeds]
        if missing:
            raise OnnxImportError(f"missing input(s) {', '.join(map(repr, missing))} "
                                  f"(the model takes {', '.join(names)})")
        out = {}
        for name in names:
            v = feeds[name]
            dt, shape = self._input_types[name]
            t = v if isinstance(v, Tensor) else Tensor(np.asarray(v), dt if not isinstance(v, Tensor) else None)
            if shape is not None and (len(shape) != t.ndim or any(d is not None and d != s
                                                                  for d, s in zip(shape, t.shape))):
                want = "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"
                raise OnnxImportError(f"input {name!r}: expected shape {want}, got {tuple(t.shape)}")
            out[name] = t
        return out

    # ---------------------------------------------------------------- evaluation
    def forward(self, *args, **kw):
        env: dict = {**self._static, **self._params, **self._bind(args, kw)}
        key = tuple((tuple(t.shape), t.dtype.name) for t in (env[n] for n in self.input_names))
        cache = self._fold_cache.setdefault(key, {})
        volatile: set[str] = set()          # folded from parameters' values: not cached (training moves them)
        for i, nd in enumerate(self._proto.graph.node):
            for v in nd.input:
                if v and v not in env:
                    raise OnnxImportError(f"ONNX node {_name(nd, i)}: input {v!r} is not defined")
            ins = [env[v] if v else None for v in nd.input]
            vol = any(v in volatile for v in nd.input)
            outs = self._node(i, nd, ins, None if vol else cache)
            if vol or (nd.op_type not in _SHAPE_OPS and any(isinstance(v, Tensor) for v in ins)
                       and any(isinstance(o, np.ndarray) for o in outs)):
                volatile.update(nd.output)
            for name, val in zip(nd.output, outs):
                if name:
                    env[name] = val
            for name in nd.output[len(outs):]:
                if name in self._used:
                    raise OnnxImportError(f"ONNX node {_name(nd, i)} ({nd.op_type}): output "
                                          f"{name!r} is not supported")
        res = []
        for name in self.output_names:
            if name not in env:
                raise OnnxImportError(f"graph output {name!r} is not computed by any node")
            res.append(_t(env[name]))
        return res[0] if len(res) == 1 else tuple(res)

    def _node(self, i: int, nd, ins: list, cache: dict | None) -> list:
        present = [v for v in ins if v is not None]
        op = nd.op_type
        if op in _SHAPE_OPS:
            x = ins[0]
            shape = np.array(x.shape, np.int64)
            if op == "Size":
                return [np.array(math.prod(x.shape), np.int64)]
            a = _attrs(nd)
            return [shape[a.get("start", 0): a.get("end")]]
        if op == "Constant":
            return [self._constant(nd)]
        if all(isinstance(v, np.ndarray) for v in present):
            if cache is None:
                return self._fold(i, nd, ins)
            if i not in cache:
                cache[i] = self._fold(i, nd, ins)
            return cache[i]
        if op in HANDLERS and nd.domain in ("", "ai.onnx"):
            n = _Node(nd, i, self.opset, ins, self)
            try:
                out = HANDLERS[op](n)
            except OnnxImportError:
                raise
            except (ShapeError, ValueError, TypeError, IndexError) as e:
                raise n.error(str(e)) from None
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            if self._inferred:
                for name, val in zip(nd.output, outs):
                    want = self._inferred.get(name)
                    if want is not None and tuple(val.shape) != want:
                        raise n.error(f"output {name!r} has shape {tuple(val.shape)}, ONNX shape inference says "
                                      f"{want}")
            return outs
        # an operator without a rule whose inputs are constants or parameters: folded with their values
        return self._fold(i, nd, [v.numpy() if isinstance(v, Tensor) else v for v in ins])

    def _constant(self, nd) -> np.ndarray:
        a = nd.attribute[0]
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        v = helper.get_attribute_value(a)
        if a.name in ("value_float", "value_floats"):
            return np.array(v, np.float32)
        if a.name in ("value_int", "value_ints"):
            return np.array(v, np.int64)
        raise OnnxImportError(f"Constant node {nd.name!r}: attribute {a.name!r} is not supported")

    def _fold(self, i: int, nd, ins: list) -> list:
        """Evaluate one node in numpy with ``onnx.reference`` (its evaluator built once per node)."""
        from onnx.reference import ReferenceEvaluator
        names = [v for v in nd.input if v]
        if i not in self._evaluators:
            vals = [v for v in ins if v is not None]
            g = helper.make_graph(
                [nd], f"fold{i}",
                [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), None)
                 for n, v in zip(names, vals)],
                [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in nd.output if o])
            m = helper.make_model(g, opset_imports=self._opsets, ir_version=self._proto.ir_version)
            try:
                self._evaluators[i] = ReferenceEvaluator(m)
            except Exception as e:  # noqa: BLE001
                raise OnnxImportError(f"ONNX node {_name(nd, i)} ({nd.op_type}): cannot fold "
                                      f"({type(e).__name__}: {e})") from None
        feeds = dict(zip(names, [v for v in ins if v is not None]))
        try:
            out = self._evaluators[i].run(None, feeds)
        except Exception as e:  # noqa: BLE001
            raise OnnxImportError(f"ONNX node {_name(nd, i)} ({nd.op_type}): folding failed "
                                  f"({type(e).__name__}: {e})") from None
        return [np.asarray(o) for o in out]
