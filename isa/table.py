"""The instruction table: the one place where opcodes, fields and their widths are written.

Everything else is derived from ``INSTRUCTIONS`` and ``FORMATS``: the encoder and decoder
(``isa.encoding``), the assembler and disassembler (``isa.asm``), the simulator's
dispatch, the RTL decoder layout and ``docs/isa.md`` (``isa.docgen``).

Words are ``WORD_BITS`` wide. The 8-bit opcode sits in bits [7:0]; a format's fields follow,
packed from bit 8 upwards in the order listed; the bits above the last field are reserved and
must be zero. A field width is either a number or the name of a width derived from the
ChipConfig (``derived_widths``), so the layout is computed per config and checked
(``check_layout``): opcodes unique, fields non-overlapping, every bit accounted for.

Repeat registers: a queued instruction names a loop nest ``rep=lB:D`` (loop registers
``lB .. lB+D-1``, ``lB`` outermost). Its k-th memory operand, in the order the assembly
syntax lists them, advances by the loop registers' stride slot k (see docs/isa.md).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .ints import clog2

WORD_BITS = 192
WORD_BYTES = WORD_BITS // 8
OPCODE_BITS = 8
#: Deepest loop nest one instruction may name.
MAX_REPEAT_DEPTH = 4
#: Stride slots per loop register: one per memory operand of an instruction (dst, a, b).
STRIDE_SLOTS = 3
#: Entries of the VPU lookup table (int8 -> int8).
LUT_ENTRIES = 256


class Unit(enum.IntEnum):
    """Execution units. SCALAR is the issue stage itself; the others are fed by queues."""

    SCALAR = 0
    LOAD = 1    #: DMA DRAM -> SPM/ACC
    STORE = 2   #: DMA SPM/ACC -> DRAM
    MXU = 3     #: systolic array: weight loads and matmuls
    VPU = 4     #: lane-wise vector unit
    LTX = 5     #: link transmit
    LRX = 6     #: link receive


QUEUED_UNITS = tuple(u for u in Unit if u is not Unit.SCALAR)
#: the link units: a config without link ports (``links = 0``) has none of their instructions
LINK_UNITS = (Unit.LTX, Unit.LRX)


class Space(enum.IntEnum):
    """On-chip memories addressed by rows; the lane type of each is ``SPACE_DTYPE``."""

    SPM = 0
    ACC = 1


#: Lane type of each memory: SPM int8, ACC int32 (little-endian when DMA moves it to DRAM).
#: Element bytes and lane bits of a memory derive from it. These tables are keyed by Space and
#: typed by int: a Space is an int, and an instruction's decoded space field finds its entry.
SPACE_DTYPE: dict[int, np.dtype] = {Space.SPM: np.dtype(np.int8), Space.ACC: np.dtype("<i4")}
#: Bytes of one element of each memory (a DMA element, a lane's share of link and byte counts).
SPACE_BYTES: dict[int, int] = {s: dt.itemsize for s, dt in SPACE_DTYPE.items()}
#: Bits of one lane of each memory (the RTL's row memories and ports).
SPACE_BITS: dict[int, int] = {s: 8 * b for s, b in SPACE_BYTES.items()}
#: Each memory's name as assembly writes it (``spm[row]``, ``acc[row]``) and statistics count it.
SPACE_NAME: dict[int, str] = {s: s.name.lower() for s in Space}


class SrcMode(enum.IntEnum):
    """The VPU's b operand: a row of SPM or ACC, a scalar register, or an immediate (broadcast)."""

    SPM = 0
    ACC = 1
    REG = 2
    IMM = 3


class CountMode(enum.IntEnum):
    """Where a loop register's trip count comes from."""

    IMM = 0
    REG = 1


class ScaleMode(enum.IntEnum):
    """Where requantization takes its scale: an immediate, a scalar register, or per lane from an ACC row."""

    IMM = 0
    REG = 1
    ROW = 2


class Round(enum.IntEnum):
    """Rounding of the requantizing right shift."""

    FLOOR = 0
    HALF_UP = 1
    HALF_EVEN = 2


