"""Compiled models whose kernels overlap (no fence between kernels, tokens carried from one kernel
to the next, a ``fence store`` before a dependent kernel's body; ``compiler.lower.emit``) run on the
Amaranth chip exactly as on the simulator: the same cycle count and final DRAM."""
from __future__ import annotations

import numpy as np
import pytest

import tetrachip as tc
from isa.config import ChipConfig
from sim import Chip
from tests.compiler.test_overlap import _Branches, _Chain
from tests.rtl import chip_bench


@pytest.mark.parametrize("make", [lambda: _Branches(4), lambda: _Chain(4, 3)], ids=["branches", "chain"])
def test_overlapping_kernels_rtl_like_sim(make):
    cfg = ChipConfig.load("tiny")
    tc.manual_seed(1)
    m = make()
    x = np.random.default_rng(2).standard_normal((1, 4, 4, 4)).astype(np.float32)
    cm = tc.compile(m, [x], config=cfg)
    assert len(cm.kernels) == 3 and "fence store" in cm.asm
    image = np.zeros(cfg.dram_bytes, np.uint8)
    for addr, data in cm.dram_writes(cm.feeds([x])):
        image[addr:addr + len(data)] = data
    sim = Chip(cfg)
    sim.load(cm.program)
    sim.dram[:] = image
    cycles = sim.run().cycles
    r = chip_bench.run_chip(cm.program, image, cfg=cfg, max_cycles=cycles + 100)
    assert (r.cycles, r.error) == (cycles, 0)
    np.testing.assert_array_equal(r.dram, sim.dram)
