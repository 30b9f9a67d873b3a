"""Whole Chip(tiny) under Amaranth's simulator, results checked against isa.semantics: scalar unit
and branch timing, errors, link loopback, strided DMA, partial weight loads and requantization.
(The example programs run in test_rtl_vs_sim.py, checked against the simulator and numpy.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isa import ChipConfig, assemble
from isa import semantics as sem
from isa.errors import ErrorCode
from chip_bench import run_chip

pytestmark = pytest.mark.rtl
ROOT = Path(__file__).resolve().parents[2]
TINY = ChipConfig.preset("tiny")


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


def test_link_loopback_and_vpu_lut_reduce():
    """Ring(tiny, 1): port 0 sends into port 1. SPM and ACC rows cross the link (credits, flits);
    then vlutld/vlut and a lane reduction on what arrived."""
    cols = TINY.cols
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (12, cols)).astype(np.int8)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    dram = np.zeros(TINY.dram_bytes, np.uint8)
    dram[:x.size] = x.view(np.uint8).reshape(-1)
    dram[0x400:0x500] = table.view(np.uint8)
    p = assemble(f"""
        dma.ld   spm[0], dram[0], rows=12, rstride={cols}, signal=ltx
        dma.ld   spm[100], dram[0x400], rows={256 // cols}, rstride={cols}, signal=vpu
        link.send 0, spm[0], n=12, wait=load
        link.recv 1, spm[200], n=12, signal=vpu
        vlutld   spm[100], wait=load
        vlut     spm[300], spm[200], n=12, wait=lrx
        vmov     acc[0], spm[200], n=12, signal=ltx
        link.send 0, acc[0], n=12, wait=vpu
        link.recv 1, acc[50], n=12, signal=vpu
        vrsum    acc[100], acc[50], n=12, wait=lrx
        halt
    """, TINY)
    r = run_chip(p, dram, loopback=True, max_cycles=3000)
    assert r.error == ErrorCode.OK
    np.testing.assert_array_equal(r.spm[200:212], x)
    np.testing.assert_array_equal(r.spm[300:312], sem.vpu_unary("vlut", x, 0, lut_table=table))
    np.testing.assert_array_equal(r.acc[50:62], x.astype(np.int32))
    np.testing.assert_array_equal(r.acc[100:112], sem.vpu_unary("vrsum", x, 1))


def test_dma_strided_acc_and_requantize():
    """Strided/element-wise DMA into ACC and back, mxu.lw with k < rows and mma, vreq with a row scale."""
    cols, R = TINY.cols, TINY.rows
    rng = np.random.default_rng(9)
    dram = rng.integers(0, 256, TINY.dram_bytes // 16).astype(np.uint8)
    dram = np.concatenate([dram, np.zeros(TINY.dram_bytes - dram.size, np.uint8)])
    p = assemble(f"""
        dma.ld  acc[0], dram[3], rows=5, len=3, rstride=20, estride=6, signal=vpu
        dma.ld  spm[10], dram[100], rows=3, len={cols}, rstride=7, signal=mxu
        dma.ld  spm[20], dram[200], rows=6, len=2, rstride=5, estride=3, signal=mxu
        mxu.lw  spm[10], k=3, wait=load
        mxu.mm  acc[20], spm[20], n=6, wait=load
        mxu.mma acc[20], spm[20], n=6, signal=vpu
        vqcfg   shift=3, zp=5, lo=-100, hi=90, round=half_even
        vreq    spm[40], acc[20], acc[0], n=6, wait=mxu|load, signal=store
        dma.st  dram[0x2000], spm[40], rows=6, len={cols}, rstride=9, estride=2, wait=vpu
        dma.st  dram[0x3000], acc[0], rows=5, rstride=16, signal=scalar
        sld     r1, acc[2], 1, wait=store
        halt
    """, TINY)
    r = run_chip(p, dram, max_cycles=3000)
    assert r.error == ErrorCode.OK
    acc0 = sem.dma_gather(dram, 3, 5, 3, 20, 6, 1, cols)
    np.testing.assert_array_equal(r.acc[0:5], acc0)
    w = sem.load_weights(sem.dma_gather(dram, 100, 3, cols, 7, 1, 0, cols), 3, R, cols)
    xs = sem.dma_gather(dram, 200, 6, 2, 5, 3, 0, cols)
    c = sem.matmul_acc(sem.matmul_rows(xs, w), xs, w)
    np.testing.assert_array_equal(r.acc[20:26], c)
    q = sem.requantize(c, sem.scale16(acc0[0]), 3, 5, -100, 90, 2)
    np.testing.assert_array_equal(r.spm[40:46], q)
    want = sem.dma_scatter(dram, q, 0x2000, cols, 9, 2, 0)
    want = sem.dma_scatter(want, acc0, 0x3000, cols, 16, 4, 1)
    np.testing.assert_array_equal(r.dram, want)
    assert r.regs[1] == acc0[2][1]
