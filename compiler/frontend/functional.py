"""Neural-network functions composed from Tensor ops: convolution, pooling, norms, softmax, losses.

Signatures follow ``torch.nn.functional``. Layout is NCHW. The common ones are
also Tensor methods (``x.softmax(-1)``, ``x.conv2d(w)``).
"""
from __future__ import annotations

import functools
import inspect
import math

import numpy as np

from isa.ints import cdiv

from compiler.ir import dtypes
from compiler.frontend import random as _random
from compiler.frontend.shapes import ArgumentError, ShapeError, check_shape, flag, int_arg, pair, shape_error
from compiler.frontend.tensor import Tensor, as_tensor, where


def _windows(x: Tensor, k, stride, dilation) -> Tensor:
    """(..., H, W) -> (..., OH, OW, KH, KW) sliding windows of an already padded input, in a fixed
    handful of movement ops (tinygrad's pooling trick): repeat each row ``e`` times and re-read it
    with a row length of ``i*f + d``, so that row ``r`` starts ``r*d`` elements later; strides
    come from a reshape and a shrink."""
    i_ = x.shape[-2:]
    noop = [None] * (x.ndim - 2)
    o_ = [(i - d * (kk - 1) - 1) // s + 1 for i, d, kk, s in zip(i_, dilation, k, stride)]
    if any(o <= 0 for o in o_):
        raise shape_error("conv/pool", [x.shape], f"kernel {k} with dilation {dilation} is larger than the input")
    n = len(noop)
    if all(kk <= s for kk, s in zip(k, stride)) and all(d == 1 for d in dilation):
        # non-overlapping windows (pooling with stride >= kernel): pad, reshape, shrink; no repeat
        xup = x.pad(noop + [(0, max(0, o * s - i)) for i, o, s in zip(i_, o_, stride)])
        xup = xup.shrink(noop + [(0, o * s) for o, s in zip(o_, stride)])
        xup = xup.reshape(x.shape[:-2] + tuple(v for o, s in zip(o_, stride) for v in (o, s)))
        xup = xup.shrink(noop + [b for o, kk in zip(o_, k) for b in ((0, o), (0, kk))])
        return xup.permute(*range(n), n, n + 2, n + 1, n + 3)
    f_ = [1 + int(o * s > i + d) for o, s, i, d in zip(o_, stride, i_, dilation)]
    e_ = [cdiv(kk * (i * f + d), i) for kk, i, d, f in zip(k, i_, dilation, f_)]
    pre = x.shape[:-2]
    xup = x.reshape(pre + tuple(v for i in i_ for v in (1, i)))
    xup = xup.expand(pre + tuple(v for e, i in zip(e_, i_) for v in (e, i)))
    xup = xup.reshape(pre + tuple(e * i for e, i in zip(e_, i_)))
    xup = xup.shrink(noop + [(0, kk * (i * f + d)) for kk, i, d, f in zip(k, i_, dilation, f_)])
    xup = xup.reshape(pre + tuple(v for kk, i, d, f in zip(k, i_, dilation, f_) for v in (kk, i * f + d)))
    xup = xup.shrink(noop + [b for kk, o, s in zip(k, o_, stride) for b in ((0, kk), (0, o * s))])
    xup = xup.reshape(pre + tuple(v for kk, o, s in zip(k, o_, stride) for v in (kk, o, s)))
    xup = xup.shrink(noop + [b for kk, o in zip(k, o_) for b in ((0, kk), (0, o), (0, 1))])
    xup = xup.reshape(pre + tuple(v for kk, o in zip(k, o_) for v in (kk, o)))
    return xup.permute(*range(n), n + 1, n + 3, n, n + 2)


def _pooled(op: str, x) -> None:
    """A pooling input: at least 2-D (the last two dimensions are pooled)."""
    if not isinstance(x, Tensor) or x.ndim < 2:
        raise shape_error(op, [getattr(x, "shape", ())], "input must have at least 2 dimensions (…, H, W)")


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-D cross-correlation, (N, Cin, H, W) * (Cout, Cin/groups, KH, KW) -> (N, Cout, OH, OW)."""
    if x.ndim != 4 or weight.ndim != 4:
        raise shape_error("conv2d", [x.shape, weight.shape],
                          "input must be (N, C, H, W) and weight (Cout, Cin/groups, KH, KW)")
    n, cin, _, _ = x.shape
    cout, cpg, kh, kw = weight.shape
    groups = int_arg("conv2d", "groups", groups, 1)
    if cin % groups or cout % groups or cin // groups != cpg:
        raise shape_error("conv2d", [x.shape, weight.shape], f"channels do not match groups={groups}")
    ph, pw = pair(padding, "conv2d", "padding")
    xp = x.pad([None, None, (ph, ph), (pw, pw)])
    win = _windows(xp, (kh, kw), pair(stride, "conv2d", "stride", 1),
                   pair(dilation, "conv2d", "dilation", 1))      # N, Cin, OH, OW, KH, KW
    oh, ow = win.shape[2:4]
    win = win.reshape(n, groups, 1, cpg, oh, ow, kh, kw)
    w = weight.reshape(1, groups, cout // groups, cpg, 1, 1, kh, kw)
    out = (win * w).sum((3, 6, 7)).reshape(n, cout, oh, ow)
    return out if bias is None else out + bias.reshape(1, cout, 1, 1)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed convolution, weight (Cin, Cout/groups, KH, KW): zero-stuff the input by ``stride``,
    pad by ``dilation*(k-1)-padding``, and correlate with the flipped, transposed kernel."""
    if x.ndim != 4 or weight.ndim != 4:
        raise shape_error("conv_transpose2d", [x.shape, weight.shape], "input must be 4-D and weight 4-D")
    n, cin, h, w_ = x.shape
    wcin, cpg, kh, kw = weight.shape
    groups = int_arg("conv_transpose2d", "groups", groups, 1)
    if wcin != cin or cin % groups:
        raise shape_error("conv_transpose2d", [x.shape, weight.shape], f"channels do not match groups={groups}")
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = (pair(v, "conv_transpose2d", w, m) for v, w, m in (
        (stride, "stride", 1), (padding, "padding", 0), (output_padding, "output_padding", 0),
        (dilation, "dilation", 1)))
    if sh > 1 or sw > 1:
        x = x.reshape(n, cin, h, 1, w_, 1).pad([None, None, None, (0, sh - 1), None, (0, sw - 1)])
        x = x.reshape(n, cin, h * sh, w_ * sw)[..., : (h - 1) * sh + 1, : (w_ - 1) * sw + 1]
    bh, bw = dh * (kh - 1) - ph, dw * (kw - 1) - pw
    x = x.pad([None, None, (bh, bh + oph), (bw, bw + opw)])
    wt = weight.reshape(groups, cin // groups, cpg, kh, kw).transpose(1, 2).reshape(groups * cpg, cin // groups, kh, kw)
    return conv2d(x, wt.flip((2, 3)), bias, 1, 0, (dh, dw), groups)


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1) -> Tensor:
    k = pair(kernel_size, "max_pool2d", "kernel_size", 1)
    ph, pw = pair(padding, "max_pool2d", "padding")
    _pooled("max_pool2d", x)
    xp = x.pad([None] * (x.ndim - 2) + [(ph, ph), (pw, pw)], value=float("-inf")) if (ph or pw) else x
    return _windows(xp, k, pair(stride if stride is not None else k, "max_pool2d", "stride", 1),
                    pair(dilation, "max_pool2d", "dilation", 1)).max((-2, -1))


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0, count_include_pad: bool = True) -> Tensor:
    k = pair(kernel_size, "avg_pool2d", "kernel_size", 1)
    ph, pw = pair(padding, "avg_pool2d", "padding")
    s = pair(stride if stride is not None else k, "avg_pool2d", "stride", 1)
    _pooled("avg_pool2d", x)
    xp = x.pad([None] * (x.ndim - 2) + [(ph, ph), (pw, pw)])
    if count_include_pad:
        return _windows(xp, k, s, (1, 1)).mean((-2, -1))
    ones = x.ones_like(dtypes.float32).pad([None] * (x.ndim - 2) + [(ph, ph), (pw, pw)])
    return _windows(xp, k, s, (1, 1)).sum((-2, -1)) / _windows(ones, k, s, (1, 1)).sum((-2, -1))


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False,
               momentum=0.1, eps=1e-5) -> Tensor:
    """Normalize over all axes but 1. In training, batch statistics are used (running ones are not
    updated here: ``nn.BatchNorm2d`` does that)."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = tuple(x.shape[1] if i == 1 else 1 for i in range(x.ndim))
    if training:
        mean = x.mean(axes, keepdim=True)
        var = x.var(axes, keepdim=True, correction=0)
    else:
        if running_mean is None or running_var is None:
            raise ShapeError("batch_norm: outside training, running_mean and running_var are needed")
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    out = (x - mean) * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    return out + bias.reshape(shape) if bias is not None else out


def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps=1e-5) -> Tensor:
    normalized_shape = check_shape("layer_norm", normalized_shape)
    if tuple(x.shape[-len(normalized_shape):]) != normalized_shape:
        raise shape_error("layer_norm", [x.shape], f"trailing dims must be {normalized_shape}")
    axes = tuple(range(-len(normalized_shape), 0))
    out = (x - x.mean(axes, keepdim=True)) * (x.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    out = out * weight if weight is not None else out
    return out + bias if bias is not None else out


def rms_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, eps=1e-6) -> Tensor:
    normalized_shape = check_shape("rms_norm", normalized_shape)
    if tuple(x.shape[-len(normalized_shape):]) != normalized_shape:
        raise shape_error("rms_norm", [x.shape], f"trailing dims must be {normalized_shape}")
    axes = tuple(range(-len(normalized_shape), 0))
    out = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    x = x._f()
    e = (x - x.max(dim, keepdim=True).detach()).exp()
    return e / e.sum(dim, keepdim=True)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return x._f() - x.logsumexp(dim, keepdim=True)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise ArgumentError(f"dropout: p must be a number in [0, 1), got {p!r}")
    if not training or p == 0:
        return x
    if not 0 <= p < 1:
        raise ShapeError(f"dropout: p must be in [0, 1), got {p}")
    keep = _random.bernoulli(1 - p, x.shape)
    return where(keep, x * (1 / (1 - p)), 0.0)


def embedding(idx, weight: Tensor) -> Tensor:
    """Rows of ``weight`` at ``idx`` (a Tensor, array, list or int of indices)."""
    return weight[as_tensor(idx)]


def one_hot(idx, num_classes: int) -> Tensor:
    idx = as_tensor(idx)
    num_classes = int_arg("one_hot", "num_classes", num_classes, 1)
    return idx.unsqueeze(-1).eq(Tensor.arange(num_classes)).cast(dtypes.int32)


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if not isinstance(reduction, str):
        raise ShapeError(f"unknown reduction {reduction!r:.40} (mean, sum, none)")
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ShapeError(f"unknown reduction {reduction!r} (mean, sum, none)")


def mse_loss(x: Tensor, y, reduction="mean") -> Tensor:
    return _reduce((x - y).square(), reduction)


def l1_loss(x: Tensor, y, reduction="mean") -> Tensor:
    return _reduce((x - y).abs(), reduction)


def nll_loss(logp: Tensor, target: Tensor, reduction="mean") -> Tensor:
    """``logp`` (N, C) log-probabilities, ``target`` (N,) class indices."""
    if logp.ndim != 2 or target.shape != logp.shape[:1]:
        raise shape_error("nll_loss", [logp.shape, target.shape], "expects (N, C) and (N,)")
    picked = (logp * one_hot(target, logp.shape[1]).cast(logp.dtype)).sum(-1)
    return _reduce(-picked, reduction)


def cross_entropy(logits: Tensor, target: Tensor, reduction="mean", label_smoothing: float = 0.0) -> Tensor:
    """``target`` holds class indices (N,) or class probabilities (N, C)."""
    target = as_tensor(target)
    logp = log_softmax(logits, -1)
    if target.dtype.is_float and target.shape == logits.shape:
        probs = target
    else:
        if logits.ndim != 2 or target.shape != logits.shape[:1]:
            raise shape_error("cross_entropy", [logits.shape, target.shape], "expects (N, C) logits and (N,) targets")
        probs = one_hot(target, logits.shape[1]).cast(logp.dtype)
    if label_smoothing:
        probs = probs * (1 - label_smoothing) + label_smoothing / logits.shape[-1]
    return _reduce(-(probs * logp).sum(-1), reduction)


def kl_div(logp: Tensor, target: Tensor, reduction="mean", log_target: bool = False) -> Tensor:
    """PyTorch's kl_div: ``logp`` are log-probabilities; pointwise ``target * (log target - logp)``."""
    if log_target:
        loss = target.exp() * (target - logp)
    else:
        loss = where(target.gt(0), target * (where(target.gt(0), target, 1.0).log() - logp), 0.0)
    if isinstance(reduction, str) and reduction == "batchmean":
        return loss.sum() / logp.shape[0]
    return _reduce(loss, reduction)


