"""The weight-stationary systolic array: rows x cols int8 x int8 -> int32 MACs, double-buffered weights.

PE(k, n) holds weight W[k][n] in a *front* register (used by streaming inputs) and a *shadow*
register (filled by weight loads); a PE with a LUT product holds the weight's radix-4 digits
(``rtl.mac.stored_weight``, computed once per column from the loaded row). Input lane k enters
row k skewed by k cycles and moves right one PE per cycle; partial sums move down one PE per
cycle; column n's result is deskewed so a whole output row leaves together
``LATENCY = rows + cols - 1`` cycles after its input row entered.

The ``swap`` bit travels with lane data exactly like an input row: PE(k, n) uses the shadow
weight for the row that carries it and copies shadow to front in the same cycle, so rows before
it still use the old weights (the swap wavefront; ``isa.timing.mxu_swap_delay``).

Partial sums are only as wide as they can grow: row k's sum of k+1 int8 x int8 products fits
``16 + clog2(k+1)`` signed bits (no wrap is possible), and ``y`` sign-extends the last row's to 32.
With ``mac="...+reg"`` (``+reg2``; ``rtl/mac.py``) each product is registered before the add:
``LATENCY`` is one (two) cycles longer and the weight/swap timing is unchanged (the weight is used
in the first product stage).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.ints import clog2

from .mac import pe_kinds, product, split_reg, stored_weight

__all__ = ["SystolicArray"]


class SystolicArray(wiring.Component):
    """rows x cols weight-stationary MAC array.

    Ports:
      x        In(ArrayLayout(signed(8), rows))   input row (K lanes), entering this cycle
      swap     In(1)                              this row is the first after new weights: swap
      w_we     In(1)                              write shadow weight row ``w_row``
      w_row    In(clog2(rows))                    shadow row written
      w_data   In(ArrayLayout(signed(8), cols))   its cols weights
      w_clear  In(1)                              zero every shadow weight (before a partial load)
      y        Out(ArrayLayout(signed(32), cols)) result of the row that entered LATENCY cycles ago
    """

    def __init__(self, rows: int, cols: int, mac: str = "dsp"):
        self.rows, self.cols = rows, cols
        self.kinds = pe_kinds(rows, cols, mac)      # per PE: "dsp" or "lut" (rtl/mac.py)
        self.preg = split_reg(mac)[1]                # product register stages (0, 1, 2)
        self.LATENCY = rows + cols - 1 + self.preg
        super().__init__({
            "x": In(data.ArrayLayout(signed(8), rows)), "swap": In(1),
            "w_we": In(1), "w_row": In(clog2(rows)), "w_data": In(data.ArrayLayout(signed(8), cols)),
            "w_clear": In(1),
            "y": Out(data.ArrayLayout(signed(32), cols)),
        })

    def elaborate(self, platform):
        m = Module()
        R, C = self.rows, self.cols
        # input skew: lane k (and its swap bit) delayed by k cycles
        a_in, s_in = [], []
        for k in range(R):
            a, s = self.x[k], self.swap
            for d in range(k):
                na, ns = Signal(signed(8), name=f"skew{k}_{d}"), Signal(name=f"skews{k}_{d}")
                m.d.sync += [na.eq(a), ns.eq(s)]
                a, s = na, ns
            a_in.append(a)
            s_in.append(s)
        # what each column's PEs store of a loaded weight, computed once per column and kind
        stored = [{kind: stored_weight(m, self.w_data[n], kind, f"wd{n}_{kind}")
                   for kind in sorted({self.kinds[k][n] for k in range(R)})} for n in range(C)]
        psum = [None] * C                                   # nothing above row 0
        for k in range(R):
            width = 16 + (clog2(k + 1) if k else 0)         # |sum of k+1 products| <= (k+1) * 2^14
            a, s = a_in[k], s_in[k]
            new_psum = []
            for n in range(C):
                kind = self.kinds[k][n]
                wd = stored[n][kind]
                front = Signal(Value.cast(wd).shape(), name=f"wf{k}_{n}")
                shadow = Signal(Value.cast(wd).shape(), name=f"ws{k}_{n}")
                w = Mux(s, shadow, front)
                with m.If(s):
                    m.d.sync += front.eq(shadow)
                with m.If(self.w_clear):
                    m.d.sync += shadow.eq(0)
                with m.If(self.w_we & (self.w_row == k)):
                    m.d.sync += shadow.eq(wd)
                prod = product(m, a, w, kind, f"mul{k}_{n}", stages=self.preg, stored=True)
                p = Signal(signed(width), name=f"ps{k}_{n}")
                m.d.sync += p.eq(prod if psum[n] is None else psum[n] + prod)
                new_psum.append(p)
                if n < C - 1:    # pass the input (and the swap bit) right
                    na, ns = Signal(signed(8), name=f"a{k}_{n}"), Signal(name=f"s{k}_{n}")
                    m.d.sync += [na.eq(a), ns.eq(s)]
                    a, s = na, ns
            psum = new_psum
        # deskew: column n waits cols-1-n cycles
        for n in range(C):
            v = psum[n]
            for d in range(C - 1 - n):
                nv = Signal.like(v, name=f"dsk{n}_{d}")
                m.d.sync += nv.eq(v)
                v = nv
            m.d.comb += self.y[n].eq(v)
        return m
