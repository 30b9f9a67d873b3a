"""The array's LUT products in the whole chip: random programs on the Verilog of a 2-chip ``tiny``
ring whose array mixes hard and LUT products (``mac="dsp:7+reg2"``: 7 of 16 PEs ``a * w``, 9 the
radix-4 LUT product of ``rtl/mac.py`` with its mid-tree registers) against the simulator. The
product alone is checked over every int8 pair in tests/rtl/test_rtl_mac_variants.py; here it runs
inside the MXU's pipeline, with weight loads, swaps and clears as random programs make them.
(``tetrachip fuzz --mac lut+reg2`` runs the same with every product in LUTs.)

In ``make test-long`` (its own Verilog build, about two minutes on CI's cores); ``make test`` runs the
case library on a like mix (``dsp:5+reg2``) in Amaranth's simulator (``TestRtlMacDsp5Reg2``,
tests/rtl/test_cases_rtl.py) and the registered LUT product over every int8 pair."""

from __future__ import annotations

import os

import pytest

from verify.cosim import available
from verify.fuzz import run_fuzz

SIM = os.environ.get("SIM", "verilator")
COUNT = int(os.environ.get("TETRACHIP_COSIM_MAC_COUNT", "60"))


@pytest.mark.long
def test_fuzz_with_lut_products():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    rep = run_fuzz("tiny", 9000, COUNT, SIM, mac="dsp:7+reg2", require_all_opcodes=False)
    assert rep["mac"] == "dsp:7+reg2"
    assert rep["programs"] - rep["illegal"] > COUNT // 2 and rep["rtl_cycles"] > 50 * COUNT
    mxu = {"mxu.lw", "mxu.mm", "mxu.mma"}
    assert mxu <= set(rep["coverage"]["opcodes"]), rep["coverage"]["opcodes"].keys()
    assert rep["mismatches"] == 0, "\n\n".join(rep["reports"][:2])
