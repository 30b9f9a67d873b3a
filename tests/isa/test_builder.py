"""The program builder gives the instructions that assembling the equivalent text gives."""

import pytest
from hypothesis import given, settings, strategies as st

from isa import PRESETS, assemble
from isa.disasm import format_instruction, resolve_default
from isa.builder import BuildError, Label, OperandError, ProgramBuilder, RegisterClash, acc, dram, registers, spm
from isa.encoding import Instruction
from isa.errors import EncodeError
from isa.regs import L0, L1, TRIP_REG, LoopReg, Reg
from isa.table import INSTRUCTIONS, CountMode, ScaleMode, Space, SrcMode, Unit

from tests.isa.isa_strategies import instructions

CONFIGS = ["tiny", "base", "tpu"]
TINY = PRESETS["tiny"]


def _space(n: int):
    return spm if n == Space.SPM else acc


def _at(space, imm: int, x: int):
    return space[imm + Reg(x)] if x else space[imm]


def operands(ins: Instruction, cfg, *, keep_defaults: bool) -> tuple[list, dict]:
    """The builder's arguments for ``ins``, read off its fields through the table's syntax."""
    d, spec = ins.as_dict(), ins.spec
    args, kw = [], {}
    for o in spec.syntax:
        f = o.fields
        if o.kind == "reg":
            v = Reg(d[f[0]])
        elif o.kind == "lreg":
            v = LoopReg(d[f[0]])
        elif o.kind in ("imm", "target"):
            v = d[f[0]]
        elif o.kind == "mem":
            v = _at(_space(o.space if o.space is not None else d[f[0]]), d[f[-2]], d[f[-1]])
        elif o.kind == "dram":
            v = _at(dram, d[f[0]], d[f[1]])
        elif o.kind == "src":
            m = SrcMode(d[f[0]])
            v = Reg(d[f[1]]) if m == SrcMode.REG else d[f[1]] if m == SrcMode.IMM else \
                _at(_space(int(m)), d[f[1]], d[f[2]])
        elif o.kind == "scale":
            m = ScaleMode(d[f[0]])
            v = Reg(d[f[1]]) if m == ScaleMode.REG else d[f[1]] if m == ScaleMode.IMM else _at(acc, d[f[1]], d[f[2]])
        elif o.kind == "count":
            v = Reg(d[f[1]]) if d[f[0]] == CountMode.REG else d[f[1]]
        elif o.kind == "units":
            v = [u for u in Unit if d[f[0]] >> u & 1]
        elif o.kind == "enum":
            v = o.names[d[f[0]]]
        else:
            raise AssertionError(o.kind)
        if o.key is None:
            args.append(v)
        elif keep_defaults or o.default is None or d[f[0]] != resolve_default(o, d, cfg):
            kw[o.key] = v
    if spec.queued:
        kw["rep"] = (LoopReg(d["rep_base"]), d["rep_depth"])
        kw["sync"] = "once" if d["sync"] else "each"
    if "wait" in d:
        kw["wait"] = [u for u in Unit if d["wait"] >> u & 1]
        kw["signal"] = "|".join(u.name.lower() for u in Unit if d["signal"] >> u & 1) or "none"
    return args, kw


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("spec", INSTRUCTIONS, ids=lambda s: s.mnemonic)
@settings(max_examples=15, deadline=None)
@given(data=st.data(), keep_defaults=st.booleans())
def test_every_opcode_as_the_assembler(name, spec, data, keep_defaults):
    cfg = PRESETS[name]
    ins = data.draw(instructions(cfg, [spec]))
    if "target" in ins.as_dict():
        ins = ins.replace(target=0)
    args, kw = operands(ins, cfg, keep_defaults=keep_defaults)
    b = ProgramBuilder(cfg)
    got = b.emit(spec.mnemonic, *args, **kw)
    assert got == ins and len(b) == 1
    text = format_instruction(ins, cfg)
    assert b.build().code_bytes() == assemble(text + "\n", cfg).code_bytes(), text
    assert assemble(b.text(), cfg).instructions == [ins]


def test_defaults_as_the_assembler():
    """Keyword operands left out take the assembler's defaults (estride: the element size of the memory)."""
    b = ProgramBuilder(TINY)
    b.emit("dma.ld", acc[3], dram[64])
    b.emit("dma.st", dram[64 + Reg(2)], spm[1], rows=2, rstride=None)
    b.emit("mxu.lw", spm[0])
    b.emit("vqcfg", round="half_up")
    b.emit("vadd", spm[0], spm[1], 5)
    text = "dma.ld acc[3], dram[64]\ndma.st dram[r2 + 64], spm[1], rows=2\nmxu.lw spm[0]\n" \
           "vqcfg round=half_up\nvadd spm[0], spm[1], 5\n"
    assert b.build().instructions == assemble(text, TINY).instructions