#: The requantizer's registers at reset, keyed by vqcfg's field names in field order (vqcfg's
#: operands default to them): no shift, no zero point, the clamp spanning an SPM lane, floor.
QCFG_RESET: dict[str, int] = {"shift": 0, "zp": 0, "lo": int(np.iinfo(SPACE_DTYPE[Space.SPM]).min),
                              "hi": int(np.iinfo(SPACE_DTYPE[Space.SPM]).max), "round": int(Round.FLOOR)}


class Sync(enum.IntEnum):
    """Tokens per instance of a repeated instruction (EACH) or once around the whole nest (ONCE)."""

    EACH = 0
    ONCE = 1


class Sizes(Hashable, Protocol):
    """The sizes of a chip that field widths and limits derive from: an ``isa.config.ChipConfig``.

    The config checks its layout against this table when it is made, so the table names only
    what it reads of one and does not import it (hashable: ``layout`` is cached per config).
    """

    @property
    def name(self) -> str: ...
    @property
    def rows(self) -> int: ...
    @property
    def cols(self) -> int: ...
    @property
    def spm_rows(self) -> int: ...
    @property
    def acc_rows(self) -> int: ...
    @property
    def dram_bytes(self) -> int: ...
    @property
    def imem_words(self) -> int: ...
    @property
    def scalar_regs(self) -> int: ...
    @property
    def loop_regs(self) -> int: ...
    @property
    def links(self) -> int: ...


def derived_widths(cfg: Sizes) -> dict[str, int]:
    """Field widths that depend on the ChipConfig."""
    laddr = clog2(max(cfg.spm_rows, cfg.acc_rows))
    return {
        "laddr": laddr,                                  # an SPM or ACC row
        "count": laddr + 1,                              # rows moved by one instance
        "daddr": clog2(cfg.dram_bytes),                  # a DRAM byte
        "pc": clog2(cfg.imem_words),                     # an instruction index
        "sreg": clog2(cfg.scalar_regs),                  # a scalar register
        "lreg": clog2(cfg.loop_regs),                    # a loop register
        "lane": clog2(max(cfg.rows, cfg.cols) + 1),      # a lane index or a lane count 0..cols
        "port": clog2(cfg.links),                        # a link port
        "units": len(Unit),                              # a set of units (bit u = Unit u)
    }


# --------------------------------------------------------------------------------------------
# Fields and formats
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    name: str
    width: int | str          #: bits, or a key of derived_widths()
    signed: bool = False
    doc: str = ""
    #: legal values, checked on encode and decode: ("enum", EnumClass) | ("max", config_attr, offset)
    #: | ("max_int", n); None = every value of the width
    limit: tuple[Any, ...] | None = None
    #: accept unsigned spellings of a signed field (a 32-bit register value written in hex)
    wrap: bool = False

    def bits(self, cfg: Sizes) -> int:
        return self.width if isinstance(self.width, int) else derived_widths(cfg)[self.width]

    def max_value(self, cfg: Sizes) -> int | None:
        """Largest legal value beyond what the width allows, or None."""
        if self.limit is None:
            return None
        kind = self.limit[0]
        if kind == "enum":
            return max(self.limit[1])
        if kind == "max":
            return getattr(cfg, self.limit[1]) + self.limit[2]
        if kind == "max_int":
            return self.limit[1]
        raise AssertionError(kind)


def _f(name: str, width: int | str, signed: bool = False, doc: str = "", limit: tuple[Any, ...] | None = None,
       wrap: bool = False) -> Field:
    return Field(name, width, signed, doc, limit, wrap)


# Reused fields -------------------------------------------------------------------------------
REP_BASE = _f("rep_base", "lreg", doc="outermost loop register of the nest", limit=("max", "loop_regs", -1))
REP_DEPTH = _f("rep_depth", 3, doc="loop nest depth 0..MAX_REPEAT_DEPTH (0: issue once)",
               limit=("max_int", MAX_REPEAT_DEPTH))
SYNC = _f("sync", 1, doc="0 each: tokens per instance; 1 once: wait before the first, signal after the last",
          limit=("enum", Sync))
WAIT = _f("wait", "units", doc="units whose token this instruction consumes before it starts")
SIGNAL = _f("signal", "units", doc="units to which it sends a token when it retires")
QHDR = (REP_BASE, REP_DEPTH, SYNC, WAIT, SIGNAL)


def _x(addr: str) -> Field:
    """Index register of an address field: the address is imm + that scalar register (read at issue)."""
    return _f("x" + addr, "sreg", doc=f"scalar register added to {addr} (r0: none)",
              limit=("max", "scalar_regs", -1))


