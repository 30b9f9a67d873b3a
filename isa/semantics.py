"""The data meaning of every instruction, as plain numpy functions.

One function per instruction or family. The simulator's handlers call these functions and the
RTL tests compare the Amaranth components against them, so the meaning of an instruction is
written once. Every function is pure: it takes arrays and integers and returns new arrays
(or, for the DMA store, a new DRAM image); nothing here knows about time.

Conventions: SPM rows are ``int8`` arrays of ``cols`` lanes, ACC rows ``int32`` arrays; DRAM is a
``uint8`` array. Arithmetic wraps modulo 2**32 unless a docstring says otherwise.

Decisions where docs/isa.md leaves room (each is repeated in its function's docstring):

* VPU results written to SPM saturate to int8 *after* the int32 operation (which wraps).
* ``vrsum`` sums all ``cols`` lanes with int32 wrap-around; ``vrmax``/``vrmin`` likewise over all lanes.
* ``vreq`` with a per-lane scale row uses the same ACC row for every one of its ``n`` rows
  (per-output-channel scales); the scale is the low 16 bits of each lane, signed.
  ``round_shift`` of a shift of 0 is the identity for every rounding mode.
  The clamp is ``min(max(y, lo), hi)``: if ``lo > hi`` every lane becomes ``hi``.
  ``zp`` is added to the int64 shifted value before the clamp (no wrap).
* A DMA store whose elements overlap in DRAM (e.g. ``rstride = 0``) writes them in row-major
  order: the last element written wins. The same holds for a load into SPM/ACC.
* ``dma`` into ACC moves 4-byte little-endian int32 elements; each element starts at its byte
  address, which need not be aligned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .table import LUT_ENTRIES, SPACE_BYTES, SPACE_DTYPE, Round, Space

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

INT8_MIN, INT8_MAX = -128, 127
_M32 = (1 << 32) - 1


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

def wrap32(x: ArrayLike) -> np.ndarray:
    """Wrap integers (any int dtype, or Python ints) to int32 two's complement."""
    a = np.asarray(x, dtype=np.int64)
    return (((a + (1 << 31)) & _M32) - (1 << 31)).astype(np.int32)


def wrap32_int(v: int) -> int:
    """Wrap a Python int to the int32 range."""
    v &= _M32
    return v - (1 << 32) if v >> 31 else v


def u32(v: int) -> int:
    """A Python int wrapped to 32 bits, read unsigned: the bit pattern a register holds."""
    return v & _M32


def saturate_int8(x: ArrayLike) -> np.ndarray:
    """Clamp to [-128, 127] and return int8."""
    return np.clip(np.asarray(x, dtype=np.int64), INT8_MIN, INT8_MAX).astype(np.int8)


def store_rows(x_int32: ArrayLike, space: int) -> np.ndarray:
    """A VPU result as written to ``space``: SPM saturates to int8, ACC keeps int32."""
    x = np.asarray(x_int32)
    return saturate_int8(x) if space == Space.SPM else x.astype(np.int32)


# --------------------------------------------------------------------------------------------
# Repeat registers
# --------------------------------------------------------------------------------------------

def expand_nest(counts: Sequence[int], strides: Sequence[ArrayLike], bases: ArrayLike) -> np.ndarray:
    """Addresses of every instance of a loop nest: an int64 array of shape ``(T, len(bases))``.

    ``counts[j]`` is the trip count of level j (level 0 outermost), ``strides[j][k]`` the stride
    level j adds to operand k, ``bases[k]`` the instance-0 address of operand k. Instances are
    enumerated with the innermost index fastest; ``T = prod(counts)`` (1 for an empty nest,
    0 when any count is 0). Instance ``(i_0..i_{D-1})`` uses ``bases[k] + sum_j i_j*strides[j][k]``.
    """
    return nest_slice(counts, strides, bases, 0, nest_count(counts))


