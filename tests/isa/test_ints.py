"""isa.ints: ceil-divide, align-up and clog2 against their definitions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from isa.ints import align_up, cdiv, clog2


@given(st.integers(-10**15, 10**15), st.integers(-10**6, 10**6).filter(bool))
def test_cdiv_is_the_exact_quotient_rounded_up(a, b):
    assert cdiv(a, b) == math.ceil(Fraction(a, b))


def test_cdiv_on_integer_arrays():
    a = np.arange(-40, 41, dtype=np.int64)
    assert cdiv(a, 7).tolist() == [math.ceil(Fraction(int(x), 7)) for x in a]


@given(st.integers(0, 10**12), st.integers(1, 10**5))
def test_align_up_is_the_least_multiple_not_below(x, a):
    y = align_up(x, a)
    assert y % a == 0 and x <= y < x + a


@given(st.integers(1, 1 << 48))
def test_clog2_is_the_bits_of_the_largest_value(n):
    assert clog2(n) == max(1, math.ceil(math.log2(n)) if n & (n - 1) == 0 else n.bit_length())
    assert 1 << clog2(n) >= n
