"""Assembly text from instructions (the inverse of ``isa.asm``), derived from the instruction table.

``format_instruction`` writes one instruction; ``disassemble`` a whole Program, with labels for
branch targets, so that ``assemble(disassemble(p))`` gives the same bytes. Operands that hold
their default value (``resolve_default``) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from .encoding import Instruction, address_error, encode
from .table import (BY_MNEMONIC, SPACE_BYTES, UNIT_NAMES, WORD_BYTES, CountMode, Operand, ScaleMode, Sizes, Space,
                    SrcMode, Unit)

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


def isa_sizes() -> list[str]:
    """The config fields that instruction fields and the predefined constants derive from: the
    properties of ``isa.table.Sizes`` but the name."""
    return [k for k, v in vars(Sizes).items() if isinstance(v, property) and k != "name"]


def predefined(cfg: ChipConfig) -> dict[str, int]:
    """Constants every program may use (the assembler's; the disassembler names no label after one):
    each size of ``isa_sizes`` in capitals (ROWS, COLS, SPM_ROWS, ...), from the config."""
    return {f.upper(): getattr(cfg, f) for f in isa_sizes()}


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
    """Assembly text for a whole Program; ``assemble(disassemble(p))`` gives the same bytes.

    Branch targets inside the program (0..len, the end included) print as labels: the program's own
    where one is there (every label the assembler reads keeps its name), else ``L<pc>``, made unique
    against every name the program uses; a target beyond the program prints as its number. Labels
    that the assembler could not read back (``a b``, ``ROWS``, ``halt``) are left out. An instruction
    the assembler refuses though it decodes (an address past the end of its memory: ``address_error``)
    is written as ``.word``, its text in a comment."""
    cfg = program.config
    n = len(program.instructions)
    reserved = set(predefined(cfg)) | set(BY_MNEMONIC)
    user = {name: pc for name, pc in program.labels.items()
            if label_ok(name) and name not in reserved and type(pc) is int and 0 <= pc <= n}
    taken = set(program.labels) | reserved
    names: dict[int, str] = {}                      # the label a branch to pc prints
    for name, pc in user.items():
        names.setdefault(pc, name)
    targets = sorted({t for i in program.instructions if (t := i.get("target")) is not None and 0 <= t <= n})
    at_pc: dict[int, list[str]] = {}
    for name, pc in user.items():
        at_pc.setdefault(pc, []).append(name)
    for t in targets:
        if t not in names:
            name, k = f"L{t}", 0
            while name in taken:
                k += 1
                name = f"L{t}_{k}"
            taken.add(name)
            names[t] = name
            at_pc.setdefault(t, []).append(name)
    labels = {t: names[t] for t in targets}
    header = (f".config {cfg.name}" if _config_name_ok(cfg.name)
              else f"; (config name {cfg.name!r} cannot be written as a .config operand)")
    out = [f"; {n} instructions for config {cfg.name}", header]
    for pc, ins in enumerate(program.instructions):
        for name in at_pc.get(pc, []):
            out.append(f"{name}:")
        text = format_instruction(ins, cfg, labels)
        why = address_error(ins, cfg)
        if why is not None:          # the assembler refuses the address: the raw word, and why
            text = f".word {encode(ins, cfg):#0{WORD_BYTES * 2 + 2}x}    ; {text}  ({why})"
        out.append(f"    {text}")
    for name in at_pc.get(n, []):
        out.append(f"{name}:")
    return "\n".join(out) + "\n"


#: what the assembler reads as a label or a name in an expression (a label may not start with '.',
#: which starts a directive); ``label_ok`` says whether a name is one
LABEL = r"[A-Za-z_$][\w.$]*"


def label_ok(name: object) -> bool:
    """``name`` is written as a label the assembler reads back (it also refuses mnemonics and the
    config's predefined constants, which ``disassemble`` checks)."""
    return isinstance(name, str) and re.fullmatch(LABEL, name) is not None


def _config_name_ok(name: str) -> bool:
    """The assembler reads ``.config NAME`` back as this name: no comment or operand separator in it,
    no space at either end."""
    return re.fullmatch(r"[^;#,\s](?:[^;#,]*[^;#,\s])?", name) is not None


__all__ = ["format_instruction", "disassemble", "format_units", "resolve_default", "label_ok", "LABEL", "predefined",
           "isa_sizes"]
