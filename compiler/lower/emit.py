"""ISA emission: one fused GEMM kernel (matmul/conv + bias + activation + requantize) as instructions
built with ``isa.builder`` (registers: ``isa.regs.GemmKernel``, ``isa.regs.Elementwise``).

The schedule follows ``sim.programs.gemm`` (weight stationary; for each M tile, for each N tile,
for each K tile: ``mxu.lw`` a weight tile, ``mxu.mm``/``mma`` all rows of the M tile's A tile)
and adds a fused epilogue and strided-DMA im2col loads. Units overlap through tokens:

==================  ============================================================  =========
tokens (P -> C)     meaning                                                       seeds
==================  ============================================================  =========
load -> mxu         a weight tile (or an N tile's group of them, ``weight_mode``)
                    / an A tile (first N tile) / a bias tile (when nothing
                    loaded after it orders it) arrived
mxu -> load         ``mxu.lw`` read its weight slot (the last of a group), or,    NB (<= 63),
                    with an A ring (``Tiling.a_ring``), an ``mm`` its K tile's    groups: 2,
                    A slot and weight slot (one token for both: the tile's        A ring: NB,
                    weight load waits for it, its A load does not; with ``ng``    (x ng),
                    N tiles per A tile a token per weight slot), or, with one     per A tile:
                    A buffer gated per A tile (``a_freed_per_mm``), an M tile's   + KT - 1
                    last N tile's ``mm`` its A tile: the slot or tile may be
                    refilled
E -> mxu|load       an ACC region was drained (E = vpu for int8 output, store     2
                    for int32); its next user (the bias load, else the first
                    ``mm``) may write it
mxu -> vpu|store    the last ``mma`` of an N tile: its ACC region is complete
vpu -> store        ``vreq`` wrote the int8 output tile to SPM staging
store -> vpu        the staging buffer was stored and may be rewritten            2
store -> load       the M tile's last store: its A buffer may be refilled         nbuf
                    (not when gated per A tile)
==================  ============================================================  =========

Every wait is matched in order with one earlier signal of the same kind (units start in order;
loads retire in order). A kernel needs its seed tokens at its start and leaves as many at its end
(``Tokens``): the next kernel takes over what the previous one left (its first waits take those
tokens: its buffers are its own), and empty instructions make up the difference (seeds: signals;
drains: waits), so kernels compose without a fence. Before a kernel waits for its inputs it loads
its scale rows and, when its first M tile is emitted on its own (not in the M-tile loop), that tile's
first N tile's bias and first weight tiles (``_prefetch``, ``prefetch_tiles``: a group, else as many as
the previous kernel's last tile covers) while the previous kernel computes; the body skips those loads
and takes one seed fewer per skipped wait. An N tile loads the next N tile's bias behind its own weight loads
(``bias_ahead``), so the next N tile's first weight tile does not queue behind it; with grouped weights an M
tile's last N tile loads the next M tile's first group and bias (``next_m_ahead``). The program orders a kernel
after the stores it reads with ``fence store`` (``emit_program``, placed by ``compiler.lower.pipeline``).
Inner loops use repeat registers: the
weight tiles of an N tile are one ``dma.ld`` over a nest (or one instance), row groups of a tile
are one DMA over a nest; K tiles run as scalar loops over repeated column patterns
(``compiler.lower.tiling.k_runs``), the middle N tiles and identical M tiles as scalar loops over
register-indexed addresses: code size follows the number of kernels and column patterns, not the
tensor sizes (only an edge M tile, if any, has its own copy). M tiles that are not translations of each other
are unrolled, each with its own copy; such a kernel longer than a page of instruction memory runs as parts of
consecutive M tiles, a page each (``split_m_tiles``, ``compiler.lower.pipeline._paginate``).

Elementwise kernels (``emit_ew``) run on the VPU alone: per tile, loads, then ``vmul`` of each
input by its integer coefficient combined with ``vadd``/``vmax``/``vmin`` in ACC and ``vreq``,
or, for a lookup-table kernel, one ``vlut`` from the input rows to the staging rows (the table
is loaded into SPM and ``vlutld``-ed once, its load the kernel's first load -> vpu token); then
stores. Their tokens: load -> vpu data, vpu -> load buffers free, vpu -> store staged,
store -> vpu staging free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from isa.builder import ProgramBuilder, acc, dram, spm
from isa.regs import L0, L1, L2, Elementwise, LoopReg, Reg
from isa.regs import GemmKernel as GK
from isa.table import SPACE_BYTES, Space
from isa.timing import TOKEN_MAX

from compiler.lower.tiling import Group, KTile, Tiling, groups, k_runs, tile_levels

_GK_REGS = (GK.WSLOT, GK.WCOL, GK.ACC, GK.OBUF, GK.OCOL, GK.BIAS, GK.SCALE, GK.NT, GK.TMP, GK.AOFF, GK.OOFF,
            GK.ABUF, GK.MT)
#: most weight-slot tokens a kernel seeds: loads run at most this many weight tiles ahead of the MXU,
#: and with an A tile per weight tile their load -> mxu tokens stay below ``TOKEN_MAX`` (a long K)
WEIGHT_TOKENS = TOKEN_MAX // 4
#: SPM rows a program with zero borders reserves (never written) as the source of their stores, which
#: read at most this many rows of zeros at once; on a chip with fewer than 16 times as many SPM rows, a
#: sixteenth of them (``zero_rows``)
ZERO_ROWS = 64
#: bytes of an SPM element (int8 results) and of an ACC element (int32 results, biases, scales)
_SPM_BYTES, _ACC_BYTES = SPACE_BYTES[Space.SPM], SPACE_BYTES[Space.ACC]


@dataclass
class KernelCode:
    """Everything the emitter needs for one kernel; addresses are absolute (DRAM bytes, SPM/ACC rows)."""
    name: str
    tiling: Tiling
    ktiles: list[KTile]
    a_rows: np.ndarray        # (M,) DRAM byte address of row m's first column
    out_rows: np.ndarray      # (M,) DRAM byte address of output (m, n=0)
    out_int8: bool
    w_addr: int
    bias_addr: int | None
    scale_addr: int | None
    shift: int
    lo: int
    relu: bool
    spm_a: int
    spm_w: int
    spm_o: int
    acc_base: int
    #: symbolic batch (compiler.lower.dynamic.DynTile): the M-tile loop's trip count comes from a register
    dyn: object = None
    hi: int = 127             # the requantization clamp's maximum (a folded clip, e.g. ReLU6)
    #: the first scale row past the two ACC regions (a column kernel of ``nmk`` has its own row)
    scale_row: int = 0
    #: a key bound (compiler.lower.keybound): the scalar register holding n; N tiles run while fewer than n
    #: columns are done, ceil(n / cols) of them (the first always)
    nbound: Reg | None = None
    #: a key bound over K (``p @ v``): the register holding n; K tiles run while fewer than n rows are done,
    #: max(2, ceil(n / rows)) of them (the first and a last one always)
    kbound: Reg | None = None
    #: the bias is added on the VPU, not loaded into each N tile's ACC region by DMA (``_vpu_bias``): ACC holds
    #: ``NT`` bias rows after the scale rows and a block of ``Mt`` rows after them (``Tiling.acc_rows``
    #: counts both); int8 output, ``mnk`` order, no symbolic batch or key bound only
    vbias: bool = False
    #: with ``vbias``, > 0: each N tile's bias stays in ACC as a block of this many copies of its row, loaded
    #: once by the prologue after the scale rows (``NT`` blocks, ``Tiling.acc_rows`` counts them), and an N tile
    #: adds it in ``ceil(rows / vbias_rows)`` ``vadd``s; 0: the block is rebuilt per N tile (``_vpu_bias``)
    vbias_rows: int = 0
    #: ``(a, b)``: only M tiles ``a .. b - 1``, a part of a kernel too long for one page (``split_m_tiles``)
    mtiles: tuple[int, int] | None = None
    #: a column of an ``nmk`` kernel (``emit_kernel``): the kernel's N tiles, whose scale rows precede the
    #: columns' bias blocks in ACC (column ``scale_row``'s at ``_vbias_row``); 0 otherwise
    columns: int = 0


def _mods(wait=(), signal=(), once=False, rep: LoopReg | None = None) -> dict:
    """The modifiers of a queued instruction: token waits and signals, a depth-1 repeat over
    ``rep`` (tokens once around the nest when ``once``)."""
    return {"wait": list(wait), "signal": list(signal), "rep": rep, "sync": "once" if once and rep else None}


#: a token counter: (producer unit, consumer unit)
Pair = tuple[str, str]


def _empty(e: ProgramBuilder, pair: Pair, n: int, give: bool) -> None:
    """``n`` instructions that do nothing but signal (``give``: on the producer) or wait for
    (on the consumer) one token of ``pair`` each."""
    if n <= 0:
        return
    prod, cons = pair
    unit, mods = (prod, {"signal": cons}) if give else (cons, {"wait": prod})
    e.emit("loop", L2, n)
    if unit == "load":
        e.emit("dma.ld", spm[0], dram[0], rows=0, rep=L2, **mods)
    elif unit == "store":
        e.emit("dma.st", dram[0], spm[0], rows=0, rep=L2, **mods)
    elif unit == "mxu":
        e.emit("mxu.lw", spm[0], k=0, rep=L2, **mods)
    else:                                  # the requantizer's reset values: a kernel sets its own after
        e.emit("vqcfg", rep=L2, **mods)


class Tokens:
    """The tokens the kernels emitted so far leave behind, per pair. A kernel states how many of
    each pair it needs at its start (its seeds) and leaves at its end; ``take`` emits the
    difference from what is held, so the previous kernel's last signals stand in for the next
    kernel's seeds (its buffers are its own: any earlier token frees them). Pairs a kernel does
    not use are held for a later one; ``release`` drains everything (a program's end)."""

    def __init__(self):
        self.held: dict[Pair, int] = {}

    def take(self, e: ProgramBuilder, need: dict, fresh: bool = False) -> None:
        """Hold exactly ``need`` of its pairs: drains first, then seeds; ``fresh``: drain them all
        first, so the seeds come after every earlier use (the buffers are shared with the code before)."""
        for pair in sorted(need):
            have = self.held.get(pair, 0)
            _empty(e, pair, have if fresh else have - need[pair], give=False)
        for pair in sorted(need):
            have = 0 if fresh else self.held.get(pair, 0)
            _empty(e, pair, need[pair] - have, give=True)
        self.held.update(need)

    def leave(self, left: dict) -> None:
        self.held.update(left)

    def release(self, e: ProgramBuilder) -> None:
        self.take(e, {pair: 0 for pair in self.held})


def _requant(e: ProgramBuilder, shift: int, lo: int, hi: int = 127) -> None:
    e.emit("vqcfg", shift=shift, zp=0, lo=lo, hi=hi, round="half_up")


def emit_kernel(e: ProgramBuilder, kc: KernelCode, cfg, tokens: Tokens | None = None, before=None,
                window: int = 0) -> None:
    """The kernel in its tiling's loop order (``Tiling.order``, see ``compiler.lower.tiling``): ``mnk``
    runs M tiles outermost; ``nmk`` runs one column kernel per N tile (N outermost), each loading
    its weight tiles once for all M tiles, and, when every M tile has its own A buffer
    (``nbuf >= MT``), the columns after the first reuse the A tiles the first one loaded.
    ``tokens``: what the code before left (``Tokens``); ``before()`` emits what must precede the
    kernel's first read of its inputs (``emit_program``: a fence, a border fill); ``window``: the rows of
    the previous kernel's last tile when this kernel's prologue runs under its epilogue, else 0
    (``prefetch_tiles``)."""
    tokens = Tokens() if tokens is None else tokens
    tl = kc.tiling
    if (kc.dyn is not None or kc.nbound is not None) and (tl.order != "mnk" or tl.nbuf > 2):   # (n-bound too)
        kc = replace(kc, tiling=replace(tl, order="mnk", nbuf=min(tl.nbuf, 2)))
        tl = kc.tiling
    if tl.order == "mnk":
        return _emit_kernel(e, kc, cfg, False, False, tokens, before, "own", window)
    C, R = cfg.cols, cfg.rows
    eb = _SPM_BYTES if kc.out_int8 else _ACC_BYTES
    resident = tl.nbuf >= tl.MT
    for n in range(tl.NT):
        col = replace(tl, N=min(C, tl.N - n * C), NT=1, acc_rows=2 * tl.Mt + (1 if kc.out_int8 else 0))
        kn = replace(kc, name=f"{kc.name}.n{n}", tiling=col, w_addr=kc.w_addr + n * tl.KT * R * C,
                     bias_addr=None if kc.bias_addr is None else kc.bias_addr + _ACC_BYTES * C * n,
                     scale_addr=None if kc.scale_addr is None else kc.scale_addr + _ACC_BYTES * C * n,
                     out_rows=np.asarray(kc.out_rows) + n * C * eb, scale_row=n, columns=tl.NT)
        # a later column shares the kernel's buffers: fresh seeds after the previous column's uses
        _emit_kernel(e, kn, cfg, True, resident and n > 0, tokens, before if n == 0 else None,
                     "column" if n else "own", window)


def _emit_kernel(e: ProgramBuilder, kc: KernelCode, cfg, w_once: bool, a_skip: bool, tokens: Tokens, before,
                 start: str, window: int = 0) -> None:
    """``w_once``: weight tiles are loaded in the first M tile only (one N tile, ``NB == KT``);
    ``a_skip``: the A tiles are already in their buffers (an earlier column loaded them);
    ``start``: ``"own"`` the kernel's buffers are its own, ``"column"`` an earlier column of the kernel
    used them (its seeds come after every earlier use)."""
    with e.scope(f"kernel {kc.name}", *_GK_REGS):
        _kernel_body(e, kc, cfg, w_once, a_skip, tokens, before, start, window)


def _kernel_body(e: ProgramBuilder, kc: KernelCode, cfg, w_once: bool, a_skip: bool, tokens: Tokens, before,
                 start: str, window: int) -> None:
    tl = kc.tiling
    KT, NT, Mt = tl.KT, tl.NT, tl.Mt
    vbias = vpu_bias(kc)
    bias = kc.bias_addr is not None and not vbias      # the bias DMA into the ACC regions
    # who frees an ACC region, and who waits for it
    free_p = "vpu" if kc.out_int8 else "store"
    free_c = "load" if bias else "mxu"
    ep = "vpu" if (kc.out_int8 or kc.relu) else "store"        # the unit the last mma signals
    # the A-buffer gate (store -> load); with int32 output and a bias, store -> load already means
    # "ACC region free", and the bias load orders the next M tile's A loads behind it (two buffers)
    gate = tl.MT > 1 and not (not kc.out_int8 and bias) and not tl.a_ring   # (an A ring frees slots per mm)
    assert gate or tl.nbuf >= 2 or tl.MT == 1 or tl.a_ring, "a single A buffer needs the gate"
    assert not tl.a_ring or weight_mode(tl) == "ring" or (w_once and tl.NT == 1), \
        "A tiles stream beside a weight ring, or beside a column's resident weights"
    assert not w_once or (tl.NT == 1 and tl.NB == tl.KT), "resident weights: one N tile, no slot ring"
    assert tl.ng == 1 or (tl.a_ring and tl.NT % tl.ng == 0 and not vbias and not a_skip and kc.dyn is None
                          and kc.nbound is None and kc.kbound is None), "N tiles share A tiles in a plain A ring"
    tiles = tl.m_tiles()
    full = [t for t in tiles if t[1] == Mt]
    nest = _m_loop(kc, w_once and not resident_ring(tl))       # (resident_ring: every M tile in the loop)
    looped = bool(nest)
    t0 = 0                                     # a part (``split_m_tiles``): its M tiles only, unrolled
    if kc.mtiles is not None:
        assert not looped and tl.order == "mnk", "a kernel cut into parts unrolls its M tiles"
        t0, t1 = kc.mtiles
        tiles = tiles[t0:t1]
    # each M tile's last N tile loads the next M tile's first weight group and bias (``next_m_ahead``)
    chain = next_m_ahead(kc, w_once)
    # the first M tile's first N tile finds its first weight tiles (and bias) loaded (``_prefetch``) when
    # it is emitted on its own (not in the M-tile loop, where the first trip would need other code), or when
    # every M tile finds them loaded (``chain``)
    pre = start != "column" and (w_once or not looped or chain) and t0 == 0
    fine = gate and a_freed_per_mm(tl)         # the gate per A tile (``a_freed_per_mm``), not per M tile
    g = dict(kc=kc, cfg=cfg, free_p=free_p, free_c=free_c, ep=ep, gate=gate and not fine, fine=fine, bias=bias,
             vbias=vbias, load_a=not a_skip, chain=chain,
             npre=min(prefetch_tiles(tl, window // cfg.rows), 1 if kc.kbound is not None else tl.KT) if pre else 0)
    e.comment(f"kernel {kc.name}: GEMM {tl.M}x{sum(t.klen for t in kc.ktiles)}x{tl.N}, {KT} K tiles, {NT} N tiles, "
              f"{tl.MT} M tile(s) of {Mt} rows, {'int8 requantized' if kc.out_int8 else 'int32'} output"
              f"{', bias' if bias else ''}{', bias on the VPU' if vbias else ''}{', relu' if kc.relu else ''}")
    for r in (GK.WSLOT, GK.ACC, GK.OBUF, GK.AOFF, GK.OOFF, GK.ABUF):
        e.emit("seti", r, 0)
    if t0:      # a later part: the registers the N tiles of M tiles 0 .. t0 - 1 advanced (``_n_tile``'s end)
        ntiles = t0 * NT
        e.emit("seti", GK.ACC, t0 * (NT // tl.ng) % 2 * tl.ng * Mt)        # a region per group of N tiles
        e.emit("seti", GK.OBUF, ntiles % 2 * Mt)
        if tl.NB > KT:
            e.emit("seti", GK.WSLOT, ntiles * KT % tl.NB * cfg.rows)
        e.comment(f"part of kernel {kc.name}: M tiles {t0}..{kc.mtiles[1] - 1} of {tl.MT} (its scale rows are in ACC)")
    else:
        _prefetch(e, kc, cfg, g["npre"], tiles[0][1], vbias)
    # tokens: weight slots, ACC regions, int8 staging buffers, A buffers (seed counts capped: WEIGHT_TOKENS)
    seeds = {("mxu", "load"): weight_seeds(tl) + (KT - 1 if fine else 0), (free_p, free_c): 2}
    if kc.out_int8:
        seeds[("store", "vpu")] = 2
    if g["gate"]:
        seeds[("store", "load")] = min(tl.nbuf, WEIGHT_TOKENS)
    need = dict(seeds)
    if g["npre"]:               # the prefetched loads are the first to wait for their pairs: they wait for none
        need[("mxu", "load")] -= 1 if weight_mode(tl) == "group" else g["npre"]
        need[(free_p, free_c)] -= bias
    tokens.take(e, need, fresh=start == "column")
    if kc.out_int8:
        _requant(e, kc.shift, kc.lo, kc.hi)
    if before is not None:
        before()
    def unrolled(i: int) -> None:
        m0, mrows, buf = tiles[i]
        e.comment(f"M tile: rows {m0}..{m0 + mrows - 1}")
        e.emit("seti", GK.ABUF, buf * KT * Mt)
        # prefetched: the code's first M tile by ``_prefetch`` (or not), a later one by the M tile before
        pre = ((i == 0 and g["npre"] > 0) or i > 0) if chain else (m0 == 0 and not looped)
        _m_tile(e, g, mrows, kc.a_rows[m0:m0 + mrows], kc.out_rows[m0:m0 + mrows], load_w=not w_once or m0 == 0,
                pre=pre, nxt=chain and i < len(tiles) - 1)

    if looped:
        # identical full M tiles, DMA addresses shifted: one body in a scalar loop, or in two (the tiles of a
        # block, ``MT`` counting them; blocks while the output offset has not reached its end)
        (n1, (da, do)), outer = nest[0], (nest[1] if len(nest) > 1 else None)      # (all the full tiles)
        e.comment(f"M tiles 0..{len(full) - 1} of {Mt} rows: a scalar loop"
                  + (f" over r{kc.dyn.reg} batch elements" if kc.dyn is not None else "")
                  + (f" over {outer[0]} blocks of {n1}" if outer is not None else ""))
        if w_once and resident_ring(tl):
            # the column's weight tiles in one DMA instance ahead of its M tiles, all of which run the loop
            # body (one page holds the columns' code): a do-nothing mxu.lw waits for it
            e.emit("dma.ld", spm[kc.spm_w], dram[kc.w_addr], rows=KT * cfg.rows, len=cfg.cols, rstride=cfg.cols,
                   signal="mxu")
            _empty(e, ("load", "mxu"), 1, give=False)
        if outer is not None:
            blocks = e.place(e.fresh_label("mblock"))
        e.emit("seti", GK.MT, 0)

        def step():
            e.emit("addi", GK.AOFF, GK.AOFF, da)
            e.emit("addi", GK.OOFF, GK.OOFF, do)
            if tl.nbuf == 2:
                e.emit("seti", GK.TMP, KT * Mt)
                e.emit("sub", GK.ABUF, GK.TMP, GK.ABUF)
            elif tl.nbuf > 2:                  # every M tile has its own A buffer
                e.emit("addi", GK.ABUF, GK.ABUF, KT * Mt)
        if w_once and not resident_ring(tl):   # M tile 0 loads the weight tiles, the loop reuses them
            _m_tile(e, g, Mt, kc.a_rows[:Mt], kc.out_rows[:Mt], load_w=True, pre=True)
            step()
            e.emit("seti", GK.MT, 1)
        top = e.place(e.fresh_label("mtile"))
        # with ``chain`` the last trip loads nothing ahead when no M tile follows the loop (the trip whose
        # output offset is the last tile's)
        last = None
        if chain and len(full) == len(tiles):
            last = (GK.MT, len(full) - 1) if outer is None else (GK.OOFF, (outer[0] - 1) * outer[1][1] + (n1 - 1) * do)
        _m_tile(e, g, Mt, kc.a_rows[:Mt], kc.out_rows[:Mt], load_w=not w_once, pre=chain, nxt=chain, nxt_until=last)
        step()
        if kc.dyn is not None:             # trip count ceil(n / per_tile), n written by the host
            e.emit("addi", GK.MT, GK.MT, kc.dyn.per_tile)
            e.emit("blt", GK.MT, Reg(kc.dyn.reg), top)
        else:
            e.emit("addi", GK.MT, GK.MT, 1)
            e.emit("seti", GK.TMP, n1)
            e.emit("blt", GK.MT, GK.TMP, top)
        if outer is not None:
            nb, (da2, do2) = outer
            e.emit("addi", GK.AOFF, GK.AOFF, da2 - n1 * da)
            e.emit("addi", GK.OOFF, GK.OOFF, do2 - n1 * do)
            e.emit("seti", GK.TMP, nb * do2)
            e.emit("bne", GK.OOFF, GK.TMP, blocks)
        e.emit("seti", GK.AOFF, 0)
        e.emit("seti", GK.OOFF, 0)
        for i in range(len(full), len(tiles)):
            unrolled(i)
    else:
        for i in range(len(tiles)):
            unrolled(i)
    tokens.leave(seeds)                        # the last uses' signals: the next kernel's seeds


def vpu_bias(kc: KernelCode) -> bool:
    """Does the kernel add its bias on the VPU (``KernelCode.vbias``, where its code allows)? In column order
    only beside resident weights (``resident_ring``), with resident bias blocks (``vbias_rows``)."""
    order_ok = kc.tiling.order == "mnk" or (resident_ring(kc.tiling) and kc.vbias_rows > 0)
    return (kc.vbias and kc.bias_addr is not None and kc.out_int8 and order_ok and kc.dyn is None
            and kc.nbound is None and kc.kbound is None)


def columns_loop(kc: KernelCode) -> bool:
    """Do the M tiles of kernel ``kc``'s columns (``nmk``: ``emit_kernel``) run as one loop body (or is there one)?"""
    return kc.tiling.MT == 1 or bool(_m_loop(kc, not resident_ring(kc.tiling)))


def _m_loop(kc: KernelCode, w_once: bool = False) -> list:
    """The loops the kernel's full M tiles run in, innermost first: ``[(trips, (A step, output step))]`` (the
    DRAM address steps of its input and output rows), one level where the tiles are translations of each
    other (or a symbolic batch: trips None), two where blocks of them are (the M tiles of an image, then
    images: ``tiling.tile_levels``; not with resident weights loaded by M tile 0, ``w_once``); [] when they
    run unrolled."""
    tl = kc.tiling
    if kc.dyn is not None:
        return [(None, (kc.dyn.a_step, kc.dyn.o_step))]
    nfull = sum(1 for t in tl.m_tiles() if t[1] == tl.Mt)
    levels = tile_levels([kc.a_rows, kc.out_rows], tl.Mt, nfull, 1 if w_once else 2)
    # all the full tiles or none (unrolled, a kernel longer than a page can be cut between its M tiles); the
    # outer loop runs until the output offset reaches its end
    if math.prod(n for n, _ in levels) != nfull or (len(levels) == 2 and levels[1][1][1] == 0):
        return []
    return [(n, tuple(st)) for n, st in levels]


def split_m_tiles(kc: KernelCode, n: int) -> list[KernelCode] | None:
    """Kernel ``kc`` as ``n`` consecutive parts of its M tiles, each emitted as a kernel of its own (its seeds
    taken at its start, left at its end): a kernel whose M tiles are unrolled (not translations of each other)
    and whose code exceeds a page (``compiler.lower.pipeline._paginate``) runs as several pages. At an M-tile
    boundary every token pair holds its seeds (an M tile's waits and signals balance), so a part after a
    page break (everything drained) seeds as the kernel does; its buffers, the weight tiles, biases and scale
    rows the kernel loaded and its plan are SPM/ACC rows, which a page break keeps; the registers the N tiles
    advance (ACC region, staging buffer, weight slot) it sets to their values at its first M tile. None when
    the kernel cannot be cut so: its M tiles run as one loop, fewer than ``n`` of them, column order
    (``nmk``), a register-bounded loop (symbolic batch, key bound), or its bias added on the VPU (``vbias``)."""
    tl = kc.tiling
    if (kc.mtiles is not None or n < 2 or tl.MT < n or tl.order != "mnk" or kc.dyn is not None
            or kc.nbound is not None or kc.kbound is not None or _m_loop(kc) or vpu_bias(kc)):
        return None
    cuts = [j * tl.MT // n for j in range(n + 1)]
    return [replace(kc, mtiles=(a, b)) for a, b in zip(cuts[:-1], cuts[1:])]


def _prefetch(e: ProgramBuilder, kc: KernelCode, cfg, npre: int, rows0: int, vbias: bool = False) -> None:
    """Constants into the kernel's own buffers (its weight slots and ACC are reserved from its prologue
    step, ``compiler.lower.pipeline``), waiting for nothing: the per-channel scale rows and, with ``npre``,
    the first M tile's first N tile's bias (``rows0`` rows; its first ``mma`` comes after the A loads, so
    after it) and its first ``npre`` weight tiles (``prefetch_tiles``) as one DMA instance into slots
    ``0 .. npre - 1`` that signals the first ``mxu.lw`` (the body skips these loads)."""
    tl = kc.tiling
    R, C = cfg.rows, cfg.cols
    if kc.out_int8:
        e.emit("dma.ld", acc[kc.acc_base + 2 * tl.ng * tl.Mt + kc.scale_row], dram[kc.scale_addr], rows=tl.NT,
               len=C, rstride=_ACC_BYTES * C)
    if vbias and kc.vbias_rows:     # each N tile's bias block: its row repeated (read after the first mm)
        if tl.NT > 1:
            e.emit("loop", L2, tl.NT, s0=kc.vbias_rows, s1=_ACC_BYTES * C)
        e.emit("dma.ld", acc[_vbias_row(kc)], dram[kc.bias_addr], rows=kc.vbias_rows, len=C,
               rstride=0, rep=L2 if tl.NT > 1 else None)
    elif vbias:       # the N tiles' bias rows (read after the first mm, which waits for a later load)
        e.emit("dma.ld", acc[_vbias_row(kc)], dram[kc.bias_addr], rows=tl.NT, len=C, rstride=_ACC_BYTES * C)
    if not npre:
        return
    if kc.bias_addr is not None and not vbias:
        e.emit("dma.ld", acc[kc.acc_base], dram[kc.bias_addr], rows=rows0, len=C, rstride=0)
    e.emit("dma.ld", spm[kc.spm_w], dram[kc.w_addr], rows=npre * R, len=C, rstride=C, signal="mxu")


def prefetch_tiles(tl: Tiling, cover: int = 0) -> int:
    """Weight tiles a kernel's prologue loads (``_prefetch``): a group's ``KT`` (its one DMA instance),
    else the first tile and as many more as the previous kernel's epilogue covers (``cover``: tiles
    of ``rows`` rows its last tile's rows stand for; more would hold back the first A tile), within
    the slots (a ring's ``NB``); with an A ring only the first (its A load, which never waits, takes
    the slot pair the prefetch did not wait for), none when it serves several N tiles (``Tiling.ng``)."""
    mode = weight_mode(tl)
    if mode == "group":
        return tl.KT
    if tl.a_ring:          # (beside resident weights none: the column loads them in one instance, ``_kernel_body``)
        return 1 if tl.ng == 1 and not resident_ring(tl) else 0
    # never more than the seed tokens the kernel holds (each prefetched tile stands for one)
    return max(1, min(cover, tl.KT if mode == "tile" else tl.NB, weight_seeds(tl)))


def weight_seeds(tl: Tiling) -> int:
    """Free weight slots the kernel starts with (mxu -> load tokens): one per group of ``KT`` slots
    (``weight_mode`` group), else one per slot, at most ``WEIGHT_TOKENS`` (fewer tokens than slots
    only keeps the loads less far ahead, never unsafe)."""
    if tl.a_ring:                       # a token per weight slot, freed by its mm (A slots: ``_k_chain``)
        # (resident weights, ``resident_ring``: a token per A slot)
        return min(tl.a_slots if resident_ring(tl) else tl.w_slots, WEIGHT_TOKENS)
    return 2 if weight_mode(tl) == "group" else min(tl.NB, WEIGHT_TOKENS)


def resident_ring(tl: Tiling) -> bool:
    """An A ring beside a column's resident weight tiles (``nmk``, ``NB == KT``: ``tiling._choose_col_ring``),
    not beside a weight ring."""
    return tl.a_ring and weight_mode(tl) != "ring"


def _m_tile(e: ProgramBuilder, g: dict, mrows: int, a_rows: np.ndarray, out_rows: np.ndarray,
            load_w: bool = True, pre: bool = False, nxt: bool = False,
            nxt_until: tuple[Reg, int] | None = None) -> None:
    """``pre``: the M tile's first N tile's bias and first weight tiles were loaded before it: the kernel's
    first M tile's by ``_prefetch`` (``g["npre"]`` of them, none if 0), a later one's by the M tile before
    (``next_m_ahead``, the whole group); ``nxt``: its last N tile loads the next M tile's; ``nxt_until``: in the
    M-tile loop, ``(register, value)`` of the trip where it does not (the last, when no M tile follows the loop:
    its index in ``MT``, or its output offset in ``OOFF`` in a loop over blocks)."""
    kc, cfg = g["kc"], g["cfg"]
    tl = kc.tiling
    NT, C = tl.NT, cfg.cols
    if g["gate"]:
        e.emit("dma.ld", spm[0], dram[0], rows=0, wait="store")
    for r in (GK.WCOL, GK.BIAS, GK.SCALE):
        e.emit("seti", r, 0)
    e.emit("add", GK.OCOL, GK.OOFF, Reg(0))
    a_groups, o_groups = groups(a_rows), groups(out_rows)
    last_nc = tl.N - (NT - 1) * C
    NT //= tl.ng                               # the N-tile code below runs once per group (``Tiling.ng``)
    # prefetched by ``_prefetch`` (``npre`` tiles) or, in a later M tile, the whole group by the M tile before
    npre = 0 if not pre else (g["npre"] or tl.KT) if g["chain"] else g["npre"]
    _n_tile(e, g, mrows, kc.spm_a, a_groups, o_groups, first=True, last=NT == 1,
            ncols=last_nc if NT == 1 else C, load_w=load_w, npre=npre)
    if kc.nbound is not None and NT > 1:
        # the other N tiles while fewer than n columns are done (their code is the same: bounded_ok)
        assert bounded_ok(tl, g["gate"], C), "a key-bounded GEMM: whole N tiles of one kind"
        done = e.fresh_label("nbound")
        e.emit("seti", GK.NT, C)
        e.emit("bge", GK.NT, kc.nbound, done)
        top = e.place(e.fresh_label("ntile"))
        _n_tile(e, g, mrows, kc.spm_a, a_groups, o_groups, first=False, last=False, ncols=C)
        e.emit("addi", GK.NT, GK.NT, C)
        e.emit("blt", GK.NT, kc.nbound, top)
        e.place(done)
        return
    if NT > 2:
        e.emit("seti", GK.NT, 1)
        top = e.place(e.fresh_label("ntile"))
        _n_tile(e, g, mrows, kc.spm_a, a_groups, o_groups, first=False, last=False, ncols=C)
        e.emit("addi", GK.NT, GK.NT, 1)
        e.emit("seti", GK.TMP, NT - 1)
        e.emit("blt", GK.NT, GK.TMP, top)
    if NT >= 2:
        _n_tile(e, g, mrows, kc.spm_a, a_groups, o_groups, first=False, last=True, ncols=last_nc, nxt=nxt,
                nxt_until=nxt_until)


def bounded_ok(tl: Tiling, gate: bool, cols: int) -> bool:
    """Can the N tiles after the first run a register-bounded number of times? Only when the last N tile's
    code is a middle one's: whole N tiles, no A-buffer gate, no weights loaded one N tile ahead or
    streamed beside the A tiles."""
    return tl.N % cols == 0 and not gate and weight_mode(tl) != "group" and not tl.a_ring


def bounded_k_ok(ktiles: list[KTile], tl: Tiling, rows: int) -> bool:
    """Can a GEMM's K tiles run a register-bounded number of times? Whole tiles of ``rows`` rows, each the
    first shifted by a constant column step, each with its own weight slot (``tile`` mode), one N tile and
    one M tile, no A ring."""
    if len(ktiles) < 2 or tl.NT != 1 or tl.MT != 1 or tl.a_ring or weight_mode(tl) != "tile":
        return False
    step = ktiles[1].col - ktiles[0].col
    return all(t.klen == rows and t.estride == ktiles[0].estride and t.col == ktiles[0].col + i * step
               for i, t in enumerate(ktiles))


def _n_tile(e: ProgramBuilder, g: dict, mrows: int, a_buf: int, a_groups: list[Group], o_groups: list[Group], *,
            first: bool, last: bool, ncols: int, load_w: bool = True, npre: int = 0, nxt: bool = False,
            nxt_until: tuple[Reg, int] | None = None) -> None:
    """``npre``: the bias and the first ``npre`` weight tiles were prefetched (``_prefetch``, ``next_m_ahead``);
    ``nxt``: the last N tile loads the next M tile's first weight group and bias (``next_m_ahead``), not in the
    M-tile loop's trips from ``nxt_until`` on (a branch around the loads)."""
    kc, cfg = g["kc"], g["cfg"]
    tl = kc.tiling
    R, C = cfg.rows, cfg.cols
    KT, Mt, ng = tl.KT, tl.Mt, tl.ng
    # the ACC region of each N tile of the group (``Tiling.ng``; one N tile without)
    accs = [acc[kc.acc_base + j * Mt + GK.ACC] for j in range(ng)]
    acc_t = accs[0]
    # with no weight or A load after the bias load in this N tile (grouped weights load one N tile
    # ahead), the first mma waits for the bias load itself
    mode = weight_mode(tl)
    bias_tok = g["bias"] and ((first and not load_w and not g["load_a"]) or (mode == "group" and not first))
    assert not (npre and (bias_tok or not (first and load_w and g["load_a"]))), "prefetch: a first N tile that loads"
    # the bias of the next N tile is loaded by this one, behind its weight loads (``bias_ahead``)
    ahead = bias_ahead(g, tl)
    if g["bias"] and not npre and (first or not ahead):
        for j in range(ng):            # the group's regions are drained together (the last one's drain frees them)
            e.emit("dma.ld", accs[j], dram[kc.bias_addr + j * _ACC_BYTES * C + GK.BIAS], rows=mrows, len=C,
                   rstride=0, wait=g["free_p"] if j == 0 else None, signal="mxu" if bias_tok else None)
    if mode != "group" and not first and not tl.a_ring:
        _weight_stream(e, kc, cfg)
        if ahead and not last:
            _next_bias(e, g, mrows, False)
    elif mode == "group":               # this N tile's group (the first), or the next one's, ahead
        assert load_w, "grouped weights are loaded in every M tile"
        if first and not npre:
            _weight_stream(e, kc, cfg)
        elif not first and not last:
            _weight_stream(e, kc, cfg, ahead=True)
            if ahead:
                _next_bias(e, g, mrows, True)
        elif nxt:                       # the next M tile's first group (the same weights) and bias
            assert last and not first, "the next M tile's loads: a last N tile after the first"
            skip = None
            if nxt_until is not None:
                skip = e.fresh_label("nextm")
                e.emit("seti", GK.TMP, nxt_until[1])
                e.emit("beq", nxt_until[0], GK.TMP, skip)
            _weight_stream(e, kc, cfg, ahead=True, first_cols=True)
            if g["bias"]:
                _next_bias(e, g, tl.Mt, False, first_cols=True)
            if skip is not None:
                e.place(skip)
    loads = first or tl.a_ring                 # an A ring loads A and weights in every N tile
    if ng > 1:                                 # a K tile's weight tiles of the group: slots R rows apart
        e.emit("loop", L0, ng, s0=R, s1=KT * R * C)
    _k_chain(e, g, mrows, a_buf, a_groups, accs, load_a=loads and g["load_a"],
             w_dma=loads and load_w and mode != "group", w_tok=load_w, bias_tok=bias_tok,
             unroll=K_UNROLL if not (first or last) else 1, npre=npre if mode != "group" else 0,
             a_free=g["fine"] and last)
    if mode == "group" and first and not last:   # after the A loads: load -> mxu tokens stay in MXU order
        # (per A tile gate: the last A load waited for the previous M tile's last mm, after its last lw)
        _weight_stream(e, kc, cfg, ahead=True, wait=not g["fine"])
    if ahead and first and not last:
        _next_bias(e, g, mrows, mode == "group")
    # epilogue, per N tile of the group; the last one's drain frees the group's regions
    ocol = C * (_SPM_BYTES if kc.out_int8 else _ACC_BYTES)
    for j in range(ng):
        end = j == ng - 1
        gate_sig = ["load"] if (g["gate"] and last and end) else []
        free = [g["free_c"]] if end else []
        cols = ncols if end else C
        if kc.out_int8:
            if g["vbias"]:
                _vpu_bias(e, kc, acc_t, mrows)
            e.emit("vreq", spm[kc.spm_o + GK.OBUF], accs[j],
                   acc[kc.acc_base + 2 * ng * Mt + kc.scale_row + GK.SCALE], n=mrows,
                   **_mods(["store"] if g["vbias"] else ["mxu", "store"], ["store"] + free))
            _stores(e, o_groups, spm, kc.spm_o, GK.OBUF, cols, _SPM_BYTES, ["vpu"], ["vpu"] + gate_sig)
        else:
            if kc.relu:
                e.emit("vrelu", accs[j], accs[j], n=mrows, wait="mxu", signal="store")
            _stores(e, o_groups, acc, kc.acc_base + j * Mt, GK.ACC, cols, _ACC_BYTES, ["vpu" if kc.relu else "mxu"],
                    free + gate_sig)
        if not end:                            # the group's next N tile: its output columns, scales, staging
            e.emit("addi", GK.OCOL, GK.OCOL, ocol)
            e.emit("addi", GK.SCALE, GK.SCALE, 1)
            e.emit("seti", GK.TMP, Mt)
            e.emit("sub", GK.OBUF, GK.TMP, GK.OBUF)
    # next N tile (group)
    e.emit("addi", GK.WCOL, GK.WCOL, ng * KT * R * C)
    e.emit("addi", GK.OCOL, GK.OCOL, ocol)
    # (the next bias column in DRAM, or with resident blocks the next block: ``_vpu_bias``)
    e.emit("addi", GK.BIAS, GK.BIAS, kc.vbias_rows if g["vbias"] and kc.vbias_rows else ng * _ACC_BYTES * C)
    e.emit("addi", GK.SCALE, GK.SCALE, 1)
    e.emit("seti", GK.TMP, ng * Mt)
    e.emit("sub", GK.ACC, GK.TMP, GK.ACC)
    if ng > 1:
        e.emit("seti", GK.TMP, Mt)
    e.emit("sub", GK.OBUF, GK.TMP, GK.OBUF)
    if tl.NB > KT:
        e.emit("addi", GK.WSLOT, GK.WSLOT, KT * R)
        e.emit("seti", GK.TMP, tl.NB * R)
        skip = e.fresh_label("w")
        e.emit("blt", GK.WSLOT, GK.TMP, skip)
        e.emit("seti", GK.WSLOT, 0)
        e.place(skip)


def bias_ahead(g: dict, tl: Tiling) -> bool:
    """Does an N tile load the next N tile's bias (``_next_bias``), not the N tile itself? With a bias DMA, no
    A ring and a fixed number of N tiles (no key bound). In program order an N tile's code follows the previous
    one's last ``mma``, which the front end dispatches a few instructions before the MXU runs it (queue depth):
    the bias DMA (an ACC row per output row) at the N tile's start would hold back the N tile's first weight
    tile behind it in the in-order load queue (``weight_mode`` tile, ring) or its first ``mma``, which waits
    for it (group), the array idle meanwhile. Loaded behind the previous N tile's weight loads, it runs while
    that N tile computes; it still waits for its ACC region (the drain of the N tile before). The first ``mma``
    finds it: behind it in the load queue is the N tile's first weight tile, which its first ``mxu.lw`` waits
    for (loads retire in order), or, in group mode (that group was loaded before it), the ``mma`` waits for
    the bias load's own token."""
    return g["bias"] and not tl.a_ring and g["kc"].nbound is None


def _next_bias(e: ProgramBuilder, g: dict, mrows: int, signal: bool, first_cols: bool = False) -> None:
    """The next N tile's bias into the other ACC region (``Mt - ACC``) from the next bias column (``BIAS``
    + one N tile), waiting for that region to be drained (``bias_ahead``); ``signal``: the next N tile's
    first ``mma`` waits for it (group mode); ``first_cols``: the first bias column (the next M tile's first
    N tile, ``next_m_ahead``)."""
    kc, C = g["kc"], g["cfg"].cols
    e.emit("seti", GK.TMP, kc.tiling.Mt)
    e.emit("sub", GK.TMP, GK.TMP, GK.ACC)
    src = dram[kc.bias_addr] if first_cols else dram[kc.bias_addr + _ACC_BYTES * C + GK.BIAS]
    e.emit("dma.ld", acc[kc.acc_base + GK.TMP], src, rows=mrows, len=C,
           rstride=0, wait=g["free_p"], signal="mxu" if signal else None)


def _vbias_row(kc: KernelCode) -> int:
    """The first ACC row of a ``vbias`` kernel's bias past its two regions and scale rows: its ``NT`` bias rows
    (then the rebuilt block), or its ``NT`` resident blocks (``KernelCode.vbias_rows``); a column's
    (``KernelCode.columns``): its own block, after the kernel's scale rows and the blocks of the columns before."""
    if kc.columns:
        return kc.acc_base + 2 * kc.tiling.Mt + kc.columns + kc.scale_row * kc.vbias_rows
    return kc.acc_base + 2 * kc.tiling.Mt + kc.tiling.NT


def _vpu_bias(e: ProgramBuilder, kc: KernelCode, acc_t, mrows: int) -> None:
    """The N tile's bias added to its ACC region (``acc_t``, ``mrows`` rows) on the VPU, once its last ``mma``
    is done: its bias row (ACC row ``2 Mt + NT + SCALE``, loaded by ``_prefetch``) copied to the block's
    first row and doubled to ``mrows`` rows (each copy reads rows the previous ones wrote), then added.
    The VPU runs one instruction at a time, in order, so the block is free when the next N tile rebuilds it.
    With resident blocks (``KernelCode.vbias_rows``) the N tile's block (``BIAS`` rows past the first) is
    added in pieces of that many rows: one ``vadd`` repeated over the whole pieces and one for the rest, so
    that the VPU's queue does not fill and hold the front end (and the next N tile's loads) behind it."""
    tl = kc.tiling
    bb = kc.vbias_rows
    if bb:
        blk = acc[_vbias_row(kc) + GK.BIAS]
        whole, rest = divmod(mrows, bb)
        if whole > 1:
            e.emit("loop", L2, whole, s0=bb, s1=bb)
        if whole:
            e.emit("vadd", acc_t, acc_t, blk, n=bb, **_mods(["mxu"], once=True, rep=L2 if whole > 1 else None))
        if rest:
            part = acc[kc.acc_base + whole * bb + GK.ACC]
            e.emit("vadd", part, part, blk, n=rest, wait=None if whole else "mxu")
        return
    blk = _vbias_row(kc) + tl.NT
    e.emit("vadd", acc[blk], acc[_vbias_row(kc) + GK.SCALE], 0, n=1, wait="mxu")
    n = 1
    while n < mrows:
        k = min(n, mrows - n)
        e.emit("vadd", acc[blk + n], acc[blk], 0, n=k)
        n += k
    e.emit("vadd", acc_t, acc_t, acc[blk], n=mrows)


def next_m_ahead(kc: KernelCode, w_once: bool) -> bool:
    """Does each M tile's last N tile load the next M tile's first weight group (the same weights, into the
    other group of slots) and first bias (into the other ACC region), and the first M tile find them loaded
    (``_prefetch``, also before an M-tile loop)? Loaded at the M tile's start, they wait behind its A loads in
    the in-order load queue, which the front end reaches only a few instructions before the array needs them
    (``isa.timing.QUEUE_DEPTH``): the array idles while a group loads. In the M-tile loop the last trip
    branches around these loads when no M tile follows the loop. Grouped weights over several M and N tiles
    (``_grouped_m_tiles``), no symbolic batch or key bound."""
    return (_grouped_m_tiles(kc.tiling) and not w_once and kc.dyn is None and kc.nbound is None
            and kc.kbound is None)


def _grouped_m_tiles(tl: Tiling) -> bool:
    """Grouped weights (``weight_mode``), several M and N tiles, ``mnk`` order, no A ring: where an M tile's
    boundary can be crossed ahead (``next_m_ahead``, ``a_freed_per_mm``)."""
    return (tl.MT > 1 and tl.NT >= 2 and tl.order == "mnk" and not tl.a_ring
            and weight_mode(tl) == "group")


def a_freed_per_mm(tl: Tiling) -> bool:
    """Is a single A buffer gated per A tile rather than per M tile? Without it, the next M tile's A loads
    wait for the M tile's last store (``store -> load``): the array idles while the last N tile drains, its
    output is stored and the first A tile loads. Gated per A tile, the last N tile's ``mm`` of K tile ``kt``
    signals ``mxu -> load`` (instead of its last ``mxu.lw`` freeing the weight group) and the next M tile's
    load of A tile ``kt`` waits for it: the next M tile's A tiles stream in behind the last N tile's
    matmuls. The first N tile's load of the second group then needs no token of its own (its group was
    freed by the last ``mxu.lw``, before the last ``mm``, which the last A load waited for), so the
    weight seeds grow by ``KT - 1``: each M tile takes and gives ``KT + NT - 1`` tokens. One A buffer,
    ``_grouped_m_tiles``, and the seeds within the counter."""
    return tl.nbuf == 1 and _grouped_m_tiles(tl) and weight_seeds(tl) + tl.KT - 1 <= TOKEN_MAX // 2


def weight_mode(tl: Tiling) -> str:
    """How an N tile's weight tiles reach their slots (``compiler.lower.tiling.choose`` picks ``NB``):

    ``group``  ``NB == 2 * KT``: all ``KT`` tiles of an N tile in one DMA instance into one of two groups
               of slots, the next N tile's loaded while this one computes (one token each way: the
               first ``mxu.lw`` waits for it, the last frees the group)
    ``tile``   another multiple of ``KT``: slot ``kt`` (+ ``WSLOT``, a ring of whole N tiles), one DMA
               instance and one token each way per tile
    ``ring``   ``NB < KT``, ``KT`` a multiple of ``NB``: slot ``kt % NB``, a token each way per tile"""
    if tl.NB == 2 * tl.KT:
        return "group"
    if tl.NB % tl.KT == 0:
        return "tile"
    assert tl.KT % tl.NB == 0, "a weight ring: KT a multiple of NB"
    return "ring"


def _weight_stream(e: ProgramBuilder, kc: KernelCode, cfg, ahead: bool = False, wait: bool = True,
                   first_cols: bool = False) -> None:
    """An N tile's weight tiles as one instruction before its K tiles (``weight_mode``): one
    instance for the group, else one per tile, each waiting for its slot. ``ahead``: the next N
    tile's group, into the other group of slots (``KT * R - WSLOT``); ``wait``: it waits for that group's
    last ``mxu.lw`` (not when a load before it in the queue already did, ``a_freed_per_mm``); ``first_cols``:
    the first N tile's weights (the next M tile's, ``next_m_ahead``), not the next N tile's."""
    tl = kc.tiling
    R, C = cfg.rows, cfg.cols
    mode = weight_mode(tl)
    rows, rep = R, None
    if ahead:
        e.emit("seti", GK.TMP, tl.KT * R)
        e.emit("sub", GK.TMP, GK.TMP, GK.WSLOT)
        src = dram[kc.w_addr] if first_cols else dram[kc.w_addr + tl.KT * R * C + GK.WCOL]
        e.emit("dma.ld", spm[kc.spm_w + GK.TMP], src, rows=tl.KT * R,
               len=C, rstride=C, wait="mxu" if wait else None, signal="mxu")
        return
    if mode == "group":
        rows = tl.KT * R
    elif mode == "tile":
        e.emit("loop", L0, tl.KT, s0=R, s1=R * C)
        rep = L0
    else:
        e.emit("loop", L0, tl.KT // tl.NB, s0=0, s1=tl.NB * R * C)
        e.emit("loop", L1, tl.NB, s0=R, s1=R * C)
        rep = (L0, 2)
    e.emit("dma.ld", spm[kc.spm_w + GK.WSLOT], dram[kc.w_addr + GK.WCOL], rows=rows, len=C, rstride=C,
           rep=rep, wait="mxu", signal="mxu")


#: K tiles a loop body over a run holds at most (unrolled trips) in the middle N tiles, the code that
#: runs most: fewer branches for the chip and scalar events for the simulator, for a little code
K_UNROLL = 8


def _k_chain(e: ProgramBuilder, g: dict, mrows: int, a_buf: int, a_groups: list[Group], accs: list, *,
             load_a: bool, w_dma: bool, w_tok: bool, bias_tok: bool, unroll: int = 1, npre: int = 0,
             a_free: bool = False) -> None:
    """The K tiles of one N tile: per tile its weight load (``w_dma``; ``w_tok``: the weights were
    loaded in this M tile, here or by ``_weight_stream``, so ``mxu.lw`` waits for them and frees their
    slot), its A load (``load_a``), ``mxu.lw`` and ``mm``/``mma``. The first and last tiles stand
    alone (their tokens differ); the others run as loops over repeated column patterns
    (``compiler.lower.tiling.k_runs``), a body of up to ``unroll`` tiles, the index registers (A
    buffer, weight slot, weight column, A column) advanced per trip and restored after: code size
    follows the number of runs, not K. ``npre``: tiles ``0 .. npre - 1`` were prefetched in one DMA
    instance (no load; the first ``mxu.lw`` waits for it, the next ones for nothing). With the A buffer
    gated per A tile (``a_freed_per_mm``), an A tile's load waits for the previous M tile's ``mm`` of it,
    and, in the last N tile (``a_free``), each ``mm`` signals its A tile free instead of the last ``mxu.lw``
    its weight group. ``accs``: the ACC region of each N tile of the group (``Tiling.ng``): an A ring's K
    tile then loads a weight tile per N tile (one instruction over ``L0``, set by ``_n_tile``) and its A
    tile, and runs ``mxu.lw`` and ``mm`` per N tile, all from the one A slot."""
    kc, cfg = g["kc"], g["cfg"]
    tl = kc.tiling
    R, C = cfg.rows, cfg.cols
    KT, Mt, ng = tl.KT, tl.Mt, tl.ng
    mode = weight_mode(tl)
    # A slot kt % NB beside weight slot kt % NB, both freed by the tile's mm: one mxu -> load token, which
    # the weight load waits for (a prefetched one was seeded) and the A load does not. Only the mm signals
    # it: an lw retires before earlier mm's, so its token could free an A slot an mm still reads.
    # With a group of ng N tiles: ng weight slots per A slot, each freed by its N tile's mm, whose token
    # that slot's next load waits for; the A load comes after them in the (in-order) load queue, so after
    # the last one's wait: the A slot's last mm is done. Only the A load signals the MXU (the loads retire
    # in order: every tile of the K tile has arrived), and the first lw waits for it.
    aring = tl.a_ring
    assert ng == 1 or (aring and load_a and not npre), "a group of N tiles: an A ring loading its A tiles"
    # beside resident weights (``resident_ring``) an A slot is freed by its mm alone: the A load waits for
    # that token, the weight loads (the column's first M tile) for none (their slots are the column's own)
    resident = resident_ring(tl)
    l1 = [None]                                # the nest l1 holds (A row groups), None: unknown

    def tile(kt: int, last: bool | None = None) -> None:
        """K tile ``kt`` (``last``: whether it is the chain's last, when not ``kt == KT - 1``)."""
        last = kt == KT - 1 if last is None else last
        kti = kc.ktiles[kt]
        wslot = kc.spm_w + (kt % tl.NB if mode == "ring" else kt) * ng * R
        wrow = spm[wslot + GK.WSLOT]
        arow = a_buf + (kt % tl.a_slots if aring else kt) * Mt
        if w_dma and kt >= npre:
            e.emit("dma.ld", wrow, dram[kc.w_addr + kt * R * C + GK.WCOL], rows=R, len=C, rstride=C,
                   wait=None if resident else "mxu", signal="mxu" if ng == 1 else None, rep=L0 if ng > 1 else None)
        if load_a:
            for gi, gr in enumerate(a_groups):
                sig = ("mxu",) if gi == len(a_groups) - 1 else ()
                wait = ("mxu",) if (g["fine"] or resident) and gi == 0 else ()
                rep = None
                if gr.count > 1:
                    if l1[0] != (gr.count, gr.lstride, gr.dstride):
                        l1[0] = (gr.count, gr.lstride, gr.dstride)
                        e.emit("loop", L1, gr.count, s0=gr.lstride, s1=gr.dstride)
                    rep = L1
                e.emit("dma.ld", spm[arow + gr.local + GK.ABUF], dram[gr.dram + kti.col + GK.AOFF],
                       rows=gr.rows, len=kti.klen, rstride=gr.rstride, estride=kti.estride,
                       **_mods(wait, sig, True, rep))
        # weight tokens: per tile, or for the group at its first and last tile (none when resident)
        wwait = ["load"] if w_tok and (mode != "group" or kt == 0) and not 0 < kt < npre else []
        wsig = ["load"] if w_tok and (mode != "group" or last) and not a_free and not aring else []
        for j in range(ng):
            e.emit("mxu.lw", spm[wslot + j * R + GK.WSLOT], k=kti.klen, **_mods(wwait if j == 0 else [], wsig))
            waits = (["load"] if (load_a and ng == 1) or (bias_tok and kt == 0) else []) + \
                ([g["free_p"]] if kt == 0 and not g["bias"] and j == 0 else [])
            sig = ([g["ep"]] if last else []) + (["load"] if aring or a_free else [])
            op = "mxu.mm" if kt == 0 and not g["bias"] else "mxu.mma"
            e.emit(op, accs[j], spm[arow + GK.ABUF], n=mrows, **_mods(waits, sig))

    if kc.kbound is not None:
        # tile 0; tile 1's code, its registers advanced per trip, while a tile after it is needed; tile 1's code
        # as the last tile (the registers at the position reached)
        assert bounded_k_ok(kc.ktiles, tl, R) and npre <= 1, "a key-bounded K: uniform tiles, own weight slots"
        step = kc.ktiles[1].col - kc.ktiles[0].col
        adv = [(GK.ABUF, Mt), (GK.WSLOT, R)] + ([(GK.WCOL, R * C)] if w_dma else []) + \
            ([(GK.AOFF, step)] if load_a and step else [])
        tile(0)
        done = e.fresh_label("kbound")
        e.emit("seti", GK.MT, 2 * R)
        e.emit("bge", GK.MT, kc.kbound, done)
        top = e.place(e.fresh_label("ktile"))
        l1[0] = None
        tile(1, last=False)
        for r, d in adv:
            e.emit("addi", r, r, d)
        e.emit("addi", GK.MT, GK.MT, R)
        e.emit("blt", GK.MT, kc.kbound, top)
        e.place(done)
        l1[0] = None
        tile(1, last=True)
        return
    lo = max(1, min(npre, KT - 1))             # prefetched tiles stand alone (their tokens differ)
    for kt in range(lo):
        tile(kt)
    for run in k_runs(kc.ktiles, lo, KT - 1, tl.a_slots if aring else (tl.NB if mode == "ring" else 1)):
        p = run.period
        u = max(1, min(run.count, unroll // p))            # trips per body
        trips = run.count // u
        done = run.start
        if trips >= 2:
            q = p * u
            adv = ([(GK.ABUF, q * Mt)] if not aring else []) + ([(GK.WSLOT, q * R)] if mode != "ring" else []) + \
                ([(GK.WCOL, q * R * C)] if w_dma else []) + \
                ([(GK.AOFF, u * run.cstep)] if load_a and run.cstep else [])
            bound, step = adv[0]                   # a register that grows every trip bounds the loop
            e.comment(f"K tiles {run.start}..{run.start + q * trips - 1}: {trips} trips of {q}")
            e.emit("addi", GK.TMP, bound, trips * step)
            top = e.place(e.fresh_label("ktile"))
            l1[0] = None                       # a trip starts with whatever nest the last one left
            for kt in range(run.start, run.start + q):
                tile(kt)
            for r, d in adv:
                e.emit("addi", r, r, d)
            e.emit("blt", bound, GK.TMP, top)
            for r, d in adv:
                e.emit("addi", r, r, -trips * d)
            done += q * trips
        for kt in range(done, run.start + p * run.count):
            tile(kt)
    if KT > 1:
        tile(KT - 1)


def _stores(e: ProgramBuilder, gs: list[Group], mem, base: int, reg: Reg | None, ncols: int, eb: int,
            wait: list, signal: list, dram_reg: Reg = GK.OCOL) -> None:
    """Store row groups ``gs`` from ``mem[base + group row (+ reg)]`` to ``dram[group address + dram_reg]``."""
    for gi, gr in enumerate(gs):
        w = wait if gi == 0 else []
        s = signal if gi == len(gs) - 1 else []
        rep = None
        if gr.count > 1:
            e.emit("loop", L1, gr.count, s0=gr.dstride, s1=gr.lstride)
            rep = L1
        local = mem[base + gr.local + reg] if reg is not None else mem[base + gr.local]
        e.emit("dma.st", dram[gr.dram + dram_reg], local, rows=gr.rows, len=ncols, rstride=gr.rstride, estride=eb,
               **_mods(w, s, True, rep))


def zero_rows(cfg) -> int:
    """The SPM rows of zeros a program with zero borders reserves (``ZERO_ROWS``)."""
    return max(1, min(ZERO_ROWS, cfg.spm_rows // 16))


def emit_zero_fill(e: ProgramBuilder, zero_row: int, border: tuple, zrows: int) -> None:
    """Store zeros (SPM rows that are never written) over a padded tensor's border in DRAM.

    ``border`` is ``({length: addresses of one slice}, slices, slice stride)``; the slices are
    the outer level of a repeat nest. Runs on the store unit ahead of the kernel that writes the
    tensor's interior (disjoint bytes); the kernels that read the tensor wait for every store
    before them (``emit_program``)."""
    chunks, outer, ostride = border
    e.comment("zero the border of a padded output")
    for n, addrs in sorted(chunks.items()):
        for g in groups(addrs):
            full = g.rows // zrows               # whole blocks of zrows rows: one more nest level
            for c0, rows, cnt in ((0, zrows, full), (full * zrows, g.rows - full * zrows, 1)):
                if not rows or not cnt:
                    continue
                levels = ([(outer, ostride)] if outer > 1 else []) + ([(g.count, g.dstride)] if g.count > 1 else []) \
                    + ([(cnt, zrows * g.rstride)] if cnt > 1 else [])
                for lv, (c, st) in enumerate(levels):
                    e.emit("loop", LoopReg(lv), c, s0=st, s1=0)
                e.emit("dma.st", dram[g.dram + c0 * g.rstride], spm[zero_row], rows=rows, len=n, rstride=g.rstride,
                       rep=(L0, len(levels)) if levels else None)


def emit_program(kernels: list, cfg, prefixes: dict | None = None, fences: dict | None = None) -> ProgramBuilder:
    """The compiled model's program: ``len()`` counts its instructions, ``build()`` gives the Program,
    ``text()`` its listing.

    No fence between kernels: kernel ``i`` waits for the stores before it (``fence store``: every
    instruction before has been issued, so the store unit holds them all) where ``fences[i]`` says:
    ``"body"`` after loading its constants, before it reads its inputs (it reads a tensor an earlier
    kernel stores, see ``compiler.lower.pipeline``); ``"prologue"`` before anything (its buffers
    may share rows with the previous kernel's); absent: not at all. Without ``fences``, every kernel
    after the first waits at its prologue. A kernel's zero-border fill (``prefixes[i]``) runs right
    after its fence, else first. The program drains every token and ends with ``fence all``
    (control flow inlines it without its ``halt``)."""
    e = ProgramBuilder(cfg)
    e.comment(f"tetrachip compiled model: {len(kernels)} kernel(s) for config {cfg.name}")
    tokens = Tokens()
    e.code_sizes = []                    # instructions per code (compiler.lower.pipeline fits imem with them)
    for i, kc in enumerate(kernels):
        e.code_sizes.append(len(e))
        where = fences.get(i) if fences is not None else ("prologue" if i else None)

        def sync(fence: bool, i=i) -> None:
            if fence:
                e.emit("fence", "store")
            for zero_row, chunks in (prefixes or {}).get(i, []):
                emit_zero_fill(e, zero_row, chunks, zero_rows(cfg))
        if where != "body":
            sync(where == "prologue")
        before = (lambda: sync(True)) if where == "body" else None
        if isinstance(kc, KernelCode):
            prev = kernels[i - 1] if i and where != "prologue" else None     # its last tile's rows
            tl = prev.tiling if isinstance(prev, (KernelCode, EwCode)) else None
            emit_kernel(e, kc, cfg, tokens, before, window=0 if tl is None else tl.M - (tl.MT - 1) * tl.Mt)
        elif isinstance(kc, EwCode):
            emit_ew(e, kc, cfg, tokens, before)
        else:           # a kernel that emits itself (compiler.lower.norms.NormCode, bmm_lower.BmmCode ...):
            tokens.release(e)                          # it starts and ends drained and fenced
            e.emit("fence", "all")
            if before is not None:
                before()
            kc.emit(e)
            tokens = Tokens()
    e.code_sizes = list(np.diff(e.code_sizes + [len(e)]))
    tokens.release(e)
    e.emit("fence", "all")
    e.emit("halt")
    return e


@dataclass
class EwCode:
    """An elementwise kernel: rows of ``L`` lanes from each input, ``op_i c_i x_i`` (``op`` the VPU's
    ``vadd``, ``vmax`` or ``vmin``) requantized; or, with ``lut_addr``, ``vlut`` of one input through
    the 256-entry table stored there (loaded into SPM rows after the staging buffers, then ``vlutld``)."""
    name: str
    tiling: Tiling
    L: int
    in_rows: list             # per input: (rows,) DRAM byte address of each row
    out_rows: np.ndarray
    coefs: list
    shift: int
    lo: int
    spm_base: int             # the input tiles (``Mt`` rows each), then the table's rows
    acc_base: int
    dyn: object = None        # compiler.lower.dynamic.DynTile, as for KernelCode
    op: str = "vadd"          # how the scaled inputs combine: vadd, vmax or vmin
    lut_addr: int | None = None   # DRAM byte address of the lookup table (a vlut kernel)
    lut_rows: int = 0         # SPM rows the table occupies (isa.timing.lut_rows)
    hi: int = 127             # the requantization clamp's maximum (a folded clip)
    rest: "EwCode | None" = None  # more rows of the same kernel with another lane count, emitted next
    lut_loaded: bool = False  # the table is already in the VPU (an earlier part of this kernel loaded it)
    #: tensor parallel (``compiler.lower.pipeline._lower_ew``'s share): every chip's output rows, else None
    shared: list | None = field(default=None, repr=False)
    #: the staging tile (``Mt`` rows the VPU writes and the store unit reads): a buffer of its own, which the
    #: planner keeps out of the banks the load unit writes (``tiling.ew_fits``)
    spm_stage: int = 0

    def parts(self) -> list:
        """This code and the ones that follow it (``rest``)."""
        return [self] + (self.rest.parts() if self.rest is not None else [])


EW_MAX_INPUTS = 12


def emit_ew(e: ProgramBuilder, kc: EwCode, cfg, tokens: Tokens | None = None, before=None) -> None:
    """Single-buffered: loads -> vmul/vadd chain -> vreq -> stores, ordered by tokens
    (load->vpu data, vpu->load buffers free, vpu->store staged, store->vpu staging free).
    ``tokens``, ``before``: as for ``emit_kernel``."""
    k = len(kc.in_rows)
    tokens = Tokens() if tokens is None else tokens
    r_mt, r_tmp, r_out, r_in = Elementwise.MT, Elementwise.TMP, Elementwise.OUT, Elementwise.inputs(k)
    r_more = Elementwise.nest(k, e.config.scalar_regs)
    with e.scope(f"kernel {kc.name}", r_mt, r_tmp, r_out, *r_in, *r_more):
        _ew_body(e, kc, r_mt, r_tmp, r_out, r_in, tokens, before, r_more)
    if kc.rest is not None:                   # the remainder rows (compiler.lower.pipeline._lower_ew)
        emit_ew(e, kc.rest, cfg, tokens)


def _ew_body(e: ProgramBuilder, kc: EwCode, r_mt: Reg, r_tmp: Reg, r_out: Reg, r_in: list[Reg], tokens: Tokens,
             before, r_more: list[Reg] = ()) -> None:
    tl, k = kc.tiling, len(kc.in_rows)
    Mt = tl.Mt
    what = f"lookup table ({kc.lut_rows} SPM rows)" if kc.lut_addr is not None else f"{kc.op} of {k} tensors"
    e.comment(f"kernel {kc.name}: elementwise {what}, {tl.M} rows of {kc.L} lanes, "
              f"{tl.MT} tile(s) of {Mt} rows{', relu' if kc.lo == 0 else ''}")
    for r in [r_out] + r_in:
        e.emit("seti", r, 0)
    seeds = {("vpu", "load"): 1, ("store", "vpu"): 1}          # the input buffers, the staging buffer
    if kc.lut_addr is not None and not kc.lut_loaded:
        seeds[("load", "vpu")] = 0                             # the table's load -> vlutld below
    tokens.take(e, seeds)
    _requant(e, kc.shift, kc.lo, kc.hi)
    if before is not None:
        before()
    if kc.lut_addr is not None and not kc.lut_loaded:      # the table: the first load -> vpu token
        tab = kc.spm_base + k * Mt
        C = e.config.cols
        e.emit("dma.ld", spm[tab], dram[kc.lut_addr], rows=kc.lut_rows, len=C, rstride=C, signal="vpu")
        e.emit("vlutld", spm[tab], wait="load")
    tiles = [(t * Mt, min(Mt, tl.M - t * Mt)) for t in range(tl.MT)]
    full = [t for t in tiles if t[1] == Mt]
    # the full tiles as a nest of loops when each is the first one shifted (by a step per level: tiles of an
    # image row, rows, images...), each level counting down in a register of its own (r_mt the outermost)
    counters = [r_mt, r_tmp, *r_more]
    levels = tile_levels(kc.in_rows + [kc.out_rows], Mt, len(full), len(counters))
    if kc.dyn is not None:                     # up to the count the host writes (count None); a batch element
        levels = [(None, list(kc.dyn.ew_steps))]        # of several tiles: a loop over them inside
        if kc.dyn.sub is not None:
            levels.insert(0, (kc.dyn.sub[0], list(kc.dyn.sub[1])))
    rest = tiles
    if levels:
        counters = counters[:len(levels)][::-1]          # innermost first, as ``levels``
        tops = {}
        for (count, _), c in list(zip(levels, counters))[::-1]:
            e.emit("seti", c, 0 if count is None else count)
            tops[c] = e.place(e.fresh_label("ewtile"))
        _ew_tile(e, kc, Mt, [rows[:Mt] for rows in kc.in_rows], kc.out_rows[:Mt], r_in, r_out)
        for lv, ((_, steps), c) in enumerate(zip(levels, counters)):
            back = [0] * len(steps) if lv == 0 else [levels[lv - 1][0] * st for st in levels[lv - 1][1]]
            for r, st, bk in zip(r_in + [r_out], steps, back):
                e.emit("addi", r, r, st - bk)
            if levels[lv][0] is None:
                e.emit("addi", c, c, kc.dyn.per_tile)
                e.emit("blt", c, Reg(kc.dyn.reg), tops[c])
            else:
                e.emit("addi", c, c, -1)
                e.emit("blt", Reg(0), c, tops[c])
        for r in [r_out] + r_in:
            e.emit("seti", r, 0)
        rest = tiles[math.prod(n for n, _ in levels):] if kc.dyn is None else tiles[len(full):]
    for m0, mrows in rest:
        _ew_tile(e, kc, mrows, [rows[m0:m0 + mrows] for rows in kc.in_rows], kc.out_rows[m0:m0 + mrows],
                 r_in, r_out)
    tokens.leave(seeds)


def _ew_tile(e: ProgramBuilder, kc: EwCode, mrows: int, in_rows: list, out_rows: np.ndarray, r_in: list[Reg],
             r_out: Reg) -> None:
    Mt, k = kc.tiling.Mt, len(in_rows)
    buf = [kc.spm_base + i * Mt for i in range(k)]
    obuf = kc.spm_stage
    acc_r, acc_t = kc.acc_base, kc.acc_base + Mt
    loads = [(i, g) for i in range(k) for g in groups(in_rows[i])]
    for j, (i, g) in enumerate(loads):
        w = ["vpu"] if j == 0 else []
        s = ["vpu"] if j == len(loads) - 1 else []
        rep = None
        if g.count > 1:
            e.emit("loop", L1, g.count, s0=g.lstride, s1=g.dstride)
            rep = L1
        e.emit("dma.ld", spm[buf[i] + g.local], dram[g.dram + r_in[i]], rows=g.rows, len=kc.L, rstride=g.rstride,
               **_mods(w, s, True, rep))
    if kc.lut_addr is not None:            # one input, through the table, straight to the staging rows
        e.emit("vlut", spm[obuf], spm[buf[0]], n=mrows, **_mods(["load", "store"], ["load", "store"]))
    else:
        for i in range(k):
            w = ["load"] if i == 0 else []
            s = ["load"] if i == k - 1 else []
            dst = acc_r if i == 0 else acc_t
            e.emit("vmul", acc[dst], spm[buf[i]], int(kc.coefs[i]), n=mrows, **_mods(w, s))
            if i:
                e.emit(kc.op, acc[acc_r], acc[acc_r], acc[acc_t], n=mrows)
        e.emit("vreq", spm[obuf], acc[acc_r], 1, n=mrows, wait="store", signal="store")
    _stores(e, groups(out_rows), spm, obuf, None, kc.L, 1, ["vpu"], ["vpu"], dram_reg=r_out)
