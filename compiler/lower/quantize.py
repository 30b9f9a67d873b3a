"""Post-training int8 quantization of a kernel schedule, and its integer reference.

Calibration runs the float schedule (``schedule.run_float``) on calibration inputs and
records each tensor's largest magnitude. Activations are symmetric int8 with one
scale per tensor (``s = max|x| / 127``, zero point 0); weights are symmetric int8
with one scale per output channel (``per_channel=True``, the default) or per tensor.
A kernel computes ``acc = A_q @ W_q + b_q`` in int32 (``b_q = round(b / (s_x s_w))``)
and then either

* requantizes to int8 with the VPU's ``vreq``: ``clamp(round_shift(acc * scale_n, shift), lo, hi)``
  where ``scale_n / 2**shift`` approximates ``s_x s_w[n] / s_y`` (``lo = 0`` fuses ReLU, a folded
  clip such as ReLU6 sets ``lo``/``hi`` to its bounds in output units), or
* keeps int32 (kernels whose result only leaves the chip: the model's outputs), which the
  host dequantizes with ``s_x s_w[n]``.

Elementwise kernels (``schedule.EwKernel``) scale each int8 source by an integer multiplier, sum
them (or take their lane-wise max/min) in int32 and requantize with a shift; a lookup-table kernel
maps each int8 input byte through a 256-entry int8 table built from the graph's float function
(``lut_table``), the VPU's ``vlut``.

``run_int`` evaluates the quantized schedule with numpy using ``isa.semantics.requantize``
(the instruction's own definition), so it is the bit-exact reference of the chip.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from isa import semantics as sem
from isa.table import Round

from compiler.lower.attention import attention_int, quantize_attention
from compiler.lower.bmm import BmmKernel, to_base
from compiler.lower.gather import GatherKernel, gather_values, quantize_gather
from compiler.lower.norms import norm_int, quantize_norm
from compiler.lower.schedule import (AttnKernel, ChipCompileError, EwKernel, NormKernel, Schedule, gather_base,
                                     kernel_inputs, mn_to_base, run_float)

#: kernels whose output is int8 even when only the host reads it
_INT8_OUT = (EwKernel, NormKernel, AttnKernel, BmmKernel, GatherKernel)

ROUND = Round.HALF_UP
#: Largest requantization scale (the VPU reads the low 16 bits, signed).
SCALE_MAX = 32767
MAX_SHIFT = 40


@dataclass
class QKernel:
    w_q: np.ndarray                 # (K, N) int8
    bias_q: np.ndarray | None       # (N,) int32
    out_int8: bool
    scale: np.ndarray               # (N,) int32 requantization scale (int8 out) or zeros
    shift: int
    lo: int
    s_w: np.ndarray                 # (N,) float weight scales
    hi: int = 127                   # clamp maximum (a folded clip's upper bound)


@dataclass
class QEw:
    """An elementwise kernel on integers: ``clamp(round_shift(op_i c_i x_i, shift), lo, 127)`` (``op`` sum,
    max or min), or for a lookup-table kernel ``table[x & 0xff]`` (``vlut``)."""
    coefs: np.ndarray               # int32 multipliers (|c| <= EW_COEF_MAX)
    shift: int
    lo: int
    out_int8: bool = True
    table: np.ndarray | None = None  # (256,) int8: entry j for the input byte j
    hi: int = 127                   # clamp maximum (a folded clip's upper bound)


#: Largest elementwise multiplier: sums of a few int8 x int15 products stay far inside int32.
EW_COEF_MAX = 1 << 14


@dataclass
class QBmm:
    """A batched matmul on integers: ``clamp(round_shift((A_q @ B_q) * scale, shift), lo, 127)``."""
    scale: np.ndarray               # (N,) int32, one value: mult * s_a * s_b / s_out
    shift: int
    lo: int
    s_w: np.ndarray                 # (N,) float: the "weight" scale of each column, mult * s_b
    out_int8: bool = True


@dataclass
class QSchedule:
    sched: Schedule
    qkernels: list[QKernel]
    scales: dict = field(default_factory=dict)      # tensor index -> float scale (int8 tensors)
    int32: set = field(default_factory=set)         # tensor indices kept as int32

    def dtype(self, t: int) -> str:
        return "int32" if t in self.int32 else "int8"

    def elem_bytes(self, t: int) -> int:
        return np.dtype(self.dtype(t)).itemsize


def quantize_array(x, scale: float) -> np.ndarray:
    """Host-side float -> int8 (round half to even, clamp to [-127, 127])."""
    return np.clip(np.rint(np.asarray(x, np.float64) / scale), -127, 127).astype(np.int8)


def _scale_of(amax: float) -> float:
    return float(amax) / 127.0 if amax > 0 else 1.0


def requant_params(mult: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer scales and one shift with ``scale / 2**shift ~= mult`` (per channel)."""
    top = float(np.max(mult)) if mult.size else 0.0
    if top <= 0:
        return np.zeros(mult.shape, np.int32), 0
    shift = int(np.floor(np.log2(SCALE_MAX / top)))
    shift = max(0, min(MAX_SHIFT, shift))
    scale = np.rint(mult * 2.0 ** shift)
    if scale.max() > SCALE_MAX:
        raise ChipCompileError(f"requantization multiplier {top:g} is too large for the VPU's int16 scale")
    return scale.astype(np.int32), shift


