"""Directed tests of issue 22 for the assembler, the disassembler and the binary reader: each input
that once escaped as a ValueError, RecursionError, OverflowError, AttributeError or a disassembly
that did not re-assemble."""

from __future__ import annotations

import json
import random

import pytest

from isa import (PRESETS, AsmError, BinaryFormatError, ChipConfig, Program, TetrachipError, assemble, decode,
                 encode)
from isa.asm import Assembler
from isa.program import HEADER_BYTES, checksum, pack_header, unpack_header
from isa.table import WORD_BITS, WORD_BYTES

TINY = PRESETS["tiny"]


def value(expr: str) -> int:
    """What the assembler makes of a constant expression."""
    return Assembler(TINY, "e.s").expr(expr, 1)


# ---------------------------------------------------------------- constant expressions

@pytest.mark.parametrize("expr,want", [
    ("2 + -1", 1), ("4 * -2", -8), ("3 - -3", 6), ("-7 / 2", -3), ("7 / -2", -3), ("7 % -3", 1),
    ("-7 % 3", -1), ("-(2 - 5) * 3", 9), ("1 << 2 + 1", 8), ("~0 & 0xff", 255), ("6 - 2 - 1", 3),
    ("2 * (3 + 4)", 14), ("~~5", 5), ("- -4", 4), ("1 | 2 ^ 3 & 1", 3), ("16 >> 2 >> 1", 2),
    ("(" * 500 + "7" + ")" * 500, 7), ("-" * 1001 + "1", -1), (" + ".join(["1"] * 3000), 3000),
])
def test_constant_expression_values(expr, want):
    assert value(expr) == want


def test_constant_expressions_agree_with_python_where_c_does():
    """Random expressions over the operators whose precedence and meaning C and Python share."""
    rng = random.Random(22)
    ops = ["+", "-", "*", "&", "|", "^"]

    def gen(depth: int) -> str:
        r = rng.random()
        if depth == 0 or r < 0.2:
            return str(rng.randint(-20, 20))
        if r < 0.3:
            return rng.choice("-~") + "(" + gen(depth - 1) + ")"
        if r < 0.4:
            return f"(({gen(depth - 1)}) {rng.choice(['<<', '>>'])} {rng.randint(0, 6)})"
        return f"{gen(depth - 1)} {rng.choice(ops)} {gen(depth - 1)}"

    for _ in range(300):
        e = gen(5)
        assert value(e) == eval(e), e          # noqa: S307 - digits and operators only


@pytest.mark.parametrize("src,col,words", [
    ("seti r1, 1 << -1", 12, ["shift count -1", "0..255"]),
    ("seti r1, 8 >> (1 - 3)", 12, ["shift count -2"]),
    ("seti r1, 1 << 256", 12, ["shift count 256"]),
    ("seti r1, 4 % (2 - 2)", 12, ["division by zero"]),
    ("seti r1, 4 / (1 - 1) + 1", 12, ["division by zero"]),
    ("seti r1, 1 << 255 << 255", 19, ["value too large"]),
    ("seti r1, 0x" + "f" * 200, 10, ["value too large"]),
    ("seti r1, " + "(" * 200 + "1" + ")" * 199, 10 + 400, ["expected ')'"]),
    ("seti r1, " + "(" * 200 + "1" + ")" * 201, 10 + 401, ["unexpected ')'"]),
    ("seti r1, " + "-" * 500, 10 + 500, ["expected a number"]),
])
def test_constant_expression_errors_are_located(src, col, words):
    with pytest.raises(AsmError) as ei:
        assemble(src + "\n", TINY, "e.s")
    assert (ei.value.line, ei.value.col) == (1, col), str(ei.value)
    for w in words:
        assert w in ei.value.message, str(ei.value)


# ---------------------------------------------------------------- disassembly re-assembles

def roundtrip(prog: Program) -> Program:
    again = assemble(prog.disassemble(), prog.config, "d.s")
    assert again.words() == prog.words(), prog.disassemble()
    return again


@pytest.mark.parametrize("src", [
    "halt\nL0: halt\njmp L0\njmp 0\n",                     # a generated L0 would clash with the user's
    "a.b: halt\nL1: halt\njmp a.b\njmp 1\nL1_1: jmp 1\n",  # a.b kept; L1 and L1_1 taken
    "x: jmp 1\nL1_1:\nL1: halt\n",
    "halt\njmp end\nend:\n",                                # a label at the end of the program
])
def test_disassembly_keeps_user_labels_and_makes_unique_ones(src):
    prog = assemble(src, TINY, "l.s")
    again = roundtrip(prog)
    for name, pc in prog.labels.items():
        assert again.labels[name] == pc, name


