"""The banked memories (``rtl/mem.py``, ``mem="banked"``: SPM and ACC as banks of consecutive rows,
a copy of each bank per read port, one writer per bank and cycle) under co-simulation against
``sim.System`` on configs with banks (``rtl.fpga.fit.banked_config``: SPM in 4 banks, ACC in banks of
16 rows, at least 4), where the simulator's race rule covers two units writing one bank (docs/microarchitecture.md
section 4). Random programs keep what different units write in different banks
(``verify.fuzz``); none may race, so every one is compared. See docs/cosim.md."""

from __future__ import annotations

import os

import pytest

from isa import ChipConfig
from isa.errors import ErrorCode
from rtl.fpga.fit import FPGA_MEMORY, banked_config, fpga_config, fpga_memory
from tests.cosim.jobs import assert_ring_results_match, directed_and_random_jobs
from verify.cosim import Cosim, available, sim_of
from verify.fuzz import run_fuzz

SIM = os.environ.get("SIM", "verilator")
TINY = ChipConfig.preset("tiny")
COUNT = int(os.environ.get("TETRACHIP_COSIM_BANKED_COUNT", "60"))


@pytest.mark.parametrize("depths, banks, seed", [(fpga_memory("banked"), (4, 4), 7000), (FPGA_MEMORY, (4, 4), 7500)],
                         ids=["fpga-mem", "lvt-depths"])
def test_fuzz_banked_memories_at_fpga_depths(depths, banks, seed):
    """``Ring(tiny --fpga-mem --mem banked, 2)``: SPM 256 rows in 4 block RAM banks, ACC 64 rows in 4
    16-row LUT RAM banks; and at the live-value-table build's depths, SPM 64 rows in 4 LUT RAM banks of
    16, ACC 16 in 4 of 4."""
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    cfg = banked_config(fpga_config(TINY, **depths))
    assert (cfg.spm_rows // cfg.spm_bank_rows, cfg.acc_rows // cfg.acc_bank_rows) == banks
    rep = run_fuzz(cfg, seed, COUNT, SIM, mem="banked", require_all_opcodes=False)
    assert rep["mem"] == "banked" and rep["raced"] == 0
    assert rep["programs"] - rep["illegal"] > COUNT // 2 and rep["rtl_cycles"] > 50 * COUNT
    assert rep["mismatches"] == 0, "\n\n".join(rep["reports"][:2])


@pytest.mark.long       # make test-long: the preset's depths (4 SPM and 16 ACC banks) and the case library
def test_cosim_ring_tiny_banked_memories():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    cfg = banked_config(TINY)
    _, jobs = directed_and_random_jobs(cfg, 60_000, 2 * COUNT)
    results = Cosim(cfg, 2, SIM, mem="banked").run(jobs)
    raced = [j.name for j, r in zip(jobs, results) if ErrorCode.RACE in sim_of(cfg, j, r, ring=True)[2]]
    # the library's cases were written for rows, not banks: a few write one bank from two units
    assert len(raced) <= len(jobs) // 10, raced
    assert_ring_results_match(cfg, jobs, results, " (banked memories)")
