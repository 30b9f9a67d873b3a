"""Operand values and the one mapping from them to instruction fields.

The program builder (``isa.builder``) takes these values from code; the assembler (``isa.asm``)
parses text into the same values. Both then call this module, so an operand becomes the same
fields, with the same checks, whichever way a program is written.

The values, per operand kind of the table (``isa.table.Operand.kind``):

==========  ===========================================================================================
reg, lreg   ``isa.regs.Reg`` / ``LoopReg``
imm         an int
target      a ``Label`` (resolved when the program is built) or an instruction index
mem, dram   ``spm[row]``, ``acc[row]``, ``dram[byte]`` (a ``Mem``); the index may add one register
            (``spm[5 + Reg(3)]``)
src, scale  a ``Reg``, a ``Mem`` or an int; count: a ``Reg`` or an int
units       a string in the assembler's spelling (``"load|mxu"``, ``"all"``, ``"none"``), a ``Unit``
            or an iterable of either
enum        its name (any case) or its value
==========  ===========================================================================================

Modifiers of queued instructions: ``rep`` (a ``LoopReg``: depth 1, or ``(LoopReg, depth)``),
``wait``/``signal`` (units) and ``sync`` (``"each"``/``"once"`` or a ``Sync``).

``positional``, ``keyword`` and ``modifiers`` say which slots an instruction has, ``spaces`` which
memories an operand addresses; ``operand`` and
``modifier`` put one value's fields into a dict of field values; ``finish`` fills the defaults of
keyword operands left out and gives the checked, canonical ``Instruction``. An ``OperandError``
says what is wrong without naming the instruction: the builder adds the instruction and operand, the
assembler the file, line and column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import index
from typing import TYPE_CHECKING, SupportsIndex

from .disasm import resolve_default
from .encoding import Instruction, canonical, check_values, dram_error, row_error
from .errors import EncodeError
from .regs import Addr, LoopReg, Reg
from .table import UNIT_NAMES, CountMode, Instr, Operand, ScaleMode, Space, SrcMode, Sync, Unit

if TYPE_CHECKING:
    from .config import ChipConfig

#: the modifiers of a queued instruction (an unqueued one with wait/signal fields takes those two)
QHDR_KEYS = ("rep", "wait", "signal", "sync")


class OperandError(EncodeError):
    """An operand value that the instruction does not take (wrong kind, missing, out of range).

    ``expected`` is set when the value is of the wrong kind: what the operand takes (the message
    is ``expected <that>, got <value>``); ``index`` is True when the error is about the index
    register of a memory operand."""

    def __init__(self, message: str, *, expected: str | None = None, index: bool = False):
        super().__init__(message)
        self.expected, self.index = expected, index


def _wrong(want: str, v: object) -> OperandError:
    return OperandError(f"expected {want}, got {v!r}", expected=want)


# --------------------------------------------------------------------------------------------
# Operand values
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mem:
    """A memory operand: ``space`` is "spm", "acc" or "dram"; the address is ``addr + reg``."""

    space: str
    addr: int
    reg: Reg | None = None

    def __repr__(self) -> str:
        return f"{self.space}[{Addr(self.addr, self.reg)!r}]"


class _Memory:
    """``spm[row]``, ``acc[row]``, ``dram[byte]``: the index is an int, a ``Reg`` or ``int + Reg``."""

    def __init__(self, name: str):
        self.name = name

    def __getitem__(self, a: "Reg | Addr | SupportsIndex") -> Mem:
        if isinstance(a, Reg):
            return Mem(self.name, 0, a)
        if isinstance(a, Addr):
            return Mem(self.name, a.imm, a.reg)
        if isinstance(a, bool) or not isinstance(a, SupportsIndex):
            raise OperandError(f"{self.name}[...] takes an int, a Reg or int + Reg, not {a!r}")
        return Mem(self.name, index(a), None)

    def __repr__(self) -> str:
        return self.name


spm, acc, dram = _Memory("spm"), _Memory("acc"), _Memory("dram")


class Label:
    """A position in a builder's program (``ProgramBuilder.new_label``); ``pc`` is None until placed."""

    __slots__ = ("name", "pc", "_builder")

    def __init__(self, name: str, builder: object):
        self.name = name
        self.pc: int | None = None
        self._builder = builder

    def __repr__(self) -> str:
        return f"Label({self.name!r}, pc={self.pc})"