@pytest.mark.parametrize("target", [1000, TINY.imem_words - 1, 3])
def test_branch_past_the_program_prints_as_a_number(target):
    prog = assemble(f"jmp {target}\nbne r1, r0, {target}\n", TINY)
    text = prog.disassemble()
    assert f"jmp {target}\n" in text and f"L{target}" not in text
    roundtrip(prog)


def test_labels_the_assembler_cannot_read_are_left_out():
    prog = assemble("halt\njmp 0\njmp 1\n", TINY)
    prog.labels = {"ROWS": 0, "halt": 1, "a b": 0, "": 1, "1x": 0, "L0": 7, "ok": 1}
    again = roundtrip(prog)
    assert again.labels["ok"] == 1 and "ROWS" not in again.labels and "L0" not in again.labels


def test_address_past_its_memory_disassembles_as_word():
    """decode accepts an ACC row past ACC (the chip faults when it runs it); the assembler refuses to
    write one, so the disassembler writes the word."""
    ins = assemble("mxu.mm acc[0], spm[0]\n", TINY).instructions[0]
    assert TINY.acc_rows < TINY.spm_rows                    # the ACC row field can hold an SPM row
    bad = decode(encode(ins.replace(dst=TINY.acc_rows + 5), TINY), TINY)
    with pytest.raises(AsmError, match="ACC row"):
        assemble(f"mxu.mm acc[{TINY.acc_rows + 5}], spm[0]\n", TINY)
    prog = Program(TINY, [bad])
    assert ".word 0x" in prog.disassemble()
    roundtrip(prog)


def test_word_directive():
    word = encode(assemble("addi r1, r2, -3\n", TINY).instructions[0], TINY)
    prog = assemble(f"top: .word {word:#x}\n  jmp top\n", TINY)
    assert prog.words()[0] == word and prog.labels == {"top": 0}
    with pytest.raises(AsmError, match=r"\.word: .*does not fit") as ei:
        assemble(f"  .word 1 << {WORD_BITS}\n", TINY, "w.s")
    assert (ei.value.line, ei.value.col) == (1, 9)
    with pytest.raises(AsmError, match=r"\.word takes one"):
        assemble(".word 1, 2\n", TINY)


def test_config_name_the_assembler_cannot_read_back_is_a_comment():
    cfg = TINY.replace(name="a;b")
    prog = assemble("halt\n", cfg)
    assert not any(line.startswith(".config") for line in prog.disassemble().splitlines())
    roundtrip(prog)


# ---------------------------------------------------------------- configs by name and by file

def test_assemble_takes_a_preset_name():
    src = "seti r1, COLS\nhalt\n"
    assert assemble(src, "tiny").words() == assemble(src, TINY).words()
    assert assemble(src, "tiny").config == TINY
    with pytest.raises(TetrachipError, match="unknown config 'nope'"):
        assemble(src, "nope")


def test_config_file_from_preset_accepts_dot_config(tmp_path):
    same = tmp_path / "mine.toml"
    same.write_text('preset = "tiny"\n')
    slower = tmp_path / "slow.toml"
    slower.write_text('preset = "tiny"\ndram_latency = 3\nclock_mhz = 10.0\n')
    src = ".config tiny\nseti r1, ROWS\nhalt\n"
    want = assemble(src, TINY).words()
    for f in (same, slower):
        cfg = ChipConfig.load(f)
        assert cfg.name != "tiny"
        assert assemble(src, cfg).words() == want
        assert assemble(src, str(f)).words() == want


def test_config_file_of_other_sizes_refuses_dot_config(tmp_path):
    f = tmp_path / "narrow.toml"
    f.write_text('preset = "tiny"\nrows = 2\n')
    with pytest.raises(AsmError) as ei:
        assemble(".config tiny\nhalt\n", ChipConfig.load(f), "n.s")
    e = ei.value
    assert (e.line, e.col) == (1, 9)
    assert "written for config 'tiny'" in e.message and "rows 4 vs 2" in e.message
    with pytest.raises(AsmError, match="written for config 'small'.*rows 8 vs 4"):
        assemble(".config small\n", TINY)
    with pytest.raises(AsmError, match="written for config 'custom', not 'tiny'"):
        assemble(".config custom\n", TINY)


