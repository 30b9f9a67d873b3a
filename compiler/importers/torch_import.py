"""``from_torch(module, example_inputs)``: a PyTorch ``nn.Module`` as a ``tc.nn.Module``, through ``torch.export``.

The module is exported (``torch.export.export(module.eval(), args)``) and decomposed to core ATen
(``run_decompositions()``); the FX graph of that program is turned into a list of steps, each a core
ATen op mapped to the tensor frontend (``_OPS``). ``TorchModel.forward`` replays the steps on its
inputs, so the model works with ``tc.compile``, every Device and autograd.

* The export's graph signature says what each graph input is: a parameter (a float one becomes a
  frontend Tensor with ``requires_grad``, named by its PyTorch name: ``named_parameters()`` and
  ``state_dict()`` use PyTorch's names), a buffer (a constant Tensor, also in ``state_dict()``), a
  lifted tensor constant, or a user input (the model's positional arguments, in order). The user
  outputs are the model's outputs (one Tensor, or a tuple).
* Constant subgraphs (every tensor input a buffer, a lifted constant or another constant: an
  ``arange``, a causal mask from ``ones`` + ``tril``, ``~mask[:T, :T]``) are folded when the model is
  imported: PyTorch evaluates them and the results are stored as arrays. A buffer read only
  through such a subgraph is read then (``load_state_dict`` later changes the buffers the graph
  reads directly, such as BatchNorm's running statistics).
* Three rewrites, each decided when the model runs, keep the chip compiler's patterns seeing the
  model's layers: a ``bmm`` that flattens an N-d matmul is that matmul (q and k scaled once:
  ``_nd_matmul``), a constant 0/-inf mask added to scores is a ``where`` mask (``_add``), and the
  fully-masked-row guard around an attention softmax goes when no row can be fully masked
  (``_guarded_softmax``). docs/torch_import.md has the op table and the limits.
* Every op the importer cannot map is reported at once, with the graph nodes that use it, in one
  ``TorchImportError`` (before anything runs); a call the frontend refuses while the model runs
  (a shape its op cannot take) is re-raised as a ``TorchImportError`` naming the graph node.

Only this module imports torch, and only ``from_torch`` reaches it (``tc.from_torch`` is lazy).
"""
from __future__ import annotations

import math
import operator
import warnings
from contextvars import ContextVar
from typing import Callable, NamedTuple

import numpy as np

from isa.errors import TetrachipError

from compiler.frontend import functional as F
from compiler.frontend.nn import Module
from compiler.frontend.shapes import ShapeError
from compiler.frontend.tensor import Tensor, as_tensor, cat, stack, where
from compiler.importers import TorchImportError
from compiler.ir import dtypes
from compiler.ir.graph import Ops


class _Ref(NamedTuple):
    """A reference to the value of the graph node ``name`` in a step's arguments."""
    name: str


class _Step(NamedTuple):
    name: str            # the FX node's name (errors name it)
    target: str          # e.g. "aten.convolution.default"
    fn: Callable
    args: tuple
    kwargs: dict


class _Refuse(Exception):
    """Raised by an op's handler for an argument it does not handle (re-raised as TorchImportError)."""


# ---------------------------------------------------------------------------------------------- values

def _tensor(v) -> Tensor:
    return v if isinstance(v, Tensor) else as_tensor(v)


def _dims(d) -> tuple | None:
    """A reduction's ``dim`` argument: None or [] mean every axis."""
    if d is None or (isinstance(d, (list, tuple)) and len(d) == 0):
        return None
    return (d,) if isinstance(d, int) else tuple(d)


def _axis(d: int, ndim: int) -> int:
    return d % ndim if ndim else 0


def _index_at(x: Tensor, dim: int, index):
    """``x[:, ..., index]`` with ``index`` at axis ``dim``."""
    return x[(slice(None),) * _axis(dim, x.ndim) + (index,)]


# ---------------------------------------------------------------------------------------------- ops

def _binary(method: str):
    def fn(a, b, alpha=1):
        if alpha != 1:
            b = b * alpha
        if not isinstance(a, Tensor):        # aten's Scalar overloads keep self a tensor; be lenient
            return getattr(_tensor(b), method)(a, True) if method in ("add", "sub", "mul", "div") else \
                getattr(_tensor(a), method)(b)
        return getattr(a, method)(b)
    return fn


def _add(a, b, alpha=1):
    # scores + a constant mask of 0 and -inf (PyTorch's attention spells a causal or boolean mask so)
    # is where(mask == 0, scores, -inf): the masked softmax the chip compiler finds as attention
    for x, m in ((a, b), (b, a)):
        if alpha == 1 and isinstance(x, Tensor) and isinstance(m, Tensor) and m.dtype.is_float \
                and x.dtype.is_float and m.ndim <= x.ndim and (arr := _constant_value(m)) is not None:
            if arr.size and np.isneginf(arr).any() and np.all((arr == 0) | np.isneginf(arr)):
                return where(Tensor(arr == 0), x, float("-inf"))
    return _binary("add")(a, b, alpha)


