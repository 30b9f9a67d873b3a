"""Emission of the transformer block (see ``compiler.lower.transformer``): the VPU/MXU/DMA program.

``emit(cfg, qblocks, TM, fused)`` builds the program (``isa.builder``) of one block or a stack of blocks in phases
separated by ``fence all`` (load x; per block LayerNorm 1 with the weight prefetch, QKV
projection with K's transposing store, the fused attention, output projection + residual,
LayerNorm 2, FC1 + GELU, FC2 + residual; store). Each ``_Emitter`` method that emits a VPU
sequence mirrors one function of ``compiler.lower.intmath`` (the reference), op for op.

Activations live in SPM/ACC *query-block major* (see ``_Emitter``), so every phase repeats over
``NQ_REG = ceil(T / cols)`` query blocks: the work scales with T from one binary.

Registers (``isa.regs``): ``DYN_REG`` = T (written by the host), ``NQ_REG`` = ceil(T / cols); the
attention loop's and the temporaries are ``isa.regs.TransformerBlock``. Loop registers: l1 (query
blocks), l2 (an inner level), l3 (constant row blocks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from isa.builder import Label, ProgramBuilder, acc, dram, spm
from isa.config import ChipConfig
from isa.ints import align_up
from isa.program import DRAM_ALIGN
from isa.regs import DYN_REG, L1, L3, NQ_REG, ZERO, LoopReg
from isa.regs import TransformerBlock as TB
from isa.table import SPACE_BYTES, Space

from compiler.lower import intmath as im
from compiler.lower.schedule import ChipCompileError

#: bytes of an ACC element: int32 rows (biases, scales, scores) move in these
EB = SPACE_BYTES[Space.ACC]


class _Alloc:
    """Rows handed out from ``base`` upwards; more than ``limit`` in all raises ChipCompileError.

    ``what`` names the memory ("SPM ..." or "ACC ..."): ``bank()`` starts the next rows at one of its
    banks (``cfg.spm_bank_rows``, ``cfg.acc_bank_rows``; docs/microarchitecture.md section 4), so that
    rows another unit writes at the same time are in banks of their own (no-op with one-row banks)."""

    def __init__(self, limit: int, what: str, cfg, base: int = 0, owner: str = "TransformerBlock",
                 hint: str = "lower the maximum T"):
        self.limit, self.what, self.cfg, self.top, self.base = limit, what, cfg, 0, base
        self.owner, self.hint = owner, hint
        self.bank_rows = cfg.spm_bank_rows if what.startswith("SPM") else cfg.acc_bank_rows

    def bank(self) -> None:
        """The next rows start a bank (absolute address ``base + top``)."""
        self.top = align_up(self.base + self.top, self.bank_rows) - self.base

    def __call__(self, n: int) -> int:
        a, self.top = self.top, self.top + n
        if self.top > self.limit:
            raise ChipCompileError(f"{self.owner}: {self.what} needs more than its {self.limit} rows on "
                                   f"config {self.cfg.name!r} ({self.hint})")
        return self.base + a


class _Consts:
    """Constants packed into DRAM from ``base`` (64-byte aligned entries)."""

    def __init__(self, base: int):
        self.base, self.parts, self.top = base, [], base

    def add(self, arr) -> int:
        b = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        a = self.top
        self.parts.append((a, b.copy()))
        self.top = align_up(a + b.size, DRAM_ALIGN)
        return a


class VpuEmitter:
    """The VPU instruction sequences of ``compiler.lower.intmath`` (each method mirrors one function,
    op for op), shared by the transformer block (``_Emitter``) and the norm kernels of the ordinary
    pipeline (``compiler.lower.norms``).

    Activations live in SPM/ACC *query-block major*: the row of token ``t``, column block ``c`` of a
    tensor with ``nb`` blocks is ``(t // Q) * nb * Q + c * Q + t % Q`` (``Q = cols``). Every
    instruction that touches activations repeats over the query blocks with loop register l1 whose
    trip count is ``nq``: a scalar register (the transformer's ``NQ_REG``) or an immediate. ``self.acc``
    hands out ACC rows (an ``_Alloc``); ``self.b`` is the program builder emitted into."""

    def __init__(self, cfg: ChipConfig, b: ProgramBuilder, TM: int, nq):
        self.cfg, self.b, self.TM, self.nq = cfg, b, TM, nq
        self.C = self.Q = cfg.cols
        self.acc = None
        self._loops: dict = {}

    def e(self, op: str, *operands, **keywords) -> None:
        self.b.emit(op, *operands, **keywords)

    def loop(self, k: int, count, strides) -> None:
        key = (count, tuple(strides))
        if self._loops.get(k) == key:
            return
        self._loops[k] = key
        s = list(strides) + [0] * (3 - len(strides))
        self.e("loop", LoopReg(k), count, s0=s[0], s1=s[1], s2=s[2])

    def rep(self, op: str, *operands, st, inner=None, **keywords) -> None:
        """``op`` once per active query block (memory operand k advances by ``st[k]`` rows/bytes), and
        per ``inner = (count, strides)`` inside it."""
        self.loop(1, self.nq, st)
        if inner is None:
            self.e(op, *operands, rep=L1, **keywords)
        else:
            self.loop(2, inner[0], inner[1])
            self.e(op, *operands, rep=(L1, 2), **keywords)

    def vpu(self, n: int, st: int, inner=None):
        """A VPU op over ``n`` rows per query block, every memory operand in the same layout:
        ``v = self.vpu(n, st); v("vadd", acc[D], acc[A], 1)``; ``inner``: as ``rep``'s."""
        def v(op: str, *operands) -> None:
            self.rep(op, *operands, n=n, st=(st, st, st), inner=inner)
        return v

    # --- VPU sequences (each mirrors a function of compiler.lower.intmath) ---------------------------
    def ilog2(self, E, V, n, st, lo: int = 0, steps=(16, 8, 4, 2, 1), temps=None):
        """``E = floor(log2 V)`` for ``2^lo <= V < 2^(lo + sum(steps) + 1)``."""
        W, T = temps or (self.acc(st * self.TM // self.Q), self.acc(st * self.TM // self.Q))
        v = self.vpu(n, st)
        v("vsra", acc[W], acc[V], lo)
        v("vmul", acc[E], acc[V], 0)
        if lo:
            v("vadd", acc[E], acc[E], lo)
        for k in steps:
            v("vsra", acc[T], acc[W], k)
            v("vmin", acc[T], acc[T], 1)
            v("vmul", acc[T], acc[T], k)
            v("vsra", acc[W], acc[W], acc[T])
            v("vadd", acc[E], acc[E], acc[T])

    def recip(self, Y, E, V, n, st, lo: int, hi: int, temps):
        """``1/V`` for ``2^lo <= V < 2^hi`` (the bounds shorten the log2 search); 4 temporaries."""
        A, U = temps[:2]
        steps, k = [], 1
        while sum(steps) < hi - 1 - lo:
            steps.insert(0, k)
            k *= 2
        self.ilog2(E, V, n, st, lo, tuple(steps), temps[2:])
        q = im.RECIP_Q
        v = self.vpu(n, st)
        v("vshl", acc[A], acc[V], q)
        v("vsra", acc[A], acc[A], acc[E])
        v("vsra", acc[Y], acc[A], 1)
        v("vmul", acc[Y], acc[Y], -1)
        v("vadd", acc[Y], acc[Y], im.RECIP_Y0)
        for _ in range(im.NEWTON_STEPS):
            v("vmul", acc[U], acc[A], acc[Y])
            v("vsra", acc[U], acc[U], q)
            v("vmul", acc[U], acc[U], -1)
            v("vadd", acc[U], acc[U], 2 << q)
            v("vmul", acc[Y], acc[Y], acc[U])
            v("vsra", acc[Y], acc[Y], q)

    def rsqrt(self, Y, H, V, n, st):
        E, E2, SL, SR, A, T = (self.acc(st * self.TM // self.Q) for _ in range(6))
        qa, qy = im.RSQRT_QA, im.RSQRT_QY
        v = self.vpu(n, st)
        self.ilog2(E, V, n, st)
        v("vsra", acc[H], acc[E], 1)
        v("vshl", acc[E2], acc[H], 1)
        v("vmul", acc[SL], acc[E2], -1)
        v("vadd", acc[SL], acc[SL], qa)
        v("vmax", acc[SL], acc[SL], 0)
        v("vsub", acc[SR], acc[E2], qa)
        v("vmax", acc[SR], acc[SR], 0)
        v("vshl", acc[A], acc[V], acc[SL])
        v("vsra", acc[A], acc[A], acc[SR])
        v("vmul", acc[Y], acc[A], im.RSQRT_K)
        v("vsra", acc[Y], acc[Y], 15)
        v("vmul", acc[Y], acc[Y], -1)
        v("vadd", acc[Y], acc[Y], im.RSQRT_Y0)
        for _ in range(im.NEWTON_STEPS):
            v("vmul", acc[T], acc[Y], acc[Y])
            v("vsra", acc[T], acc[T], qy)
            v("vmul", acc[T], acc[T], acc[A])
            v("vsra", acc[T], acc[T], qa)
            v("vmul", acc[T], acc[T], -1)
            v("vadd", acc[T], acc[T], 3 << qy)
            v("vmul", acc[Y], acc[Y], acc[T])
            v("vsra", acc[Y], acc[Y], qy + 1)

    def iexp(self, U, Z, G, n, st, p: im.ExpParams | None = None, inner=None):
        """``G = i_exp(U)`` (``U`` holds ``d``, destroyed; ``Z`` a temporary); ``p`` defaults to the block's;
        ``inner``: as ``rep``'s."""
        p, F, v = p or self.qb.ep, im.EXP_F, self.vpu(n, st, inner)
        v("vmax", acc[U], acc[U], -p.lim)
        v("vmul", acc[U], acc[U], p.nc)
        v("vsra", acc[U], acc[U], im.EXP_SC)
        v("vsra", acc[Z], acc[U], F)
        v("vshl", acc[G], acc[Z], F)
        v("vsub", acc[U], acc[U], acc[G])
        v("vsub", acc[U], acc[U], im.EXP_B)
        v("vmul", acc[G], acc[U], acc[U])
        v("vmul", acc[G], acc[G], im.EXP_A)
        v("vsra", acc[G], acc[G], im.EXP_PS)
        v("vadd", acc[G], acc[G], im.EXP_C)
        v("vmin", acc[Z], acc[Z], 31)
        v("vsra", acc[G], acc[G], acc[Z])

    def requant(self, shift: int, lo: int) -> None:
        """The requantizer for the ``vreq`` that follow: ``shift``, clamp to [lo, 127], half up."""
        self.e("vqcfg", shift=shift, zp=0, lo=lo, hi=127, round="half_up")

    # --- per-row helpers --------------------------------------------------------------------------
    def const_rows(self, dst_acc, src, nblk):
        """ACC rows ``dst + c*Q + i`` (c < nblk, i < Q) = int32 row c at DRAM ``src`` (row stride 0)."""
        Q = self.Q
        self.loop(3, nblk, (Q, self.C * EB))
        self.e("dma.ld", acc[dst_acc], dram[src], rows=Q, len=self.C, rstride=0, estride=EB, rep=L3)

    def row_sum(self, DST, SRC, nb, op: str = "vadd"):
        """Per-row array ``DST`` (Q rows per query block) = sum (``op="vmax"``: max) over the ``nb``
        blocks of ``SRC``."""
        Q = self.Q
        self.rep("vmov", acc[DST], acc[SRC], n=Q, st=(Q, nb * Q))
        for c in range(1, nb):
            self.rep(op, acc[DST], acc[DST], acc[SRC + c * Q], n=Q, st=(Q, Q, nb * Q))

    def per_row(self, op, BIG, ROW, nb):
        """``op BIG, BIG, ROW`` on every block of ``BIG`` (nb blocks), the per-row array ``ROW`` as operand b."""
        Q = self.Q
        self.rep(op, acc[BIG], acc[BIG], acc[ROW], n=Q, st=(nb * Q, nb * Q, Q), inner=(nb, (Q, Q, 0)))


class _Emitter(VpuEmitter):
    """The block's instructions (``VpuEmitter``'s layout); the query-block count is ``NQ_REG = ceil(T / Q)``
    (set from ``DYN_REG = T`` at launch), so the rows of the first ``ceil(T / Q)`` query blocks are a prefix."""
    #: rows from one query block of the queries (``QKV8``) to the next; None: the block's ``3 H Q``
    q_stride: int | None = None

    def __init__(self, cfg: ChipConfig, qb, TM: int, fused: bool):
        super().__init__(cfg, ProgramBuilder(cfg), TM, NQ_REG)
        self.qb, self.fused = qb, fused
        self.spm = _Alloc(cfg.spm_rows, "SPM", cfg)

    def label(self, name: str) -> Label:
        self._loops = {}
        return self.b.label(name)

    def phase(self, name: str) -> "_Alloc":
        if self.acc is not None:
            self.acc_peak = max(getattr(self, "acc_peak", 0), self.acc.top)
        name = getattr(self, "prefix", "") + name
        self.b.mark(name)
        self.acc = _Alloc(self.cfg.acc_rows, f"ACC ({name})", self.cfg)
        return self.acc

    # --- phases -------------------------------------------------------------------------------
    def layernorm(self, X8, OUT8, p: im.LNParams, g_dram, b_dram, hook=None, name="LayerNorm"):
        TM, Q, d = self.TM, self.Q, self.qb.d
        nb = d // Q
        N, S = nb * Q, nb * Q                     # rows per query block of a d-wide tensor
        a = self.phase(name)
        GB, BB = a(N), a(N)                       # written by the load unit while the VPU starts
        a.bank()
        XC, SS = a(nb * TM), a(nb * TM)
        SUM, V, Y, H = a(TM), a(TM), a(TM), a(TM)
        self.const_rows(GB, g_dram, nb)
        self.const_rows(BB, b_dram, nb)
        if hook is not None:
            hook()
        lg = int(math.log2(d))
        v = self.vpu(Q, Q)
        self.rep("vrsum", acc[SS], spm[X8], n=N, st=(S, S))
        self.row_sum(SUM, SS, nb)
        v("vsra", acc[SUM], acc[SUM], lg - im.LN_XB)
        self.rep("vshl", acc[XC], spm[X8], im.LN_XB, n=N, st=(S, S))
        self.per_row("vsub", XC, SUM, nb)
        self.rep("vmul", acc[SS], acc[XC], acc[XC], n=N, st=(S, S, S))
        self.rep("vrsum", acc[SS], acc[SS], n=N, st=(S, S))
        self.row_sum(V, SS, nb)
        v("vsra", acc[V], acc[V], lg)
        v("vadd", acc[V], acc[V], p.eps_q)
        self.rsqrt(Y, H, V, Q, Q)
        v("vadd", acc[H], acc[H], im.RSQRT_QY - im.LN_R)
        self.per_row("vmul", XC, Y, nb)
        self.per_row("vsra", XC, H, nb)
        self.e("fence", "load")
        self.rep("vmul", acc[XC], acc[XC], acc[GB], n=N, st=(S, S, 0))
        self.rep("vadd", acc[XC], acc[XC], acc[BB], n=N, st=(S, S, 0))
        self.requant(im.LN_R + p.gs, -128)
        self.rep("vreq", spm[OUT8], acc[XC], 1, n=N, st=(S, S))
        self.e("fence", "all")

    def gemm(self, A8, K, N, WS, b_dram, s_dram, name, order=None, after=None):
        """ACC ``OUT`` (N/C blocks) = A8 (K/R blocks) @ W + b, the weight tiles already in SPM at ``WS``
        (``[nt][kt]``); returns (OUT, scale rows). N tiles in ``order``; ``after = (k, fn)`` emits
        ``fn()`` once the first ``k`` N tiles are done (the rest of the matmuls overlap it)."""
        C, R, TM, Q = self.C, self.cfg.rows, self.TM, self.Q
        KT, NT = K // R, N // C
        a = self.phase(name)
        OUT, SC, BB = a(NT * TM), a(NT), a(NT * Q)
        self.const_rows(BB, b_dram, NT)                   # the bias rows, each repeated Q times
        if s_dram is not None:
            self.e("dma.ld", acc[SC], dram[s_dram], rows=NT, len=C, rstride=C * EB, estride=EB)
        self.e("fence", "all")
        self.rep("vmov", acc[OUT], acc[BB], n=NT * Q, st=(NT * Q, 0))     # ACC starts at the bias
        self.e("fence", "vpu")
        for i, nt in enumerate(order or range(NT)):
            if after is not None and i == after[0]:
                self.e("fence", "mxu")
                after[1](OUT, SC)
            for kt in range(KT):
                self.e("mxu.lw", spm[WS + (nt * KT + kt) * R])
                self.rep("mxu.mma", acc[OUT + nt * Q], spm[A8 + kt * Q], n=Q, st=(NT * Q, KT * Q))
        self.e("fence", "all")
        return OUT, SC

    def requant_blocks(self, dst8, nbd, OUT, nbo, SC, nt0, nt1, shift):
        Q = self.Q
        self.requant(shift, -128)
        self.rep("vreq", spm[dst8 + nt0 * Q], acc[OUT + nt0 * Q], acc[SC + nt0], n=Q,
                 st=(nbd * Q, nbo * Q, 0), inner=(nt1 - nt0, (Q, Q, 1)))

    def residual(self, X8, OUT, SC, mx, shx, sho, dst8):
        Q, nb = self.Q, self.qb.d // self.C
        S = nb * Q
        XA = self.acc(nb * self.TM)
        R1, R2 = self.tmp8a, self.tmp8b
        self.rep("vmov", acc[XA], spm[X8], n=S, st=(S, S))
        self.requant(shx, -128)
        self.rep("vreq", spm[R1], acc[XA], mx, n=S, st=(S, S))
        self.requant_blocks(R2, nb, OUT, nb, SC, 0, nb, sho)
        self.rep("vadd", spm[dst8], spm[R1], spm[R2], n=S, st=(S, S, S))
        self.e("fence", "all")

    def attention(self, QKV8, O8, kt_dram, v_dram, lane_dram, s_dram, p_dram, label="kblock", qidx=None):
        """The fused attention. The first key block is peeled: with ``m = -inf`` its ``alpha`` is 0,
        so it sets ``m``, ``l`` and ``O`` directly (the same values the general step gives).
        Causal blocks mask key ``16 kb + lane`` of row ``(qb, h, i)`` when it exceeds the query
        ``16 qb + i`` (a constant row block ``QIDX``); the length mask is then implied for valid rows."""
        TM, R, Q = self.TM, self.cfg.rows, self.Q
        H = self.qb.heads
        n = H * Q                                   # rows per query block (all heads)
        a = self.phase("attention")
        r = dict(zip("S O M L U Z G".split(), (a(H * TM) for _ in range(7))))
        r["AL"] = r["Z"]                # alpha: Z is free once i_exp has shifted by it
        r["MB"], r["LANE"] = a(n), a(n)
        r["KTS"], r["VS"], r["P8"] = self.spm(H * R), self.spm(H * R), self.spm(H * TM)
        self.const_rows(r["LANE"], lane_dram, H)
        if self.qb.causal:
            r["QIDX"], r["CM"] = a(H * TM), r["U"]      # the mask is added before U is used
            self.rep("dma.ld", acc[r["QIDX"]], dram[qidx], rows=n, len=self.C, rstride=self.C * EB, estride=EB,
                     st=(n, n * self.C * EB))
            self.e("seti", TB.KEY0, 0)                    # Q kb: the first key of the block
        self.e("add", TB.VALID, DYN_REG, ZERO)            # T - Q kb: the valid lanes of this block
        self.e("seti", TB.KBLOCK, 0)
        self.e("seti", TB.KT_OFF, 0)                      # byte offset of the block in K^T
        self.e("seti", TB.V_OFF, 0)                       # ... in V
        self.e("fence", "all")
        self.key_block(r, QKV8, kt_dram, v_dram, s_dram, p_dram, first=True)
        done = self.b.new_label(f"{label}_done")
        self.e("bge", TB.KBLOCK, NQ_REG, done)
        top = self.label(label)
        self.key_block(r, QKV8, kt_dram, v_dram, s_dram, p_dram, first=False)
        self.e("blt", TB.KBLOCK, NQ_REG, top)             # ceil(T / C) key blocks
        self._loops = {}
        self.b.place(done)
        # O / l: reciprocal of l by Newton, O << (13 - e), one requantization per row (scale = y)
        O, v = r["O"], self.vpu(n, n)
        Y, E = r["S"], r["M"]
        # 127 <= l <= 127 T: the largest probability of a row is 127 in the block where its
        # maximum appears, and later blocks keep l (alpha = 1024 exactly when m does not change)
        self.recip(Y, E, r["L"], n, n, 6, (127 * TM).bit_length(), (r["U"], r["Z"], r["Z"], r["G"]))
        v("vmul", acc[E], acc[E], -1)
        v("vadd", acc[E], acc[E], 13)
        v("vshl", acc[O], acc[O], acc[E])
        self.requant(27, -128)
        self.e("seti", TB.ROWS, n)
        self.e("mul", TB.NROWS, NQ_REG, TB.ROWS)
        self.e("loop", L1, TB.NROWS, s0=1, s1=1, s2=1)
        self._loops = {}
        self.e("vreq", spm[O8], acc[O], acc[Y], n=1, rep=L1)
        self.e("fence", "all")

    def key_block(self, r, QKV8, kt_dram, v_dram, s_dram, p_dram, first: bool):
        TM, C, R, Q = self.TM, self.C, self.cfg.rows, self.Q
        H, dh = self.qb.heads, self.qb.d // self.qb.heads
        n, nq3 = H * Q, self.q_stride or 3 * H * Q
        S, O, M, L, U, Z, G, AL, MB, LANE = (r[k] for k in "S O M L U Z G AL MB LANE".split())
        KTS, VS, P8 = r["KTS"], r["VS"], r["P8"]
        v = self.vpu(n, n)
        self.loop(3, H, (R, dh * TM))
        self.e("dma.ld", spm[KTS], dram[kt_dram + TB.KT_OFF], rows=dh, len=C, rstride=TM, rep=L3)
        self.loop(3, H, (R, TM * dh))
        self.e("dma.ld", spm[VS], dram[v_dram + TB.V_OFF], rows=C, len=dh, rstride=dh, rep=L3)
        if not self.qb.causal:                           # keys >= T: -2^30
            self.e("vsub", acc[MB], acc[LANE], TB.VALID, n=n)
            self.e("vsra", acc[MB], acc[MB], 31, n=n)
            self.e("vadd", acc[MB], acc[MB], 1, n=n)
            self.e("vmul", acc[MB], acc[MB], im.NEG, n=n)
        else:                                            # keys after the query: -2^30
            CM = r["CM"]
            self.rep("vsub", acc[CM], acc[r["QIDX"]], acc[LANE], n=n, st=(n, n, 0))
            v("vsub", acc[CM], acc[CM], TB.KEY0)
            v("vsra", acc[CM], acc[CM], 31)
            v("vmul", acc[CM], acc[CM], -im.NEG)
        self.e("fence", "all")
        for h in range(H):
            self.e("mxu.lw", spm[KTS + h * R], k=dh)
            self.rep("mxu.mm", acc[S + h * Q], spm[QKV8 + h * Q], n=Q, st=(n, nq3))
        self.e("fence", "all")
        if not self.fused:                                # scores through DRAM
            self.rep("dma.st", dram[s_dram], acc[S], rows=n, len=C, rstride=C * EB, estride=EB, st=(n * C * EB, n))
            self.e("fence", "all")
            self.rep("dma.ld", acc[S], dram[s_dram], rows=n, len=C, rstride=C * EB, estride=EB, st=(n, n * C * EB))
            self.e("fence", "all")
        if not self.qb.causal:
            self.rep("vadd", acc[S], acc[S], acc[MB], n=n, st=(n, n, 0))
        else:
            v("vadd", acc[S], acc[S], acc[r["CM"]])
        if first:                                        # m = rowmax, p = exp(s - m), l = sum p8
            v("vrmax", acc[M], acc[S])
            v("vsub", acc[S], acc[S], acc[M])
            self.iexp(S, Z, G, n, n)
            self.requant(im.EXP_E, 0)
            v("vreq", spm[P8], acc[G], 127)
            v("vrsum", acc[L], spm[P8])
        else:                                            # U = m_new; S: s - m_new, then m - m_new
            v("vrmax", acc[U], acc[S])
            v("vmax", acc[U], acc[U], acc[M])
            v("vsub", acc[S], acc[S], acc[U])
            self.iexp(S, Z, G, n, n)
            self.requant(im.EXP_E, 0)
            v("vreq", spm[P8], acc[G], 127)
            v("vsub", acc[S], acc[M], acc[U])
            self.iexp(S, Z, G, n, n)
            v("vsra", acc[AL], acc[G], im.EXP_E - im.ALPHA_BITS)
            v("vmov", acc[M], acc[U])
            v("vmul", acc[L], acc[L], acc[AL])
            v("vsra", acc[L], acc[L], im.ALPHA_BITS)
            v("vrsum", acc[U], spm[P8])
            v("vadd", acc[L], acc[L], acc[U])
            v("vmul", acc[O], acc[O], acc[AL])
            v("vsra", acc[O], acc[O], im.ALPHA_BITS)
        self.e("fence", "all")
        if not self.fused:                                # probabilities through DRAM
            self.rep("dma.st", dram[p_dram], spm[P8], rows=n, len=C, rstride=C, st=(n * C, n))
            self.e("fence", "all")
            self.rep("dma.ld", spm[P8], dram[p_dram], rows=n, len=C, rstride=C, st=(n, n * C))
            self.e("fence", "all")
        mm = "mxu.mm" if first else "mxu.mma"            # the first block writes O, later ones add
        for h in range(H):
            self.e("mxu.lw", spm[VS + h * R], k=C)
            self.rep(mm, acc[O + h * Q], spm[P8 + h * Q], n=Q, st=(n, n))
        self.e("addi", TB.KBLOCK, TB.KBLOCK, 1)
        self.e("addi", TB.VALID, TB.VALID, -C)
        self.e("addi", TB.KT_OFF, TB.KT_OFF, C)
        self.e("addi", TB.V_OFF, TB.V_OFF, C * dh)
        if self.qb.causal:
            self.e("addi", TB.KEY0, TB.KEY0, C)
        self.e("fence", "all")

    def relu(self, Hh, nb, G8):
        """FC1's int32 output to int8 with a requantization clamped at 0."""
        gm, gsh = self.qb.g_req
        S = nb * self.Q
        self.requant(gsh, 0)
        self.rep("vreq", spm[G8], acc[Hh], gm, n=S, st=(S, S))
        self.e("fence", "all")

    def gelu(self, Hh, nb, G8):
        """``intmath.i_gelu`` then ``vreq`` to int8, in chunks of column blocks sized to the free ACC."""
        p, Q, TM = self.qb.gelu, self.Q, self.TM
        free = self.cfg.acc_rows - self.acc.top
        ch = max((c for c in range(1, nb + 1) if nb % c == 0 and 2 * c * TM <= free), default=0)
        if not ch:
            raise ChipCompileError(f"TransformerBlock: GELU temporaries do not fit ACC on config "
                                   f"{self.cfg.name!r} (lower the maximum T)")
        A, T = self.acc(ch * TM), self.acc(ch * TM)
        S, n = nb * Q, ch * Q                             # rows per query block: H region, chunk
        gm, gsh = self.qb.g_req
        self.requant(gsh, -128)
        for c in range(nb // ch):
            h = Hh + c * n
            ops = [  # (mnemonic, operands, strides of the memory operands)
                ("vsra", (acc[h], acc[h], p.sh), (S, S)),
                ("vmin", (acc[h], acc[h], p.hc), (S, S)),
                ("vmax", (acc[h], acc[h], -p.hc), (S, S)),
                ("vabs", (acc[A], acc[h]), (n, S)),
                ("vmin", (acc[T], acc[A], -p.qb), (n, n)),
                ("vadd", (acc[T], acc[T], p.qb), (n, n)),
                ("vmul", (acc[T], acc[T], acc[T]), (n, n, n)),
                ("vadd", (acc[T], acc[T], p.qc), (n, n)),
                ("vmul", (acc[A], acc[A], acc[T]), (n, n, n)),
                ("vmul", (acc[h], acc[h], p.q1), (S, S)),
                ("vadd", (acc[A], acc[A], acc[h]), (n, n, S)),
                ("vreq", (spm[G8 + c * n], acc[A], gm), (S, n))]
            for op, operands, st in ops:
                self.rep(op, *operands, n=n, st=st)
        self.e("fence", "all")


@dataclass
class Layout:
    x: int
    out: int
    kt: int
    v: int
    s: int
    p: int
    const_base: int
    consts: list = field(default_factory=list)
    phases: list = field(default_factory=list)    # (name, first pc)
    usage: dict = field(default_factory=dict)     # memory -> (used, capacity)


@dataclass
class _Usage:
    used: int
    capacity: int
    unit: str

    def to_dict(self) -> dict:
        return {"used": self.used, "capacity": self.capacity, "unit": self.unit}


def check_shapes(cfg: ChipConfig, d: int, H: int, ff: int) -> None:
    C, R = cfg.cols, cfg.rows
    dh = d // H
    if dh != R or R != C or d % C or ff % C:
        raise ChipCompileError(f"TransformerBlock on config {cfg.name!r}: the head size ({dh}) must equal the "
                               f"array ({R}x{C}) and d_model ({d}) / ff ({ff}) be multiples of {C}")
    if d & (d - 1) or d < 16:
        raise ChipCompileError(f"TransformerBlock: d_model must be a power of two >= 16, got {d}")


def lane_rows(C: int, H: int) -> np.ndarray:
    """The attention's lane-index constant: ``H`` rows of ``0 .. C-1``."""
    return np.tile(np.arange(C), H)


def query_index_rows(C: int, H: int, TM: int) -> np.ndarray:
    """Causal attention: the query index of every attention row (query block, head, row), in all ``C`` lanes."""
    return np.repeat((np.arange(TM // C)[:, None, None] * C + np.arange(C)[None, None, :])
                     .repeat(H, 1).reshape(-1), C)


def emit(cfg: ChipConfig, qbs, TM: int, fused: bool = True):
    """The program of a stack of blocks (``qbs``: QBlocks, or one) for ``TM`` rows (a multiple of
    ``cols``): (Program, Layout, its listing)."""
    qbs = list(qbs) if isinstance(qbs, (list, tuple)) else [qbs]
    C, R = cfg.cols, cfg.rows
    qb0 = qbs[0]
    d, H, ff = qb0.d, qb0.heads, qb0.ff
    dh = d // H
    for qb in qbs:
        check_shapes(cfg, qb.d, qb.heads, qb.ff)
        if (qb.d, qb.heads, qb.ff) != (d, H, ff):
            raise ChipCompileError("a stack of TransformerBlocks must have one d_model, head count and ff width")
    n = H * TM
    lay = Layout(x=0, out=TM * d, kt=2 * TM * d, v=3 * TM * d, s=4 * TM * d,
                 p=4 * TM * d + n * C * EB, const_base=0)
    base = align_up(lay.p + n * C, DRAM_ALIGN)
    k = _Consts(base)
    lay.const_base = base

    def tiles(w):                                   # (K, N) -> tiles [nt][kt], R rows of C lanes
        K, N = w.shape
        t = w.reshape(K // R, R, N // C, C).transpose(2, 0, 1, 3)
        return k.add(t.astype(np.int8))

    def rows32(v):
        return k.add(np.asarray(v, np.int64).astype(np.int32).reshape(-1, C))

    lane = rows32(lane_rows(C, H))
    qidx = rows32(query_index_rows(C, H, TM)) if any(q.causal for q in qbs) else None
    def consts(qb):
        c = dict(wqkv=tiles(qb.wqkv), bqkv=rows32(qb.bqkv), sqkv=rows32(qb.m_qkv),
                 wo=tiles(qb.wo), bo=rows32(qb.bo), so=rows32(qb.res1[2]))
        if qb.kind == "block":
            c.update(ln1g=rows32(qb.ln1.g), ln1b=rows32(qb.ln1.b), ln2g=rows32(qb.ln2.g), ln2b=rows32(qb.ln2.b),
                     w1=tiles(qb.w1), b1=rows32(qb.b1), w2=tiles(qb.w2), b2=rows32(qb.b2), s2=rows32(qb.res2[2]))
        return c
    ads = [consts(qb) for qb in qbs]
    if k.top > cfg.dram_bytes:
        raise ChipCompileError(f"TransformerBlock: {k.top} bytes of DRAM needed, config {cfg.name!r} has "
                               f"{cfg.dram_bytes}")
    lay.consts = k.parts
    em = _Emitter(cfg, qb0, TM, fused)
    sp, Q = em.spm, em.Q
    nb, nbf = d // C, ff // C
    nd = nb * TM
    X8, A1, QKV8, O8, X1, A2, G8, OUT8 = sp(nd), sp(nd), sp(3 * nd), sp(nd), sp(nd), sp(nd), sp(nbf * TM), sp(nd)
    em.tmp8a, em.tmp8b = sp(nd), sp(nd)
    mats = (("wqkv", (d, 3 * d)), ("wo", (d, d))) + ((("w1", (d, ff)), ("w2", (ff, d))) if ff else ())
    WS = {key: sp(K * N // C) for key, (K, N) in mats}
    em.b.comment(f"{len(qbs)} transformer block(s) d={d} heads={H} ff={ff}, T <= {TM} ({DYN_REG!r}), "
                 f"{'fused' if fused else 'unfused'} attention")
    em.phase("load x")
    em.e("addi", NQ_REG, DYN_REG, Q - 1)
    em.e("seti", TB.SHIFT, int(math.log2(Q)))
    em.e("sra", NQ_REG, NQ_REG, TB.SHIFT)             # ceil(T / Q) query (and key) blocks
    em.rep("dma.ld", spm[X8], dram[lay.x], rows=Q, len=C, rstride=d, st=(nb * Q, Q * d), inner=(nb, (Q, C)))
    em.e("fence", "all")
    for bi, qb in enumerate(qbs):
        em.qb, ad = qb, ads[bi]
        em.prefix = f"block {bi}: " if len(qbs) > 1 else ""

        def prefetch(ad=ad):                        # the block's weights, loaded under its LayerNorm 1
            for key, (K, N) in mats:
                em.e("dma.ld", spm[WS[key]], dram[ad[key]], rows=K * N // C, len=C, rstride=C)

        if qb.kind == "mha":                        # self-attention alone (no residual)
            em.phase("weights")
            prefetch()
            QIN = X8
        elif qb.norm_first:                         # pre-LN: x + f(LN(x))
            em.layernorm(X8, A1, qb.ln1, ad["ln1g"], ad["ln1b"], prefetch, "LayerNorm 1")
            QIN, R1, R2 = A1, X1, OUT8
        else:                                       # post-LN: LN(x + f(x))
            em.phase("weights")
            prefetch()
            QIN, R1, R2 = X8, A1, A2

        def store_kt(OUT, SC, qb=qb):               # K first: its transposing store overlaps Q, V
            em.requant_blocks(QKV8, 3 * nb, OUT, 3 * nb, SC, nb, 2 * nb, qb.sh_qkv[1])
            em.e("fence", "vpu")
            em.rep("dma.st", dram[lay.kt], spm[QKV8 + H * Q], rows=Q, len=dh, rstride=1, estride=TM,
                   st=(Q, 3 * H * Q), inner=(H, (dh * TM, Q)))

        order = list(range(nb, 2 * nb)) + list(range(nb)) + list(range(2 * nb, 3 * nb))
        OUT, SC = em.gemm(QIN, d, 3 * d, WS["wqkv"], ad["bqkv"], ad["sqkv"], "QKV projection", order,
                          (nb, store_kt))
        for i in (0, 2):
            em.requant_blocks(QKV8, 3 * nb, OUT, 3 * nb, SC, i * nb, (i + 1) * nb, qb.sh_qkv[i])
        em.e("fence", "all")
        em.rep("dma.st", dram[lay.v], spm[QKV8 + 2 * H * Q], rows=Q, len=dh, rstride=dh,
               st=(Q * dh, 3 * H * Q), inner=(H, (TM * dh, Q)))
        em.e("fence", "all")
        em.attention(QKV8, O8, lay.kt, lay.v, lane, lay.s, lay.p, f"kblock{bi}", qidx)
        if qb.kind == "mha":
            OUT, SC = em.gemm(O8, d, d, WS["wo"], ad["bo"], ad["so"], "output projection")
            em.requant_blocks(OUT8, nb, OUT, nb, SC, 0, nb, qb.res1[3])
            em.e("fence", "all")
            X8, OUT8 = OUT8, X8
            continue
        OUT, SC = em.gemm(O8, d, d, WS["wo"], ad["bo"], ad["so"], "output projection + residual")
        mx, shx, _, sho = qb.res1
        em.residual(X8, OUT, SC, mx, shx, sho, R1)
        if qb.norm_first:
            em.layernorm(X1, A2, qb.ln2, ad["ln2g"], ad["ln2b"], name="LayerNorm 2")
            FIN = A2
        else:
            em.layernorm(A1, X1, qb.ln1, ad["ln1g"], ad["ln1b"], name="LayerNorm 1")
            FIN = X1
        act = {"gelu": "GELU", "relu": "ReLU"}[qb.act]
        OUT, _ = em.gemm(FIN, d, ff, WS["w1"], ad["b1"], None, f"FC1 + {act}")
        if qb.act == "gelu":
            em.gelu(OUT, nbf, G8)
        else:
            em.relu(OUT, nbf, G8)
        OUT, SC = em.gemm(G8, ff, d, WS["w2"], ad["b2"], ad["s2"], "FC2 + residual")
        mx2, shx2, _, sh2 = qb.res2
        em.residual(X1, OUT, SC, mx2, shx2, sh2, R2)
        if not qb.norm_first:
            em.layernorm(A2, OUT8, qb.ln2, ad["ln2g"], ad["ln2b"], name="LayerNorm 2")
        X8, OUT8 = OUT8, X8                          # the next block reads this one's output
    em.prefix = ""
    em.phase("store")
    em.rep("dma.st", dram[lay.out], spm[X8], rows=Q, len=C, rstride=d, st=(Q * d, nb * Q), inner=(nb, (C, Q)))
    em.e("fence", "all")
    em.e("halt")
    lay.phases = list(em.b.marks)
    em.phase("end")
    lay.usage = {"spm": _Usage(em.spm.top, cfg.spm_rows, "rows"), "acc": _Usage(em.acc_peak, cfg.acc_rows, "rows"),
                 "dram": _Usage(k.top, cfg.dram_bytes, "bytes")}
    if len(em.b) > cfg.imem_words:
        raise ChipCompileError(f"TransformerBlock: {len(em.b)} instructions exceed imem ({cfg.imem_words})")
    return em.b.build("<transformer>"), lay, em.b.text()


def dram_bytes_by_phase(program, layout: Layout, trace) -> dict:
    """DRAM bytes (read + written) of each phase, from a run's trace (``Device("sim", trace=True)``)."""
    from isa.encoding import decode
    from isa.table import Unit
    words = program.words()
    starts = [pc for _, pc in layout.phases]
    out = {name: 0 for name, _ in layout.phases}
    for r in trace.records:
        if r.unit not in (int(Unit.LOAD), int(Unit.STORE)):
            continue
        ins = decode(words[r.pc], program.config)
        k = max(i for i, pc in enumerate(starts) if pc <= r.pc)
        out[layout.phases[k][0]] += ins["rows"] * ins["len"] * SPACE_BYTES[ins["space"]]
    return out


def cycles_by_phase(layout: Layout, trace) -> dict:
    """Cycles from each phase's first issue to its last retire (phases are fenced, so they tile the run)."""
    starts = [pc for _, pc in layout.phases]
    span: dict = {}
    for r in trace.records:
        k = max(i for i, pc in enumerate(starts) if pc <= r.pc)
        lo, hi = span.get(k, (r.issue, r.retire or r.issue))
        span[k] = (min(lo, r.issue), max(hi, r.retire if r.retire is not None else r.issue))
    return {layout.phases[k][0]: hi - lo + 1 for k, (lo, hi) in sorted(span.items())}


__all__ = ["emit", "check_shapes", "dram_bytes_by_phase", "cycles_by_phase", "Layout"]