def test_assemble_takes_text_only():
    with pytest.raises(AsmError, match="text, not bytes"):
        assemble(b"halt\n", TINY)


# ---------------------------------------------------------------- binaries

def with_meta(blob: bytes, meta: bytes) -> bytes:
    """``blob`` with its manifest JSON replaced and its header (length, checksum) made to match."""
    h = unpack_header(blob)
    body = blob[HEADER_BYTES:len(blob) - h["manifest_bytes"]] + meta
    h.update(manifest_bytes=len(meta), crc=checksum(body))
    return pack_header(**h) + body


SRC = "top: seti r1, 3\n  addi r1, r1, -1\n  bne r1, r0, top\n  halt\n"


@pytest.mark.parametrize("meta,field", [
    (b'{"labels": {"top": 1e999}}', "labels['top'] = inf"),
    (b'{"labels": {"top": -1}}', "labels['top'] = -1"),
    (b'{"labels": {"top": 5}}', "instruction index 0..4"),
    (b'{"labels": {"top": "0"}}', "labels['top'] = '0'"),
    (b'{"labels": {"top": true}}', "labels['top'] = True"),
    (b'{"labels": {"top": NaN}}', "labels['top'] = nan"),
    (b'{"labels": [1]}', "labels = [1]"),
    (b'{"lines": [1, 2]}', "lines = [1, 2] is not a list of 4"),
    (b'{"lines": [1, 2, 3, -4]}', "lines[3] = -4"),
    (b'{"source": 7}', "source = 7"),
    (b'{"manifest": [1]}', "manifest = [1]"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    (b"[]", "not a JSON object"),
    (b"{", "not valid JSON"),
    (b"\xff", "not valid JSON"),
])
def test_manifest_fields_are_checked_by_name(meta, field):
    blob = with_meta(assemble(SRC, TINY).to_bytes(), meta)
    with pytest.raises(BinaryFormatError) as ei:
        Program.from_bytes(blob, name="m.bin")
    msg = str(ei.value)
    assert msg.startswith("m.bin: ") and field in msg and "\n" not in msg, msg


def test_manifest_written_by_to_bytes_loads():
    p = assemble(SRC, TINY, "a.s")
    p.manifest = {"inputs": [1, 2], "note": "é"}
    assert json.loads(p.to_bytes()[HEADER_BYTES + 4 * WORD_BYTES:])["labels"] == {"top": 0}
    q = Program.from_bytes(p.to_bytes())
    assert (q.labels, q.lines, q.source_name, q.manifest) == (p.labels, p.lines, p.source_name, p.manifest)


def test_from_bytes_takes_a_preset_name_and_only_bytes():
    blob = assemble(SRC, TINY).to_bytes()
    assert Program.from_bytes(blob, "tiny").words() == Program.from_bytes(blob, TINY).words()
    with pytest.raises(BinaryFormatError, match="not for config 'small'"):
        Program.from_bytes(blob, "small")
    with pytest.raises(BinaryFormatError, match="x.bin: a program binary is bytes, not str"):
        Program.from_bytes("TCHP", name="x.bin")


def test_header_helpers_are_the_format():
    """pack_header(unpack_header(b)) is the header; checksum is the header's crc of the body."""
    blob = assemble(SRC, TINY).to_bytes()
    h = unpack_header(blob)
    assert pack_header(**h) == blob[:HEADER_BYTES]
    assert h["crc"] == checksum(blob[HEADER_BYTES:]) and h["count"] == 4
    body = bytearray(blob[HEADER_BYTES:])
    body[0] ^= 1
    assert checksum(bytes(body)) != h["crc"]



def test_save_refuses_a_missing_folder_and_its_own_source(tmp_path):
    p = assemble(SRC, TINY)
    with pytest.raises(TetrachipError, match="does not exist"):
        p.save(tmp_path / "missing" / "p.bin")
    src = tmp_path / "p.s"
    src.write_text(SRC)
    with pytest.raises(TetrachipError, match="would overwrite the input"):
        p.save(src, inputs=[src])
    assert src.read_text() == SRC
    p.save(tmp_path / "p.bin", inputs=[src])
    assert Program.load(tmp_path / "p.bin").words() == p.words()
