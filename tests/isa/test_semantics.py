"""isa.semantics against independent plain-Python definitions (element by element)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa import semantics as S
from isa.table import VPU_BINARY, VPU_UNARY, Round, Space

I32 = st.integers(-(1 << 31), (1 << 31) - 1)


def w32(v: int) -> int:
    v %= 1 << 32
    return v - (1 << 32) if v >= 1 << 31 else v


def sat8(v: int) -> int:
    return max(-128, min(127, v))


# ---------------------------------------------------------------- scalar -----------------------
@settings(max_examples=200, deadline=None)
@given(op=st.sampled_from(["add", "sub", "mul", "and", "or", "xor", "sll", "srl", "sra", "slt"]),
       a=I32, b=I32)
def test_scalar_alu(op, a, b):
    ua, sh = a % (1 << 32), b % 32
    ref = {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b, "or": a | b, "xor": a ^ b,
           "sll": ua * 2 ** sh, "srl": ua // 2 ** sh, "sra": a // 2 ** sh, "slt": 1 if a < b else 0}[op]
    assert S.scalar_alu(op, a, b) == w32(ref)


def test_scalar_alu_examples():
    assert S.scalar_alu("add", 0x7FFFFFFF, 1) == -(1 << 31)
    assert S.scalar_alu("srl", -1, 28) == 15
    assert S.scalar_alu("sra", -16, 2) == -4
    assert S.scalar_alu("sll", 1, 33) == 2          # shift amount masked to 5 bits
    assert S.scalar_alu("slt", -1, 0) == 1
    with pytest.raises(ValueError):
        S.scalar_alu("div", 1, 1)


@pytest.mark.parametrize("op,a,b,want", [("beq", 3, 3, True), ("beq", 3, 4, False), ("bne", 3, 4, True),
                                         ("blt", -1, 0, True), ("blt", 0, -1, False), ("bge", 5, 5, True),
                                         ("bge", 0xFFFFFFFF, 0, False), ("jmp", 0, 1, True)])
def test_branch_taken(op, a, b, want):
    assert S.branch_taken(op, a, b) is want


def test_scalar_load_store():
    assert S.scalar_load(np.array([1, -5], np.int8), 1) == -5
    assert S.scalar_store_value(300, Space.SPM) == 127
    assert S.scalar_store_value(-300, Space.SPM) == -128
    assert S.scalar_store_value(1 << 31, Space.ACC) == -(1 << 31)


# ---------------------------------------------------------------- repeat -----------------------
@pytest.mark.parametrize("depth", [0, 1, 2, 3, 4])
def test_expand_nest_every_depth(depth):
    rng = np.random.default_rng(depth)
    counts = [int(c) for c in rng.integers(1, 4, depth)]
    strides = [[int(x) for x in rng.integers(-50, 50, 3)] for _ in range(depth)]
    bases = [7, 100, -3]
    want = []
    for idx in itertools.product(*[range(c) for c in counts]):   # innermost fastest
        want.append([bases[k] + sum(i * strides[j][k] for j, i in enumerate(idx)) for k in range(3)])
    got = S.expand_nest(counts, strides, bases)
    assert got.tolist() == want
    assert len(want) == S.nest_count(counts)


def test_expand_nest_zero_trip():
    assert S.expand_nest([3, 0], [[1], [2]], [5]).shape == (0, 1)
    assert S.nest_count([3, 0]) == 0


# ---------------------------------------------------------------- DMA --------------------------
def _dram(n=512, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("space", [Space.SPM, Space.ACC])
@pytest.mark.parametrize("rows,length,rstride,estride", [(3, 4, 10, None), (2, 3, 0, None), (4, 2, 3, 7),
                                                          (1, 4, 0, None), (3, 4, 4, None), (2, 2, -8, -3)])
def test_dma_gather_scatter(space, rows, length, rstride, estride):
    cols, eb = 4, (4 if space == Space.ACC else 1)
    estride = eb if estride is None else estride
    dram = _dram()
    base = 200
    got = S.dma_gather(dram, base, rows, length, rstride, estride, space, cols)
    for r in range(rows):
        for e in range(cols):
            if e >= length:
                assert got[r, e] == 0
                continue
            a = base + r * rstride + e * estride
            v = int.from_bytes(bytes(dram[a:a + eb]), "little", signed=True)
            assert got[r, e] == v
    # store: write rows back elsewhere, compare with a byte-by-byte reference
    data = (np.arange(rows * cols).reshape(rows, cols) * 37 - 60).astype(np.int32 if eb == 4 else np.int8)
    ref = bytearray(dram.tobytes())
    for r in range(rows):
        for e in range(length):
            a = base + r * rstride + e * estride
            ref[a:a + eb] = int(data[r, e]).to_bytes(eb, "little", signed=True)
    out = S.dma_scatter(dram, data, base, length, rstride, estride, space)
    assert out.tobytes() == bytes(ref)
    assert (dram == _dram()).all(), "dma_scatter must not modify its input"
    lo, hi = S.dma_footprint(base, rows, length, rstride, estride, space)
    addrs = S.dma_byte_addresses(base, rows, length, rstride, estride, space)
    assert lo == addrs.min() and hi == addrs.max() + 1


# ---------------------------------------------------------------- MXU --------------------------
def test_matmul_rows_and_accumulate():
    rng = np.random.default_rng(1)
    rows, cols, k = 4, 6, 3
    spm = rng.integers(-128, 128, (5, cols), dtype=np.int8)
    w = S.load_weights(spm, k, rows, cols)
    assert w.shape == (rows, cols) and (w[k:] == 0).all() and (w[:k] == spm[:k]).all()
    x = rng.integers(-128, 128, (7, cols), dtype=np.int8)
    got = S.matmul_rows(x, w)
    for i in range(7):
        for j in range(cols):
            assert got[i, j] == sum(int(x[i, r]) * int(w[r, j]) for r in range(rows))
    acc = np.full((7, cols), (1 << 31) - 10, np.int32)
    got2 = S.matmul_acc(acc, x, w)
    for i, j in [(0, 0), (3, 5), (6, 2)]:
        assert got2[i, j] == w32(int(acc[i, j]) + int(got[i, j]))


def test_matmul_into_equals_the_returning_forms():
    """The in-place form and the returning forms built on it equal an int64 product, wrap-around included."""
    rng = np.random.default_rng(2)
    for rows, cols, n in [(4, 6, 7), (16, 16, 205), (8, 8, 1)]:
        w = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
        x = rng.integers(-128, 128, (n, cols), dtype=np.int8)
        acc = rng.integers(-(1 << 31), 1 << 31, (n, cols), dtype=np.int64).astype(np.int32)
        acc[0] = (1 << 31) - 3                  # wraps on a positive product
        acc[-1] = -(1 << 31) + 2                # and on a negative one
        prod = x[:, :rows].astype(np.int64) @ w.astype(np.int64)            # exact, independent
        want = ((acc.astype(np.int64) + prod + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
        got = acc.copy()
        S.matmul_into(got, x, w, True)
        assert np.array_equal(got, want) and np.array_equal(S.matmul_acc(acc, x, w), want)
        got = acc.copy()
        S.matmul_into(got, x, w.astype(np.float32), False)
        assert np.array_equal(got, prod) and np.array_equal(S.matmul_rows(x, w), prod)


# ---------------------------------------------------------------- VPU --------------------------
def _ref_bin(op, a, b):
    return {"vadd": a + b, "vsub": a - b, "vmul": a * b, "vmin": min(a, b), "vmax": max(a, b),
            "vshl": (a % (1 << 32)) << (b % 32), "vsra": a >> (b % 32)}[op]


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(VPU_BINARY), a=st.lists(I32, min_size=4, max_size=4),
       b=st.lists(I32, min_size=4, max_size=4), scalar=st.booleans(),
       dst=st.sampled_from([Space.SPM, Space.ACC]))
def test_vpu_binary(op, a, b, scalar, dst):
    arows = np.array([a], np.int32)
    bv = b[0] if scalar else np.array([b], np.int32)
    got = S.vpu_binary(op, arows, bv, dst)
    for j in range(4):
        r = w32(_ref_bin(op, a[j], b[0] if scalar else b[j]))
        assert got[0, j] == (sat8(r) if dst == Space.SPM else r)
    assert got.dtype == (np.int8 if dst == Space.SPM else np.int32)


def test_vpu_binary_int8_sources_widen():
    a = np.array([[100, -100, 127, -128]], np.int8)
    assert S.vpu_binary("vadd", a, a, Space.ACC).tolist() == [[200, -200, 254, -256]]
    assert S.vpu_binary("vadd", a, a, Space.SPM).tolist() == [[127, -128, 127, -128]]
    assert S.vpu_binary("vmul", a, 0xFFFFFFFF, Space.ACC).tolist() == [[-100, 100, -127, 128]]


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(VPU_UNARY), a=st.lists(I32, min_size=4, max_size=4),
       dst=st.sampled_from([Space.SPM, Space.ACC]))
def test_vpu_unary(op, a, dst):
    table = (np.arange(256) * 7 - 300).astype(np.int64)
    table = np.array([w32(int(v)) for v in table]).astype(np.int8)
    got = S.vpu_unary(op, np.array([a], np.int32), dst, lut_table=table)
    for j in range(4):
        r = {"vmov": a[j], "vrelu": max(a[j], 0), "vabs": w32(abs(a[j])), "vrsum": w32(sum(a)),
             "vrmax": max(a), "vrmin": min(a), "vlut": int(table[a[j] % 256])}[op]
        assert got[0, j] == (sat8(r) if dst == Space.SPM else r)


def test_lut_from_rows():
    rows = np.arange(-128, 128 + 32, dtype=np.int64).astype(np.int8).reshape(-1, 16)
    t = S.lut_from_rows(rows)
    assert t.shape == (256,) and t[0] == -128 and t[255] == 127


def _ref_requant(x, scale, shift, zp, lo, hi, rnd):
    p = x * scale
    if shift == 0:
        q = p
    elif rnd == Round.FLOOR:
        q = p // 2 ** shift
    elif rnd == Round.HALF_UP:
        q = (p + 2 ** (shift - 1)) // 2 ** shift
    else:
        q = round(Fraction(p, 2 ** shift))   # Python's round of a Fraction: ties to even
    return min(max(q + zp, lo), hi)


@settings(max_examples=300, deadline=None)
@given(x=I32, scale=st.integers(-(1 << 15), (1 << 15) - 1), shift=st.integers(0, 63),
       zp=st.integers(-128, 127), lo=st.integers(-128, 127), hi=st.integers(-128, 127),
       rnd=st.sampled_from(list(Round)))
def test_requantize(x, scale, shift, zp, lo, hi, rnd):
    got = S.requantize(np.array([[x]], np.int32), scale, shift, zp, lo, hi, rnd)
    assert got.dtype == np.int8
    assert int(got[0, 0]) == _ref_requant(x, scale, shift, zp, lo, hi, rnd)


def test_requantize_per_lane_scale_and_ties():
    x = np.array([[5, 7, -5, -7], [1, 2, 3, 4]], np.int32)
    sc = S.scale16(np.array([1, 1, 0x10001, 0xFFFF]))       # low 16 bits, signed: 1, 1, 1, -1
    assert sc.tolist() == [1, 1, 1, -1]
    got = S.requantize(x, sc, 1, 0, -128, 127, Round.HALF_EVEN)
    assert got.tolist() == [[2, 4, -2, 4], [0, 1, 2, -2]]


def test_link_payload_copies():
    rows = np.ones((2, 4), np.int8)
    p = S.link_payload(rows)
    rows[0, 0] = 5
    assert p[0, 0] == 1


def test_nest_slice_matches_expand():
    counts, strides, bases = [3, 4, 5], [[1, 2, 3], [10, 20, 30], [100, 0, -1]], [0, 5, 9]
    full = S.expand_nest(counts, strides, bases)
    for lo, hi in [(0, 60), (7, 8), (13, 41), (59, 60)]:
        assert (S.nest_slice(counts, strides, bases, lo, hi) == full[lo:hi]).all()


def test_matmul_extremes_exact():
    rows = 1024
    x = np.full((2, rows), -128, np.int8)
    w = np.full((rows, 3), -128, np.int8)
    assert (S.matmul_rows(x, w) == rows * 128 * 128).all()
