"""Layers with parameters: ``Module`` (parameters / state_dict / train-eval), and the usual layers.

Parameters are float32 Tensors with ``requires_grad``; initialisation follows
PyTorch's defaults (Kaiming-uniform for weights) and draws from the generator
``tc.manual_seed`` sets, so a seed reproduces a model exactly.
"""
from __future__ import annotations

import inspect
import math
from collections import OrderedDict

import numpy as np

from compiler.ir import dtypes
from compiler.frontend import functional as F
from compiler.frontend import random as _random
from compiler.frontend.shapes import MAX_NUMEL, ArgumentError, ShapeError, check_shape, int_arg, pair, shape_error
from compiler.frontend.tensor import Tensor

__all__ = ["Module", "Linear", "Conv2d", "ConvTranspose2d", "BatchNorm2d", "LayerNorm", "RMSNorm", "Embedding",
           "Dropout", "ReLU", "GELU", "Tanh", "Sigmoid", "Flatten", "MaxPool2d", "AvgPool2d", "Sequential",
           "MultiHeadAttention", "TransformerBlock", "functional", "F"]
functional = F


def _sizes(layer: str, **sizes) -> tuple:
    """A layer's sizes (features, channels, heads...): each a positive int, as ints in the given order."""
    return tuple(int_arg(layer, name, v, 1, MAX_NUMEL) for name, v in sizes.items())


def _eps(layer: str, eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) or not 0 < eps < math.inf:
        raise ShapeError(f"{layer}: eps must be a positive finite number, got {eps!r}")
    return float(eps)


def _normalized_shape(layer: str, s) -> tuple:
    shape = check_shape(layer, s)
    if not shape or 0 in shape:
        raise ShapeError(f"{layer}: normalized_shape must be positive sizes, got {s!r}")
    return shape


def _uniform(shape, bound) -> Tensor:
    check_shape("parameter", shape)
    return Tensor(_random.generator().uniform(-bound, bound, shape), dtypes.float32, requires_grad=True)


class Module:
    training = True
    #: a built-in layer: its first input is a Tensor (a numpy array is taken as one; anything else is refused)
    _tensor_input = False

    def __call__(self, *args, **kw):
        try:
            inspect.signature(self.forward).bind(*args, **kw)
        except TypeError as e:
            raise ArgumentError(f"{type(self).__name__}: {e}") from None
        except ValueError:                   # no signature to read: the call decides
            pass
        if self._tensor_input and args:
            x = args[0]
            if isinstance(x, np.ndarray):
                args = (Tensor(x),) + args[1:]
            elif not isinstance(x, Tensor):
                raise ArgumentError(f"{type(self).__name__}: the input must be a Tensor (or a numpy array), got "
                                    f"{type(x).__name__} {x!r:.60}")
        return self.forward(*args, **kw)

    def forward(self, *args, **kw):
        raise NotImplementedError

    def named_tensors(self, prefix: str = ""):
        """(name, Tensor) for parameters and buffers, in definition order, recursing into submodules."""
        for name, v in vars(self).items():
            if name.startswith("_") or name == "training":
                continue
            if isinstance(v, Tensor):
                yield prefix + name, v
            elif isinstance(v, Module):
                yield from v.named_tensors(f"{prefix}{name}.")
            elif isinstance(v, (list, tuple)):
                for i, m in enumerate(v):
                    if isinstance(m, Module):
                        yield from m.named_tensors(f"{prefix}{name}.{i}.")

    def parameters(self) -> list[Tensor]:
        return [t for _, t in self.named_parameters()]

    def named_parameters(self):
        """(name, parameter), each shared (tied) parameter once, under its first name."""
        seen: set[int] = set()
        out = []
        for n, t in self.named_tensors():
            if t.requires_grad and id(t) not in seen:
                seen.add(id(t))
                out.append((n, t))
        return out

    def modules(self):
        yield self
        for v in vars(self).values():
            subs = [v] if isinstance(v, Module) else [m for m in v if isinstance(m, Module)] \
                if isinstance(v, (list, tuple)) else []
            for m in subs:
                yield from m.modules()

    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        return OrderedDict((n, t.numpy()) for n, t in self.named_tensors())

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        own = dict(self.named_tensors())
        missing, unexpected = set(own) - set(state), set(state) - set(own)
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
        for name, t in own.items():
            if name not in state:
                continue
            arr = np.asarray(state[name].numpy() if isinstance(state[name], Tensor) else state[name])
            if arr.shape != t.shape:
                raise shape_error("load_state_dict", [t.shape, arr.shape], f"shape mismatch for {name}")
            t.node = Tensor(arr, t.dtype).node
            t.grad = None