def _reg(name, doc=""):
    return _f(name, "sreg", doc=doc, limit=("max", "scalar_regs", -1))


FORMATS: dict[str, tuple[Field, ...]] = {
    "none": (),
    "seti": (_reg("rd"), _f("imm", 32, True, "value", wrap=True)),
    "alu": (_reg("rd"), _reg("rs1"), _reg("rs2")),
    "alui": (_reg("rd"), _reg("rs1"), _f("imm", 32, True, "value", wrap=True)),
    "branch": (_reg("rs1"), _reg("rs2"), _f("target", "pc", doc="instruction index",
                                             limit=("max", "imem_words", -1))),
    "jump": (_f("target", "pc", doc="instruction index", limit=("max", "imem_words", -1)),),
    "loop": (_f("lr", "lreg", doc="loop register", limit=("max", "loop_regs", -1)),
             _f("cmode", 1, doc="0: count is an immediate; 1: count names a scalar register",
                limit=("enum", CountMode)),
             _f("count", 32, doc="trip count, or the scalar register holding it"),
             _f("s0", 32, True, "stride of the 1st memory operand"),
             _f("s1", 32, True, "stride of the 2nd memory operand"),
             _f("s2", 32, True, "stride of the 3rd memory operand")),
    "smem": (_reg("rd", "scalar register loaded or stored"),
             _f("space", 1, doc="0 SPM, 1 ACC", limit=("enum", Space)),
             _f("addr", "laddr", doc="row"), _x("addr"),
             _f("lane", "lane", doc="lane", limit=("max", "cols", -1)),
             WAIT, SIGNAL),
    "fence": (_f("units", "units", doc="units to drain"),),
    "dma": QHDR + (
        _f("space", 1, doc="0 SPM (int8 elements), 1 ACC (int32 elements)", limit=("enum", Space)),
        _f("local", "laddr", doc="first SPM/ACC row"), _x("local"),
        _f("dram", "daddr", doc="DRAM byte address of element 0 of row 0"), _x("dram"),
        _f("rows", "count", doc="rows moved"),
        _f("len", "lane", doc="elements per row (lanes len..cols-1 of a loaded row are zeroed)",
           limit=("max", "cols", 0)),
        _f("rstride", 32, True, "DRAM bytes between rows"),
        _f("estride", 16, True, "DRAM bytes between elements of a row")),
    "lw": QHDR + (
        _f("src", "laddr", doc="first SPM row of the weight tile"), _x("src"),
        _f("k", "lane", doc="weight rows loaded (rows k..ROWS-1 become zero)", limit=("max", "rows", 0))),
    "mm": QHDR + (
        _f("dst", "laddr", doc="first ACC row written"), _x("dst"),
        _f("src", "laddr", doc="first SPM row streamed"), _x("src"),
        _f("n", "count", doc="rows streamed")),
    "vbin": QHDR + (
        _f("dspace", 1, doc="destination memory", limit=("enum", Space)),
        _f("dst", "laddr", doc="first destination row"), _x("dst"),
        _f("aspace", 1, doc="memory of operand a", limit=("enum", Space)),
        _f("a", "laddr", doc="first row of operand a"), _x("a"),
        _f("bmode", 2, doc="operand b: 0 SPM row, 1 ACC row, 2 scalar register, 3 immediate",
           limit=("enum", SrcMode)),
        _f("b", 32, True, "row, register or immediate of operand b"), _x("b"),
        _f("n", "count", doc="rows processed")),
    "vun": QHDR + (
        _f("dspace", 1, doc="destination memory", limit=("enum", Space)),
        _f("dst", "laddr", doc="first destination row"), _x("dst"),
        _f("aspace", 1, doc="memory of operand a", limit=("enum", Space)),
        _f("a", "laddr", doc="first row of operand a"), _x("a"),
        _f("n", "count", doc="rows processed")),
    "vlutld": QHDR + (_f("src", "laddr", doc="first SPM row of the 256-byte table"), _x("src")),
    "vqcfg": QHDR + (
        _f("shift", 6, doc="right shift after the scale multiply"),
        _f("zp", 8, True, "output zero point added after the shift"),
        _f("lo", 8, True, "clamp minimum"),
        _f("hi", 8, True, "clamp maximum"),
        _f("round", 2, doc="0 floor, 1 half up, 2 half to even", limit=("enum", Round))),
    "vreq": QHDR + (
        _f("dst", "laddr", doc="first SPM row written (int8)"), _x("dst"),
        _f("src", "laddr", doc="first ACC row read (int32)"), _x("src"),
        _f("smode", 2, doc="scale: 0 immediate, 1 scalar register, 2 per lane from an ACC row",
           limit=("enum", ScaleMode)),
        _f("scale", 32, True, "immediate scale (int16 range), register, or ACC row"), _x("scale"),
        _f("n", "count", doc="rows processed")),
    "link": QHDR + (
        _f("port", "port", doc="link port", limit=("max", "links", -1)),
        _f("space", 1, doc="0 SPM rows, 1 ACC rows", limit=("enum", Space)),
        _f("addr", "laddr", doc="first row"), _x("addr"),
        _f("n", "count", doc="rows sent or received")),
}