def lut_table(k: EwKernel, s_in: float, s_out: float) -> np.ndarray:
    """The 256-entry int8 table of a lookup-table kernel: entry j = ``quantize(fn(int8(j) * s_in), s_out)``
    (``fn`` in the graph's own float semantics; non-finite results clamp)."""
    x = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.float32) * np.float32(s_in)
    with np.errstate(all="ignore"):
        y = np.asarray(k.fn(x), np.float64)
    y = np.nan_to_num(y, nan=0.0, posinf=127.0 * s_out, neginf=-127.0 * s_out)
    return quantize_array(y, s_out)


def quantize_ew(q: "QSchedule", k: EwKernel, lo: int) -> QEw:
    """An elementwise kernel's integer multipliers and shift (or lookup table) for the scales ``q`` holds."""
    if k.op == "lut":
        return QEw(np.ones(1, np.int32), 0, -128, table=lut_table(k, q.scales[k.src], q.scales[k.out]))
    mult = np.array([c * q.scales[t] / q.scales[k.out] for (t, _), c in zip(k.srcs, k.coefs)])
    top = float(np.max(np.abs(mult)))
    shift = max(0, min(MAX_SHIFT, int(np.floor(np.log2(EW_COEF_MAX / top))))) if top > 0 else 0
    lo, hi = _clamp_bounds(k, q.scales[k.out], lo)
    return QEw(np.rint(mult * 2.0 ** shift).astype(np.int32), shift, lo, hi=hi)


def _clamp_bounds(k, s_out: float, lo: int) -> tuple[int, int]:
    """The requantizer's (lo, hi) for a kernel: a folded clip's bounds in output units, rounded."""
    if k.clamp is None:
        return lo, 127
    lo2, hi = (int(np.clip(np.rint(b / s_out), -128, 127)) if np.isfinite(b) else d
               for b, d in zip(k.clamp, (-128, 127)))
    return max(lo, lo2), hi


def quantize_gemm(q: "QSchedule", k, w_q: np.ndarray, s_w: np.ndarray, lo: int) -> QKernel:
    """A GEMM kernel's int32 bias and requantization (``requant_params``) for the scales ``q`` holds;
    an int32 result (a tensor in ``q.int32``) is not requantized."""
    s_x = q.scales[k.src]
    b_q = None
    if k.bias is not None:
        info = np.iinfo(np.int32)
        b_q = np.clip(np.rint(k.bias / (s_x * s_w)), info.min, info.max).astype(np.int32)
    out8 = k.out not in q.int32
    hi = 127
    if out8:
        scale, shift = requant_params(s_x * s_w / q.scales[k.out])
        lo, hi = _clamp_bounds(k, q.scales[k.out], lo)
    else:
        scale, shift = np.zeros(k.N, np.int32), 0
    return QKernel(w_q, b_q, out8, scale, shift, lo, s_w, hi)


