"""A transformer block (d_model 64, 4 heads, GELU MLP) on the simulated chip, T symbolic.

One binary (``tc.compile(block, x, dynamic={"T": 64})``) runs for T in {1, 17, 64}: the int8
output equals the integer numpy model (compiler.lower.intmath on the quantized weights) bit for bit,
the Program bytes never change, the output is close to the float block, and the fused attention
moves less DRAM traffic than the same arithmetic with scores and probabilities through DRAM.
"""
import hashlib
import math

import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.transformer import CompiledTransformer, compile_block, dram_bytes_by_phase

TS = (1, 17, 64)


@pytest.fixture(scope="module")
def setup():
    tc.manual_seed(3)
    block = tc.nn.TransformerBlock(64, 4)
    rng = np.random.default_rng(3)
    calib = [rng.standard_normal((1, 64, 64)).astype(np.float32) for _ in range(2)]
    cm = tc.compile(block, calib[0], config="base", calibration=[[c] for c in calib], dynamic={"T": 64})
    xs = {T: rng.standard_normal((1, T, 64)).astype(np.float32) for T in TS}
    runs = {T: tc.Device("sim", config="base").run(cm, xs[T]) for T in TS}
    return block, calib, cm, xs, runs


def _sha(cm):
    return hashlib.sha256(cm.program.to_bytes()).hexdigest()


def test_compiles_through_tc_compile(setup):
    _, _, cm, _, _ = setup
    assert isinstance(cm, CompiledTransformer)
    assert cm.fused and cm.tmax == 64 and cm.dynamic.symbol == "T"


@pytest.mark.parametrize("T", TS)
def test_bit_exact_vs_integer_reference(setup, T):
    _, _, cm, xs, runs = setup
    got = runs[T].ints["out"][:, :T]
    want = cm.reference_int(xs[T])
    assert got.shape == want.shape == (1, T, 64)
    assert np.array_equal(got, want), f"T={T}: {(got != want).sum()} elements differ"
    assert runs[T].outputs[0].shape == (1, T, 64)
    assert np.array_equal(runs[T].outputs[0], cm.reference(xs[T])[0])


def test_one_binary_for_every_T(setup):
    block, calib, cm, xs, runs = setup
    h = _sha(cm)
    # compiled again from an example of another length: the same bytes (nothing depends on T)
    cm2 = tc.compile(block, xs[17], config="base", calibration=[[c] for c in calib], dynamic={"T": 64})
    assert _sha(cm2) == h
    # the key-block loop runs ceil(T / 16) times: cycles grow with T, from the same binary
    cyc = [runs[T].stats.cycles for T in TS]
    assert cyc[0] < cyc[1] < cyc[2]


def test_close_to_float_block(setup):
    block, _, cm, xs, runs = setup
    s = cm.qblock.s
    # a few LSBs of the int8 residual stream (x1) and of the output: each requantization rounds
    # by half an LSB, the integer kernels add their polynomial/fixed-point errors on top
    bound_max, bound_mean = 3 * (s["out"] + s["x1"]), 0.5 * (s["out"] + s["x1"])
    for T in TS:
        want = cm.float_reference(xs[T])[0]
        # the float model here is the frontend's block
        front = block(tc.Tensor(xs[T])).numpy()
        assert np.abs(want - front).max() < 1e-4
        err = np.abs(runs[T].outputs[0] - want)
        assert err.max() < bound_max, (T, err.max(), bound_max)
        assert err.mean() < bound_mean, (T, err.mean(), bound_mean)


