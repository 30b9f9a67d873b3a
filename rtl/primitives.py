"""Simulation models of the FPGA primitives the RTL instantiates, for Amaranth's simulator.

An ``Instance`` has no behaviour in simulation. ``rtl.mac.fpga_primitives("ecp5", model=True)``
builds each primitive as its model here instead, from the very arguments the ``Instance`` gets
(``p_`` parameters, ``i_``/``o_`` ports), so a test runs the instantiation the FPGA build uses.

``Mult18x18d``: the ECP5 sysDSP ``MULT18X18D`` (Lattice TN1267, "ECP5 and ECP5-5G sysDSP Usage
Guide"), as far as its product output goes: ``P = A * B`` in 36 bits, ``A`` and ``B`` signed when
``SIGNEDA``/``SIGNEDB`` (constants here) are 1; an optional register on A and on B (the input
registers), after the multiplier (pipeline) and on P (output), each clocked by the ``CLKn``,
enabled by the ``CEn`` and reset to 0 by the ``RSTn`` (synchronously, ``RESETMODE="SYNC"``) that
its ``REG_*_CLK``/``_CE``/``_RST`` parameters name; all registers 0 after configuration. Yosys'
ECP5 library declares the block (``share/ecp5/cells_bb.v``) but has no model of it; the names and
defaults below are that declaration's, and ``tests/rtl/test_rtl_mac_primitive.py`` checks them
against it. Anything else (the shift and cascade ports, ``MULT_BYPASS``, asynchronous reset,
dynamic sign controls) is refused, not guessed.
"""

from __future__ import annotations

from amaranth import Cat, ClockSignal, Const, Elaboratable, Module, Signal, Value, signed, unsigned

from isa.errors import TetrachipError

__all__ = ["Mult18x18d", "MULT18X18D_PARAMETERS", "MULT18X18D_PORTS", "PrimitiveModelError"]

_STAGES = ("INPUTA", "INPUTB", "INPUTC", "PIPELINE", "OUTPUT")
#: every parameter of MULT18X18D and its default (Yosys' ``cells_bb.v``)
MULT18X18D_PARAMETERS = {
    **{f"REG_{s}_{x}": d for s in _STAGES for x, d in (("CLK", "NONE"), ("CE", "CE0"), ("RST", "RST0"))},
    **{f"CLK{k}_DIV": "ENABLED" for k in range(4)},
    "HIGHSPEED_CLK": "NONE", "GSR": "ENABLED", "CAS_MATCH_REG": "FALSE", "SOURCEB_MODE": "B_SHIFT",
    "MULT_BYPASS": "DISABLED", "RESETMODE": "SYNC"}
#: parameters whose other values change what P is: only these values are modelled
_FIXED = {"MULT_BYPASS": "DISABLED", "RESETMODE": "SYNC", "HIGHSPEED_CLK": "NONE", "CAS_MATCH_REG": "FALSE",
          "SOURCEB_MODE": "B_SHIFT", **{f"CLK{k}_DIV": "ENABLED" for k in range(4)}}
_INPUTS = ([f"{x}{i}" for x in "ABC" for i in range(18)] + ["SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB"]
           + [f"{x}{k}" for x in ("CLK", "CE", "RST") for k in range(4)]
           + [f"SRI{x}{i}" for x in "AB" for i in range(18)])
_OUTPUTS = ([f"P{i}" for i in range(36)] + ["SIGNEDP"] + [f"SRO{x}{i}" for x in "AB" for i in range(18)]
            + [f"RO{x}{i}" for x in "ABC" for i in range(18)])
MULT18X18D_PORTS = {"inputs": tuple(_INPUTS), "outputs": tuple(_OUTPUTS)}


class PrimitiveModelError(TetrachipError, ValueError):
    """An instantiation the model does not cover (it would have to guess the block's behaviour)."""


def _const(v) -> int | None:
    v = Value.cast(v)
    return v.value if isinstance(v, Const) else None