# --------------------------------------------------------------------------------------------
# Assembly syntax of operands (how fields are written)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Operand:
    """One operand as written in assembly, mapped onto one or more fields.

    kinds: reg "r3", lreg "l1", imm expression, target label-or-expression,
    mem "spm[e]"/"acc[e]" (fields: space, addr; ``space`` fixes the memory),
    dram "dram[e]", src (VPU b: mem, register or immediate), scale (imm, register or acc[e]),
    count (loop trip count: register or immediate), units "load|mxu" / "none" / "all",
    enum (one of ``names``).
    ``key`` makes it a keyword operand ``key=value``; ``default`` makes it optional.
    """

    kind: str
    fields: tuple[str, ...]
    key: str | None = None
    #: an int, or "cols" / "rows" (from the config) or "esize" (element bytes of the mem operand)
    default: int | str | None = None
    space: Space | None = None
    names: tuple[str, ...] = ()


def _op(kind, *fields, key=None, default=None, space=None, names=()):
    return Operand(kind, tuple(fields), key, default, space, names)


MEM = _op("mem", "space", "addr", "xaddr")
UNIT_NAMES = tuple(u.name.lower() for u in Unit)


# --------------------------------------------------------------------------------------------
# The instructions
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Instr:
    mnemonic: str
    opcode: int
    unit: Unit
    format: str
    syntax: tuple[Operand, ...]
    doc: str
    #: address fields in stride-slot order (the k-th memory operand uses loop stride slot k)
    slots: tuple[str, ...] = ()
    #: what the instruction reads/writes, for docs: e.g. "dram -> spm/acc"
    group: str = ""

    @property
    def fields(self) -> tuple[Field, ...]:
        return FORMATS[self.format]

    @property
    def queued(self) -> bool:
        return self.unit is not Unit.SCALAR

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def _i(mnemonic, opcode, unit, fmt, syntax, doc, slots=(), group=""):
    return Instr(mnemonic, opcode, unit, fmt, tuple(syntax), doc, tuple(slots), group)


S, Q = Unit.SCALAR, Unit
RD, RS1, RS2 = _op("reg", "rd"), _op("reg", "rs1"), _op("reg", "rs2")
N_KW = _op("imm", "n", key="n", default=1)
VDST, VA = _op("mem", "dspace", "dst", "xdst"), _op("mem", "aspace", "a", "xa")

_ALU = [("add", "rd = rs1 + rs2"), ("sub", "rd = rs1 - rs2"), ("mul", "rd = low 32 bits of rs1 * rs2"),
        ("and", "rd = rs1 & rs2"), ("or", "rd = rs1 | rs2"), ("xor", "rd = rs1 ^ rs2"),
        ("sll", "rd = rs1 << (rs2 & 31)"), ("srl", "rd = rs1 >> (rs2 & 31), logical"),
        ("sra", "rd = rs1 >> (rs2 & 31), arithmetic"), ("slt", "rd = 1 if rs1 < rs2 (signed) else 0")]
_BRANCH = [("beq", "=="), ("bne", "!="), ("blt", "<"), ("bge", ">=")]
_VBIN = [("vadd", "a + b"), ("vsub", "a - b"), ("vmul", "low 32 bits of a * b"), ("vmin", "min(a, b)"),
         ("vmax", "max(a, b)"), ("vshl", "a << (b & 31)"), ("vsra", "a >> (b & 31), arithmetic")]
