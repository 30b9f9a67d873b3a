"""The co-simulation under Icarus Verilog when ``iverilog`` is installed, whatever ``SIM`` says:
``Ring(tiny, 2)`` on the case library's programs (``verify.cases``: every instruction, the
examples, nests, branches, errors, the ring pass-around) and ``TETRACHIP_COSIM_ICARUS_COUNT``
(default 2) random programs, 0 mismatches. Kept small for the CI budget (Icarus ran this ring at tens
of cycles per second: 40 random programs took the test from about 150 s to 550 s, 8 to 314 s on CI's
two busy cores; since its netlist is written for Icarus, about 100 cycles per second: 2 take it to
about 120 s); the whole suite runs under Icarus with ``SIM=icarus`` (docs/cosim.md)."""

from __future__ import annotations

import os
import re

import pytest

from isa import ChipConfig
from tests.cosim.jobs import assert_ring_results_match, directed_and_random_jobs
from verify.cases import library
from verify.cosim import Cosim, available, compare

pytestmark = pytest.mark.slow
TINY = ChipConfig.preset("tiny")


@pytest.mark.skipif(os.environ.get("SIM", "verilator") == "icarus",
                    reason="SIM=icarus: test_cases_verilog.py and test_cosim_ring.py run these and more under Icarus")
def test_cosim_ring_tiny_under_icarus():
    why = available("icarus")
    if why:
        pytest.skip(f"Icarus: {why}")
    count = int(os.environ.get("TETRACHIP_COSIM_ICARUS_COUNT", "2"))
    _, jobs = directed_and_random_jobs(TINY, 10_000, count)
    results = Cosim(TINY, 2, "icarus").run(jobs)
    assert_ring_results_match(TINY, jobs, results, " under Icarus")
    # the vector_loop.s jobs once hung under Icarus (X in the VPU tag): they finished here
    vl = [r for j, r in zip(jobs, results) if j.name.startswith("vector_loop.s")]
    assert vl and all(r["chips"][0]["done"] and r["chips"][0]["error"] == 0 for r in vl)


@pytest.mark.parametrize("fmt", ["vcd", "fst"])
def test_icarus_model_dumps_waves(tmp_path, fmt):
    """``Cosim(..., "icarus", waves=fmt).run(jobs, waves_file=...)`` writes that file in that format
    (the model's own Verilog-2005 dump module; vvp's format flag after the runner's ``-none``)."""
    why = available("icarus")
    if why:
        pytest.skip(f"Icarus: {why}")
    jobs = library.verilog_jobs(TINY.name, 1)[:2]          # one chip: its model builds and runs in half the time
    out = tmp_path / f"run.{fmt}"
    # both formats and tests/cosim/test_fuzz_tools.py's hyphenated config: one Icarus model
    cfg = TINY.replace(name="tiny-waves")
    cosim = Cosim(cfg, 1, "icarus", waves=fmt)
    results = cosim.run(jobs, waves_file=out)
    bad = [rep for rep in (compare(cfg, j, r) for j, r in zip(jobs, results)) if rep]
    assert len(results) == 2 and not bad, bad[:1]
    data = out.read_bytes()
    if fmt == "vcd":
        text = data.decode(errors="replace")
        assert re.search(r"\$var wire\s+1 \S+ clk ", text) and "$enddefinitions" in text
        cycles = sum(c["cycles"] for r in results for c in r["chips"][:1])
        assert len(re.findall(r"^#\d+$", text, re.M)) > cycles          # time steps of every cycle
    else:                       # FST is binary (a header block, then compressed value blocks)
        assert len(data) > 1000 and b"$enddefinitions" not in data and b"$var" not in data
