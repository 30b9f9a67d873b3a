"""Embedding lookup through ``tc.compile`` (``compiler.lower.gather``, ``compiler.lower.gather_lower``):
an integer input indexes a constant table (``nn.Embedding``, ``F.embedding``, ``W[idx]``), then ordinary layers.

Every model runs on ``Device("sim")`` bit-exact to ``cm.reference``; ``float_reference`` equals the
frontend's value (negative indices count from the end, indices outside the table give zero rows, as
in the frontend), and the chip's output is within a stated bound of the largest float output."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.frontend import functional as F
from compiler.lower.gather import chip_rows
from compiler.lower.schedule import ChipCompileError

#: relative error of embedding + Linear (or a convolution) against float (int8 table at one scale, int8
#: weights; measured at most 1.4%)
LINEAR_BOUND = 0.04
#: the decoder-style block (LayerNorm, causal attention, GELU MLP, residuals; int8 throughout; measured
#: 1.6% to 2.0%)
DECODER_BOUND = 0.05


class EmbedLinear(tc.nn.Module):
    def __init__(self, V, d, n):
        self.emb = tc.nn.Embedding(V, d)
        self.fc = tc.nn.Linear(d, n)

    def forward(self, idx):
        return self.fc(self.emb(idx))


class Decoder(tc.nn.Module):
    def __init__(self, V, d, heads):
        self.emb = tc.nn.Embedding(V, d)
        self.ln = tc.nn.LayerNorm(d)
        self.block = tc.nn.TransformerBlock(d, heads)
        self.head = tc.nn.Linear(d, V)

    def forward(self, idx):
        return self.head(self.block(self.ln(self.emb(idx)), is_causal=True))


def _run(model, idx: np.ndarray, cfg: str, bound: float):
    cm = tc.compile(model, idx, config=cfg)
    assert "embedding" in [k.kind for k in cm.kernels]
    res = tc.Device("sim", config=cfg).run(cm, {"x": idx})
    got, ref = res.outputs[0], cm.reference({"x": idx})[0]
    np.testing.assert_array_equal(got, ref)
    front = model(tc.Tensor(idx.astype(np.int32))).numpy()
    np.testing.assert_allclose(cm.float_reference({"x": idx})[0], front, rtol=1e-4, atol=1e-5)
    err = float(np.abs(got - front).max() / np.abs(front).max())
    print(f"[{cfg}] {res.stats.cycles} cycles, error {err:.4f}")
    assert err <= bound, err
    return cm, res


@pytest.mark.parametrize("cfg,V,d,B,T", [("tiny", 50, 16, 1, 6), ("tiny", 60, 18, 2, 5), ("small", 300, 64, 2, 8),
                                         ("base", 120, 32, 1, 12), ("base", 77, 40, 2, 7)])
def test_embedding_linear(cfg, V, d, B, T):
    rng = np.random.default_rng(V + d)
    model = EmbedLinear(V, d, 10)
    idx = rng.integers(-V, V, (B, T))                # negative indices count from the end
    _run(model, idx, cfg, LINEAR_BOUND)


def test_indices_outside_the_table_give_zero_rows():
    V, d = 40, 16
    model = EmbedLinear(V, d, 8)
    idx = np.array([[0, V - 1, -V, V, -V - 1, 3 * V, -(2 ** 31), 2 ** 31 - 1]])
    cm, res = _run(model, idx, "tiny", LINEAR_BOUND)
    zero_row = model.fc.bias.numpy()                 # a zero embedding row gives the bias alone
    front = model(tc.Tensor(idx.astype(np.int32))).numpy()
    np.testing.assert_allclose(front[0, 3:], np.broadcast_to(zero_row, (5, 8)), atol=1e-6)
    np.testing.assert_array_equal(chip_rows(idx[0], V), [0, V - 1, 0, V, V, V, V, V])


@pytest.mark.parametrize("cfg", ["small", "base"])
@pytest.mark.parametrize("B", [1, 2])
def test_decoder_block(cfg, B):
    rng = np.random.default_rng(B)
    model = Decoder(96, 32, 2)
    idx = rng.integers(0, 96, (B, 8))
    _run(model, idx, cfg, DECODER_BOUND)


def test_functional_embedding_in_chunks():
    """``F.embedding`` with more tokens than one chunk of staging rows on tiny (full chunks in a loop, then
    the rest), rows of 64 int8 (16 SPM rows each)."""
    rng = np.random.default_rng(3)
    W = tc.Tensor(rng.standard_normal((70, 64)).astype(np.float32))
    lin = tc.nn.Linear(64, 4)

    def f(idx):
        return lin(F.embedding(idx, W)).relu()
    idx = rng.integers(-70, 70, (2, 64))
    cm, res = _run(f, idx, "tiny", LINEAR_BOUND)
    assert cm.kernels[0].M == 128 and "gather_chunk" in cm.asm       # full chunks ran in the chunk loop


def _lookup_only(V, d, ntok, cfg):
    W = tc.Tensor(np.random.default_rng(0).standard_normal((V, d)).astype(np.float32))
    idx = np.random.default_rng(1).integers(0, V, (ntok,))
    cm = tc.compile(lambda i: W[i], idx, config=cfg)
    res = tc.Device("sim", config=cfg).run(cm, {"x": idx})
    np.testing.assert_array_equal(res.outputs[0], cm.reference({"x": idx})[0])
    np.testing.assert_allclose(res.outputs[0], W.numpy()[idx], atol=np.abs(W.numpy()).max() / 254 + 1e-6)
    return cm, res


def test_code_does_not_grow_with_tokens():
    small, rs = _lookup_only(100, 32, 16, "small")
    big, rb = _lookup_only(100, 32, 400, "small")
    assert len(big.program) <= len(small.program) + 8, (len(small.program), len(big.program))
    per_token = (rb.stats.cycles - rs.stats.cycles) / (400 - 16)
    print(f"{per_token:.1f} cycles per token (small, d=32)")
    assert per_token < 40


def test_integer_input_read_otherwise_is_refused():
    W = tc.Tensor(np.ones((10, 4), np.float32))
    lin = tc.nn.Linear(4, 4)
    idx = np.arange(4).reshape(1, 4)
    with pytest.raises(ChipCompileError, match="integer input 'x'"):
        tc.compile(lambda i: lin(W[i]) + lin(i.cast(tc.float32).reshape(1, 4, 1).expand(1, 4, 4)), idx,
                   config="tiny")


def test_a_non_integer_index_at_run_time_is_refused():
    cm = tc.compile(EmbedLinear(20, 8, 4), np.zeros((1, 3), np.int64), config="tiny")
    with pytest.raises(ChipCompileError, match="index"):
        tc.Device("sim", config="tiny").run(cm, {"x": np.array([[0.5, 1, 2]])})


@pytest.mark.parametrize("cfg", ["tiny", "base"])
def test_other_lookups(cfg):
    """A 3-D table (rows of 2x8 values), a lookup along the table's second axis (``W[:, idx]``, rows of its
    transpose), and a vocabulary of 5000 (the one-hot is checked on its first and last row positions)."""
    rng = np.random.default_rng(7)
    W3 = tc.Tensor(rng.standard_normal((30, 2, 8)).astype(np.float32))
    W2 = tc.Tensor(rng.standard_normal((12, 40)).astype(np.float32))
    lin, lin2 = tc.nn.Linear(16, 4), tc.nn.Linear(5, 3)
    _run(lambda i: lin(W3[i].reshape(2, 5, 16)), rng.integers(-30, 30, (2, 5)), cfg, LINEAR_BOUND)
    _run(lambda i: lin2(W2[:, i]), rng.integers(0, 40, (5,)), cfg, LINEAR_BOUND)
    if cfg == "base":
        _run(EmbedLinear(5000, 64, 8), rng.integers(-5000, 5000, (2, 32)), cfg, LINEAR_BOUND)


def test_symbolic_dimension_and_control_flow_are_refused():
    model = EmbedLinear(20, 8, 8)
    idx = np.random.default_rng(1).integers(0, 20, (3, 4))
    with pytest.raises(ChipCompileError, match="table lookup.*symbolic"):
        tc.compile(model, idx, config="tiny", dynamic={"N": 4})
    W = tc.Tensor(np.eye(8, dtype=np.float32))
    with pytest.raises(ChipCompileError, match="integer input.*control flow"):
        tc.compile(lambda i: tc.cond(model(i).sum() > 0, lambda v: (v @ W).relu(), lambda v: v, model(i)), idx,
                   config="small")


class TextCNN(tc.nn.Module):
    """Embeddings read by a padded convolution along the tokens: the lookup's output rows are not evenly
    spaced (each batch element's rows sit between zero borders), so they are stored one by one."""
    def __init__(self, V, d):
        self.emb = tc.nn.Embedding(V, d)
        self.conv = tc.nn.Conv2d(d, 8, (1, 3), padding=(0, 1))
        self.fc = tc.nn.Linear(8, 2)

    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx).permute(0, 2, 1).reshape(B, -1, 1, T)
        return self.fc(self.conv(x).relu().mean((2, 3)))


@pytest.mark.parametrize("cfg,T", [("tiny", 80), ("small", 10)])
def test_padded_reader(cfg, T):
    idx = np.random.default_rng(T).integers(-50, 50, (2, T))
    cm, _ = _run(TextCNN(50, 16), idx, cfg, LINEAR_BOUND)
    assert "gather_st" in cm.asm                           # the rows stored at their own offsets