_VUN = [("vmov", "a"), ("vrelu", "max(a, 0)"), ("vabs", "|a| (wrapping at -2**31)"),
        ("vrsum", "sum of the lanes of a, in every lane"), ("vrmax", "max of the lanes of a, in every lane"),
        ("vrmin", "min of the lanes of a, in every lane"),
        ("vlut", "LUT[a & 0xff]: the loaded lookup table at the low byte of a, sign-extended")]

INSTRUCTIONS: tuple[Instr, ...] = (
    _i("nop", 0x00, S, "none", [], "Do nothing for one issue cycle.", group="control"),
    _i("halt", 0x01, S, "none", [],
       "Stop fetching; the chip is done once every unit has drained (see the timing contract).",
       group="control"),
    _i("seti", 0x02, S, "seti", [RD, _op("imm", "imm")], "rd = imm (32 bits).", group="scalar"),
    *[_i(m, 0x03 + k, S, "alu", [RD, RS1, RS2], d + " (32-bit, wrapping).", group="scalar")
      for k, (m, d) in enumerate(_ALU)],
    _i("addi", 0x0E, S, "alui", [RD, RS1, _op("imm", "imm")], "rd = rs1 + imm (32-bit, wrapping).",
       group="scalar"),
    *[_i(m, 0x10 + k, S, "branch", [RS1, RS2, _op("target", "target")],
         f"Jump to target if rs1 {c} rs2 (signed).", group="control")
      for k, (m, c) in enumerate(_BRANCH)],
    _i("jmp", 0x14, S, "jump", [_op("target", "target")], "Jump to target.", group="control"),
    _i("loop", 0x15, S, "loop",
       [_op("lreg", "lr"), _op("count", "cmode", "count"),
        _op("imm", "s0", key="s0", default=0), _op("imm", "s1", key="s1", default=0),
        _op("imm", "s2", key="s2", default=0)],
       "Set loop register lr: its trip count (an immediate, or the value a scalar register holds "
       "when this instruction issues) and the strides added to the 1st, 2nd and 3rd memory operand "
       "of an instruction per iteration of this loop.", group="repeat"),
    _i("sld", 0x16, S, "smem", [RD, MEM, _op("imm", "lane")],
       "rd = lane of a SPM (sign-extended int8) or ACC (int32) row, read through dma.st's read port "
       "of that memory: a dma.st with rows of the same memory in flight at once is a race.", group="scalar"),
    _i("sst", 0x17, S, "smem", [_op("reg", "rd"), MEM, _op("imm", "lane")],
       "Write the scalar register into a lane of a SPM (saturated to int8) or ACC row.",
       group="scalar"),
    _i("fence", 0x18, S, "fence", [_op("units", "units")],
       "Stall issue until the named units have empty queues and have retired everything.",
       group="sync"),
    _i("dma.ld", 0x20, Q.LOAD, "dma",
       [_op("mem", "space", "local", "xlocal"), _op("dram", "dram", "xdram"), _op("imm", "rows", key="rows", default=1),
        _op("imm", "len", key="len", default="cols"), _op("imm", "rstride", key="rstride", default=0),
        _op("imm", "estride", key="estride", default="esize")],
       "Load rows x len elements from DRAM (element e of row r at dram + r*rstride + e*estride; "
       "int8 into SPM, little-endian int32 into ACC) into rows local..local+rows-1, lanes 0..len-1; "
       "lanes len..cols-1 are zeroed. len defaults to cols, estride to the element size. "
       "len = 0 (or rows = 0) moves, checks and zeroes nothing.",
       slots=("local", "dram"), group="dma"),
    _i("dma.st", 0x21, Q.STORE, "dma",
       [_op("dram", "dram", "xdram"), _op("mem", "space", "local", "xlocal"), _op("imm", "rows", key="rows", default=1),
        _op("imm", "len", key="len", default="cols"), _op("imm", "rstride", key="rstride", default=0),
        _op("imm", "estride", key="estride", default="esize")],
       "Store lanes 0..len-1 of rows local..local+rows-1 (int8 from SPM, little-endian int32 "
       "from ACC) to DRAM at dram + r*rstride + e*estride. len = 0 (or rows = 0) moves and checks "
       "nothing; an instance whose range check fails writes nothing.",
       slots=("dram", "local"), group="dma"),
    _i("mxu.lw", 0x30, Q.MXU, "lw",
       [_op("mem", "src", "xsrc", space=Space.SPM), _op("imm", "k", key="k", default="rows")],
       "Load the weight tile W[0..ROWS-1][0..COLS-1] from SPM rows src..src+k-1 (rows k.. are zero) "
       "into the shadow weight buffer; the next mxu.mm/mma uses it. k defaults to ROWS.",
       slots=("src",), group="mxu"),
    _i("mxu.mm", 0x31, Q.MXU, "mm",
       [_op("mem", "dst", "xdst", space=Space.ACC), _op("mem", "src", "xsrc", space=Space.SPM), N_KW],
       "For i in 0..n-1: ACC[dst+i] = SPM[src+i][0..ROWS-1] @ W (int8 x int8 -> int32).",
       slots=("dst", "src"), group="mxu"),
    _i("mxu.mma", 0x32, Q.MXU, "mm",
       [_op("mem", "dst", "xdst", space=Space.ACC), _op("mem", "src", "xsrc", space=Space.SPM), N_KW],
       "For i in 0..n-1: ACC[dst+i] += SPM[src+i][0..ROWS-1] @ W (int32, wrapping).",
       slots=("dst", "src"), group="mxu"),
    *[_i(m, 0x40 + k, Q.VPU, "vbin", [VDST, VA, _op("src", "bmode", "b", "xb"), N_KW],
         f"For i in 0..n-1, lane-wise: dst[i] = {d}. Operands are widened to int32; "
         "b is a row (advancing with i), a scalar register or an immediate (broadcast); "
         "results written to SPM saturate to int8.",
         slots=("dst", "a", "b"), group="vpu")
      for k, (m, d) in enumerate(_VBIN)],
    *[_i(m, 0x48 + k, Q.VPU, "vun", [VDST, VA, N_KW],
         f"For i in 0..n-1, lane-wise: dst[i] = {d}; results written to SPM saturate to int8.",
         slots=("dst", "a"), group="vpu")
      for k, (m, d) in enumerate(_VUN)],
    _i("vlutld", 0x50, Q.VPU, "vlutld", [_op("mem", "src", "xsrc", space=Space.SPM)],
       "Load the 256-entry int8 lookup table from the first 256 bytes of SPM rows src.. "
       "(entry j = byte j, row-major).", slots=("src",), group="vpu"),
    _i("vqcfg", 0x51, Q.VPU, "vqcfg",
       [*[_op("imm", k, key=k, default=QCFG_RESET[k]) for k in ("shift", "zp", "lo", "hi")],
        _op("enum", "round", key="round", default=QCFG_RESET["round"], names=tuple(r.name.lower() for r in Round))],
       "Set the requantizer's shift, zero point, clamp bounds and rounding for later vreq.",
       group="vpu"),
    _i("vreq", 0x52, Q.VPU, "vreq",
       [_op("mem", "dst", "xdst", space=Space.SPM), _op("mem", "src", "xsrc", space=Space.ACC),
        _op("scale", "smode", "scale", "xscale"), N_KW],
       "Requantize: SPM[dst+i] = clamp(round_shift(ACC[src+i] * scale, shift) + zp, lo, hi), "
       "int64 product; scale is an int16 immediate, a scalar register (low 16 bits, signed) "
       "or per lane from an ACC row (low 16 bits, signed).",
       slots=("dst", "src", "scale"), group="vpu"),
    _i("link.send", 0x60, Q.LTX, "link",
       [_op("imm", "port"), MEM, N_KW],
       "Send rows addr..addr+n-1 through link port `port` (flits of LINK_WIDTH bytes, credit flow).",
       slots=("addr",), group="link"),
    _i("link.recv", 0x61, Q.LRX, "link",
       [_op("imm", "port"), MEM, N_KW],
       "Receive n rows from link port `port` into rows addr..addr+n-1 (same memory type as sent).",
       slots=("addr",), group="link"),
)