def _div(a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise _Refuse(f"rounding_mode={rounding_mode!r} is not supported (true division only)")
    return _tensor(a).div(b) if isinstance(a, Tensor) or not isinstance(b, Tensor) else b.div(a, True)


def _rsub(a, b, alpha=1):
    return _tensor(b) - _tensor(a) * alpha if alpha != 1 else (b - a if isinstance(b, Tensor) else a.sub(b, True))


def _pow(a, b):
    if isinstance(a, Tensor) and not isinstance(b, Tensor) and b == -0.5:
        return a.rsqrt()
    return a.pow(b) if isinstance(a, Tensor) else _tensor(b).pow(a, True)


def _where(c, a, b):
    # where(c, scalar, x) is spelled where(~c, x, scalar): the chip's pattern for a masked softmax
    # is where(mask, scores, -inf), and a constant ~c is computed here
    if not isinstance(a, Tensor) and isinstance(b, Tensor):
        v = _constant_value(c)
        return where(Tensor(~v.astype(bool)) if v is not None else _tensor(c).logical_not(), b, a)
    return where(c, a, b)


def _masked_fill(x, mask, value):
    if isinstance(value, Tensor) and value.ndim == 0 and value.node.op is Ops.BUFFER:
        value = value.item()
    return _where(mask, value, x)


def _reduce(method: str):
    def fn(x, dim=None, keepdim=False, dtype=None):
        out = getattr(x, method)(_dims(dim), keepdim)
        return out.cast(dtype) if dtype is not None else out
    return fn


def _sum(x, dim=None, keepdim=False, dtype=None):
    return x.sum(_dims(dim), keepdim, dtype)


def _var(x, dim=None, *, correction=None, keepdim=False):
    return x.var(_dims(dim), keepdim, 1 if correction is None else int(correction))


def _max(x, dim=None, keepdim=False):
    if dim is None:
        return x.max()
    return x.max(dim, keepdim), x.argmax(dim, keepdim)


def _min(x, dim=None, keepdim=False):
    if dim is None:
        return x.min()
    return x.min(dim, keepdim), x.argmin(dim, keepdim)


def _squeeze(x, dim=None):
    if dim is None:
        return x.squeeze()
    dims = {_axis(d, x.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in dims or s != 1))


def _t(x):
    return x if x.ndim < 2 else x.transpose(0, 1)


def _slice(x, dim=0, start=None, end=None, step=1):
    return _index_at(x, dim, slice(start, end, step))


def _index(x, indices):
    return x[tuple(slice(None) if i is None else i for i in indices)]


def _split(x, split_size, dim=0):
    return x.split(split_size, dim)


def _cast(x, dtype=None, **_):
    return x if dtype is None else _tensor(x).cast(dtype)


def _to(x, *args, dtype=None, **_):
    for a in args:                               # to.dtype(x, dtype, ...) / to.device(x, device, dtype, ...)
        if isinstance(a, dtypes.DType):
            dtype = a
    return _cast(x, dtype)


def _dtype_or_default(dtype, value):
    return dtype if dtype is not None else dtypes.scalar_dtype(value)


def _full(size, fill_value, *, dtype=None, **_):
    return Tensor.full(tuple(size), fill_value, _dtype_or_default(dtype, fill_value))


def _full_like(x, fill_value, *, dtype=None, **_):
    return Tensor.full(x.shape, fill_value, dtype or x.dtype)


def _new_full(x, size, fill_value, *, dtype=None, **_):
    return Tensor.full(tuple(size), fill_value, dtype or x.dtype)


def _arange(*args, dtype=None, **_):
    return Tensor.arange(*args, dtype=dtype)


def _scalar_tensor(value, *, dtype=None, **_):
    return Tensor.full((), value, _dtype_or_default(dtype, value))


def _tri(upper: bool):
    def fn(x, diagonal=0):
        n, m = x.shape[-2:]
        keep = np.triu(np.ones((n, m), bool), diagonal) if upper else np.tril(np.ones((n, m), bool), diagonal)
        return where(Tensor(keep), x, Tensor.full((), 0, x.dtype))
    return fn


def _addmm(bias, a, b, *, beta=1, alpha=1):
    out = a.matmul(b)
    out = out * alpha if alpha != 1 else out
    return out + (bias * beta if beta != 1 else bias)


def _linear(x, w, b=None):
    return x.linear(w, b)


def _conv(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    one_d = x.ndim == 3
    if x.ndim not in (3, 4):
        raise _Refuse(f"only 1-D and 2-D convolutions are supported, got a {x.ndim}-D input {x.shape}")
    if one_d:                                          # (N, C, L) as (N, C, 1, L)
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        stride, dilation = [1] + list(stride), [1] + list(dilation)
        padding, output_padding = [0] + list(padding), [0] + list(output_padding)
    if transposed:
        out = F.conv_transpose2d(x, w, b, tuple(stride), tuple(padding), tuple(output_padding), groups,
                                 tuple(dilation))
    else:
        if any(output_padding):
            raise _Refuse(f"output_padding {output_padding} on a convolution that is not transposed")
        out = F.conv2d(x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups)
    return out.squeeze(2) if one_d else out


def _max_pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    if ceil_mode:
        raise _Refuse("ceil_mode=True is not supported")
    return F.max_pool2d(x, tuple(kernel_size), tuple(stride) or None, _pad_arg(padding), _pad_arg(dilation)), None


def _pad_arg(p):
    return tuple(p) if isinstance(p, (list, tuple)) else p


def _avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    if ceil_mode or divisor_override is not None:
        raise _Refuse("ceil_mode=True and divisor_override are not supported")
    return F.avg_pool2d(x, tuple(kernel_size), tuple(stride) or None, _pad_arg(padding), count_include_pad)


def _adaptive_avg_pool(x, output_size):
    h, w = x.shape[-2:]
    oh, ow = output_size
    if h % oh or w % ow:
        raise _Refuse(f"output size {tuple(output_size)} does not divide the input's {(h, w)} (only global or "
                      "divisible adaptive pooling is supported)")
    if (oh, ow) == (1, 1):
        return x.mean((-2, -1), keepdim=True)
    return F.avg_pool2d(x, (h // oh, w // ow))


def _batch_norm_eval(x, weight, bias, running_mean, running_var, momentum, eps):
    return F.batch_norm(x, running_mean, running_var, weight, bias, False, eps=eps), None, None


def _native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if training:
        raise _Refuse("batch norm in training mode (the module is exported in eval mode)")
    return _batch_norm_eval(x, weight, bias, running_mean, running_var, momentum, eps)


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(-len(normalized_shape), 0))
    mean = x.mean(axes, keepdim=True)
    rstd = (x.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    return F.layer_norm(x, tuple(normalized_shape), weight, bias, eps), mean, rstd


def _softmax(x, dim, half_to_float=False):
    return F.softmax(x, dim)


def _log_softmax(x, dim, half_to_float=False):
    return F.log_softmax(x, dim)


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    if dropout_p:
        raise _Refuse(f"dropout_p={dropout_p} (the module is exported in eval mode)")
    if scale is None and (attn_mask is None or attn_mask.dtype == dtypes.bool_):
        return F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal)
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        s = where(Tensor(np.tril(np.ones((lq, lk), bool))), s, float("-inf"))
    if attn_mask is not None:
        s = where(attn_mask, s, float("-inf")) if attn_mask.dtype == dtypes.bool_ else s + attn_mask
    return F.softmax(s, -1) @ v


def _dropout(x, p=0.5, train=False):
    if train and p:
        raise _Refuse("dropout in training mode (the module is exported in eval mode)")
    return x


def _native_dropout(x, p, train):
    return _dropout(x, p, train), None


def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return F.embedding(indices, weight)


def _constant_pad(x, pad, value=0):
    return F.pad(x, list(pad), value)


def _bitwise_not(x):
    return x.logical_not() if x.dtype == dtypes.bool_ else -x - 1


def _logical(method: str):
    def fn(a, b):
        return getattr(_tensor(a).bool(), method)(_tensor(b).bool())
    return fn


def _bitwise(method: str):
    def fn(a, b):
        if _tensor(a).dtype != dtypes.bool_ or _tensor(b).dtype != dtypes.bool_:
            raise _Refuse("bitwise ops are supported on bool tensors only")
        return getattr(_tensor(a), method)(b)
    return fn


def _hardsigmoid(x):
    return (x * (1 / 6) + 0.5).clamp(0.0, 1.0)


def _softplus(x, beta=1, threshold=20):
    return x.softplus() if beta == 1 else (x * beta).softplus() * (1 / beta)


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    out = (x * input_scale).elu(alpha) if input_scale != 1 else x.elu(alpha)
    return out * scale if scale != 1 else out


def _noop(*_, **__):
    return None


def _unary(method: str):
    def fn(x):
        return getattr(_tensor(x), method)()
    return fn


_OPS: dict[str, Callable] = {
    # linear algebra and convolution
    "aten.convolution": _conv, "aten.addmm": _addmm, "aten.mm": Tensor.matmul, "aten.bmm": Tensor.matmul,
    "aten.matmul": Tensor.matmul, "aten.linear": _linear,
    # norms, softmax, attention, pooling
    "aten._native_batch_norm_legit_no_training": _batch_norm_eval, "aten.native_batch_norm": _native_batch_norm,
    "aten.native_layer_norm": _layer_norm, "aten._softmax": _softmax, "aten.softmax": _softmax,
    "aten._log_softmax": _log_softmax, "aten.log_softmax": _log_softmax,
    "aten.scaled_dot_product_attention": _sdpa,
    "aten.max_pool2d_with_indices": _max_pool, "aten.avg_pool2d": _avg_pool,
    "aten.adaptive_avg_pool2d": _adaptive_avg_pool, "aten._adaptive_avg_pool2d": _adaptive_avg_pool,
    "aten.dropout": _dropout, "aten.native_dropout": _native_dropout, "aten.embedding": _embedding,
    # activations and elementwise math
    "aten.relu": _unary("relu"), "aten.sigmoid": _unary("sigmoid"), "aten.tanh": _unary("tanh"),
    "aten.silu": _unary("silu"), "aten.erf": _unary("erf"), "aten.exp": _unary("exp"), "aten.log": _unary("log"),
    "aten.sqrt": _unary("sqrt"), "aten.rsqrt": _unary("rsqrt"), "aten.abs": _unary("abs"),
    "aten.neg": _unary("neg"), "aten.reciprocal": _unary("reciprocal"), "aten.sin": _unary("sin"),
    "aten.cos": _unary("cos"), "aten.sign": _unary("sign"),
    "aten.log1p": lambda x: (x + 1).log(), "aten.expm1": lambda x: x.exp() - 1,
    "aten.gelu": lambda x, approximate="none": x.gelu(approximate),
    "aten.leaky_relu": lambda x, negative_slope=0.01: x.leaky_relu(negative_slope),
    "aten.hardtanh": lambda x, min_val=-1.0, max_val=1.0: x.clamp(min_val, max_val),
    "aten.clamp": lambda x, min=None, max=None: x.clamp(min, max),  # noqa: A002 (aten's names)
    "aten.clamp_min": lambda x, min: x.clamp(min, None), "aten.clamp_max": lambda x, max: x.clamp(None, max),  # noqa: A002
    "aten.hardsigmoid": _hardsigmoid, "aten.hardswish": lambda x: x * _hardsigmoid(x),
    "aten.softplus": _softplus, "aten.elu": _elu,
    "aten.pow": _pow, "aten.maximum": lambda a, b: a.maximum(b), "aten.minimum": lambda a, b: a.minimum(b),
    "aten.add": _add, "aten.sub": _binary("sub"), "aten.mul": _binary("mul"), "aten.div": _div,
    "aten.rsub": _rsub,
    # comparisons and selection
    "aten.eq": _binary("eq"), "aten.ne": _binary("ne"), "aten.lt": _binary("lt"), "aten.gt": _binary("gt"),
    "aten.le": _binary("le"), "aten.ge": _binary("ge"),
    "aten.logical_not": lambda x: _tensor(x).logical_not(), "aten.bitwise_not": _bitwise_not,
    "aten.logical_and": _logical("logical_and"), "aten.logical_or": _logical("logical_or"),
    "aten.bitwise_and": _bitwise("logical_and"), "aten.bitwise_or": _bitwise("logical_or"),
    "aten.where": _where, "aten.masked_fill": _masked_fill, "aten.triu": _tri(True), "aten.tril": _tri(False),
    # reductions
    "aten.sum": _sum, "aten.mean": _reduce("mean"), "aten.amax": _reduce("max"), "aten.amin": _reduce("min"),
    "aten.any": _reduce("any"), "aten.all": _reduce("all"), "aten.var": _var, "aten.max": _max, "aten.min": _min,
    "aten.argmax": lambda x, dim=None, keepdim=False: x.argmax(dim, keepdim),
    "aten.argmin": lambda x, dim=None, keepdim=False: x.argmin(dim, keepdim),
    # movement
    "aten.view": lambda x, size: x.reshape(tuple(size)), "aten.reshape": lambda x, size: x.reshape(tuple(size)),
    "aten._unsafe_view": lambda x, size: x.reshape(tuple(size)),
    "aten.permute": lambda x, dims: x.permute(tuple(dims)), "aten.transpose": lambda x, d0, d1: x.transpose(d0, d1),
    "aten.t": _t, "aten.expand": lambda x, size, implicit=False: x.expand(tuple(size)),
    "aten.squeeze": _squeeze, "aten.unsqueeze": lambda x, dim: x.unsqueeze(dim),
    "aten.cat": lambda tensors, dim=0: cat([_tensor(t) for t in tensors], dim),
    "aten.stack": lambda tensors, dim=0: stack([_tensor(t) for t in tensors], dim),
    "aten.split": _split, "aten.split_with_sizes": _split, "aten.slice": _slice,
    "aten.select": lambda x, dim, index: _index_at(x, dim, index),
    "aten.index_select": lambda x, dim, index: _index_at(x, dim, index), "aten.index": _index,
    "aten.unbind": lambda x, dim=0: tuple(_index_at(x, dim, i) for i in range(x.shape[_axis(dim, x.ndim)])),
    "aten.flip": lambda x, dims: x.flip(tuple(dims)), "aten.repeat": lambda x, repeats: x.repeat(tuple(repeats)),
    "aten.constant_pad_nd": _constant_pad,
    "aten.clone": lambda x, **_: x, "aten.alias": lambda x: x, "aten.contiguous": lambda x, **_: x,
    "aten.lift_fresh_copy": lambda x: x, "aten.detach": lambda x: x.detach(),
    "aten._to_copy": _cast, "aten.to": _to,
    # creation (folded at import unless a size comes from an input's shape)
    "aten.full": _full, "aten.zeros": lambda size, **kw: _full(size, 0.0, **kw),
    "aten.ones": lambda size, **kw: _full(size, 1.0, **kw), "aten.arange": _arange,
    "aten.scalar_tensor": _scalar_tensor, "aten.full_like": _full_like,
    "aten.zeros_like": lambda x, **kw: _full_like(x, 0, **kw), "aten.ones_like": lambda x, **kw: _full_like(x, 1, **kw),
    "aten.new_full": _new_full, "aten.new_zeros": lambda x, size, **kw: _new_full(x, size, 0, **kw),
    "aten.new_ones": lambda x, size, **kw: _new_full(x, size, 1, **kw),
    # graph plumbing: tuple items, shape arithmetic (dynamic_shapes), run-time asserts
    "_operator.getitem": operator.getitem, "aten.sym_size": lambda x, dim: x.shape[dim],
    "_operator.add": operator.add, "_operator.sub": operator.sub, "_operator.mul": operator.mul,
    "_operator.floordiv": operator.floordiv, "_operator.truediv": operator.truediv, "_operator.mod": operator.mod,
    "_operator.neg": operator.neg,
    "aten._assert_tensor_metadata": _noop, "aten._assert_scalar": _noop, "aten.sym_constrain_range_for_size": _noop,
    "aten._assert_async": _noop, "aten.sym_constrain_range": _noop,
}

_FOLD_NEVER = {"aten._assert_tensor_metadata", "aten._assert_scalar", "aten.sym_constrain_range_for_size",
               "aten._assert_async", "aten.sym_constrain_range", "aten.sym_size"}


def supported_ops() -> list[str]:
    """The ATen op packets (``aten.convolution``, ...) the importer maps, sorted."""
    return sorted(k for k in _OPS if k.startswith("aten."))


# ---------------------------------------------------------------------------------------------- the model

class TorchModel(Module):
    """A model imported from PyTorch (``from_torch``): ``forward(*inputs)`` replays the exported graph
    with frontend ops. Parameters keep PyTorch's names (``named_parameters()``, ``state_dict()``)."""

    def __init__(self, tensors: dict, buffers: set, consts: dict, placeholders: list, inputs: list,
                 steps: list, outputs: list, source: str):
        self._tensors = tensors            # PyTorch name -> Tensor (parameters, then buffers)
        self._buffers = buffers
        self._consts = consts              # graph node name -> folded value (Tensor, scalar or tuple)
        self._placeholders = placeholders  # (graph node name, PyTorch name) for parameters and buffers
        self._inputs = inputs              # (graph node name, expected shape with None where dynamic, dtype)
        self._steps = steps
        self._outputs = outputs            # _Ref or constant, in output order
        self._source = source
        self.training = False

    def named_tensors(self, prefix: str = ""):
        for name, t in self._tensors.items():
            yield prefix + name, t

    def named_buffers(self):
        return [(n, t) for n, t in self._tensors.items() if n in self._buffers]

    def __repr__(self) -> str:
        n = sum(t.numel() for t in self.parameters())
        return (f"TorchModel({self._source}: {len(self._inputs)} input(s), {len(self._steps)} ops, "
                f"{len(self.parameters())} parameters ({n} values), {len(self._outputs)} output(s))")

    def ops(self) -> dict[str, int]:
        """How many times each ATen op occurs in the imported graph (after folding)."""
        counts: dict[str, int] = {}
        for s in self._steps:
            counts[s.target] = counts.get(s.target, 0) + 1
        return counts

    def forward(self, *inputs):
        if len(inputs) != len(self._inputs):
            raise TorchImportError(f"{self._source}: expected {len(self._inputs)} input(s), got {len(inputs)}")
        env: dict = dict(self._consts)
        for node, fqn in self._placeholders:
            env[node] = self._tensors[fqn]
        for (node, shape, dt), x in zip(self._inputs, inputs):
            x = x if isinstance(x, Tensor) else Tensor(np.asarray(x))
            if len(x.shape) != len(shape) or any(e is not None and e != g for e, g in zip(shape, x.shape)):
                want = tuple("?" if e is None else e for e in shape)
                raise TorchImportError(f"{self._source}: input {node!r} has shape {tuple(x.shape)}, the model was "
                                       f"exported for {want} (export with dynamic_shapes for other sizes)")
            env[node] = x.cast(dt)

        def val(a):
            if isinstance(a, _Ref):
                return env[a.name]
            if isinstance(a, (list, tuple)):
                return type(a)(val(v) for v in a)
            return a

        token = _INPUT_NODES.set(frozenset(id(env[node].node) for node, _, _ in self._inputs))
        try:
            for s in self._steps:
                try:
                    env[s.name] = s.fn(*val(s.args), **{k: val(v) for k, v in s.kwargs.items()})
                except (_Refuse, ShapeError, TypeError, ValueError, IndexError) as e:
                    if isinstance(e, TetrachipError):
                        raise
                    raise TorchImportError(f"{self._source}: node {s.name!r} ({s.target}): {e}") from None
        finally:
            _INPUT_NODES.reset(token)
        outs = [val(o) for o in self._outputs]
        outs = [_tensor(o) if not isinstance(o, Tensor) else o for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)


# ---------------------------------------------------------------------------------------------- import

def from_torch(module, example_inputs, *, dynamic_shapes=None) -> TorchModel:
    """Import a ``torch.nn.Module``: export it in eval mode on ``example_inputs`` (a tensor or array, or a
    tuple/list of them: the positional arguments), decompose to core ATen, map each op to the frontend.
    ``dynamic_shapes`` is passed to ``torch.export.export`` (then the model takes those sizes; see
    docs/torch_import.md). Raises ``TorchImportError`` listing every op it cannot map."""
    import torch
    from torch.export.graph_signature import InputKind, OutputKind

    if not isinstance(module, torch.nn.Module):
        raise TorchImportError(f"from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    source = type(module).__name__
    raw = example_inputs if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    args = []
    for i, a in enumerate(raw):
        if isinstance(a, Tensor):
            a = a.numpy()
        if isinstance(a, np.ndarray):
            a = torch.from_numpy(np.ascontiguousarray(a))
        if not isinstance(a, torch.Tensor):
            raise TorchImportError(f"from_torch: example input {i} is a {type(a).__name__}; the importer takes "
                                   "tensors (or arrays) as positional inputs")
        args.append(a)
    was_training = module.training
    try:
        with warnings.catch_warnings():     # torch.export's own use of a deprecated pytree API
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            ep = torch.export.export(module.eval(), tuple(args), dynamic_shapes=dynamic_shapes).run_decompositions()
    except Exception as e:  # noqa: BLE001 (torch.export raises many kinds; one clear error)
        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()][:2]
        why = " ".join(lines)[:400] or type(e).__name__
        raise TorchImportError(f"from_torch: torch.export could not export {source}: {type(e).__name__}: "
                               f"{why}") from e
    finally:
        module.train(was_training)
    return _build(ep, source, torch, InputKind, OutputKind)


def _np(t) -> np.ndarray:
    import torch
    if t.dtype in (torch.float16, torch.bfloat16, torch.float64):
        t = t.float()
    arr = t.detach().cpu().numpy()
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    if arr.dtype.kind in "iu" and arr.size and (arr.min() < lo or arr.max() > hi):
        raise TorchImportError(f"an integer tensor holds values outside int32 ({arr.min()}..{arr.max()})")
    return arr


def _target_name(target) -> str:
    """The key of ``_OPS``: ``aten.add`` for every overload of add, ``_operator.getitem`` for a Python function."""
    if hasattr(target, "_overloadpacket"):
        return f"{target.namespace}.{target._overloadpacket.__name__}"
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__name__', repr(target))}"


def _display(target) -> str:
    """How errors and ``TorchModel.ops()`` name a node's op: ``aten.add.Tensor``, ``operator.getitem``."""
    if hasattr(target, "_overloadpacket"):
        return str(target)
    return _target_name(target).lstrip("_")


def _build(ep, source: str, torch, InputKind, OutputKind) -> TorchModel:
    from torch.fx import Node as FxNode

    sig = ep.graph_signature
    nodes = list(ep.graph_module.graph.nodes)
    by_name = {n.name: n for n in nodes}
    tensors: dict = {}
    buffers: set = set()
    placeholders, inputs = [], []
    static: dict = {}                # node name -> torch value, for folding
    tied: dict = {}                  # id of a torch parameter -> its Tensor
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            val = by_name[name].meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise TorchImportError(f"{source}: user input {name!r} is not a tensor ({type(val).__name__})")
            shape = tuple(d if isinstance(d, int) else None for d in val.shape)
            inputs.append((name, shape, _dtype(val.dtype, torch, source)))
        elif spec.kind == InputKind.PARAMETER:
            t = ep.state_dict[spec.target]
            if id(t) not in tied:               # a tied parameter (an LM head sharing the embedding): one Tensor
                arr = _np(t)
                tied[id(t)] = Tensor(arr, requires_grad=arr.dtype.kind == "f" and t.requires_grad)
            tensors[spec.target] = tied[id(t)]
            placeholders.append((name, spec.target))
        elif spec.kind == InputKind.BUFFER:
            t = ep.state_dict[spec.target] if spec.persistent else ep.constants[spec.target]
            tensors[spec.target] = Tensor(_np(t))
            buffers.add(spec.target)
            placeholders.append((name, spec.target))
            static[name] = t
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            static[name] = ep.constants[spec.target]
        else:
            raise TorchImportError(f"{source}: graph input {name!r} of kind {spec.kind.name} is not supported")
    for spec in sig.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            raise TorchImportError(f"{source}: the exported graph has a {spec.kind.name} output ({spec.target}): "
                                   "the model mutates state in forward, which the importer does not replay")

    def clean(a):
        if isinstance(a, FxNode):
            return _Ref(a.name)
        if isinstance(a, (list, tuple)):
            return type(a)(clean(v) for v in a)
        if isinstance(a, torch.dtype):
            return _dtype(a, torch, source)
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return None
        return a

    # fold constant subgraphs, find unsupported ops
    buffer_nodes = {p for p, _ in placeholders}
    unsupported: dict[str, list[str]] = {}
    steps, consts_used = [], set()
    for n in nodes:
        if n.op in ("placeholder", "output"):
            continue
        if n.op != "call_function":
            unsupported.setdefault(f"{n.op} {n.target}", []).append(n.name)
            continue
        key = _target_name(n.target)
        refs = [a for a in n.all_input_nodes]
        if key not in _FOLD_NEVER and all(r.name in static for r in refs):
            def sub(a):
                return static[a.name] if isinstance(a, FxNode) else a
            try:
                static[n.name] = n.target(*torch.fx.node.map_aggregate(n.args, sub),
                                          **torch.fx.node.map_aggregate(n.kwargs, sub))
                continue
            except Exception:  # noqa: BLE001 (not foldable: left to the op's mapping)
                pass
        if key not in _OPS:
            unsupported.setdefault(_display(n.target), []).append(n.name)
            continue
        if key == "aten.where" and (guard := _softmax_guard(n)) is not None:
            more = [r for r in guard if hasattr(r, "name")]
            consts_used.update(r.name for r in more if r.name in static and r.name not in buffer_nodes)
            steps.append(_Step(n.name, "aten._safe_softmax", _guarded_softmax, clean(guard), {}))
            continue
        batched = _batched_operands(n) if key == "aten.bmm" else None
        if batched is not None:                 # a batched matmul flattened for bmm: one N-d matmul
            (xa, ca), (xb, cb) = map(_unscaled, batched)
            more = [r for r in (*batched, xa, xb) if r is not None]
            consts_used.update(r.name for r in more if r.name in static and r.name not in buffer_nodes)
            steps.append(_Step(n.name, _display(n.target), _nd_matmul, clean(
                (n.args[0], n.args[1], batched[0], batched[1], xa, ca, xb, cb)), {}))
            continue
        consts_used.update(r.name for r in refs if r.name in static and r.name not in buffer_nodes)
        steps.append(_Step(n.name, _display(n.target), _OPS[key], clean(tuple(n.args)),
                           {k: clean(v) for k, v in n.kwargs.items()}))
    if unsupported:
        lines = "; ".join(f"{t} (nodes: {', '.join(ns[:6])}{', ...' if len(ns) > 6 else ''})"
                          for t, ns in sorted(unsupported.items()))
        raise TorchImportError(f"{source}: {sum(len(v) for v in unsupported.values())} node(s) use "
                               f"{len(unsupported)} op(s) the importer does not support: {lines}")

    outputs = []
    for spec in sig.output_specs:
        a = spec.arg
        if hasattr(a, "name") and a.name in by_name:
            if a.name in static and a.name not in buffer_nodes:
                consts_used.add(a.name)
            outputs.append(_Ref(a.name))
        else:
            outputs.append(getattr(a, "value", None))
    consts = {name: _const(static[name], torch) for name in consts_used}
    return TorchModel(tensors, buffers, consts, placeholders, inputs, steps, outputs, source)


_VIEWS = {"aten.view", "aten._unsafe_view", "aten.reshape"}


def _batched_operands(n):
    """``(A, B)`` when both operands of the ``bmm`` node ``n`` are views (``view(A, (N, m, k))``) and every
    use of the product is a view: PyTorch's decomposition of an N-d ``A @ B``. Whether ``A`` and ``B``
    are that N-d product's operands is decided when the model runs (``_nd_matmul``: sizes may be symbolic
    here); a view of the N-d product equals the same view of the flattened one."""
    if not n.users or any(_target_name(u.target) not in _VIEWS for u in n.users):
        return None
    ops = []
    for a in n.args[:2]:
        if not hasattr(a, "target") or _target_name(a.target) not in _VIEWS or not hasattr(a.args[0], "name"):
            return None
        ops.append(a.args[0])
    return tuple(ops)


def _unscaled(e):
    """``(X, c)`` when the node ``e`` is ``X * c`` for a Python number ``c``, seen through clones and
    expands (``_nd_matmul`` uses ``X`` only when it has ``e``'s shape), else ``(None, 1.0)``: PyTorch's
    attention scales q and k by ``sqrt(scale)`` each; the chip's attention pattern scales ``q @ k^T`` once."""
    x = e
    while hasattr(x, "target") and _target_name(x.target) in ("aten.clone", "aten.expand", "aten.alias"):
        x = x.args[0]
    if hasattr(x, "target") and _target_name(x.target) == "aten.mul" and hasattr(x.args[0], "name") \
            and isinstance(x.args[1], (int, float)) and not isinstance(x.args[1], bool):
        return x.args[0], float(x.args[1])
    return None, 1.0


def _nd_matmul(a3, b3, a, b, xa, ca, xb, cb):
    """``bmm(a3, b3)`` where ``a3``, ``b3`` are views of ``a``, ``b`` (and ``a == xa * ca`` when ``xa``
    has ``a``'s shape, likewise ``b``): ``a @ b`` (scaled once) when that is the same product, N-d."""
    batch = a.shape[:-2]
    if a.ndim < 3 or a.ndim != b.ndim or batch != b.shape[:-2] or not all(isinstance(d, int) for d in batch) \
            or math.prod(batch) != a3.shape[0] or a.shape[-2:] != a3.shape[-2:] or b.shape[-2:] != b3.shape[-2:]:
        return a3.matmul(b3)
    scale = 1.0
    if xa is not None and xa.shape == a.shape:
        a, scale = xa, scale * ca
    if xb is not None and xb.shape == b.shape:
        b, scale = xb, scale * cb
    out = a.matmul(b)
    return out if scale == 1 else out * scale


def _softmax_guard(n):
    """The arguments of ``_guarded_softmax`` when the ``where`` node ``n`` is the guard PyTorch's attention
    puts around its softmax (``_safe_softmax``: rows of scores ``S`` that are all -inf give zeros, not NaN),
    spelled ``where(~any(~(S == -inf), -1, keepdim), full_like(P, 0), P)`` with ``P = softmax(S, -1)``."""
    def is_(node, name):
        return hasattr(node, "target") and _target_name(node.target) == name

    c, zero, p = n.args[:3]
    if not (is_(p, "aten._softmax") and is_(zero, "aten.full_like") and zero.args[0] is p and zero.args[1] == 0
            and is_(c, "aten.logical_not") and is_(c.args[0], "aten.any")):
        return None
    a = c.args[0]
    if not is_(a.args[0], "aten.logical_not") or not is_(a.args[0].args[0], "aten.eq"):
        return None
    eq, s = a.args[0].args[0], p.args[0]
    if eq.args[0] is not s or eq.args[1] != float("-inf") or list(a.args[1:2]) not in ([-1], [[-1]]) \
            or p.args[1] != -1:
        return None
    if is_(s, "aten.add"):                       # scores + a mask
        return (c, zero, p, "add", *s.args[:2])
    if is_(s, "aten.where"):                     # where(mask, scores, -inf) / where(~mask, -inf, scores)
        return (c, zero, p, "where", *s.args[:3])
    if _target_name(s.target) in ("aten.view", "aten._unsafe_view", "aten.mul", "aten.div", "aten.bmm"):
        return (c, zero, p, "none")              # unmasked scores (finite for finite inputs)
    return None


#: ids of the graph nodes of the inputs of the TorchModel.forward running now (eager inputs are constants
#: to the IR: this tells them from the model's own constants)
_INPUT_NODES: ContextVar[frozenset] = ContextVar("_INPUT_NODES", default=frozenset())


def _constant_value(x) -> np.ndarray | None:
    """The value of ``x`` when it does not depend on the model's inputs (a Python number, a Tensor whose
    graph reaches neither an INPUT node nor the running forward's inputs), else None."""
    if isinstance(x, (bool, int, float)):
        return np.asarray(x)
    if not isinstance(x, Tensor):
        return None
    inputs = _INPUT_NODES.get()
    stack, seen = [x.node], set()
    while stack:
        node = stack.pop()
        if node.op is Ops.INPUT or id(node) in inputs:
            return None
        for src in node.src:
            if id(src) not in seen:
                seen.add(id(src))
                stack.append(src)
    return x.numpy()


def _is_neginf(x) -> bool:
    v = _constant_value(x) if isinstance(x, (float, Tensor)) and getattr(x, "ndim", 0) == 0 else None
    return v is not None and bool(np.isneginf(v))


def _guarded_softmax(c, zero, p, kind, *ops):
    """PyTorch's ``_safe_softmax`` guard ``where(c, zero, p)``, or just the softmax ``p`` when no row of the
    scores can be all -inf: they are unmasked, or masked by a constant (known once the model's shapes
    are) that leaves every row a key. The chip compiler finds that softmax as attention."""
    keep = None
    if kind == "none":
        return p
    if kind == "add":
        for m in ops:
            v = _constant_value(m)
            if v is not None and v.dtype.kind == "f":
                keep = v > -np.inf
                break
    elif kind == "where":
        cond, a, b = ops
        v = _constant_value(cond)
        if v is not None and (_is_neginf(a) or _is_neginf(b)):
            keep = v.astype(bool) if _is_neginf(b) else ~v.astype(bool)
    if keep is not None and keep.size and bool(keep.any(-1).all()):
        return p
    return where(c, zero, p)


def _const(v, torch):
    """A folded value as the frontend takes it: a 0-d tensor as a Python scalar, others as Tensors."""
    if isinstance(v, torch.Tensor):
        arr = _np(v)
        return arr.item() if arr.ndim == 0 else Tensor(arr)
    if isinstance(v, (list, tuple)):
        return type(v)(_const(x, torch) for x in v)
    return v


def _dtype(dt, torch, source: str):
    if dt.is_floating_point:
        return dtypes.float32
    if dt == torch.bool:
        return dtypes.bool_
    if dt == torch.int8:
        return dtypes.int8
    if dt in (torch.int16, torch.int32, torch.int64, torch.uint8):
        return dtypes.int32
    raise TorchImportError(f"{source}: dtype {dt} is not supported (float, int and bool tensors only)")