def binary_cross_entropy(p: Tensor, y, reduction="mean") -> Tensor:
    y = as_tensor(y, p.dtype)
    lp, l1p = p.log().maximum(-100.0), (1 - p).log().maximum(-100.0)
    return _reduce(-(y * lp + (1 - y) * l1p), reduction)


def binary_cross_entropy_with_logits(z: Tensor, y, reduction="mean") -> Tensor:
    y = as_tensor(y, z.dtype)
    return _reduce(z.relu() - z * y + (1 + (-z.abs()).exp()).log(), reduction)


def pad(x: Tensor, pads, value=0) -> Tensor:
    """PyTorch-style padding: ``(left, right, top, bottom, ...)`` from the last dimension backwards."""
    if not isinstance(pads, (list, tuple)) or len(pads) % 2 or len(pads) // 2 > x.ndim:
        raise shape_error("pad", [x.shape], f"pads must be a list of (before, after) ints, two per padded dimension "
                                            f"(at most {x.ndim}), got {pads!r}")
    pairs = [(pads[i], pads[i + 1]) for i in range(0, len(pads), 2)]
    full = [None] * (x.ndim - len(pairs)) + list(reversed(pairs))
    return x.pad(full, value)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                                 is_causal: bool = False) -> Tensor:
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]))
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        mask = Tensor.arange(lq).reshape(lq, 1).ge(Tensor.arange(lk).reshape(1, lk))
    if mask is not None:
        scores = where(mask, scores, float("-inf"))
    return softmax(scores, -1) @ v