def _groups(layer: str, cin: int, cout: int, groups: int) -> None:
    if cin % groups or cout % groups:
        raise ShapeError(f"{layer}: in_channels {cin} and out_channels {cout} must be divisible by groups {groups}")


def _pool_args(layer: str, kernel_size, stride, padding) -> None:
    pair(kernel_size, layer, "kernel_size", 1)
    if stride is not None:
        pair(stride, layer, "stride", 1)
    pair(padding, layer, "padding")


class Linear(Module):
    _tensor_input = True
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        in_features, out_features = _sizes("Linear", in_features=in_features, out_features=out_features)
        bound = 1 / math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def forward(self, x):
        return x.linear(self.weight, self.bias)


class Conv2d(Module):
    _tensor_input = True
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
        in_channels, out_channels, groups = _sizes("Conv2d", in_channels=in_channels, out_channels=out_channels,
                                                   groups=groups)
        _groups("Conv2d", in_channels, out_channels, groups)
        kh, kw = pair(kernel_size, "Conv2d", "kernel_size", 1)
        pair(stride, "Conv2d", "stride", 1), pair(padding, "Conv2d", "padding"), pair(dilation, "Conv2d", "dilation", 1)
        bound = 1 / math.sqrt(in_channels // groups * kh * kw)
        self.weight = _uniform((out_channels, in_channels // groups, kh, kw), bound)
        self.bias = _uniform((out_channels,), bound) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(Module):
    _tensor_input = True
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True):
        in_channels, out_channels, groups = _sizes("ConvTranspose2d", in_channels=in_channels,
                                                   out_channels=out_channels, groups=groups)
        _groups("ConvTranspose2d", in_channels, out_channels, groups)
        kh, kw = pair(kernel_size, "ConvTranspose2d", "kernel_size", 1)
        pair(stride, "ConvTranspose2d", "stride", 1), pair(padding, "ConvTranspose2d", "padding")
        pair(output_padding, "ConvTranspose2d", "output_padding")
        bound = 1 / math.sqrt(out_channels // groups * kh * kw)
        self.weight = _uniform((in_channels, out_channels // groups, kh, kw), bound)
        self.bias = _uniform((out_channels,), bound) if bias else None
        self.stride, self.padding, self.output_padding, self.groups = stride, padding, output_padding, groups

    def forward(self, x):
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups)


class BatchNorm2d(Module):
    _tensor_input = True
    def __init__(self, num_features: int, eps=1e-5, momentum=0.1):
        num_features, = _sizes("BatchNorm2d", num_features=num_features)
        eps = _eps("BatchNorm2d", eps)
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum <= 1:
            raise ShapeError(f"BatchNorm2d: momentum must be in [0, 1], got {momentum!r}")
        self.weight = Tensor(np.ones(num_features), dtypes.float32, requires_grad=True)
        self.bias = Tensor(np.zeros(num_features), dtypes.float32, requires_grad=True)
        self.running_mean = Tensor(np.zeros(num_features), dtypes.float32)
        self.running_var = Tensor(np.ones(num_features), dtypes.float32)
        self.eps, self.momentum = eps, momentum

    def forward(self, x):
        if x.ndim < 2 or x.shape[1] != self.weight.shape[0]:
            raise shape_error("BatchNorm2d", [x.shape], f"the input must be (N, {self.weight.shape[0]}, ...)")
        if self.training:
            axes = tuple(i for i in range(x.ndim) if i != 1)
            n = x.numel() // x.shape[1]
            xd = x.detach()
            mean, var = xd.mean(axes), xd.var(axes, correction=0) * (n / max(n - 1, 1))
            m = self.momentum
            self.running_mean = ((1 - m) * self.running_mean + m * mean).realize()
            self.running_var = ((1 - m) * self.running_var + m * var).realize()
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
                            eps=self.eps)


class LayerNorm(Module):
    _tensor_input = True
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
        self.shape = _normalized_shape("LayerNorm", normalized_shape)
        self.eps = _eps("LayerNorm", eps)
        self.weight = Tensor(np.ones(self.shape), dtypes.float32, requires_grad=True) if elementwise_affine else None
        self.bias = Tensor(np.zeros(self.shape), dtypes.float32, requires_grad=True) if elementwise_affine else None

    def forward(self, x):
        return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    _tensor_input = True
    def __init__(self, normalized_shape, eps=1e-6):
        self.shape = _normalized_shape("RMSNorm", normalized_shape)
        self.eps = _eps("RMSNorm", eps)
        self.weight = Tensor(np.ones(self.shape), dtypes.float32, requires_grad=True)

    def forward(self, x):
        return F.rms_norm(x, self.shape, self.weight, self.eps)


class Embedding(Module):
    _tensor_input = True
    def __init__(self, num_embeddings: int, embedding_dim: int):
        num_embeddings, embedding_dim = _sizes("Embedding", num_embeddings=num_embeddings,
                                               embedding_dim=embedding_dim)
        check_shape("Embedding", (num_embeddings, embedding_dim))
        self.weight = Tensor(_random.generator().standard_normal((num_embeddings, embedding_dim)), dtypes.float32,
                             requires_grad=True)

    def forward(self, idx):
        return F.embedding(idx, self.weight)


class Dropout(Module):
    _tensor_input = True
    def __init__(self, p: float = 0.5):
        if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) or not 0 <= p < 1:
            raise ShapeError(f"Dropout: p must be a number in [0, 1), got {p!r}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


class _Fn(Module):
    _tensor_input = True
    fn = None

    def forward(self, x):
        return type(self).fn(x)


class ReLU(_Fn): fn = Tensor.relu
class GELU(_Fn): fn = Tensor.gelu
class Tanh(_Fn): fn = Tensor.tanh
class Sigmoid(_Fn): fn = Tensor.sigmoid


class Flatten(Module):
    _tensor_input = True
    def __init__(self, start_dim=1, end_dim=-1):
        int_arg("Flatten", "start_dim", start_dim), int_arg("Flatten", "end_dim", end_dim)
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class MaxPool2d(Module):
    _tensor_input = True
    def __init__(self, kernel_size, stride=None, padding=0):
        _pool_args("MaxPool2d", kernel_size, stride, padding)
        self.args = (kernel_size, stride, padding)

    def forward(self, x):
        return F.max_pool2d(x, *self.args)


class AvgPool2d(Module):
    _tensor_input = True
    def __init__(self, kernel_size, stride=None, padding=0):
        _pool_args("AvgPool2d", kernel_size, stride, padding)
        self.args = (kernel_size, stride, padding)

    def forward(self, x):
        return F.avg_pool2d(x, *self.args)


class Sequential(Module):
    def __init__(self, *layers):
        for i, layer in enumerate(layers):
            if not callable(layer):
                raise ArgumentError(f"Sequential: layer {i} is a {type(layer).__name__}, not a module or function")
        self.layers = list(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)


class MultiHeadAttention(Module):
    """Self/cross attention with ``num_heads`` heads; inputs (B, L, D) (batch first)."""
    _tensor_input = True


    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True):
        embed_dim, num_heads = _sizes("MultiHeadAttention", embed_dim=embed_dim, num_heads=num_heads)
        if embed_dim % num_heads:
            raise ShapeError(f"MultiHeadAttention: embed_dim {embed_dim} not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (Linear(embed_dim, embed_dim, bias) for _ in range(4))

    def forward(self, q, k=None, v=None, mask=None, is_causal=False):
        k = q if k is None else k
        v = k if v is None else v
        for name, t in (("query", q), ("key", k), ("value", v)):
            if not isinstance(t, Tensor) or t.ndim != 3:
                raise shape_error("MultiHeadAttention", [getattr(t, "shape", ())],
                                  f"the {name} must be a (batch, length, embed_dim) Tensor")
        b, lq, d = q.shape
        h = self.num_heads

        def heads(x):
            return x.reshape(b, x.shape[1], h, d // h).transpose(1, 2)

        att = F.scaled_dot_product_attention(heads(self.q_proj(q)), heads(self.k_proj(k)), heads(self.v_proj(v)),
                                             mask, is_causal)
        return self.out_proj(att.transpose(1, 2).reshape(b, lq, d))


class TransformerBlock(Module):
    """Pre-norm block: ``x + MHA(LN(x))`` then ``x + MLP(LN(x))`` with a GELU MLP of width ``ff_dim``."""
    _tensor_input = True


    def __init__(self, dim: int, num_heads: int, ff_dim: int | None = None, dropout: float = 0.0):
        dim, = _sizes("TransformerBlock", dim=dim)
        if ff_dim is not None:
            ff_dim, = _sizes("TransformerBlock", ff_dim=ff_dim)
        self.ln1, self.ln2 = LayerNorm(dim), LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, num_heads)
        self.fc1, self.fc2 = Linear(dim, ff_dim or 4 * dim), Linear(ff_dim or 4 * dim, dim)
        self.drop = Dropout(dropout)

    def forward(self, x, mask=None, is_causal=False):
        x = x + self.drop(self.attn(self.ln1(x), mask=mask, is_causal=is_causal))
        return x + self.drop(self.fc2(self.fc1(self.ln2(x)).gelu()))


class TransformerEncoderLayer(Module):
    """PyTorch's ``nn.TransformerEncoderLayer``: self-attention then a feed-forward network, each
    with a residual, LayerNorm after (``norm_first=False``, the default) or before the sublayer.
    ``activation`` is ``"relu"`` or ``"gelu"``; inputs ``(T, B, d)``, or ``(B, T, d)`` with
    ``batch_first=True``. (Parameters are this package's: ``self_attn`` is a ``MultiHeadAttention``.)"""
    _tensor_input = True


    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        d_model, nhead, dim_feedforward = _sizes("TransformerEncoderLayer", d_model=d_model, nhead=nhead,
                                                 dim_feedforward=dim_feedforward)
        if activation not in ("relu", "gelu"):
            raise ShapeError(f"TransformerEncoderLayer: activation must be 'relu' or 'gelu', got {activation!r}")
        self.self_attn = MultiHeadAttention(d_model, nhead, bias)
        self.linear1, self.linear2 = Linear(d_model, dim_feedforward, bias), Linear(dim_feedforward, d_model, bias)
        self.norm1, self.norm2 = LayerNorm(d_model, eps=layer_norm_eps), LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = Dropout(dropout)
        self.activation, self.batch_first, self.norm_first = activation, batch_first, norm_first

    def _sa(self, x, mask, is_causal):
        return self.dropout(self.self_attn(x, mask=mask, is_causal=is_causal))

    def _ff(self, x):
        h = self.linear1(x)
        return self.dropout(self.linear2(self.dropout(h.relu() if self.activation == "relu" else h.gelu())))

    def forward(self, src, src_mask=None, is_causal: bool = False):
        x = src if self.batch_first else src.transpose(0, 1)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, is_causal)
            x = x + self._ff(self.norm2(x))
        else:
            x = self.norm1(x + self._sa(x, src_mask, is_causal))
            x = self.norm2(x + self._ff(x))
        return x if self.batch_first else x.transpose(0, 1)


class TransformerEncoder(Module):
    """PyTorch's ``nn.TransformerEncoder``: ``num_layers`` copies of ``encoder_layer`` (each with its
    own parameters, initially equal), then an optional final ``norm``."""

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None):
        import copy
        if not isinstance(encoder_layer, Module):
            raise ArgumentError(f"TransformerEncoder: encoder_layer must be a Module, got "
                                f"{type(encoder_layer).__name__}")
        num_layers = int_arg("TransformerEncoder", "num_layers", num_layers, 0, 1024)
        self.layers = [copy.deepcopy(encoder_layer) for _ in range(num_layers)]
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, is_causal: bool = False):
        x = src
        for layer in self.layers:
            x = layer(x, mask, is_causal)
        return self.norm(x) if self.norm is not None else x
