"""SPM and ACC built as live-value-table memories (``Chip(cfg, mem="lvt")``, rtl/mem.py: one bank
per write and read port pair, the form FPGA builds use) behave exactly like the flat memories:
every case of test_rtl_vs_sim.py (examples, GEMMs, repeat nests, errors, a ring, random
programs) runs again with ``mem="lvt"`` against the cycle-level simulator: equal cycles, error
codes, DRAM, SPM, ACC (read back through the live-value table and the banks) and line traces."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import chip_bench
from rtl.chip import Chip, Ring
from test_rtl_vs_sim import *          # noqa: F401,F403  (the cases, collected again here)
from test_rtl_vs_sim import TINY

pytestmark = pytest.mark.rtl


@pytest.fixture(autouse=True)
def lvt_chip(monkeypatch):
    monkeypatch.setattr(chip_bench, "Chip", functools.partial(Chip, mem="lvt"))
    monkeypatch.setattr(chip_bench, "Ring", functools.partial(Ring, mem="lvt"))


def test_the_option_is_used():
    """The patched benches really build banked memories (so the cases above test them)."""
    chip = chip_bench.Chip(TINY)
    assert chip.mem == "lvt" and chip.spm.impl == "lvt" and chip.acc.impl == "lvt"
    ring = chip_bench.Ring(TINY, 2)
    assert all(c.spm.impl == "lvt" for c in ring.chips)


def test_rows_written_by_several_ports_read_back_from_the_last_writer():
    """sst (one lane, merged with the rest of the row) after a DMA load of the same row, then a
    VPU write over it: the row read back comes from the bank of the port that wrote it last."""
    from test_rtl_vs_sim import check
    dram = np.arange(TINY.dram_bytes, dtype=np.uint64).astype(np.uint8)
    r = check("""
        seti r1, -77
        dma.ld spm[10], dram[64], rows=2, len=4, rstride=4, signal=scalar
        sst r1, spm[10], 2, wait=load
        sst r1, acc[3], 1
        vadd acc[4], spm[10], spm[11], n=1
        fence all
        vmov spm[11], acc[4], n=1
        fence all
        halt
    """, dram)[1]
    assert r.spm[10].tolist() == [64, 65, -77, 67]
    assert r.acc[3].tolist() == [0, -77, 0, 0]
    assert r.acc[4].tolist() == [64 + 68, 65 + 69, -77 + 70, 67 + 71]
    assert r.spm[11].tolist() == [127, 127, -7, 127]
