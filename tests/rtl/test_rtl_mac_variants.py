"""MAC variants (rtl/mac.py): LUT products against numpy, the whole array built with each variant
against numpy matmul (the same cases as test_rtl_systolic.py, only the DUT swapped), and which
arrays fit the MXU's pipeline. (The whole chip with each variant: test_cases_rtl.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth import Const, Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rtl.mac import lut_digits, parse_mac, pe_kinds, product, split_reg
from rtl.systolic import SystolicArray
from tests.rtl.rtl_helpers import run
from tests.rtl.test_rtl_systolic import check_array


class _Mul(wiring.Component):
    def __init__(self, kind):
        self.kind = kind
        super().__init__({"a": In(signed(8)), "w": In(signed(8)), "p": Out(signed(16))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(product(m, self.a, self.w, self.kind, "mul"))
        return m


@pytest.mark.parametrize("kind", ["dsp", "lut"])
def test_product_matches_numpy(kind):
    rng = np.random.default_rng(7)
    corners = [-128, -127, -1, 0, 1, 127]
    pairs = [(a, w) for a in corners for w in corners]
    pairs += [tuple(int(v) for v in rng.integers(-128, 128, 2)) for _ in range(400)]
    dut = _Mul(kind)

    async def bench(ctx):
        got = []
        for a, w in pairs:
            ctx.set(dut.a, a)
            ctx.set(dut.w, w)
            got.append(ctx.get(dut.p))
        return got

    got = run(dut, bench, clock=False)
    assert got == [a * w for a, w in pairs]


class _AllProducts(wiring.Component):
    """256 LUT products, one for each int8 ``a``, of one weight ``w``, ``stages`` cycles late."""

    def __init__(self, stages):
        self.stages = stages
        super().__init__({"w": In(signed(8)),
                          "p": Out(data.ArrayLayout(signed(16), 256))})

    def elaborate(self, platform):
        m = Module()
        for i in range(256):
            m.d.comb += self.p[i].eq(product(m, Const(i - 128, signed(8)), self.w, "lut", f"mul{i}", self.stages))
        return m


# (the combinational product is the registered one's logic without its registers: the long lane)
@pytest.mark.parametrize("stages", [pytest.param(0, marks=pytest.mark.long), 2])
def test_lut_product_exhaustive(stages):
    """Every int8 x int8 pair (65,536) through the LUT product, combinational and with the FPGA
    build's two register stages (its middle registers): the product of the operands ``stages``
    cycles earlier. (One stage, an output register, runs in the array tests with ``lut+reg``.)"""
    dut = _AllProducts(stages)
    weights = list(range(-128, 128))

    async def bench(ctx):
        bad = []
        for t in range(len(weights) + stages):
            if t < len(weights):
                ctx.set(dut.w, weights[t])
            if t >= stages:         # after t clock edges: the weight set ``stages`` edges ago
                w = weights[t - stages]
                bad += [(i - 128, w, g) for i, g in enumerate(ctx.get(dut.p)) if g != (i - 128) * w]
            if stages:
                await ctx.tick()
        return bad

    assert run(dut, bench, clock=bool(stages)) == []


def test_lut_digits_rebuild_every_weight():
    """The weight's radix-4 digits: low codes 0, 1, 2 and 3 (= -1), top digit -2..2, and
    ``sum(d_i * 4**i) == w`` for all 256 weights."""
    m = Module()
    w = Signal(signed(8))
    codes, top = lut_digits(m, w, "w")

    async def bench(ctx):
        out = []
        for v in range(-128, 128):
            ctx.set(w, v)
            out.append(([ctx.get(c) for c in codes], ctx.get(top)))
        return out

    got = run(m, bench, clock=False)
    digit = {0: 0, 1: 1, 2: 2, 3: -1}
    rebuilt = [sum(digit[c] * 4 ** i for i, c in enumerate(cs)) + t * 64 for cs, t in got]
    assert rebuilt == list(range(-128, 128))
    assert {t for _, t in got} == {-2, -1, 0, 1, 2}
    assert {c for cs, _ in got for c in cs} == {0, 1, 2, 3}


@pytest.mark.parametrize("mac,rows,cols", [("lut", 4, 4), ("lut", 3, 5), ("dsp:5", 4, 4), ("dsp:0", 2, 2),
                                             ("dsp+reg", 4, 4), ("dsp:5+reg", 3, 5), ("dsp+reg", 1, 1),
                                             ("lut+reg", 8, 8), ("lut+reg2", 4, 4), ("dsp:7+reg2", 3, 5)])
def test_array_variant_matches_numpy(mac, rows, cols):
    check_array(rows, cols, mac)


def test_pe_kinds_and_bad_options():
    assert pe_kinds(2, 3, "dsp:4") == [["dsp"] * 3, ["dsp", "lut", "lut"]]
    assert pe_kinds(2, 2, "lut") == [["lut"] * 2] * 2
    assert parse_mac("dsp") == ("dsp", None)
    assert parse_mac("dsp:28+reg") == ("dsp", 28) and split_reg("dsp:28+reg") == ("dsp:28", 1)
    assert split_reg("lut") == ("lut", 0) and split_reg("dsp:3+reg2") == ("dsp:3", 2)
    assert SystolicArray(4, 4, "dsp+reg").LATENCY == SystolicArray(4, 4).LATENCY + 1
    for bad in ("dsp2", "lut:3", "dsp:x", "", 3, "dsp+", "dsp+pipe", "reg+dsp", "dsp+reg3"):
        with pytest.raises(ValueError, match="mac"):
            parse_mac(bad)


def test_three_stages_do_not_fit():
    """``+reg3`` is no option; and with a contract of one fewer extra stage, ``+reg2`` would not
    fit the MXU's pipeline: the MXU says so."""
    from amaranth.back import rtlil

    from isa import ChipConfig
    from isa.timing import mxu_pipe
    from rtl.mxu import MxuUnit
    with pytest.raises(ValueError):
        split_reg("dsp+reg3")
    cfg = ChipConfig.preset("tiny")
    with pytest.raises(ValueError, match="does not fit the MXU pipeline"):
        rtlil.convert(MxuUnit(cfg, mac="dsp+reg2", pipe=mxu_pipe(cfg) - 1))
    rtlil.convert(MxuUnit(cfg, mac="dsp+reg2"))          # the contract's pipeline holds it
