"""Malformed assembly: one located error, never a traceback."""

import subprocess
import sys

import pytest

from isa import AsmError, PRESETS, assemble, assemble_file

TINY = PRESETS["tiny"]

# (source, line, col, words that must appear in the message)
CASES = [
    ("frob r1, r2\n", 1, 1, ["unknown mnemonic", "frob"]),
    ("  nop\n  seti r1, 1 << 40\n", 2, 12, ["imm", "does not fit"]),
    ("  addi r1, r2, 0x1_0000_0000\n", 1, 16, ["imm"]),
    ("  jmp nowhere\n", 1, 7, ["undefined label", "nowhere"]),
    ("a: nop\na: nop\n", 2, 1, ["duplicate label", "'a'"]),
    ("  add r1, r2\n", 1, 3, ["takes 3 operand", "got 2"]),
    ("  add r1, r2, r3, r4\n", 1, 19, ["takes 3 operand"]),
    ("  add r1, r99, r3\n", 1, 11, ["register r99 does not exist"]),
    ("  add r1, x2, r3\n", 1, 11, ["expected a register"]),
    ("  loop l9, 4\n", 1, 8, ["loop register l9 does not exist"]),
    ("  mxu.mm acc[0], spm[0], n=1, rep=l1:4\n", 1, 35, ["loop nest", "goes past"]),
    ("  dma.ld spm[5000], dram[0]\n", 1, 10, ["SPM row 5000 out of range"]),
    ("  dma.ld spm[0], dram[1 << 20]\n", 1, 18, ["DRAM address", "out of range"]),
    ("  dma.ld spm[0], dram[0], len=5\n", 1, 31, ["len = 5", "max 4"]),
    ("  mxu.mm spm[0], spm[0]\n", 1, 10, ["expected acc[row]"]),
    ("  vadd spm[0], spm[1], spm[2], bogus=3\n", 1, 32, ["no operand bogus="]),
    ("  vadd spm[0], spm[1], spm[2], n=1, n=2\n", 1, 37, ["given twice"]),
    ("  vadd spm[0], wait=mxu, spm[1], spm[2]\n", 1, 26, ["positional operand after"]),
    ("  fence mxu|gpu\n", 1, 9, ["unknown unit 'gpu'"]),
    ("  seti r1, (3 + \n", 1, 16, ["expected a number"]),
    ("  seti r1, 7 / 0\n", 1, 14, ["division by zero"]),
    (".equ X, 1\n.equ X, 2\n", 2, 6, ["duplicate name"]),
    (".bogus 3\n", 1, 1, ["unknown directive"]),
    (".config base\n", 1, 9, ["written for config 'base'"]),
    ("  vqcfg round=sideways\n", 1, 15, ["expected one of"]),
    ("  sld r1, spm[r0 + 1], 0\n", 1, 15, ["r0 cannot index"]),
    ("  seti r1, 1 @ 2\n", 1, 14, ["unexpected character"]),
    ("  vreq spm[0], acc[0], 70000\n", 1, 24, ["does not fit int16"]),
]


@pytest.mark.parametrize("src,line,col,words", CASES, ids=[c[0].strip()[:30] for c in CASES])
def test_error_location_and_message(src, line, col, words):
    with pytest.raises(AsmError) as ei:
        assemble(src, TINY, "prog.s")
    e = ei.value
    assert (e.file, e.line, e.col) == ("prog.s", line, col), str(e)
    for w in words:
        assert w in e.message, str(e)
    assert str(e).startswith(f"prog.s:{line}:{col}: ")


def test_missing_file():
    with pytest.raises(AsmError) as ei:
        assemble_file("/nonexistent/x.s", TINY)
    assert str(ei.value).startswith("/nonexistent/x.s:0:0: cannot read source")


def test_too_many_instructions():
    src = "nop\n" * (TINY.imem_words + 1)
    with pytest.raises(AsmError) as ei:
        assemble(src, TINY, "big.s")
    assert ei.value.line == TINY.imem_words + 1 and "instruction memory" in ei.value.message


@pytest.mark.parametrize("src,line,col", [("  add r1, r2\n", 1, 3), ("x:\n  jmp y\n", 2, 7)])
def test_cli_one_line_exit_1(tmp_path, src, line, col):
    f = tmp_path / "bad.s"
    f.write_text(".config tiny\n" + src)
    r = subprocess.run([sys.executable, "-m", "runtime.cli", "asm", str(f), "-o", str(tmp_path / "o.bin")],
                       capture_output=True, text=True)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{f}:{line + 1}:{col}: "), r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o.bin").exists()  # nothing half-written