BY_MNEMONIC: dict[str, Instr] = {i.mnemonic: i for i in INSTRUCTIONS}
BY_OPCODE: dict[int, Instr] = {i.opcode: i for i in INSTRUCTIONS}


def mnemonics(fmt: str) -> tuple[str, ...]:
    """The mnemonics of one format, in opcode order."""
    return tuple(i.mnemonic for i in sorted(INSTRUCTIONS, key=lambda i: i.opcode) if i.format == fmt)


#: Op groups, one per format: the VPU's lane-wise binary ops (operands a and b) and unary ops
#: (operand a), the scalar ALU's register-register ops, the conditional branches.
VPU_BINARY = mnemonics("vbin")
VPU_UNARY = mnemonics("vun")
SCALAR_ALU = mnemonics("alu")
BRANCHES = mnemonics("branch")


# --------------------------------------------------------------------------------------------
# Layout and its checks
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Slice:
    field: Field
    lo: int
    width: int

    @property
    def hi(self) -> int:
        return self.lo + self.width - 1


@dataclass(frozen=True)
class Layout:
    """Bit positions of every field of every format for one config."""

    formats: dict[str, tuple[Slice, ...]] = field(default_factory=dict)

    def used_bits(self, fmt: str) -> int:
        s = self.formats[fmt]
        return OPCODE_BITS + sum(x.width for x in s)


