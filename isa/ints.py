"""Integer helpers every layer shares (the table, the timing rules, the simulator, the RTL, the compiler).

Each is written once here so that an idiom such as ``-(-a // b)`` is read by its name.
Plain Python; no imports.
"""

from __future__ import annotations


def clog2(n: int) -> int:
    """Bits needed to represent values 0..n-1 (at least 1)."""
    return max(1, (n - 1).bit_length())


def cdiv(a, b):
    """``ceil(a / b)`` in integers (floor division rounded up; any signs, ints or integer arrays)."""
    return -(-a // b)


def align_up(x, a):
    """The smallest multiple of ``a`` that is at least ``x`` (``a > 0``)."""
    return cdiv(x, a) * a