# --------------------------------------------------------------------------------------------
# Slots
# --------------------------------------------------------------------------------------------

def positional(spec: Instr) -> list[Operand]:
    """The operands written in order, without a keyword."""
    return [o for o in spec.syntax if o.key is None]


def modifiers(spec: Instr) -> tuple[str, ...]:
    """The modifier keywords ``spec`` takes."""
    if spec.queued:
        return QHDR_KEYS
    return ("wait", "signal") if any(f.name == "wait" for f in spec.fields) else ()


def keyword(spec: Instr, key: str) -> Operand | str:
    """What ``key=`` names in ``spec``: a keyword operand, or the name of a modifier."""
    for o in spec.syntax:
        if o.key == key:
            return o
    mods = modifiers(spec)
    if key in mods:
        return key
    allowed = [o.key for o in spec.syntax if o.key is not None] + list(mods)
    raise OperandError(f"{spec.mnemonic} has no operand {key}=" +
                       (f" (it takes {', '.join(k + '=' for k in allowed)})" if allowed else ""))


def spaces(o: Operand) -> tuple[str, ...]:
    """The memories (``Mem.space``) whose address operand ``o`` may hold."""
    if o.kind == "dram":
        return ("dram",)
    if o.kind == "scale":
        return ("acc",)
    if o.kind == "mem" and o.space is not None:
        return (o.space.name.lower(),)
    return ("spm", "acc") if o.kind in ("mem", "src") else ()


# --------------------------------------------------------------------------------------------
# Values to fields
# --------------------------------------------------------------------------------------------

def operand(o: Operand, v: object, values: dict[str, int], cfg: ChipConfig) -> Label | None:
    """Put the fields of operand ``o`` holding ``v`` into ``values``; a ``Label`` target is returned
    (its field holds 0 until the label is placed)."""
    k = o.kind
    if k == "reg":
        values[o.fields[0]] = _reg(v, cfg)
    elif k == "lreg":
        values[o.fields[0]] = _loop_reg(v, cfg)
    elif k == "imm":
        values[o.fields[0]] = _int(v)
    elif k == "target":
        if isinstance(v, Label):
            values[o.fields[0]] = 0
            return v
        values[o.fields[0]] = _int(v)
    elif k == "mem":
        space, addr, x = _mem(v, o, cfg)
        if o.space is None:
            values[o.fields[0]] = space
        values[o.fields[-2]], values[o.fields[-1]] = addr, x
    elif k == "dram":
        if not isinstance(v, Mem) or v.space not in spaces(o):
            raise _wrong("dram[address]", v)
        x = _index(v.reg, cfg)
        _dram_address(v.addr, cfg)
        values[o.fields[0]], values[o.fields[1]] = v.addr, x
    elif k in ("src", "scale", "count"):
        mode_f, val_f = o.fields[:2]
        if isinstance(v, Reg):
            mode = {"src": SrcMode.REG, "scale": ScaleMode.REG, "count": CountMode.REG}[k]
            val = _reg(v, cfg)
        elif isinstance(v, (Mem, str)) and spaces(o):       # a string: text the assembler read as no address
            space, val, x = _mem(v, o, cfg)
            mode = SrcMode(space) if k == "src" else ScaleMode.ROW
            values[o.fields[2]] = x
        else:
            mode = {"src": SrcMode.IMM, "scale": ScaleMode.IMM, "count": CountMode.IMM}[k]
            val = _int(v)
        values[mode_f], values[val_f] = int(mode), val
    elif k == "units":
        values[o.fields[0]] = units(v)
    elif k == "enum":
        values[o.fields[0]] = _enum(v, o.names)
    else:  # pragma: no cover - the table is checked at import
        raise AssertionError(k)
    return None


def modifier(key: str, v: object, values: dict[str, int], cfg: ChipConfig) -> None:
    """Put the fields of modifier ``key`` (one of ``QHDR_KEYS``) holding ``v`` into ``values``."""
    if key == "rep":
        base, depth = (v, 1) if isinstance(v, LoopReg) else v if isinstance(v, tuple) and len(v) == 2 \
            else (None, None)
        if not isinstance(base, LoopReg):
            raise _wrong("a LoopReg (depth 1) or (LoopReg, depth)", v)
        values["rep_base"], values["rep_depth"] = _loop_reg(base, cfg), _int(depth)
    elif key == "sync":
        if not isinstance(v, (Sync, str)):
            raise _wrong("'each' or 'once'", v)
        values["sync"] = int(v) if isinstance(v, Sync) else _enum(v, [s.name.lower() for s in Sync], "'each' or 'once'")
    else:
        values[key] = units(v)


