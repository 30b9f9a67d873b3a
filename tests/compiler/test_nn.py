"""nn modules: parameters, state_dict round trips, train/eval behaviour, and a TransformerBlock
checked forward and backward against a direct numpy implementation (and torch when present)."""
import numpy as np
import pytest

import numpy_ref as R
import tetrachip as tc

nn = tc.nn

try:
    import torch
except ImportError:
    torch = None


def test_linear_matches_numpy_and_lists_parameters():
    tc.manual_seed(0)
    lin = nn.Linear(7, 3)
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(lin(tc.Tensor(x)).numpy(), x @ lin.weight.numpy().T + lin.bias.numpy(), rtol=1e-5)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    bound = 1 / np.sqrt(7)
    assert np.abs(lin.weight.numpy()).max() <= bound


def test_sequential_state_dict_round_trip_and_strictness():
    tc.manual_seed(1)
    make = lambda: nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(),  # noqa: E731
                                 nn.Linear(3 * 3 * 3, 4), nn.LayerNorm(4), nn.RMSNorm(4))
    a, b = make(), make()
    sd = a.state_dict()
    assert "layers.0.weight" in sd and "layers.1.running_mean" in sd and "layers.6.weight" in sd
    assert len(a.parameters()) == 2 + 2 + 2 + 2 + 1
    x = tc.randn(2, 2, 5, 5)
    a.eval(), b.eval()
    assert not np.allclose(a(x).numpy(), b(x).numpy())
    b.load_state_dict(sd)
    np.testing.assert_allclose(a(x).numpy(), b(x).numpy(), rtol=1e-6)
    with pytest.raises(KeyError, match="missing"):
        b.load_state_dict({k: v for k, v in sd.items() if k != "layers.0.bias"})
    bad = dict(sd, **{"layers.0.bias": np.zeros(5)})
    with pytest.raises(ValueError, match="shape mismatch for layers.0.bias"):
        b.load_state_dict(bad)