def quantize(s: Schedule, calibration: list[dict], per_channel: bool = True) -> QSchedule:
    """Scales from the calibration feeds, then the int8 weights and int32 biases of every kernel."""
    if not calibration:
        raise ChipCompileError("quantization needs at least one calibration input")
    amax: dict[int, float] = {}
    for feeds in calibration:
        vals: dict = {}
        run_float(s, feeds, vals)
        for t, v in vals.items():
            amax[t] = max(amax.get(t, 0.0), float(np.max(np.abs(v))) if v.size else 0.0)
    consumed = {t for k in s.kernels for t in kernel_inputs(k)}
    q = QSchedule(s, [])
    for ti, t in enumerate(s.tensors):
        if t.kind == "kernel" and ti not in consumed and not isinstance(s.kernels[t.producer], _INT8_OUT) \
                and getattr(s.kernels[t.producer], "clamp", None) is None:
            q.int32.add(ti)
        else:
            q.scales[ti] = _scale_of(amax.get(ti, 0.0))
    for k in s.kernels:                           # a lookup's output has its table's scale
        if isinstance(k, GatherKernel):           # (compiler.lower.gather), its index input is raw int32
            q.int32.add(k.src)
            q.scales[k.src] = 1.0
    for k in s.kernels:
        lo = 0 if k.relu else -128
        if isinstance(k, GatherKernel):
            q.qkernels.append(quantize_gather(k))
            q.scales[k.out] = q.qkernels[-1].scale
            continue
        if isinstance(k, AttnKernel):              # compiler.lower.attention: the output at v's scale
            q.scales[k.out] = q.scales[k.srcs[2][0]]
            q.qkernels.append(quantize_attention(k, q.scales[k.srcs[0][0]], q.scales[k.srcs[1][0]]))
            continue
        if isinstance(k, NormKernel):              # compiler.lower.norms: int8 in, int8 out
            q.qkernels.append(quantize_norm(k, q.scales[k.src], q.scales[k.out]))
            continue
        if isinstance(k, EwKernel):
            q.qkernels.append(quantize_ew(q, k, lo))
            continue
        if isinstance(k, BmmKernel):
            s_w = np.full(k.N, k.mult * q.scales[k.b])
            scale, shift = requant_params(np.abs(q.scales[k.a] * s_w / q.scales[k.out]))
            if k.mult < 0:
                scale = -scale
            q.qkernels.append(QBmm(scale, shift, lo, s_w))
            continue
        wmax = np.max(np.abs(k.weight), axis=0) if per_channel else \
            np.full(k.N, np.max(np.abs(k.weight)) if k.weight.size else 0.0)
        s_w = np.where(wmax > 0, wmax / 127.0, 1.0)
        w_q = np.clip(np.rint(k.weight / s_w), -127, 127).astype(np.int8)
        q.qkernels.append(quantize_gemm(q, k, w_q, s_w, lo))
    return q


def kernel_int(q: QSchedule, i: int, x_q: np.ndarray) -> np.ndarray:
    """One kernel on integers: (M, N) int8 or int32, exactly what the chip computes."""
    k, qk = q.sched.kernels[i], q.qkernels[i]
    if isinstance(k, EwKernel):
        raise TypeError("kernel_int is for GEMM kernels; see ew_int")
    A = gather_base(x_q, q.sched.tensors[k.src], k.gather).astype(np.int64)
    acc = A @ qk.w_q.astype(np.int64)
    if qk.bias_q is not None:
        acc = acc + qk.bias_q.astype(np.int64)
    acc = sem.wrap32(acc)
    if qk.out_int8:
        return sem.requantize(acc, qk.scale[None, :], qk.shift, 0, qk.lo, qk.hi, ROUND)
    return np.maximum(acc, 0) if k.relu else acc


def bmm_int(q: QSchedule, i: int, vals: dict, k_limit: int | None = None) -> np.ndarray:
    """One batched matmul on integers, (S, M, N) int8: each slice is a GEMM the chip runs with the
    slice of ``b`` as its weights; ``k_limit``: the sum over the first ``k_limit`` terms only (K tiles
    bounded by a key count)."""
    k, qk = q.sched.kernels[i], q.qkernels[i]
    t = q.sched.tensors
    av = gather_base(vals[k.a], t[k.a], k.ga).astype(np.int64)
    if k_limit is not None:
        av[:, :, k_limit:] = 0
    bv = gather_base(vals[k.b], t[k.b], k.gb).astype(np.int64)
    acc = sem.wrap32(np.matmul(av, bv))
    return sem.requantize(acc, qk.scale[None, None, :], qk.shift, 0, qk.lo, 127, ROUND)


