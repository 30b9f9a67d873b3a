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
from isa.config import MAX_DRAM_BYTES, ChipConfig
from isa.ints import cdiv
from isa.errors import EncodeError
from isa.operands import OperandError
from isa.regs import L1, LoopReg, Reg
from isa.regs import GemmKernel as GK
from isa.regs import TRIP_REG

from compiler.lower import intmath as im
from compiler.lower.schedule import ChipCompileError, NormKernel, Schedule, gather_base
from compiler.lower.tiling import tile_levels
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
    #: chunks of a row in ACC at a time (``_NormEmitter.norm_blocks``, ``softmax_blocks``); None: whole rows
    cb: int | None = None
    #: with ``cb``: SPM holds a block of chunks of the input and output too (loaded and stored per block and
    #: pass), not the group's whole rows
    spm_blocks: bool = False

    def emit(self, b: ProgramBuilder) -> int:
        """Emit the kernel into ``b``; returns the ACC rows it used."""
        return _NormEmitter(self.cfg, b, self).run()


class _NormEmitter(VpuEmitter):
    """The instructions of one ``NormCode`` (see the module docstring for the layout).

    The kernel's groups of ``TM`` rows run as a loop nest where they are translations of each other (every
    group but a short last one; a masked softmax's groups also each within one period of its mask tiles): the
    DRAM offsets of the group's input, output and mask rows in ``_RIN``, ``_ROUT``, ``_RMK``, a counter per
    level (``_COUNTERS``); else, and for the groups the nest does not cover, one after another."""

    def __init__(self, cfg: ChipConfig, b: ProgramBuilder, code: NormCode, acc_limit: int | None = None):
        super().__init__(cfg, b, code.TM, 1)
        self.acc_limit = cfg.acc_rows if acc_limit is None else acc_limit
        self.code, self.qn = code, code.qn
        self.d = code.qn.d
        self.nb = cdiv(self.d, self.Q)
        self.nbf, self.lc = divmod(self.d, self.Q)
        self.cb = code.cb
        self.regs: tuple = (None, None, None)       # the group's DRAM offsets (in, out, mask) in a loop
        self.block_regs: dict | None = None         # in a loop over blocks: the register of each address kind
        self.peak = 0

    def run(self) -> int:
        c, Q, TM = self.code, self.Q, self.TM
        tiles = cdiv(c.rows, Q)
        G = TM // Q
        self.acc = _Alloc(self.acc_limit, "ACC", self.cfg, base=c.acc_base, owner=f"kernel {c.name}",
                          hint="fewer features")
        self.e("fence", "all")
        if c.bound is not None:                     # NB = ceil(n / Q) chunks, NB1 = NB - 1
            self.b.comment(f"kernel {c.name}: ceil(r{c.bound.n} / {Q}) chunks of keys")
            self.e("addi", _NB, c.bound, Q - 1)
            self.e("seti", _NB1, Q.bit_length() - 1)
            self.e("sra", _NB, _NB, _NB1)
            self.e("addi", _NB1, _NB, -1)
        self.consts()
        self.mark = self.acc.top                    # each group's rows are handed out again from here
        groups = [(g0, min(G, tiles - g0), min(TM, c.rows - g0 * Q)) for g0 in range(0, tiles, G)]
        levels, rest = self.group_levels(groups), groups
        if levels:
            rest = groups[math.prod(n for n, _ in levels):]
            self.group_nest(groups[0], levels)
        for g in rest:
            self.group(*g)
        self._loops = {}
        return max(self.peak, self.acc.top)

    # --- the groups ------------------------------------------------------------------------------
    def _mask_step(self) -> int:
        """DRAM bytes of one tile of mask rows."""
        return self.nb * self.Q * self.Q * EB

    def group_levels(self, groups: list) -> list:
        """The loop nest over the full groups (``tiling.tile_levels``, at most ``len(_COUNTERS)`` levels)."""
        c, Q, TM = self.code, self.Q, self.TM
        full = [g for g in groups if g[2] == TM]
        if len(full) < 2 or full != groups[:len(full)]:
            return []
        mt = c.mask_tiles
        if mt and any(g0 % mt + nq > mt for g0, nq, _ in full):      # its mask tiles in one run
            return []
        seqs = [[g0 * Q * c.in_rs for g0, _, _ in full], [g0 * Q * c.out_rs for g0, _, _ in full],
                [(g0 % mt) * self._mask_step() if mt else 0 for g0, _, _ in full]]
        return tile_levels(seqs, 1, len(full), len(_COUNTERS))

    def group_nest(self, first: tuple, levels: list) -> None:
        regs = (_RIN, _ROUT, _RMK)
        for r in regs:
            self.e("seti", r, 0)
        counters = _COUNTERS[:len(levels)][::-1]              # innermost first, as ``levels``
        tops = {}
        for (count, _), cr in list(zip(levels, counters))[::-1]:
            self.e("seti", cr, count)
            tops[cr] = self.b.place(self.b.fresh_label("normgroup"))
        self._loops = {}                                    # the loop registers as a later trip finds them
        self.regs = regs
        self.group(*first)
        self.regs = (None, None, None)
        for lv, ((_, steps), cr) in enumerate(zip(levels, counters)):
            back = [0] * len(steps) if lv == 0 else [levels[lv - 1][0] * st for st in levels[lv - 1][1]]
            for r, st, bk in zip(regs, steps, back):
                if st != bk:
                    self.e("addi", r, r, st - bk)
            self.e("addi", cr, cr, -1)
            self.e("blt", Reg(0), cr, tops[cr])
        self._loops = {}

    def _dram(self, imm: int, k: int):
        """DRAM address ``imm``, plus the loop's offset register ``k`` (0 input, 1 output, 2 mask) in a loop."""
        r = self.regs[k]
        return imm if r is None else imm + r

    def group(self, g0: int, nq: int, nrows: int) -> None:
        c, Q, TM = self.code, self.Q, self.TM
        self.nq = nq
        r0 = g0 * Q
        self.acc.top = self.mark
        X8 = c.spm_base
        OUT8 = X8 + (self.cb if c.spm_blocks else self.nb) * TM
        self.at = (r0, nrows)
        if not c.spm_blocks:
            self._dma("dma.ld", X8, self._dram(c.in_addr + r0 * c.in_rs, 0), c.in_rs, nrows, load=True)
        if self.cb is None:
            if c.mask_tiles:
                self.load_mask(g0)
            self.e("fence", "all")
            if self.qn.kind == "softmax":
                self.softmax(X8, OUT8)
            else:
                self.norm(X8, OUT8)
        else:
            self.e("fence", "load")
            if self.qn.kind == "softmax":
                self.softmax_blocks(X8, OUT8, g0)
            else:
                self.norm_blocks(X8, OUT8)
        self.e("fence", "all")
        if not c.spm_blocks:
            self._dma("dma.st", OUT8, self._dram(c.out_addr + r0 * c.out_rs, 1), c.out_rs, nrows, load=False)
            self.e("fence", "all")
        self.peak = max(self.peak, self.acc.top)

    # --- data movement ---------------------------------------------------------------------------
    def _dma(self, op: str, buf: int, addr, rs: int, nrows: int, load: bool, c0: int = 0, k: int | None = None
             ) -> None:
        """Load (or store) ``nrows`` rows of ``d`` int8 features between DRAM (row stride ``rs``) and
        the tile-major SPM buffer ``buf``: full tiles with loop l1, full chunks with loop l2, then
        the short chunk and the short tile. ``c0``, ``k``: chunks ``c0 .. c0 + k - 1`` only, into a block
        buffer (``cb`` chunks a tile)."""
        Q, nb = self.Q, self.nb
        whole = k is None
        k = nb if whole else k
        ts = nb * Q if whole else self.cb * Q           # the buffer's rows per tile
        nfull = max(0, min(c0 + k, self.nbf) - c0)      # full chunks in the range, then maybe the short one
        short = self.lc and c0 + k == nb
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
            s_off, d_off = t0 * ts, t0 * Q * rs + c0 * Q
            outer = [(1, (tiles, sw(ts, Q * rs)))] if tiles > 1 else []
            if nfull:
                inner = [(2, (nfull, sw(Q, Q)))] if nfull > 1 else []
                loops = outer + inner
                rep = None if not loops else (LoopReg(loops[0][0]), len(loops))
                one(rows, s_off, d_off, Q, rep, loops)
            if short:
                rep = L1 if outer else None
                one(rows, s_off + nfull * Q, d_off + nfull * Q, self.lc, rep, outer)

    def _mask_runs(self, g0: int):
        """(first group tile, mask tile, tiles) of each run of consecutive mask tiles of the group's tiles."""
        mt, j = self.code.mask_tiles, 0
        while j < self.nq:
            t = (g0 + j) % mt
            run = min(self.nq - j, mt - t)
            yield j, t, run
            j += run

    def load_mask(self, g0: int) -> None:
        """The mask rows of the group's tiles ``g0 ..`` into ACC (``self.MK``, tile-major like the input):
        one DMA per run of consecutive mask tiles (``NormCode.mask_tiles``)."""
        c, Q, nb = self.code, self.Q, self.nb
        tile_rows = nb * Q
        self.MK = self.acc(nb * self.TM)
        for j, t, run in self._mask_runs(g0):
            self.e("dma.ld", acc[self.MK + j * tile_rows], dram[self._dram(c.consts["add"] + t * self._mask_step(), 2)],
                   rows=run * tile_rows, len=Q, rstride=Q * EB)

    def load_mask_block(self, MK: int, g0: int, c0: int, k: int) -> None:
        """Chunks ``c0 .. c0 + k - 1`` of the group's mask rows into ``MK`` (``k`` chunks of ``Q`` rows per
        tile, a tile ``cb * Q`` rows after the last): a DMA repeated over each run of mask tiles."""
        c, Q, B = self.code, self.Q, self.cb * self.Q
        for j, t, run in self._mask_runs(g0):
            src = self._addr(c.consts["add"] + t * self._mask_step() + c0 * Q * Q * EB, "mask")
            rep = None
            if run > 1:
                self.loop(3, run, (B, self._mask_step()))
                rep = LoopReg(3)
            self.e("dma.ld", acc[MK + j * B], dram[src], rows=k * Q, len=Q, rstride=Q * EB, rep=rep)

    # --- constants -------------------------------------------------------------------------------
    def consts(self) -> None:
        """The rows every group reads, loaded once: whole rows, a norm's gamma and beta per chunk (each row
        ``Q`` times: ``GB``, ``BB``); the spare-lane row of a short last chunk (``MASK``/``MB``)."""
        a, cst, Q, nb = self.acc, self.code.consts, self.Q, self.nb
        self.GB = self.BB = self.MASK = self.MB = None
        if self.qn.kind != "softmax" and self.cb is None:
            self.GB, self.BB = a(nb * Q), a(nb * Q)
            self.const_rows(self.GB, cst["g"], nb)
            self.const_rows(self.BB, cst["b"], nb)
        if self.lc and "mask" in cst:
            self.MASK = self.MB = a(Q)
            self.const_rows(self.MASK, cst["mask"], 1)
        if a.top:
            self.e("fence", "load")

    # --- the kernels, whole rows in ACC ----------------------------------------------------------
    def norm(self, X8, OUT8) -> None:
        """``intmath.norm_rows``, op for op."""
        p: im.NormParams = self.qn.params
        TM, Q, nb = self.TM, self.Q, self.nb
        N = S = nb * Q
        a = self.acc
        XC, SS = a(nb * TM), a(nb * TM)
        SUM, V, Y, H = a(TM), a(TM), a(TM), a(TM)
        v = self.vpu(Q, Q)
        self.rep("vshl", acc[XC], spm[X8], p.xb, n=N, st=(S, S))
        if p.center:
            self.rep("vrsum", acc[SS], spm[X8], n=N, st=(S, S))
            self.row_sum(SUM, SS, nb)
            v("vmul", acc[SUM], acc[SUM], p.md)
            v("vsra", acc[SUM], acc[SUM], im.MEAN_SH)
            self.per_row("vsub", XC, SUM, nb)
            if self.MASK is not None:                 # the spare lanes of the short chunk: 0 again
                last = XC + (nb - 1) * Q
                self.rep("vmul", acc[last], acc[last], acc[self.MASK], n=Q, st=(S, S, 0))
        self.rep("vmul", acc[SS], acc[XC], acc[XC], n=N, st=(S, S, S))
        self.rep("vrsum", acc[SS], acc[SS], n=N, st=(S, S))
        self.row_sum(V, SS, nb)
        v("vadd", acc[V], acc[V], p.eps_q)
        self.rsqrt(Y, H, V, Q, Q)
        if im.RSQRT_QY != im.NORM_R:
            v("vadd", acc[H], acc[H], im.RSQRT_QY - im.NORM_R)
        self.per_row("vmul", XC, Y, nb)
        self.per_row("vsra", XC, H, nb)
        self.rep("vmul", acc[XC], acc[XC], acc[self.GB], n=N, st=(S, S, 0))
        self.rep("vadd", acc[XC], acc[XC], acc[self.BB], n=N, st=(S, S, 0))
        self.requant(im.NORM_R + p.gs, -128)
        self.rep("vreq", spm[OUT8], acc[XC], 1, n=N, st=(S, S))

    def softmax(self, X8, OUT8) -> None:
        """``intmath.softmax_rows``, op for op."""
        if self.code.bound is not None:
            return self.bounded_softmax(X8, OUT8)
        p: im.SoftmaxParams = self.qn.params
        TM, Q, nb = self.TM, self.Q, self.nb
        N = S = nb * Q
        a = self.acc
        masked = bool(self.code.mask_tiles)
        XA, Z, G = a(nb * TM), a(nb * TM), a(nb * TM)
        M, L, Y, E = a(TM), a(TM), a(TM), a(TM)
        temps = [a(TM) for _ in range(4)]
        v = self.vpu(Q, Q)
        self.rep("vmov", acc[XA], spm[X8], n=N, st=(S, S))
        if masked:                                    # the mask rows (NEG in the spare lanes too)
            self.rep("vadd", acc[XA], acc[XA], acc[self.MK], n=N, st=(S, S, S))
        elif self.MB is not None:                     # the spare lanes: -2^30, their exp is 0
            last = XA + (nb - 1) * Q
            self.rep("vadd", acc[last], acc[last], acc[self.MB], n=Q, st=(S, S, 0))
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

    # --- the kernels, a block of chunks at a time (``NormCode.cb``) ------------------------------------
    # A row's features pass through ACC ``cb`` chunks at a time, three times: its sum (softmax: max) and its
    # sum of squares (softmax: sum of exponentials) lane by lane over the chunks, then a reduction of the lanes
    # (``vrsum``/``vrmax``, the same integers in another order); then the output, recomputed from the SPM
    # input block by block.
    def _lanes(self, op: str, DST: int, src, SRC: int, k: int, first: bool, st: int) -> None:
        """``DST`` (a per-row array) ``op``= chunks ``0 .. k-1`` of the block at ``SRC`` in ``src`` (``acc`` or
        ``spm``; ``st`` rows a tile), lane by lane (``first``: ``DST`` = chunk 0 first)."""
        Q = self.Q
        if first:
            self.rep("vmov", acc[DST], src[SRC], n=Q, st=(Q, st))
        if k > int(first):
            self.rep(op, acc[DST], acc[DST], src[SRC + Q * first], n=Q, st=(Q, Q, st),
                     inner=(k - int(first), (0, 0, Q)))

    def _per_row(self, op: str, BLK: int, ROW: int, k: int) -> None:
        """``op BLK, BLK, ROW`` on the block's ``k`` chunks, the per-row array ``ROW`` as operand b."""
        Q, B = self.Q, self.cb * self.Q
        self.rep(op, acc[BLK], acc[BLK], acc[ROW], n=Q, st=(B, B, Q), inner=(k, (Q, Q, 0)))

    def _blocks(self) -> list:
        return [(c0, min(self.cb, self.nb - c0)) for c0 in range(0, self.nb, self.cb)]

    def _addr(self, imm, kind: str):
        """Address ``imm`` (of the block emitted: SPM rows ``s``, DRAM bytes of the group's input ``in``, output
        ``out``, gamma and beta ``g``, mask rows ``mask``) plus the offsets of the loops it runs in: the group
        loop's (``_dram``) and, in a loop over blocks, the block's (``_BLOCK_REGS``)."""
        if self.block_regs is not None:
            r = self.block_regs[kind]
            return imm + r
        k = {"in": 0, "out": 1, "mask": 2}.get(kind)
        return imm if k is None else self._dram(imm, k)

    def _pass(self, body) -> None:
        """``body(c0, k)`` for each block of chunks: the blocks after the first, up to a short or masked last
        one, as a loop (counter ``_BCNT``) whose registers add each block's offsets to the addresses its body
        was emitted with (``_addr``); else one after another."""
        blocks, cb, Q = self._blocks(), self.cb, self.Q
        mid = [b for b in blocks[1:] if b[1] == cb and not (self.lc and sum(b) == self.nb)]
        if len(mid) < 2:
            for blk in blocks:
                body(*blk)
            return
        body(*blocks[0])
        steps = {"s": cb * Q, "g": cb * self.C * EB, "mask": cb * Q * Q * EB}
        regs = {"s": _BS, "g": _BG, "mask": _BMK}
        group = self.regs
        for kind, r in (("in", _BIN), ("out", _BOUT)):   # DRAM bytes step as SPM rows: a chunk is cols bytes
            regs[kind] = _BS if group[0] is None else r
        for kind in ("s", "g"):
            self.e("seti", regs[kind], 0)
        for kind, g in (("in", group[0]), ("out", group[1]), ("mask", group[2])):
            if g is not None:
                self.e("addi", regs[kind], g, 0)
            elif kind == "mask":
                self.e("seti", regs[kind], 0)
        self.e("seti", _BCNT, len(mid))
        top = self.b.place(self.b.fresh_label("normblock"))
        self._loops = {}
        self.block_regs = regs
        body(*mid[0])
        self.block_regs = None
        done = set()
        for kind in ("s", "g", "in", "out", "mask"):
            r = regs[kind]
            if r not in done:
                self.e("addi", r, r, steps["s" if kind in ("in", "out") else kind])
                done.add(r)
        self.e("addi", _BCNT, _BCNT, -1)
        self.e("blt", Reg(0), _BCNT, top)
        self._loops = {}
        for blk in blocks[1 + len(mid):]:
            body(*blk)

    def _input(self, X8: int, c0: int, k: int) -> tuple[int, int]:
        """(SPM row, rows a tile) of the block's input chunks: in the group's rows, or (``spm_blocks``) loaded
        into the block buffer ``X8`` (the caller fences)."""
        c, (r0, nrows) = self.code, self.at
        if not c.spm_blocks:
            return self._addr(X8 + c0 * self.Q, "s"), self.nb * self.Q
        self._dma("dma.ld", X8, self._addr(c.in_addr + r0 * c.in_rs, "in"), c.in_rs, nrows, True, c0, k)
        return X8, self.cb * self.Q

    def _output(self, OUT8: int, G: int, mult, c0: int, k: int) -> None:
        """``vreq`` of the block ``G`` into the output rows (``spm_blocks``: its buffer, then stored)."""
        c, (r0, nrows) = self.code, self.at
        Q, B = self.Q, self.cb * self.Q
        if not c.spm_blocks:
            self.rep("vreq", spm[self._addr(OUT8 + c0 * Q, "s")], acc[G], mult, n=k * Q, st=(self.nb * Q, B))
            return
        self.rep("vreq", spm[OUT8], acc[G], mult, n=k * Q, st=(B, B))
        self.e("fence", "vpu")
        self._dma("dma.st", OUT8, self._addr(c.out_addr + r0 * c.out_rs, "out"), c.out_rs, nrows, False, c0, k)
        self.e("fence", "store")                      # the next block's rows go where these were

    def norm_blocks(self, X8, OUT8) -> None:
        """``intmath.norm_rows`` a block of chunks at a time."""
        p: im.NormParams = self.qn.params
        TM, Q, nb, cb = self.TM, self.Q, self.nb, self.cb
        B = cb * Q
        a, cst, streamed = self.acc, self.code.consts, self.code.spm_blocks
        SUM, A, V, Y, H = (a(TM) for _ in range(5))
        region = a.top
        XC, GB, BB = a(cb * TM), a(B), a(B)
        self.peak = max(self.peak, a.top)
        v = self.vpu(Q, Q)

        def block(c0, k, more=()):                    # the block's input (and ``more`` loads), fenced
            if streamed or more:
                self.e("fence", "vpu")
            for load in more:
                load()
            got = self._input(X8, c0, k)
            if streamed or more:
                self.e("fence", "load")
            return got

        if p.center:                                  # the row sums: the chunks lane by lane, then the lanes
            if not streamed:
                self._lanes("vadd", A, spm, X8, nb, True, nb * Q)
            else:
                def sums(c0, k):
                    xs, st = block(c0, k)
                    self._lanes("vadd", A, spm, xs, k, c0 == 0, st)
                self._pass(sums)
            self.rep("vrsum", acc[SUM], acc[A], n=Q, st=(Q, Q))
            v("vmul", acc[SUM], acc[SUM], p.md)
            v("vsra", acc[SUM], acc[SUM], im.MEAN_SH)

        def centred(c0, k, more=()):
            xs, st = block(c0, k, more)
            self.rep("vshl", acc[XC], spm[xs], p.xb, n=k * Q, st=(B, st))
            if p.center:
                self._per_row("vsub", XC, SUM, k)

        def squares(c0, k):
            centred(c0, k)
            if p.center and self.MASK is not None and c0 + k == nb:     # the short chunk's spare lanes: 0
                last = XC + (k - 1) * Q
                self.rep("vmul", acc[last], acc[last], acc[self.MASK], n=Q, st=(B, B, 0))
            self.rep("vmul", acc[XC], acc[XC], acc[XC], n=k * Q, st=(B, B, B))
            self._lanes("vadd", A, acc, XC, k, c0 == 0, B)
        self._pass(squares)
        self.rep("vrsum", acc[V], acc[A], n=Q, st=(Q, Q))
        v("vadd", acc[V], acc[V], p.eps_q)
        a.top = region                                # rsqrt's temporaries share the blocks' rows
        self.rsqrt(Y, H, V, Q, Q)
        self.peak = max(self.peak, a.top)
        if im.RSQRT_QY != im.NORM_R:
            v("vadd", acc[H], acc[H], im.RSQRT_QY - im.NORM_R)
        self.requant(im.NORM_R + p.gs, -128)
        def output(c0, k):                            # with the block's gamma and beta
            centred(c0, k, (lambda: self.const_rows(GB, self._addr(cst["g"] + c0 * self.C * EB, "g"), k),
                            lambda: self.const_rows(BB, self._addr(cst["b"] + c0 * self.C * EB, "g"), k)))
            self._per_row("vmul", XC, Y, k)
            self._per_row("vsra", XC, H, k)
            self.rep("vmul", acc[XC], acc[XC], acc[GB], n=k * Q, st=(B, B, 0))
            self.rep("vadd", acc[XC], acc[XC], acc[BB], n=k * Q, st=(B, B, 0))
            self._output(OUT8, XC, 1, c0, k)
        self._pass(output)

    def softmax_blocks(self, X8, OUT8, g0: int) -> None:
        """``intmath.softmax_rows`` a block of chunks at a time (the exponentials twice: for the sum and for
        the output)."""
        p: im.SoftmaxParams = self.qn.params
        TM, Q, nb, cb = self.TM, self.Q, self.nb, self.cb
        B = cb * Q
        a, streamed = self.acc, self.code.spm_blocks
        masked = bool(self.code.mask_tiles)
        M, L, Y, E, A = (a(TM) for _ in range(5))
        region = a.top
        XA, Z, G = a(cb * TM), a(cb * TM), a(cb * TM)
        MK = a(cb * TM) if masked else None
        self.peak = max(self.peak, a.top)
        v = self.vpu(Q, Q)

        def inputs(c0, k):                            # XA = x (+ mask; the spare lanes -2^30)
            if masked or streamed:
                self.e("fence", "vpu")
            if masked:
                self.load_mask_block(MK, g0, c0, k)
            xs, st = self._input(X8, c0, k)
            if masked or streamed:
                self.e("fence", "load")
            self.rep("vmov", acc[XA], spm[xs], n=k * Q, st=(B, st))
            if masked:
                self.rep("vadd", acc[XA], acc[XA], acc[MK], n=k * Q, st=(B, B, B))
            elif self.MB is not None and c0 + k == nb:
                last = XA + (k - 1) * Q
                self.rep("vadd", acc[last], acc[last], acc[self.MB], n=Q, st=(B, B, 0))

        def exps(c0, k):
            inputs(c0, k)
            self._per_row("vsub", XA, M, k)
            self.iexp(XA, Z, G, k * Q, B, p.ep)

        def maxima(c0, k):
            inputs(c0, k)
            self._lanes("vmax", A, acc, XA, k, c0 == 0, B)

        def sums(c0, k):
            exps(c0, k)
            self._lanes("vadd", A, acc, G, k, c0 == 0, B)

        def output(c0, k):
            exps(c0, k)
            self._per_row("vmul", G, Y, k)
            self._per_row("vsra", G, E, k)
            self._output(OUT8, G, p.mult, c0, k)

        self._pass(maxima)
        self.rep("vrmax", acc[M], acc[A], n=Q, st=(Q, Q))
        self._pass(sums)
        self.rep("vrsum", acc[L], acc[A], n=Q, st=(Q, Q))
        if p.ls:
            v("vsra", acc[L], acc[L], p.ls)
        a.top = region                                # recip's temporaries share the blocks' rows
        temps = [a(TM) for _ in range(4)]
        self.recip(Y, E, L, Q, Q, p.lo_e, 17, temps)
        self.peak = max(self.peak, a.top)
        self.requant(p.shift, 0)
        self._pass(output)

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
#: the loop over groups: the DRAM byte offsets of the group's input, output and mask rows, the counters of up to
#: three levels (r1..r13, as a GEMM kernel's; r14, r15 left alone)
_RIN, _ROUT, _RMK = GK.AOFF, GK.OOFF, GK.ABUF
_COUNTERS = (GK.MT, GK.WSLOT, GK.WCOL)
#: the loop over blocks of chunks (``_NormEmitter._pass``; not with a key bound): the offsets of the block's SPM
#: rows, gamma and beta, input, output and mask rows in DRAM (these three with the group's), and its counter
_BS, _BG, _BIN, _BOUT, _BMK, _BCNT = GK.ACC, GK.OBUF, GK.OCOL, GK.BIAS, GK.SCALE, GK.NT
_ALL = [_RIN, _ROUT, _RMK, *_COUNTERS, _BS, _BG, _BIN, _BOUT, _BMK, _BCNT]
assert TRIP_REG.n > max(r.n for r in _ALL) and len(set(_ALL)) == len(_ALL) and not {_NB, _NB1} & set(_ALL[:6])


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

    dry = cfg.replace(dram_bytes=MAX_DRAM_BYTES)   # (the DRAM plan, checked later, names its own overflow)

    def acc_need(tm: int, cb: int | None = None) -> int | None:   # a dry run: the ACC rows a group of tm rows uses
        code.TM, code.cb = tm, cb
        try:
            return _NormEmitter(cfg, ProgramBuilder(dry), code, acc_limit=1 << 40).run()
        except (OperandError, EncodeError):         # a row beyond the ACC, or more rows than an instruction's n
            return None

    def fits(n: int | None) -> bool:
        return n is not None and n <= cfg.acc_rows

    tiles = cdiv(code.rows, Q)
    cb, a1 = None, acc_need(Q)
    # whole rows in SPM (input and output: 2 nb rows a row of the tile), else a block of chunks of them
    code.spm_blocks = 2 * nb * Q > spm_free
    most = min(nb - 1, spm_free // (2 * Q)) if code.spm_blocks else nb - 1
    if (not fits(a1) or code.spm_blocks) and key_reg is None and most >= 1:
        lo, hi = 1, most                            # a block of chunks at a time: the most that fit
        if fits(acc_need(Q, 1)):
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if fits(acc_need(Q, mid)) else (lo, mid - 1)
            cb, a1 = lo, acc_need(Q, lo)
    spm_row = 2 * (cb if code.spm_blocks and cb else nb) * Q    # SPM rows a tile of the group takes
    if not fits(a1) or spm_row > spm_free:
        raise ChipCompileError(f"{what}: one tile of {Q} rows needs more than config {cfg.name!r}'s {cfg.acc_rows} "
                               f"ACC rows or {spm_free} free SPM rows (acc_rows, spm_rows), even a chunk of "
                               f"{Q} features at a time")
    a2 = acc_need(2 * Q, cb) if tiles > 1 else None
    G = 1 if a2 is None else min(tiles, (cfg.acc_rows - (2 * a1 - a2)) // max(1, a2 - a1))
    G = max(1, min(G, spm_free // spm_row))
    while G > 1 and not fits(acc_need(G * Q, cb)):  # (the rows grow with G as a line; checked)
        G -= 1
    code.cb = cb
    code.TM = G * Q
    return code, spm_row * G, max(1, acc_need(code.TM, cb) or 0)


__all__ = ["QNorm", "quantize_norm", "norm_int", "NormCode", "lower_norm"]