def nest_slice(counts: Sequence[int], strides: Sequence[ArrayLike], bases: ArrayLike, lo: int,
               hi: int) -> np.ndarray:
    """Rows ``lo..hi-1`` of ``expand_nest(counts, strides, bases)`` without building the rest."""
    bases = np.asarray(bases, dtype=np.int64).reshape(-1)
    nk = bases.shape[0]
    idx = np.arange(lo, hi, dtype=np.int64)
    out = np.broadcast_to(bases, (idx.shape[0], nk)).copy()
    for c, s in zip(reversed(list(counts)), reversed(list(strides))):   # innermost first
        c = int(c)
        s = np.asarray(s, dtype=np.int64).reshape(-1)[:nk]
        if s.shape[0] < nk:
            s = np.concatenate([s, np.zeros(nk - s.shape[0], np.int64)])
        if c == 0:
            return out[:0]
        out += (idx % c)[:, None] * s[None, :]
        idx = idx // c
    return out


def nest_count(counts: Sequence[int]) -> int:
    t = 1
    for c in counts:
        t *= int(c)
    return t


# --------------------------------------------------------------------------------------------
# Scalar unit
# --------------------------------------------------------------------------------------------

def scalar_alu(op: str, a: int, b: int) -> int:
    """``add sub mul and or xor sll srl sra slt`` (and ``addi`` as ``add``) on 32-bit values.

    Inputs are any Python ints (taken modulo 2**32); the result is a signed int32 value.
    Shifts use ``b & 31``; ``srl`` is logical, ``sra`` arithmetic; ``slt`` compares signed.
    """
    a, b = wrap32_int(a), wrap32_int(b)
    sh = b & 31
    if op in ("add", "addi"):
        r = a + b
    elif op == "sub":
        r = a - b
    elif op == "mul":
        r = a * b
    elif op == "and":
        r = a & b
    elif op == "or":
        r = a | b
    elif op == "xor":
        r = a ^ b
    elif op == "sll":
        r = a << sh
    elif op == "srl":
        r = (a & _M32) >> sh
    elif op == "sra":
        r = a >> sh
    elif op == "slt":
        r = int(a < b)
    else:
        raise ValueError(f"not a scalar ALU op: {op!r}")
    return wrap32_int(r)


def branch_taken(op: str, a: int, b: int) -> bool:
    """``beq bne blt bge`` (signed 32-bit compare); ``jmp`` is always taken."""
    a, b = wrap32_int(a), wrap32_int(b)
    return {"beq": a == b, "bne": a != b, "blt": a < b, "bge": a >= b, "jmp": True}[op]


def scalar_load(row: ArrayLike, lane: int) -> int:
    """``sld``: a lane of an SPM row (int8, sign-extended) or ACC row (int32)."""
    return int(np.asarray(row)[lane])


def scalar_store_value(value: int, space: int) -> np.int8 | np.int32:
    """``sst``: the value a scalar register writes into a lane: int8 saturated (SPM) or int32 (ACC)."""
    v = wrap32_int(value)
    return np.int8(max(INT8_MIN, min(INT8_MAX, v))) if space == Space.SPM else np.int32(v)


# --------------------------------------------------------------------------------------------
# DMA
# --------------------------------------------------------------------------------------------

def dma_byte_addresses(dram: int, rows: int, length: int, rstride: int, estride: int, space: int) -> np.ndarray:
    """DRAM byte addresses touched, shape ``(rows, length, elem_bytes)``."""
    eb = SPACE_BYTES[space]
    r = np.arange(rows, dtype=np.int64)[:, None, None] * rstride
    e = np.arange(length, dtype=np.int64)[None, :, None] * estride
    b = np.arange(eb, dtype=np.int64)[None, None, :]
    return dram + r + e + b


def dma_footprint(dram: int, rows: int, length: int, rstride: int, estride: int, space: int) -> tuple[int, int]:
    """Bounding DRAM byte range ``[lo, hi)`` of a DMA instance (empty ``(dram, dram)`` if no element)."""
    if rows <= 0 or length <= 0:
        return dram, dram
    eb = SPACE_BYTES[space]
    ends = [dram + r * rstride + e * estride for r in (0, rows - 1) for e in (0, length - 1)]
    return min(ends), max(ends) + eb


