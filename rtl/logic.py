"""Balanced reductions. ``x = x | term`` in a loop builds a chain of gates as long as the loop, and
Yosys' LUT mapping (``rtl/fpga/flow.py``) was measured keeping such chains (docs/fpga.md): a LUT
level for every three terms on the FPGA. ``tree`` combines the terms pairwise instead (a LUT
level for every four to sixteen), with the same value, shape and sign as the chain."""

from __future__ import annotations

import operator

from amaranth import Const

__all__ = ["tree", "any_of", "all_of"]


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
