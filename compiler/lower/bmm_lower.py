"""Lowering of a batched matmul of two activations (``compiler.lower.bmm``) to the chip.

Each slice ``s`` is one ordinary GEMM kernel (``compiler.lower.emit.emit_kernel``: im2col-style strided
DMA for the ``a`` rows, weight tiles from DRAM, requantization) whose weights are the slice of ``b``.
The GEMM reads its weight tiles from a tiled scratch buffer in DRAM (NT x KT tiles of rows x cols
int8, ``compiler.lower.tiling.tile_weights``'s layout), so the slice is first **relaid**: strided
DMA loads move ``b``'s elements into SPM staging rows in tile order (one instruction per run of rows,
a repeat nest over runs), and one store writes the staging rows to the scratch buffer. Rows a tile
does not use (``k >= klen``) are not loaded: ``mxu.lw k=klen`` zeroes them; columns past ``N`` are
zeroed by the loads' ``len``. The relayout is fenced on both sides (``fence all`` before: the
staging rows and the scratch may still be read by the previous slice; ``fence load``/``fence
store`` inside), so slices run one after another; the GEMM itself overlaps its units as usual.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from isa.builder import ProgramBuilder, dram, spm
from isa.ints import cdiv
from isa.regs import L0, L1, Reg
from isa.regs import GemmKernel as GK

from compiler.lower.bmm import BmmKernel, from_base
from compiler.lower.emit import KernelCode, Tokens, bounded_k_ok, bounded_ok, emit_kernel, zero_rows
from compiler.lower.planner import Buffer
from compiler.lower.schedule import ChipCompileError, Schedule
from compiler.lower.tiling import Group, choose, common_period, groups, k_tiles, pad_lanes

#: SPM rows of the relayout staging buffer (a slice's weights move in chunks of this many rows)
STAGE_ROWS = 1024
#: the DMA element stride is a signed 16-bit field (isa.table "dma": estride)
_ESTRIDE_MAX = 1 << 15


@dataclass
class Relayout:
    """Copy one slice of ``b`` into the tiled weight layout at ``scratch``: per chunk of staging rows,
    (local row, Group of source rows, len, estride) loads, then one store."""
    scratch: int
    cols: int
    chunks: list                    # [(first scratch row, rows, [(Group, len, estride), ...])]
    #: a key bound: (register holding n, scratch rows per unit of keys (an N tile, or a K tile), DRAM step of b
    #: per unit, keys per unit, fewest units); ``chunks`` then holds unit 0's loads, repeated
    #: max(fewest, ceil(n / keys per unit)) times
    bound: tuple | None = None


@dataclass
class BmmCode:
    """Everything the emitter needs for one batched matmul: per slice, a relayout then a GEMM."""
    name: str
    cfg: object
    slices: list = field(default_factory=list)      # [(Relayout, KernelCode)]
    stage: int = 0                                   # SPM row of the staging buffer

    def place(self, spm_off: dict, acc_off: dict, i: int) -> None:
        self.stage = spm_off[f"k{i}.stage"]
        for _, kc in self.slices:
            kc.spm_a, kc.spm_w = spm_off[f"k{i}.A"], spm_off[f"k{i}.W"]
            kc.spm_o, kc.acc_base = spm_off[f"k{i}.O"], acc_off[f"k{i}.acc"]

    def emit(self, e: ProgramBuilder) -> None:
        cfg = self.cfg
        for s, (rl, kc) in enumerate(self.slices):
            e.comment(f"kernel {self.name}: slice {s}, its weights relaid from the activation")
            e.emit("fence", "all")
            if rl.bound is not None:
                self._bounded_relayout(e, rl)
            for r0, rows, loads in ([] if rl.bound is not None else rl.chunks):
                for g, ln, est in loads:
                    rep = None
                    if g.count > 1:
                        e.emit("loop", L0, g.count, s0=g.lstride, s1=g.dstride)
                        rep = L0
                    e.emit("dma.ld", spm[self.stage + g.local - r0], dram[g.dram], rows=g.rows, len=ln,
                           rstride=g.rstride, estride=est, rep=rep)
                e.emit("fence", "load")
                e.emit("dma.st", dram[rl.scratch + r0 * rl.cols], spm[self.stage], rows=rows, len=rl.cols,
                       rstride=rl.cols)
                e.emit("fence", "store")
            tokens = Tokens()
            emit_kernel(e, kc, cfg, tokens)
            tokens.release(e)
        e.emit("fence", "all")

    def _bounded_relayout(self, e: ProgramBuilder, rl: Relayout) -> None:
        """The first ceil(n / cols) N tiles' weight rows: N tile 0's loads and one store over a loop whose
        trip count is a register (``GK.NT``, before the GEMM sets it)."""
        reg, tile_rows, step, per, fewest = rl.bound
        e.comment(f"max({fewest}, ceil(r{reg.n} / {per})) tiles of keys")
        e.emit("addi", GK.NT, reg, per - 1)
        e.emit("seti", GK.TMP, per.bit_length() - 1)
        e.emit("sra", GK.NT, GK.NT, GK.TMP)
        if fewest > 1:
            enough = e.fresh_label("units")
            e.emit("seti", GK.TMP, fewest)
            e.emit("bge", GK.NT, GK.TMP, enough)
            e.emit("seti", GK.NT, fewest)
            e.place(enough)
        (_, _, loads), = rl.chunks
        for g, ln, est in loads:
            e.emit("loop", L0, GK.NT, s0=tile_rows, s1=step)
            rep = L0
            if g.count > 1:
                e.emit("loop", L1, g.count, s0=g.lstride, s1=g.dstride)
                rep = (L0, 2)
            e.emit("dma.ld", spm[self.stage + g.local], dram[g.dram], rows=g.rows, len=ln, rstride=g.rstride,
                   estride=est, rep=rep)
        e.emit("fence", "load")
        e.emit("loop", L0, GK.NT, s0=tile_rows * rl.cols, s1=tile_rows)
        e.emit("dma.st", dram[rl.scratch], spm[self.stage], rows=tile_rows, len=rl.cols, rstride=rl.cols, rep=L0)
        e.emit("fence", "store")


def _relayout_rows(what: str, pb: np.ndarray, order: np.ndarray, kts: list, R: int, C: int) -> list:
    """(scratch row, source address, len, estride) of every used row of the tiled weight layout of ``pb``."""
    K, N = pb.shape
    NT = cdiv(N, C)
    pb = pb[order]
    rows = []
    for nt in range(NT):
        n0, ln = nt * C, min(C, N - nt * C)
        for kt, t in enumerate(kts):
            for i in range(t.klen):
                src = pb[t.k0 + i, n0:n0 + ln]
                d = np.diff(src)
                est = int(d[0]) if len(d) else 1
                if len(d) and (not np.all(d == est) or not -_ESTRIDE_MAX <= est < _ESTRIDE_MAX):
                    raise ChipCompileError(f"{what}: a row of the weight operand is not one strided DRAM run "
                                           "(the relayout cannot move it with one DMA row)")
                rows.append(((nt * len(kts) + kt) * R + i, int(src[0]), ln, est))
    return rows


def _loads(sel: list) -> list:
    """The (Group, len, estride) loads of rows ``sel`` (sorted by scratch row; ``Group.local``: scratch row)."""
    loads, j = [], 0
    while j < len(sel):          # consecutive scratch rows with one len/estride: one group list
        h = j + 1
        while h < len(sel) and sel[h][0] == sel[h - 1][0] + 1 and sel[h][2:] == sel[j][2:]:
            h += 1
        local0 = sel[j][0]
        for g in groups(np.array([r[1] for r in sel[j:h]], np.int64)):
            loads.append((Group(local0 + g.local, g.dram, g.rows, g.rstride, g.count, g.lstride, g.dstride),
                          sel[j][2], sel[j][3]))
        j = h
    return loads


def _relayout(what: str, pb: np.ndarray, order: np.ndarray, kts: list, R: int, C: int, scratch: int,
              stage: int = STAGE_ROWS) -> Relayout:
    """The loads that put ``pb`` (K x N DRAM addresses of the slice of b) in tile order at ``scratch``, in chunks
    of ``stage`` staging rows."""
    rows = _relayout_rows(what, pb, order, kts, R, C)
    chunks = []
    total = cdiv(pb.shape[1], C) * len(kts) * R
    for r0 in range(0, total, stage):
        r1 = min(total, r0 + stage)
        chunks.append((r0, r1 - r0, _loads([r for r in rows if r0 <= r[0] < r1])))
    return Relayout(scratch, C, chunks)


def _bounded_relayout(what: str, pb: np.ndarray, order: np.ndarray, kts: list, R: int, C: int, scratch: int,
                      reg: Reg, over: str) -> Relayout:
    """The relayout of a key-bounded product (the keys ``over`` its N tiles, "n", or its K tiles, "k"): every
    unit's rows are unit 0's shifted by one DRAM step, so one nest over a register-counted loop moves the
    first ones."""
    rows = _relayout_rows(what, pb, order, kts, R, C)
    pbo = pb[order]
    if over == "n":
        unit_rows, units, per, fewest = len(kts) * R, cdiv(pb.shape[1], C), C, 1
        step = int(pbo[0, C] - pbo[0, 0]) if units > 1 else 0
    else:
        unit_rows, units, per, fewest = R, len(kts), R, 2
        step = int(pbo[R, 0] - pbo[0, 0]) if units > 1 and pb.shape[0] > R else 0
    first = [r for r in rows if r[0] < unit_rows]
    want = [(r + u * unit_rows, a + u * step, ln, est) for u in range(units) for r, a, ln, est in first]
    if unit_rows > STAGE_ROWS or sorted(rows) != sorted(want) or (over == "k" and cdiv(pb.shape[1], C) != 1):
        raise ChipCompileError(f"{what}: key_bound: the tiles of keys of the weight operand are not one DRAM "
                               "pattern shifted by a constant step, so one loop cannot relay the first n keys")
    return Relayout(scratch, C, [(0, unit_rows, _loads(first))], (reg, unit_rows, step, per, fewest))


def _spm_rows(tl, R: int) -> int:
    """SPM rows of a slice's GEMM: its A buffers, weight slots and output staging."""
    return tl.nbuf * tl.KT * tl.Mt + tl.NB * R + 2 * tl.Mt


