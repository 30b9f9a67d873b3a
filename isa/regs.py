"""Registers as values, and the scalar-register convention: which register holds what, written once.

``Reg(n)`` is scalar register ``rn`` and ``LoopReg(n)`` loop register ``ln`` as the program builder
(``isa.builder``) takes them: a register is never a bare int, so an immediate and a register cannot
be confused. ``base + reg`` is an indexed address (``Addr``) for ``spm[...]``/``acc[...]``/``dram[...]``.

The convention (r0 reads as zero; the host writes ``DYN_REG`` before launch, ``Chip.set_args``):

=========  ===================================================================================
r15        ``DYN_REG``: the value of a program's symbolic dimension, written by the host (the batch
           ``n`` of ``compiler.lower.dynamic``, the sequence length ``T`` of the transformer block,
           the key count ``n`` of a key-bounded attention, ``compiler.lower.keybound``);
           in a cond-in-loop without a symbolic dimension, ``BRANCH_TRIPS``
r14        ``TRIP_REG``: control flow's trip counter / branch flag (``compiler.lower.control_*``);
           ``NQ_REG`` in the transformer block (active query blocks, ``ceil(T / cols)``)
r1..r13    a compiled GEMM kernel's registers (``GemmKernel``, ``compiler.lower.emit``); an
           elementwise kernel uses ``r1..r3``, one register per input from ``r4`` and the registers
           after them up to ``r13`` as loop counters (``Elementwise``)
r1..r15    the reference GEMM program of ``sim.programs`` (``RefGemm``), which is a whole program
r1, r2     control flow's glue between bodies (``ControlGlue``: a predicate's reduction and threshold,
           a loop's trip bound, a scanned row's offset); bodies are fenced, so these are free there
r1..r13    the transformer block's attention loop and temporaries (``TransformerBlock``)
r1..r11    a compiled table lookup (``Gather``, ``compiler.lower.gather_lower``), fenced on both sides
r1..r4     the hand-built convergence loop (``Converge``, ``compiler.lower.control_converge``)
=========  ===================================================================================

GEMM kernels leave r14 and r15 alone; an elementwise kernel with more than 10 inputs reaches them,
and the symbolic dimension and control flow refuse such a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import index
from typing import SupportsIndex


def _number(n: object, kind: str) -> int:
    if isinstance(n, bool) or not isinstance(n, SupportsIndex) or index(n) < 0:
        raise ValueError(f"a {kind} register number is an int >= 0, got {n!r}")
    return index(n)


@dataclass(frozen=True)
class Reg:
    """Scalar register ``rn``."""

    n: int

    __array_ufunc__ = None          # ``numpy_int + reg`` is an Addr, not an array

    def __post_init__(self):
        object.__setattr__(self, "n", _number(self.n, "scalar"))

    def __add__(self, imm: SupportsIndex) -> "Addr":
        return Addr(index(imm), self)

    __radd__ = __add__

    def __repr__(self) -> str:
        return f"r{self.n}"


@dataclass(frozen=True)
class LoopReg:
    """Loop (repeat) register ``ln``."""

    n: int

    def __post_init__(self):
        object.__setattr__(self, "n", _number(self.n, "loop"))

    def __repr__(self) -> str:
        return f"l{self.n}"


@dataclass(frozen=True)
class Addr:
    """An address ``imm + reg`` (``reg`` None: the immediate alone)."""

    imm: int
    reg: Reg | None = None

    __array_ufunc__ = None

    def __add__(self, other: "Reg | SupportsIndex") -> "Addr":
        if isinstance(other, Reg):
            if self.reg is not None:
                raise ValueError(f"an address takes one index register: {self!r} + {other!r}")
            return Addr(self.imm, other)
        return Addr(self.imm + index(other), self.reg)

    __radd__ = __add__

    def __repr__(self) -> str:
        return f"{self.imm}" if self.reg is None else f"{self.reg!r} + {self.imm}"


ZERO = Reg(0)                   #: reads as zero; writes are dropped
L0, L1, L2, L3 = (LoopReg(k) for k in range(4))     #: every config has at least 3 loop registers

DYN_REG = Reg(15)               #: the symbolic dimension's value at launch, written by the host
TRIP_REG = Reg(14)              #: control flow: trip counter / branch flag
BRANCH_TRIPS = Reg(15)          #: cond-in-loop: trips that took the then branch (no symbolic dimension there)
NQ_REG = Reg(14)                #: transformer block: active query blocks, ceil(T / cols)


class GemmKernel:
    """A compiled GEMM kernel (``compiler.lower.emit``): r1..r13; kernels leave r14, r15 alone."""

    WSLOT = Reg(1)      #: first SPM row of the current weight-slot group
    WCOL = Reg(2)       #: DRAM byte offset of the N tile's weight columns
    ACC = Reg(3)        #: ACC region of the N tile (0 or Mt: two regions)
    OBUF = Reg(4)       #: SPM staging buffer of the int8 output (0 or Mt)
    OCOL = Reg(5)       #: DRAM byte offset of the N tile's output columns (M tile offset included)
    BIAS = Reg(6)       #: DRAM byte offset of the N tile's bias
    SCALE = Reg(7)      #: ACC row offset of the N tile's per-channel scales
    NT = Reg(8)         #: N-tile loop counter
    TMP = Reg(9)        #: temporary (loop bounds, region sizes)
    AOFF = Reg(10)      #: DRAM byte offset of the M tile's A rows
    OOFF = Reg(11)      #: DRAM byte offset of the M tile's output rows
    ABUF = Reg(12)      #: SPM row offset of the M tile's A buffer
    MT = Reg(13)        #: M-tile loop counter
    #: scalar registers a config needs for compiled kernels (r0..r13)
    NEEDED = 14


class Elementwise:
    """A compiled elementwise kernel (``compiler.lower.emit``): r1..r3, then one register per input."""

    MT = Reg(1)         #: the counter of the tile loop (the nest's outermost level)
    TMP = Reg(2)        #: the counter of the tile loop nest's second level
    OUT = Reg(3)        #: DRAM byte offset of the output tile
    FIRST_INPUT = 4     #: input i's DRAM byte offset is in r(FIRST_INPUT + i)

    @classmethod
    def inputs(cls, k: int) -> list[Reg]:
        return [Reg(cls.FIRST_INPUT + i) for i in range(k)]

    @classmethod
    def nest(cls, k: int, scalar_regs: int) -> list[Reg]:
        """The registers after ``k`` inputs' registers, up to r13 (``TRIP_REG`` and ``DYN_REG`` are left alone):
        the counters of a loop nest over tiles (tiles of an image row, rows of an image...)."""
        return [Reg(n) for n in range(cls.FIRST_INPUT + k, min(scalar_regs, TRIP_REG.n))]


class RefGemm:
    """The reference GEMM program of ``sim.programs`` (a whole program: r1..r15)."""

    WSLOT = Reg(1)      #: SPM row offset of the current weight-slot group
    NCOL = Reg(2)       #: DRAM byte offset of the N tile's columns of B
    ACC = Reg(3)        #: ACC region of the N tile (0 or Mt)
    C = Reg(4)          #: DRAM byte offset of the C tile (row + column)
    ABUF = Reg(5)       #: SPM row offset of the A buffer
    AROW = Reg(6)       #: DRAM byte offset of the M tile's rows of A
    CROW = Reg(7)       #: DRAM byte offset of the M tile's rows of C
    NT = Reg(8)         #: N-tile loop counter
    NTEND = Reg(9)      #: N-tile loop bound
    MT = Reg(10)        #: M-tile loop counter
    MTEND = Reg(11)     #: M-tile loop bound
    CCOL = Reg(12)      #: DRAM byte offset of the N tile's columns of C
    MTROWS = Reg(13)    #: rows of an M tile (the ACC region size)
    WEND = Reg(14)      #: SPM rows of the weight-slot ring
    ABUFSZ = Reg(15)    #: SPM rows of one A buffer
    #: scalar registers the program needs (r0..r15)
    NEEDED = 16


class Gather:
    """A compiled table lookup (``compiler.lower.gather_lower``): r1..r11, fenced before and after."""

    TOK = Reg(1)        #: token counter in the chunk (its index's ACC row)
    SROW = Reg(2)       #: SPM row offset of the token's staged row
    ROW = Reg(3)        #: the token's index, then its table row's DRAM byte offset
    V = Reg(4)          #: rows of the table (the zero row's index)
    RB = Reg(5)         #: DRAM bytes of one table row
    N = Reg(6)          #: tokens in the chunk
    IOFF = Reg(7)       #: DRAM byte offset of the chunk's indices
    OOFF = Reg(8)       #: DRAM byte offset of the chunk's output rows
    CH = Reg(9)         #: chunk loop counter
    TMP = Reg(10)       #: chunk loop bound
    ROFF = Reg(11)      #: DRAM byte offset of the chunk's output-row offsets (rows not evenly spaced)


class ControlGlue:
    """The glue code of control flow between bodies (``compiler.lower.control_glue``): the bodies
    are fenced and keep nothing in registers across it, so the glue uses r1, r2 freely."""

    A = Reg(1)          #: a predicate's reduction (``sld``), a loop's trip bound, a scanned row's DRAM offset
    B = Reg(2)          #: a predicate's threshold, the bytes of a scanned row


class TransformerBlock:
    """The transformer block (``compiler.lower.transformer_emit``, a whole program): ``DYN_REG`` holds
    T, ``NQ_REG`` the active query blocks; the attention loop's registers and the temporaries."""

    KBLOCK = Reg(1)     #: attention: the key block
    SHIFT = Reg(3)      #: log2(cols), turning T into query blocks
    VALID = Reg(4)      #: attention: T - cols * key block, the valid lanes of the key block
    KT_OFF = Reg(5)     #: attention: DRAM byte offset of the key block in K^T
    V_OFF = Reg(6)      #: attention: DRAM byte offset of the key block in V
    KEY0 = Reg(7)       #: causal attention: the key block's first key
    ROWS = Reg(12)      #: attention rows of one query block
    NROWS = Reg(13)     #: attention rows of the active query blocks


class Converge:
    """The hand-built convergence loop (``compiler.lower.control_converge.until_converged``)."""

    TRIPS = Reg(1)      #: trips run
    TOL = Reg(2)        #: the tolerance of the change
    MAX_ITER = Reg(3)   #: the trip limit
    CHANGE = Reg(4)     #: the largest change of the last trip (``sld`` from the VPU's reduction)
