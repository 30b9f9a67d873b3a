"""A transformer block on the chip: int8 GEMMs, integer LayerNorm/GELU/softmax, fused attention.

    block = tc.nn.TransformerBlock(64, 4)                       # pre-norm, GELU MLP (4 x 64)
    cm = tc.compile(block, x, dynamic={"T": 64})                # x: (1, T, 64); T <= 64 at run time
    res = tc.Device("sim").run(cm, x17)                         # any T in 1..64, same Program bytes
    cm.reference(x17)                                           # integer numpy model: equal bit for bit

``tc.compile`` recognises a ``TransformerBlock`` or ``TransformerEncoderLayer`` module (or an
``nn.Sequential`` / ``nn.TransformerEncoder`` of them) and hands it to ``compile_block`` here (its
ops are not pattern-matched in the graph IR). The block is quantized from a float forward pass on
the calibration data (``quantize_block``) and emitted as one program by
``compiler.lower.transformer_emit`` in phases separated by ``fence all`` (pre-LN order below; post-LN
puts each LayerNorm after its residual):

1. load ``x`` (int8) into SPM in column blocks of ``cols`` lanes, query-block major;
2. LayerNorm 1 (``intmath.layernorm`` on the VPU: lane sums ``vrsum``, ``rsqrt`` by Newton), with
   every weight matrix prefetched underneath;
3. Q, K, V projection: one weight-stationary GEMM (bias from a repeated row block in ACC,
   ``mxu.mma`` per weight tile), ``vreq`` per group; K is stored to DRAM transposed
   (``dma.st`` with ``estride = Tmax``, overlapping the Q/V matmuls), V per head;
4. fused attention (``intmath.attention_head``, all heads and query rows at once): a scalar loop
   over key blocks of ``cols`` keys, ``ceil(T / cols)`` trips from the run-time register ``r15``;
   per block the K^T and V tiles stream in from DRAM, ``mxu.mm`` gives the scores, the VPU keeps
   the running max / sum and rescales the accumulator, ``mxu.mma`` adds ``P V``. Keys past ``T``
   are masked with a lane index row compared to ``T - 16 kb`` (register operand). The ``T x T``
   scores never leave the chip; ``fused=False`` stores S and P to DRAM and reads them back
   between the stages (the traffic of an unfused kernel sequence, same arithmetic);
5. output projection + residual, LayerNorm 2, FC1 + i-GELU, FC2 + residual, store.

Every phase repeats over the ``ceil(T / cols)`` query blocks that hold tokens (rows past ``T`` in
the last block compute on zeros, are discarded, and never reach a valid row: attention masks
their keys). The numpy model ``reference_int`` is ``compiler.lower.intmath`` applied to the quantized
weights, written without looking at the emitted program.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from isa.config import ChipConfig
from isa.ints import align_up

from compiler.lower import intmath as im
from compiler.lower.compiled import Compiled, unpack_inputs
from compiler.lower.dynamic import DynSpec, host_feeds, pad_to
from compiler.lower.schedule import ChipCompileError
from compiler.lower.transformer_emit import Layout, check_shapes, cycles_by_phase, dram_bytes_by_phase, emit  # noqa: F401


# ------------------------------------------------------------------------------------------------
# float weights and the float block
# ------------------------------------------------------------------------------------------------
@dataclass
class BlockWeights:
    d: int
    heads: int
    ff: int
    ln1: tuple          # gamma, beta, eps
    ln2: tuple
    wqkv: np.ndarray    # (d, 3d), x @ W
    bqkv: np.ndarray
    wo: np.ndarray
    bo: np.ndarray
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    norm_first: bool = True     # pre-LN (x + f(LN(x))) or post-LN (LN(x + f(x)))
    act: str = "gelu"           # "gelu" or "relu"
    batch_first: bool = True    # input (B, T, d) or (T, B, d)
    kind: str = "block"         # "block", or "mha": self-attention and its projections only


def weights_of(block) -> BlockWeights:
    """The float weights of a ``TransformerBlock``, ``TransformerEncoderLayer`` or (self-attention)
    ``MultiHeadAttention``."""
    from compiler.frontend.nn import MultiHeadAttention, TransformerBlock

    def a(t):
        return np.asarray(t.numpy(), np.float64)
    if isinstance(block, MultiHeadAttention):
        for lin in (block.q_proj, block.k_proj, block.v_proj, block.out_proj):
            if lin.bias is None:
                raise ChipCompileError("MultiHeadAttention on the chip: every Linear needs a bias")
        lins = (block.q_proj, block.k_proj, block.v_proj)
        return BlockWeights(
            d=a(block.q_proj.weight).shape[1], heads=block.num_heads, ff=0, ln1=None, ln2=None,
            wqkv=np.concatenate([a(lin.weight).T for lin in lins], 1),
            bqkv=np.concatenate([a(lin.bias) for lin in lins]),
            wo=a(block.out_proj.weight).T, bo=a(block.out_proj.bias), w1=None, b1=None, w2=None, b2=None,
            kind="mha")
    if isinstance(block, TransformerBlock):
        at, ln1, ln2, fc1, fc2, drop = block.attn, block.ln1, block.ln2, block.fc1, block.fc2, block.drop
        flags = dict(norm_first=True, act="gelu", batch_first=True)
    else:                                   # nn.TransformerEncoderLayer
        at, ln1, ln2, fc1, fc2, drop = (block.self_attn, block.norm1, block.norm2, block.linear1, block.linear2,
                                        block.dropout)
        flags = dict(norm_first=block.norm_first, act=block.activation, batch_first=block.batch_first)
    for lin in (at.q_proj, at.k_proj, at.v_proj, at.out_proj, fc1, fc2):
        if lin.bias is None:
            raise ChipCompileError("TransformerBlock on the chip: every Linear needs a bias")
    if ln1.weight is None or ln2.weight is None:
        raise ChipCompileError("TransformerBlock on the chip: LayerNorms need elementwise_affine=True")
    if drop.training and drop.p > 0:
        raise ChipCompileError(f"TransformerBlock on the chip: dropout {drop.p} is active (training mode); "
                               "call .eval() (the chip runs inference)")
    return BlockWeights(
        d=a(at.q_proj.weight).shape[1], heads=at.num_heads, ff=a(fc1.weight).shape[0],
        ln1=(a(ln1.weight), a(ln1.bias), ln1.eps), ln2=(a(ln2.weight), a(ln2.bias), ln2.eps),
        wqkv=np.concatenate([a(lin.weight).T for lin in (at.q_proj, at.k_proj, at.v_proj)], 1),
        bqkv=np.concatenate([a(lin.bias) for lin in (at.q_proj, at.k_proj, at.v_proj)]),
        wo=a(at.out_proj.weight).T, bo=a(at.out_proj.bias),
        w1=a(fc1.weight).T, b1=a(fc1.bias), w2=a(fc2.weight).T, b2=a(fc2.bias), **flags)


def _ln(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b


def float_block(w: BlockWeights, x, causal: bool = False) -> tuple[np.ndarray, dict]:
    """The float block on ``x (T, d)`` (float64) and its intermediates (for calibration);
    ``causal``: query ``i`` attends to keys ``<= i`` (``block(x, is_causal=True)``).

    Names: ``a1`` the attention's input, ``r1`` the first residual sum, ``x1`` the stream between
    the sublayers, ``a2`` FC1's input, ``h`` FC1's output, ``g`` the activation, ``r2`` the second
    residual sum. Pre-LN: ``a1 = LN1(x)``, ``x1 = r1``, ``a2 = LN2(x1)``, ``out = r2``; post-LN:
    ``a1 = x``, ``x1 = LN1(r1)``, ``a2 = x1``, ``out = LN2(r2)``."""
    x = np.asarray(x, np.float64)
    d, H = w.d, w.heads
    dh = d // H
    a1 = _ln(x, *w.ln1) if w.norm_first and w.kind == "block" else x
    qkv = a1 @ w.wqkv + w.bqkv
    q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
    att = np.zeros_like(q)
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        s = q[:, sl] @ k[:, sl].T / math.sqrt(dh)
        if causal:
            s = np.where(np.arange(len(s))[None, :] > np.arange(len(s))[:, None], -np.inf, s)
        p = np.exp(s - s.max(-1, keepdims=True))
        att[:, sl] = (p / p.sum(-1, keepdims=True)) @ v[:, sl]
    if w.kind == "mha":
        out = att @ w.wo + w.bo
        return out, dict(x=x, a1=a1, q=q, k=k, v=v, out=out)
    r1 = x + att @ w.wo + w.bo
    x1 = r1 if w.norm_first else _ln(r1, *w.ln1)
    a2 = _ln(x1, *w.ln2) if w.norm_first else x1
    hpre = a2 @ w.w1 + w.b1
    if w.act == "gelu":
        g = 0.5 * hpre * (1 + np.vectorize(math.erf)(hpre / math.sqrt(2)))
    else:
        g = np.maximum(hpre, 0)
    r2 = x1 + g @ w.w2 + w.b2
    out = r2 if w.norm_first else _ln(r2, *w.ln2)
    return out, dict(x=x, a1=a1, q=q, k=k, v=v, r1=r1, x1=x1, a2=a2, h=hpre, g=g, r2=r2, out=out)


# ------------------------------------------------------------------------------------------------
# quantization
# ------------------------------------------------------------------------------------------------
def _qw(w, per_channel=True):
    s = (np.abs(w).max(0) if per_channel else np.full(w.shape[1], np.abs(w).max())) / 127
    s = np.where(s == 0, 1.0, s)
    return np.clip(np.round(w / s), -127, 127).astype(np.int64), s


@dataclass
class QBlock:
    d: int
    heads: int
    ff: int
    s: dict                    # activation scales: x a1 q k v r1 x1 a2 g r2 out (float_block's names)
    ln1: im.LNParams
    ln2: im.LNParams
    wqkv: np.ndarray
    bqkv: np.ndarray
    m_qkv: np.ndarray          # per output channel multiplier; one shift per group (q, k, v)
    sh_qkv: tuple
    ep: im.ExpParams
    wo: np.ndarray
    bo: np.ndarray
    res1: tuple                # (mx, shx, m_o (d,), sh_o)
    w1: np.ndarray
    b1: np.ndarray
    gelu: im.GeluParams
    g_req: tuple               # (m, shift)
    w2: np.ndarray
    b2: np.ndarray
    res2: tuple
    causal: bool = False
    norm_first: bool = True
    act: str = "gelu"
    kind: str = "block"


def quantize_block(w: BlockWeights, calib: list, causal: bool = False) -> QBlock:
    acts = [float_block(w, c, causal)[1] for c in calib]

    def sc(k):
        return max(max(float(np.abs(a[k]).max()) for a in acts), 1e-6) / 127

    s = {k: sc(k) for k in acts[0]
         if k not in ("h",)}                            # x a1 q k v r1 x1 a2 g r2 out (mha: x a1 q k v out)
    d, H = w.d, w.heads
    wqkv, swqkv = _qw(w.wqkv)
    bqkv = np.round(w.bqkv / (s["a1"] * swqkv)).astype(np.int64)
    m_qkv, shs = [], []
    for i, k in enumerate("qkv"):
        m, sh = im.mult_shift(s["a1"] * swqkv[i * d:(i + 1) * d] / s[k])
        m_qkv.append(m)
        shs.append(sh)
    ep = im.ExpParams.for_scale(s["q"] * s["k"] / math.sqrt(d // H))
    wo, swo = _qw(w.wo)
    bo = np.round(w.bo / (s["v"] * swo)).astype(np.int64)
    if w.kind == "mha":                                 # the output projection requantized to int8
        mo, sho = im.mult_shift(s["v"] * swo / s["out"])
        return QBlock(d, H, 0, s, None, None, wqkv, bqkv, np.concatenate(m_qkv), tuple(shs), ep, wo, bo,
                      (0, 0, mo, sho), None, None, None, None, None, None, None, causal, kind="mha")
    mx, shx = im.mult_shift(s["x"] / s["r1"])
    mo, sho = im.mult_shift(s["v"] * swo / s["r1"])
    w1, sw1 = _qw(w.w1, per_channel=False)
    s_acc1 = s["a2"] * float(sw1[0])
    b1 = np.round(w.b1 / s_acc1).astype(np.int64)
    amax = max(float(np.abs(a["h"]).max()) for a in acts) / s_acc1
    if w.act == "gelu":
        gp = im.GeluParams.make(s_acc1, amax)
        gm, gsh = im.mult_shift(gp.s_out / s["g"])
    else:                                               # ReLU: the requantization clamps at 0
        gp = None
        gm, gsh = im.mult_shift(s_acc1 / s["g"])
    w2, sw2 = _qw(w.w2)
    b2 = np.round(w.b2 / (s["g"] * sw2)).astype(np.int64)
    mx2, shx2 = im.mult_shift(s["x1"] / s["r2"])
    m2, sh2 = im.mult_shift(s["g"] * sw2 / s["r2"])
    if w.norm_first:
        ln1, ln2 = im.LNParams.make(*w.ln1, s["x"], s["a1"]), im.LNParams.make(*w.ln2, s["x1"], s["a2"])
    else:
        ln1, ln2 = im.LNParams.make(*w.ln1, s["r1"], s["x1"]), im.LNParams.make(*w.ln2, s["r2"], s["out"])
    return QBlock(d, H, w.ff, s, ln1, ln2,
                  wqkv, bqkv, np.concatenate(m_qkv), tuple(shs), ep, wo, bo,
                  (int(mx[0]), shx, mo, sho), w1, b1, gp, (int(gm[0]), gsh), w2, b2,
                  (int(mx2[0]), shx2, m2, sh2), causal, w.norm_first, w.act)


# ------------------------------------------------------------------------------------------------
# the integer reference (numpy, compiler.lower.intmath)
# ------------------------------------------------------------------------------------------------
def reference_int(qb: QBlock, xq, blk: int) -> np.ndarray:
    """int8 ``x (T, d)`` -> int8 block output: the quantized block in integer numpy."""
    x = np.asarray(xq, np.int64)
    d, H = qb.d, qb.heads
    dh = d // H
    a1 = im.layernorm(x, qb.ln1) if qb.norm_first and qb.kind == "block" else x
    acc = a1 @ qb.wqkv + qb.bqkv
    qkv = [im.requant(acc[:, i * d:(i + 1) * d], qb.m_qkv[i * d:(i + 1) * d], qb.sh_qkv[i]) for i in range(3)]
    att = np.concatenate([im.attention_head(*(t[:, h * dh:(h + 1) * dh] for t in qkv), qb.ep, blk,
                                            qb.causal) for h in range(H)], 1)
    mx, shx, mo, sho = qb.res1
    if qb.kind == "mha":
        return im.requant(att @ qb.wo + qb.bo, mo, sho)
    r1 = np.clip(im.requant(x, mx, shx) + im.requant(att @ qb.wo + qb.bo, mo, sho), -128, 127)
    x1 = r1 if qb.norm_first else im.layernorm(r1, qb.ln1)
    a2 = im.layernorm(x1, qb.ln2) if qb.norm_first else x1
    h = a2 @ qb.w1 + qb.b1
    if qb.act == "gelu":
        g8 = im.requant(im.i_gelu(h, qb.gelu), *qb.g_req)
    else:
        g8 = im.requant(h, *qb.g_req, lo=0)
    mx2, shx2, m2, sh2 = qb.res2
    r2 = np.clip(im.requant(x1, mx2, shx2) + im.requant(g8 @ qb.w2 + qb.b2, m2, sh2), -128, 127)
    return r2 if qb.norm_first else im.layernorm(r2, qb.ln2)


# ------------------------------------------------------------------------------------------------
# the compiled block (the interface runtime.sim_backend uses)
# ------------------------------------------------------------------------------------------------
def blocks_of(model) -> list | None:
    """The blocks of ``model``: one ``TransformerBlock`` or ``TransformerEncoderLayer``, or an
    ``nn.Sequential`` of them, or an ``nn.TransformerEncoder`` without a final norm; else None."""
    from compiler.frontend.nn import (MultiHeadAttention, Sequential, TransformerBlock, TransformerEncoder,
                                      TransformerEncoderLayer)

    def exact(m):          # a subclass may change forward (e.g. is_causal): not recognised
        return type(m) in (TransformerBlock, TransformerEncoderLayer)
    if exact(model) or type(model) is MultiHeadAttention:     # self-attention alone: forward(x)
        return [model]
    if type(model) is TransformerEncoder and model.norm is None and all(exact(m) for m in model.layers):
        return list(model.layers)
    if type(model) is Sequential and len(model) and all(exact(m) for m in model.layers):
        return list(model.layers)
    return None


@dataclass
class CompiledTransformer(Compiled):
    """One program for a block or a stack of blocks; the interface ``Device("sim").run`` uses.
    Inputs and outputs are in the module's layout: ``(1, T, d)``, or ``(T, 1, d)`` for a
    ``TransformerEncoderLayer`` with ``batch_first=False`` (``(T, d)`` is accepted too)."""
    config: ChipConfig
    program: object
    qblocks: list
    weights: list
    tmax: int
    tm: int
    layout: Layout
    dynamic: DynSpec
    fused: bool
    compile_s: float
    asm: str = ""
    input_names: tuple = ("x",)

    @property
    def qblock(self) -> QBlock:
        return self.qblocks[0]

    @property
    def s_out(self) -> float:
        return self.qblocks[-1].s["out"]

    @property
    def seq_axis(self) -> int:
        return self.dynamic.in_axes["x"]

    def _tokens(self, x) -> np.ndarray:
        """``(T, d)`` from an input in the module's layout."""
        return x[0] if self.seq_axis == 1 else x[:, 0]

    def _module_layout(self, y) -> np.ndarray:
        return y[None] if self.seq_axis == 1 else y[:, None]

    def feeds(self, inputs) -> dict:
        if isinstance(inputs, dict):
            x = inputs["x"]
        else:
            if len(inputs) != 1:
                raise ChipCompileError(f"the transformer block takes one input, given {len(inputs)}")
            x = inputs[0]
        x = np.asarray(x.numpy() if hasattr(x, "numpy") else x, np.float32)
        if x.ndim == 2:
            x = self._module_layout(x)
        want = (1, "T", self.qblock.d) if self.seq_axis == 1 else ("T", 1, self.qblock.d)
        if x.ndim != 3 or x.shape[1 - self.seq_axis] != 1 or x.shape[2] != self.qblock.d:
            raise ChipCompileError(f"the transformer block takes x of shape {want} (batch 1), got {x.shape}")
        return {"x": x}

    def quantize_x(self, x) -> np.ndarray:
        return np.clip(np.round(np.asarray(x, np.float64) / self.qblock.s["x"]), -127, 127).astype(np.int8)

    def dram_writes(self, feeds: dict) -> list:
        x = pad_to(self._tokens(feeds["x"]), 0, self.tm)
        return list(self.layout.consts) + [(self.layout.x, self.quantize_x(x).reshape(-1).view(np.uint8))]

    def read_outputs(self, read) -> tuple[list, dict]:
        q = read(self.layout.out, self.tm * self.qblock.d, np.int8).reshape(self.tm, self.qblock.d)
        q = self._module_layout(q[:self.tmax])
        return [q.astype(np.float32) * np.float32(self.s_out)], {"out": q}

    def reference_int(self, *inputs) -> np.ndarray:
        """int8 output of the integer numpy model (``intmath``), block after block, module layout."""
        f = self.feeds(unpack_inputs(inputs))
        host_feeds(self.dynamic, f)                      # checks 1 <= T <= max
        y = self.quantize_x(self._tokens(f["x"]))
        for qb in self.qblocks:                          # block i's output scale is block i+1's input's
            y = reference_int(qb, y, self.config.cols)
        return self._module_layout(y).astype(np.int8)

    def reference(self, *inputs) -> list:
        r = self.reference_int(*inputs)
        return [r.astype(np.float32) * np.float32(self.s_out)]

    def float_reference(self, *inputs) -> list:
        """The float blocks (``float_block``, float64 inside), module layout, as float32."""
        y = self._tokens(self.feeds(unpack_inputs(inputs))["x"])
        for w in self.weights:
            y = float_block(w, y, self.qblock.causal)[0]
        return [self._module_layout(y).astype(np.float32)]

    @property
    def plans(self) -> dict:
        """Memory used: SPM rows, the largest phase's ACC rows, DRAM bytes (with constants)."""
        return dict(self.layout.usage)

    def summary(self) -> str:
        q = self.qblock
        kind = (f"{'pre' if q.norm_first else 'post'}-LN, {q.act}" if q.kind == "block" else "self-attention") + \
            (", causal" if q.causal else "")
        return (f"{len(self.qblocks)} transformer block(s) on {self.config.name}: d={q.d}, heads={q.heads}, "
                f"ff={q.ff}, {kind}, T <= {self.tmax}, {'fused' if self.fused else 'unfused'} attention, "
                f"{len(self.program)} instructions, compile {self.compile_s:.2f} s; "
                + ", ".join(f"{k} {u.used}/{u.capacity} {u.unit}" for k, u in self.plans.items()))