def test_labels_forward_and_backward():
    b = ProgramBuilder(TINY)
    b.comment("count to 3")
    b.emit("seti", Reg(1), 0)
    b.emit("seti", Reg(2), 3)
    top = b.label("top")
    done = b.new_label("done")
    b.emit("beq", Reg(1), Reg(2), done)              # forward: placed below
    b.emit("addi", Reg(1), Reg(1), 1)
    b.emit("jmp", top)
    b.place(done)
    b.emit("halt")
    assert len(b) == b.pc == 6
    prog = b.build("<count>")
    ref = assemble("; count to 3\n  seti r1, 0\n  seti r2, 3\ntop:\n  beq r1, r2, done\n  addi r1, r1, 1\n"
                   "  jmp top\ndone:\n  halt\n", TINY)
    assert prog.code_bytes() == ref.code_bytes()
    assert prog.labels == ref.labels == {"top": 2, "done": 5}
    assert prog.lines == [2, 3, 5, 6, 7, 9] and prog.source_name == "<count>"
    again = assemble(b.text(), TINY)
    assert again.code_bytes() == prog.code_bytes() and again.lines == prog.lines


def test_label_errors():
    b = ProgramBuilder(TINY)
    lb = b.new_label("later")
    b.emit("jmp", lb)
    with pytest.raises(BuildError, match="'later' is used .* never placed"):
        b.build()
    with pytest.raises(BuildError, match="duplicate label 'later'"):
        b.new_label("later")
    for bad in ("add", "ROWS", "1x", "a-b"):
        with pytest.raises(BuildError, match="bad label name"):
            b.new_label(bad)
    b.place(lb)
    with pytest.raises(BuildError, match="placed twice"):
        b.place(lb)
    other = ProgramBuilder(TINY).new_label("x")
    with pytest.raises(BuildError, match="another builder"):
        b.emit("jmp", other)
    assert isinstance(b.fresh_label("w"), Label) and b.fresh_label("w").name == "w_2"


def test_register_clash_names_both_owners():
    b = ProgramBuilder(TINY)
    b.reserve(TRIP_REG, "while-loop trip counter")
    b.reserve(TRIP_REG, "while-loop trip counter")                  # the same owner again: fine
    with pytest.raises(RegisterClash, match="reserved for 'while-loop trip counter'.*'kernel k0'"):
        b.reserve(TRIP_REG, "kernel k0")
    with b.scope("kernel k1", Reg(1), Reg(2)):
        b.emit("add", Reg(1), Reg(2), Reg(3))
        with pytest.raises(RegisterClash, match="r14 for 'kernel k1'.*reserved for 'while-loop trip counter'"):
            b.emit("addi", TRIP_REG, TRIP_REG, 1)
        with pytest.raises(RegisterClash, match="r14 for 'kernel k1'"):          # an index register counts
            b.emit("dma.ld", spm[0], dram[TRIP_REG])
        with pytest.raises(RegisterClash, match="r14 for 'kernel k1'"):          # so does a register count
            b.emit("loop", L0, TRIP_REG)
    assert b.owner(Reg(1)) is None and b.owner(TRIP_REG) == "while-loop trip counter"
    b.emit("addi", TRIP_REG, TRIP_REG, 1)                        # no scope: no owner to check
    assert b.registers_used == {1, 2, 3, 14}
    b.release(TRIP_REG, "while-loop trip counter")
    with pytest.raises(RegisterClash, match="cannot|not an ownable"):
        b.reserve(Reg(0), "nobody")


def test_inline_moves_targets_and_checks_owners():
    body = assemble("top:\n  addi r1, r1, 1\n  blt r1, r2, top\n  beq r1, r0, end\n  halt\nend:\n", TINY)
    b = ProgramBuilder(TINY)
    b.emit("seti", Reg(2), 4)
    b.inline(body, "body")
    b.emit("halt")
    ref = assemble("  seti r2, 4\nbody_top:\n  addi r1, r1, 1\n  blt r1, r2, body_top\n"
                   "  beq r1, r0, body_end\nbody_end:\n  halt\n", TINY)
    assert b.build().code_bytes() == ref.code_bytes()
    assert b.build().labels == ref.labels
    g = ProgramBuilder(TINY)
    g.reserve(Reg(1), "glue counter")
    with pytest.raises(RegisterClash, match="'cond body'.*'glue counter'"):
        g.inline(body, "b", owner="cond body")


