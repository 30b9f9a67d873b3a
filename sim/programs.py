"""Program generators: an int8 GEMM of any shape on any config (a reference for the compiler).

``gemm(M, K, N, config)`` returns a ``Gemm``: the ``Program`` (built with ``isa.builder``; registers
``isa.regs.RefGemm``), its listing and the DRAM layout. ``run_gemm(A, B, config)`` runs it on a
``Chip`` and returns C and the Stats.

DRAM layout (all row-major, little-endian)::

    A  at a_addr: M x K int8                    (default 0)
    B  at b_addr: K x N int8                    (default: after A, 64-byte aligned)
    C  at c_addr: M x N int32                   (default: after B, 64-byte aligned)

Schedule (weight stationary, ``R x Cc`` = rows x cols of the array, KT = ceil(K/R) K tiles,
NT = ceil(N/Cc) N tiles): for each M tile (Mt rows of A), for each N tile nt, for each K tile kt:
``mxu.lw`` the R x Cc weight tile B[kt, nt] (``k`` = rows of B left in the tile, the rest zero),
then ``mxu.mm``/``mxu.mma`` all Mt rows of A's K tile kt into the N tile's ACC region (lanes of A
beyond K are zero-filled by ``len`` of the load). SPM holds A's K tiles of the current M tile
(``KT*Mt`` rows; two buffers when there are several M tiles, so the next M tile loads while
this one computes) and a ring of NB weight-tile slots; ACC holds two Mt-row regions, so the
store of one N tile overlaps the next tile's matmuls. Edges (K, N or M not a multiple of the
tile) use ``len``/``k``/``rows``/``n`` of a separate copy of the code.

Tokens (every wait is matched with exactly one earlier signal, in order):

* load -> mxu: every weight-tile load and every A load signals the MXU; ``mxu.lw`` waits for its
  tile, the first N tile's matmuls wait for their A tile (loads are issued in the order the MXU
  uses them: W(kt), A(kt), W(kt+1), ...).
* mxu -> load: each ``mxu.lw`` frees its slot; the load that refills the slot NB tiles later
  waits for it. NB seed tokens come from NB empty weight loads (``k=0``) at the start, so NB (and
  KT) can be at most ``isa.timing.TOKEN_MAX``: ``K <= TOKEN_MAX * rows`` (``gemm`` rejects a larger K
  before building anything). The load -> mxu counter stays below it in every case measured (at most
  218 tokens, for KT = 255 on ``base`` with M = 112: a load moves a row per cycle at most, about as
  fast as the MXU takes rows), though that is measured, not proven.
* mxu -> store: the last matmul of an N tile signals the store of that tile.
* store -> mxu: the store of a tile frees its ACC region; the first matmul of the tile that
  reuses the region (two tiles later) waits for it (two seed tokens from empty stores).
* store -> load (several M tiles only): the last store of an M tile frees its A buffer; an empty
  "gate" load (``rows=0``, ``wait=store``) ahead of the M tile's loads waits for it.

Repeat registers: the weight tiles of every N tile but the first load with one ``dma.ld`` over a
``loop`` nest (the first N tile interleaves them with the A loads, in MXU order); the seeds use
nests too. The N-tile and M-tile loops are scalar loops with register-indexed addresses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from isa.builder import ProgramBuilder, acc, dram, spm
from isa.config import ChipConfig
from isa.errors import TetrachipError
from isa.ints import align_up, cdiv
from isa.program import DRAM_ALIGN, Program
from isa.regs import L0, L1, RefGemm as G
from isa.table import SPACE_BYTES, Space
from isa.timing import TOKEN_MAX

if TYPE_CHECKING:
    from .chip import Chip
    from .stats import Stats


class GemmError(TetrachipError):
    """A GEMM that cannot be laid out on this config (too large for SPM, ACC or DRAM)."""


@dataclass
class Gemm:
    M: int
    K: int
    N: int
    config: ChipConfig
    a_addr: int
    b_addr: int
    c_addr: int
    text: str               #: the program's listing
    program: Program
    tiles: dict = field(default_factory=dict)

    def write_inputs(self, chip: Chip, A: ArrayLike, B: ArrayLike) -> None:
        A, B = np.asarray(A, np.int8), np.asarray(B, np.int8)
        if A.shape != (self.M, self.K) or B.shape != (self.K, self.N):
            raise GemmError(f"inputs {A.shape} @ {B.shape} do not match the GEMM {self.M}x{self.K}x{self.N}")
        chip.write_dram(self.a_addr, A)
        chip.write_dram(self.b_addr, B)

    def read_output(self, chip: Chip) -> np.ndarray:
        return chip.read_dram(self.c_addr, self.M * self.N, np.int32).reshape(self.M, self.N).astype(np.int32)

    @property
    def layout(self) -> dict:
        return {"A": {"addr": self.a_addr, "shape": [self.M, self.K], "dtype": "int8"},
                "B": {"addr": self.b_addr, "shape": [self.K, self.N], "dtype": "int8"},
                "C": {"addr": self.c_addr, "shape": [self.M, self.N], "dtype": "int32"}}


#: bytes of an element of C: an ACC lane
_CB = SPACE_BYTES[Space.ACC]


def gemm(M: int, K: int, N: int, config: str | Path | ChipConfig = "base", *, a_addr: int = 0,
         b_addr: int | None = None, c_addr: int | None = None) -> Gemm:
    """The program of ``C[M,N] = A[M,K] @ B[K,N]`` (int8 x int8 -> int32) for ``config``."""
    cfg = ChipConfig.load(config)
    if min(M, K, N) < 1:
        raise GemmError(f"GEMM dimensions must be >= 1, got {M}x{K}x{N}")
    R, Cc = cfg.rows, cfg.cols
    b_addr = align_up(a_addr + M * K, DRAM_ALIGN) if b_addr is None else b_addr
    c_addr = align_up(b_addr + K * N, DRAM_ALIGN) if c_addr is None else c_addr
    if c_addr + _CB * M * N > cfg.dram_bytes:
        raise GemmError(f"GEMM {M}x{K}x{N} needs {c_addr + _CB * M * N} bytes of DRAM; config {cfg.name!r} "
                        f"has {cfg.dram_bytes}")
    if cfg.scalar_regs < G.NEEDED or cfg.loop_regs < 2:
        raise GemmError(f"the GEMM program needs {G.NEEDED} scalar and 2 loop registers; config {cfg.name!r} has "
                        f"{cfg.scalar_regs} and {cfg.loop_regs}")
    KT, NT = cdiv(K, R), cdiv(N, Cc)
    NB = align_up(4, KT)                        # weight slots: a multiple of KT, at least 4
    if NB > TOKEN_MAX:          # one mxu -> load token per free weight slot: NB of them at the start
        raise GemmError(f"K = {K} is too large for config {cfg.name!r}: {KT} K tiles of {R} rows need {NB} "
                        f"weight-slot tokens, more than a token counter holds (TOKEN_MAX = {TOKEN_MAX}); "
                        f"K <= {TOKEN_MAX * R} on this config (split the GEMM along K and add the results)")
    w_rows = NB * R
    if KT * M + w_rows <= cfg.spm_rows and 2 * M <= cfg.acc_rows:
        Mt, nbuf = M, 1
    else:
        Mt, nbuf = min((cfg.spm_rows - w_rows) // (2 * KT), cfg.acc_rows // 2, M), 2
        if Mt < 1:
            raise GemmError(f"K = {K} is too large for config {cfg.name!r}: {KT} K tiles of A do not fit SPM")
    MT = cdiv(M, Mt)
    W_SPM = nbuf * KT * Mt
    e = ProgramBuilder(cfg)
    e.comment(f"int8 GEMM {M}x{K}x{N} on {cfg.name} ({R}x{Cc}): KT={KT} NT={NT} M tiles of {Mt} rows "
              f"({MT}), {NB} weight slots, {nbuf} A buffer(s)")
    e.comment(f"DRAM: A at {a_addr:#x} (M x K int8), B at {b_addr:#x} (K x N int8), C at {c_addr:#x} (M x N int32)")
    # seeds: NB free weight slots (mxu -> load), two free ACC regions (store -> mxu [and -> load])
    e.emit("loop", L1, NB)
    e.emit("mxu.lw", spm[0], k=0, rep=L1, signal="load")
    e.emit("loop", L1, 2)
    e.emit("dma.st", dram[c_addr], acc[0], rows=0, rep=L1, signal="mxu|load" if MT > 1 else "mxu")
    for r, v in ((G.WSLOT, 0), (G.ACC, 0), (G.ABUF, 0), (G.AROW, 0), (G.CROW, 0), (G.MTROWS, Mt),
                 (G.WEND, NB * R), (G.ABUFSZ, KT * Mt)):
        e.emit("seti", r, v)
    g = dict(cfg=cfg, M=M, K=K, N=N, KT=KT, NT=NT, NB=NB, Mt=Mt, MT=MT, W_SPM=W_SPM, a=a_addr, b=b_addr,
             c=c_addr, nbuf=nbuf)
    MTf, Medge = divmod(M, Mt)
    if MTf > 1:
        e.emit("seti", G.MT, 0)
        e.emit("seti", G.MTEND, MTf)
        top = e.label("mtile")
        _m_tile(e, g, Mt)
        e.emit("addi", G.MT, G.MT, 1)
        e.emit("blt", G.MT, G.MTEND, top)
    elif MTf == 1:
        _m_tile(e, g, Mt)
    if Medge:
        _m_tile(e, g, Medge)
    e.emit("halt")
    if len(e) > cfg.imem_words:
        raise GemmError(f"GEMM {M}x{K}x{N} needs {len(e)} instructions; config {cfg.name!r} holds "
                        f"{cfg.imem_words}")
    prog = e.build(f"<gemm {M}x{K}x{N}>")
    prog.manifest = {"kind": "gemm", "M": M, "K": K, "N": N,
                     "inputs": {"A": [a_addr, [M, K], "int8"], "B": [b_addr, [K, N], "int8"]},
                     "outputs": {"C": [c_addr, [M, N], "int32"]}}
    tiles = {"KT": KT, "NT": NT, "Mt": Mt, "MT": MT, "NB": NB, "a_buffers": nbuf}
    return Gemm(M, K, N, cfg, a_addr, b_addr, c_addr, e.text(), prog, tiles)


def _m_tile(e: ProgramBuilder, g: dict, mrows: int) -> None:
    """One M tile of ``mrows`` rows: every N tile (first, middle ones in a loop, edge)."""
    cfg, N, MT = g["cfg"], g["N"], g["MT"]
    Cc = cfg.cols
    NTf, Nedge = divmod(N, Cc)
    e.comment(f"M tile of {mrows} rows")
    if MT > 1:  # the gate: this A buffer's previous M tile has been stored
        e.emit("dma.ld", spm[0], dram[0], rows=0, wait="store")
    e.emit("seti", G.NCOL, 0)
    e.emit("seti", G.CCOL, 0)
    _n_tile(e, g, mrows, Cc if NTf else Nedge, with_a=True, last_of_m=(NTf + (Nedge > 0) == 1))
    if NTf > 1:
        top = e.fresh_label("ntile")
        e.emit("seti", G.NT, 1)
        e.emit("seti", G.NTEND, NTf)
        e.place(top)
        _n_tile(e, g, mrows, Cc, with_a=False, last_of_m=(Nedge == 0), last_guard=True)
        e.emit("addi", G.NT, G.NT, 1)
        e.emit("blt", G.NT, G.NTEND, top)
    if NTf and Nedge:
        _n_tile(e, g, mrows, Nedge, with_a=False, last_of_m=True)
    # next M tile: A and C offsets, the other A buffer
    e.emit("addi", G.AROW, G.AROW, mrows * g["K"])
    e.emit("addi", G.CROW, G.CROW, mrows * N * _CB)
    if g["nbuf"] == 2:
        e.emit("sub", G.ABUF, G.ABUFSZ, G.ABUF)


def _n_tile(e: ProgramBuilder, g: dict, mrows: int, ncols: int, *, with_a: bool, last_of_m: bool,
            last_guard: bool = False) -> None:
    """One N tile: its weight loads (and A loads in the first N tile), lw/mm pairs, the store."""
    cfg, K, N, KT, Mt, MT = g["cfg"], g["K"], g["N"], g["KT"], g["Mt"], g["MT"]
    R, Cc, W = cfg.rows, cfg.cols, g["W_SPM"]
    KTf, Kedge = divmod(K, R)
    if not with_a and KTf:
        # all full weight tiles of this N tile: one load over a loop nest, each instance its own tokens
        e.emit("loop", L0, KTf, s0=R, s1=R * N)
        e.emit("dma.ld", spm[W + G.WSLOT], dram[g["b"] + G.NCOL], rows=R, len=ncols, rstride=N,
               rep=L0, wait="mxu", signal="mxu")
    for kt in range(KT):
        klen = min(R, K - kt * R)
        wrow = spm[W + kt * R + G.WSLOT]
        if with_a or klen < R:
            e.emit("dma.ld", wrow, dram[g["b"] + kt * R * N + G.NCOL], rows=klen, len=ncols, rstride=N,
                   wait="mxu", signal="mxu")
        if with_a:
            e.emit("dma.ld", spm[kt * Mt + G.ABUF], dram[g["a"] + kt * R + G.AROW], rows=mrows, len=klen,
                   rstride=K, signal="mxu")
        e.emit("mxu.lw", wrow, k=klen, wait="load", signal="load")
        waits = (["load"] if with_a else []) + (["store"] if kt == 0 else [])
        op = "mxu.mm" if kt == 0 else "mxu.mma"
        e.emit(op, acc[G.ACC], spm[kt * Mt + G.ABUF], n=mrows, wait=waits,
               signal="store" if kt == KT - 1 else None)

    # store the N tile (frees its ACC region: -> mxu; the M tile's last store frees its A buffer: -> load)
    def store(signal: str) -> None:
        e.emit("dma.st", dram[g["c"] + G.C], acc[G.ACC], rows=mrows, len=ncols, rstride=_CB * N, wait="mxu",
               signal=signal)
    e.emit("add", G.C, G.CROW, G.CCOL)
    if MT > 1 and last_of_m and last_guard:
        # a loop body shared by several N tiles: only its final iteration is the M tile's last store
        skip, done = e.fresh_label("st"), e.fresh_label("sd")
        e.emit("addi", G.NT, G.NT, 1)
        e.emit("blt", G.NT, G.NTEND, skip)
        e.emit("addi", G.NT, G.NT, -1)
        store("mxu|load")
        e.emit("jmp", done)
        e.place(skip)
        e.emit("addi", G.NT, G.NT, -1)
        store("mxu")
        e.place(done)
    else:
        store("mxu|load" if MT > 1 and last_of_m else "mxu")
    # next N tile: B and C column offsets, the other ACC region, the next group of weight slots
    e.emit("addi", G.NCOL, G.NCOL, Cc)
    e.emit("addi", G.CCOL, G.CCOL, _CB * Cc)
    e.emit("sub", G.ACC, G.MTROWS, G.ACC)
    if g["NB"] > KT:
        wrap = e.fresh_label("w")
        e.emit("addi", G.WSLOT, G.WSLOT, KT * R)
        e.emit("blt", G.WSLOT, G.WEND, wrap)
        e.emit("seti", G.WSLOT, 0)
        e.place(wrap)


def run_gemm(A: ArrayLike, B: ArrayLike, config: str | Path | ChipConfig = "base", *, trace: bool = False,
             max_cycles: int | None = None) -> tuple[np.ndarray, Stats, Chip]:
    """Run ``A @ B`` on a fresh Chip; returns ``(C, stats, chip)``."""
    from .chip import Chip
    A, B = np.asarray(A, np.int8), np.asarray(B, np.int8)
    gm = gemm(A.shape[0], A.shape[1], B.shape[1], config)
    chip = Chip(gm.config, trace=trace)
    chip.load(gm.program)
    gm.write_inputs(chip, A, B)
    stats = chip.run(max_cycles)
    return gm.read_output(chip), stats, chip
