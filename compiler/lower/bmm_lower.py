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

from dataclasses import dataclass, field

import numpy as np

from isa.builder import ProgramBuilder, dram, spm
from isa.ints import cdiv
from isa.regs import L0

from compiler.lower.bmm import BmmKernel, from_base
from compiler.lower.emit import KernelCode, Tokens, emit_kernel
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
            for r0, rows, loads in rl.chunks:
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


def _relayout(what: str, pb: np.ndarray, order: np.ndarray, kts: list, R: int, C: int, scratch: int) -> Relayout:
    """The loads that put ``pb`` (K x N DRAM addresses of the slice of b) in tile order at ``scratch``."""
    K, N = pb.shape
    NT = cdiv(N, C)
    pb = pb[order]
    rows = []                          # (scratch row, source address, len, estride) of every used row
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
    chunks = []
    total = NT * len(kts) * R
    for r0 in range(0, total, STAGE_ROWS):
        r1 = min(total, r0 + STAGE_ROWS)
        sel = [r for r in rows if r0 <= r[0] < r1]
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
        chunks.append((r0, r1 - r0, loads))
    return Relayout(scratch, C, chunks)


def lower_bmm(cfg, s: Schedule, i: int, k: BmmKernel, qk, tensor_addr: dict, put) -> tuple:
    """(BmmCode, per-slice KernelInfo arguments, SPM buffers, ACC buffers) of the program's code ``i``; ``put(array)``
    places a constant in DRAM and returns its address."""
    R, C = cfg.rows, cfg.cols
    what = f"kernel {k.name} ({k.S} GEMMs {k.M}x{k.K}x{k.N} of two activations)"
    ta, tb, to = s.tensors[k.a], s.tensors[k.b], s.tensors[k.out]
    offs = from_base(to.phys_offsets(to.identity()), to.shape, k)           # (S, M, N) element offsets
    if k.N > 1 and not np.all(np.diff(offs, axis=2) == 1):
        raise ChipCompileError(f"{what}: output columns are not contiguous in DRAM")
    code = BmmCode(k.name, cfg)
    infos, tl_max = [], None
    sc_addr = put(pad_lanes(qk.scale, C))
    for sl in range(k.S):
        P = ta.phys_offsets(k.ga[sl])
        order, kts, rows = k_tiles(P, R, what)
        a_rows = tensor_addr[k.a] + rows
        out_rows = tensor_addr[k.out] + offs[sl][:, 0]
        tl = choose(cfg, k.M, len(kts), k.N, True, common_period(a_rows, out_rows), what)
        NT = cdiv(k.N, C)
        scratch = put(np.zeros(NT * len(kts) * R * C, np.int8))
        pb = tensor_addr[k.b] + tb.phys_offsets(k.gb[sl])
        rl = _relayout(what, pb, order, kts, R, C, scratch)
        kc = KernelCode(f"{k.name}.s{sl}", tl, kts, a_rows, out_rows, True, scratch, None, sc_addr, qk.shift,
                        qk.lo, k.relu, 0, 0, 0, 0)
        code.slices.append((rl, kc))
        infos.append((f"{k.name}.s{sl}", k.M, k.K, k.N, tl, len(kts), k.M * k.K * k.N))
        if tl_max is None:
            tl_max = [0, 0, 0, 0]
        tl_max = [max(tl_max[0], tl.nbuf * tl.KT * tl.Mt), max(tl_max[1], tl.NB * R), max(tl_max[2], 2 * tl.Mt),
                  max(tl_max[3], tl.acc_rows)]
    stage = min(STAGE_ROWS, max(len(code.slices[0][1].ktiles), 1) * R * cdiv(k.N, C))
    steps = (2 * i, 2 * i + 1)                     # the code is fenced before and after (emit_program)
    spm_bufs = [Buffer(f"k{i}.A", tl_max[0], *steps), Buffer(f"k{i}.W", tl_max[1], *steps),
                Buffer(f"k{i}.O", tl_max[2], *steps), Buffer(f"k{i}.stage", stage, *steps)]
    acc_bufs = [Buffer(f"k{i}.acc", tl_max[3], *steps)]
    return code, infos, spm_bufs, acc_bufs


__all__ = ["BmmCode", "Relayout", "lower_bmm"]
