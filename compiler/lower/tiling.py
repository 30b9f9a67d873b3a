"""Tiling: how a kernel's GEMM is cut to the array and memories, and how its data moves.

* **K tiles.** The input's DRAM addresses ``P[m, k]`` (from the gather map and the tensor's
  layout) must be separable, ``P[m, k] = row[m] + col[k]``: then the K columns are sorted by
  address and cut greedily into tiles of at most ``rows`` columns whose addresses form one
  arithmetic progression (``estride``). For a convolution on a channel-last (NHWC) input this
  groups ``(kw, ci)`` of one kernel row into contiguous bytes: im2col by strided DMA, no copy.
* **Row groups.** The rows of a tile (``row[m]`` for its ``m``) are split into runs of constant
  stride (one DMA instance each: ``rows``, ``rstride``), and equal runs at a constant distance
  into one instruction over a repeat-register nest (``sync=once``).
* **M, N tiles.** N tiles are the array's ``cols``; M tiles are as tall as SPM and ACC allow
  (two A buffers when there are several, so the next M tile loads while this one computes; one
  when the reduction per M tile is long, ``SINGLE_A_WORK``), rounded to whole runs. Edge tiles
  (non-multiple sizes) use the same code with smaller ``len``/``k``/``rows``/``n``; weights and
  biases are padded in DRAM to whole tiles.
* **Weight slots** (``choose``): two N tiles' groups, one N tile's, or a ring that the weight
  tiles stream through (``ring_slots``), whichever leaves the fewest instructions to run; when
  not even one row of A tiles fits beside the ring, A tiles stream through a ring too
  (``Tiling.a_ring``, reloaded per N tile), of ``ring_slots`` slots or, where those do not fit,
  fewer (``ring_candidates``), so any K compiles (the error names ``spm_rows`` only when one
  slot of each does not fit). An A ring whose loads outrun its matmuls (an ``Mt``-row A tile and a
  weight tile loaded per ``Mt``-row ``mm``: ACC too short for taller M tiles) shares each A tile
  among ``ng`` N tiles that accumulate side by side (``Tiling.ng``, ``a_ring_groups``).
* **K runs** (``k_runs``): K tiles whose columns repeat with a constant shift run as one loop body.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from isa.ints import align_up, cdiv
from isa.table import SPACE_BYTES, Space
from isa.timing import mxu_swap_delay, row_beats

from compiler.lower.schedule import ChipCompileError


@dataclass(frozen=True)
class KTile:
    k0: int          # first column (in the sorted order)
    klen: int
    col: int         # byte offset of the first column from the row address
    estride: int


@dataclass(frozen=True)
class Group:
    """One DMA instruction: ``count`` x (``rows`` rows ``rstride`` apart), nests ``lstride``/``dstride`` apart."""
    local: int
    dram: int
    rows: int
    rstride: int
    count: int = 1
    lstride: int = 0
    dstride: int = 0


def k_tiles(P: np.ndarray, rows: int, what: str) -> tuple[np.ndarray, list[KTile], np.ndarray]:
    """Column order, K tiles and row addresses of a (M, K) byte-address matrix."""
    row = P[:, 0] - P[0, 0]
    col = P[0, :]
    if not np.array_equal(P, row[:, None] + col[None, :]):
        raise ChipCompileError(f"{what}: the input gather is not separable into row and column offsets, "
                               "so strided DMA cannot perform it")
    order = np.argsort(col, kind="stable")
    c = col[order]
    tiles, k0 = [], 0
    K = len(c)
    while k0 < K:
        klen, est = 1, 1
        if k0 + 1 < K:
            est = int(c[k0 + 1] - c[k0])
            if not -(1 << 15) <= est < (1 << 15):
                est = 1
            else:
                klen = 2
                while k0 + klen < K and klen < rows and c[k0 + klen] - c[k0 + klen - 1] == est:
                    klen += 1
        klen = min(klen, rows)
        if klen == 1:
            est = 1
        tiles.append(KTile(k0, klen, int(c[k0]), est))
        k0 += klen
    return order, tiles, row + 0


@dataclass(frozen=True)
class KRun:
    """K tiles ``start .. start + period * count - 1`` as ``count`` repetitions of a body of ``period``
    tiles: repetition ``r`` is the first one with every column shifted by ``r * cstep`` bytes (same
    ``klen`` and ``estride``), so one loop body serves them all (``compiler.lower.emit``)."""
    start: int
    period: int
    count: int
    cstep: int


#: longest loop body over K tiles that ``k_runs`` looks for, in units of ``k_runs``' ``unit``
MAX_K_PERIOD = 8


def k_runs(tiles: list[KTile], lo: int, hi: int, unit: int = 1) -> list[KRun]:
    """K tiles ``lo .. hi - 1`` as runs: greedily, the repetition covering the most tiles from the
    current one (a body whose length is a multiple of ``unit``, at least two repetitions), else one
    tile alone. Code size then grows with the number of distinct column patterns, not with K."""
    out: list[KRun] = []
    i = lo
    while i < hi:
        best = KRun(i, 1, 1, 0)
        for p in range(unit, MAX_K_PERIOD * unit + 1, unit):
            if i + 2 * p > hi:
                break
            step = tiles[i + p].col - tiles[i].col
            c = 1
            while i + (c + 1) * p <= hi and all(_shifted(tiles[i + j], tiles[i + c * p + j], c * step)
                                                for j in range(p)):
                c += 1
            if c >= 2 and c * p > best.count * best.period:
                best = KRun(i, p, c, step)
        out.append(best)
        i += best.period * best.count
    return out


def _shifted(a: KTile, b: KTile, d: int) -> bool:
    return a.klen == b.klen and a.estride == b.estride and b.col - a.col == d


def runs(addrs: np.ndarray) -> list[tuple[int, int, int]]:
    """(first index, length, stride) of maximal constant-stride runs."""
    out, i, n = [], 0, len(addrs)
    d = np.diff(addrs)
    while i < n:
        j = i + 1
        st = 0
        if j < n:
            st = int(d[i])
            while j < n and d[j - 1] == st:
                j += 1
        out.append((i, j - i, st if j - i > 1 else 0))
        i = j
    return out


def groups(addrs: np.ndarray) -> list[Group]:
    """DMA instructions moving rows ``0..len(addrs)-1`` of a tile to/from DRAM ``addrs``."""
    rs = runs(np.asarray(addrs, np.int64))
    out: list[Group] = []
    i = 0
    while i < len(rs):
        s, ln, st = rs[i]
        j = i + 1
        dstride = None
        while j < len(rs) and rs[j][1] == ln and rs[j][2] == st and rs[j][0] == rs[j - 1][0] + ln:
            dd = int(addrs[rs[j][0]] - addrs[rs[j - 1][0]])
            if dstride is None:
                dstride = dd
            elif dd != dstride:
                break
            j += 1
        cnt = j - i
        out.append(Group(s, int(addrs[s]), ln, st, cnt, ln if cnt > 1 else 0, dstride or 0))
        i = j
    return out


def period(addrs: np.ndarray) -> int:
    """The longest natural block of rows (a run, or a nest of runs such as one image) after which
    the address pattern repeats shifted by a constant: M tiles that are whole blocks are
    translations of each other, so one loop body serves them all. 1 if there is none."""
    a = np.asarray(addrs, np.int64)
    gs = groups(a[: min(len(a), 1 << 16)])
    cands = sorted({gs[0].rows * gs[0].count, gs[0].rows} if gs else set(), reverse=True)
    for p in cands:
        if 1 < p < len(a):
            d = a[p:] - a[:-p]
            if np.all(d == d[0]):
                return p
    return 1


def common_period(a_rows: np.ndarray, out_rows: np.ndarray) -> int:
    """``period`` of a kernel's input rows when its output rows repeat with it (else 1)."""
    p = period(a_rows)
    if p > 1:
        d = out_rows[p:] - out_rows[:-p]
        if len(d) and not np.all(d == d[0]):
            p = 1
    return p


