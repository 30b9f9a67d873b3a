"""A transformer block on the chip: int8 GEMMs, integer LayerNorm/GELU/softmax, fused attention.

    block = tc.nn.TransformerBlock(64, 4)                       # pre-norm, GELU MLP (4 x 64)
    cm = tc.compile(block, x, dynamic={"T": 64})                # x: (1, T, 64); T <= 64 at run time
    res = tc.Device("sim").run(cm, x17)                         # any T in 1..64, same Program bytes
    cm.reference(x17)                                           # integer numpy model: equal bit for bit

``tc.compile`` recognises a ``TransformerBlock`` module (or an ``nn.Sequential`` of them) and
hands it to ``compile_block`` here (its ops are not pattern-matched in the graph IR). The block is
quantized from a float forward pass on the calibration data (``quantize_block``) and emitted as
one program by ``compiler.transformer_emit`` in phases separated by ``fence all``:

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
their keys). The numpy model ``reference_int`` is ``compiler.intmath`` applied to the quantized
weights, written without looking at the emitted program.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from isa.config import ChipConfig

from . import intmath as im
from .dynamic import DynSpec, host_feeds, pad_to
from .schedule import ChipCompileError
from .transformer_emit import DYN_REG, Layout, check_shapes, cycles_by_phase, dram_bytes_by_phase, emit  # noqa: F401


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


def weights_of(block) -> BlockWeights:
    def a(t):
        return np.asarray(t.numpy(), np.float64)
    at = block.attn
    for lin in (at.q_proj, at.k_proj, at.v_proj, at.out_proj, block.fc1, block.fc2):
        if lin.bias is None:
            raise ChipCompileError("TransformerBlock on the chip: every Linear needs a bias")
    if block.ln1.weight is None or block.ln2.weight is None:
        raise ChipCompileError("TransformerBlock on the chip: LayerNorms need elementwise_affine=True")
    return BlockWeights(
        d=a(at.q_proj.weight).shape[1], heads=at.num_heads, ff=a(block.fc1.weight).shape[0],
        ln1=(a(block.ln1.weight), a(block.ln1.bias), block.ln1.eps),
        ln2=(a(block.ln2.weight), a(block.ln2.bias), block.ln2.eps),
        wqkv=np.concatenate([a(l.weight).T for l in (at.q_proj, at.k_proj, at.v_proj)], 1),
        bqkv=np.concatenate([a(l.bias) for l in (at.q_proj, at.k_proj, at.v_proj)]),
        wo=a(at.out_proj.weight).T, bo=a(at.out_proj.bias),
        w1=a(block.fc1.weight).T, b1=a(block.fc1.bias), w2=a(block.fc2.weight).T, b2=a(block.fc2.bias))


def _ln(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b


def float_block(w: BlockWeights, x, causal: bool = False) -> tuple[np.ndarray, dict]:
    """The float block on ``x (T, d)`` (float64) and its intermediates (for calibration);
    ``causal``: query ``i`` attends to keys ``<= i`` (``block(x, is_causal=True)``)."""
    x = np.asarray(x, np.float64)
    d, H = w.d, w.heads
    dh = d // H
    a1 = _ln(x, *w.ln1)
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
    x1 = x + att @ w.wo + w.bo
    a2 = _ln(x1, *w.ln2)
    hpre = a2 @ w.w1 + w.b1
    erf = np.vectorize(math.erf)
    g = 0.5 * hpre * (1 + erf(hpre / math.sqrt(2)))
    out = x1 + g @ w.w2 + w.b2
    return out, dict(x=x, a1=a1, q=q, k=k, v=v, x1=x1, a2=a2, h=hpre, g=g, out=out)


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
    s: dict                    # activation scales: x a1 q k v x1 a2 g out
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


def quantize_block(w: BlockWeights, calib: list, causal: bool = False) -> QBlock:
    acts = [float_block(w, c, causal)[1] for c in calib]

    def sc(k):
        return max(max(float(np.abs(a[k]).max()) for a in acts), 1e-6) / 127

    s = {k: sc(k) for k in ("x", "a1", "q", "k", "v", "x1", "a2", "g", "out")}
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
    mx, shx = im.mult_shift(s["x"] / s["x1"])
    mo, sho = im.mult_shift(s["v"] * swo / s["x1"])
    w1, sw1 = _qw(w.w1, per_channel=False)
    s_acc1 = s["a2"] * float(sw1[0])
    b1 = np.round(w.b1 / s_acc1).astype(np.int64)
    amax = max(float(np.abs(a["h"]).max()) for a in acts) / s_acc1
    gp = im.GeluParams.make(s_acc1, amax)
    gm, gsh = im.mult_shift(gp.s_out / s["g"])
    w2, sw2 = _qw(w.w2)
    b2 = np.round(w.b2 / (s["g"] * sw2)).astype(np.int64)
    mx2, shx2 = im.mult_shift(s["x1"] / s["out"])
    m2, sh2 = im.mult_shift(s["g"] * sw2 / s["out"])
    return QBlock(d, H, w.ff, s,
                  im.LNParams.make(*w.ln1, s["x"], s["a1"]), im.LNParams.make(*w.ln2, s["x1"], s["a2"]),
                  wqkv, bqkv, np.concatenate(m_qkv), tuple(shs), ep, wo, bo,
                  (int(mx[0]), shx, mo, sho), w1, b1, gp, (int(gm[0]), gsh), w2, b2,
                  (int(mx2[0]), shx2, m2, sh2), causal)


# ------------------------------------------------------------------------------------------------
# the integer reference (numpy, compiler.intmath)
# ------------------------------------------------------------------------------------------------
def reference_int(qb: QBlock, xq, blk: int) -> np.ndarray:
    """int8 ``x (T, d)`` -> int8 block output: the quantized block in integer numpy."""
    x = np.asarray(xq, np.int64)
    d, H = qb.d, qb.heads
    dh = d // H
    a1 = im.layernorm(x, qb.ln1)
    acc = a1 @ qb.wqkv + qb.bqkv
    qkv = [im.requant(acc[:, i * d:(i + 1) * d], qb.m_qkv[i * d:(i + 1) * d], qb.sh_qkv[i]) for i in range(3)]
    att = np.concatenate([im.attention_head(*(t[:, h * dh:(h + 1) * dh] for t in qkv), qb.ep, blk,
                                            qb.causal) for h in range(H)], 1)
    mx, shx, mo, sho = qb.res1
    x1 = np.clip(im.requant(x, mx, shx) + im.requant(att @ qb.wo + qb.bo, mo, sho), -128, 127)
    a2 = im.layernorm(x1, qb.ln2)
    g8 = im.requant(im.i_gelu(a2 @ qb.w1 + qb.b1, qb.gelu), *qb.g_req)
    mx2, shx2, m2, sh2 = qb.res2
    return np.clip(im.requant(x1, mx2, shx2) + im.requant(g8 @ qb.w2 + qb.b2, m2, sh2), -128, 127)


# ------------------------------------------------------------------------------------------------
# the compiled block (the interface runtime.sim_backend uses)
# ------------------------------------------------------------------------------------------------
def blocks_of(model) -> list | None:
    """The TransformerBlocks of ``model`` (one block, or an ``nn.Sequential`` of blocks); else None."""
    from .nn import Sequential, TransformerBlock

    def exact(m):          # a subclass may change forward (e.g. is_causal): not recognised
        return type(m) is TransformerBlock
    if exact(model):
        return [model]
    if type(model) is Sequential and len(model) and all(exact(m) for m in model.layers):
        return list(model.layers)
    return None


@dataclass
class CompiledTransformer:
    """One program for a block or a stack of blocks; the interface ``Device("sim").run`` uses."""
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

    def feeds(self, inputs) -> dict:
        if isinstance(inputs, dict):
            x = inputs["x"]
        else:
            if len(inputs) != 1:
                raise ChipCompileError(f"the transformer block takes one input, given {len(inputs)}")
            x = inputs[0]
        x = np.asarray(x.numpy() if hasattr(x, "numpy") else x, np.float32)
        if x.ndim == 2:
            x = x[None]
        if x.ndim != 3 or x.shape[0] != 1 or x.shape[2] != self.qblock.d:
            raise ChipCompileError(f"the transformer block takes x of shape (1, T, {self.qblock.d}), got {x.shape}")
        return {"x": x}

    def quantize_x(self, x) -> np.ndarray:
        return np.clip(np.round(np.asarray(x, np.float64) / self.qblock.s["x"]), -127, 127).astype(np.int8)

    def dram_writes(self, feeds: dict) -> list:
        x = pad_to(feeds["x"][0], 0, self.tm)
        return list(self.layout.consts) + [(self.layout.x, self.quantize_x(x).reshape(-1).view(np.uint8))]

    def read_outputs(self, read) -> tuple[list, dict]:
        q = read(self.layout.out, self.tm * self.qblock.d, np.int8).reshape(1, self.tm, self.qblock.d)
        q = q[:, :self.tmax]
        return [q.astype(np.float32) * np.float32(self.s_out)], {"out": q}

    def reference_int(self, x) -> np.ndarray:
        """int8 output ``(1, T, d)`` of the integer numpy model (``intmath``), block after block."""
        f = self.feeds([x])
        host_feeds(self.dynamic, f)                      # checks 1 <= T <= max
        y = self.quantize_x(f["x"][0])
        for qb in self.qblocks:                          # block i's output scale is block i+1's input's
            y = reference_int(qb, y, self.config.cols)
        return y[None].astype(np.int8)

    def reference(self, *inputs) -> list:
        r = self.reference_int(inputs[0] if len(inputs) == 1 else inputs)
        return [r.astype(np.float32) * np.float32(self.s_out)]

    def float_reference(self, x) -> np.ndarray:
        y = self.feeds([x])["x"][0]
        for w in self.weights:
            y = float_block(w, y, self.qblock.causal)[0]
        return y[None]

    @property
    def plans(self) -> dict:
        """Memory used: SPM rows, the largest phase's ACC rows, DRAM bytes (with constants)."""
        return dict(self.layout.usage)

    def run_on(self, device, *inputs, **kw):
        """``Device.run(compiled, x)`` lands here (``Device("sim")``)."""
        runner = getattr(device.backend, "run_compiled", None)
        if runner is None:
            raise ChipCompileError(f"device {device.name!r} cannot run a compiled chip program")
        return runner(self, *inputs, **kw)

    def summary(self) -> str:
        q = self.qblock
        return (f"{len(self.qblocks)} transformer block(s) on {self.config.name}: d={q.d}, heads={q.heads}, "
                f"ff={q.ff}, T <= {self.tmax}, {'fused' if self.fused else 'unfused'} attention, "
                f"{len(self.program)} instructions, compile {self.compile_s:.2f} s; "
                + ", ".join(f"{k} {u.used}/{u.capacity} {u.unit}" for k, u in self.plans.items()))


