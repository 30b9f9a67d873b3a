"""Balanced reductions. ``x = x | term`` in a loop builds a chain of gates as long as the loop, and
Yosys' LUT mapping (``rtl/fpga/flow.py``) was measured keeping such chains (docs/fpga.md): a LUT
level for every three terms on the FPGA. ``tree`` combines the terms pairwise instead (a LUT
level for every four to sixteen), with the same value, shape and sign as the chain.

``csa_sum`` adds several terms with one carry chain: Yosys maps ``a + b + c`` to two adders, one
after the other (on the ECP5 two carry chains in series); carry-save adders reduce the terms to two
with a LUT level for every three, and one adder adds those."""

from __future__ import annotations

import operator

from amaranth import Cat, Const, Value, unsigned

__all__ = ["tree", "any_of", "all_of", "csa_sum"]


def tree(op, items, empty):
    """``op`` over ``items`` as a balanced binary tree (``empty`` when there are none)."""
    items = list(items)
    if not items:
        return empty
    while len(items) > 1:
        items = [op(items[i], items[i + 1]) if i + 1 < len(items) else items[i] for i in range(0, len(items), 2)]
    return items[0]


def any_of(items):
    """OR of ``items`` (1-bit values, or values ORed bit by bit)."""
    return tree(operator.or_, items, Const(0))


def all_of(items):
    """AND of 1-bit ``items`` (1 when there are none)."""
    return tree(operator.and_, items, Const(1))


def csa_sum(terms, width: int):
    """The sum of ``terms`` mod ``2**width`` (each extended by its sign or cut to ``width`` bits; an
    int is a constant term), as carry-save adders down to two terms and one adder: an unsigned
    value of ``width`` bits (``.as_signed()`` for a two's complement reading)."""
    def bits(t):
        if isinstance(t, int):
            return Const(t % (1 << width), width)
        v = Value.cast(t)
        if len(v) >= width:
            return v[:width]
        top = v[-1] if v.shape().signed else Const(0, 1)     # extended by its sign (or zeros)
        return Cat(v, top.replicate(width - len(v)))

    terms = [bits(t) for t in terms]
    if not terms:
        return Const(0, unsigned(width))
    while len(terms) > 2:
        a, b, c = terms[:3]
        carry = (a & b) | (a & c) | (b & c)
        terms = terms[3:] + [(a ^ b ^ c)[:width], Cat(Const(0, 1), carry[:width - 1])]
    return (terms[0] + terms[1])[:width] if len(terms) == 2 else terms[0]