def dma_gather(dram_bytes: np.ndarray, dram: int, rows: int, length: int, rstride: int, estride: int,
               space: int, cols: int) -> np.ndarray:
    """``dma.ld``: the ``rows`` SPM (int8) or ACC (int32, little-endian) rows a load writes.

    Element e of row r is read at ``dram + r*rstride + e*estride``; lanes ``length..cols-1`` are
    zero. The caller checks the addresses are inside DRAM.
    """
    eb = SPACE_BYTES[space]
    out = np.zeros((rows, cols), dtype=SPACE_DTYPE[space])
    if rows == 0 or length == 0:
        return out
    if estride == eb and rstride >= 0:          # contiguous rows: a strided view of DRAM
        view = _rows_view(dram_bytes, dram, rows, length * eb, rstride)
        out[:, :length] = np.ascontiguousarray(view).view(out.dtype)
        return out
    addr = dma_byte_addresses(dram, rows, length, rstride, estride, space)
    b = dram_bytes[addr]
    if eb == 1:
        out[:, :length] = b[..., 0].view(np.int8)
    else:
        out[:, :length] = np.ascontiguousarray(b).view(SPACE_DTYPE[space])[..., 0]
    return out


def _rows_view(dram_bytes: np.ndarray, dram: int, rows: int, nbytes: int, rstride: int) -> np.ndarray:
    """A (rows, nbytes) view of DRAM whose row r starts at ``dram + r*rstride`` (rstride >= 0)."""
    if rstride >= nbytes and dram + rows * rstride <= dram_bytes.shape[0]:
        return dram_bytes[dram:dram + rows * rstride].reshape(rows, rstride)[:, :nbytes]
    return np.lib.stride_tricks.as_strided(dram_bytes[dram:], (rows, nbytes), (rstride, 1))


def dma_scatter(dram_bytes: np.ndarray, rows_data: np.ndarray, dram: int, length: int, rstride: int,
                estride: int, space: int) -> np.ndarray:
    """``dma.st``: DRAM after storing lanes ``0..length-1`` of ``rows_data`` (a new array).

    Element e of row r goes to ``dram + r*rstride + e*estride`` (int8, or int32 little-endian for
    ACC rows). Overlapping elements are written in row-major order: the last one wins.
    """
    out = np.array(dram_bytes, dtype=np.uint8, copy=True)
    dma_scatter_into(out, rows_data, dram, length, rstride, estride, space)
    return out


def dma_scatter_into(dram_bytes: np.ndarray, rows_data: np.ndarray, dram: int, length: int, rstride: int,
                     estride: int, space: int) -> None:
    """In-place form of ``dma_scatter`` (the simulator uses it on its DRAM array)."""
    rows = rows_data.shape[0]
    if rows == 0 or length == 0:
        return
    eb = SPACE_BYTES[space]
    src = np.ascontiguousarray(rows_data[:, :length].astype(SPACE_DTYPE[space]))
    if eb == 1 and estride == 1 and (rows == 1 or rstride == length):
        dram_bytes[dram:dram + rows * length] = src.reshape(-1).view(np.uint8)
        return
    if estride == eb and rstride >= length * eb:   # contiguous rows that do not overlap
        view = _rows_view(dram_bytes, dram, rows, length * eb, rstride)
        view[...] = src.view(np.uint8).reshape(rows, length * eb)
        return
    addr = dma_byte_addresses(dram, rows, length, rstride, estride, space).reshape(-1)
    vals = src.view(np.uint8).reshape(-1)
    last, first_in_reverse = np.unique(addr[::-1], return_index=True)
    if last.shape[0] == addr.shape[0]:
        dram_bytes[addr] = vals
    else:                       # overlapping elements: the last one in row-major order wins
        dram_bytes[last] = vals[::-1][first_in_reverse]


# --------------------------------------------------------------------------------------------
# MXU
# --------------------------------------------------------------------------------------------

def load_weights(spm_rows: np.ndarray, k: int, rows: int, cols: int) -> np.ndarray:
    """``mxu.lw``: the ``rows x cols`` int8 weight tile from the first ``k`` SPM rows (rows k.. zero)."""
    src = np.asarray(spm_rows)
    if k == rows and src.dtype == np.int8 and src.shape[0] >= rows and src.shape[1] >= cols:
        return np.array(src[:rows, :cols])
    w = np.zeros((rows, cols), dtype=np.int8)
    w[:k] = src[:k, :cols]
    return w