def _check_table() -> None:
    """Checks that do not depend on a config: unique names/opcodes, syntax covers every field."""
    seen_op: dict[int, str] = {}
    for ins in INSTRUCTIONS:
        assert ins.mnemonic not in BY_MNEMONIC or BY_MNEMONIC[ins.mnemonic] is ins, ins.mnemonic
        assert 0 <= ins.opcode < 1 << OPCODE_BITS, ins.mnemonic
        assert ins.opcode not in seen_op, \
            f"opcode {ins.opcode:#x} of {ins.mnemonic} reused by {seen_op.get(ins.opcode)}"
        seen_op[ins.opcode] = ins.mnemonic
        assert ins.format in FORMATS, ins.mnemonic
        names = [f.name for f in ins.fields]
        assert len(names) == len(set(names)), f"{ins.format}: duplicate field"
        covered = [f for op in ins.syntax for f in op.fields]
        hdr = {"rep_base", "rep_depth", "sync", "wait", "signal"}
        assert len(covered) == len(set(covered)), f"{ins.mnemonic}: a field written twice in syntax"
        for n in names:
            assert n in covered or n in hdr, \
                f"{ins.mnemonic}: field {n} has no assembly syntax"
        for n in covered:
            assert n in names, f"{ins.mnemonic}: syntax names unknown field {n}"
        for s in ins.slots:
            assert s in names, f"{ins.mnemonic}: slot field {s} unknown"
        assert len(ins.slots) <= STRIDE_SLOTS
        assert ins.queued == ("rep_base" in names), f"{ins.mnemonic}: queued iff it has a repeat header"
    assert len(BY_MNEMONIC) == len(INSTRUCTIONS), "duplicate mnemonic"
    qfields = [f.name for f in FORMATS["vqcfg"] if f not in QHDR]
    assert list(QCFG_RESET) == qfields, f"QCFG_RESET keys {list(QCFG_RESET)} are not vqcfg's fields {qfields}"


@functools.lru_cache(maxsize=None)
def layout(cfg: Sizes) -> Layout:
    """Compute and check the bit layout for ``cfg`` (raises ConfigError if a format does not fit)."""
    from .errors import ConfigError

    formats = {}
    for name, flds in FORMATS.items():
        lo, slices = OPCODE_BITS, []
        for f in flds:
            w = f.bits(cfg)
            if w < 1:
                raise AssertionError(f"{name}.{f.name}: width {w}")
            slices.append(Slice(f, lo, w))
            lo += w
        if lo > WORD_BITS:
            raise ConfigError(
                f"config {cfg.name!r}: format {name!r} needs {lo} bits, more than the {WORD_BITS}-bit "
                f"instruction word ({', '.join(f'{s.field.name}:{s.width}' for s in slices)})")
        # no overlap, every bit accounted for: opcode + fields are contiguous, the rest reserved
        occupied = (1 << OPCODE_BITS) - 1
        for s in slices:
            m = ((1 << s.width) - 1) << s.lo
            assert not occupied & m, f"{name}.{s.field.name} overlaps"
            occupied |= m
        assert occupied == (1 << lo) - 1
        formats[name] = tuple(slices)
    return Layout(formats)


def check_layout(cfg: Sizes) -> None:
    layout(cfg)


_check_table()
