"""How the systolic array builds its int8 x int8 products: in hard multipliers or in LUTs.

An FPGA has a fixed number of multiplier blocks (ECP5-25k: 28 18x18, ECP5-85k: 156, iCE40 UP5K:
8 16x16). A ``*`` in the RTL lets Yosys map each product into one of them; past the device's count
the design does not fit. The build option ``mac`` (``Chip(cfg, mac=...)``) chooses per PE:

``"dsp"``    ``a * w`` (Yosys maps it to a multiplier block; the default, as before)
``"lut"``    a product of the weight's radix-4 digits (four partial products, one LUT4 per bit
             for three of them, three adders) that Yosys keeps in LUTs and carry chains
``"dsp:N"``  the first N PEs (row-major) as ``"dsp"``, the others as ``"lut"``: fills the device's
             multiplier blocks and spills the rest into LUTs

All variants compute the same signed 16-bit product, so cycles and results do not change.

A ``+reg`` suffix (``"dsp+reg"``, ``"dsp:28+reg"``, ``"lut+reg"``) registers each product before
the PE's partial-sum add: one more array stage (``SystolicArray.LATENCY`` grows by one), which
the MXU absorbs in the alignment stages it already has between the array and the ACC write
(``isa.timing.MXU_EXTRA``), so the MXU's timing contract and every cycle count are unchanged.
It takes the multiplier off the adder's carry chain (the FPGA's critical path). ``+reg2`` adds a
second stage: a LUT product is also registered in the middle of its adder tree (its two row
pairs' sums), a hard multiplier gets registered operands (so it sits between two registers the
placer can put beside it); the MXU has room for exactly two such stages.
"""

from __future__ import annotations

import contextlib
import contextvars

from amaranth import Cat, ClockSignal, Const, Instance, Mux, ResetSignal, Signal, Value, signed

from .primitives import Mult18x18d

__all__ = ["MAC_KINDS", "parse_mac", "split_reg", "pe_kinds", "product", "stored_weight", "lut_digits",
           "fpga_primitives", "uses_primitives"]

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


def stored_weight(m, w, kind: str, name: str):
    """What a PE of ``kind`` keeps in its weight registers for the signed 8-bit weight ``w``: ``w``
    for a hard product; for a LUT product its radix-4 digits (``lut_digits``), 9 bits (the three
    2-bit codes, then the 3-bit top digit; 0 for a zero weight), so they are computed once per
    column as a weight row is loaded instead of in every PE on the product's path."""
    if kind != "lut":
        return w
    codes, top = lut_digits(m, w, name)
    return Cat(*codes, top)


def product(m, a, w, kind: str, name: str, stages: int = 0, *, stored: bool = False):
    """The signed 16-bit product of signed 8-bit ``a`` and ``w`` built as ``kind``, ``stages``
    cycles after its operands (0: combinational; 1: registered; 2: a LUT product is also
    registered in the middle of its adder tree, a hard multiplier's operands are registered).
    ``stored``: ``w`` is already in the form ``stored_weight`` gives (the array's PEs)."""
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
    if not stored:
        w = stored_weight(m, w, kind, name)
    return _lut_product(m, a, w, name, stages)


def lut_digits(m, w, name: str):
    """The weight ``w`` (signed 8 bits) in radix 4: ``w = sum(d_i * 4**i)``. The three low digits
    come from the residues {-1, 0, 1, 2} (a complete set mod 4, so the digits are unique; 2-bit
    codes 0, 1, 2 and 3 for -1: the code is the digit mod 4), the top one is ``w[6:8]`` (signed)
    plus the carry of the digits below, -2..2. Returns (the three codes, the top digit)."""
    codes, carry = [], Const(0, 1)
    for i in range(3):
        v = Signal(3, name=f"{name}_v{i}")             # w's bit pair + carry in: 0..4
        m.d.comb += v.eq(w[2 * i:2 * i + 2] + carry)
        code, carry = Signal(2, name=f"{name}_c{i}"), Signal(name=f"{name}_k{i}")
        m.d.comb += [code.eq(v[:2]), carry.eq(v >= 3)]  # 3 -> digit -1, carry 1; 4 -> digit 0, carry 1
        codes.append(code)
    top = Signal(signed(3), name=f"{name}_t")
    m.d.comb += top.eq(w[6:8].as_signed() + carry)
    return codes, top


