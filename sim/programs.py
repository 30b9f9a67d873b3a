"""Program generators: an int8 GEMM of any shape on any config (a reference for the compiler).

``gemm(M, K, N, config)`` returns a ``Gemm``: the assembly text, the assembled ``Program`` and
the DRAM layout. ``run_gemm(A, B, config)`` runs it on a ``Chip`` and returns C and the Stats.

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
  waits for it. NB seed tokens come from NB empty weight loads (``k=0``) at the start.
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

import numpy as np

from isa.asm import assemble
from isa.config import ChipConfig
from isa.errors import TetrachipError
from isa.program import Program

# scalar registers used by the generated code
R_WSLOT, R_NCOL, R_ACC, R_C, R_ABUF, R_AROW, R_CROW, R_NT, R_NTEND, R_MT, R_MTEND, R_CCOL, R_MTROWS, \
    R_WEND, R_ABUFSZ = range(1, 16)


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
    text: str
    program: Program
    tiles: dict = field(default_factory=dict)

    def write_inputs(self, chip, A, B) -> None:
        A, B = np.asarray(A, np.int8), np.asarray(B, np.int8)
        if A.shape != (self.M, self.K) or B.shape != (self.K, self.N):
            raise GemmError(f"inputs {A.shape} @ {B.shape} do not match the GEMM {self.M}x{self.K}x{self.N}")
        chip.write_dram(self.a_addr, A)
        chip.write_dram(self.b_addr, B)

    def read_output(self, chip) -> np.ndarray:
        return chip.read_dram(self.c_addr, self.M * self.N, np.int32).reshape(self.M, self.N).astype(np.int32)

    @property
    def layout(self) -> dict:
        return {"A": {"addr": self.a_addr, "shape": [self.M, self.K], "dtype": "int8"},
                "B": {"addr": self.b_addr, "shape": [self.K, self.N], "dtype": "int8"},
                "C": {"addr": self.c_addr, "shape": [self.M, self.N], "dtype": "int32"}}


def _align(x: int, a: int = 64) -> int:
    return -(-x // a) * a


def gemm(M: int, K: int, N: int, config="base", *, a_addr: int = 0, b_addr: int | None = None,
         c_addr: int | None = None) -> Gemm:
    """The program of ``C[M,N] = A[M,K] @ B[K,N]`` (int8 x int8 -> int32) for ``config``."""
    cfg = ChipConfig.load(config)
    if min(M, K, N) < 1:
        raise GemmError(f"GEMM dimensions must be >= 1, got {M}x{K}x{N}")
    R, Cc = cfg.rows, cfg.cols
    b_addr = _align(a_addr + M * K) if b_addr is None else b_addr
    c_addr = _align(b_addr + K * N) if c_addr is None else c_addr
    if c_addr + 4 * M * N > cfg.dram_bytes:
        raise GemmError(f"GEMM {M}x{K}x{N} needs {c_addr + 4 * M * N} bytes of DRAM; config {cfg.name!r} "
                        f"has {cfg.dram_bytes}")
    if cfg.scalar_regs < 16 or cfg.loop_regs < 2:
        raise GemmError(f"the GEMM program needs 16 scalar and 2 loop registers; config {cfg.name!r} has "
                        f"{cfg.scalar_regs} and {cfg.loop_regs}")
    KT, NT = -(-K // R), -(-N // Cc)
    NB = KT * -(-4 // KT)                       # weight slots: a multiple of KT, at least 4
    w_rows = NB * R
    if KT * M + w_rows <= cfg.spm_rows and 2 * M <= cfg.acc_rows:
        Mt, nbuf = M, 1
    else:
        Mt, nbuf = min((cfg.spm_rows - w_rows) // (2 * KT), cfg.acc_rows // 2, M), 2
        if Mt < 1:
            raise GemmError(f"K = {K} is too large for config {cfg.name!r}: {KT} K tiles of A do not fit SPM")
    MT = -(-M // Mt)
    W_SPM = nbuf * KT * Mt
    e = _Emitter()
    e.comment(f"int8 GEMM {M}x{K}x{N} on {cfg.name} ({R}x{Cc}): KT={KT} NT={NT} M tiles of {Mt} rows "
              f"({MT}), {NB} weight slots, {nbuf} A buffer(s)")
    e.comment(f"DRAM: A at {a_addr:#x} (M x K int8), B at {b_addr:#x} (K x N int8), C at {c_addr:#x} (M x N int32)")
    # seeds: NB free weight slots (mxu -> load), two free ACC regions (store -> mxu [and -> load])
    e("loop l1, %d" % NB)
    e("mxu.lw spm[0], k=0, rep=l1:1, signal=load")
    e("loop l1, 2")
    e("dma.st dram[%d], acc[0], rows=0, rep=l1:1, signal=%s" % (c_addr, "mxu|load" if MT > 1 else "mxu"))
    for r, v in ((R_WSLOT, 0), (R_ACC, 0), (R_ABUF, 0), (R_AROW, 0), (R_CROW, 0), (R_MTROWS, Mt),
                 (R_WEND, NB * R), (R_ABUFSZ, KT * Mt)):
        e(f"seti r{r}, {v}")
    g = dict(cfg=cfg, M=M, K=K, N=N, KT=KT, NT=NT, NB=NB, Mt=Mt, MT=MT, W_SPM=W_SPM, a=a_addr, b=b_addr,
             c=c_addr, nbuf=nbuf)
    MTf, Medge = divmod(M, Mt)
    if MTf > 1:
        e(f"seti r{R_MT}, 0")
        e(f"seti r{R_MTEND}, {MTf}")
        e.label("mtile")
        _m_tile(e, g, Mt)
        e(f"addi r{R_MT}, r{R_MT}, 1")
        e(f"blt r{R_MT}, r{R_MTEND}, mtile")
    elif MTf == 1:
        _m_tile(e, g, Mt)
    if Medge:
        _m_tile(e, g, Medge)
    e("halt")
    text = e.text()
    prog = assemble(text, cfg, f"<gemm {M}x{K}x{N}>")
    if len(prog) > cfg.imem_words:
        raise GemmError(f"GEMM {M}x{K}x{N} needs {len(prog)} instructions; config {cfg.name!r} holds "
                        f"{cfg.imem_words}")
    prog.manifest = {"kind": "gemm", "M": M, "K": K, "N": N,
                     "inputs": {"A": [a_addr, [M, K], "int8"], "B": [b_addr, [K, N], "int8"]},
                     "outputs": {"C": [c_addr, [M, N], "int32"]}}
    tiles = {"KT": KT, "NT": NT, "Mt": Mt, "MT": MT, "NB": NB, "a_buffers": nbuf}
    return Gemm(M, K, N, cfg, a_addr, b_addr, c_addr, text, prog, tiles)


class _Emitter:
    def __init__(self):
        self.lines: list[str] = []
        self.n = 0

    def __call__(self, s: str) -> None:
        self.lines.append("        " + s)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def comment(self, s: str) -> None:
        self.lines.append("; " + s)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _m_tile(e: _Emitter, g: dict, mrows: int) -> None:
    """One M tile of ``mrows`` rows: every N tile (first, middle ones in a loop, edge)."""
    cfg, N, MT = g["cfg"], g["N"], g["MT"]
    Cc = cfg.cols
    NTf, Nedge = divmod(N, Cc)
    e.comment(f"M tile of {mrows} rows")
    if MT > 1:  # the gate: this A buffer's previous M tile has been stored
        e("dma.ld spm[0], dram[0], rows=0, wait=store")
    e(f"seti r{R_NCOL}, 0")
    e(f"seti r{R_CCOL}, 0")
    _n_tile(e, g, mrows, Cc if NTf else Nedge, with_a=True, last_of_m=(NTf + (Nedge > 0) == 1))
    if NTf > 1:
        top = e.fresh("ntile")
        e(f"seti r{R_NT}, 1")
        e(f"seti r{R_NTEND}, {NTf}")
        e.label(top)
        _n_tile(e, g, mrows, Cc, with_a=False, last_of_m=(Nedge == 0), last_guard=True)
        e(f"addi r{R_NT}, r{R_NT}, 1")
        e(f"blt r{R_NT}, r{R_NTEND}, {top}")
    if NTf and Nedge:
        _n_tile(e, g, mrows, Nedge, with_a=False, last_of_m=True)
    # next M tile: A and C offsets, the other A buffer
    e(f"addi r{R_AROW}, r{R_AROW}, {mrows * g['K']}")
    e(f"addi r{R_CROW}, r{R_CROW}, {mrows * N * 4}")
    if g["nbuf"] == 2:
        e(f"sub r{R_ABUF}, r{R_ABUFSZ}, r{R_ABUF}")


def _n_tile(e: _Emitter, g: dict, mrows: int, ncols: int, *, with_a: bool, last_of_m: bool,
            last_guard: bool = False) -> None:
    """One N tile: its weight loads (and A loads in the first N tile), lw/mm pairs, the store."""
    cfg, K, N, KT, Mt, MT = g["cfg"], g["K"], g["N"], g["KT"], g["Mt"], g["MT"]
    R, Cc, W = cfg.rows, cfg.cols, g["W_SPM"]
    KTf, Kedge = divmod(K, R)
    if not with_a and KTf:
        # all full weight tiles of this N tile: one load over a loop nest, each instance its own tokens
        e(f"loop l0, {KTf}, s0={R}, s1={R * N}")
        e(f"dma.ld spm[{W}+r{R_WSLOT}], dram[{g['b']}+r{R_NCOL}], rows={R}, len={ncols}, rstride={N}, "
          f"rep=l0:1, wait=mxu, signal=mxu")
    for kt in range(KT):
        klen = min(R, K - kt * R)
        wrow = W + kt * R
        if with_a or klen < R:
            e(f"dma.ld spm[{wrow}+r{R_WSLOT}], dram[{g['b'] + kt * R * N}+r{R_NCOL}], rows={klen}, "
              f"len={ncols}, rstride={N}, wait=mxu, signal=mxu")
        if with_a:
            e(f"dma.ld spm[{kt * Mt}+r{R_ABUF}], dram[{g['a'] + kt * R}+r{R_AROW}], rows={mrows}, "
              f"len={klen}, rstride={K}, signal=mxu")
        e(f"mxu.lw spm[{wrow}+r{R_WSLOT}], k={klen}, wait=load, signal=load")
        waits = (["load"] if with_a else []) + (["store"] if kt == 0 else [])
        mods = []
        if waits:
            mods.append("wait=" + "|".join(waits))
        if kt == KT - 1:
            mods.append("signal=store")
        op = "mxu.mm" if kt == 0 else "mxu.mma"
        e(f"{op} acc[r{R_ACC}], spm[{kt * Mt}+r{R_ABUF}], n={mrows}" + "".join(", " + m for m in mods))
    # store the N tile (frees its ACC region: -> mxu; the M tile's last store frees its A buffer: -> load)
    e(f"add r{R_C}, r{R_CROW}, r{R_CCOL}")
    store = f"dma.st dram[{g['c']}+r{R_C}], acc[r{R_ACC}], rows={mrows}, len={ncols}, rstride={4 * N}, wait=mxu"
    if MT > 1 and last_of_m and last_guard:
        # a loop body shared by several N tiles: only its final iteration is the M tile's last store
        skip, done = e.fresh("st"), e.fresh("sd")
        e(f"addi r{R_NT}, r{R_NT}, 1")
        e(f"blt r{R_NT}, r{R_NTEND}, {skip}")
        e(f"addi r{R_NT}, r{R_NT}, -1")
        e(store + ", signal=mxu|load")
        e(f"jmp {done}")
        e.label(skip)
        e(f"addi r{R_NT}, r{R_NT}, -1")
        e(store + ", signal=mxu")
        e.label(done)
    else:
        e(store + (", signal=mxu|load" if MT > 1 and last_of_m else ", signal=mxu"))
    # next N tile: B and C column offsets, the other ACC region, the next group of weight slots
    e(f"addi r{R_NCOL}, r{R_NCOL}, {Cc}")
    e(f"addi r{R_CCOL}, r{R_CCOL}, {4 * Cc}")
    e(f"sub r{R_ACC}, r{R_MTROWS}, r{R_ACC}")
    if g["NB"] > KT:
        wrap = e.fresh("w")
        e(f"addi r{R_WSLOT}, r{R_WSLOT}, {KT * R}")
        e(f"blt r{R_WSLOT}, r{R_WEND}, {wrap}")
        e(f"seti r{R_WSLOT}, 0")
        e.label(wrap)


def run_gemm(A, B, config="base", *, trace: bool = False, max_cycles: int | None = None):
    """Run ``A @ B`` on a fresh Chip; returns ``(C, stats, chip)``."""
    from .chip import Chip
    A, B = np.asarray(A, np.int8), np.asarray(B, np.int8)
    gm = gemm(A.shape[0], A.shape[1], B.shape[1], config)
    chip = Chip(gm.config, trace=trace)
    chip.load(gm.program)
    gm.write_inputs(chip, A, B)
    stats = chip.run(max_cycles)
    return gm.read_output(chip), stats, chip
