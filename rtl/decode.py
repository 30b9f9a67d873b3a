"""Instruction decode: the word layout is built from ``isa.table.layout(cfg)``; no bit is placed here.

``word_layout(cfg)`` is a ``data.UnionLayout`` with one ``data.StructLayout`` per format (the
opcode first, then the format's fields in table order, signed fields as ``signed(w)``); its
offsets are checked against the table's ``Slice.lo``. A ``Signal(word_layout(cfg))`` is read as
``w.dma.local``, ``w.alu.rd`` etc.

``Decoder`` checks legality exactly as ``isa.encoding.decode`` does (opcode known, reserved bits
zero, every field within its table limit, operand modes consistent, loop nest inside the loop
registers) and gives one-hot unit and mnemonic indications.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.table import (BY_MNEMONIC, INSTRUCTIONS, OPCODE_BITS, WORD_BITS, CountMode, ScaleMode,
                       SrcMode, layout)

from .logic import all_of, any_of

__all__ = ["word_layout", "format_layout", "field_slice", "Decoder", "opcode_of"]


def format_layout(cfg, fmt: str) -> data.StructLayout:
    """The StructLayout of one format: ``opcode`` then its fields (padded to the word)."""
    fields = {"opcode": unsigned(OPCODE_BITS)}
    for s in layout(cfg).formats[fmt]:
        fields[s.field.name] = signed(s.width) if s.field.signed else unsigned(s.width)
    lay = data.StructLayout(fields)
    for s in layout(cfg).formats[fmt]:
        assert lay[s.field.name].offset == s.lo, (fmt, s.field.name)
    return lay


def word_layout(cfg) -> data.UnionLayout:
    """One member per format, each a view of the whole instruction word."""
    members = {fmt: format_layout(cfg, fmt) for fmt in layout(cfg).formats}
    members["opcode"] = unsigned(OPCODE_BITS)
    members["bits"] = unsigned(WORD_BITS)
    return data.UnionLayout(members)


def field_slice(cfg, fmt: str, name: str) -> tuple[int, int]:
    """(lo, width) of a field, for tests and tools."""
    for s in layout(cfg).formats[fmt]:
        if s.field.name == name:
            return s.lo, s.width
    raise KeyError(name)


def opcode_of(mnemonic: str) -> int:
    return BY_MNEMONIC[mnemonic].opcode


def _below(v, n: int):
    """``0 <= v < n`` for a field value ``v`` (signed or not): the bits above ``n - 1``'s are
    zero (the sign among them), and the rest compares only when ``n`` is not a power of two."""
    u = v.as_unsigned()
    k = max(1, (n - 1).bit_length())
    ok = (u[k:] == 0) if len(u) > k else Const(1)
    return ok & (u[:k] < n) if n < (1 << k) else ok


def _fits_signed(v, bits: int):
    """``-2**(bits-1) <= v < 2**(bits-1)`` for a signed field: the bits from the sign of a
    ``bits``-bit number upwards are all equal."""
    top = v.as_unsigned()[bits - 1:]
    return (top == 0) | (top == (1 << len(top)) - 1)


class Decoder(wiring.Component):
    """Combinational decoder of one instruction word.

    Ports:
      word     In(WORD_BITS)        the instruction word (bit 0 = LSB)
      view     Out(word_layout)     the same word viewed through every format's layout
      opcode   Out(8)               bits [7:0]
      legal    Out(1)               the word is a legal instruction for this config
      queued   Out(1)               the instruction goes to a unit queue
      unit     Out(3)               executing unit (``isa.table.Unit``)
      is_<m>   Out(1)               one per mnemonic (dots become underscores): this instruction
    """

    def __init__(self, cfg):
        self.cfg = cfg
        sig = {"word": In(WORD_BITS), "view": Out(word_layout(cfg)), "opcode": Out(OPCODE_BITS),
               "legal": Out(1), "queued": Out(1), "unit": Out(3)}
        for ins in INSTRUCTIONS:
            sig["is_" + ins.mnemonic.replace(".", "_")] = Out(1)
        super().__init__(sig)

    def is_(self, mnemonic: str):
        return getattr(self, "is_" + mnemonic.replace(".", "_"))

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        lay = layout(cfg)
        m.d.comb += [self.view.eq(self.word), self.opcode.eq(self.word[:OPCODE_BITS])]
        legal, queued, unit = [], [], []
        # reserved bits are zero: zero tests of the word's pieces between the formats' last used
        # bits, shared by every format (from the top of the word down to each format's last used
        # bit), not a wide test per format; each format ANDs its pieces in a tree
        ends = sorted({lay.used_bits(f) for f in lay.formats if lay.used_bits(f) < WORD_BITS}, reverse=True)
        clear, pieces = {}, []
        for i, lo in enumerate(ends):
            hi = ends[i - 1] if i else WORD_BITS
            z = Signal(name=f"zero_{lo}_{hi}")
            m.d.comb += z.eq(self.word[lo:hi] == 0)
            pieces.append(z)
            clear[lo] = Signal(name=f"clear_from_{lo}")
            m.d.comb += clear[lo].eq(all_of(pieces))
        for ins in INSTRUCTIONS:       # comparisons, not a case statement: no incomplete cases in Verilog
            hit = Signal(name="hit_" + ins.mnemonic.replace(".", "_"))
            m.d.comb += [hit.eq(self.opcode == ins.opcode), self.is_(ins.mnemonic).eq(hit)]
            v = getattr(self.view, ins.format)
            ok = [clear[lay.used_bits(ins.format)]] if lay.used_bits(ins.format) < WORD_BITS else []
            for s in lay.formats[ins.format]:
                mx = s.field.max_value(cfg)
                if mx is not None and mx < (1 << s.width) - 1:
                    ok.append(getattr(v, s.field.name) <= mx)
            ok += self._mode_checks(ins, v)
            legal.append(hit & all_of(ok))
            if ins.queued:
                queued.append(hit)
            unit.append(Mux(hit, int(ins.unit), 0))
        # (balanced ORs: a chain over the instructions was as many LUT levels as a third of them)
        m.d.comb += [self.legal.eq(any_of(legal)), self.queued.eq(any_of(queued)),
                     self.unit.eq(any_of([Const(0, 3)] + unit))]
        return m

    def _mode_checks(self, ins, v):
        """The operand-mode rules of ``isa.encoding.check_values`` (values reinterpreted by a mode)."""
        cfg = self.cfg
        names = {f.name for f in ins.fields}
        ok = []
        row_lim = max(cfg.spm_rows, cfg.acc_rows)
        if "bmode" in names:
            is_row = (v.bmode == SrcMode.SPM) | (v.bmode == SrcMode.ACC)
            ok.append(~is_row | _below(v.b, row_lim))
            ok.append((v.bmode != SrcMode.REG) | _below(v.b, cfg.scalar_regs))
            ok.append(is_row | (v.xb == 0))
        if "smode" in names:
            ok.append((v.smode != ScaleMode.ROW) | _below(v.scale, row_lim))
            ok.append((v.smode != ScaleMode.REG) | _below(v.scale, cfg.scalar_regs))
            ok.append((v.smode != ScaleMode.IMM) | _fits_signed(v.scale, 16))
            ok.append((v.smode == ScaleMode.ROW) | (v.xscale == 0))
        if "cmode" in names:
            ok.append((v.cmode != CountMode.REG) | _below(v.count, cfg.scalar_regs))
        if "rep_depth" in names:
            ok.append((v.rep_depth == 0) | (v.rep_base + v.rep_depth <= cfg.loop_regs))
        return ok
