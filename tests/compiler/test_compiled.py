"""Every kind of compiled model implements ``compiler.lower.compiled.Compiled``: a kernel sequence
(with and without a symbolic dimension), control flow (with a symbolic loop length) and a
transformer block. For each: ``Device("sim").run`` equals ``reference`` bit for bit,
``float_reference`` is the float model (the frontend's value on the numpy reference), and the
chip's dequantized result is close to it."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.compiled import Compiled


def _mlp():
    rng = np.random.default_rng(11)
    w1 = (rng.standard_normal((12, 16)) * 0.4).astype(np.float32)
    w2 = (rng.standard_normal((16, 6)) * 0.4).astype(np.float32)
    return lambda a: (a @ tc.Tensor(w1)).relu() @ tc.Tensor(w2)


def _rnn():
    rng = np.random.default_rng(4)
    U = (rng.standard_normal((5, 11)) * 0.3).astype(np.float32)
    Wh = (rng.standard_normal((11, 11)) * 0.2).astype(np.float32)
    return lambda h0, seq: tc.loop(lambda h, x: (h @ tc.Tensor(Wh) + x @ tc.Tensor(U)).relu(), h0, seq)


def _check(cm, model, feeds: dict, atol: float) -> None:
    assert isinstance(cm, Compiled)
    assert cm.summary().strip()
    res = tc.Device("sim").run(cm, feeds)
    ref = cm.reference(feeds)
    assert len(ref) == len(res.outputs)
    for got, want in zip(res.outputs, ref):
        np.testing.assert_array_equal(got, want)
    flt = cm.float_reference(feeds)
    out = model(*[tc.Tensor(v) for v in feeds.values()])
    front = [o.numpy() for o in (out if isinstance(out, (list, tuple)) else [out])]
    assert len(flt) == len(front)
    for f, g, r in zip(flt, front, res.outputs):
        assert f.dtype == np.float32 and f.shape == g.shape
        np.testing.assert_allclose(f, g, rtol=1e-5, atol=1e-5)     # the float model
        np.testing.assert_allclose(r, f, atol=atol)                  # the chip approximates it


def test_kernel_sequence():
    model = _mlp()
    x = np.random.default_rng(1).standard_normal((20, 12)).astype(np.float32)
    cm = tc.compile(model, [x])
    _check(cm, model, {"x": x}, atol=0.3)
    np.testing.assert_array_equal(cm.reference(x)[0], cm.reference({"x": x})[0])   # positional or by name


@pytest.mark.parametrize("n", [3, 20])
def test_kernel_sequence_with_a_symbolic_batch(n):
    model = _mlp()
    x = np.random.default_rng(2).standard_normal((20, 12)).astype(np.float32)
    cm = tc.compile(model, [x], dynamic={"N": 20})
    _check(cm, model, {"x": x[:n]}, atol=0.3)


@pytest.mark.parametrize("T", [1, 7, 16])
def test_loop_over_a_symbolic_length(T):
    model = _rnn()
    rng = np.random.default_rng(4)
    h0 = rng.standard_normal((3, 11)).astype(np.float32)
    seq = rng.standard_normal((16, 3, 5)).astype(np.float32)
    cm = tc.compile(model, {"h0": h0, "seq": seq}, dynamic={"T": 16}, shapes={"seq": ("T", 3, 5)})
    assert cm.kind == "loop"
    _check(cm, model, {"h0": h0, "seq": seq[:T]}, atol=0.5)


def test_cond():
    rng = np.random.default_rng(6)
    W = (rng.standard_normal((8, 8)) * 0.3).astype(np.float32)
    model = lambda x: tc.cond(x.sum() > 0, lambda v: (v @ tc.Tensor(W)).relu(), lambda v: v, x)
    xs = [rng.standard_normal((4, 8)).astype(np.float32) + s for s in (-1, 1)]
    cm = tc.compile(model, [xs[0]], calibration=[[x] for x in xs])
    assert cm.kind == "cond"
    for x in xs:
        _check(cm, model, {"x": x}, atol=0.2)


def test_transformer_block():
    tc.manual_seed(3)
    block = tc.nn.TransformerBlock(64, 4)
    rng = np.random.default_rng(3)
    calib = rng.standard_normal((1, 64, 64)).astype(np.float32)
    cm = tc.compile(block, calib, dynamic={"T": 64})
    _check(cm, block, {"x": rng.standard_normal((1, 17, 64)).astype(np.float32)}, atol=0.5)


def test_a_device_without_chip_programs_says_so():
    x = np.ones((2, 12), np.float32)
    cm = tc.compile(_mlp(), [x])
    with pytest.raises(tc.TetrachipError, match="cannot run a compiled chip program"):
        tc.Device("numpy").run(cm, x)
