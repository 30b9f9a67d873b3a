"""compiler.lower.intmath: the integer kernels of the transformer block against float math.

These check the algorithms themselves (the chip is checked against them bit for bit in
test_transformer.py): each integer kernel must stay within a bound of the float function that
follows from its fixed point and its polynomial.
"""
import math

import numpy as np
import pytest

from compiler.lower import intmath as im


def test_i_exp_close_to_exp():
    for scale in (1e-3, 4e-3, 0.05):
        p = im.ExpParams.for_scale(scale)
        d = -np.unique(np.linspace(0, 40 / scale, 4000).astype(np.int64))
        got = im.i_exp(d, p) / 2.0 ** im.EXP_E
        want = np.exp(d * scale)
        # I-BERT's second-order polynomial: about 3e-3 absolute on (0, 1]
        assert np.abs(got - want).max() < 4e-3
        assert got[0] == pytest.approx(1.0, abs=1e-3)
        assert np.all(np.diff(got) <= 0)                # monotone in d


def test_i_exp_masked_scores_are_exactly_zero():
    p = im.ExpParams.for_scale(2e-3)
    assert np.all(im.i_exp(np.array([-p.lim, im.NEG, im.NEG - (1 << 19)]), p) == 0)


def test_ilog2_recip_rsqrt():
    v = np.unique(np.logspace(0, 30.9, 3000, base=2).astype(np.int64))
    assert np.array_equal(im.ilog2(v), [int(x).bit_length() - 1 for x in v])
    r = np.arange(1, 1 << 14)
    y, e = im.recip(r)
    assert np.abs(y * 2.0 ** -(14 + e) * r - 1).max() < 2e-4        # 14-bit mantissa
    y, h = im.rsqrt(v)
    assert np.abs(y * 2.0 ** -(14 + h) * np.sqrt(v) - 1).max() < 4e-4
    with pytest.raises(im.IntRangeError):
        im.ilog2(np.array([0]))


def test_i_gelu_close_to_gelu():
    s_acc = 1e-3
    gp = im.GeluParams.make(s_acc, 4000)
    acc = np.arange(-4000, 4001, 3)
    x = acc * s_acc
    want = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    got = im.i_gelu(acc, gp) * gp.s_out
    # I-BERT's erf polynomial is within about 1.8e-2 of erf; input quantization 2^sh * s_acc
    assert np.abs(got - want).max() < 0.02 + 2 ** gp.sh * s_acc


def test_layernorm_close_to_float():
    rng = np.random.default_rng(1)
    x = np.clip(np.round(rng.standard_normal((40, 64)) * 30 + rng.integers(-20, 20, (40, 1))), -127, 127)
    gamma, beta = rng.uniform(0.5, 1.5, 64), rng.uniform(-0.3, 0.3, 64)
    s_in, s_out = 0.05, 4.0 / 127
    p = im.LNParams.make(gamma, beta, 1e-5, s_in, s_out)
    got = im.layernorm(x, p) * s_out
    xf = x * s_in
    want = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5) * gamma + beta
    want = np.clip(want, -128 * s_out, 127 * s_out)
    assert np.abs(got - want).max() < 1.0 * s_out        # half an LSB of rounding + the fixed point


def test_attention_head_close_to_softmax_attention():
    rng = np.random.default_rng(2)
    T, dh = 37, 16
    q, k, v = (rng.integers(-100, 101, (T, dh)) for _ in range(3))
    s_q = s_k = 2.0 / 127
    ep = im.ExpParams.for_scale(s_q * s_k / math.sqrt(dh))
    s = (q @ k.T) * s_q * s_k / math.sqrt(dh)
    pr = np.exp(s - s.max(-1, keepdims=True))
    want = (pr / pr.sum(-1, keepdims=True)) @ v
    for blk in (16, 64):                                  # online over 3 blocks, or one block
        got = im.attention_head(q, k, v, ep, blk)
        # int8 probabilities (1/254 of the largest) and the exp polynomial: a few LSB of v
        assert np.abs(got - want).max() < 3.0
        assert np.abs(got - want).mean() < 0.6
    a16, a64 = im.attention_head(q, k, v, ep, 16), im.attention_head(q, k, v, ep, 64)
    assert np.abs(a16 - a64).max() <= 2                   # the rescaling costs at most a rounding or two


def test_requant_and_mult_shift():
    m, sh = im.mult_shift(np.array([0.25, -1.5e-3, 3.0]))
    assert np.abs(m).max() <= 32767
    # one shift for all: every ratio within half a step 2^-shift, the largest within 1e-4 relative
    assert np.abs(m / 2.0 ** sh - [0.25, -1.5e-3, 3.0]).max() <= 2.0 ** -(sh + 1)
    assert m[2] / 2.0 ** sh == pytest.approx(3.0, rel=1e-4)
    assert list(im.requant(np.array([3, -3, 5, 1000]), 1, 1)) == [2, -1, 3, 127]   # half up, clamp
