"""The case library (``verify.cases``) on ``Chip(tiny)`` under Amaranth's simulator, built with each
option the FPGA flow uses: flat memories (``rtl``), live-value-table memories (``rtl-lvt``,
``rtl/mem.py``), and product registers in the array (``rtl-mac-*``, ``rtl/mac.py``; the cases that
use the MXU). Each run equals the simulator's from the same inputs (total cycles, error code,
DRAM, SPM, ACC, per-instance line trace) and meets the case's expectation: build options change no
cycle count and no result. ``make test`` runs the flat memories and the FPGA build's product
registers (``dsp:5+reg2``); the live-value tables and the one-register products are the long lane's
(``make test-long``; in ``make test``, tests/rtl/test_rtl_mem.py checks the LVT memories against the
flat ones)."""

from __future__ import annotations

import pytest

from tests.levels import CaseTests
from tests.rtl import chip_bench
from verify.cases import core


class TestRtl(CaseTests):
    level = core.RTL
    mac, mem = "dsp", "flat"

    def run(self, case):
        s = case.setup
        results = chip_bench.run_ring(s.progs, s.drams, s.regs, cfg=s.cfg, max_cycles=case.max_cycles + 10,
                                      ring=case.ring, mac=self.mac, mem=self.mem)
        result = chip_bench.as_cosim(results)
        core.check_against_sim_run(case, result)
        return core.from_result(case, self.level, result)


@pytest.mark.long
class TestRtlLvt(TestRtl):
    tag, mem = "rtl-lvt", "lvt"


class _Mac(TestRtl):
    def cases(self):
        return [c for c in super().cases() if c.mnemonics() & {"mxu.mm", "mxu.mma"}]


@pytest.mark.long
class TestRtlMacReg(_Mac):
    tag, mac = "rtl-mac-reg", "dsp+reg"


@pytest.mark.long
class TestRtlMacDsp5Reg(_Mac):
    tag, mac = "rtl-mac-dsp5-reg", "dsp:5+reg"


class TestRtlMacDsp5Reg2(_Mac):
    tag, mac = "rtl-mac-dsp5-reg2", "dsp:5+reg2"


def test_the_benches_build_what_the_levels_name():
    """The benches behind rtl-lvt and rtl-mac-* really build banked memories and registered arrays
    (so the cases above test them)."""
    from isa import ChipConfig
    from isa.timing import mxu_pipe
    from rtl.systolic import SystolicArray
    cfg = ChipConfig.preset("tiny")
    chip = chip_bench.bench(cfg, mem=TestRtlLvt.mem).top
    assert chip.mem == "lvt" and chip.spm.impl == "lvt" and chip.acc.impl == "lvt"
    ring = chip_bench.bench(cfg, 2, ring=True, mem=TestRtlLvt.mem).top
    assert all(c.spm.impl == "lvt" for c in ring.chips)
    for cls in (TestRtlMacReg, TestRtlMacDsp5Reg, TestRtlMacDsp5Reg2):
        assert chip_bench.bench(cfg, mac=cls.mac).top.mac == cls.mac
        arr = SystolicArray(cfg.rows, cfg.cols, mac=cls.mac)
        assert arr.LATENCY == cfg.rows + cfg.cols - 1 + (2 if cls.mac.endswith("reg2") else 1)
        assert 1 + arr.LATENCY <= mxu_pipe(cfg)