def joint_period(*seqs: np.ndarray) -> int:
    """The shortest block of rows after which every one of ``seqs`` repeats shifted by a constant of its
    own: one of their ``period``s or the least common multiple of them all, else 1 (several inputs and
    an output whose nests differ: a 2x2 pooling's inputs repeat every 16 rows, its padded output every 64)."""
    ps = [period(a) for a in seqs]
    n = min(len(a) for a in seqs)

    def repeats(p: int) -> bool:
        return all(np.all((d := np.asarray(a[p:], np.int64) - np.asarray(a[:-p], np.int64)) == d[0]) for a in seqs)

    return next((p for p in sorted(set(ps) | {math.lcm(*ps)}) if 1 < p < n and repeats(p)), 1)


@dataclass(frozen=True)
class Tiling:
    M: int
    N: int
    KT: int
    NT: int
    Mt: int
    MT: int
    NB: int          # weight-tile slots in SPM
    nbuf: int        # A buffers
    spm_rows: int    # SPM rows the kernel uses (A + weights + output staging)
    acc_rows: int
    #: loop order (compiler.lower.emit): "mnk" M tiles outermost (an M tile's A tiles are loaded once and
    #: reused across N, weight tiles stream per M tile); "nmk" N tiles outermost (a column's weight
    #: tiles are loaded once and reused across M, ``NB == KT``; A streams per column unless every
    #: M tile has its own buffer, ``nbuf >= MT``, when later columns reuse them). K is innermost
    #: (accumulation in ACC) in both.
    order: str = "mnk"
    #: A tiles stream too, through a ring of ``NB`` slots of ``Mt`` rows beside the weight ring
    #: (reloaded for every N tile): when not even one row of A tiles fits SPM (a long reduction)
    a_ring: bool = False
    #: with an A ring, the N tiles (a group) that each A tile serves: their ACC regions (``Mt`` rows each) lie
    #: side by side, two groups' worth (the next group's drained while this one computes), and each ring
    #: slot holds a weight tile per N tile of the group (``compiler.lower.emit``); 1 otherwise
    ng: int = 1
    #: with an A ring, its slots where they are not the weight slots' ``NB`` (0): an ``nmk`` kernel whose
    #: column keeps its ``KT`` weight tiles resident (``NB == KT``) while its A tiles stream (``choose``)
    na: int = 0

    @property
    def a_slots(self) -> int:
        """Slots of an A ring."""
        return self.na or self.NB

    @property
    def a_rows(self) -> int:
        """SPM rows of the A buffers."""
        return self.a_slots * self.Mt if self.a_ring else self.nbuf * self.KT * self.Mt

    @property
    def w_slots(self) -> int:
        """Weight tiles the SPM weight slots hold (``rows`` rows each)."""
        return self.NB * self.ng

    def m_tiles(self):
        """(first row, rows, A buffer) of every M tile."""
        return [(t * self.Mt, min(self.Mt, self.M - t * self.Mt), t % self.nbuf) for t in range(self.MT)]