def _lut_product(m, a, digits, name, stages):
    """``a * w`` in LUTs and carry chains from the weight's radix-4 ``digits`` (``stored_weight``):
    four partial products, each 9 bits, one LUT4 per bit for the low digits (its code's two bits, a_j,
    a_(j-1): 0, a, 2a or ~a = -a - 1) and a 5-input select for the top one (|d| * a, inverted when
    negative), summed by three adders. A row's ``+1`` for an inverted ``~a`` goes into the free low
    bit of the row above (rows are 2 bits apart, each leaves its two lowest bits free), the top
    row's into a 10-bit increment of that row; all sums are mod 2^16 (the product fits 16 bits).
    With 2 stages the two row pairs' sums are registered (the tree's middle; registering the four
    rows instead balances the stages a little better but takes 11-16% more LUTs: docs/fpga.md)."""
    codes, top = [digits[0:2], digits[2:4], digits[4:6]], digits[6:9].as_signed()
    a9 = Cat(a, a[7])                                   # a sign-extended to 9 bits (2a needs them)
    rows, incs = [], []
    for i, code in enumerate(codes):
        bits = []
        for j in range(9):
            aj, ajm = a9[j], (a9[j - 1] if j else Const(0, 1))
            bits.append(Mux(code[1], Mux(code[0], ~aj, ajm), Mux(code[0], aj, 0)))
        x, inc = Signal(signed(9), name=f"{name}_x{i}"), Signal(name=f"{name}_n{i}")
        m.d.comb += [x.eq(Cat(*bits)), inc.eq(code == 3)]
        rows.append(x)
        incs.append(inc)
    one, two, neg = (Signal(name=f"{name}_{s}3") for s in ("one", "two", "neg"))
    m.d.comb += [one.eq((top == 1) | (top == -1)), two.eq((top == 2) | (top == -2)), neg.eq(top < 0)]
    bits = []
    for j in range(9):
        aj, ajm = a9[j], (a9[j - 1] if j else Const(0, 1))
        bits.append(((one & aj) | (two & ajm)) ^ neg)
    x3 = Signal(signed(9), name=f"{name}_x3")
    m.d.comb += x3.eq(Cat(*bits))
    exact3 = Signal(signed(10), name=f"{name}_e3")      # top digit * a, exact
    m.d.comb += exact3.eq(x3 + neg)
    # rows at bit 0: x0 and (x1 : 0 : inc0); at bit 2: (x2 : 0 : inc1) and (exact3 : 0 : inc2) << 2
    rb, rc = Signal(signed(11), name=f"{name}_rb"), Signal(signed(11), name=f"{name}_rc")
    rd = Signal(signed(12), name=f"{name}_rd")
    m.d.comb += [rb.eq(Cat(incs[0], Const(0, 1), rows[1])), rc.eq(Cat(incs[1], Const(0, 1), rows[2])),
                 rd.eq(Cat(incs[2], Const(0, 1), exact3))]
    s0, s1 = Signal(signed(12), name=f"{name}_s0"), Signal(signed(14), name=f"{name}_s1")
    m.d.comb += [s0.eq(rows[0] + rb), s1.eq(rc + (rd << 2))]
    if stages == 2:                 # the tree's middle: the two pair sums
        s0, s1 = _reg(m, s0, f"{name}_m0"), _reg(m, s1, f"{name}_m1")
    p = Signal(signed(16), name=f"{name}_p")
    m.d.comb += p.eq(s0 + (s1 << 2))
    return _reg(m, p, f"{name}_r") if stages else p
