"""Every example assembles for its config and round-trips through the binary and the disassembler."""

from pathlib import Path

import pytest

from isa import Program, assemble, assemble_file

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.s"))


def test_there_are_examples():
    names = {p.name for p in EXAMPLES}
    assert {"gemm_tiled.s", "vector_loop.s"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_roundtrip(path):
    prog = assemble_file(path)
    back = Program.from_bytes(prog.to_bytes())
    assert back.instructions == prog.instructions
    assert assemble(back.disassemble(), back.config).code_bytes() == prog.code_bytes()


def test_vector_loop_trip_counts_come_from_a_register():
    prog = assemble_file(EXAMPLES[0].parent / "vector_loop.s")
    loops = [i for i in prog.instructions if i.op == "loop"]
    assert loops and all(i["cmode"] == 1 and i["count"] == 1 for i in loops)


def test_gemm_uses_repeat_registers():
    prog = assemble_file(EXAMPLES[0].parent / "gemm_tiled.s")
    assert any(i.op == "dma.ld" and i["rep_depth"] == 2 for i in prog.instructions)