def test_fused_attention_moves_less_dram_traffic(setup):
    block, calib, cm, xs, _ = setup
    un = compile_block(block, calib[0], "base", calibration=[[c] for c in calib], dynamic={"T": 64}, fused=False)
    x = xs[64]
    rf = tc.Device("sim", trace=True).run(cm, x)
    ru = tc.Device("sim", trace=True).run(un, x)
    assert np.array_equal(rf.ints["out"], ru.ints["out"])          # same arithmetic
    tot = [r.stats.bytes["dram_read"] + r.stats.bytes["dram_write"] for r in (rf, ru)]
    pf = dram_bytes_by_phase(cm.program, cm.layout, rf.trace)
    pu = dram_bytes_by_phase(un.program, un.layout, ru.trace)
    assert sum(pf.values()) == tot[0] and sum(pu.values()) == tot[1]
    # fused: K^T and V tiles once per key block; unfused adds H*T*T int32 scores and int8 probs twice
    H, T, C = 4, 64, tc.ChipConfig.preset("base").cols
    extra = 2 * H * T * T * 4 + 2 * H * T * T
    assert pu["attention"] - pf["attention"] == extra
    assert pf["attention"] < pu["attention"] and tot[0] < tot[1]
    assert pf["attention"] <= 2 * H * T * (64 // H) + T * C * 4     # K and V once + the lane row


def test_clear_errors(setup):
    block, _, cm, _, _ = setup
    with pytest.raises(tc.ChipCompileError, match="outside 1..64"):
        tc.Device("sim").run(cm, np.zeros((1, 65, 64), np.float32))
    with pytest.raises(tc.ChipCompileError, match="shape"):
        tc.Device("sim").run(cm, np.zeros((1, 8, 32), np.float32))
    with pytest.raises(tc.ChipCompileError, match="head size"):
        tc.compile(tc.nn.TransformerBlock(48, 4), np.zeros((1, 8, 48), np.float32), dynamic={"T": 16})
    with pytest.raises(tc.ChipCompileError, match="maximum T"):
        tc.compile(block, np.zeros((1, 8, 64), np.float32), dynamic={"T": 1000})
    assert math.isfinite(cm.compile_s)


def test_other_lengths_and_saturating_inputs(setup):
    """Any T, and inputs far outside the calibration range (int8 saturation everywhere): still
    bit exact (every integer intermediate is bounded by construction: no int32 wrap)."""
    _, _, cm, _, _ = setup
    rng = np.random.default_rng(9)
    dev = tc.Device("sim")
    for T, scale in ((5, 1.0), (16, 1.0), (33, 8.0), (48, 0.01)):
        x = (rng.standard_normal((1, T, 64)) * scale).astype(np.float32)
        res = dev.run(cm, x)
        assert np.array_equal(res.ints["out"][:, :T], cm.reference_int(x)), (T, scale)


def test_unfused_is_bit_exact_too(setup):
    block, calib, _, xs, _ = setup
    un = compile_block(block, calib[0], "base", calibration=[[c] for c in calib], dynamic={"T": 64}, fused=False)
    res = tc.Device("sim").run(un, xs[17])
    assert np.array_equal(res.ints["out"][:, :17], un.reference_int(xs[17]))


def test_stack_of_blocks():
    """``nn.Sequential`` of two blocks: one program, block 1 reads block 0's int8 output on chip."""
    tc.manual_seed(5)
    model = tc.nn.Sequential(tc.nn.TransformerBlock(64, 4), tc.nn.TransformerBlock(64, 4))
    rng = np.random.default_rng(5)
    calib = [[rng.standard_normal((1, 64, 64)).astype(np.float32)] for _ in range(2)]
    cm = tc.compile(model, calib[0][0], calibration=calib, dynamic={"T": 64})
    assert len(cm.qblocks) == 2
    assert cm.qblocks[1].s["x"] == cm.qblocks[0].s["out"]          # chained scales
    h = _sha(cm)
    for T in (1, 17, 64):
        x = rng.standard_normal((1, T, 64)).astype(np.float32)
        res = tc.Device("sim").run(cm, x)
        assert np.array_equal(res.ints["out"][:, :T], cm.reference_int(x)), T
        want = cm.float_reference(x)[0]
        assert np.abs(want - model(tc.Tensor(x)).numpy()).max() < 1e-4
        s1, s2 = cm.qblocks[0].s, cm.qblocks[1].s
        assert np.abs(res.outputs[0] - want).max() < 3 * (s1["out"] + s1["x1"] + s2["out"] + s2["x1"])
    assert _sha(cm) == h
    phases = [name for name, _ in cm.layout.phases]
    assert "block 0: attention" in phases and "block 1: attention" in phases


def test_maximum_not_a_multiple_of_the_array(setup):
    block, calib, _, _, _ = setup
    cm = tc.compile(block, calib[0][:, :40], calibration=[[c] for c in calib], dynamic={"T": 40})
    assert cm.tm == 48
    rng = np.random.default_rng(11)
    for T in (1, 33, 40):
        x = rng.standard_normal((1, T, 64)).astype(np.float32)
        assert np.array_equal(tc.Device("sim").run(cm, x).ints["out"][:, :T], cm.reference_int(x)), T
    with pytest.raises(tc.ChipCompileError, match="outside 1..40"):
        cm.reference_int(np.zeros((1, 41, 64), np.float32))


def test_causal_block(setup):
    """``compile_block(..., causal=True)``: the block as ``block(x, is_causal=True)`` (a decoder);
    keys after the query are masked on the chip from a query-index row block."""
    block, calib, _, _, _ = setup
    cm = compile_block(block, calib[0], "base", calibration=[[c] for c in calib], dynamic={"T": 64}, causal=True)
    rng = np.random.default_rng(13)
    s = cm.qblock.s
    for T in TS:
        # inputs inside the calibrated range (clipping at the input scale is not what is measured)
        x = np.clip(rng.standard_normal((1, T, 64)), -127 * s["x"], 127 * s["x"]).astype(np.float32)
        res = tc.Device("sim").run(cm, x)
        assert np.array_equal(res.ints["out"][:, :T], cm.reference_int(x)), T
        want = cm.float_reference(x)[0]
        assert np.abs(want - block(tc.Tensor(x), is_causal=True).numpy()).max() < 1e-4
        assert np.abs(res.outputs[0] - want).max() < 3 * (s["out"] + s["x1"])
    # on the chip, token 0 ignores every later token (and the non-causal block does not)
    x = rng.standard_normal((1, 5, 64)).astype(np.float32)
    y = np.concatenate([x[:, :1], rng.standard_normal((1, 4, 64)).astype(np.float32)], 1)
    a, b = (tc.Device("sim").run(cm, z).ints["out"] for z in (x, y))
    assert np.array_equal(a[:, 0], b[:, 0]) and not np.array_equal(a[:, 1:5], b[:, 1:5])
    _, _, full, _, _ = setup
    a, b = (tc.Device("sim").run(full, z).ints["out"] for z in (x, y))
    assert not np.array_equal(a[:, 0], b[:, 0])


def test_subclass_with_another_forward_is_not_taken_for_a_block():
    """Not recognised as a block by its class, it goes through the generic pipeline, which finds its
    LayerNorms, causal attention and GELU in the graph (compiler.ir.patterns)."""
    class Decoder(tc.nn.TransformerBlock):
        def forward(self, x):
            return super().forward(x, is_causal=True)

    m = Decoder(64, 4)
    x = np.random.default_rng(0).standard_normal((1, 8, 64)).astype(np.float32)
    cm = tc.compile(m, x)
    assert [k.kind for k in cm.kernels].count("attention") == 1 and "lookup table" in [k.kind for k in cm.kernels]
    res = tc.Device("sim").run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    want = m(tc.Tensor(x)).numpy()
    assert np.abs(res.outputs[0] - want).max() <= 0.05 * np.abs(want).max()


def test_longest_sequence_on_base(setup):
    """T up to 128 (the softmax denominator's fixed point, 127 T < 2^14) fits base's ACC."""
    block, calib, _, _, _ = setup
    cm = tc.compile(block, calib[0], calibration=[[c] for c in calib], dynamic={"T": 128})
    x = np.random.default_rng(17).standard_normal((1, 128, 64)).astype(np.float32)
    res = tc.Device("sim").run(cm, x)
    assert np.array_equal(res.ints["out"], cm.reference_int(x))
    with pytest.raises(tc.ChipCompileError, match="maximum T"):
        tc.compile(block, calib[0], dynamic={"T": 130})


def test_multihead_attention_alone():
    """``tc.compile(nn.MultiHeadAttention)`` (self-attention, ``forward(x)``): projections and the
    fused attention only; bit exact for T in {1, 17, 64} from one binary, close to the frontend's."""
    tc.manual_seed(2)
    mha = tc.nn.MultiHeadAttention(64, 4)
    rng = np.random.default_rng(2)
    xs = {T: rng.standard_normal((1, T, 64)).astype(np.float32) for T in TS}
    cm = tc.compile(mha, xs[64], calibration=[[x] for x in xs.values()], dynamic={"T": 64})
    assert cm.qblock.kind == "mha"
    h = _sha(cm)
    for T, x in xs.items():
        res = tc.Device("sim").run(cm, x)
        assert np.array_equal(res.ints["out"][:, :T], cm.reference_int(x)), T
        want = cm.float_reference(x)[0]
        assert np.abs(want - mha(tc.Tensor(x)).numpy()).max() < 1e-4
        s = cm.qblock.s
        assert np.abs(res.outputs[0] - want).max() < 4 * s["out"]      # v's and the output's rounding
        assert np.abs(res.outputs[0] - want).mean() < 1 * s["out"]
    assert _sha(cm) == h