def relu(x: Tensor): return x.relu()
def sigmoid(x: Tensor): return x.sigmoid()
def tanh(x: Tensor): return x.tanh()
def silu(x: Tensor): return x.silu()
def softplus(x: Tensor): return x.softplus()
def elu(x: Tensor, alpha=1.0): return x.elu(alpha)
def selu(x: Tensor): return x.selu()
def leaky_relu(x: Tensor, negative_slope=0.01): return x.leaky_relu(negative_slope)
def gelu(x: Tensor, approximate="none"): return x.gelu(approximate)


def _tensor_first(fn):
    """``fn`` whose arguments annotated ``Tensor`` (``Tensor | None``: or None) must be Tensors (a numpy array or a
    list is taken as one), those annotated ``bool`` True or False, ``float`` a number; anything else:
    ``ArgumentError`` naming the function and the argument, so a wrong kind fails at the call and not deep in an op."""
    sig = inspect.signature(fn)
    tensors = {n: p.annotation.endswith("| None") for n, p in sig.parameters.items()
               if isinstance(p.annotation, str) and p.annotation.startswith("Tensor")}
    flags = [n for n, p in sig.parameters.items() if p.annotation == "bool"]
    numbers = [n for n, p in sig.parameters.items() if p.annotation == "float"]

    @functools.wraps(fn)
    def wrapped(*args, **kw):
        try:
            bound = sig.bind(*args, **kw)
        except TypeError:
            return fn(*args, **kw)                 # Python's own message for a wrong number/name of arguments
        for name, optional in tensors.items():
            if name not in bound.arguments:
                continue
            v = bound.arguments[name]
            if isinstance(v, (np.ndarray, list)):
                bound.arguments[name] = Tensor(v)
            elif not isinstance(v, Tensor) and not (optional and v is None):
                raise ArgumentError(f"{fn.__name__}: {name} must be a Tensor{' or None' if optional else ''}, got "
                                    f"{type(v).__name__}")
        for name in flags:
            if name in bound.arguments:
                bound.arguments[name] = flag(fn.__name__, name, bound.arguments[name])
        for name in numbers:
            v = bound.arguments.get(name, 0.0)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ArgumentError(f"{fn.__name__}: {name} must be a number, got {type(v).__name__} {v!r:.40}")
        return fn(*bound.args, **bound.kwargs)
    return wrapped


# the public functions here check their Tensor arguments (an index argument, not annotated, goes through as_tensor)
for _name, _fn in list(globals().items()):
    if inspect.isfunction(_fn) and _fn.__module__ == __name__ and not _name.startswith("_"):
        globals()[_name] = _tensor_first(_fn)


_METHODS = {
    "conv2d": conv2d, "conv_transpose2d": conv_transpose2d, "max_pool2d": max_pool2d, "avg_pool2d": avg_pool2d,
    "layernorm": layer_norm, "softmax": softmax, "log_softmax": log_softmax, "dropout": dropout,
}
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
