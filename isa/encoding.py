"""Instructions as values, and their encoding to and from ``WORD_BITS``-bit words.

Both directions are derived from the table (``isa.table``): no bit position is written here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import DecodeError, EncodeError, TetrachipError
from .table import (BY_MNEMONIC, BY_OPCODE, OPCODE_BITS, WORD_BITS, WORD_BYTES, Instr,
                    ScaleMode, Space, SrcMode, CountMode, layout)

if TYPE_CHECKING:
    from .config import ChipConfig


@dataclass(frozen=True)
class Instruction:
    """One instruction: a mnemonic and the value of every field of its format (unset fields are 0).

    >>> Instruction.make("add", rd=1, rs1=2, rs2=3)["rs1"]
    2
    """

    op: str
    args: tuple[tuple[str, int], ...]

    @classmethod
    def make(cls, op: str, **values: int) -> "Instruction":
        spec = BY_MNEMONIC.get(op)
        if spec is None:
            raise EncodeError(f"unknown mnemonic {op!r}")
        names = [f.name for f in spec.fields]
        unknown = set(values) - set(names)
        if unknown:
            raise EncodeError(f"{op}: unknown field(s) {', '.join(sorted(unknown))}; "
                              f"fields: {', '.join(names) or 'none'}")
        return cls(op, tuple((n, int(values.get(n, 0))) for n in names))

    @property
    def spec(self) -> Instr:
        return BY_MNEMONIC[self.op]

    def __getitem__(self, name: str) -> int:
        for n, v in self.args:
            if n == name:
                return v
        raise KeyError(f"{self.op} has no field {name!r}")

    def get(self, name: str, default: int | None = None) -> int | None:
        for n, v in self.args:
            if n == name:
                return v
        return default

    def as_dict(self) -> dict[str, int]:
        return dict(self.args)

    def replace(self, **values: int) -> "Instruction":
        d = self.as_dict()
        d.update(values)
        return Instruction.make(self.op, **d)

    def __str__(self) -> str:  # a compact form; the assembler's syntax comes from isa.asm.format
        return f"{self.op} " + ", ".join(f"{n}={v}" for n, v in self.args if v)


def check_values(ins: Instruction, cfg: ChipConfig, err: type[TetrachipError] = EncodeError) -> None:
    """Raise ``err`` unless every field of ``ins`` holds a legal value for ``cfg``."""
    spec = ins.spec
    lay = layout(cfg).formats[spec.format]
    for s in lay:
        f, v = s.field, ins[s.field.name]
        if f.signed:
            lo, hi = -(1 << (s.width - 1)), (1 << s.width if f.wrap else 1 << (s.width - 1)) - 1
        else:
            lo, hi = 0, (1 << s.width) - 1
        if not lo <= v <= hi:
            raise _at(err, f.name, f"{spec.mnemonic}: {f.name} = {v} does not fit {s.width} "
                      f"{'signed ' if f.signed else ''}bits ({lo}..{hi})")
        mx = f.max_value(cfg)
        if mx is not None and mx < lo:
            # (a config without the resource: ``links = 0`` leaves no link port to name)
            lim = f.limit or ()
            size = f"{lim[1]} = {getattr(cfg, lim[1])}" if lim[:1] == ("max",) else f"max {mx}"
            raise _at(err, f.name, f"{spec.mnemonic}: config {cfg.name!r} has no legal {f.name} ({size})")
        if mx is not None and v > mx:
            raise _at(err, f.name, f"{spec.mnemonic}: {f.name} = {v} is out of range (max {mx})")
    # operand modes that reinterpret a 32-bit value field
    d = ins.as_dict()
    if "bmode" in d:
        _check_mode_value(spec, "b", d["b"], {SrcMode.SPM: "row", SrcMode.ACC: "row", SrcMode.REG: "reg"}
                          .get(SrcMode(d["bmode"])), cfg, err)
    if "smode" in d:
        kind = {ScaleMode.IMM: "i16", ScaleMode.REG: "reg", ScaleMode.ROW: "row"}[ScaleMode(d["smode"])]
        _check_mode_value(spec, "scale", d["scale"], kind, cfg, err)
    for mode_f, row_modes, x_f in (("bmode", (SrcMode.SPM, SrcMode.ACC), "xb"),
                                   ("smode", (ScaleMode.ROW,), "xscale")):
        if mode_f in d and d[mode_f] not in row_modes and d[x_f]:
            raise _at(err, x_f, f"{spec.mnemonic}: {x_f} must be r0 unless its operand is a row")
    if "cmode" in d and d["cmode"] == CountMode.REG:
        _check_mode_value(spec, "count", d["count"], "reg", cfg, err)
    if ins.get("rep_depth", 0) and d["rep_base"] + d["rep_depth"] > cfg.loop_regs:
        raise _at(err, "rep_base", f"{spec.mnemonic}: loop nest l{d['rep_base']}:{d['rep_depth']} goes past "
                  f"the {cfg.loop_regs} loop registers")


def _at(err: type[TetrachipError], field: str, msg: str) -> TetrachipError:
    """An error naming the field it is about (the assembler uses it to find the column)."""
    e = err(msg)
    e.field = field
    return e


def _check_mode_value(spec: Instr, name: str, v: int, kind: str | None, cfg: ChipConfig,
                      err: type[TetrachipError]) -> None:
    if kind == "row":
        lim = max(cfg.spm_rows, cfg.acc_rows)
        if not 0 <= v < lim:
            raise _at(err, name, f"{spec.mnemonic}: {name} row {v} is out of range (0..{lim - 1})")
    elif kind == "reg":
        if not 0 <= v < cfg.scalar_regs:
            raise _at(err, name, f"{spec.mnemonic}: {name} register r{v} does not exist (r0..r{cfg.scalar_regs - 1})")
    elif kind == "i16":
        if not -(1 << 15) <= v < 1 << 15:
            raise _at(err, name, f"{spec.mnemonic}: {name} {v} does not fit int16")


def row_error(space: Space, row: int, cfg: ChipConfig) -> str | None:
    """Why ``row`` is no row of memory ``space`` (SPM or ACC), or None."""
    depth = cfg.spm_rows if space == Space.SPM else cfg.acc_rows
    return None if 0 <= row < depth else f"{space.name} row {row} out of range ({space.name} has {depth} rows)"


def dram_error(addr: int, cfg: ChipConfig) -> str | None:
    """Why ``addr`` is no DRAM byte address, or None."""
    return None if 0 <= addr < cfg.dram_bytes else \
        f"DRAM address {addr:#x} out of range (DRAM has {cfg.dram_bytes:#x} bytes)"


def address_error(ins: Instruction, cfg: ChipConfig) -> str | None:
    """The first immediate address of ``ins`` past the end of its memory, or None.

    ``decode`` accepts such a word (its fields fit and hold legal values; the chip faults with
    ADDRESS_RANGE when it runs it), but the operand mapping (``isa.operands``) refuses the address,
    so the assembler and the builder never write one; the disassembler writes the word (``.word``)."""
    d = ins.as_dict()
    for o in ins.spec.syntax:
        err = None
        if o.kind == "mem":
            err = row_error(o.space if o.space is not None else Space(d[o.fields[0]]), d[o.fields[-2]], cfg)
        elif o.kind == "dram":
            err = dram_error(d[o.fields[0]], cfg)
        elif o.kind == "src" and d[o.fields[0]] in (SrcMode.SPM, SrcMode.ACC):
            err = row_error(Space(d[o.fields[0]]), d[o.fields[1]], cfg)
        elif o.kind == "scale" and d[o.fields[0]] == ScaleMode.ROW:
            err = row_error(Space.ACC, d[o.fields[1]], cfg)
        if err:
            return f"{ins.spec.mnemonic}: {err}"
    return None


def canonical(ins: Instruction, cfg: ChipConfig) -> Instruction:
    """The same instruction with unsigned spellings of signed fields made signed (as decode gives)."""
    changed = {}
    for s in layout(cfg).formats[ins.spec.format]:
        v = ins[s.field.name]
        if s.field.signed and v >= 1 << (s.width - 1):
            changed[s.field.name] = v - (1 << s.width)
    return ins.replace(**changed) if changed else ins


def encode(ins: Instruction, cfg: ChipConfig) -> int:
    """The instruction word as an integer (bit 0 = LSB)."""
    check_values(ins, cfg)
    spec = ins.spec
    word = spec.opcode
    for s in layout(cfg).formats[spec.format]:
        v = ins[s.field.name] & ((1 << s.width) - 1)
        word |= v << s.lo
    return word


def decode(word: int, cfg: ChipConfig, *, pc: int | None = None) -> Instruction:
    """Decode one word; raise DecodeError for anything that is not a legal instruction."""
    at = f"pc {pc}: " if pc is not None else ""
    if not 0 <= word < 1 << WORD_BITS:
        raise DecodeError(f"{at}word does not fit {WORD_BITS} bits")
    opcode = word & ((1 << OPCODE_BITS) - 1)
    spec = BY_OPCODE.get(opcode)
    if spec is None:
        raise DecodeError(f"{at}illegal opcode {opcode:#04x} in word {word:#0{WORD_BITS // 4 + 2}x}")
    lay = layout(cfg)
    used = lay.used_bits(spec.format)
    if word >> used:
        raise DecodeError(f"{at}{spec.mnemonic}: reserved bits {WORD_BITS - 1}..{used} are not zero")
    values = {}
    for s in lay.formats[spec.format]:
        v = (word >> s.lo) & ((1 << s.width) - 1)
        if s.field.signed and v >> (s.width - 1):
            v -= 1 << s.width
        values[s.field.name] = v
    ins = Instruction(spec.mnemonic, tuple(values.items()))
    try:
        check_values(ins, cfg, err=DecodeError)
    except DecodeError as e:
        raise DecodeError(f"{at}{e}") from None
    return ins


def to_bytes(word: int) -> bytes:
    return word.to_bytes(WORD_BYTES, "little")


def from_bytes(b: bytes | bytearray) -> int:
    return int.from_bytes(b, "little")


def encode_all(instrs: Iterable[Instruction], cfg: ChipConfig) -> bytes:
    return b"".join(to_bytes(encode(i, cfg)) for i in instrs)


def decode_all(data: bytes, cfg: ChipConfig) -> list[Instruction]:
    if len(data) % WORD_BYTES:
        raise DecodeError(f"{len(data)} bytes is not a whole number of {WORD_BYTES}-byte words")
    return [decode(from_bytes(data[k:k + WORD_BYTES]), cfg, pc=k // WORD_BYTES)
            for k in range(0, len(data), WORD_BYTES)]


__all__ = ["Instruction", "encode", "decode", "check_values", "encode_all", "decode_all",
           "to_bytes", "from_bytes", "Space", "row_error", "dram_error", "address_error"]
