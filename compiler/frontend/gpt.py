"""``GPT``: a decoder-only language model (token + position embeddings, pre-LN causal blocks, a final
LayerNorm, a linear LM head) with two entry points written in tc ops:

* ``forward(ids)``: the whole causal sequence, ``(B, T)`` token ids -> ``(B, T, vocab)`` logits (float,
  trainable with autograd);
* ``decode_step(ids, pos, k_cache, v_cache, mask)``: one new token at position ``pos`` attending over a
  key/value cache of ``max_len`` positions, the form a chip program compiled once serves every step with
  (``runtime.generate``):

  ====================  ===============================================  ==========================
  input                 shape                                            meaning
  ====================  ===============================================  ==========================
  ``ids``               ``(1,)`` int32                                   the token
  ``pos``               ``(1,)`` int32                                   its position, ``0 <= pos < max_len``
  ``k_cache``           ``(layers * heads, max_len, head_dim)`` float    keys of positions ``< pos``, zeros after
  ``v_cache``           same                                             values, likewise
  ``mask``              ``(1, max_len)`` float                           ``decode_mask(pos)``: 0 up to ``pos``,
                                                                         ``MASKED`` after
  ====================  ===============================================  ==========================

  It returns ``(logits (1, vocab), k_new, v_new)``, the new token's key and value rows
  ``(layers * heads, head_dim)``, which the caller stores at row ``pos`` of the caches.

  The new token's own key and value enter the attention without a concatenation: its score for itself
  ``q . k`` is added at column ``pos`` of the scores through a one-hot row of ``pos`` (a lookup in the identity
  table), and ``v`` is weighted by the probability at that column. The caches' row ``pos`` is still zero then,
  so every tensor keeps its ``max_len`` shape whatever the position (and no ``max_len x head_dim`` copy of a
  cache is made per step).

The additive mask is an input, not a constant: one binary serves every position. ``MASKED`` is a large
negative score but not an infinite one (an int8 input quantizes it exactly to its most negative value);
after the softmax's max subtraction the masked keys weigh ``exp(MASKED - max)``, zero in float32 and on the
chip's integer exponential.
"""
from __future__ import annotations

import math

import numpy as np

from compiler.frontend import functional as F
from compiler.frontend import random as _random
from compiler.frontend.nn import Embedding, LayerNorm, Linear, Module
from compiler.frontend.shapes import ShapeError
from compiler.frontend.tensor import Tensor, cat, eye
from compiler.ir import dtypes

__all__ = ["GPT", "GPTBlock", "MASKED", "decode_mask"]

#: the additive mask's value at a key position after the token's own
MASKED = -30.0


def decode_mask(pos: int, max_len: int) -> np.ndarray:
    """The ``(1, max_len)`` additive mask of a decode step at ``pos``: 0 at keys ``0..pos``, ``MASKED`` after."""
    m = np.full((1, max_len), MASKED, np.float32)
    m[0, :pos + 1] = 0.0
    return m


def _normal(shape, std) -> Tensor:
    return Tensor(_random.generator().standard_normal(shape) * std, dtypes.float32, requires_grad=True)


