"""Assembly text from instructions (the inverse of ``isa.asm``), derived from the instruction table.

``format_instruction`` writes one instruction; ``disassemble`` a whole Program, with labels for
branch targets, so that ``assemble(disassemble(p))`` gives the same bytes. Operands that hold
their default value (``resolve_default``) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from .encoding import Instruction
from .table import BY_MNEMONIC, SPACE_BYTES, UNIT_NAMES, CountMode, Operand, ScaleMode, Space, SrcMode, Unit

if TYPE_CHECKING:
    from .config import ChipConfig


class ProgramView(Protocol):
    """What ``disassemble`` reads of an ``isa.program.Program`` (which imports this module)."""

    @property
    def config(self) -> ChipConfig: ...
    @property
    def instructions(self) -> Sequence[Instruction]: ...
    @property
    def labels(self) -> Mapping[str, int]: ...


def resolve_default(o: Operand, values: dict[str, int], cfg: ChipConfig) -> int:
    """The value of an operand left out (a config size, the element size of its space, or a number);
    the assembler fills it in and the disassembler leaves out an operand that holds it."""
    d = o.default
    if d == "cols":
        return cfg.cols
    if d == "rows":
        return cfg.rows
    if d == "esize":
        return SPACE_BYTES[values.get("space", Space.SPM)]
    assert isinstance(d, int), f"operand {o.fields[0]}: default {d!r}"
    return d


def format_instruction(ins: Instruction, cfg: ChipConfig, labels: dict[int, str] | None = None) -> str:
    """Assembly text for one instruction; re-assembles to the same word."""
    spec = ins.spec
    d = ins.as_dict()
    parts, kws = [], []
    for o in spec.syntax:
        txt = _format_operand(o, d, labels)
        if o.key is None:
            parts.append(txt)
        elif o.default is None or d[o.fields[0]] != resolve_default(o, d, cfg):
            kws.append(f"{o.key}={txt}")
    if spec.queued and d["rep_depth"]:
        kws.append(f"rep=l{d['rep_base']}:{d['rep_depth']}")
    elif spec.queued and d["rep_base"]:
        kws.append(f"rep=l{d['rep_base']}:0")
    for key in ("wait", "signal"):
        if d.get(key):
            kws.append(f"{key}={format_units(d[key])}")
    if d.get("sync"):
        kws.append("sync=once")
    ops = ", ".join(parts + kws)
    return f"{spec.mnemonic} {ops}".rstrip()


def format_units(mask: int) -> str:
    if mask == 0:
        return "none"
    if mask == (1 << len(Unit)) - 1:
        return "all"
    return "|".join(n for k, n in enumerate(UNIT_NAMES) if mask >> k & 1)


def _format_operand(o: Operand, d: dict[str, int], labels: dict[int, str] | None) -> str:
    k = o.kind
    if k == "reg":
        return f"r{d[o.fields[0]]}"
    if k == "lreg":
        return f"l{d[o.fields[0]]}"
    if k == "imm":
        return str(d[o.fields[0]])
    if k == "target":
        t = d[o.fields[0]]
        return labels.get(t, str(t)) if labels else str(t)
    if k == "mem":
        space = o.space if o.space is not None else Space(d[o.fields[0]])
        return f"{space.name.lower()}[{_indexed(d[o.fields[-2]], d[o.fields[-1]])}]"
    if k == "dram":
        return f"dram[{_indexed(d[o.fields[0]], d[o.fields[1]], hexa=True)}]"
    if k in ("src", "scale", "count"):
        mode, v = d[o.fields[0]], d[o.fields[1]]
        x = d[o.fields[2]] if len(o.fields) > 2 else 0
        if k == "src":
            return {SrcMode.SPM: f"spm[{_indexed(v, x)}]", SrcMode.ACC: f"acc[{_indexed(v, x)}]",
                    SrcMode.REG: f"r{v}", SrcMode.IMM: str(v)}[SrcMode(mode)]
        if k == "scale":
            return {ScaleMode.IMM: str(v), ScaleMode.REG: f"r{v}",
                    ScaleMode.ROW: f"acc[{_indexed(v, x)}]"}[ScaleMode(mode)]
        return f"r{v}" if mode == CountMode.REG else str(v)
    if k == "units":
        return format_units(d[o.fields[0]])
    if k == "enum":
        return o.names[d[o.fields[0]]]
    raise AssertionError(k)


def _indexed(v: int, x: int, hexa: bool = False) -> str:
    imm = f"{v:#x}" if hexa else str(v)
    return imm if not x else f"r{x}" if v == 0 else f"r{x} + {imm}"


def disassemble(program: ProgramView) -> str:
    """Assembly text for a whole Program; ``assemble(disassemble(p))`` gives the same bytes."""
    cfg = program.config
    targets = sorted({i["target"] for i in program.instructions if "target" in i.as_dict()})
    names = {pc: n for n, pc in sorted(program.labels.items(), key=lambda kv: kv[1]) if _label_ok(n)}
    labels = {t: names.get(t, f"L{t}") for t in targets}
    at_pc: dict[int, list[str]] = {}
    for n, pc in program.labels.items():
        if _label_ok(n):
            at_pc.setdefault(pc, []).append(n)
    for t, n in labels.items():
        if n not in at_pc.get(t, []):
            at_pc.setdefault(t, []).append(n)
    out = [f"; {len(program.instructions)} instructions for config {cfg.name}",
           f".config {cfg.name}"]
    for pc, ins in enumerate(program.instructions):
        for n in at_pc.get(pc, []):
            out.append(f"{n}:")
        out.append(f"    {format_instruction(ins, cfg, labels)}")
    for n in at_pc.get(len(program.instructions), []):
        out.append(f"{n}:")
    return "\n".join(out) + "\n"


def _label_ok(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_$][\w$]*", name)) and name not in BY_MNEMONIC


__all__ = ["format_instruction", "disassemble", "format_units", "resolve_default"]