def finish(spec: Instr, values: dict[str, int], cfg: ChipConfig) -> Instruction:
    """The instruction of ``values``, keyword operands left out at their defaults; checked for
    ``cfg`` (an EncodeError names the field) and canonical."""
    for o in spec.syntax:
        if o.key is not None and o.fields[0] not in values:
            if o.default is None:
                raise OperandError(f"{spec.mnemonic} needs {o.key}=")
            values[o.fields[0]] = resolve_default(o, values, cfg)
    ins = Instruction.make(spec.mnemonic, **values)
    check_values(ins, cfg)
    return canonical(ins, cfg)


def units(v: object) -> int:
    """The unit mask of ``v``: "none", "all", names joined by "|", a ``Unit`` or an iterable of either."""
    if isinstance(v, Unit):
        return 1 << int(v)
    if isinstance(v, str):
        t = v.strip().lower()
        if t == "none":
            return 0
        if t == "all":
            return (1 << len(Unit)) - 1
        parts: list[object] = [p.strip() for p in t.split("|")]
    else:
        try:
            parts = list(v)  # type: ignore[call-overload]
        except TypeError:
            raise _wrong("units ('load|mxu', 'all', Unit values)", v) from None
    mask = 0
    for p in parts:
        if isinstance(p, Unit):
            mask |= 1 << int(p)
        elif isinstance(p, str) and p.strip().lower() in UNIT_NAMES:
            mask |= 1 << UNIT_NAMES.index(p.strip().lower())
        else:
            raise OperandError(f"unknown unit {p!r} (units: {', '.join(UNIT_NAMES)}, none, all)")
    return mask


def _enum(v: object, names: Sequence[str], want: str | None = None) -> int:
    if isinstance(v, str):
        n = names.index(v.strip().lower()) if v.strip().lower() in names else -1
    else:
        n = _int(v)
    if not 0 <= n < len(names):
        raise _wrong(want or f"one of {', '.join(names)}", v)
    return n


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, SupportsIndex):
        raise _wrong("an integer", v)
    return index(v)


def _register(v: object, kind: type[Reg] | type[LoopReg], count: int) -> int:
    """The number of register ``v`` of ``kind``, one of the ``count`` the config has."""
    scalar = kind is Reg
    if not isinstance(v, kind):
        raise _wrong(f"a {'scalar' if scalar else 'loop'} register (isa.regs.{kind.__name__})", v)
    if v.n >= count:
        name, p = ("register", "r") if scalar else ("loop register", "l")
        raise OperandError(f"{name} {p}{v.n} does not exist ({p}0..{p}{count - 1})")
    return v.n


def _reg(v: object, cfg: ChipConfig) -> int:
    return _register(v, Reg, cfg.scalar_regs)


def _loop_reg(v: object, cfg: ChipConfig) -> int:
    return _register(v, LoopReg, cfg.loop_regs)


def _index(reg: Reg | None, cfg: ChipConfig) -> int:
    if reg is None:
        return 0
    try:
        n = _reg(reg, cfg)
    except OperandError as e:
        raise OperandError(str(e), index=True) from None
    if n == 0:
        raise OperandError("r0 cannot index an address (it reads 0); leave it out", index=True)
    return n


def _mem(v: object, o: Operand, cfg: ChipConfig) -> tuple[int, int, int]:
    """(space, row, index register) of an SPM or ACC row."""
    if not isinstance(v, Mem) or v.space not in spaces(o):
        raise _wrong(" or ".join(f"{s}[row]" for s in spaces(o)), v)
    space = Space[v.space.upper()]
    x = _index(v.reg, cfg)
    _row(space, v.addr, cfg)
    return int(space), v.addr, x


def _row(space: Space, row: int, cfg: ChipConfig) -> None:
    err = row_error(space, row, cfg)
    if err:
        raise OperandError(err)


def _dram_address(addr: int, cfg: ChipConfig) -> None:
    err = dram_error(addr, cfg)
    if err:
        raise OperandError(err)


__all__ = ["Mem", "Label", "spm", "acc", "dram", "OperandError", "QHDR_KEYS", "positional", "modifiers",
           "keyword", "spaces", "operand", "modifier", "finish", "units"]
