"""How the systolic array builds its int8 x int8 products: in hard multipliers or in LUTs.

An FPGA has a fixed number of multiplier blocks (ECP5-25k: 28 18x18, ECP5-85k: 156, iCE40 UP5K:
8 16x16). A ``*`` in the RTL lets Yosys map each product into one of them; past the device's count
the design does not fit. The build option ``mac`` (``Chip(cfg, mac=...)``) chooses per PE:

``"dsp"``    ``a * w`` (Yosys maps it to a multiplier block; the default, as before)
``"lut"``    a shift-and-add multiplier (Baugh-Wooley partial products, an adder tree) that Yosys
             keeps in LUTs and carry chains
``"dsp:N"``  the first N PEs (row-major) as ``"dsp"``, the others as ``"lut"``: fills the device's
             multiplier blocks and spills the rest into LUTs

All variants compute the same signed 16-bit product, so cycles and results do not change.

A ``+reg`` suffix (``"dsp+reg"``, ``"dsp:28+reg"``, ``"lut+reg"``) registers each product before
the PE's partial-sum add: one more array stage (``SystolicArray.LATENCY`` grows by one), which
the MXU absorbs in the alignment stages it already has between the array and the ACC write
(``isa.timing.MXU_EXTRA``), so the MXU's timing contract and every cycle count are unchanged.
It takes the multiplier off the adder's carry chain (the FPGA's critical path). ``+reg2`` adds a
second stage: a LUT product is also registered in the middle of its adder tree, a hard multiplier
gets registered operands (so it sits between two registers the placer can put beside it); the MXU
has room for exactly two such stages.
"""

from __future__ import annotations

import contextlib
import contextvars

from amaranth import Cat, ClockSignal, Const, Instance, ResetSignal, Signal, Value, signed

from .primitives import Mult18x18d

__all__ = ["MAC_KINDS", "parse_mac", "split_reg", "pe_kinds", "product", "fpga_primitives", "uses_primitives"]

MAC_KINDS = ("dsp", "lut")


def split_reg(mac: str) -> tuple[str, int]:
    """``"dsp:28+reg"`` -> ("dsp:28", 1): the variant and its product register stages (0, 1, 2)."""
    if not isinstance(mac, str):
        raise ValueError(f"mac must be a string, got {mac!r}")
    base, plus, suffix = mac.partition("+")
    stages = {"reg": 1, "reg2": 2}.get(suffix)
    if plus and stages is None:
        raise ValueError(f"mac suffix must be '+reg' or '+reg2' (product register stages), got {mac!r}")
    return base, stages if plus else 0


def parse_mac(mac: str) -> tuple[str, int | None]:
    """``"dsp"`` -> ("dsp", None); ``"lut"`` -> ("lut", None); ``"dsp:N"`` -> ("dsp", N); a ``+reg``
    suffix is accepted and ignored here (``split_reg``)."""
    kind, _, n = split_reg(mac)[0].partition(":")
    if kind not in MAC_KINDS or (n and kind != "dsp"):
        raise ValueError(f"mac must be 'dsp', 'lut' or 'dsp:N', got {mac!r}")
    if not n:
        return kind, None
    if not n.isdigit():
        raise ValueError(f"mac 'dsp:N' needs a count N >= 0, got {mac!r}")
    return kind, int(n)


def pe_kinds(rows: int, cols: int, mac: str = "dsp") -> list[list[str]]:
    """The kind ("dsp" or "lut") of each PE (k, n), row-major."""
    kind, limit = parse_mac(mac)
    out = []
    for k in range(rows):
        out.append([kind if limit is None or k * cols + n < limit else "lut" for n in range(cols)])
    return out


_PRIMITIVES: contextvars.ContextVar = contextvars.ContextVar("tetrachip_fpga_primitives", default=(None, False))


@contextlib.contextmanager
def fpga_primitives(family: str | None, *, model: bool = False):
    """While active (``"ecp5"``), elaboration builds a ``dsp`` product with 2 stages as an ECP5
    ``MULT18X18D`` using its own input and output registers (same two-cycle latency, no general
    routing inside the multiplier path): the FPGA flow's default (``--dsp-regs``, docs/fpga.md).
    With ``model=True`` the block is built as its simulation model (``rtl.primitives.Mult18x18d``,
    from the same parameters and port connections), so Amaranth's simulator can run it; without
    this context the behavioural ``+reg2`` product is built, which is what simulation and
    co-simulation run (``tests/rtl/test_rtl_mac_primitive.py`` checks the two agree)."""
    tok = _PRIMITIVES.set((family, model))
    try:
        yield
    finally:
        _PRIMITIVES.reset(tok)


def uses_primitives(mac: str) -> bool:
    """Whether ``fpga_primitives`` changes an array built with ``mac``: some products are hard
    (``dsp``, ``dsp:N`` with N > 0) with 2 register stages (``+reg2``)."""
    (kind, limit), stages = parse_mac(mac), split_reg(mac)[1]
    return kind == "dsp" and limit != 0 and stages == 2


