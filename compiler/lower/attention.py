"""Attention written with functions (``F.scaled_dot_product_attention``, or ``q @ k^T * scale``,
softmax, ``@ v``, maybe causal) lowered through the transformer block's fused attention.

``compiler.ir.patterns`` finds ``softmax(scale q k^T) v`` as one composite; ``schedule.lift`` makes an
``AttnKernel`` of it when q, k and v are activations (views of chip tensors) and the mask is none or
causal. Per batch element, all heads at once, this module

* loads the queries into SPM in the block's query-block-major layout (``transformer_emit``),
* copies K transposed and V into DRAM scratch laid out as the block's projection leaves them,
* runs ``transformer_emit._Emitter.attention`` (online softmax over key blocks, ``intmath.attention_head``),
* stores the output rows.

Quantization: the scores' scale is ``s_q s_k scale`` (``intmath.ExpParams``); the output is at v's
scale, as ``attention_head`` gives it. Limits: the head size equals the array (``rows == cols``),
queries and keys have one length, the rows of q, k and v are contiguous at one stride in DRAM, SPM
and ACC hold it; ``fused_unfit`` checks them for ``schedule.lift``, which composes any other attention
of batched matmuls and a masked softmax (``schedule._attn_compose``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.builder import ProgramBuilder, dram, spm
from isa.config import ChipConfig
from isa.ints import cdiv
from isa.operands import OperandError
from isa.regs import DYN_REG, L1, NQ_REG
from isa.regs import TransformerBlock as TB

from compiler.lower import intmath as im
from compiler.lower.schedule import AttnKernel, ChipCompileError, Schedule, gather_base, rows_at_one_stride
from compiler.lower.transformer_emit import _Alloc, _Emitter, lane_rows, query_index_rows


@dataclass
class QAttn:
    """The kernel on integers: ``B`` batch elements of ``H`` heads, ``L`` tokens of ``dh`` features."""
    ep: im.ExpParams
    B: int
    H: int
    L: int
    dh: int
    causal: bool
    blk: int | None = None          # keys per block of the online softmax: the array width, set when lowered


def quantize_attention(k: AttnKernel, s_q: float, s_k: float) -> QAttn:
    B, H, L, dh = k.srcs[0][1].shape
    try:
        ep = im.ExpParams.for_scale(s_q * s_k * k.comp.scale)
    except ValueError as e:
        raise ChipCompileError(f"kernel {k.name} ({k.comp}): {e}") from None
    return QAttn(ep, B, H, L, dh, k.comp.causal)


def attention_int(s: Schedule, k: AttnKernel, qa: QAttn, vals: dict) -> np.ndarray:
    """The int8 output (its tensor's base shape): ``intmath.attention_head`` per batch element and head,
    key blocks of ``qa.blk`` (the array width) keys."""
    if qa.blk is None:
        raise ChipCompileError(f"kernel {k.name}: the integer attention depends on the key block size, "
                               "known once the kernel is lowered for a config")
    q, kk, v = (gather_base(vals[t], s.tensors[t], idx).astype(np.int64) for t, idx in k.srcs)
    out = np.stack([np.stack([im.attention_head(q[b, h], kk[b, h], v[b, h], qa.ep, qa.blk, qa.causal)
                              for h in range(qa.H)]) for b in range(qa.B)])
    return out.astype(np.int8).reshape(s.tensors[k.out].shape)


# ---------------------------------------------------------------------------------------------- lowering

@dataclass
class AttnCode:
    """The kernel ready to emit: per (batch, head) the DRAM byte address of row 0 of q, k, v and the
    output, and their row strides; the constants' and the scratch's addresses."""
    name: str
    qa: QAttn
    cfg: ChipConfig
    rows: dict                      # "q" "k" "v" "out" -> (B, H) int64 row-0 addresses
    stride: dict                    # "q" "k" "v" "out" -> row stride (bytes)
    lane: int
    qidx: int | None
    kt: int                         # scratch: K^T per head, (dh, TM) bytes each
    vs: int                         # scratch: V per head, (TM, dh)
    spm_base: int = 0
    acc_base: int = 0

    @property
    def TM(self) -> int:
        return cdiv(self.qa.L, self.cfg.cols) * self.cfg.cols

    def emit(self, b: ProgramBuilder) -> int:
        """Emit the kernel into ``b``; returns the ACC rows it used."""
        em = _AttnEmitter(self, b)
        with b.scope(f"kernel {self.name}", DYN_REG, NQ_REG, TB.KBLOCK, TB.VALID, TB.KT_OFF, TB.V_OFF, TB.KEY0,
                     TB.ROWS, TB.NROWS):
            for bi in range(self.qa.B):
                em.batch(bi)
        return em.acc_top


class _AttnEmitter(_Emitter):
    """The transformer emitter on a shared builder, its SPM and ACC from the planned bases."""

    def __init__(self, code: AttnCode, b: ProgramBuilder, acc_limit: int | None = None):
        cfg, qa = code.cfg, code.qa
        super().__init__(cfg, _Shape(qa.H, qa.H * qa.dh, qa.causal, qa.ep), code.TM, True)
        self.b, self.code, self.acc_top = b, code, 0
        self.acc_limit = cfg.acc_rows if acc_limit is None else acc_limit
        self.q_stride = qa.H * self.Q

    def phase(self, name: str) -> _Alloc:
        if self.acc is not None:
            self.acc_top = max(self.acc_top, self.acc.top)
        self.acc = _Alloc(self.acc_limit, "ACC", self.cfg, base=self.code.acc_base,
                          owner=f"kernel {self.code.name}", hint="fewer heads or a shorter sequence")
        return self.acc

    def _rows(self, op, spm_at, dram_at, rs_dram, spm_step, length, dram_step, L):
        """``op`` (dma.ld: DRAM -> SPM, dma.st: SPM -> DRAM) of ``L`` rows of ``length`` bytes in blocks
        of Q rows: block j at SPM row ``spm_at + j*spm_step``, DRAM ``dram_at + j*dram_step``."""
        Q = self.Q
        full, part = divmod(L, Q)
        for rows, j0, n in ((Q, 0, full), (part, full, 1 if part else 0)):
            if not n:
                continue
            s_at, d_at = spm[spm_at + j0 * spm_step], dram[dram_at + j0 * dram_step]
            load = op == "dma.ld"
            ops, st = ((s_at, d_at), (spm_step, dram_step)) if load else ((d_at, s_at), (dram_step, spm_step))
            rep = None
            if n > 1:
                self.loop(1, n, st)
                rep = L1
            self.e(op, *ops, rows=rows, len=length, rstride=rs_dram, rep=rep)

    def batch(self, bi: int) -> None:
        c, qa, Q = self.code, self.code.qa, self.Q
        H, L, dh, TM = qa.H, qa.L, qa.dh, self.TM
        self.spm = _Alloc(self.cfg.spm_rows, "SPM", self.cfg, base=c.spm_base, owner=f"kernel {c.name}",
                          hint="fewer heads or a shorter sequence")
        self.acc = None
        QKV8, O8, STG = self.spm(H * TM), self.spm(H * TM), self.spm(2 * H * TM)
        self._loops = {}
        self.e("fence", "all")
        self.e("seti", DYN_REG, L)
        self.e("seti", NQ_REG, TM // Q)
        for h in range(H):                              # queries: block j of head h at QKV8 + j H Q + h Q
            self._rows("dma.ld", QKV8 + h * Q, int(c.rows["q"][bi, h]), c.stride["q"], H * Q, dh,
                       Q * c.stride["q"], L)
            for key, base in (("k", STG + h * TM), ("v", STG + (H + h) * TM)):
                self.e("dma.ld", spm[base], dram[int(c.rows[key][bi, h])], rows=L, len=dh, rstride=c.stride[key])
        self.e("fence", "all")
        for h in range(H):                              # K^T: row t of head h -> column t; V: rows as they are
            self.e("dma.st", dram[c.kt + h * dh * TM], spm[STG + h * TM], rows=L, len=dh, rstride=1, estride=TM)
            self.e("dma.st", dram[c.vs + h * TM * dh], spm[STG + (H + h) * TM], rows=L, len=dh, rstride=dh)
        self.e("fence", "all")
        self.attention(QKV8, O8, c.kt, c.vs, c.lane, 0, 0, label=f"{c.name}_b{bi}", qidx=c.qidx)
        self._loops = {}
        for h in range(H):                              # output rows of head h: block j at O8 + j H Q + h Q
            self._rows("dma.st", O8 + h * Q, int(c.rows["out"][bi, h]), c.stride["out"], H * Q, dh,
                       Q * c.stride["out"], L)
        self.e("fence", "all")
        self.acc_top = max(self.acc_top, self.acc.top)
        self._loops = {}


@dataclass(frozen=True)
class _Shape:
    """What ``_Emitter.attention`` reads of a block: heads, width, causal flag, exp parameters."""
    heads: int
    d: int
    causal: bool
    ep: im.ExpParams


def fused_unfit(cfg: ChipConfig, spm_free: int, comp, qs: tuple, ks: tuple, vs: tuple) -> str | None:
    """Why the fused attention cannot take an attention composite with q, k, v of shapes ``qs, ks, vs`` on
    ``cfg`` (None: it can): the limits of ``lower_attention``, the SPM (of ``spm_free`` rows) and ACC rows
    by a dry run.
    ``schedule.lift`` composes the attention of batched matmuls and a softmax otherwise."""
    *lead, L, dh = qs
    if comp.mask:
        return f"a {comp.mask!r} mask"
    if not (dh == vs[-1] == cfg.rows == cfg.cols):
        return f"head size {dh} (values {vs[-1]}) is not the array ({cfg.rows}x{cfg.cols})"
    if ks[-2] != L:
        return f"{L} queries and {ks[-2]} keys"
    H = lead[-1] if lead else 1
    qa = QAttn(im.ExpParams(-16, 1), 1, H, L, dh, comp.causal, cfg.cols)
    zero = np.zeros((1, H), np.int64)
    code = AttnCode("fit", qa, cfg, dict.fromkeys(("q", "k", "v", "out"), zero), dict.fromkeys(("q", "k", "v", "out"),
                    dh), 0, 0 if comp.causal else None, 0, 0)
    em = _AttnEmitter(code, ProgramBuilder(cfg), acc_limit=1 << 40)
    try:
        em.batch(0)
    except (OperandError, ChipCompileError) as e:
        return f"does not fit SPM/ACC ({e})"
    if em.spm.top > spm_free or em.acc_top > cfg.acc_rows:
        return f"needs {em.spm.top} SPM rows and {em.acc_top} ACC rows"
    return None


def _rows_of(s: Schedule, t: int, idx: np.ndarray, what: str) -> tuple[np.ndarray, int]:
    """Row-0 byte offsets ``(B, H)`` and the row stride of a ``(B, H, L, dh)`` view whose rows are
    contiguous at one stride (ChipCompileError otherwise)."""
    off = s.tensors[t].phys_offsets(idx)
    rs = rows_at_one_stride(off)
    if rs is None:
        raise ChipCompileError(f"{what}: rows must be contiguous features at one stride in DRAM")
    return off[..., 0, 0].astype(np.int64), rs


def lower_attention(cfg: ChipConfig, s: Schedule, k: AttnKernel, qa: QAttn, tensor_addr: dict, put,
                    spm_free: int) -> tuple[AttnCode, int, int]:
    """The kernel's code (constants and scratch placed with ``put``) and the SPM and ACC rows it needs."""
    what = f"kernel {k.name} ({k.comp}, {qa.B} x {qa.H} heads of {qa.L} x {qa.dh})"
    Lk = k.srcs[1][1].shape[2]
    dv = k.srcs[2][1].shape[3]
    if not (qa.dh == dv == cfg.rows == cfg.cols):
        raise ChipCompileError(f"{what}: the head size ({qa.dh}, values {dv}) must equal the array "
                               f"({cfg.rows}x{cfg.cols}) on config {cfg.name!r}")
    if Lk != qa.L:
        raise ChipCompileError(f"{what}: {qa.L} queries and {Lk} keys: only self-attention lengths are supported")
    rows, stride = {}, {}
    for key, (t, idx) in zip("qkv", k.srcs):
        off, stride[key] = _rows_of(s, t, idx, f"{what}, {key}")
        rows[key] = tensor_addr[t] + off
    out = s.tensors[k.out]
    off, stride["out"] = _rows_of(s, k.out, out.identity().reshape(k.srcs[0][1].shape), f"{what}, output")
    rows["out"] = tensor_addr[k.out] + off
    C, H = cfg.cols, qa.H
    qa.blk = C
    TM = cdiv(qa.L, C) * C
    lane = put(lane_rows(C, H).astype(np.int32))
    qidx = put(query_index_rows(C, H, TM).astype(np.int32)) if qa.causal else None
    kt = put(np.zeros(H * qa.dh * TM, np.int8))
    vs = put(np.zeros(H * TM * qa.dh, np.int8))
    code = AttnCode(k.name, qa, cfg, rows, stride, lane, qidx, kt, vs)
    em = _AttnEmitter(code, ProgramBuilder(cfg), acc_limit=1 << 40)   # a dry run: the rows it uses
    try:
        em.batch(0)
        n_spm, n_acc = em.spm.top, em.acc_top
    except OperandError as e:                       # a row beyond the memory
        raise ChipCompileError(f"{what}: does not fit SPM/ACC of config {cfg.name!r} ({e})") from None
    if n_spm > spm_free or n_acc > cfg.acc_rows:
        raise ChipCompileError(f"{what}: needs {n_spm} SPM rows ({spm_free} free) and {n_acc} ACC rows "
                               f"(config {cfg.name!r} has {cfg.acc_rows})")
    return code, n_spm, n_acc


__all__ = ["QAttn", "quantize_attention", "attention_int", "AttnCode", "lower_attention", "fused_unfit"]
