"""Verilog of ``Chip(cfg)`` under cocotb against the simulator: GEMMs on ``small`` (one model
build, every job in one simulator process). See docs/cosim.md."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from isa import ChipConfig
from verify.cosim import Cosim, available, compare

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosim_directed import gemm_jobs  # noqa: E402

pytestmark = pytest.mark.cosim
SIM = os.environ.get("SIM", "verilator")


def _need_sim():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")


def test_cosim_chip_small_gemms():
    _need_sim()
    cfg = ChipConfig.preset("small")
    jobs = gemm_jobs(cfg, [(8, 8, 8), (16, 24, 16), (5, 13, 11)])
    results = Cosim(cfg, 1, SIM).run(jobs)
    reports = [compare(cfg, j, r) for j, r in zip(jobs, results)]
    assert [r for r in reports if r] == []
    for j, r in zip(jobs, results):
        A, B = j.meta["A"], j.meta["B"]
        n = 4 * A.shape[0] * B.shape[1]
        C = r["chips"][0]["dram"][j.meta["c_addr"]:j.meta["c_addr"] + n].view("<i4").reshape(A.shape[0], B.shape[1])
        np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))
