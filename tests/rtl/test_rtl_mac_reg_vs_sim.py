"""The product register (``mac="dsp+reg"``, rtl/mac.py) is an RTL-only change: the array gets one
more stage, the MXU uses one fewer of its alignment stages, and the timing contract is untouched.

These run the MXU-heavy cases of test_rtl_vs_sim.py with ``Chip(tiny, mac="dsp+reg")`` (and mixed
``dsp:5+reg`` / ``dsp:5+reg2`` arrays) against the cycle-level simulator: equal cycles, memories and
per-instance line trace, so the option changes no cycle count."""

from __future__ import annotations

import functools

import pytest

import chip_bench
import test_rtl_vs_sim as vs
from rtl.chip import Chip

pytestmark = pytest.mark.rtl


@pytest.fixture(params=["dsp+reg", "dsp:5+reg", "dsp:5+reg2"])
def reg_chip(request, monkeypatch):
    monkeypatch.setattr(chip_bench, "Chip", functools.partial(Chip, mac=request.param))
    return request.param


def test_gemm_tiled_example(reg_chip):
    vs.test_gemm_tiled_example()


@pytest.mark.parametrize("shape", [(8, 8, 8), (5, 6, 7)])
def test_generated_gemm(reg_chip, shape):
    vs.test_generated_gemm(shape)


@pytest.mark.parametrize("c0,c2", [(2, 3), (1, 0)])
def test_repeat_nests_sync_and_mxu_timing(reg_chip, c0, c2):
    vs.test_repeat_nests_sync_and_mxu_timing(c0, c2)


def test_second_weight_load_before_a_matmul_replaces_the_first(reg_chip):
    vs.test_second_weight_load_before_a_matmul_replaces_the_first()


def test_the_option_is_used(reg_chip):
    """The patched Chip really builds the registered array (so the cases above test it)."""
    from isa import ChipConfig
    from isa.timing import mxu_pipe
    from rtl.systolic import SystolicArray
    cfg = ChipConfig.preset("tiny")
    chip = chip_bench.Chip(cfg)
    assert chip.mac == reg_chip
    arr = SystolicArray(cfg.rows, cfg.cols, mac=reg_chip)
    assert arr.LATENCY == cfg.rows + cfg.cols - 1 + int(reg_chip[-1] if reg_chip[-1] == "2" else 1)
    assert 1 + arr.LATENCY <= mxu_pipe(cfg)


def test_three_stages_do_not_fit():
    from isa import ChipConfig
    from amaranth.back import rtlil
    from rtl.mac import split_reg
    with pytest.raises(ValueError):
        split_reg("dsp+reg3")
    import rtl.mxu as mxu
    # with a contract of one fewer extra stage, +reg2 would not fit: the MXU says so
    orig = mxu.mxu_pipe
    try:
        mxu.mxu_pipe = lambda cfg: orig(cfg) - 1
        with pytest.raises(ValueError, match="does not fit the MXU pipeline"):
            rtlil.convert(Chip(ChipConfig.preset("tiny"), mac="dsp+reg2"))
    finally:
        mxu.mxu_pipe = orig
