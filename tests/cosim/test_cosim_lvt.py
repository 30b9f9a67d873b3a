"""The FPGA build's memories under co-simulation: ``Ring(tiny, 2, mem="lvt")`` (SPM and ACC as
live-value-table memories, rtl/mem.py) against ``sim.System``: the case library's programs
(``verify.cases``) and ``TETRACHIP_COSIM_LVT_COUNT`` (default 100) random programs, with SPM and ACC read back
through the live-value tables and banks (reading every row from the first write port's bank
instead makes 24 of 36 jobs differ). See docs/cosim.md."""

from __future__ import annotations

import os

import pytest

from isa import ChipConfig
from tests.cosim.jobs import assert_ring_results_match, directed_and_random_jobs
from verify.cosim import Cosim, available

SIM = os.environ.get("SIM", "verilator")
TINY = ChipConfig.preset("tiny")


@pytest.mark.long       # make test-long, with the FPGA depths' run below (the FPGA builds' memories)
def test_cosim_ring_tiny_lvt_memories():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    count = int(os.environ.get("TETRACHIP_COSIM_LVT_COUNT", "100"))
    _, jobs = directed_and_random_jobs(TINY, 50_000, count)
    cs = Cosim(TINY, 2, SIM, mem="lvt")
    assert cs.mem == "lvt" and cs.dir.name.endswith("_lvt")
    assert_ring_results_match(TINY, jobs, cs.run(jobs))


@pytest.mark.long       # make test-long: the memories of the FPGA builds, with their synthesis
def test_fuzz_lvt_memories_at_fpga_depths():
    """At the FPGA builds' depths (``--fpga-mem``: ACC 16 rows) the ACC's banks are LUT RAM, not
    block RAM as at the preset's depths that the test above runs (rtl/mem.py): random programs on
    ``Ring(tiny --fpga-mem, 2, mem="lvt")`` against the simulator, no mismatch."""
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    from rtl.fpga.fit import FPGA_MEMORY, fpga_config
    from rtl.mem import LUTRAM_DEPTH
    from verify.fuzz import run_fuzz
    cfg = fpga_config(TINY, **FPGA_MEMORY)
    assert cfg.acc_rows <= LUTRAM_DEPTH < cfg.spm_rows
    rep = run_fuzz(cfg, 9000, int(os.environ.get("TETRACHIP_COSIM_LVT_COUNT", "100")) * 2, SIM,
                   mem="lvt", require_all_opcodes=False)
    assert rep["mem"] == "lvt" and rep["programs"] - rep["illegal"] > 100 and rep["rtl_cycles"] > 10_000
    assert rep["mismatches"] == 0, "\n\n".join(rep["reports"][:2])