def ew_int(q: QSchedule, i: int, vals: dict) -> np.ndarray:
    """One elementwise kernel on integers (output tensor's base shape), as the VPU computes it."""
    k, qk = q.sched.kernels[i], q.qkernels[i]
    if qk.table is not None:
        (t, idx), = k.srcs
        return sem.lut(gather_base(vals[t], q.sched.tensors[t], idx), qk.table).astype(np.int8)
    acc = None
    for (t, idx), c in zip(k.srcs, qk.coefs):
        term = sem.wrap32(gather_base(vals[t], q.sched.tensors[t], idx).astype(np.int64) * int(c)).astype(np.int64)
        if acc is None:
            acc = term
        elif k.op == "sum":
            acc = sem.wrap32(acc + term).astype(np.int64)
        else:
            acc = np.maximum(acc, term) if k.op == "max" else np.minimum(acc, term)
    return sem.requantize(acc, 1, qk.shift, 0, qk.lo, qk.hi, ROUND)


def input_ints(q: QSchedule, feeds: dict) -> dict[int, np.ndarray]:
    out = {}
    for name, ti in q.sched.inputs.items():
        t = q.sched.tensors[ti]
        if t.value is None and name not in feeds:
            raise ChipCompileError(f"no value for input {name!r}")
        x = np.asarray(feeds[name] if t.value is None else t.value)
        if x.shape != t.shape:
            raise ChipCompileError(f"input {name!r}: shape {x.shape}, the model was compiled for {t.shape}")
        out[ti] = input_int(q, name, x)
    return out


def input_int(q: QSchedule, name: str, x) -> np.ndarray:
    """Values of input ``name`` (any part of it) as the host writes them: int32 indices, or int8 at its scale."""
    ti = q.sched.inputs[name]
    return _index_array(name, np.asarray(x)) if ti in q.int32 else quantize_array(x, q.scales[ti])


def _index_array(name: str, x: np.ndarray) -> np.ndarray:
    """An index input (of a table lookup) as the int32 the host writes: integers only, no quantization."""
    if x.size and (x.dtype.kind not in "iuf" or not np.array_equal(x, np.rint(x))
                   or x.min() < np.iinfo(np.int32).min or x.max() > np.iinfo(np.int32).max):
        raise ChipCompileError(f"input {name!r} is an index: it takes int32 values")
    return x.astype(np.int32)


def run_int(q: QSchedule, feeds: dict, bound=None) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """The quantized reference: float outputs (dequantized) and every tensor's integer value. ``bound``
    (``compiler.lower.keybound.Bound``): the kernels bounded by a key count compute only their first
    ``bound.limit`` keys, as the chip does (the columns after: ``bound.fill``)."""
    s = q.sched
    vals = input_ints(q, feeds)
    kinds = bound.kb.kernels if bound is not None else {}
    for i, k in enumerate(s.kernels):
        if isinstance(k, GatherKernel):
            idx = gather_base(vals[k.src], s.tensors[k.src], k.pos)
            vals[k.out] = gather_values(q.qkernels[i].table_q, k, idx, s.tensors[k.out].shape)
        elif isinstance(k, BmmKernel):
            y = bmm_int(q, i, vals, bound.k_limit if kinds.get(i) == "bmm_k" else None)
            if kinds.get(i) == "bmm":            # output columns run over the keys
                y = np.array(y)
                y[:, :, bound.limit:] = bound.fill(y[:, :, bound.limit:].shape)
            vals[k.out] = to_base(y, s.tensors[k.out].shape, k)
        elif isinstance(k, AttnKernel):
            vals[k.out] = attention_int(s, k, q.qkernels[i], vals)
        elif isinstance(k, NormKernel):
            vals[k.out] = norm_int(s, k, q.qkernels[i], vals, bound if kinds.get(i) == "softmax" else None)
        elif isinstance(k, EwKernel):
            vals[k.out] = ew_int(q, i, vals)
        else:
            vals[k.out] = mn_to_base(kernel_int(q, i, vals[k.src]), s.tensors[k.out], k)
    return dequantize_outputs(q, vals), vals


def tensor_scale(q: QSchedule, t: int) -> np.ndarray | float:
    """The float value of one integer unit of tensor ``t`` (per element for int32 kernel outputs)."""
    if t not in q.int32:
        return q.scales[t]
    s = q.sched
    ki = s.tensors[t].producer
    k = s.kernels[ki]
    per_n = q.scales[k.src] * q.qkernels[ki].s_w
    return mn_to_base(np.broadcast_to(per_n, (k.M, k.N)), s.tensors[t], k)


def dequantize_outputs(q: QSchedule, vals: dict) -> list[np.ndarray]:
    s = q.sched
    outs = []
    for t, idx in s.outputs:
        real = vals[t].astype(np.float64) * tensor_scale(q, t)
        outs.append(gather_base(real, s.tensors[t], idx).astype(np.float32))
    return outs
