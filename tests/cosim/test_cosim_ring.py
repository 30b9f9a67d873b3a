"""Verilog of ``Ring(tiny, 2)`` under cocotb against ``sim.System``, in one simulator process:
``TETRACHIP_COSIM_COUNT`` (default 200) constrained-random programs with 0 mismatches and every
opcode covered (the case library's programs run on the same model in test_cases_verilog.py).
See docs/cosim.md."""

from __future__ import annotations

import os

import pytest

from isa import ChipConfig
from tests.cosim.jobs import assert_ring_results_match
from verify.cosim import Cosim, available
from verify.fuzz import case_job, coverage_table, generate

SIM = os.environ.get("SIM", "verilator")
TINY = ChipConfig.preset("tiny")


def test_cosim_ring_tiny_random():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    count = int(os.environ.get("TETRACHIP_COSIM_COUNT", "200"))
    cases = [generate(TINY, s) for s in range(count)]
    jobs = [case_job(TINY, c) for c in cases]
    assert_ring_results_match(TINY, jobs, Cosim(TINY, 2, SIM).run(jobs))
    cov = coverage_table(set().union(*(c.points for c in cases)))
    assert cov["missing"] == [], f"opcodes never covered: {cov['missing']}"
    assert sum(c.illegal for c in cases) > 0