class GPTBlock(Module):
    """Pre-LN block: ``x + proj(attention(LN(x)))`` then ``x + fc2(GELU(fc1(LN(x))))`` (a 4x MLP)."""

    def __init__(self, d_model: int, heads: int):
        self.heads, self.d = heads, d_model
        self.ln1, self.ln2 = LayerNorm(d_model), LayerNorm(d_model)
        self.qkv, self.proj = Linear(d_model, 3 * d_model), Linear(d_model, d_model)
        self.fc1, self.fc2 = Linear(d_model, 4 * d_model), Linear(4 * d_model, d_model)

    def mlp(self, x: Tensor) -> Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def forward(self, x: Tensor, kv: list | None = None) -> Tensor:
        """The causal block on ``x`` (B, T, d); appends this layer's keys and values (B, heads, T, hd) to ``kv``."""
        b, t, d = x.shape
        h, hd = self.heads, d // self.heads
        q, k, v = (z.reshape(b, t, h, hd).transpose(1, 2) for z in self.qkv(self.ln1(x)).chunk(3, -1))
        if kv is not None:
            kv.append((k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.mlp(x + self.proj(o.transpose(1, 2).reshape(b, t, d)))

    def step(self, x: Tensor, onehot: Tensor, kc: Tensor, vc: Tensor, mask: Tensor):
        """One token ``x`` (1, d) over this layer's caches ``kc``/``vc`` (heads, max_len, hd); ``onehot``
        (heads, 1, max_len) marks the token's own position. Returns the new x and its (heads, hd) k and v."""
        h, hd = self.heads, self.d // self.heads
        q, k, v = (z.reshape(h, 1, hd) for z in self.qkv(self.ln1(x)).chunk(3, -1))
        scale = 1 / math.sqrt(hd)
        own = (q * scale) @ k.transpose(1, 2)                    # (h, 1, 1): the token's score for itself
        scores = (q * scale) @ kc.transpose(1, 2) + own @ onehot + mask
        p = F.softmax(scores, -1)
        o = p @ vc + (p @ onehot.transpose(1, 2)) @ v
        x = self.mlp(x + self.proj(o.reshape(1, self.d)))
        return x, k.reshape(h, hd), v.reshape(h, hd)


class GPT(Module):
    """``GPT(vocab, d_model, heads, layers, max_len)``: see the module doc."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, max_len: int):
        for name, v in (("vocab", vocab), ("d_model", d_model), ("heads", heads), ("layers", layers),
                        ("max_len", max_len)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ShapeError(f"GPT: {name} must be a positive integer, got {v!r}")
        if d_model % heads:
            raise ShapeError(f"GPT: d_model {d_model} is not divisible by heads {heads}")
        self.vocab, self.d_model, self.heads, self.layers, self.max_len = vocab, d_model, heads, layers, max_len
        self.head_dim = d_model // heads
        self.tok = Embedding(vocab, d_model)
        self.tok.weight = _normal((vocab, d_model), 0.1)
        self.pos = Embedding(max_len, d_model)
        self.pos.weight = _normal((max_len, d_model), 0.1)
        self.blocks = [GPTBlock(d_model, heads) for _ in range(layers)]
        self.ln_f = LayerNorm(d_model)
        self.head = Linear(d_model, vocab)

    @property
    def cache_shape(self) -> tuple:
        """The shape of ``k_cache`` and ``v_cache``: (layers * heads, max_len, head_dim)."""
        return (self.layers * self.heads, self.max_len, self.head_dim)

    def forward(self, ids, kv: list | None = None) -> Tensor:
        """Logits (B, T, vocab) of token ids (B, T) (or (T,): B = 1); ``kv`` collects each layer's keys and
        values."""
        ids = ids if isinstance(ids, Tensor) else Tensor(np.asarray(ids, np.int32), dtypes.int32)
        if ids.ndim == 1:
            ids = ids.reshape(1, -1)
        t = ids.shape[1]
        if t > self.max_len:
            raise ShapeError(f"GPT: a sequence of {t} tokens is longer than max_len {self.max_len}")
        x = self.tok(ids) + self.pos.weight[:t]
        for blk in self.blocks:
            x = blk(x, kv)
        return self.head(self.ln_f(x))

    def caches(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """The float key and value caches (``cache_shape``) after the tokens ``ids`` (T,): rows ``0..T-1``
        filled by one causal forward pass, zeros after (what T decode steps build, up to float rounding)."""
        kv: list = []
        self.forward(np.asarray(ids, np.int32).reshape(1, -1), kv)
        t = len(np.asarray(ids).reshape(-1))
        out = []
        for j in (0, 1):
            c = np.zeros(self.cache_shape, np.float32)
            c[:, :t] = np.concatenate([z[j].numpy()[0] for z in kv], 0)
            out.append(c)
        return out[0], out[1]

    def decode_step(self, ids: Tensor, pos: Tensor, k_cache: Tensor, v_cache: Tensor, mask: Tensor):
        """(logits (1, vocab), k_new, v_new (layers * heads, head_dim)): see the module doc."""
        h, n = self.heads, self.max_len
        x = self.tok(ids) + self.pos(pos)
        onehot = F.embedding(pos, eye(n)).reshape(1, 1, n).expand(h, 1, n)
        ks, vs = [], []
        for i, blk in enumerate(self.blocks):
            x, k, v = blk.step(x, onehot, k_cache[i * h:(i + 1) * h], v_cache[i * h:(i + 1) * h], mask)
            ks.append(k)
            vs.append(v)
        logits = self.head(self.ln_f(x))
        return logits, _cat(ks), _cat(vs)


def _cat(xs: list) -> Tensor:
    return xs[0] if len(xs) == 1 else cat(xs, 0)
