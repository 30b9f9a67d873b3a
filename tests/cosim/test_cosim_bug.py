"""The random run catches a deliberately injected RTL bug: with ``TETRACHIP_RTL_BUG=repeat``
(rtl/queue.py, docs/cosim.md) the outermost level of a repeat nest of depth >= 2 ends one
iteration early; the Verilog of that ``Chip(tiny)`` must disagree with the simulator on some of
the first random programs, and each report names the seed and the diverging instruction."""

from __future__ import annotations

import os

import pytest

from isa import ChipConfig
from verify.cosim import Cosim, available, compare
from verify.fuzz import case_job, generate

pytestmark = pytest.mark.slow
SIM = os.environ.get("SIM", "verilator")
TINY = ChipConfig.preset("tiny")


def test_cosim_injected_repeat_bug_is_caught(monkeypatch):
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    monkeypatch.setenv("TETRACHIP_RTL_BUG", "repeat")
    # a model of its own that runs about 9,000 cycles: Verilator's C++ at -O0 builds it in less time
    # than -O1 and runs it in seconds (docs/cosim.md, "C++ optimisation level")
    monkeypatch.setenv("TETRACHIP_COSIM_OPT", "0")
    cases = [generate(TINY, s, illegal=False, link=False) for s in range(40)]
    jobs = [case_job(TINY, c, chips=1) for c in cases]
    results = Cosim(TINY, 1, SIM).run(jobs)
    reports = [compare(TINY, j, r) for j, r in zip(jobs, results)]
    caught = [r for r in reports if r]
    assert caught, "the injected repeat-sequencer bug went unnoticed by 40 random programs"
    assert "seed=" in caught[0] and "MISMATCH" in caught[0]