def matmul_rows(x_rows: np.ndarray, w_tile: np.ndarray) -> np.ndarray:
    """``mxu.mm``: ``x_rows[:, 0..rows-1] @ w_tile`` as int32 (lanes rows.. of the inputs are ignored).

    Each dot product has at most 1024 int8 x int8 terms, so every partial sum's magnitude is at
    most 2**24 and a float32 product (fast BLAS) is exact (``matmul_into``).
    """
    out = np.empty((np.shape(x_rows)[0], w_tile.shape[1]), np.int32)
    matmul_into(out, x_rows, w_tile, False)
    return out


def matmul_acc(acc_rows: np.ndarray, x_rows: np.ndarray, w_tile: np.ndarray) -> np.ndarray:
    """``mxu.mma``: ``acc_rows + x_rows @ w_tile`` with int32 wrap-around (a new array)."""
    out = np.array(acc_rows, dtype=np.int32)
    matmul_into(out, x_rows, w_tile, True)
    return out


def matmul_into(acc_rows: np.ndarray, x_rows: np.ndarray, w_tile: np.ndarray, accumulate: bool) -> None:
    """``mxu.mma`` (``accumulate``) or ``mxu.mm`` written into ``acc_rows`` (an int32 array) in place:
    the one computation of both (``matmul_acc`` and ``matmul_rows`` return it as a new array; the
    simulator writes ACC rows in place). ``w_tile`` may be given as float32 already."""
    r = w_tile.shape[0]
    x = np.asarray(x_rows)
    if x.shape[1] != r:
        x = x[:, :r]
    p = np.dot(x.astype(np.float32), w_tile if w_tile.dtype == np.float32 else w_tile.astype(np.float32))
    if accumulate:
        acc_rows += p.astype(np.int32)           # int32 array arithmetic wraps modulo 2**32
    else:
        acc_rows[...] = p


# --------------------------------------------------------------------------------------------
# VPU
# --------------------------------------------------------------------------------------------