class Mult18x18d(Elaboratable):
    """``Mult18x18d(p_REG_INPUTA_CLK="CLK0", i_A0=..., o_P0=..., ...)``: the keyword arguments of
    ``Instance("MULT18X18D", ...)``; see the module docstring for what is modelled."""

    def __init__(self, **kwargs):
        try:
            self._check(kwargs)
        except PrimitiveModelError:
            self._MustUse__silence = True       # refused: not an unused elaboratable to warn about
            raise

    def _check(self, kwargs):
        self.params, self.inputs, self.outputs = dict(MULT18X18D_PARAMETERS), {}, {}
        for key, v in kwargs.items():
            kind, _, name = key.partition("_")
            table = {"p": (self.params, MULT18X18D_PARAMETERS), "i": (self.inputs, _INPUTS),
                     "o": (self.outputs, _OUTPUTS)}.get(kind)
            if table is None or name not in table[1]:
                raise PrimitiveModelError(f"MULT18X18D has no {key!r}")
            table[0][name] = v
        for name, want in _FIXED.items():
            if self.params[name] != want:
                raise PrimitiveModelError(f"MULT18X18D model: {name}={self.params[name]!r} is not modelled "
                                          f"(only {want!r})")
        extra = [n for n in self.outputs if not n.startswith("P")]
        if extra:
            raise PrimitiveModelError(f"MULT18X18D model: only P is modelled, not {extra[0]}")
        for n in ("SOURCEA", "SOURCEB"):
            if _const(self.inputs.get(n, 0)) != 0:
                raise PrimitiveModelError(f"MULT18X18D model: {n} must be 0 (the shift inputs are not modelled)")
        for n in ("SIGNEDA", "SIGNEDB"):
            if n not in self.inputs or _const(self.inputs[n]) is None:
                raise PrimitiveModelError(f"MULT18X18D model: {n} must be a constant")
        for x in "AB":
            missing = [f"{x}{i}" for i in range(18) if f"{x}{i}" not in self.inputs]
            if missing:
                raise PrimitiveModelError(f"MULT18X18D model: {missing[0]} is not connected")
        self.regs = {}              # stage -> its (CLK, CE, RST) connections, for the registered stages
        for stage in ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT"):
            if self.params[f"REG_{stage}_CLK"] == "NONE":
                continue
            ports = {}
            for x in ("CLK", "CE", "RST"):
                sel = self.params[f"REG_{stage}_{x}"]
                if sel not in [f"{x}{k}" for k in range(4)]:
                    raise PrimitiveModelError(f"MULT18X18D model: REG_{stage}_{x}={sel!r}")
                if sel not in self.inputs:
                    raise PrimitiveModelError(f"MULT18X18D model: register {stage} uses {sel}, which is not connected")
                ports[x] = self.inputs[sel]
            if not isinstance(ports["CLK"], ClockSignal) and _const(ports["CLK"]) != 0:
                raise PrimitiveModelError("MULT18X18D model: a CLKn must be a ClockSignal or 0")
            self.regs[stage] = ports

    def _stage(self, m, value, stage: str):
        """``value`` through the stage's register if its ``REG_<stage>_CLK`` names a clock."""
        if stage not in self.regs:
            return value
        ports = self.regs[stage]
        r = Signal(value.shape(), name=f"reg_{stage.lower()}", reset_less=True)   # reset by RSTn only
        if not isinstance(ports["CLK"], ClockSignal):
            return r                # a clock tied low never ticks: the register keeps its 0
        domain = m.d[ports["CLK"].domain]
        with m.If(ports["RST"]):
            domain += r.eq(0)
        with m.Elif(ports["CE"]):
            domain += r.eq(value)
        return r

    def elaborate(self, platform):
        m = Module()
        operands = []
        for x in "AB":
            raw = Signal(18, name=f"{x.lower()}_in")
            m.d.comb += raw.eq(Cat(*[self.inputs[f"{x}{i}"] for i in range(18)]))
            shape = signed(18) if _const(self.inputs[f"SIGNED{x}"]) else unsigned(18)
            v = Signal(shape, name=f"{x.lower()}_op")
            m.d.comb += v.eq(raw)
            operands.append(self._stage(m, v, f"INPUT{x}"))
        product = Signal(signed(36), name="product")
        m.d.comb += product.eq(operands[0] * operands[1])
        p = self._stage(m, self._stage(m, product, "PIPELINE"), "OUTPUT")
        for i in range(36):
            if f"P{i}" in self.outputs:
                m.d.comb += self.outputs[f"P{i}"].eq(p[i])
        return m
