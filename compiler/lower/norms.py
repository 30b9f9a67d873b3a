"""LayerNorm, RMSNorm and softmax over the last axis as VPU kernels of the ordinary pipeline (the
elementwise composites, GELU, SiLU, sigmoid, tanh and erf, are lookup-table kernels of ``schedule``).

``compiler.ir.patterns`` finds the layers in the primitive graph; ``schedule.lift`` turns each into a
``schedule.NormKernel`` (rows of ``d`` features, constant weight and bias). This module gives it

* its quantized form ``QNorm`` (``quantize_norm``: ``intmath.NormParams`` or ``intmath.SoftmaxParams``
  for the input and output scales calibration found),
* its integer reference ``norm_int``: ``intmath.norm_rows`` / ``intmath.softmax_rows`` on the gathered
  int8 rows, bit for bit what the chip computes (``quantize.run_int`` calls it),
* its lowering ``lower_norm`` (``pipeline.lower_schedule`` calls it) to a ``NormCode``, whose ``emit``
  writes the instructions with ``transformer_emit.VpuEmitter``: the same VPU sequences (``rsqrt``,
  ``recip``, ``iexp``, per-row sums) the transformer block uses.

Layout: rows are processed in groups of ``TM`` rows (a multiple of ``Q = cols``: ``G = TM / Q`` tiles
of ``Q`` rows). In SPM and ACC a group is *tile major*: chunk ``c`` (lanes ``c*Q .. c*Q + Q - 1`` of the
features, ``nb = ceil(d / Q)`` chunks) of row ``t`` is at ``(t // Q) * nb * Q + c * Q + t % Q``, the
transformer's query-block layout, so every VPU instruction repeats over the ``G`` tiles with loop
register l1. A last chunk shorter than ``Q`` is loaded with zeros in its spare lanes; they are masked
(LayerNorm's centred values are multiplied by a 0/1 row, softmax's inputs get ``-2^30`` added) and
never stored. A last tile with fewer than ``Q`` rows computes garbage rows that are never stored.

A masked softmax (``softmax(x + mask)``, ``where(mask, x, -inf)``, causal) adds an int32 row per input
row (``intmath.mask_add``: ``NEG`` where masked, so the probability there is exactly 0) before the row
maximum. The rows are a DRAM constant already in the tile-major layout (``_mask_tiles``, spare lanes
``NEG``), one period of them when the mask repeats over the rows (over batch elements and heads);
each group loads its tiles' rows into ACC with one DMA per run of consecutive mask tiles.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from isa.builder import ProgramBuilder, acc, dram, spm
from isa.config import ChipConfig
from isa.ints import cdiv
from isa.operands import OperandError
from isa.regs import L1, LoopReg, Reg
from isa.regs import GemmKernel as GK

from compiler.lower import intmath as im
from compiler.lower.schedule import ChipCompileError, NormKernel, Schedule, gather_base
from compiler.lower.transformer_emit import EB, VpuEmitter, _Alloc


@dataclass
class QNorm:
    """A norm kernel on integers: which one, its feature count and the ``intmath`` parameters."""
    kind: str                       # layernorm | rmsnorm | softmax
    d: int
    params: object                  # intmath.NormParams or intmath.SoftmaxParams
    add: np.ndarray | None = None   # a masked softmax: (rows, d) int32 added to the input (intmath.mask_add)


def quantize_norm(k: NormKernel, s_in: float, s_out: float) -> QNorm:
    """The integer parameters of ``k`` for input scale ``s_in`` and output scale ``s_out``."""
    d = k.idx.shape[1]
    try:
        if k.comp.kind == "softmax":
            add = None if k.mask is None else im.mask_add(k.mask, s_in)
            return QNorm("softmax", d, im.SoftmaxParams.make(d, s_in, s_out), add)
        w = k.weight if k.weight is not None else np.ones(d)
        b = k.bias if k.bias is not None else np.zeros(d)
        return QNorm(k.comp.kind, d, im.NormParams.make(k.comp.kind == "layernorm", w, b, k.comp.eps, s_in, s_out))
    except ValueError as e:
        raise ChipCompileError(f"kernel {k.name} ({k.comp}, {d} features): {e}") from None


def norm_int(s: Schedule, k: NormKernel, qn: QNorm, vals: dict, bound=None) -> np.ndarray:
    """The kernel's int8 output (its tensor's base shape) from the integer tensors ``vals``. ``bound``
    (``compiler.lower.keybound.Bound``, a softmax): the rows' first ``bound.limit`` features only, the
    rest ``bound.fill``."""
    x = gather_base(vals[k.src], s.tensors[k.src], k.idx)
    if qn.kind == "softmax" and bound is not None:
        lim = bound.limit
        y = np.empty(x.shape, np.int64)
        y[:, :lim] = im.softmax_rows(x[:, :lim], qn.params, None if qn.add is None else qn.add[:, :lim])
        y[:, lim:] = bound.fill(y[:, lim:].shape)
    elif qn.kind == "softmax":
        y = im.softmax_rows(x, qn.params, qn.add)
    else:
        y = im.norm_rows(x, qn.params)
    return y.astype(np.int8).reshape(s.tensors[k.out].shape)


# ---------------------------------------------------------------------------------------------- lowering

@dataclass
class NormCode:
    """A norm kernel ready to emit: rows of ``d`` int8 features at ``in_addr + r * in_rs`` (bytes),
    written at ``out_addr + r * out_rs``; ``consts`` the DRAM addresses of its constants (``_const_rows``);
    ``TM`` rows per group; its SPM holds the group's input and output; ``mask_tiles`` the number of tiles
    of mask rows at ``consts["add"]`` (a masked softmax: tile ``t`` of the rows reads mask tile
    ``t % mask_tiles``)."""
    name: str
    qn: QNorm
    rows: int
    in_addr: int
    in_rs: int
    out_addr: int
    out_rs: int
    consts: dict
    TM: int
    cfg: ChipConfig
    spm_base: int = 0
    acc_base: int = 0
    mask_tiles: int = 0
    #: a key-bounded softmax (``compiler.lower.keybound``): the scalar register holding n; only the first
    #: ceil(n / cols) chunks of each row are computed (the others are stored as the SPM holds them)
    bound: Reg | None = None

    def emit(self, b: ProgramBuilder) -> int:
        """Emit the kernel into ``b``; returns the ACC rows it used."""
        return _NormEmitter(self.cfg, b, self).run()


class _NormEmitter(VpuEmitter):
    """The instructions of one ``NormCode`` (see the module docstring for the layout)."""

    def __init__(self, cfg: ChipConfig, b: ProgramBuilder, code: NormCode, acc_limit: int | None = None):
        super().__init__(cfg, b, code.TM, 1)
        self.acc_limit = cfg.acc_rows if acc_limit is None else acc_limit
        self.code, self.qn = code, code.qn
        self.d = code.qn.d
        self.nb = cdiv(self.d, self.Q)
        self.nbf, self.lc = divmod(self.d, self.Q)

    def run(self) -> int:
        c, Q, TM = self.code, self.Q, self.TM
        tiles = cdiv(c.rows, Q)
        G = TM // Q
        top = 0
        self.e("fence", "all")
        if c.bound is not None:                     # NB = ceil(n / Q) chunks, NB1 = NB - 1
            self.b.comment(f"kernel {c.name}: ceil(r{c.bound.n} / {Q}) chunks of keys")
            self.e("addi", _NB, c.bound, Q - 1)
            self.e("seti", _NB1, Q.bit_length() - 1)
            self.e("sra", _NB, _NB, _NB1)
            self.e("addi", _NB1, _NB, -1)
        for g0 in range(0, tiles, G):
            self.acc = _Alloc(self.acc_limit, "ACC", self.cfg, base=c.acc_base, owner=f"kernel {c.name}",
                              hint="fewer features")
            self.nq = min(G, tiles - g0)
            r0 = g0 * Q
            nrows = min(TM, c.rows - r0)
            X8 = c.spm_base
            OUT8 = X8 + self.nb * TM
            self._dma("dma.ld", X8, c.in_addr + r0 * c.in_rs, c.in_rs, nrows, load=True)
            if c.mask_tiles:
                self.load_mask(g0)
            self.e("fence", "all")
            if self.qn.kind == "softmax":
                self.softmax(X8, OUT8, first=g0 == 0)
            else:
                self.norm(X8, OUT8, first=g0 == 0)
            self.e("fence", "all")
            self._dma("dma.st", OUT8, c.out_addr + r0 * c.out_rs, c.out_rs, nrows, load=False)
            self.e("fence", "all")
            top = max(top, self.acc.top)
        self._loops = {}
        return top

    # --- data movement ---------------------------------------------------------------------------
    def _dma(self, op: str, buf: int, addr: int, rs: int, nrows: int, load: bool) -> None:
        """Load (or store) ``nrows`` rows of ``d`` int8 features between DRAM (row stride ``rs``) and
        the tile-major SPM buffer ``buf``: full tiles with loop l1, full chunks with loop l2, then
        the short chunk and the short tile."""
        Q, nb = self.Q, self.nb
        full, part = divmod(nrows, Q)

        def one(rows, s_off, d_off, length, rep, strides):
            mem = (spm[buf + s_off], dram[addr + d_off])
            ops = mem if load else mem[::-1]
            kw = dict(rows=rows, len=length, rstride=rs)
            if rep is not None:
                for k, st in strides:
                    self.loop(k, *st)
            self.e(op, *ops, rep=rep, **kw)

        def sw(a, b):                               # strides in operand order
            return (a, b) if load else (b, a)

        for rows, t0, tiles in ((Q, 0, full), (part, full, 1 if part else 0)):
            if not tiles:
                continue
            s_off, d_off = t0 * nb * Q, t0 * Q * rs
            outer = [(1, (tiles, sw(nb * Q, Q * rs)))] if tiles > 1 else []
            if self.nbf:
                inner = [(2, (self.nbf, sw(Q, Q)))] if self.nbf > 1 else []
                loops = outer + inner
                rep = None if not loops else (LoopReg(loops[0][0]), len(loops))
                one(rows, s_off, d_off, Q, rep, loops)
            if self.lc:
                rep = L1 if outer else None
                one(rows, s_off + self.nbf * Q, d_off + self.nbf * Q, self.lc, rep, outer)

    def load_mask(self, g0: int) -> None:
        """The mask rows of the group's tiles ``g0 ..`` into ACC (``self.MK``, tile-major like the input):
        one DMA per run of consecutive mask tiles (``NormCode.mask_tiles``)."""
        c, Q, nb = self.code, self.Q, self.nb
        tile_rows = nb * Q
        self.MK = self.acc(nb * self.TM)
        j = 0
        while j < self.nq:
            mt = (g0 + j) % c.mask_tiles
            run = min(self.nq - j, c.mask_tiles - mt)
            self.e("dma.ld", acc[self.MK + j * tile_rows], dram[c.consts["add"] + mt * tile_rows * Q * EB],
                   rows=run * tile_rows, len=Q, rstride=Q * EB)
            j += run

    # --- the kernels -------------------------------------------------------------------------------
    def norm(self, X8, OUT8, first: bool) -> None:
        """``intmath.norm_rows``, op for op."""
        p: im.NormParams = self.qn.params
        TM, Q, nb = self.TM, self.Q, self.nb
        N = S = nb * Q
        a, cst = self.acc, self.code.consts
        GB, BB = a(N), a(N)
        MASK = a(Q) if self.lc else None
        XC, SS = a(nb * TM), a(nb * TM)
        SUM, V, Y, H = a(TM), a(TM), a(TM), a(TM)
        if first:
            self.const_rows(GB, cst["g"], nb)
            self.const_rows(BB, cst["b"], nb)
            if MASK is not None:
                self.const_rows(MASK, cst["mask"], 1)
            self.e("fence", "load")
        v = self.vpu(Q, Q)
        self.rep("vshl", acc[XC], spm[X8], p.xb, n=N, st=(S, S))
        if p.center:
            self.rep("vrsum", acc[SS], spm[X8], n=N, st=(S, S))
            self.row_sum(SUM, SS, nb)
            v("vmul", acc[SUM], acc[SUM], p.md)
            v("vsra", acc[SUM], acc[SUM], im.MEAN_SH)
            self.per_row("vsub", XC, SUM, nb)
            if MASK is not None:                      # the spare lanes of the short chunk: 0 again
                last = XC + (nb - 1) * Q
                self.rep("vmul", acc[last], acc[last], acc[MASK], n=Q, st=(S, S, 0))
        self.rep("vmul", acc[SS], acc[XC], acc[XC], n=N, st=(S, S, S))
        self.rep("vrsum", acc[SS], acc[SS], n=N, st=(S, S))
        self.row_sum(V, SS, nb)
        v("vadd", acc[V], acc[V], p.eps_q)
        self.rsqrt(Y, H, V, Q, Q)
        if im.RSQRT_QY != im.NORM_R:
            v("vadd", acc[H], acc[H], im.RSQRT_QY - im.NORM_R)
        self.per_row("vmul", XC, Y, nb)
        self.per_row("vsra", XC, H, nb)
        self.rep("vmul", acc[XC], acc[XC], acc[GB], n=N, st=(S, S, 0))
        self.rep("vadd", acc[XC], acc[XC], acc[BB], n=N, st=(S, S, 0))
        self.requant(im.NORM_R + p.gs, -128)
        self.rep("vreq", spm[OUT8], acc[XC], 1, n=N, st=(S, S))

    def softmax(self, X8, OUT8, first: bool) -> None:
        """``intmath.softmax_rows``, op for op."""
        if self.code.bound is not None:
            return self.bounded_softmax(X8, OUT8)
        p: im.SoftmaxParams = self.qn.params
        TM, Q, nb = self.TM, self.Q, self.nb
        N = S = nb * Q
        a, cst = self.acc, self.code.consts
        masked = bool(self.code.mask_tiles)
        MB = a(Q) if self.lc and not masked else None
        XA, Z, G = a(nb * TM), a(nb * TM), a(nb * TM)
        M, L, Y, E = a(TM), a(TM), a(TM), a(TM)
        temps = [a(TM) for _ in range(4)]
        if first and MB is not None:
            self.const_rows(MB, cst["mask"], 1)
            self.e("fence", "load")
        v = self.vpu(Q, Q)
        self.rep("vmov", acc[XA], spm[X8], n=N, st=(S, S))
        if masked:                                    # the mask rows (NEG in the spare lanes too)
            self.rep("vadd", acc[XA], acc[XA], acc[self.MK], n=N, st=(S, S, S))
        if MB is not None:                            # the spare lanes: -2^30, their exp is 0
            last = XA + (nb - 1) * Q
            self.rep("vadd", acc[last], acc[last], acc[MB], n=Q, st=(S, S, 0))
        self.rep("vrmax", acc[Z], acc[XA], n=N, st=(S, S))
        self.row_sum(M, Z, nb, "vmax")
        self.per_row("vsub", XA, M, nb)
        self.iexp(XA, Z, G, N, S, p.ep)
        self.rep("vrsum", acc[Z], acc[G], n=N, st=(S, S))
        self.row_sum(L, Z, nb)
        if p.ls:
            v("vsra", acc[L], acc[L], p.ls)
        self.recip(Y, E, L, Q, Q, p.lo_e, 17, temps)
        self.per_row("vmul", G, Y, nb)
        self.per_row("vsra", G, E, nb)
        self.requant(p.shift, 0)
        self.rep("vreq", spm[OUT8], acc[G], p.mult, n=N, st=(S, S))


    def bounded_softmax(self, X8, OUT8) -> None:
        """``intmath.softmax_rows`` on the first ``NB`` chunks of each row (``NormCode.bound``): every op over
        the chunks repeats ``NB`` times (loop register l2), the row max and sum over chunks 1.. ``NB1`` times."""
        p: im.SoftmaxParams = self.qn.params
        TM, Q, nb = self.TM, self.Q, self.nb
        S = nb * Q
        a = self.acc
        masked = bool(self.code.mask_tiles)
        XA, Z, G = a(nb * TM), a(nb * TM), a(nb * TM)
        M, L, Y, E = a(TM), a(TM), a(TM), a(TM)
        temps = [a(TM) for _ in range(4)]
        chunks = (_NB, (Q, Q, Q))
        row = (_NB, (Q, Q, 0))                       # a per-row operand b
        v = self.vpu(Q, Q)

        def each(op, *operands):
            self.rep(op, *operands, n=Q, st=(S, S, S), inner=chunks)

        def over_chunks(op, DST, SRC):
            self.rep("vmov", acc[DST], acc[SRC], n=Q, st=(Q, S))
            self.rep(op, acc[DST], acc[DST], acc[SRC + Q], n=Q, st=(Q, Q, S), inner=(_NB1, (0, 0, Q)))

        each("vmov", acc[XA], spm[X8])
        if masked:
            each("vadd", acc[XA], acc[XA], acc[self.MK])
        each("vrmax", acc[Z], acc[XA])
        over_chunks("vmax", M, Z)
        self.rep("vsub", acc[XA], acc[XA], acc[M], n=Q, st=(S, S, Q), inner=row)
        self.iexp(XA, Z, G, Q, S, p.ep, inner=chunks)
        each("vrsum", acc[Z], acc[G])
        over_chunks("vadd", L, Z)
        if p.ls:
            v("vsra", acc[L], acc[L], p.ls)
        self.recip(Y, E, L, Q, Q, p.lo_e, 17, temps)
        self.rep("vmul", acc[G], acc[G], acc[Y], n=Q, st=(S, S, Q), inner=row)
        self.rep("vsra", acc[G], acc[G], acc[E], n=Q, st=(S, S, Q), inner=row)
        self.requant(p.shift, 0)
        each("vreq", spm[OUT8], acc[G], p.mult)


#: a key-bounded softmax's registers (the kernel is fenced on both sides: a GEMM kernel's are free)
_NB, _NB1 = GK.NT, GK.TMP


def _const_rows(qn: QNorm, C: int) -> dict:
    """The kernel's constant rows (``C`` lanes each): gamma and beta per chunk, the spare-lane row (int32)."""
    nb = cdiv(qn.d, C)
    out = {}
    if qn.kind != "softmax":
        for key in ("g", "b"):
            v = np.zeros(nb * C, np.int64)
            v[:qn.d] = getattr(qn.params, key)
            out[key] = v.reshape(nb, C)
    if qn.add is not None:
        return {"add": _mask_tiles(qn.add, C)}
    if qn.d % C:
        lanes = np.arange(C) < qn.d % C
        out["mask"] = (lanes.astype(np.int64) if qn.kind != "softmax" else np.where(lanes, 0, im.NEG))[None, :]
    return {k: v.astype(np.int32) for k, v in out.items()}


