"""The assembler (text to a Program), derived from the instruction table; ``isa.disasm`` writes text back.

Syntax (one instruction per line)::

    ; comments start with ';' or '#'
    .config tiny                 ; optional: the config this file is written for
    .equ    TILE, 4 * ROWS       ; named constant (ROWS, COLS, SPM_ROWS, ... are predefined)
    start:  seti r1, 100         ; labels end with ':'
            loop l0, r1, s0=1, s1=COLS
            dma.ld spm[0], dram[0x100], rows=TILE, rstride=COLS, rep=l0:1, signal=mxu
            bne r1, r0, start

Operands are written in the table's syntax order; keyword operands (``rows=``, ``n=``...) may
come in any order after the positional ones. Queued instructions take the modifiers
``rep=lB:D`` (loop nest), ``wait=UNITS``, ``signal=UNITS`` and ``sync=each|once``; UNITS is
``none``, ``all`` or names joined by ``|`` (scalar, load, store, mxu, vpu, ltx, lrx).
Expressions use integers (decimal, 0x, 0b, 0o), constants, labels, parentheses and the C
operators ``+ - * / % << >> & ^ | ~`` (``/`` and ``%`` truncate toward zero; a division by zero, a
shift by a count outside 0..255 or a value beyond 2**(2*WORD_BITS) is an error). ``.word EXPR``
places one raw instruction word, which must decode for the config (the disassembler writes one for
an instruction whose address lies past the end of its memory, which only the running chip refuses).
A source that says ``.config NAME`` assembles for a config of that name, or for one with the sizes
of preset NAME (a config file ``preset = "tiny"`` that changes only latencies or the clock).

The assembler reads text (expressions, labels, constants, directives) into the operand values of
``isa.operands`` (``Reg``, ``LoopReg``, ``spm[...]``/``acc[...]``/``dram[...]``, unit and enum
names) and hands them to its mapping, the one the program builder (``isa.builder``) calls, for the
fields. Every error is an ``AsmError`` printed as ``FILE:LINE:COL: message``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from . import operands as ops
from .disasm import LABEL, disassemble, isa_sizes, predefined
from .encoding import Instruction, decode, decode_all
from .errors import AsmError, DecodeError, EncodeError, TetrachipError
from .operands import Mem, OperandError
from .regs import LoopReg, Reg
from .table import BY_MNEMONIC, WORD_BITS, Instr, Operand, Round

if TYPE_CHECKING:
    from .config import ChipConfig
    from .program import Program

#: how the assembler reports an error at a column of the current line (raises AsmError)
ErrorAt = Callable[[str, int], NoReturn]

_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|\d[\d_]*)"
                    r"|([A-Za-z_.$][\w.$]*)|(<<|>>|[-+*/%&|^~()\[\]:=]))")


# --------------------------------------------------------------------------------------------
# Lexing and expressions
# --------------------------------------------------------------------------------------------

@dataclass
class Tok:
    kind: str  # num, name, op, end
    text: str
    col: int   # 1-based column in the source line
    value: int = 0


def _lex(text: str, col0: int, err: ErrorAt) -> list[Tok]:
    toks: list[Tok] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            toks.append(Tok("end", "", col0 + pos))
            return toks
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            err(f"unexpected character {text[pos]!r}", col0 + pos)
        num, name, op = m.groups()
        assert m.lastindex is not None   # the one alternative (a group) that matched
        start = m.start(m.lastindex)
        if num is not None:
            digits = num.replace("_", "")
            try:
                value = int(digits, 0) if digits[:2].lower() in ("0x", "0b", "0o") else int(digits, 10)
            except ValueError:
                err(f"bad number {num!r}", col0 + start)
            toks.append(Tok("num", num, col0 + start, value))
        elif name is not None:
            toks.append(Tok("name", name, col0 + start))
        else:
            toks.append(Tok("op", op, col0 + start))
        pos = m.end()


#: the largest magnitude an expression may reach (room for a whole instruction word, ``.word``): a
#: bigger literal or intermediate value is an error, so ``1 << 255 << 255 ...`` never grows without bound
MAX_VALUE = 1 << (2 * WORD_BITS)
#: binary operators by precedence, lowest first (C's order); unary ``- + ~`` bind tighter than all
_PREC = {op: level for level, ops_ in enumerate([("|",), ("^",), ("&",), ("<<", ">>"), ("+", "-"),
                                                ("*", "/", "%")]) for op in ops_}
#: shift counts an expression may use
MAX_SHIFT = 256


def _binop(op: str, a: int, b: int, col: int, err: ErrorAt) -> int:
    """``a op b`` in C semantics (``/`` and ``%`` truncate toward zero); a division by zero or a shift
    by a count outside 0..MAX_SHIFT-1 is an error at ``col``."""
    if op in ("/", "%"):
        if b == 0:
            err("division by zero", col)
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return q if op == "/" else a - b * q
    if op in ("<<", ">>"):
        if not 0 <= b < MAX_SHIFT:
            err(f"shift count {b} out of range 0..{MAX_SHIFT - 1}", col)
        return a << b if op == "<<" else a >> b
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "&":
        return a & b
    if op == "^":
        return a ^ b
    assert op == "|", op
    return a | b


class _Expr:
    """Evaluation of an integer expression over a token list, from token ``i`` to the first token that
    cannot continue it (``i`` is left there). Operator precedence parsing with explicit stacks, so
    parentheses nest as deep as the line allows without recursion."""

    def __init__(self, toks: list[Tok], i: int, names: dict[str, int], err: ErrorAt) -> None:
        self.toks, self.i, self.names, self.err = toks, i, names, err

    def _check(self, v: int, col: int) -> int:
        if abs(v) > MAX_VALUE:
            self.err(f"value too large (more than 2**{MAX_VALUE.bit_length() - 1} in magnitude)", col)
        return v

    def parse(self) -> int:
        values: list[int] = []
        #: pending operators: ("u", text, col) unary, ("b", text, col) binary, ("(", "(", col)
        pending: list[tuple[str, str, int]] = []

        def reduce() -> None:
            kind, op, col = pending.pop()
            if kind == "u":
                v = values.pop()
                values.append(self._check(-v if op == "-" else ~v if op == "~" else v, col))
            else:
                b, a = values.pop(), values.pop()
                values.append(self._check(_binop(op, a, b, col, self.err), col))

        while True:
            # an operand: prefix operators and opening parentheses, then a number or a name
            t = self.toks[self.i]
            while t.kind == "op" and t.text in ("-", "+", "~", "("):
                pending.append(("(" if t.text == "(" else "u", t.text, t.col))
                self.i += 1
                t = self.toks[self.i]
            if t.kind == "num":
                values.append(self._check(t.value, t.col))
            elif t.kind == "name":
                if t.text not in self.names:
                    self.err(f"undefined name {t.text!r}", t.col)
                values.append(self.names[t.text])
            else:
                self.err("expected a number or a name" + (f", found {t.text!r}" if t.text else ""), t.col)
            self.i += 1
            # closing parentheses and unary operators that end here, then a binary operator or the end
            while True:
                while pending and pending[-1][0] == "u":
                    reduce()
                t = self.toks[self.i]
                if t.kind == "op" and t.text == ")" and any(k == "(" for k, _, _ in pending):
                    while pending[-1][0] != "(":
                        reduce()
                    pending.pop()
                    self.i += 1
                    continue
                break
            if t.kind == "op" and t.text in _PREC:
                while pending and pending[-1][0] == "b" and _PREC[pending[-1][1]] >= _PREC[t.text]:
                    reduce()
                pending.append(("b", t.text, t.col))
                self.i += 1
                continue
            while pending and pending[-1][0] != "(":
                reduce()
            if pending:
                self.err("expected ')'", t.col)
            return values[-1]


# --------------------------------------------------------------------------------------------
# Assembling
# --------------------------------------------------------------------------------------------

@dataclass
class _Line:
    lineno: int
    mnemonic: str
    mcol: int
    operands: list[tuple[str, int]]  # (text, column)
    source: str


def _split_operands(text: str, col0: int, err: ErrorAt) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    depth, start = 0, 0
    for k, ch in enumerate(text + ","):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and (depth <= 0 or k == len(text)):
            piece = text[start:k]
            stripped = piece.strip()
            c = col0 + start + (len(piece) - len(piece.lstrip()))
            if not stripped:
                if k < len(text) or out:
                    err("empty operand", c)
            else:
                out.append((stripped, c))
            start, depth = k + 1, 0
    return out


def _strip_comment(line: str) -> str:
    for k, ch in enumerate(line):
        if ch in ";#":
            return line[:k]
    return line


class Assembler:
    def __init__(self, cfg: ChipConfig, filename: str = "<input>") -> None:
        self.cfg, self.filename = cfg, filename
        self.names: dict[str, int] = predefined(cfg)
        self.labels: dict[str, int] = {}
        self.lineno = 0

    def err(self, msg: str, col: int, line: int | None = None) -> NoReturn:
        raise AsmError(msg, self.filename, self.lineno if line is None else line, col)

    # pass 1: labels, constants, instruction lines
    def scan(self, text: str) -> list[_Line]:
        lines: list[_Line] = []
        for self.lineno, raw in enumerate(text.splitlines(), 1):
            body = _strip_comment(raw)
            pos = 0
            while True:  # labels
                m = re.match(rf"\s*({LABEL})\s*:(?!=)", body[pos:])
                if not m:
                    break
                name = m.group(1)
                col = pos + m.start(1) + 1
                if name in self.labels:
                    self.err(f"duplicate label {name!r}", col)
                if name in BY_MNEMONIC:
                    self.err(f"label {name!r} is a mnemonic", col)
                if name in self.names:
                    self.err(f"label {name!r} is already a constant", col)
                self.labels[name] = len(lines)
                self.names[name] = len(lines)
                pos += m.end()
            rest = body[pos:]
            if not rest.strip():
                continue
            m = re.match(r"\s*(\S+)", rest)
            assert m is not None            # rest is not blank
            word, wcol = m.group(1), pos + m.start(1) + 1
            after = rest[m.end():]
            acol = pos + m.end() + 1
            if word.lower() == ".word":     # a raw instruction word: read in pass 2 (it may name labels)
                lines.append(_Line(self.lineno, ".word", wcol, _split_operands(after, acol, self.err), raw))
                continue
            if word.startswith("."):
                self.directive(word.lower(), wcol, after, acol)
                continue
            if not re.fullmatch(r"[A-Za-z][\w.]*", word):
                self.err(f"expected a mnemonic, found {word!r}", wcol)
            ops = _split_operands(after, acol, self.err)
            lines.append(_Line(self.lineno, word.lower(), wcol, ops, raw))
        return lines

    def directive(self, word: str, wcol: int, after: str, acol: int) -> None:
        ops = _split_operands(after, acol, self.err)
        if word in (".equ", ".set"):
            if len(ops) != 2:
                self.err(f"{word} takes a name and a value, got {len(ops)} operand(s)", wcol)
            (name, ncol), (expr, ecol) = ops
            if not re.fullmatch(r"[A-Za-z_$][\w$]*", name):
                self.err(f"bad constant name {name!r}", ncol)
            if name in self.labels or name in BY_MNEMONIC or (name in self.names and word == ".equ"):
                self.err(f"duplicate name {name!r}", ncol)
            self.names[name] = self.expr(expr, ecol)
        elif word == ".config":
            if len(ops) != 1:
                self.err(".config takes one config name", wcol)
            name, col = ops[0]
            why = config_mismatch(name, self.cfg)
            if why:
                self.err(why, col)
        else:
            self.err(f"unknown directive {word!r} (known: .equ, .set, .config, .word)", wcol)

    def expr(self, text: str, col: int) -> int:
        toks = _lex(text, col, self.err)
        e = _Expr(toks, 0, self.names, self.err)
        v = e.parse()
        if toks[e.i].kind != "end":
            self.err(f"unexpected {toks[e.i].text!r} in expression", toks[e.i].col)
        return v

    # pass 2: operand text -> operand values (isa.operands) -> fields
    def instruction(self, ln: _Line, pc: int) -> Instruction:
        self.lineno = ln.lineno
        if ln.mnemonic == ".word":
            return self.raw_word(ln)
        spec = BY_MNEMONIC.get(ln.mnemonic)
        if spec is None:
            self.err(f"unknown mnemonic {ln.mnemonic!r}", ln.mcol)
        positional = ops.positional(spec)
        values: dict[str, int] = {}
        cols: dict[str, int] = {}
        npos, seen = 0, set()
        for text, col in ln.operands:
            m = re.match(r"([A-Za-z_]\w*)\s*=(?!=)\s*", text)
            if m:
                key = m.group(1)
                vtext, vcol = text[m.end():], col + m.end()
                if key in seen:
                    self.err(f"{key}= given twice", col)
                seen.add(key)
                try:
                    slot = ops.keyword(spec, key)
                except OperandError as e:
                    self.err(str(e), col)
                if isinstance(slot, str):
                    self.modifier(slot, vtext, vcol, values, cols)
                else:
                    self.operand(slot, vtext, vcol, values, cols)
                continue
            if seen:
                self.err("positional operand after a keyword operand", col)
            if npos >= len(positional):
                self.err(f"{spec.mnemonic} takes {len(positional)} operand(s), got more", col)
            self.operand(positional[npos], text, col, values, cols)
            npos += 1
        if npos < len(positional):
            self.err(f"{spec.mnemonic} takes {len(positional)} operand(s) "
                     f"({_syntax_hint(spec)}), got {npos}", ln.mcol)
        try:
            return ops.finish(spec, values, self.cfg)
        except EncodeError as e:           # an OperandError (a keyword operand missing) names no field
            self.err(str(e), cols.get(getattr(e, "field", ""), ln.mcol))

    def raw_word(self, ln: _Line) -> Instruction:
        """``.word EXPR``: the instruction that word decodes to for the config."""
        if len(ln.operands) != 1:
            self.err(f".word takes one instruction word, got {len(ln.operands)} operand(s)", ln.mcol)
        text, col = ln.operands[0]
        try:
            return decode(self.expr(text, col), self.cfg)
        except DecodeError as e:
            self.err(f".word: {e}", col)

    def operand(self, o: Operand, text: str, col: int, values: dict[str, int], cols: dict[str, int]) -> None:
        """Parse ``text`` into the value of operand ``o`` and put its fields."""
        k, icol = o.kind, col
        v: object = text                       # units and enum names: the mapping reads the text
        if k in ("reg", "lreg"):
            v = (Reg if k == "reg" else LoopReg)(self.register(text, col, "r" if k == "reg" else "l"))
        elif k in ("imm", "target"):
            if k == "target" and re.fullmatch(r"[A-Za-z_.$][\w.$]*", text) and text not in self.names:
                self.err(f"undefined label {text!r}", col)
            v = self.expr(text, col)
        elif k in ("mem", "dram"):
            v, icol = self.memref(o, text, col)
        elif k in ("src", "scale", "count"):
            if re.fullmatch(r"[rR]\d+", text):
                v = Reg(self.register(text, col, "r"))
            elif ops.spaces(o) and re.match(r"(spm|acc)\s*\[", text, re.I):
                v, icol = self.memref(o, text, col)
            else:
                v = self.expr(text, col)
        self.put(lambda: ops.operand(o, v, values, self.cfg), text, col, icol, values, cols)

    def modifier(self, key: str, text: str, col: int, values: dict[str, int], cols: dict[str, int]) -> None:
        """Parse ``text`` into the value of modifier ``key`` and put its fields."""
        v: object = text                       # wait, signal, sync: the mapping reads the text
        if key == "rep":
            m = re.fullmatch(r"\s*[lL](\d+)\s*:\s*(.+?)\s*", text)
            if not m:
                self.err(f"expected rep=lBASE:DEPTH, found {text!r}", col)
            v = (LoopReg(int(m.group(1))), self.expr(m.group(2), col + m.start(2)))
        self.put(lambda: ops.modifier(key, v, values, self.cfg), text, col, col, values, cols)

    def put(self, mapping: Callable[[], object], text: str, col: int, icol: int, values: dict[str, int],
            cols: dict[str, int]) -> None:
        """Run ``mapping`` (it puts one operand's fields): its errors point at ``col`` (an index
        register's at ``icol``), and so do encoding errors about the fields it put."""
        before = set(values)
        try:
            mapping()
        except OperandError as e:
            if e.expected is not None:
                self.err(f"expected {e.expected}, found {text!r}", col)
            self.err(str(e), icol if e.index else col)
        for name in values.keys() - before:
            cols[name] = col

    def register(self, text: str, col: int, prefix: str) -> int:
        """The number of register ``rN`` (``prefix`` "r") or ``lN`` ("l"); the mapping checks it exists."""
        m = re.fullmatch(rf"[{prefix}{prefix.upper()}](\d+)", text.strip())
        if not m:
            count = self.cfg.scalar_regs if prefix == "r" else self.cfg.loop_regs
            kind = "register" if prefix == "r" else "loop register"
            self.err(f"expected a {kind} {prefix}0..{prefix}{count - 1}, found {text!r}", col)
        return int(m.group(1))

    def memref(self, o: Operand, text: str, col: int) -> tuple[object, int]:
        """``spm[...]``, ``acc[...]`` or ``dram[...]`` as a ``Mem`` and the column of its index
        register. Text that is no such address, or names a memory that ``o`` does not address, comes
        back as it is, unread, for the mapping to say what the operand takes."""
        m = re.fullmatch(r"((?i:spm|acc)|dram)\s*\[(.*)\]\s*", text, re.S)
        if not m or m.group(1).lower() not in ops.spaces(o):
            return text, col
        v, x, xcol = self.indexed(m.group(2), col + m.start(2))
        return Mem(m.group(1).lower(), v, x), xcol

    def indexed(self, text: str, col: int) -> tuple[int, Reg | None, int]:
        """An address ``expr``, ``rN``, ``rN + expr`` or ``expr + rN``: (immediate, register, its column)."""
        m = re.fullmatch(r"\s*([rR]\d+)\s*(?:\+(.*))?", text, re.S) or \
            re.fullmatch(r"(?P<e>.*)\+\s*(?P<r>[rR]\d+)\s*", text, re.S)
        if not m:
            return self.expr(text, col), None, col
        if m.re.groupindex:
            rtext, rcol, etext, ecol = m.group("r"), col + m.start("r"), m.group("e"), col
        else:
            rtext, rcol = m.group(1), col + m.start(1)
            etext, ecol = m.group(2), col + (m.start(2) if m.group(2) is not None else 0)
        x = Reg(self.register(rtext, rcol, "r"))
        return (self.expr(etext, ecol) if etext is not None else 0), x, rcol


def _syntax_hint(spec: Instr) -> str:
    return " ".join([spec.mnemonic, ", ".join(_operand_hint(o) for o in spec.syntax if o.key is None)])


def _operand_hint(o: Operand) -> str:
    return {"reg": "rN", "lreg": "lN", "imm": o.fields[0], "target": "label", "dram": "dram[addr]",
            "mem": (o.space.name.lower() if o.space is not None else "spm|acc") + "[row]",
            "src": "spm[row]|acc[row]|rN|imm", "scale": "imm|rN|acc[row]", "count": "rN|imm",
            "units": "unit|unit..", "enum": "|".join(o.names)}[o.kind]


def config_mismatch(name: str, cfg: ChipConfig) -> str | None:
    """Why a source that says ``.config NAME`` cannot be assembled for ``cfg``, or None when it can.

    It can when ``cfg`` has that name, or when NAME is a preset and ``cfg`` has the preset's value of
    every size the instructions and the predefined constants read (``isa.table.Sizes``): a config file
    that says ``preset = "tiny"`` (and changes only latencies, the clock or the name) assembles a
    source written for tiny to the same words."""
    from .config import PRESETS

    if name == cfg.name:
        return None
    preset = PRESETS.get(name)
    if preset is None:
        return f"this file is written for config {name!r}, not {cfg.name!r}"
    differ = [f"{f} {getattr(preset, f)} vs {getattr(cfg, f)}" for f in isa_sizes()
              if getattr(preset, f) != getattr(cfg, f)]
    if not differ:
        return None
    return (f"this file is written for config {name!r}, and config {cfg.name!r} differs from it in "
            f"{', '.join(differ)}")


def assemble(text: str, cfg: ChipConfig | str | None = None, filename: str = "<input>") -> Program:
    """Assemble source text into a Program for ``cfg`` (a ChipConfig, a preset name or a config file;
    default: the file's .config if it names a preset, else base)."""
    from .config import ChipConfig
    from .program import Program

    if not isinstance(text, str):
        raise AsmError(f"assembly source is text, not {type(text).__name__}", filename, 0, 0)
    if cfg is None:
        m = re.search(r"^\s*\.config\s+([\w.-]+)", text, re.M)
        cfg = ChipConfig.preset(m.group(1)) if m and m.group(1) in _preset_names() else ChipConfig.preset("base")
    else:
        cfg = ChipConfig.load(cfg)
    a = Assembler(cfg, filename)
    lines = a.scan(text)
    if len(lines) > cfg.imem_words:
        ln = lines[cfg.imem_words]
        a.err(f"program has {len(lines)} instructions, more than the {cfg.imem_words}-word "
              f"instruction memory", ln.mcol, ln.lineno)
    instrs = [a.instruction(ln, pc) for pc, ln in enumerate(lines)]
    return Program(cfg, instrs, labels=dict(a.labels),
                   lines=[ln.lineno for ln in lines], source_name=filename)


def assemble_file(path: str | Path, cfg: ChipConfig | str | None = None) -> Program:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise AsmError(f"cannot read source: {msg}", str(path), 0, 0) from None
    return assemble(text, cfg, str(path))


def _preset_names() -> dict[str, ChipConfig]:
    from .config import PRESETS
    return PRESETS


def disassemble_words(data: bytes, cfg: ChipConfig) -> str:
    """Disassemble raw instruction words (no header)."""
    from .program import Program
    return disassemble(Program(cfg, decode_all(data, cfg)))


__all__ = ["assemble", "assemble_file", "disassemble", "AsmError",
           "TetrachipError", "Round", "predefined"]