def lower_bmm(cfg, s: Schedule, i: int, k: BmmKernel, qk, tensor_addr: dict, put, key_reg: int | None = None,
              over: str = "n") -> tuple:
    """(BmmCode, per-slice KernelInfo arguments, SPM buffers, ACC buffers) of the program's code ``i``; ``put(array)``
    places a constant in DRAM and returns its address. ``key_reg``: keys bounded by the count n in that scalar
    register (``compiler.lower.keybound``) run along the output columns (``over="n"``: only the first
    ceil(n / cols) N tiles are relaid and computed) or along the summed axis (``"k"``: the first
    max(2, ceil(n / rows)) K tiles)."""
    R, C = cfg.rows, cfg.cols
    what = f"kernel {k.name} ({k.S} GEMMs {k.M}x{k.K}x{k.N} of two activations)"
    ta, tb, to = s.tensors[k.a], s.tensors[k.b], s.tensors[k.out]
    offs = from_base(to.phys_offsets(to.identity()), to.shape, k)           # (S, M, N) element offsets
    if k.N > 1 and not np.all(np.diff(offs, axis=2) == 1):
        raise ChipCompileError(f"{what}: output columns are not contiguous in DRAM")
    code = BmmCode(k.name, cfg)
    infos, tl_max = [], None
    sc_addr = put(pad_lanes(qk.scale, C))
    stage = 0
    for sl in range(k.S):
        P = ta.phys_offsets(k.ga[sl])
        order, kts, rows = k_tiles(P, R, what)
        a_rows = tensor_addr[k.a] + rows
        out_rows = tensor_addr[k.out] + offs[sl][:, 0]
        if not stage:       # the staging rows: a slice's weights, or chunks of an eighth of a small SPM
            stage = min(STAGE_ROWS, len(kts) * R * cdiv(k.N, C))
            if key_reg is None:
                stage = min(stage, max(R, cfg.spm_rows // 8 // R * R))
        tl = choose(cfg, k.M, len(kts), k.N, True, common_period(a_rows, out_rows), what)
        if cfg.spm_bank_rows > 1 or _spm_rows(tl, R) + stage + zero_rows(cfg) > cfg.spm_rows:
            tl = choose(cfg.replace(spm_rows=cfg.spm_rows - stage - zero_rows(cfg)), k.M, len(kts), k.N, True,
                        common_period(a_rows, out_rows), what)
        NT = cdiv(k.N, C)
        scratch = put(np.zeros(NT * len(kts) * R * C, np.int8))
        pb = tensor_addr[k.b] + tb.phys_offsets(k.gb[sl])
        if key_reg is None:
            rl = _relayout(what, pb, order, kts, R, C, scratch, stage)
        else:
            tl = replace(tl, order="mnk", nbuf=min(tl.nbuf, 2))          # what the emitter runs
            per = C if over == "n" else R
            if over == "n" and (k.N % C or tl.MT != 1 or not bounded_ok(tl, False, C)):
                raise ChipCompileError(f"{what}: key_bound needs whole N tiles of {C} keys, one M tile and "
                                       f"weights loaded per N tile (got N = {k.N}, {tl.MT} M tiles, NB = {tl.NB})")
            if over == "k" and (not np.array_equal(order, np.arange(k.K)) or not bounded_k_ok(kts, tl, R)):
                raise ChipCompileError(f"{what}: key_bound needs K tiles of {R} keys in order, one N and one M "
                                       f"tile, a weight slot per K tile (got {len(kts)} K tiles, NB = {tl.NB})")
            if per & (per - 1):
                raise ChipCompileError(f"{what}: key_bound needs tiles of a power-of-two number of keys "
                                       f"(config {cfg.name!r}: {per})")
            rl = _bounded_relayout(what, pb, order, kts, R, C, scratch, Reg(key_reg), over)
        bound = {} if key_reg is None else {"nbound" if over == "n" else "kbound": Reg(key_reg)}
        kc = KernelCode(f"{k.name}.s{sl}", tl, kts, a_rows, out_rows, True, scratch, None, sc_addr, qk.shift,
                        qk.lo, k.relu, 0, 0, 0, 0, **bound)
        code.slices.append((rl, kc))
        infos.append((f"{k.name}.s{sl}", k.M, k.K, k.N, tl, len(kts), k.M * k.K * k.N))
        if tl_max is None:
            tl_max = [0, 0, 0, 0]
        tl_max = [max(tl_max[0], tl.nbuf * tl.KT * tl.Mt), max(tl_max[1], tl.NB * R), max(tl_max[2], 2 * tl.Mt),
                  max(tl_max[3], tl.acc_rows)]
    if key_reg is not None:                         # a bounded relayout moves a unit of keys' rows at once
        stage = max(stage, rl.bound[1])
    steps = (2 * i, 2 * i + 1)                     # the code is fenced before and after (emit_program)
    # the load unit writes the A and weight tiles and the staging rows (the relayout is fenced), the VPU the
    # output staging: on banked SPM the first three may share banks (compiler.lower.planner)
    spm_bufs = [Buffer(f"k{i}.A", tl_max[0], *steps, "load"), Buffer(f"k{i}.W", tl_max[1], *steps, "load"),
                Buffer(f"k{i}.O", tl_max[2], *steps, "vpu"), Buffer(f"k{i}.stage", max(stage, 1), *steps, "load")]
    acc_bufs = [Buffer(f"k{i}.acc", tl_max[3], *steps)]
    return code, infos, spm_bufs, acc_bufs


__all__ = ["BmmCode", "Relayout", "lower_bmm"]