def binary_int32(op: str, a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """The int32 (wrapping) lane-wise result of a ``vbin`` op; ``b`` broadcasts if scalar."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if op == "vadd":
        r = a + b
    elif op == "vsub":
        r = a - b
    elif op == "vmul":
        r = a * b   # |a|,|b| < 2**31: the product fits int64; its low 32 bits are kept
    elif op == "vmin":
        r = np.minimum(a, b)
    elif op == "vmax":
        r = np.maximum(a, b)
    elif op == "vshl":
        r = (a & _M32) << (b & 31)
    elif op == "vsra":
        r = a >> (b & 31)
    else:
        raise ValueError(f"not a VPU binary op: {op!r}")
    return wrap32(np.broadcast_to(r, np.broadcast_shapes(a.shape, b.shape)))


def vpu_binary(op: str, a_rows: ArrayLike, b: int | np.ndarray, dst_space: int) -> np.ndarray:
    """``vadd vsub vmul vmin vmax vshl vsra``: rows written to ``dst_space``.

    ``a_rows`` (int8 or int32, widened to int32), ``b`` rows of the same shape or a scalar
    (register or immediate, broadcast). Wrapping int32 arithmetic, then saturation to int8 when
    ``dst_space`` is SPM.
    """
    if np.ndim(b) == 0:
        b = wrap32_int(int(b))
    return store_rows(binary_int32(op, a_rows, b), dst_space)


def unary_int32(op: str, a: ArrayLike, lut_table: ArrayLike | None = None) -> np.ndarray:
    """The int32 lane-wise result of a ``vun`` op on rows ``a`` (shape ``(n, cols)``)."""
    a = np.asarray(a, dtype=np.int64)
    if op == "vmov":
        r = a
    elif op == "vrelu":
        r = np.maximum(a, 0)
    elif op == "vabs":
        r = np.abs(a)           # |-2**31| = 2**31 wraps back to -2**31
    elif op in ("vrsum", "vrmax", "vrmin"):
        r = lane_reduce(op, a)
    elif op == "vlut":
        if lut_table is None:
            raise ValueError("vlut needs the lookup table")
        r = lut(a, lut_table)
    else:
        raise ValueError(f"not a VPU unary op: {op!r}")
    return wrap32(r)


def vpu_unary(op: str, a_rows: ArrayLike, dst_space: int, lut_table: ArrayLike | None = None) -> np.ndarray:
    """``vmov vrelu vabs vrsum vrmax vrmin vlut``: rows written to ``dst_space`` (SPM saturates)."""
    return store_rows(unary_int32(op, a_rows, lut_table), dst_space)


def lane_reduce(op: str, a_rows: ArrayLike) -> np.ndarray:
    """``vrsum``/``vrmax``/``vrmin``: each row's reduction over all its lanes, broadcast to every lane.

    The sum wraps modulo 2**32 (int32).
    """
    a = np.asarray(a_rows, dtype=np.int64)
    if op == "vrsum":
        r = wrap32(a.sum(axis=-1)).astype(np.int64)
    elif op == "vrmax":
        r = a.max(axis=-1)
    elif op == "vrmin":
        r = a.min(axis=-1)
    else:
        raise ValueError(f"not a lane reduction: {op!r}")
    return np.broadcast_to(r[..., None], a.shape).astype(np.int32)


def lut(a_rows: ArrayLike, table: ArrayLike) -> np.ndarray:
    """``vlut``: ``table[a & 0xff]`` (the table holds int8 entries, sign-extended)."""
    t = np.asarray(table, dtype=np.int8)
    return t[np.asarray(a_rows, dtype=np.int64) & 0xFF].astype(np.int32)


def lut_from_rows(spm_rows: ArrayLike) -> np.ndarray:
    """``vlutld``: the 256-entry int8 table from SPM rows, byte j of the rows in row-major order."""
    flat = np.asarray(spm_rows, dtype=np.int8).reshape(-1)
    return flat[:LUT_ENTRIES].copy()


def round_shift(x: ArrayLike, shift: int, rnd: int) -> np.ndarray:
    """Arithmetic right shift of int64 values with rounding ``Round.FLOOR/HALF_UP/HALF_EVEN``.

    A shift of 0 returns ``x`` unchanged for every mode.
    """
    x = np.asarray(x, dtype=np.int64)
    if shift == 0:
        return x
    q = x >> shift
    if rnd == Round.FLOOR:
        return q
    rem = x - (q << shift)               # 0 .. 2**shift - 1
    half = np.int64(1) << (shift - 1)
    if rnd == Round.HALF_UP:
        return q + (rem >= half)
    if rnd == Round.HALF_EVEN:
        up = (rem > half) | ((rem == half) & ((q & 1) == 1))
        return q + up
    raise ValueError(f"unknown rounding {rnd}")


def scale16(v: ArrayLike) -> np.ndarray:
    """Low 16 bits of a value (register or ACC lane), signed: the requantizer's scale."""
    v = np.asarray(v, dtype=np.int64) & 0xFFFF
    return np.where(v >= 1 << 15, v - (1 << 16), v)


def requantize(x_int32: ArrayLike, scale: ArrayLike, shift: int, zp: int, lo: int, hi: int,
               rnd: int) -> np.ndarray:
    """``vreq``: ``clamp(round_shift(x * scale, shift) + zp, lo, hi)`` as int8.

    ``x`` int32 rows; ``scale`` an int16 value or a per-lane int16 row (broadcast over rows),
    the product taken in int64. ``zp`` is added without wrap; the clamp is
    ``min(max(y, lo), hi)`` (so ``lo > hi`` gives ``hi`` everywhere).
    """
    x = np.asarray(x_int32, dtype=np.int64)
    p = x * np.asarray(scale, dtype=np.int64)
    y = round_shift(p, shift, rnd) + int(zp)
    return np.minimum(np.maximum(y, int(lo)), int(hi)).astype(np.int8)


# --------------------------------------------------------------------------------------------
# Links
# --------------------------------------------------------------------------------------------

def link_payload(rows: np.ndarray) -> np.ndarray:
    """``link.send``: the rows as sent (a copy); ``link.recv`` writes them unchanged."""
    return np.array(rows, copy=True)


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "np", "Sequence", "TYPE_CHECKING")]
