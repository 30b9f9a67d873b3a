"""The chip reads the facts isa/table.py declares: its memories' lane widths, its VPU's op groups
and its requantizer's reset (a ``vreq`` before any ``vqcfg`` equals the semantics at
``QCFG_RESET``, as the simulator's does)."""

from __future__ import annotations

import numpy as np

from isa import ChipConfig, assemble
from isa import semantics as sem
from isa.table import QCFG_RESET, SPACE_BITS, SPACE_DTYPE, VPU_BINARY, VPU_UNARY, Space
from rtl.vpu import ALU_OPS
from sim import Chip
from tests.rtl import chip_bench

CFG = ChipConfig.preset("tiny")


def test_memories_and_alu_ops_follow_the_table():
    chip = chip_bench.bench(CFG).top
    assert (chip.spm.lane_bits, chip.acc.lane_bits) == (SPACE_BITS[Space.SPM], SPACE_BITS[Space.ACC])
    assert set(VPU_BINARY) | set(VPU_UNARY) <= set(ALU_OPS)


def test_requantizer_reset_matches_the_simulator_and_the_table():
    x = np.array([[-100_000, -129, 300, 7], [50, -50, 1 << 20, -(1 << 20)]], SPACE_DTYPE[Space.ACC])
    dram = np.zeros(256, np.uint8)
    dram[:x.nbytes] = x.view(np.uint8).reshape(-1)
    prog = assemble("dma.ld acc[0], dram[0], rows=2, rstride=16\nfence all\nvreq spm[0], acc[0], 3, n=2\n"
                    "fence all\ndma.st dram[128], spm[0], rows=2, rstride=4\nhalt\n", CFG)
    rtl = chip_bench.run_chip(prog, dram)
    sim = Chip(CFG)
    sim.load(prog)
    sim.write_dram(0, dram)
    sim.run()
    want = sem.requantize(x, 3, *QCFG_RESET.values())
    got_rtl = rtl.dram[128:136].view(np.int8).reshape(2, 4)
    assert got_rtl.tolist() == want.tolist() == sim.read_dram(128, 8, np.int8).reshape(2, 4).tolist()
