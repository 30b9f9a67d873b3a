"""Round trips over every opcode with random legal field values."""

import pytest
from hypothesis import given, settings, strategies as st

from isa import PRESETS, Program, assemble, decode, encode
from isa.disasm import format_instruction
from isa.encoding import to_bytes
from isa.table import INSTRUCTIONS, WORD_BITS

from tests.isa.isa_strategies import instructions

CONFIGS = ["tiny", "base", "tpu"]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("spec", INSTRUCTIONS, ids=lambda s: s.mnemonic)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_decode_encode_every_opcode(name, spec, data):
    cfg = PRESETS[name]
    ins = data.draw(instructions(cfg, [spec]))
    word = encode(ins, cfg)
    assert 0 <= word < 1 << WORD_BITS
    assert word & 0xFF == spec.opcode
    assert decode(word, cfg) == ins


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("spec", INSTRUCTIONS, ids=lambda s: s.mnemonic)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_assemble_disassemble_every_opcode(name, spec, data):
    cfg = PRESETS[name]
    ins = data.draw(instructions(cfg, [spec]))
    text = format_instruction(ins, cfg)
    prog = assemble(text + "\n", cfg)
    assert prog.code_bytes() == to_bytes(encode(ins, cfg)), text


@settings(max_examples=60, deadline=None)
@given(data=st.data(), name=st.sampled_from(CONFIGS))
def test_whole_program_bytes_roundtrip(data, name):
    """disassemble(binary) re-assembles byte for byte, branch targets and labels included."""
    cfg = PRESETS[name]
    instrs = data.draw(st.lists(instructions(cfg), min_size=1, max_size=30))
    n = len(instrs)
    instrs = [i.replace(target=i["target"] % (n + 1)) if "target" in i.as_dict() else i for i in instrs]
    prog = Program(cfg, instrs)
    blob = prog.to_bytes()
    back = Program.from_bytes(blob)
    assert back.instructions == instrs
    again = assemble(back.disassemble(), cfg)
    assert again.code_bytes() == prog.code_bytes()