@pytest.mark.parametrize("call, words", [
    (lambda b: b.emit("frob"), ["unknown mnemonic", "frob"]),
    (lambda b: b.emit("add", Reg(1), Reg(2)), ["takes 3 operand", "got 2"]),
    (lambda b: b.emit("add", Reg(1), 2, Reg(3)), ["add operand rN", "expected a scalar register", "2"]),
    (lambda b: b.emit("add", Reg(1), Reg(99), Reg(3)), ["register r99 does not exist"]),
    (lambda b: b.emit("seti", Reg(1), Reg(2)), ["seti operand imm", "expected an integer"]),
    (lambda b: b.emit("seti", Reg(1), 1 << 40), ["imm", "does not fit"]),
    (lambda b: b.emit("loop", LoopReg(9), 4), ["loop register l9 does not exist"]),
    (lambda b: b.emit("loop", 1, 4), ["expected a loop register"]),
    (lambda b: b.emit("mxu.mm", acc[0], spm[0], rep=(L1, 4)), ["loop nest", "goes past"]),
    (lambda b: b.emit("mxu.mm", acc[0], spm[0], rep=1), ["rep=", "expected a LoopReg"]),
    (lambda b: b.emit("dma.ld", spm[5000], dram[0]), ["SPM row 5000 out of range"]),
    (lambda b: b.emit("dma.ld", spm[0], dram[1 << 20]), ["DRAM address", "out of range"]),
    (lambda b: b.emit("dma.ld", spm[0], spm[0]), ["expected dram[address]"]),
    (lambda b: b.emit("dma.ld", spm[0], dram[0], len=5), ["len = 5", "max 4"]),
    (lambda b: b.emit("mxu.mm", spm[0], spm[0]), ["expected acc[row]"]),
    (lambda b: b.emit("vadd", spm[0], spm[1], spm[2], bogus=3), ["no operand bogus="]),
    (lambda b: b.emit("fence", "mxu|gpu"), ["unknown unit 'gpu'"]),
    (lambda b: b.emit("vqcfg", round="sideways"), ["expected one of"]),
    (lambda b: b.emit("sld", Reg(1), spm[Reg(0) + 1], 0), ["r0 cannot index"]),
    (lambda b: b.emit("dma.ld", spm[0], dram[0], sync="twice"), ["sync=", "'each' or 'once'"]),
    (lambda b: b.emit("seti", Reg(1), 0, wait="mxu"), ["seti has no operand wait="]),
    (lambda b: b.emit("jmp", "nowhere"), ["expected an integer"]),
])
def test_bad_operand_is_a_clear_error(call, words):
    with pytest.raises(EncodeError) as e:
        call(ProgramBuilder(TINY))
    for w in words:
        assert w in str(e.value), str(e.value)
    assert isinstance(e.value, OperandError) or "does not fit" in str(e.value) or "max" in str(e.value) \
        or "goes past" in str(e.value)


def test_too_many_instructions():
    b = ProgramBuilder(TINY)
    for _ in range(TINY.imem_words + 1):
        b.emit("nop")
    with pytest.raises(BuildError, match=f"{TINY.imem_words + 1} instructions, more than the {TINY.imem_words}-word"):
        b.build("<long>")


def test_marks_and_listing():
    b = ProgramBuilder(TINY)
    b.mark("load")
    b.emit("dma.ld", spm[0], dram[0], signal="mxu")
    b.mark("compute")
    b.emit("mxu.lw", spm[0], wait=Unit.LOAD)
    b.emit("fence", "all")
    assert b.marks == [("load", 0), ("compute", 1)]
    assert b.text().splitlines()[0] == "; --- load" and "; --- compute" in b.text()
    assert assemble(b.text(), TINY).code_bytes() == b.build().code_bytes()


def test_registers_of_an_instruction():
    b = ProgramBuilder(TINY)
    assert registers(b.emit("vadd", spm[0], acc[1 + Reg(3)], Reg(5), n=2)) == {3, 5}
    assert registers(b.emit("vreq", spm[0], acc[0], Reg(6))) == {6}
    assert registers(b.emit("vreq", spm[0], acc[0], 6)) == set()
    assert registers(b.emit("loop", L0, Reg(7))) == {7}
    assert registers(b.emit("sst", Reg(4), acc[0], 1)) == {4}
    assert registers(b.emit("add", Reg(1), Reg(0), Reg(2))) == {1, 2}