def compile_block(model, example_inputs, config="base", *, calibration=None, dynamic=None, shapes=None,
                  fused: bool = True, causal: bool = False) -> CompiledTransformer:
    """Compile a ``tc.nn.TransformerBlock`` or an ``nn.Sequential`` of them (see the module doc).
    ``dynamic={"T": max}``; the sequence axis is axis 1 of ``x (1, T, d)`` (or axis 0 of ``x (T, d)``).
    ``causal=True``: the blocks as called with ``is_causal=True`` (a decoder)."""
    t0 = time.perf_counter()
    cfg = ChipConfig.load(config)
    blocks = blocks_of(model)
    if blocks is None:
        raise ChipCompileError(f"compile_block takes a TransformerBlock or a Sequential of them, got "
                               f"{type(model).__name__}")
    ws = [weights_of(b) for b in blocks]
    w = ws[0]
    ex = example_inputs["x"] if isinstance(example_inputs, dict) else (
        example_inputs[0] if isinstance(example_inputs, (list, tuple)) else example_inputs)
    ex = np.asarray(ex.numpy() if hasattr(ex, "numpy") else ex, np.float64)
    ex = ex[0] if ex.ndim == 3 else ex
    if ex.ndim != 2 or ex.shape[1] != w.d:
        raise ChipCompileError(f"TransformerBlock: example input must be (1, T, {w.d}), got {ex.shape}")
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
    tm = -(-tmax // cfg.cols) * cfg.cols
    calib = [ex] if calibration is None else [
        (lambda a: a[0] if a.ndim == 3 else a)(np.asarray(c[0] if isinstance(c, (list, tuple)) else
                                                          (c["x"] if isinstance(c, dict) else c), np.float64))
        for c in calibration]
    qbs = []
    for wi in ws:
        check_shapes(cfg, wi.d, wi.heads, wi.ff)
        try:
            qbs.append(quantize_block(wi, calib, causal))
        except ValueError as e:
            raise ChipCompileError(f"TransformerBlock: {e} (calibration data of a useful range needed)") from None
        calib = [float_block(wi, c, causal)[0] for c in calib]  # the next block calibrates on this one's output
    prog, lay, text = emit(cfg, qbs, tm, fused)
    spec = DynSpec(sym, tmax, {"x": 1}, [1])
    return CompiledTransformer(cfg, prog, qbs, ws, tmax, tm, lay, spec, fused, time.perf_counter() - t0, text)


__all__ = ["compile_block", "CompiledTransformer", "quantize_block", "reference_int", "float_block",
           "weights_of", "emit", "blocks_of"]
