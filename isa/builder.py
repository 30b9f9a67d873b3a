"""The program builder: code that writes programs emits instruction values here, never text.

    from isa.builder import ProgramBuilder, acc, dram, spm
    from isa.regs import L1, Reg

    b = ProgramBuilder(cfg)
    b.comment("copy 4 rows")
    b.emit("seti", Reg(1), 0)
    top = b.label("top")                              # placed here; new_label() + place() for forward refs
    b.emit("loop", L1, 4, s0=1, s1=cfg.cols)
    b.emit("dma.ld", spm[0], dram[0x100 + Reg(1)], rows=1, rep=L1, signal="store")
    b.emit("dma.st", dram[0x200], spm[0], rep=L1, wait="load", sync="once")
    b.emit("addi", Reg(1), Reg(1), 1)
    b.emit("blt", Reg(1), Reg(2), top)
    b.emit("halt")
    prog = b.build("<copy>")                          # an isa.program.Program; b.text() is its listing

Operands are Python values in the table's syntax order (``isa.table``: the same slots the assembler
fills from text): a register is an ``isa.regs.Reg``, a loop register a ``LoopReg``, a memory operand
``spm[row]``/``acc[row]``/``dram[byte]`` whose index may add one register (``spm[5 + Reg(3)]``), an
immediate an int, a branch target a ``Label`` (or an instruction index), units a string in the
assembler's spelling (``"load|mxu"``, ``"all"``), ``Unit`` values or an iterable of either, an enum
operand its name or value. Keyword operands (``rows=``, ``n=``...) and the modifiers ``rep=`` (a
``LoopReg``: depth 1, or ``(LoopReg, depth)``), ``wait=``, ``signal=``, ``sync=`` (``"each"``/``"once"``)
are keywords; ``None`` leaves one at its default. The values and their mapping to fields live in
``isa.operands``, which the assembler calls too, so ``build()`` gives the instructions that
assembling the listing gives.

The builder counts instructions (``len(b)`` is the next pc), resolves labels when it builds, keeps
comments and phase marks for the listing, and checks register ownership: ``reserve(reg, owner)``
and ``scope(owner, *regs)`` claim registers, and an instruction that uses a register another owner
holds raises ``RegisterClash`` naming both owners.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from . import operands as ops
from .asm import _syntax_hint, predefined
from .disasm import format_instruction
from .encoding import Instruction, canonical, check_values
from .errors import TetrachipError
from .operands import Label, Mem, OperandError, acc, dram, spm
from .program import Program
from .regs import Reg
from .table import BY_MNEMONIC, CountMode, Instr, Operand, ScaleMode, SrcMode


class BuildError(TetrachipError):
    """A program that cannot be built: a label placed twice or never, too many instructions."""


class RegisterClash(TetrachipError):
    """A scalar register claimed by two owners."""


def registers(ins: Instruction) -> set[int]:
    """Scalar registers an instruction reads or writes (r0 left out), from the table's fields."""
    d = ins.as_dict()
    out = {d[f.name] for f in ins.spec.fields if f.width == "sreg"}
    for mode_f, val_f, reg_mode in (("bmode", "b", SrcMode.REG), ("smode", "scale", ScaleMode.REG),
                                    ("cmode", "count", CountMode.REG)):
        if d.get(mode_f) == reg_mode:
            out.add(d[val_f])
    out.discard(0)
    return out


_LABEL_NAME = re.compile(r"[A-Za-z_$][\w$]*")


# --------------------------------------------------------------------------------------------
# The builder
# --------------------------------------------------------------------------------------------

