"""rtl/logic.py's reductions against Python's arithmetic: ``csa_sum`` of two to seven terms (signed
and unsigned, narrower and wider than the sum, complements and constants, as the loop registers'
jumps use them) mod 2**width, and ``tree`` / ``any_of`` / ``all_of`` against their chains."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from amaranth import Const, Module, Signal, signed, unsigned

from rtl.logic import all_of, any_of, csa_sum, tree
from tests.rtl.rtl_helpers import run

EDGES = [0, 1, -1, 2, (1 << 31) - 1, -(1 << 31), 0x55555555, -0x55555556, 64, -64]


@pytest.mark.parametrize("n_terms", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("width", [8, 32])
def test_csa_sum_is_the_sum_mod_2_to_the_width(n_terms, width):
    rng = np.random.default_rng(n_terms * 100 + width)
    m = Module()
    shapes = [signed(32), unsigned(32), signed(6), unsigned(40), signed(32), signed(32), unsigned(3)][:n_terms]
    ins = [Signal(s, name=f"t{i}") for i, s in enumerate(shapes)]
    # the terms as the loop registers give them: the first as is, the rest complemented, and their number
    terms = [ins[0], *[~t for t in ins[1:]], n_terms - 1]
    out = Signal(unsigned(width))
    m.d.comb += out.eq(csa_sum(terms, width))
    mask = (1 << width) - 1

    def value(s, v):
        """``v`` as the signal of shape ``s`` holds it (Python int, its two's complement when signed)."""
        bits = s.width
        v &= (1 << bits) - 1
        return v - (1 << bits) if s.signed and v >> (bits - 1) else v

    cases = [[EDGES[(i + k) % len(EDGES)] for k in range(n_terms)] for i in range(len(EDGES))]
    cases += [[int(rng.integers(-(1 << 40), 1 << 40)) for _ in range(n_terms)] for _ in range(200)]

    async def bench(ctx):
        for case in cases:
            vals = [value(s, v) for s, v in zip(shapes, case)]
            for sig, v in zip(ins, vals):
                ctx.set(sig, v)
            # ~t keeps t's shape: -t - 1 when signed (extended by its sign), 2**bits - 1 - t when
            # unsigned (extended by zeros)
            inv = [-v - 1 if s.signed else (1 << s.width) - 1 - v for s, v in zip(shapes[1:], vals[1:])]
            want = (vals[0] + sum(inv) + n_terms - 1) & mask
            assert ctx.get(out) == want, (case, shapes)
        return len(cases)

    assert run(m, bench, clock=False) == len(cases)


def test_csa_sum_of_constants_and_of_nothing():
    assert csa_sum([], 8).value == 0
    m = Module()
    out = Signal(8)
    m.d.comb += out.eq(csa_sum([200, Const(100, 8), 7], 8))

    async def bench(ctx):
        return ctx.get(out)

    assert run(m, bench, clock=False) == (200 + 100 + 7) % 256


@pytest.mark.parametrize("n", [0, 1, 2, 5, 16])
def test_tree_any_all_match_their_chains(n):
    rng = np.random.default_rng(n)
    m = Module()
    ins = [Signal(4, name=f"x{i}") for i in range(n)]
    xor, anyo, allo = Signal(4), Signal(4), Signal()
    m.d.comb += [xor.eq(tree(operator.xor, ins, Const(0, 4))), anyo.eq(any_of(ins)),
                 allo.eq(all_of([x[0] for x in ins]))]

    async def bench(ctx):
        for _ in range(50):
            vals = [int(v) for v in rng.integers(0, 16, n)]
            for s, v in zip(ins, vals):
                ctx.set(s, v)
            x = a = 0
            al = 1
            for v in vals:
                x, a, al = x ^ v, a | v, al & (v & 1)
            assert (ctx.get(xor), ctx.get(anyo), ctx.get(allo)) == (x, a, al), vals
        return True

    assert run(m, bench, clock=False)
