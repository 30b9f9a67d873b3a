"""tc.nn.TransformerEncoderLayer (PyTorch's signature) on the chip: post-LN and pre-LN, ReLU and
GELU, sequence-first and batch-first inputs, T symbolic; bit exact against the integer model and
close to the float layer (the frontend's own forward)."""
import hashlib

import numpy as np
import pytest

import tetrachip as tc

CASES = [dict(norm_first=False, activation="relu", batch_first=False),     # PyTorch's defaults
         dict(norm_first=False, activation="gelu", batch_first=True),
         dict(norm_first=True, activation="relu", batch_first=True)]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: f"{'pre' if kw['norm_first'] else 'post'}-{kw['activation']}"
                         f"-{'bf' if kw['batch_first'] else 'sf'}")
def test_encoder_layer_on_the_chip(kw):
    tc.manual_seed(7)
    layer = tc.nn.TransformerEncoderLayer(64, 4, 256, **kw).eval()
    rng = np.random.default_rng(7)
    shape = (lambda T: (1, T, 64)) if kw["batch_first"] else (lambda T: (T, 1, 64))
    xs = {T: rng.standard_normal(shape(T)).astype(np.float32) for T in (1, 17, 64)}
    # calibration covers the inputs (else the error measured is int8 saturation, not the kernels)
    calib = [[rng.standard_normal(shape(64)).astype(np.float32)]] + [[x] for x in xs.values()]
    cm = tc.compile(layer, calib[0][0], calibration=calib, dynamic={"T": 64})
    assert cm.qblock.norm_first == kw["norm_first"] and cm.qblock.act == kw["activation"]
    sha = hashlib.sha256(cm.program.to_bytes()).hexdigest()
    s = cm.qblock.s
    for T, x in xs.items():
        res = tc.Device("sim").run(cm, x)
        assert res.outputs[0].shape == shape(T)
        got = res.ints["out"][:, :T] if kw["batch_first"] else res.ints["out"][:T]
        assert np.array_equal(got, cm.reference_int(x)), T
        want = cm.float_reference(x)[0]
        assert np.abs(want - layer(tc.Tensor(x)).numpy()).max() < 1e-4      # the frontend's layer
        assert np.abs(res.outputs[0] - want).max() < 3 * (s["out"] + s["x1"])
        assert np.abs(res.outputs[0] - want).mean() < 0.5 * (s["out"] + s["x1"])
    assert hashlib.sha256(cm.program.to_bytes()).hexdigest() == sha


def test_encoder_layer_errors():
    layer = tc.nn.TransformerEncoderLayer(64, 4, 256)                        # training mode, dropout 0.1
    x = np.random.default_rng(0).standard_normal((8, 1, 64)).astype(np.float32)
    with pytest.raises(tc.ChipCompileError, match="eval"):
        tc.compile(layer, x)
    layer.eval()
    cm = tc.compile(layer, x)
    with pytest.raises(tc.ChipCompileError, match=r"shape \(8, 2, 64\), the model was compiled for \(8, 1, 64\)"):
        tc.Device("sim").run(cm, np.zeros((8, 2, 64), np.float32))
    with pytest.raises(ValueError, match="activation"):
        tc.nn.TransformerEncoderLayer(64, 4, activation="tanh")


def test_transformer_encoder_stack():
    """nn.TransformerEncoder(layer, 2): one program, bit exact, the frontend's float stack."""
    tc.manual_seed(8)
    enc = tc.nn.TransformerEncoder(tc.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 2).eval()
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal((1, T, 64)).astype(np.float32) for T in (5, 30)]
    cm = tc.compile(enc, xs[1], calibration=[[x] for x in xs], dynamic={"T": 32})
    assert len(cm.qblocks) == 2
    for x in xs:
        res = tc.Device("sim").run(cm, x)
        T = x.shape[1]
        assert np.array_equal(res.ints["out"][:, :T], cm.reference_int(x))
        want = cm.float_reference(x)[0]
        assert np.abs(want - enc(tc.Tensor(x)).numpy()).max() < 1e-4
        s1, s2 = cm.qblocks[0].s, cm.qblocks[1].s
        assert np.abs(res.outputs[0] - want).max() < 3 * (s1["out"] + s1["x1"] + s2["out"] + s2["x1"])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_layers_bit_exact(seed):
    """Random variants (order, activation, causal, widths, weights and inputs scaled up to 3x past
    the calibration): the chip still equals the integer model (no int32 wrap anywhere)."""
    rng = np.random.default_rng(100 + seed)
    tc.manual_seed(100 + seed)
    tmax = int(rng.choice([16, 32, 48]))
    layer = tc.nn.TransformerEncoderLayer(64, 4, int(rng.choice([64, 256])),
                                          activation=str(rng.choice(["relu", "gelu"])),
                                          norm_first=bool(seed % 2), batch_first=True).eval()
    ws = float(rng.choice([0.3, 3.0]))
    for t in layer.parameters():
        t.node = tc.Tensor(t.numpy() * ws).node
    calib = [[rng.standard_normal((1, tmax, 64)).astype(np.float32)]]
    from compiler.lower.transformer import compile_block
    cm = compile_block(layer, calib[0][0], calibration=calib, dynamic={"T": tmax}, causal=bool(seed // 2))
    for T in (1, int(rng.integers(2, tmax + 1))):
        x = (rng.standard_normal((1, T, 64)) * 3).astype(np.float32)
        assert np.array_equal(tc.Device("sim").run(cm, x).ints["out"][:, :T], cm.reference_int(x)), T
