"""Whole Chip(tiny) under Amaranth's simulator: example programs to completion, DRAM checked
against isa.semantics; errors stop the chip with the simulator's codes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isa import ChipConfig, assemble, assemble_file
from isa import semantics as sem
from isa.errors import ErrorCode
from chip_bench import run_chip

pytestmark = pytest.mark.rtl
ROOT = Path(__file__).resolve().parents[2]
TINY = ChipConfig.preset("tiny")


def test_gemm_tiled_example():
    p = assemble_file(ROOT / "examples/gemm_tiled.s")
    rng = np.random.default_rng(2)
    M = K = N = 8
    A = rng.integers(-128, 128, (M, K)).astype(np.int8)
    B = rng.integers(-128, 128, (K, N)).astype(np.int8)
    dram = np.zeros(TINY.dram_bytes, np.uint8)
    dram[0:A.size] = A.view(np.uint8).reshape(-1)
    dram[0x400:0x400 + B.size] = B.view(np.uint8).reshape(-1)
    r = run_chip(p, dram)
    assert r.error == ErrorCode.OK
    C = r.dram[0x800:0x800 + M * N * 4].view("<i4").reshape(M, N)
    np.testing.assert_array_equal(C, sem.wrap32(A.astype(np.int64) @ B.astype(np.int64)))


@pytest.mark.parametrize("n,bias", [(5, -17), (1, 40), (0, 3)])
def test_vector_loop_dynamic_trip_count(n, bias):
    p = assemble_file(ROOT / "examples/vector_loop.s")
    cols = TINY.cols
    rng = np.random.default_rng(n)
    x = rng.integers(-128, 128, (max(n, 1), cols)).astype(np.int8)[:n]
    dram = np.zeros(TINY.dram_bytes, np.uint8)
    dram[:x.size] = x.view(np.uint8).reshape(-1)
    dram[0x800:0x800 + 64] = 0x55
    r = run_chip(p, dram, {1: n, 2: bias})
    assert r.error == ErrorCode.OK
    t = sem.vpu_binary("vadd", sem.vpu_binary("vmul", x, 3, 1), bias, 1)
    want = sem.vpu_unary("vrelu", t, 0)
    y = r.dram[0x800:0x800 + x.size].view(np.int8).reshape(n, cols)
    np.testing.assert_array_equal(y, want)
    assert (r.dram[0x800 + x.size:0x800 + 64] == 0x55).all()


def test_scalar_unit_and_branch_timing():
    p = assemble("""
        seti r1, 5
        seti r2, 7
        add  r3, r1, r2
        beq  r1, r1, skip
        seti r3, 99
skip:   addi r4, r3, -20
        sst  r4, spm[3], 2
        sld  r5, spm[3], 2
        seti r6, 3
again:  addi r6, r6, -1
        bne  r6, r0, again
        halt
    """, TINY)
    r = run_chip(p)
    assert r.error == ErrorCode.OK
    assert r.regs[:7] == [0, 5, 7, 12, -8, -8, 0]
    assert r.spm[3][2] == -8
    # 8 issues before the loop with one taken beq (+1 bubble); the loop: 3 addi + 3 bne, two taken
    # (+2); halt issues at cycle 17, so the run takes 18 cycles
    assert r.cycles == (8 + 1) + (6 + 2) + 1


@pytest.mark.parametrize("src,code", [
    ("seti r1, 1\n.word 0xff\nhalt", ErrorCode.ILLEGAL_INSTRUCTION),
    ("seti r1, 1\njmp 5\nhalt", ErrorCode.PC_RANGE),
    ("seti r1, 2000\nsld r2, spm[r1], 0\nhalt", ErrorCode.ADDRESS_RANGE),
    ("dma.ld spm[1020], dram[0], rows=8\nhalt", ErrorCode.ADDRESS_RANGE),
    ("dma.ld spm[0], dram[65530], rows=2, rstride=4\nhalt", ErrorCode.ADDRESS_RANGE),
    ("vadd spm[1], spm[0], 1, n=4\nhalt", ErrorCode.OVERLAP),
])
def test_errors_stop_the_chip(src, code):
    if ".word" in src:
        from isa import Program
        good = assemble("seti r1, 1\nhalt\nhalt", TINY)
        words = good.words()
        words[1] = 0xFF

        class P:          # a program with an undecodable word
            config = TINY

            def words(self):
                return words
        p = P()
    else:
        p = assemble(src, TINY)
    r = run_chip(p, max_cycles=500)
    assert r.error == code