class ProgramBuilder:
    """Builds one ``Program`` for ``config`` from instruction values (see the module docstring)."""

    def __init__(self, config):
        self.config = config
        self._ins: list[Instruction] = []
        self._fixups: dict[int, Label] = {}               # pc -> label of its branch target
        self._labels: dict[str, Label] = {}
        self._items: list[str | Label | int] = []        # a comment, a label placed, an instruction's pc
        self._owners: dict[int, str] = {}
        self._scope: str | None = None
        self._used: set[int] = set()
        self._fresh = 0
        self._reserved_names = set(predefined(config))
        #: prepended to the name of every new label (code emitted more than once into one program gives each
        #: copy its own labels)
        self.label_prefix = ""
        #: (phase name, pc of its first instruction), in order
        self.marks: list[tuple[str, int]] = []

    # -- counting ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ins)

    @property
    def pc(self) -> int:
        """Index of the next instruction."""
        return len(self._ins)

    @property
    def registers_used(self) -> frozenset[int]:
        """Scalar registers the instructions so far read or write (r0 left out)."""
        return frozenset(self._used)

    # -- labels, comments, marks ---------------------------------------------------------------
    def new_label(self, name: str) -> Label:
        """A label named ``label_prefix + name``, placed later with ``place`` (a forward reference until then)."""
        name = self.label_prefix + name
        if not _LABEL_NAME.fullmatch(name) or name in BY_MNEMONIC or name in self._reserved_names:
            raise BuildError(f"bad label name {name!r} (a name like 'loop_top', not a mnemonic or "
                             f"a predefined constant)")
        if name in self._labels:
            raise BuildError(f"duplicate label {name!r}")
        lb = Label(name, self)
        self._labels[name] = lb
        return lb

    def fresh_label(self, stem: str) -> Label:
        """A new label ``stem_N`` whose number no other fresh label of this builder has."""
        while True:
            self._fresh += 1
            name = f"{stem}_{self._fresh}"
            if name not in self._labels:
                return self.new_label(name)

    def place(self, label: Label) -> Label:
        """Bind ``label`` to the next instruction."""
        if label._builder is not self:
            raise BuildError(f"label {label.name!r} belongs to another builder")
        if label.pc is not None:
            raise BuildError(f"label {label.name!r} placed twice (at {label.pc} and {len(self._ins)})")
        label.pc = len(self._ins)
        self._items.append(label)
        return label

    def label(self, name: str) -> Label:
        """A new label named ``name`` at the next instruction."""
        return self.place(self.new_label(name))

    def comment(self, text: str) -> None:
        """A comment before the next instruction (kept for the listing)."""
        for line in str(text).splitlines() or [""]:
            self._items.append(line)

    def mark(self, phase: str) -> None:
        """Start a phase at the next instruction: recorded in ``marks`` and commented in the listing."""
        self.marks.append((phase, len(self._ins)))
        self.comment(f"--- {phase}")

    # -- register ownership --------------------------------------------------------------------
    def reserve(self, reg: Reg, owner: str) -> None:
        """Claim ``reg`` for ``owner``; RegisterClash if another owner holds it."""
        n = self._regnum(reg, "reserve")
        held = self._owners.get(n)
        if held is not None and held != owner:
            raise RegisterClash(f"r{n} is reserved for {held!r}; {owner!r} cannot reserve it")
        self._owners[n] = owner

    def release(self, reg: Reg, owner: str) -> None:
        n = self._regnum(reg, "release")
        if self._owners.get(n) != owner:
            raise RegisterClash(f"r{n} is not reserved for {owner!r} (held by {self._owners.get(n)!r})")
        del self._owners[n]

    def owner(self, reg: Reg) -> str | None:
        """Who holds ``reg``, or None."""
        return self._owners.get(self._regnum(reg, "owner"))

    @contextlib.contextmanager
    def scope(self, owner: str, *regs: Reg) -> Iterator["ProgramBuilder"]:
        """Emit as ``owner``: ``regs`` are reserved for it until the block ends, and every instruction
        emitted in the block that uses a register another owner holds raises RegisterClash."""
        mine = [r for r in regs if self._owners.get(self._regnum(r, "scope")) != owner]
        for r in mine:
            self.reserve(r, owner)
        outer, self._scope = self._scope, owner
        try:
            yield self
        finally:
            self._scope = outer
            for r in mine:
                if self._owners.get(r.n) == owner:
                    del self._owners[r.n]

    def _regnum(self, reg: object, what: str) -> int:
        if not isinstance(reg, Reg):
            raise RegisterClash(f"{what}: expected a scalar register (isa.regs.Reg), got {reg!r}")
        if not 0 < reg.n < self.config.scalar_regs:
            raise RegisterClash(f"{what}: r{reg.n} is not an ownable register (r1..r{self.config.scalar_regs - 1})")
        return reg.n

    # -- instructions --------------------------------------------------------------------------
    def emit(self, op: str, *operands: object, **keywords: object) -> Instruction:
        """Append one instruction ``op`` (a mnemonic of the table) and return it (a branch to a label
        not yet placed holds target 0 until ``build``)."""
        spec = BY_MNEMONIC.get(op)
        if spec is None:
            raise OperandError(f"unknown mnemonic {op!r}")
        positional = ops.positional(spec)
        if len(operands) != len(positional):
            raise OperandError(f"{op} takes {len(positional)} operand(s) ({_syntax_hint(spec)}), got {len(operands)}")
        values: dict[str, int] = {}
        target: Label | None = None
        for o, v in zip(positional, operands):
            target = self._operand(spec, o, v, values) or target
        for key, v in keywords.items():
            if v is None:
                continue
            slot = ops.keyword(spec, key)
            if isinstance(slot, str):
                with _naming(f"{op} {key}="):
                    ops.modifier(slot, v, values, self.config)
            else:
                target = self._operand(spec, slot, v, values) or target
        return self._append(ops.finish(spec, values, self.config), target)

    def append(self, ins: Instruction, target: Label | None = None) -> Instruction:
        """Append an instruction value as it is (``target``: a label its branch target resolves to)."""
        check_values(ins, self.config)
        return self._append(canonical(ins, self.config), target)

    def inline(self, program: Program, prefix: str, *, drop_halt: bool = True,
               owner: str | None = None) -> None:
        """Append the instructions of ``program`` (without its ``halt``s when ``drop_halt``), branch
        targets moved along; its labels come along renamed ``prefix_NAME``. ``owner`` (default: the
        current scope) is who uses its registers: one held by another owner raises RegisterClash."""
        if program.config != self.config:
            raise BuildError(f"cannot inline a program for config {program.config.name!r} into one for "
                             f"{self.config.name!r}")
        keep = [not (drop_halt and ins.op == "halt") for ins in program.instructions]
        if owner is not None:
            self._check_owner(set().union(*map(registers, program.instructions)) if program.instructions
                              else set(), owner, f"the inlined program {prefix!r}")
        names_at: dict[int, list[str]] = {}
        for name, pc in program.labels.items():
            names_at.setdefault(pc, []).append(name)
        for ins in program.instructions:
            if "target" in ins.as_dict() and ins["target"] not in names_at:
                names_at[ins["target"]] = [f"L{ins['target']}"]
        at = {pc: [self.new_label(f"{prefix}_{n}") for n in names] for pc, names in names_at.items()}
        scope, self._scope = self._scope, owner or self._scope
        try:
            for pc, ins in enumerate(program.instructions):
                for lb in at.get(pc, []):
                    self.place(lb)
                if keep[pc]:
                    to = at[ins["target"]][0] if "target" in ins.as_dict() else None
                    self.append(ins.replace(target=0) if to is not None else ins, to)
        finally:
            self._scope = scope
        for pc in sorted(p for p in at if p >= len(program.instructions)):
            for lb in at[pc]:
                self.place(lb)

    def _append(self, ins: Instruction, target: Label | None) -> Instruction:
        regs = registers(ins)
        if self._scope is not None:
            self._check_owner(regs, self._scope, f"{ins.op} at pc {len(self._ins)}")
        self._used |= regs
        if target is not None:
            if "target" not in ins.as_dict():
                raise BuildError(f"{ins.op} has no branch target for label {target.name!r}")
            if target._builder is not self:
                raise BuildError(f"{ins.op}: label {target.name!r} belongs to another builder")
            self._fixups[len(self._ins)] = target
        self._items.append(len(self._ins))
        self._ins.append(ins)
        return ins

    def _check_owner(self, regs: set[int], owner: str, what: str) -> None:
        for n in sorted(regs):
            held = self._owners.get(n)
            if held is not None and held != owner:
                raise RegisterClash(f"{what} uses r{n} for {owner!r}, but r{n} is reserved for {held!r}")

    def _operand(self, spec: Instr, o: Operand, v: object, values: dict[str, int]) -> Label | None:
        with _naming(f"{spec.mnemonic} operand {o.key + '=' if o.key else _hint_of(o)}"):
            return ops.operand(o, v, values, self.config)

    # -- output --------------------------------------------------------------------------------
    def instructions(self) -> list[Instruction]:
        """The instructions with every branch target resolved (BuildError for a label never placed)."""
        out = list(self._ins)
        for pc, lb in self._fixups.items():
            if lb.pc is None:
                raise BuildError(f"label {lb.name!r} is used (by {out[pc].op} at pc {pc}) but never placed")
            ins = out[pc].replace(target=int(lb.pc))
            check_values(ins, self.config)
            out[pc] = ins
        return out

    def build(self, name: str = "<builder>", manifest: dict | None = None) -> Program:
        """The Program: instructions, labels (name -> pc), ``lines`` (of ``text()``), ``manifest``."""
        cfg = self.config
        if len(self._ins) > cfg.imem_words:
            raise BuildError(f"{name}: program has {len(self._ins)} instructions, more than the "
                             f"{cfg.imem_words}-word instruction memory")
        instrs = self.instructions()
        lines = [k for k, x in enumerate(self._items, 1) if isinstance(x, int)]
        labels = {x.name: int(x.pc) for x in self._items if isinstance(x, Label) and x.pc is not None}
        return Program(cfg, instrs, labels=labels, lines=lines, source_name=name,
                       manifest=dict(manifest or {}))

    def text(self) -> str:
        """The listing: comments, labels and instructions in the assembler's syntax, one a line
        (``assemble(b.text())`` gives the instructions ``build()`` gives)."""
        instrs = self.instructions()
        out = []
        for x in self._items:
            if isinstance(x, str):
                out.append(f"; {x}" if x else ";")
            elif isinstance(x, Label):
                out.append(f"{x.name}:")
            else:
                lb = self._fixups.get(x)
                out.append("        " + format_instruction(instrs[x], self.config,
                                                           {instrs[x]["target"]: lb.name} if lb is not None else None))
        return "\n".join(out) + "\n"


@contextlib.contextmanager
def _naming(what: str) -> Iterator[None]:
    """An OperandError raised in the block names ``what`` (the instruction and its operand)."""
    try:
        yield
    except OperandError as e:
        raise OperandError(f"{what}: {e}", expected=e.expected, index=e.index) from None


def _hint_of(o: Operand) -> str:
    return {"reg": "rN", "lreg": "lN", "target": "target", "dram": "dram[addr]", "mem": "memory row",
            "src": "b", "scale": "scale", "count": "count", "units": "units",
            "enum": o.fields[0], "imm": o.fields[0]}[o.kind]


__all__ = ["ProgramBuilder", "Label", "Mem", "spm", "acc", "dram", "registers", "OperandError",
           "BuildError", "RegisterClash"]