def choose(cfg, M: int, KT: int, N: int, out_int8: bool, run: int, what: str, single_ok: bool = True,
           bias: bool = True, group_ok: bool = False, columns: bool = True) -> Tiling:
    """Tile sizes for a kernel; a clear error naming the dimension when it cannot fit the chip.

    Weight slots (``compiler.lower.emit.weight_mode``): two N tiles' worth (one DMA per N tile, the
    next one's loading while this one computes; for long M tiles, ``GROUP_WORK``), else one N tile's
    (at least 4, a DMA per tile), else, when
    that does not fit SPM or a ring leaves taller M tiles, a ring of ``NB = ring_slots(KT)`` slots
    the tiles stream through (``KT`` a multiple of ``NB``), so SPM holds the A tiles. With one M tile and
    no ``bias`` (nothing in the load queue waits for an ACC region), tiles rather than groups: the
    tiles of each N tile stream right behind the previous ones, while the first mxu.lw of an N tile
    would wait for its whole group (the first group before the first matmul, the second behind the
    first N tile's A loads). ``group_ok``: an A ring may serve several N tiles per A tile
    (``a_ring_groups``; the emitter's plain kernels only: no symbolic batch or key bound), and, with
    ``columns``, an A ring may run column by column with each column's weight tiles resident
    (``_choose_col_ring``), where that keeps the load unit less busy."""
    C = cfg.cols
    NT = cdiv(N, C)
    scale_rows = NT if out_int8 else 0
    # the least ACC any tiling takes: two M-tile regions of a row each, or on a banked ACC of a
    # whole bank each (``_bank_aligned``), and the scale rows
    region = max(1, cfg.acc_bank_rows)
    if 2 * region + scale_rows > cfg.acc_rows:
        regions = (f"two M-tile regions of a whole ACC bank each ({region} rows, acc_bank_rows)" if region > 1
                   else "two M-tile regions of a row each")
        scales = f" and its {scale_rows} scale rows (one per N tile)" if scale_rows else ""
        raise ChipCompileError(f"{what}: N = {N} ({NT} tiles) needs more ACC rows than config {cfg.name!r} has: "
                               f"{regions}{scales} take {2 * region + scale_rows}, it has {cfg.acc_rows} "
                               f"(acc_rows)")
    ring = ring_slots(KT)
    res, best = None, None
    for NB in (2 * KT, max(KT, align_up(4, KT)), ring):      # group, tile, ring (compiler.lower.emit)
        t = _choose(cfg, M, KT, NT, N, out_int8, run, single_ok, NB)
        if t is not None and NB == 2 * KT and (NT * t.Mt < GROUP_WORK * cfg.rows * cdiv(C, cfg.dma_beat_bytes)
                                               or (t.MT == 1 and not bias)):
            t = None                  # an M tile's first two groups load exposed: too long beside its work
        # instructions the chip runs per K tile: lw and mm per M tile, and a DMA unless grouped
        cost = None if t is None else t.MT * (2 if NB >= 2 * KT else 3)
        if cost is not None and (best is None or cost < best):
            res, best = t, cost
    banked = cfg.acc_bank_rows > 1
    if res is not None and banked:
        res = _bank_aligned(cfg, res, run, single_ok)
    # an A ring where nothing else fits or, for a plain kernel whose M tiles come out shorter than an mm
    # that hides the next weight load (and than M: a long reduction leaves room for a few rows of A tiles
    # only), where it is estimated faster (its A tiles shared among N tiles)
    if res is None or (group_ok and res.Mt < min(short_mm(cfg), M)):
        ring = None
        # fewer slots than ring_slots' only where its ring does not fit; fewer than KT (the emitter streams A
        # tiles beside a weight ring only: ``compiler.lower.emit.weight_mode``)
        for nb in (d for d in ring_candidates(KT) if d < KT):
            ringed = _choose_a_ring(cfg, M, KT, NT, N, out_int8, run, nb)
            ring = ringed and _bank_aligned(cfg, ringed, run, single_ok) if banked else ringed
            if ring is not None:
                break
        if ring is not None and group_ok:
            ring = a_ring_groups(cfg, ring, out_int8, run)
        if res is None or (ring is not None and est_cycles(cfg, ring) < est_cycles(cfg, res)):
            res = ring
    if group_ok and columns and (res is None or res.a_ring):
        col = _choose_col_ring(cfg, M, KT, NT, N, out_int8, run)
        if col is not None and (res is None or est_cycles(cfg, col, bias) < est_cycles(cfg, res, bias)):
            res = col
    if res is None:
        ostage = 2 if out_int8 else 0
        mt = cfg.acc_bank_rows          # the shortest M tile: a row, or a whole ACC bank
        raise ChipCompileError(f"{what}: K = {KT} tiles of {cfg.rows} rows do not fit SPM even streamed: "
                               f"one weight and one A slot and the output staging need "
                               f"{cfg.rows + mt + ostage * mt} rows, config {cfg.name!r} has "
                               f"{cfg.spm_rows} (spm_rows)"
                               + (f"; with M tiles of whole ACC banks ({cfg.acc_bank_rows} rows, acc_bank_rows)"
                                  if banked else ""))
    return res


