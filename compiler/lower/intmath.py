"""Integer kernels of the transformer block (I-BERT style), as plain numpy: the chip's reference.

Every function here is the *meaning* of a VPU instruction sequence that ``compiler.lower.transformer``
emits, written independently of the emitter: integer numpy on int64 arrays with floor shifts,
each intermediate checked to fit int32 (the VPU wraps at 32 bits; a value that would wrap is a
design error, reported by ``_fit``). The chip's result must equal these functions bit for bit.

The ISA has no divide, no exponent and no count-leading-zeros, so:

* ``i_exp``: ``exp(x)`` for ``x <= 0`` given as ``d * scale``: ``u = -x / ln2`` in fixed point
  with ``F`` fraction bits (one multiply by ``nc`` and a shift), ``z = u >> F`` (the ln2
  quotient), ``f`` the remainder; ``2^-f`` by I-BERT's second-order polynomial
  ``0.3585 (p + 1.353)^2 + 0.344`` (``p = -f ln2``), then ``>> z``. Result in units ``2^-E``.
* ``ilog2``: ``floor(log2 v)`` by a 5-step binary search (``vsra``, ``vmin``, ``vmul``).
* ``recip``: ``1 / v`` by Newton's iteration ``y <- y (2 - a y)`` on the mantissa
  ``a = v / 2^e`` in ``[1, 2)`` (Q14), from a linear first guess, 3 steps.
* ``rsqrt``: ``1 / sqrt(v)`` by Newton's iteration ``y <- y (3 - a y^2) / 2`` on an even-exponent
  mantissa ``a`` in ``[1, 4)`` (Q12), from a linear first guess, 3 steps. (I-BERT's integer square
  root iterates ``x <- (x + v / x) / 2``, which needs a divide; the inverse root needs none.)
* ``i_gelu``: I-BERT's ``x/2 (1 + erf(x / sqrt 2))`` with ``erf ~ sgn(x) (a (min(|x|, -b) + b)^2 + 1)``,
  written ``|q| T + q q1`` so that no sign function is needed.
* ``layernorm``: mean by lane sums, centred values with 4 extra fraction bits, variance,
  ``rsqrt``, then ``gamma``/``beta`` and a requantization (``d`` a power of two: the block's).
* ``norm_rows``: LayerNorm or RMSNorm over any ``d`` (the ordinary pipeline's ``compiler.lower.norms``):
  the mean by a multiply, ``rsqrt`` of the sum of squares (``sqrt(d)`` folded into gamma).
* ``softmax_rows``: ``i_exp`` of ``x - max``, ``recip`` of the (shifted) sum, a requantization; a
  constant mask is an int32 row added to ``x`` first (``mask_add``: ``NEG`` at masked positions, whose
  ``i_exp`` is exactly 0, so their probability is exactly 0).
* ``attention_head``: one head's fused attention with an online softmax over key blocks of
  ``blk`` keys (FlashAttention-2: running max ``m``, running sum ``l``, accumulator ``O``
  rescaled by ``alpha = exp(m_old - m_new)``; probabilities int8 for the MXU), then ``O / l``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from isa.ints import cdiv

I32 = 1 << 31

# --- i-exp polynomial (I-BERT: exp(p) ~ 0.3585 (p + 1.353)^2 + 0.344 on (-ln2, 0]) -------------
EXP_F = 10                     #: fraction bits of u = -x / ln2
EXP_E = 15                     #: result units 2^-E (exp(0) ~ 2^E)
EXP_PS = 16                    #: shift after the polynomial's multiply
EXP_B = round(1.353 / math.log(2) * (1 << EXP_F))                        # 1999
EXP_A = round(0.3585 * math.log(2) ** 2 * (1 << (EXP_E - 2 * EXP_F + EXP_PS)))   # 353
EXP_C = round(0.344 * (1 << EXP_E))                                      # 11272
EXP_SC = 15                    #: shift after the multiply by the scale constant
ALPHA_BITS = 10                #: the rescale factor alpha in units 2^-10 (exp >> (E - 10))
NEG = -(1 << 30)               #: "minus infinity": masked scores, initial running max

RECIP_Q = 14
RECIP_Y0 = round(1.457 * (1 << RECIP_Q))
RSQRT_QA, RSQRT_QY = 12, 14
RSQRT_Y0 = round(1.103 * (1 << RSQRT_QY))
RSQRT_K = 21845                #: (A * K) >> 15 = 2A/3 (the slope 1/6 of the guess, A in Q12)
NEWTON_STEPS = 3
LN_XB = 4                      #: extra fraction bits of the centred LayerNorm input
LN_R = 12                      #: fraction bits of the normalised value


class IntRangeError(ArithmeticError):
    """A reference intermediate does not fit int32: the chip would wrap."""


def _fit(v, what: str):
    v = np.asarray(v, np.int64)
    if v.size and (v.max() >= I32 or v.min() < -I32):
        raise IntRangeError(f"{what}: value {int(np.abs(v).max())} does not fit int32")
    return v


# --- exp ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExpParams:
    """``exp(d * scale)`` for integer ``d <= 0``: ``u = (max(d, -lim) * nc) >> EXP_SC``."""
    nc: int       # negative: -(scale / ln2) * 2^(F + SC)
    lim: int      # |d| clamp: beyond it exp < 2^-31 (z >= 31)

    @classmethod
    def for_scale(cls, scale: float) -> "ExpParams":
        nc = -round(scale / math.log(2) * (1 << (EXP_F + EXP_SC)))
        if nc > -16:
            raise ValueError(f"i-exp: score scale {scale:g} too small for {EXP_F + EXP_SC} fraction bits")
        if -nc >= 1 << 30:
            raise ValueError(f"i-exp: score scale {scale:g} too large")
        lim = cdiv(31 << (EXP_F + EXP_SC), -nc)
        return cls(nc, lim)


def i_exp(d, p: ExpParams) -> np.ndarray:
    """``exp(d * scale) * 2^E`` (floor arithmetic) for ``d <= 0``; ``0`` once ``z >= 31``."""
    d = np.maximum(np.asarray(d, np.int64), -p.lim)
    u = _fit(d * p.nc, "i_exp u") >> EXP_SC
    z = u >> EXP_F
    f = u - (z << EXP_F)
    g = f - EXP_B
    poly = (_fit(g * g * EXP_A, "i_exp poly") >> EXP_PS) + EXP_C
    return poly >> np.minimum(z, 31)


# --- log2, reciprocal, inverse square root -----------------------------------------------------
def ilog2(v) -> np.ndarray:
    """``floor(log2 v)`` for ``1 <= v < 2^31``."""
    v = np.asarray(v, np.int64)
    if v.size and (v.min() < 1 or v.max() >= I32):
        raise IntRangeError("ilog2: argument outside 1 .. 2^31-1")
    return np.floor(np.log2(v.astype(np.float64))).astype(np.int64)


def recip(v) -> tuple[np.ndarray, np.ndarray]:
    """``(y, e)`` with ``1 / v ~ y * 2^-(14 + e)`` for ``1 <= v < 2^17``; ``y`` in ``(2^13, 2^14]``."""
    v = np.asarray(v, np.int64)
    e = ilog2(v)
    a = _fit(v << RECIP_Q, "recip mantissa") >> e              # [2^14, 2^15)
    y = RECIP_Y0 - (a >> 1)
    for _ in range(NEWTON_STEPS):
        u = _fit(a * y, "recip a*y") >> RECIP_Q
        w = (2 << RECIP_Q) - u
        y = _fit(y * w, "recip y*w") >> RECIP_Q
    return y, e


def rsqrt(v) -> tuple[np.ndarray, np.ndarray]:
    """``(y, h)`` with ``1 / sqrt(v) ~ y * 2^-(14 + h)`` for ``1 <= v < 2^31``."""
    v = np.asarray(v, np.int64)
    h = ilog2(v) >> 1
    e2 = h << 1
    sl = np.maximum(RSQRT_QA - e2, 0)
    sr = np.maximum(e2 - RSQRT_QA, 0)
    a = _fit(v << sl, "rsqrt mantissa") >> sr                  # [2^12, 2^14)
    y = RSQRT_Y0 - (_fit(a * RSQRT_K, "rsqrt guess") >> 15)
    for _ in range(NEWTON_STEPS):
        t = _fit(y * y, "rsqrt y*y") >> RSQRT_QY
        u = _fit(a * t, "rsqrt a*t") >> RSQRT_QA
        w = (3 << RSQRT_QY) - u
        y = _fit(y * w, "rsqrt y*w") >> (RSQRT_QY + 1)
    return y, h


# --- requantization (the VPU's vreq, rounding half up) -----------------------------------------
def requant(x, scale, shift: int, lo: int = -128, hi: int = 127) -> np.ndarray:
    p = np.asarray(x, np.int64) * np.asarray(scale, np.int64)
    if shift:
        p = (p + (1 << (shift - 1))) >> shift
    return np.clip(p, lo, hi)


def mult_shift(ratio, max_mult: int = 32767, max_shift: int = 63) -> tuple[np.ndarray, int]:
    """Integer multipliers ``m`` (``|m| <= max_mult``) and one shift with ``m / 2^shift ~ ratio``."""
    r = np.atleast_1d(np.asarray(ratio, np.float64))
    top = float(np.abs(r).max())
    if top == 0:
        return np.zeros(r.shape, np.int64), 0
    shift = int(math.floor(math.log2(max_mult / top)))
    shift = max(0, min(shift, max_shift))
    m = np.round(r * (1 << shift)).astype(np.int64)
    if np.abs(m).max() > max_mult:
        raise ValueError(f"requantization ratio {top:g} needs a multiplier above {max_mult}")
    return m, shift


# --- LayerNorm -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LNParams:
    eps_q: int          # eps in units of var(2^LN_XB x)
    g: np.ndarray       # per-channel gamma / s_out * 2^gs
    b: np.ndarray       # per-channel beta / s_out * 2^(LN_R + gs)
    gs: int

    @classmethod
    def make(cls, gamma, beta, eps: float, s_in: float, s_out: float) -> "LNParams":
        g, b, gs = affine_consts(gamma, beta, s_out, LN_R)
        eps_q = max(1, round(eps * (1 << (2 * LN_XB)) / s_in ** 2))
        return cls(int(eps_q), g, b, gs)


def affine_consts(gamma, beta, s_out: float, r: int, max_shift: int = 63) -> tuple[np.ndarray, np.ndarray, int]:
    """A norm's gamma and beta as integers for a value with ``r`` fraction bits: ``g = gamma / s_out * 2^gs``
    (``|g| <= 2^14``), ``b = beta / s_out * 2^(r + gs)`` (``|b| < 2^29``), and the shift ``gs``."""
    gamma, beta = np.asarray(gamma, np.float64), np.asarray(beta, np.float64)
    gmax = max(float(np.abs(gamma).max()) / s_out, 1e-9)
    gs = min(int(math.floor(math.log2((1 << 14) / gmax))), max_shift - r)
    bmax = float(np.abs(beta).max()) / s_out
    while gs > 0 and bmax * (1 << (r + gs)) >= (1 << 29):
        gs -= 1
    if gs < 0:
        raise ValueError("LayerNorm: gamma / output scale too large for the integer kernel")
    return (np.round(gamma / s_out * (1 << gs)).astype(np.int64),
            np.round(beta / s_out * (1 << (r + gs))).astype(np.int64), gs)


def layernorm(x, p: LNParams) -> np.ndarray:
    """int8 rows ``(n, d)`` (d a power of two) -> int8 rows at the output scale."""
    x = np.asarray(x, np.int64)
    d = x.shape[-1]
    lg = int(math.log2(d))
    s = x.sum(-1, keepdims=True)
    xc = (x << LN_XB) - (s >> (lg - LN_XB))                     # 16 (x - mean), floor mean
    var = _fit((xc * xc).sum(-1, keepdims=True), "layernorm sum of squares") >> lg
    y, h = rsqrt(var + p.eps_q)
    xn = _fit(xc * y, "layernorm xc*y") >> (h + (RSQRT_QY - LN_R))
    z = _fit(_fit(xn * p.g, "layernorm gamma") + p.b, "layernorm beta")
    return requant(z, 1, LN_R + p.gs)


# --- LayerNorm / RMSNorm over any feature count -------------------------------------------------
NORM_R = 14                    #: fraction bits of the normalised value (of x / sqrt(sum of squares))
MEAN_SH = 19                   #: mean = (sum * md) >> MEAN_SH, md = round(2^(xb + MEAN_SH) / d)


@dataclass(frozen=True)
class NormParams:
    """A LayerNorm (``center``) or RMSNorm over ``d`` features for any ``d`` (no power of two needed).

    ``xs = x << xb`` (``xb`` extra fraction bits, as many as keep the sum of squares below 2^30),
    centred by the mean ``(sum x * md) >> MEAN_SH``; ``ss = sum xs^2``; ``rsqrt(ss + eps_q)`` is
    ``1 / (sqrt(d) * std)``, so ``sqrt(d)`` is folded into ``g`` (no divide by ``d`` anywhere)."""
    center: bool
    d: int
    xb: int
    md: int
    eps_q: int          # eps in units of ss: eps * d * 2^(2 xb) / s_in^2
    g: np.ndarray       # per-feature gamma sqrt(d) / s_out * 2^gs
    b: np.ndarray       # per-feature beta / s_out * 2^(NORM_R + gs)
    gs: int

    @classmethod
    def make(cls, center: bool, gamma, beta, eps: float, s_in: float, s_out: float) -> "NormParams":
        gamma = np.asarray(gamma, np.float64)
        d = gamma.shape[-1]
        xb = min(LN_XB, (16 - int(math.ceil(math.log2(d)))) // 2)
        if xb < 0:
            raise ValueError(f"norm: {d} features are too many for the integer kernel (at most 65536)")
        eps_q = max(1, round(eps * d * (1 << (2 * xb)) / s_in ** 2))
        if eps_q >= 1 << 30:
            raise ValueError(f"norm: eps {eps:g} is too large for the input scale {s_in:g}")
        g, b, gs = affine_consts(gamma * math.sqrt(d), beta, s_out, NORM_R)
        return cls(center, d, xb, round((1 << (xb + MEAN_SH)) / d), int(eps_q), g, b, gs)


def norm_rows(x, p: NormParams) -> np.ndarray:
    """int8 rows ``(n, d)`` -> int8 rows at the output scale: LayerNorm or RMSNorm, then gamma and beta."""
    x = np.asarray(x, np.int64)
    xs = x << p.xb
    if p.center:
        s = x.sum(-1, keepdims=True)
        xs = xs - (_fit(s * p.md, "norm mean") >> MEAN_SH)
    ss = _fit(_fit(xs * xs, "norm square").sum(-1, keepdims=True) + p.eps_q, "norm sum of squares")
    y, h = rsqrt(ss)
    xn = _fit(xs * y, "norm xs*y") >> (h + RSQRT_QY - NORM_R)
    z = _fit(_fit(xn * p.g, "norm gamma") + p.b, "norm beta")
    return requant(z, 1, NORM_R + p.gs)


# --- softmax over any feature count ---------------------------------------------------------------
@dataclass(frozen=True)
class SoftmaxParams:
    """``p = i_exp(x - max x)``, ``l = sum p >> ls`` (below 2^17, ``recip``'s range), ``t = p recip(l)``
    (``~ softmax * 2^(14 + ls)``), out = ``vreq(t * mult, shift)`` clamped to [0, 127]."""
    ep: ExpParams
    ls: int
    lo_e: int          # floor(log2) of the smallest l (exp(0) >> ls): recip's search starts there
    mult: int
    shift: int

    @classmethod
    def make(cls, d: int, s_in: float, s_out: float) -> "SoftmaxParams":
        ep = ExpParams.for_scale(s_in)
        top = int(i_exp(np.zeros(1, np.int64), ep)[0])              # exp(0) in units 2^-E
        ls = max(0, (d * top).bit_length() - 17)
        m, sh = mult_shift(1.0 / (s_out * (1 << (RECIP_Q + ls))), max_shift=63)
        return cls(ep, ls, int(math.floor(math.log2(top >> ls))), int(m[0]), sh)


#: largest additive mask value (units of the input scale): ``x + add - max`` stays inside int32
MASK_MAX = 1 << 29


def mask_add(mask, s_in: float) -> np.ndarray:
    """A float additive mask (``-inf`` or anything at or below ``NEG * s_in``: masked) as int32 in units of
    the softmax input's scale ``s_in``: ``round(mask / s_in)`` clamped to ``[NEG, MASK_MAX]``."""
    m = np.asarray(mask, np.float64) / s_in
    m = np.where(np.isneginf(m), NEG, np.clip(np.nan_to_num(m, posinf=MASK_MAX), NEG, MASK_MAX))
    return np.rint(m).astype(np.int64)


def softmax_rows(x, p: SoftmaxParams, add=None) -> np.ndarray:
    """int8 rows ``(n, d)`` -> int8 probabilities at the output scale; ``add`` (``(n, d)`` int32 from
    ``mask_add``, or None) is added to ``x`` first (``NEG``: a masked position, probability exactly 0)."""
    x = np.asarray(x, np.int64)
    if add is not None:
        x = x + np.asarray(add, np.int64)
    e = i_exp(x - x.max(-1, keepdims=True), p.ep)
    y, k = recip(e.sum(-1, keepdims=True) >> p.ls)
    t = _fit(e * y, "softmax p*y") >> k
    return requant(t, p.mult, p.shift, 0, 127)


# --- GELU ----------------------------------------------------------------------------------------
ERF_A, ERF_B = -0.2888, -1.769


@dataclass(frozen=True)
class GeluParams:
    """``q = clamp(acc >> sh, -hc, hc)`` at scale ``S = s_acc 2^sh``; GELU ``|q| T + q q1`` at ``s_out``."""
    sh: int
    hc: int
    qb: int
    qc: int
    q1: int
    s_out: float

    @classmethod
    def make(cls, s_acc: float, amax: float, bits: int = 9) -> "GeluParams":
        sh = max(0, int(math.ceil(math.log2(max(amax, 1.0) / (1 << bits)))))
        while True:
            s = s_acc * (1 << sh) / math.sqrt(2)              # erf's input scale
            qb = math.floor(ERF_B / s)
            qc = math.floor(1 / (ERF_A * s * s))
            s_l = ERF_A * s * s
            q1 = math.floor(1 / s_l)
            hc = 2 << bits
            worst = hc * (qb * qb + abs(qc)) + hc * abs(q1)
            if worst < (1 << 30):
                return cls(sh, hc, qb, qc, q1, s_acc * (1 << sh) * s_l / 2)
            sh += 1


def i_gelu(acc, p: GeluParams) -> np.ndarray:
    q = np.clip(np.asarray(acc, np.int64) >> p.sh, -p.hc, p.hc)
    a = np.abs(q)
    t = np.minimum(a, -p.qb) + p.qb
    t = _fit(t * t, "gelu t^2") + p.qc
    return _fit(_fit(a * t, "gelu |q| T") + _fit(q * p.q1, "gelu q q1"), "gelu sum")


# --- attention -----------------------------------------------------------------------------------
def attention_head(q, k, v, ep: ExpParams, blk: int, causal: bool = False) -> np.ndarray:
    """One head: int8 ``q (T, dh)``, ``k, v (T, dh)`` -> int8 ``(T, dh)`` at v's scale.

    Key blocks of ``blk`` keys in order; per block: scores ``s = q k^T`` (int32), running max
    ``m``, ``p = i_exp(s - m)``, int8 probabilities ``p8 = rq(p * 127 >> E)``, rescale
    ``alpha = i_exp(m_old - m) >> (E - 10)``, ``l = (l alpha >> 10) + sum p8``,
    ``O = (O alpha >> 10) + p8 @ v``. Finally ``O / l`` with ``recip`` and one requantization.
    ``127 <= l <= 127 T``: a row's largest probability is 127 in the block where its maximum
    appears (``i_exp(0) = 32796``), and ``alpha = 1024`` exactly while the maximum stays.
    ``causal``: scores of keys after the query get ``NEG`` added (their ``exp`` is exactly 0).
    """
    q, k, v = (np.asarray(a, np.int64) for a in (q, k, v))
    T = q.shape[0]
    m = np.full((T, 1), NEG, np.int64)
    l = np.zeros((T, 1), np.int64)
    o = np.zeros((T, v.shape[1]), np.int64)
    for j in range(0, k.shape[0], blk):
        s = q @ k[j:j + blk].T
        if causal:
            s = s + np.where(np.arange(j, j + s.shape[1])[None, :] > np.arange(T)[:, None], NEG, 0)
        m_new = np.maximum(m, s.max(-1, keepdims=True))
        p8 = requant(i_exp(s - m_new, ep), 127, EXP_E, 0, 127)
        alpha = i_exp(m - m_new, ep) >> (EXP_E - ALPHA_BITS)
        l = (_fit(l * alpha, "attention l*alpha") >> ALPHA_BITS) + p8.sum(-1, keepdims=True)
        o = (_fit(o * alpha, "attention O*alpha") >> ALPHA_BITS) + p8 @ v[j:j + blk]
        m = m_new
    if l.min() < 64:          # the chip's log2 search starts at 2^6 (l >= 127: see the docstring)
        raise IntRangeError(f"attention: softmax denominator {int(l.min())} below 64")
    y, e = recip(l)
    o2 = _fit(o << (13 - e), "attention O shifted")
    return requant(o2, y, 27)


__all__ = ["ExpParams", "i_exp", "ilog2", "recip", "rsqrt", "requant", "mult_shift", "LNParams",
           "layernorm", "affine_consts", "NormParams", "norm_rows", "SoftmaxParams", "softmax_rows",
           "mask_add", "MASK_MAX", "GeluParams", "i_gelu", "attention_head", "IntRangeError"]