def _mult18x18d(m, a, w, name):
    """signed 8 x 8 product in an ECP5 MULT18X18D with registered inputs and output (2 cycles)."""
    p = Signal(36, name=f"{name}_P")
    wv = Signal(signed(8), name=f"{name}_wv")
    m.d.comb += wv.eq(w)
    ports = {}
    for i in range(18):
        ports[f"i_A{i}"], ports[f"i_B{i}"], ports[f"i_C{i}"] = a[min(i, 7)], wv[min(i, 7)], Const(0)
        ports[f"o_P{i}"], ports[f"o_P{i + 18}"] = p[i], p[i + 18]
    for k in range(4):
        ports[f"i_CLK{k}"] = ClockSignal("sync") if k == 0 else Const(0)
        ports[f"i_CE{k}"] = Const(1)
        ports[f"i_RST{k}"] = ResetSignal("sync") if k == 0 else Const(0)
    regs = {f"p_REG_{r}_{x}": f"{x}0" for r in ("INPUTA", "INPUTB", "OUTPUT") for x in ("CLK", "CE", "RST")}
    args = dict(p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE", p_GSR="DISABLED",
                p_RESETMODE="SYNC", p_CLK0_DIV="ENABLED", p_SOURCEB_MODE="B_SHIFT", p_MULT_BYPASS="DISABLED",
                p_CAS_MATCH_REG="FALSE", i_SIGNEDA=Const(1), i_SIGNEDB=Const(1), i_SOURCEA=Const(0),
                i_SOURCEB=Const(0), **regs, **ports)
    if _PRIMITIVES.get()[1]:
        m.submodules[f"{name}_dsp"] = Mult18x18d(**args)
    else:
        m.submodules[f"{name}_dsp"] = Instance("MULT18X18D", **args)
    out = Signal(signed(16), name=f"{name}_r")
    m.d.comb += out.eq(p[:16])
    return out


def _reg(m, v, name):
    r = Signal(Value.cast(v).shape(), name=name)
    m.d.sync += r.eq(v)
    return r


def product(m, a, w, kind: str, name: str, stages: int = 0):
    """The signed 16-bit product of signed 8-bit ``a`` and ``w`` built as ``kind``, ``stages``
    cycles after its operands (0: combinational; 1: registered; 2: a LUT product is also
    registered in the middle of its adder tree, a hard multiplier's operands are registered)."""
    if stages not in (0, 1, 2):
        raise ValueError(f"product register stages must be 0, 1 or 2, got {stages}")
    if kind == "dsp":
        if stages == 2 and _PRIMITIVES.get()[0] == "ecp5":
            return _mult18x18d(m, a, w, name)
        if stages == 2:             # operands registered too: the multiplier sits between two registers
            a, w = _reg(m, a, f"{name}_a"), _reg(m, w, f"{name}_w")
        p = Signal(signed(16), name=f"{name}_p")
        m.d.comb += p.eq(a * w)
        return _reg(m, p, f"{name}_r") if stages else p
    if kind != "lut":
        raise ValueError(f"unknown MAC kind {kind!r}")
    # Baugh-Wooley: a*w = sum_{i,j<7} a_i w_j 2^(i+j) + a7 w7 2^14
    #                     - 2^7 (a7 * w[0:7] + w7 * a[0:7]) ; the negative terms as inverted rows + constants
    rows = []
    for j in range(8):
        bits = []
        for i in range(8):
            b = a[i] & w[j]
            if (i == 7) != (j == 7):       # one sign bit: negative weight -> invert
                b = ~b
            bits.append(b)
        rows.append((Cat(*bits), j))
    terms = [Signal(16, name=f"{name}_pp{j}") for j in range(8)]
    for (bits, j), t in zip(rows, terms):
        m.d.comb += t.eq(bits.as_unsigned() << j)
    # constant of the inversions: 2^8 + 2^15 (mod 2^16)
    level = [t for t in terms] + [Const((1 << 8) + (1 << 15), 16)]
    d = 0
    while len(level) > 1:           # balanced adder tree, 16 bits wide (mod 2^16)
        nxt = []
        for i in range(0, len(level) - 1, 2):
            s = Signal(16, name=f"{name}_s{d}_{i // 2}")
            m.d.comb += s.eq(level[i] + level[i + 1])
            nxt.append(s)
        if len(level) % 2:
            nxt.append(level[-1])
        level, d = nxt, d + 1
        if stages == 2 and d == 2:  # 9 terms -> 5 -> 3 | register | -> 2 -> 1
            level = [_reg(m, v, f"{name}_m{i}") if isinstance(v, Signal) else v for i, v in enumerate(level)]
    p = Signal(signed(16), name=f"{name}_p")
    m.d.comb += p.eq(level[0])
    return _reg(m, p, f"{name}_r") if stages else p