def _bank_aligned(cfg, t: Tiling, run: int = 1, single_ok: bool = True) -> Tiling | None:
    """``t`` with M tiles of a whole number of ACC banks (``cfg.acc_bank_rows``): the MXU writes one
    ACC region while the VPU or a DMA load writes the other (docs/microarchitecture.md section 4,
    two units writing one bank race), so the second region and the scale rows start a bank. The
    tile grows to the next bank when that fits, else shrinks to the bank below, keeping whole
    blocks of ``run`` rows where ``t`` had them, and one A buffer where two no longer fit (when
    ``single_ok``); None when not one bank's worth fits."""
    b = cfg.acc_bank_rows
    scale_rows = t.acc_rows - 2 * t.Mt
    ostage = (t.spm_rows - (t.a_rows + t.NB * cfg.rows)) // t.Mt if t.Mt else 0
    ring = t.a_slots
    steps = [math.lcm(b, run)] if run > 1 and t.Mt % run == 0 else []
    for step in steps + [b]:
        for mt in (align_up(t.Mt, step), t.Mt // step * step):
            if mt < 1:
                continue
            MT = cdiv(t.M, mt)
            # one A buffer for one M tile; for several, ``t``'s count, but two where one is not allowed (``t``
            # may have had one M tile; an A ring has its slots instead), then one where it is
            many = t.nbuf if single_ok or t.nbuf >= 2 or t.a_ring else 2
            for nbuf in dict.fromkeys((1,) if MT == 1 else (many, 1 if single_ok else many)):
                spm = (ring * mt if t.a_ring else nbuf * t.KT * mt) + t.NB * cfg.rows + ostage * mt
                if spm <= cfg.spm_rows and 2 * mt + scale_rows <= cfg.acc_rows:
                    return Tiling(t.M, t.N, t.KT, t.NT, mt, MT, t.NB, nbuf, spm, 2 * mt + scale_rows,
                                  order=t.order, a_ring=t.a_ring, na=t.na)
    return None


def _choose_a_ring(cfg, M: int, KT: int, NT: int, N: int, out_int8: bool, run: int, NB: int, ng: int = 1,
                   step: int = 0) -> Tiling | None:
    """A tiles and weight tiles both stream through rings of ``NB`` slots (``Tiling.a_ring``), each A tile
    serving ``ng`` N tiles (``Tiling.ng``); ``step``: M tiles a multiple of it (whole ACC banks)."""
    ostage = 2 if out_int8 else 0
    scale_rows = NT if out_int8 else 0
    cap = min((cfg.spm_rows - NB * ng * cfg.rows) // (NB + ostage), (cfg.acc_rows - scale_rows) // (2 * ng), M)
    if cap < 1:
        return None
    if step:
        Mt = cap // step * step
    else:
        Mt = _blocks(M, run, cap) if 1 < run <= cap else cdiv(M, cdiv(M, cap))
    if Mt < 1:
        return None
    return Tiling(M, N, KT, NT, Mt, cdiv(M, Mt), NB, 1, NB * Mt + NB * ng * cfg.rows + ostage * Mt,
                  2 * ng * Mt + scale_rows, a_ring=True, ng=ng)


def _choose_col_ring(cfg, M: int, KT: int, NT: int, N: int, out_int8: bool, run: int) -> Tiling | None:
    """Column order (``nmk``) with an A ring: each N tile's ``KT`` weight tiles stay in SPM for all its M tiles
    (``NB == KT``, loaded once per column) while its A tiles stream through a ring of ``na`` slots
    (``Tiling.na``, the most of ``ring_candidates(KT)`` that fit), loaded once per column: the load unit moves
    an A tile per ``mm``, where an ``mnk`` A ring moves an A tile and a weight tile (``compiler.lower.emit``:
    ``_k_chain``). M tiles of whole ACC banks (the bias of the next M tile loads while the array writes this
    one) and, where they fit, of whole ``run`` blocks (one loop body); on banked SPM the output staging, which
    the VPU writes, in banks of its own beside the loaded rows. None when that does not fit."""
    R = cfg.rows
    ostage = 2 if out_int8 else 0
    scale_rows = NT if out_int8 else 0
    bank = max(1, cfg.acc_bank_rows)
    step = math.lcm(bank, run) if 1 < run else bank
    cap = min((cfg.acc_rows - scale_rows) // 2, M)

    def fits(na: int, mt: int) -> bool:
        return align_up(na * mt + KT * R, max(1, cfg.spm_bank_rows)) + ostage * mt <= cfg.spm_rows

    for na in ring_candidates(KT):
        top = next((mt for mt in range(cap, 0, -1) if fits(na, mt)), 0)
        if top and step == 1:
            Mt = cdiv(M, cdiv(M, top))                  # even tiles
        elif top >= step:
            Mt = top // step * step                     # whole banks and whole run blocks
        else:
            Mt = top // bank * bank                     # whole banks (0 on a banked ACC: none fits)
        if Mt >= 1 and fits(na, Mt):
            return Tiling(M, N, KT, NT, Mt, cdiv(M, Mt), KT, 1, na * Mt + KT * R + ostage * Mt,
                          2 * Mt + scale_rows, order="nmk", a_ring=True, na=na)
    return None


#: group weights (one DMA per N tile) need an M tile's matmul cycles per K tile (N tiles x rows) to be
#: this many times the beats of one weight tile: its first two groups' loads are then under 1% of it
GROUP_WORK = 200
#: K tiles x N tiles of one M tile from which a single A buffer (taller M tiles) is preferred to two:
#: the stall at an M tile's start (its first A tile's load) is then under 1% of the tile's matmuls
SINGLE_A_WORK = 256


def a_ring_groups(cfg, t: Tiling, out_int8: bool, run: int) -> Tiling:
    """The A ring ``t``, or the same ring with each A tile shared by ``ng`` N tiles (``Tiling.ng``, ``ng``
    dividing ``NT``) where that runs in fewer cycles. Per K tile, M tile and group the array streams
    ``ng x Mt`` rows while the load unit moves an ``Mt``-row A tile and ``ng`` weight tiles; a plain ring
    (``ng = 1``) moves more rows than the array streams whenever weight tiles are longer than zero rows,
    so shorter M tiles for several N tiles win once ACC caps ``Mt`` (two regions of ``ng`` tiles). On a
    banked ACC each N tile's rows are whole banks (the VPU or the store unit drains one N tile while the
    array writes the next). The estimate: the larger of the array's rows and the load unit's beats
    (``isa.timing.row_beats``)."""
    b = cfg.acc_bank_rows if cfg.acc_bank_rows > 1 else 0
    step = (math.lcm(b, run) if run > 1 else b) if b else 0
    best, cost = t, est_cycles(cfg, t)
    for ng in range(2, t.NT + 1):
        tl = None if t.NT % ng else _choose_a_ring(cfg, t.M, t.KT, t.NT, t.N, out_int8, run, t.NB, ng, step)
        if tl is not None and est_cycles(cfg, tl) < cost:
            best, cost = tl, est_cycles(cfg, tl)
    return best


def ew_fits(cfg, nin: int, Mt: int, lut: int, reserve: int) -> bool:
    """Do an elementwise kernel's buffers fit SPM beside ``reserve`` rows never written (the zero rows)? Its
    ``nin`` input tiles of ``Mt`` rows and the table's ``lut`` rows, which the load unit writes, and its
    staging tile, which the VPU writes in a bank of its own while the next tile's inputs load
    (docs/microarchitecture.md section 4); the reserved rows may fill the rest of the inputs' last bank."""
    ins = nin * Mt + lut
    gap = align_up(ins, cfg.spm_bank_rows) - ins
    return ins + gap + Mt + max(0, reserve - gap) <= cfg.spm_rows


def scale_chunk(cfg, NT: int) -> int:
    """N tiles per code of an int8-output GEMM of ``NT`` N tiles: all of them where their scale rows (one
    ACC row per N tile, resident for the whole kernel) fit beside two M-tile regions of a row each, or on
    a banked ACC of a bank each; else half the ACC's rows (whole banks), so that the regions keep the
    other half (``compiler.lower.pipeline._lower_gemm`` cuts the kernel into codes of that many)."""
    b = max(1, cfg.acc_bank_rows)
    if NT <= cfg.acc_rows - 2 * b or cfg.acc_rows - 2 * b < 1:       # (not even one fits: ``choose`` says so)
        return NT
    return max(1, min(cfg.acc_rows // 2 // b * b, cfg.acc_rows - 2 * b))


def short_mm(cfg) -> int:
    """Rows below which an ``mm`` cannot hide the next weight load."""
    return 2 * (2 * cfg.rows + cfg.cols)


def est_cycles(cfg, t: Tiling, bias: bool = False) -> int:
    """A kernel's cycles as ``choose`` compares its tilings: the larger of the array's (an ``mm`` per M, N and
    K tile, its rows or, when shorter, ``isa.timing.mxu_swap_delay`` and a weight tile's ``rows``: the next
    ``mxu.lw`` starts that long after the ``mm`` that swapped in the last one, docs/microarchitecture.md)
    and the load unit's beats (``isa.timing.row_beats``): A tiles once per M tile (per group of N tiles with
    an A ring), a weight tile per M, N and K tile (``mnk`` order); in column order with an A ring
    (``_choose_col_ring``) A tiles per N tile and weight tiles once, with ``bias`` its DMA into every M and N
    tile's ACC region, and per column its weights and first A tile, which nothing hides."""
    R = cfg.rows
    a_beats, w_beats = row_beats(cfg, R, Space.SPM, 1), row_beats(cfg, cfg.cols, Space.SPM, 1)
    swap = mxu_swap_delay(cfg) + R
    edge = t.M - (t.MT - 1) * t.Mt
    array = t.NT * t.KT * ((t.MT - 1) * max(t.Mt, swap) + max(edge, swap))
    a_loads = t.M * t.KT * a_beats * ((t.NT // t.ng) if t.a_ring else 1)
    if t.a_ring and t.order == "nmk":
        # (each column starts after the last one's tokens drain: its weights and first A tile load exposed)
        b_beats = row_beats(cfg, cfg.cols, Space.ACC, SPACE_BYTES[Space.ACC])
        return (max(array, a_loads + t.NT * t.KT * R * w_beats + (t.NT * t.M * b_beats if bias else 0))
                + t.NT * (t.KT * R * w_beats + t.Mt * a_beats))
    return max(array, a_loads + t.MT * t.NT * t.KT * R * w_beats)


def ring_slots(KT: int) -> int:
    """Weight slots of a streaming ring: the smallest divisor of ``KT`` from 4 to 16 (else 3, 2, 1),
    so that K tile ``kt`` always uses slot ``kt % NB`` (``compiler.lower.emit``)."""
    return next((d for d in [*range(4, 17), 3, 2] if KT % d == 0), 1)


def ring_candidates(KT: int) -> list[int]:
    """Slot counts an A ring tries in turn: ``ring_slots(KT)``, then the smaller divisors of ``KT``, largest
    first (fewer slots hide less of each load's latency, but fit where an M tile of whole ACC banks with
    ``ring_slots`` slots does not: K = 39 tiles, 13 slots of 16 rows)."""
    ring = ring_slots(KT)
    return [ring] + [d for d in range(ring - 1, 0, -1) if KT % d == 0]


def _choose(cfg, M: int, KT: int, NT: int, N: int, out_int8: bool, run: int, single_ok: bool,
            NB: int) -> Tiling | None:
    """The tiling with ``NB`` weight slots, or None when not one row of A tiles fits beside them."""
    R = cfg.rows
    w_rows = NB * R
    scale_rows = NT if out_int8 else 0
    ostage = 2 if out_int8 else 0
    if w_rows + KT + ostage > cfg.spm_rows:
        return None

    def fits(mt: int, nbuf: int) -> bool:
        return nbuf * KT * mt + w_rows + ostage * mt <= cfg.spm_rows and 2 * mt + scale_rows <= cfg.acc_rows

    if fits(M, 1):
        Mt, nbuf = M, 1
    else:
        nbuf = 2
        Mt = min((cfg.spm_rows - w_rows) // (2 * KT + ostage), (cfg.acc_rows - scale_rows) // 2, M)
        mt1 = min((cfg.spm_rows - w_rows) // (KT + ostage), (cfg.acc_rows - scale_rows) // 2, M)
        if Mt < 1:
            nbuf, Mt = 1, mt1                    # one A buffer: loads no longer overlap the matmuls
        short = short_mm(cfg)
        if run > 1 and single_ok and run <= mt1 and (Mt < run or (Mt // run * run < short
                                                                  and mt1 // run >= 2 * (Mt // run))):
            # one A buffer (loads no longer overlap the previous M tile's matmuls) so that an M
            # tile holds a whole block and one loop body serves every tile (instruction memory)
            nbuf, Mt = 1, _blocks(M, run, mt1)
        elif single_ok and NT * KT >= SINGLE_A_WORK and cdiv(M, mt1) < cdiv(M, Mt):
            # a long reduction per M tile (every N tile reuses the A tiles, which load just ahead of
            # their matmuls): one A buffer only stalls at the M tile's start, and taller tiles halve
            # the instructions the chip (and the simulator) runs
            nbuf, Mt = 1, (_blocks(M, run, mt1) if 1 < run <= mt1 else cdiv(M, cdiv(M, mt1)))
        elif run > 1 and Mt >= run:
            Mt = _blocks(M, run, Mt)             # whole blocks: every full M tile runs the same code
        else:
            MT = cdiv(M, Mt)
            Mt = cdiv(M, MT)                     # even tiles
    MT = cdiv(M, Mt)
    if MT == 1:
        nbuf = 1
    elif nbuf == 1 and not single_ok:
        return None                              # (int32 output with a bias needs two A buffers)
    return Tiling(M, N, KT, NT, Mt, MT, NB, nbuf, nbuf * KT * Mt + w_rows + ostage * Mt,
                  2 * Mt + scale_rows)


def _blocks(M: int, run: int, cap: int) -> int:
    """Rows of an M tile: whole blocks of ``run`` rows, at most ``cap``; a count that divides the
    number of blocks (no edge tile, so no second copy of the code) unless that halves the tile."""
    k = cap // run
    nblk = cdiv(M, run)
    for d in range(k, 0, -1):
        if nblk % d == 0:
            return (d if 2 * d >= k else k) * run
    return k * run


def tile_weights(w_q: np.ndarray, order: np.ndarray, tiles: list[KTile], R: int, C: int) -> np.ndarray:
    """Weights as NT x KT tiles of R x C int8 (zero padded), tile (nt, kt) at ((nt*KT)+kt)*R*C."""
    K, N = w_q.shape
    NT = cdiv(N, C)
    w = w_q[order]
    out = np.zeros((NT, len(tiles), R, C), np.int8)
    for kt, t in enumerate(tiles):
        for nt in range(NT):
            blk = w[t.k0:t.k0 + t.klen, nt * C:(nt + 1) * C]
            out[nt, kt, :blk.shape[0], :blk.shape[1]] = blk
    return out.reshape(-1)


def pad_lanes(v: np.ndarray, C: int) -> np.ndarray:
    """A per-channel int32 vector padded to whole N tiles (NT x C)."""
    NT = cdiv(len(v), C)
    out = np.zeros(NT * C, np.int32)
    out[:len(v)] = v
    return out


def tile_levels(seqs: list, Mt: int, nfull: int, most: int) -> list:
    """The first ``nfull`` tiles of ``Mt`` rows as a loop nest, innermost level first: ``[(count, [step per
    sequence])]``, tile ``i0 + count0 * (i1 + count1 * ...)`` being the first tile shifted by ``sum(i_l *
    step_l)`` in every sequence of row addresses (it covers ``prod(count)`` tiles, the rest run one by one);
    [] when the tiles differ in shape, no level repeats, or it takes more than ``most`` levels."""
    if nfull < 2:
        return []
    blk = np.stack([np.asarray(a[:nfull * Mt], np.int64).reshape(nfull, Mt) for a in seqs], axis=-1)
    starts = blk[:, 0, :]                               # (tile, sequence)
    if not np.array_equal(blk - starts[:, None, :], np.broadcast_to(blk[:1] - starts[:1, None, :], blk.shape)):
        return []
    levels = []
    while len(starts) >= 2 and len(levels) < most:
        d = starts[1] - starts[0]
        change = np.flatnonzero(np.any(np.diff(starts, axis=0) != d, axis=1))    # the first step that differs
        q = int(change[0]) + 1 if len(change) else len(starts)
        nb = len(starts) // q
        want = starts[::q][:nb, None, :] + np.arange(q)[None, :, None] * d[None, None, :]
        if not np.array_equal(starts[:nb * q].reshape(nb, q, -1), want):
            break
        levels.append((q, [int(x) for x in d]))
        starts = starts[::q][:nb]
    return levels              # (where the blocks stop repeating, or registers run out, the nest covers the first)