def compile_block(model, example_inputs, config="base", *, calibration=None, dynamic=None, shapes=None,
                  fused: bool = True, causal: bool = False) -> CompiledTransformer:
    """Compile a ``TransformerBlock`` / ``TransformerEncoderLayer`` or an ``nn.Sequential`` of them
    (see the module doc). ``dynamic={"T": max}`` names the sequence axis (axis 1 of ``(1, T, d)``;
    axis 0 of ``(T, 1, d)`` for ``batch_first=False``). ``causal=True``: the blocks as called with
    ``is_causal=True`` (a decoder)."""
    t0 = time.perf_counter()
    cfg = ChipConfig.load(config)
    blocks = blocks_of(model)
    if blocks is None:
        raise ChipCompileError(f"compile_block takes a TransformerBlock / TransformerEncoderLayer or a "
                               f"Sequential of them, got {type(model).__name__}")
    ws = [weights_of(b) for b in blocks]
    w = ws[0]
    if len({wi.batch_first for wi in ws}) != 1:
        raise ChipCompileError("a stack of blocks must agree on batch_first")
    seq = 1 if w.batch_first else 0

    def tokens(a):
        a = np.asarray(a.numpy() if hasattr(a, "numpy") else a, np.float64)
        if a.ndim == 3:
            if a.shape[1 - seq] != 1:
                raise ChipCompileError(f"TransformerBlock on the chip: batch 1 only, got an input of shape "
                                       f"{a.shape}")
            a = a[0] if seq == 1 else a[:, 0]
        if a.ndim != 2 or a.shape[1] != w.d:
            raise ChipCompileError(f"TransformerBlock: example input must be (1, T, {w.d}) or (T, 1, {w.d}), "
                                   f"got {a.shape}")
        return a

    def first(c):
        return c["x"] if isinstance(c, dict) else (c[0] if isinstance(c, (list, tuple)) else c)
    ex = tokens(first(example_inputs))
    if dynamic:
        if len(dynamic) != 1:
            raise ChipCompileError(f"one symbolic dimension (T) is supported, got {sorted(dynamic)}")
        (sym, tmax), = dynamic.items()
    else:
        sym, tmax = "T", ex.shape[0]
    tmax = int(tmax)
    if not 1 <= tmax or tmax * 127 >= 1 << 14:
        raise ChipCompileError(f"TransformerBlock: maximum T must be in 1..{((1 << 14) - 1) // 127}, got {tmax} "
                               "(the softmax denominator's fixed point)")
    tm = align_up(tmax, cfg.cols)
    calib = [ex] if calibration is None else [tokens(first(c)) for c in calibration]
    qbs = []
    for wi in ws:
        check_shapes(cfg, wi.d, wi.heads, wi.ff)
        try:
            qbs.append(quantize_block(wi, calib, causal))
        except ValueError as e:
            raise ChipCompileError(f"TransformerBlock: {e} (calibration data of a useful range needed)") from None
        calib = [float_block(wi, c, causal)[0] for c in calib]  # the next block calibrates on this one's output
    prog, lay, text = emit(cfg, qbs, tm, fused)
    spec = DynSpec(sym, tmax, {"x": seq}, [seq])
    return CompiledTransformer(cfg, prog, qbs, ws, tmax, tm, lay, spec, fused, time.perf_counter() - t0, text)


__all__ = ["compile_block", "CompiledTransformer", "quantize_block", "reference_int", "float_block",
           "weights_of", "emit", "blocks_of"]
