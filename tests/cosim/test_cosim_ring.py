"""Verilog of ``Ring(tiny, 2)`` under cocotb against ``sim.System``, in one simulator process:
every example program and the directed nests/branches/errors on chip 0 (chip 1 halts), a block
passed around the ring, and ``TETRACHIP_COSIM_COUNT`` (default 200) constrained-random programs
with 0 mismatches and every opcode covered. See docs/cosim.md."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from isa import ChipConfig
from verify.cosim import Cosim, available
from verify.fuzz import coverage_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosim_directed import assert_ring_results_match, ring_and_random_jobs  # noqa: E402

pytestmark = pytest.mark.cosim
SIM = os.environ.get("SIM", "verilator")
TINY = ChipConfig.preset("tiny")


def test_cosim_ring_tiny_directed_and_random():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    count = int(os.environ.get("TETRACHIP_COSIM_COUNT", "200"))
    cases, jobs = ring_and_random_jobs(TINY, 0, count)
    assert_ring_results_match(TINY, jobs, Cosim(TINY, 2, SIM).run(jobs))
    cov = coverage_table(set().union(*(c.points for c in cases)))
    assert cov["missing"] == [], f"opcodes never covered: {cov['missing']}"
    assert sum(c.illegal for c in cases) > 0
