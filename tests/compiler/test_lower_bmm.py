"""Products of two activations (batched matmuls: ``q @ k.T``, ``p @ v``) through ``tc.compile``: one GEMM
per slice with the slice of the second operand relaid into weight tiles (compiler.lower.bmm_lower).
Each runs on the simulator bit-exact to ``cm.reference`` and close to the float model."""
import numpy as np
import pytest

import tetrachip as tc
from test_lower_ops import BANKED

rng = np.random.default_rng(0)
W = (rng.standard_normal((12, 20)) * 0.3).astype(np.float32)


def _arr(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


CASES = {
    "x @ x.T": (lambda x: x @ x.transpose(-2, -1), [_arr(10, 12)]),
    "(a @ W) @ b": (lambda a, b: (a @ tc.Tensor(W)) @ b, [_arr(7, 12), _arr(20, 9)]),
    "scores * scale": (lambda q, k: q @ k.transpose(-2, -1) * 0.25, [_arr(2, 3, 8, 16), _arr(2, 3, 8, 16, seed=1)]),
    "negative scale": (lambda q, k: q @ k.transpose(-2, -1) * -0.5, [_arr(2, 5, 7), _arr(2, 6, 7)]),
    "p @ v": (lambda p, v: p @ v, [_arr(2, 3, 8, 8), _arr(2, 3, 8, 16)]),
    "odd sizes + relu": (lambda p, v: (p @ v).relu(), [_arr(3, 5, 13), _arr(3, 13, 11)]),
    "broadcast slice": (lambda a, b: a @ b, [_arr(4, 6, 9), _arr(1, 9, 5)]),
}


def _check(fn, xs, cfg, rel=0.05):
    cm = tc.compile(fn, xs, cfg)
    feeds = {(f"x{i}" if len(xs) > 1 else "x"): x for i, x in enumerate(xs)}
    res = tc.Device("sim", config=cfg).run(cm, feeds)
    want = fn(*[tc.Tensor(x) for x in xs]).numpy()
    np.testing.assert_array_equal(res.outputs[0], cm.reference(feeds)[0])
    np.testing.assert_allclose(cm.float_reference(feeds)[0], want, rtol=1e-4, atol=1e-4)
    assert np.abs(res.outputs[0] - want).max() <= rel * np.abs(want).max()
    return cm, res


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("cfg", ["tiny", "small"])
def test_batched_matmul_of_two_activations(name, cfg):
    fn, xs = CASES[name]
    _check(fn, xs, cfg)


def test_attention_sized_product_moves_weights_in_chunks():
    """q @ k.T with 256 keys of 64 features on small: 2,048 weight rows per head, relaid in two chunks."""
    q, k = _arr(1, 2, 32, 64) * 0.5, _arr(1, 2, 256, 64, seed=3) * 0.5
    cm, res = _check(lambda q, k: q @ k.transpose(-2, -1), [q, k], "small")
    assert len(cm.kernels) == 2 and all(ki.M == 32 and ki.K == 64 and ki.N == 256 for ki in cm.kernels)
    assert res.stats.mxu_macs >= 2 * 32 * 64 * 256


def test_products_fit_a_small_banked_spm():
    """q @ k.T and p @ v of 4 heads, 32 tokens, 16 features on a 4x4 chip with SPM 256 rows in banks of 64: the
    weight slices relaid in chunks of an eighth of SPM, and the A tiles, weight slots and staging rows (the
    load unit's) sharing banks apart from the VPU's output staging."""
    cfg = BANKED
    q, k = _arr(1, 4, 32, 16) * 0.5, _arr(1, 4, 32, 16, seed=3) * 0.5
    cm, _ = _check(lambda q, k: q @ k.transpose(-2, -1), [q, k], cfg)
    assert cm.plans["spm"].footprint <= cfg.spm_rows
    p, v = _arr(1, 4, 32, 32, seed=5), _arr(1, 4, 32, 16, seed=6)
    _check(lambda p, v: p @ v, [p, v], cfg)
