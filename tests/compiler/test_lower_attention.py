"""Attention written with functions (``F.scaled_dot_product_attention``, or ``q @ k^T * scale``,
softmax, ``@ v``; causal or not), compiled by the ordinary pipeline through the transformer block's
fused attention (``compiler.lower.attention``): on ``Device("sim")`` bit-exact to ``cm.reference``
(``intmath.attention_head`` per batch element and head), ``float_reference`` equal to the frontend,
the chip within 5% of the largest float output (int8 q, k, v and probabilities, the integer exp;
measured at most 3.4%, with three int8 projections before it)."""
import math

import numpy as np
import pytest

import tetrachip as tc
from compiler.frontend import functional as F

BOUND = 0.05
DH = {"tiny": 4, "small": 8, "base": 16}


def run_checked(model, feeds: dict, cfg: str):
    """(cm, res, err): ``model`` compiled for ``cfg`` and run on the simulator, bit-exact to
    ``cm.reference``, its ``float_reference`` the frontend's value; ``err`` the chip's largest error
    relative to the largest float output (also used by test_lower_attention_composed)."""
    cm = tc.compile(model, list(feeds.values()), config=cfg)
    res = tc.Device("sim", config=cfg).run(cm, feeds)
    got, ref = res.outputs[0], cm.reference(feeds)[0]
    np.testing.assert_array_equal(got, ref)
    front = model(*[tc.Tensor(v) for v in feeds.values()]).numpy()
    np.testing.assert_allclose(cm.float_reference(feeds)[0], front, rtol=1e-4, atol=1e-5)
    return cm, res, float(np.abs(got - front).max() / np.abs(front).max())


def _run(model, feeds: dict, cfg: str):
    cm, res, err = run_checked(model, feeds, cfg)
    assert sum(k.kind == "attention" for k in cm.kernels) == 1
    assert err <= BOUND, err
    return cm


SDPA = [("small", 13, 2, False), ("small", 13, 2, True), ("base", 37, 2, True), ("tiny", 6, 2, True),
        ("small", 8, 1, False)]


@pytest.mark.parametrize("cfg,L,H,causal", SDPA, ids=[f"{c}-L{L}-H{H}-{'causal' if k else 'full'}"
                                                      for c, L, H, k in SDPA])
def test_sdpa(cfg, L, H, causal):
    rng = np.random.default_rng(L * H)
    q, k, v = (rng.standard_normal((H, L, DH[cfg])).astype(np.float32) for _ in range(3))
    _run(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal), {"x0": q, "x1": k, "x2": v}, cfg)


def test_manual_spelling():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 11, 8)).astype(np.float32) for _ in range(3))
    _run(lambda a, b, c: (a @ b.transpose(-2, -1) / math.sqrt(8)).softmax(-1) @ c, {"x0": q, "x1": k, "x2": v},
         "small")


def _mha(B, L, H, dh, causal, rng):
    D = H * dh
    Wq, Wk, Wv, Wo = ((rng.standard_normal((D, D)) / math.sqrt(D)).astype(np.float32) for _ in range(4))

    def model(x):
        def heads(t):
            return t.reshape(B, L, H, dh).transpose(1, 2)
        q, k, v = (heads(x @ tc.Tensor(w)) for w in (Wq, Wk, Wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return a.transpose(1, 2).reshape(B, L, D) @ tc.Tensor(Wo)
    return model


@pytest.mark.parametrize("cfg,B,L,H,causal", [("small", 2, 13, 2, True), ("base", 1, 20, 2, False)])
def test_multi_head_attention_from_functions(cfg, B, L, H, causal):
    """Projections (GEMMs), heads as reshape/transpose views, the fused attention, the output projection."""
    rng = np.random.default_rng(B + L)
    model = _mha(B, L, H, DH[cfg], causal, rng)
    x = rng.standard_normal((B, L, H * DH[cfg])).astype(np.float32)
    cm = _run(model, {"x": x}, cfg)
    assert [k.kind for k in cm.kernels] == ["gemm"] * 3 + ["attention"] + ["gemm"]


def test_shapes_beyond_the_fused_attention_are_composed():
    """Head size other than the array, Lq != Lk, an additive mask, 4-D inputs stored channel-last: no fused
    attention kernel, but the composition (``tests/compiler/test_lower_attention_composed.py``), bit-exact."""
    rng = np.random.default_rng(0)
    sdpa = lambda a, b, c: F.scaled_dot_product_attention(a, b, c)  # noqa: E731
    q = rng.standard_normal((2, 8, 12)).astype(np.float32)
    q8, k5 = rng.standard_normal((2, 8, 8)).astype(np.float32), rng.standard_normal((2, 5, 8)).astype(np.float32)
    mask = tc.Tensor(rng.standard_normal((2, 8, 8)).astype(np.float32))
    q4 = rng.standard_normal((1, 2, 8, 8)).astype(np.float32)      # 4-D inputs are stored channel-last
    cases = [(sdpa, [q, q, q]), (sdpa, [q8, k5, k5]), (sdpa, [q4, q4, q4]),
             (lambda a, b, c: (a @ b.transpose(-2, -1) + mask).softmax(-1) @ c, [q8, q8, q8])]
    for fn, xs in cases:
        cm = tc.compile(fn, xs, config="small")
        assert "attention" not in [k.kind for k in cm.kernels]
        feeds = {f"x{i}": x for i, x in enumerate(xs)}
        np.testing.assert_array_equal(tc.Device("sim", config="small").run(cm, feeds).outputs[0],
                                      cm.reference(feeds)[0])