def test_batchnorm_train_updates_running_stats_eval_uses_them():
    bn = nn.BatchNorm2d(3, momentum=0.5)
    x = np.random.default_rng(2).standard_normal((4, 3, 5, 5)).astype(np.float32) * 2 + 1
    out = bn(tc.Tensor(x)).numpy()
    np.testing.assert_allclose(out.mean((0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.5 * x.mean((0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.5 + 0.5 * x.var((0, 2, 3), ddof=1), rtol=1e-5)
    bn.eval()
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    want = (x - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(tc.Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_dropout_train_eval_and_seed():
    d = nn.Dropout(0.3)
    x = tc.ones(200, 50)
    tc.manual_seed(5)
    a = d(x).numpy()
    tc.manual_seed(5)
    b = d(x).numpy()
    np.testing.assert_array_equal(a, b)
    kept = a != 0
    assert 0.65 < kept.mean() < 0.75
    np.testing.assert_allclose(a[kept], 1 / 0.7, rtol=1e-6)
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), np.ones((200, 50)))


def test_embedding_gradient_accumulates_repeated_rows():
    emb = nn.Embedding(6, 3)
    idx = tc.Tensor(np.array([[1, 4, 1]], np.int32))
    emb(idx).sum().backward()
    g = emb.weight.grad.numpy()
    np.testing.assert_array_equal(g[:, 0], [0, 2, 0, 0, 1, 0])


def test_random_seeded():
    tc.manual_seed(3)
    a = [tc.rand(4).numpy(), tc.randn(2, 3).numpy(), tc.uniform(5, low=-2, high=-1).numpy(),
         tc.bernoulli(0.5, (8,)).numpy(), tc.randint(0, 10, (4,)).numpy()]
    tc.manual_seed(3)
    b = [tc.rand(4).numpy(), tc.randn(2, 3).numpy(), tc.uniform(5, low=-2, high=-1).numpy(),
         tc.bernoulli(0.5, (8,)).numpy(), tc.randint(0, 10, (4,)).numpy()]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert ((a[2] >= -2) & (a[2] < -1)).all() and a[3].dtype == np.bool_ and a[4].dtype == np.int32
    big = tc.randn(20000).numpy()
    assert abs(big.mean()) < 0.05 and abs(big.std() - 1) < 0.05
    p = tc.Tensor(np.array([0.0, 1.0], np.float32))
    np.testing.assert_array_equal(tc.bernoulli(p).numpy(), [False, True])


def _block(seed=0, dim=8, heads=2, ff=12):
    tc.manual_seed(seed)
    blk = nn.TransformerBlock(dim, heads, ff)
    for name, p in blk.named_parameters():  # non-trivial norm parameters
        if name.startswith("ln"):
            p.node = tc.Tensor(np.random.default_rng(len(name)).uniform(0.5, 1.5, p.shape)).node
    return blk


def test_transformer_block_forward_backward_vs_numpy():
    blk = _block()
    x = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    xt = tc.Tensor(x, requires_grad=True)
    out = blk(xt)
    params = {k: v.astype(np.float64) for k, v in blk.state_dict().items()}
    want = R.transformer_block(x.astype(np.float64), params, 2)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
    w = np.random.default_rng(2).standard_normal(want.shape)
    (out * tc.Tensor(w)).sum().backward()
    # input gradient
    num = R.numeric_grad(lambda xx: R.transformer_block(xx, params, 2) * w, [x.astype(np.float64)], 0)
    np.testing.assert_allclose(xt.grad.numpy(), num, rtol=2e-3, atol=2e-4)
    # every parameter's gradient
    names = [n for n, _ in blk.named_parameters()]
    assert len(names) == 16
    for name, p in blk.named_parameters():
        def f(v, name=name):
            return R.transformer_block(x.astype(np.float64), dict(params, **{name: v}), 2) * w
        num = R.numeric_grad(f, [params[name].copy()], 0)
        np.testing.assert_allclose(p.grad.numpy(), num, rtol=2e-3, atol=2e-4, err_msg=name)


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_transformer_block_vs_torch_encoder_layer():
    blk = _block(dim=8, heads=2, ff=12)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=True)
    sd = blk.state_dict()
    t = lambda k: torch.tensor(sd[k])  # noqa: E731
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([t("attn.q_proj.weight"), t("attn.k_proj.weight"),
                                                        t("attn.v_proj.weight")]))
        layer.self_attn.in_proj_bias.copy_(torch.cat([t("attn.q_proj.bias"), t("attn.k_proj.bias"),
                                                      t("attn.v_proj.bias")]))
        layer.self_attn.out_proj.weight.copy_(t("attn.out_proj.weight"))
        layer.self_attn.out_proj.bias.copy_(t("attn.out_proj.bias"))
        for ours, theirs in (("fc1", layer.linear1), ("fc2", layer.linear2), ("ln1", layer.norm1),
                             ("ln2", layer.norm2)):
            theirs.weight.copy_(t(ours + ".weight"))
            theirs.bias.copy_(t(ours + ".bias"))
    x = np.random.default_rng(3).standard_normal((2, 5, 8)).astype(np.float32)
    xt, xth = tc.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, outh = blk(xt), layer(xth)
    np.testing.assert_allclose(out.numpy(), outh.detach().numpy(), rtol=1e-4, atol=1e-5)
    out.sum().backward()
    outh.sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), xth.grad.numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(blk.fc1.weight.grad.numpy(), layer.linear1.weight.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_causal_attention_ignores_the_future():
    tc.manual_seed(4)
    mha = nn.MultiHeadAttention(6, 3)
    x = np.random.default_rng(4).standard_normal((1, 4, 6)).astype(np.float32)
    y = x.copy()
    y[0, 3] += 5.0  # change only the last position
    a = mha(tc.Tensor(x), is_causal=True).numpy()
    b = mha(tc.Tensor(y), is_causal=True).numpy()
    np.testing.assert_allclose(a[0, :3], b[0, :3], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[0, 3], b[0, 3])


def test_dropout_gradient_is_the_scaled_mask():
    tc.manual_seed(9)
    x = tc.Tensor(np.random.default_rng(9).uniform(1, 2, (6, 7)), requires_grad=True)
    out = tc.functional.dropout(x, 0.4, training=True)
    out.sum().backward()
    kept = out.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 1 / 0.6, 0.0), rtol=1e-6)
    np.testing.assert_allclose(out.numpy()[kept], x.numpy()[kept] / 0.6, rtol=1e-6)


def test_conv_modules_shapes_and_parameters():
    tc.manual_seed(0)
    conv = nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2)
    up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
    x = tc.randn(2, 4, 9, 7)
    y = conv(x)
    assert y.shape == (2, 6, 5, 4) and conv.weight.shape == (6, 2, 3, 2)
    assert up(y).shape == (2, 4, 10, 8) and up.weight.shape == (6, 4, 3, 3)
    np.testing.assert_allclose(y.numpy(), R.conv2d(x.numpy().astype(np.float64), conv.weight.numpy(),
                                                   conv.bias.numpy(), 2, 1, 1, 2), rtol=1e-4, atol=1e-5)


def test_tied_parameters_are_listed_once():
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.weight = a.weight
    model = nn.Sequential(a, b)
    assert len(model.parameters()) == 3
    assert [n for n, _ in model.named_parameters()] == ["layers.0.weight", "layers.0.bias", "layers.1.bias"]


def test_iterating_a_tensor_gives_rows():
    rows = list(tc.Tensor(np.arange(6, dtype=np.float32).reshape(3, 2)))
    assert len(rows) == 3 and rows[2].numpy().tolist() == [4.0, 5.0]