def _mask_tiles(add: np.ndarray, C: int) -> np.ndarray:
    """A masked softmax's int32 rows ``(rows, d)`` as ``(tiles * nb * C, C)`` int32 in the tile-major layout
    (row ``(t * nb + c) * C + i`` holds lanes ``c*C ..`` of row ``t*C + i``; spare lanes ``NEG``, rows past
    the last ``0``): one period of rows when they repeat with a period that is a multiple of ``C``
    dividing the row count (a mask broadcast over batch elements and heads), else all of them."""
    rows, d = add.shape
    period = rows
    for p in range(1, rows):
        if rows % p == 0 and (p * C) // math.gcd(p, C) < rows and rows % ((p * C) // math.gcd(p, C)) == 0 \
                and np.array_equal(add.reshape(rows // p, p, d), np.broadcast_to(add[:p], (rows // p, p, d))):
            period = (p * C) // math.gcd(p, C)
            break
    tiles, nb = cdiv(period, C), cdiv(d, C)
    out = np.zeros((tiles * C, nb * C), np.int64)
    out[:, d:] = im.NEG
    out[:min(period, rows), :d] = add[:period]
    return out.reshape(tiles, C, nb, C).transpose(0, 2, 1, 3).reshape(tiles * nb * C, C).astype(np.int32)


def _affine_rows(s: Schedule, t: int, idx: np.ndarray, what: str) -> tuple[int, int]:
    """(first row's byte offset, row stride) of a tensor view whose rows are contiguous features at a
    constant stride; ChipCompileError otherwise."""
    off = s.tensors[t].phys_offsets(idx)
    rows = off[:, 0]
    rs = int(rows[1] - rows[0]) if len(rows) > 1 else off.shape[1]
    if np.any(np.diff(off, axis=1) != 1) or np.any(rows != rows[0] + rs * np.arange(len(rows))):
        raise ChipCompileError(f"{what}: its rows must be contiguous features at one stride in DRAM "
                               "(a transposed or sliced view is not supported)")
    return int(rows[0]), rs


def lower_norm(cfg: ChipConfig, s: Schedule, k: NormKernel, qn: QNorm, tensor_addr: dict, put,
               spm_free: int, key_reg: int | None = None) -> tuple[NormCode, int, int]:
    """The kernel's code (constants placed with ``put``) and the SPM and ACC rows it needs: the largest
    group of rows that fits ``spm_free`` SPM rows and the ACC. ``key_reg``: a softmax over keys bounded by
    the count in that scalar register (``compiler.lower.keybound``)."""
    what = f"kernel {k.name} ({k.comp} of {k.idx.shape[0]} rows x {qn.d})"
    Q = cfg.cols
    if key_reg is not None and (qn.kind != "softmax" or qn.d % Q or Q & (Q - 1)):
        raise ChipCompileError(f"{what}: key_bound needs a softmax over whole chunks of {Q} keys (a power of two)")
    i0, irs = _affine_rows(s, k.src, k.idx, what)
    out = s.tensors[k.out]
    o0, ors = _affine_rows(s, k.out, out.identity().reshape(k.idx.shape), what)
    rows = _const_rows(qn, cfg.cols)
    consts = {key: put(v) for key, v in rows.items()}
    nb = cdiv(qn.d, Q)
    code = NormCode(k.name, qn, k.idx.shape[0], tensor_addr[k.src] + i0, irs, tensor_addr[k.out] + o0, ors,
                    consts, Q, cfg, mask_tiles=len(rows["add"]) // (nb * Q) if "add" in rows else 0,
                    bound=None if key_reg is None else Reg(key_reg))

    def acc_need(tm: int) -> int | None:            # a dry run: the ACC rows a group of tm rows uses
        code.TM = tm
        try:
            return _NormEmitter(cfg, ProgramBuilder(cfg), code, acc_limit=1 << 40).run()
        except OperandError:                        # a row beyond the ACC
            return None

    tiles = cdiv(code.rows, Q)
    a1 = acc_need(Q)
    a2 = acc_need(2 * Q) if tiles > 1 and a1 is not None else None
    G = 1 if a2 is None else min(tiles, (cfg.acc_rows - (2 * a1 - a2)) // max(1, a2 - a1))
    G = min(G, spm_free // (2 * nb * Q))
    if a1 is None or a1 > cfg.acc_rows or G < 1:
        raise ChipCompileError(f"{what}: one tile of {Q} rows needs {a1 or 'more than the'} ACC rows (config "
                               f"{cfg.name!r} has {cfg.acc_rows}) and {2 * nb * Q} SPM rows ({spm_free} free)")
    code.TM = G * Q
    return code, 2 * nb * code.TM, max(1, acc_need(code.TM) or 0)


__all__ = ["QNorm", "quantize_norm", "norm_int", "NormCode", "lower_norm"]
