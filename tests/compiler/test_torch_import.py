"""``tc.from_torch``: PyTorch modules (defined here, seeded) imported through ``torch.export`` and run with
the frontend on Device("numpy") against PyTorch itself (1e-4), gradients of imported parameters against
PyTorch's ``.grad``, one error listing every unsupported op, and the imported CNN and transformer block
compiled for the chip: on Device("sim") bit-exact to ``cm.reference`` and close to PyTorch's float output."""
import subprocess
import sys

import numpy as np
import pytest

import tetrachip as tc

torch = pytest.importorskip("torch")
nn = torch.nn
TF = torch.nn.functional

TOL = dict(rtol=1e-4, atol=1e-4)


def _randomize_bn(bn: "nn.BatchNorm2d", gen: "torch.Generator") -> None:
    """Running statistics and affine parameters as a trained network has them (folding them is no identity)."""
    c = bn.num_features
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(c, generator=gen) * 0.4 - 0.2)
        bn.running_var.copy_(torch.rand(c, generator=gen) * 1.5 + 0.5)
        bn.weight.copy_(torch.rand(c, generator=gen) + 0.5)
        bn.bias.copy_(torch.rand(c, generator=gen) * 0.4 - 0.2)


def _check(model, *inputs):
    """The imported model on Device("numpy") equals ``model`` (in eval mode) to 1e-4; returns the imported model."""
    tm = tc.from_torch(model, inputs)
    assert model.training                 # from_torch exports in eval mode and leaves the mode as it was
    model.eval()
    got = tm(*[tc.Tensor(x.numpy()) for x in inputs])
    got = got if isinstance(got, tuple) else (got,)
    with torch.no_grad():
        want = model(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), **TOL)
    return tm


# ------------------------------------------------------------------------------------------------ models

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 5))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self, gen):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)
        _randomize_bn(self.bn1, gen)
        _randomize_bn(self.bn2, gen)

    def forward(self, x):
        x = self.pool(TF.relu(self.bn1(self.conv1(x))))
        x = TF.relu6(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(self.gap(x), 1))


class Convs(nn.Module):
    """Grouped, depthwise (with dilation), strided and transposed convolutions, a 1-D convolution."""

    def __init__(self):
        super().__init__()
        self.grouped = nn.Conv2d(8, 12, 3, padding=1, groups=4)
        self.depthwise = nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=12)
        self.pointwise = nn.Conv2d(12, 6, 1, stride=2)
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.conv1d = nn.Conv1d(4, 3, 3, padding=1)

    def forward(self, x):
        x = TF.leaky_relu(self.grouped(x), 0.1)
        x = TF.hardtanh(self.depthwise(x), -1.0, 1.0)
        x = self.up(self.pointwise(x))
        y = self.conv1d(x.flatten(2))
        return x, TF.avg_pool2d(x, 2), y


class Block(nn.Module):
    """A pre-LN transformer block: causal self-attention (a mask buffer, F.softmax), a GELU MLP."""

    def __init__(self, d=32, heads=4, t_max=16):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2, self.act = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.GELU()
        self.register_buffer("mask", torch.tril(torch.ones(t_max, t_max, dtype=torch.bool)))

    def forward(self, x):
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.reshape(b, t, h, dh).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / dh ** 0.5
        s = s.masked_fill(~self.mask[:t, :t], float("-inf"))
        a = (TF.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    """Token and position embeddings, a LayerNorm, a linear LM head."""

    def __init__(self, vocab=50, d=16, t_max=12):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t_max, d)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        return self.head(self.ln(self.tok(ids) + self.pos(pos)))


class Misc(nn.Module):
    """Elementwise, reduction and movement ops as they come out of the core ATen decomposition."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 6))

    def forward(self, x, y):
        a = TF.silu(x) * torch.sigmoid(y) + torch.exp(-x.abs()) - torch.sqrt(y * y + 1) / torch.rsqrt(x * x + 2)
        b = torch.log(y.abs() + 1).pow(2) + torch.erf(x) + TF.gelu(x, approximate="tanh")
        c = torch.where(x > y, a, b).clamp(-2.0, 2.0)
        m = torch.cat([c.amax(-1, keepdim=True), c.mean(-1, keepdim=True), c.sum(-1, keepdim=True)], -1)
        z = (c @ self.w).transpose(0, 1).unsqueeze(0).squeeze(0)
        p = torch.triu(torch.ones(6, 6)) * 2.0
        s = TF.log_softmax(z + p[:, :5].sum(-1, keepdim=True), dim=0)
        sel = x[:, 1:5:2].permute(1, 0) + x.select(1, 0) - x.index_select(0, torch.tensor([0, 2, 1, 0, 4])).t()[:2]
        ind = x[torch.tensor([4, 0])]
        return m, s, sel, ind + (x[3] >= 0).float() - (y[3] != x[3]).float() + torch.full((2, 6), 0.5)


class SdpaBlock(nn.Module):
    """Causal self-attention with F.scaled_dot_product_attention (decomposed by torch.export: q and k each
    scaled by sqrt(scale), a -inf additive mask, the guard of fully masked rows around the softmax)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.ln(x)).chunk(3, -1))
        y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(b, t, d))


class MobileBits(nn.Module):
    """MobileNetV3-style pieces: Hardswish, a squeeze-excite with Hardsigmoid, depthwise conv + ReLU6,
    average and (divisible) adaptive pooling, Dropout, SiLU / Softplus / ELU heads."""

    def __init__(self, gen):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.se1, self.se2 = nn.Conv2d(16, 4, 1), nn.Conv2d(4, 16, 1)
        self.pool, self.adapt = nn.AvgPool2d(3, 1, padding=1, count_include_pad=False), nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, 10), nn.SiLU(), nn.Softplus(), nn.ELU())
        _randomize_bn(self.stem[1], gen)
        _randomize_bn(self.dw[1], gen)

    def forward(self, x):
        x = self.dw(self.stem(x))
        x = x * TF.hardsigmoid(self.se2(TF.relu(self.se1(TF.adaptive_avg_pool2d(x, 1)))))
        return self.fc(self.adapt(self.pool(x)))


class Shapes(nn.Module):
    """Padding, flips, repeats, stacking and unbinding, max/argmax, var/std; a cumsum of a constant (folded)."""

    def forward(self, x):
        a, b, c = x.unbind(1)
        s = torch.stack([a, c.flip(0), b * torch.arange(4.0).cumsum(0)], -1)
        p = TF.pad(s, (1, 2, 0, 1), value=-0.5).repeat(1, 2, 1)
        m, i = p.max(-1)
        return m + i.float(), p.var(-1), x.std(1, keepdim=True), p.argmin(1).float()


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


# ------------------------------------------------------------------------------------------------ numpy device

def test_mlp_matches_torch_and_keeps_its_names():
    torch.manual_seed(0)
    model = MLP()
    tm = _check(model, torch.randn(7, 12))
    assert [n for n, _ in tm.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert isinstance(tm, tc.nn.Module) and all(p.requires_grad for p in tm.parameters())
    np.testing.assert_array_equal(tm.state_dict()["net.2.weight"], model.net[2].weight.detach().numpy())


def test_gradients_flow_into_imported_parameters():
    torch.manual_seed(1)
    model = MLP()
    x = torch.randn(5, 12)
    target = torch.randn(5, 5)
    tm = tc.from_torch(model, (x,))
    loss = ((tm(tc.Tensor(x.numpy())) - tc.Tensor(target.numpy())) ** 2).mean()
    loss.backward()
    tloss = ((model(x) - target) ** 2).mean()
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    params = dict(tm.named_parameters())
    for name, p in model.named_parameters():
        np.testing.assert_allclose(params[name].grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_cnn_with_batchnorm_and_relu6():
    gen = torch.Generator().manual_seed(2)
    torch.manual_seed(2)
    model = CNN(gen)
    tm = _check(model, torch.randn(2, 3, 12, 12))
    assert "aten._native_batch_norm_legit_no_training.default" in tm.ops()
    assert "aten.hardtanh.default" in tm.ops()
    assert {n for n, _ in tm.named_buffers()} >= {"bn1.running_mean", "bn2.running_var"}


def test_grouped_depthwise_transposed_and_1d_convolutions():
    torch.manual_seed(3)
    _check(Convs(), torch.randn(2, 8, 9, 9))


def test_pre_ln_transformer_block_with_causal_mask():
    torch.manual_seed(4)
    tm = _check(Block(), torch.randn(2, 10, 32))
    # ~mask[:t, :t] was folded at import: no bitwise_not / slice of the mask is left in the graph
    assert "aten.bitwise_not.default" not in tm.ops()


def test_transformer_encoder_layer_and_multihead_attention():
    torch.manual_seed(5)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True, activation="gelu")
    _check(layer, torch.randn(2, 7, 16))
    _check(Attn(), torch.randn(3, 5, 16))


def test_embedding_and_lm_head():
    torch.manual_seed(6)
    ids = torch.randint(0, 50, (2, 9))
    tm = _check(TinyLM(), ids)
    assert "aten.arange.default" not in tm.ops()         # the positions are a folded constant


def test_elementwise_reduction_and_movement_ops():
    torch.manual_seed(7)
    _check(Misc(), torch.randn(5, 6), torch.randn(5, 6))


def test_mobilenet_style_pieces():
    gen = torch.Generator().manual_seed(16)
    torch.manual_seed(16)
    tm = _check(MobileBits(gen), torch.randn(2, 3, 16, 16))
    assert {"aten.hardtanh.default", "aten._adaptive_avg_pool2d.default", "aten.avg_pool2d.default"} <= set(tm.ops())


def test_padding_flips_repeats_and_reductions():
    torch.manual_seed(17)
    tm = _check(Shapes(), torch.randn(4, 3))
    assert "aten.cumsum.default" not in tm.ops()


def test_scaled_dot_product_attention():
    class SDPA(nn.Module):
        def forward(self, q, k, v, m):
            return (TF.scaled_dot_product_attention(q, k, v, is_causal=True),
                    TF.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3))
    torch.manual_seed(8)
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    _check(SDPA(), q, k, v, torch.randn(6, 6))


def test_fully_masked_rows_keep_pytorchs_zeros():
    """A mask fed at run time may mask a whole row: PyTorch's guard (zeros, not NaN) is kept."""
    class Masked(nn.Module):
        def forward(self, q, k, v, m):
            return TF.scaled_dot_product_attention(q, k, v, attn_mask=m)
    torch.manual_seed(13)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    m = torch.rand(4, 4) > 0.3
    m[2] = False
    tm = _check(Masked(), q, k, v, m)
    out = tm(*[tc.Tensor(t.numpy()) for t in (q, k, v, m)]).numpy()
    assert np.all(out[:, :, 2] == 0) and np.all(np.isfinite(out))


def test_tied_embedding_and_lm_head_stay_tied():
    class Tied(TinyLM):
        def __init__(self):
            super().__init__()
            self.head.weight = self.tok.weight

    torch.manual_seed(14)
    model = Tied()
    ids = torch.randint(0, 50, (2, 9))
    tm = _check(model, ids)
    params = dict(tm.named_parameters())
    assert "head.weight" not in params and tm.state_dict().keys() >= {"tok.weight", "head.weight"}
    out = tm(tc.Tensor(ids.numpy()))
    (out * out).mean().backward()
    tout = model(ids)
    (tout * tout).mean().backward()
    np.testing.assert_allclose(params["tok.weight"].grad.numpy(), model.tok.weight.grad.numpy(), rtol=1e-4,
                               atol=1e-6)


def test_dynamic_batch():
    torch.manual_seed(9)
    model = MLP()
    batch = torch.export.Dim("batch", min=2, max=64)
    tm = tc.from_torch(model, (torch.randn(4, 12),), dynamic_shapes=({0: batch},))
    for n in (3, 11):
        x = torch.randn(n, 12)
        np.testing.assert_allclose(tm(tc.Tensor(x.numpy())).numpy(), model(x).detach().numpy(), **TOL)


# ------------------------------------------------------------------------------------------------ errors

def test_unsupported_ops_are_listed_at_once():
    class Odd(nn.Module):
        def forward(self, x):
            a = torch.cumsum(x, 1)
            b = torch.cumsum(x * 2, 0)
            return a + b + torch.sort(x, 1)[0]

    with pytest.raises(tc.TorchImportError) as e:
        tc.from_torch(Odd(), torch.randn(3, 4))
    msg = str(e.value)
    assert "aten.cumsum.default (nodes: cumsum, cumsum_1)" in msg and "aten.sort.default (nodes: sort)" in msg
    assert "3 node(s) use 2 op(s)" in msg
    assert isinstance(e.value, tc.TetrachipError)


def test_wrong_inputs_are_clear_errors():
    torch.manual_seed(10)
    tm = tc.from_torch(MLP(), torch.randn(4, 12))
    with pytest.raises(tc.TorchImportError, match=r"input 'x' has shape \(4, 13\).*\(4, 12\)"):
        tm(tc.Tensor(np.zeros((4, 13), np.float32)))
    with pytest.raises(tc.TorchImportError, match="expected 1 input"):
        tm(tc.Tensor(np.zeros((4, 12), np.float32)), tc.Tensor(np.zeros(1, np.float32)))
    with pytest.raises(tc.TorchImportError, match="torch.nn.Module"):
        tc.from_torch(lambda x: x, torch.randn(2))
    with pytest.raises(tc.TorchImportError, match="example input 0"):
        tc.from_torch(MLP(), 3)


def test_export_failures_and_refused_arguments_are_clear_errors():
    class Branchy(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1       # data-dependent control flow: torch.export refuses

    with pytest.raises(tc.TorchImportError, match="torch.export could not export Branchy") as e:
        tc.from_torch(Branchy(), torch.ones(3))
    assert e.value.__cause__ is not None
    tm = tc.from_torch(nn.MaxPool2d(2, ceil_mode=True), torch.randn(1, 1, 5, 5))
    with pytest.raises(tc.TorchImportError, match=r"node 'max_pool2d_with_indices' .*ceil_mode=True"):
        tm(tc.Tensor(np.zeros((1, 1, 5, 5), np.float32)))


def test_the_docs_table_lists_every_supported_op():
    import re
    from pathlib import Path

    from compiler.importers.torch_import import supported_ops
    doc = (Path(__file__).parents[2] / "docs" / "torch_import.md").read_text()
    table = doc.split("## Supported ops")[1].split("\n## ")[0]
    assert sorted(set(re.findall(r"`(aten\.\w+)`", table))) == supported_ops()


def test_import_tetrachip_does_not_import_torch():
    code = ("import sys, tetrachip as tc; tc.from_torch; tc.TorchImportError; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------------ on the chip

def _on_chip(model, x: np.ndarray, config: str, dynamic_shapes=None):
    """(compiled model, chip output, PyTorch output): the imported model compiled for ``config`` and run
    on the simulator, bit-exact to the compiled model's integer reference."""
    model.eval()
    tm = tc.from_torch(model, (torch.from_numpy(x),), dynamic_shapes=dynamic_shapes)
    cm = tc.compile(tm, [x], config=config)
    res = tc.Device("sim", config=config).run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    return cm, res.outputs[0], want


def test_cnn_on_the_chip():
    gen = torch.Generator().manual_seed(11)
    torch.manual_seed(11)
    x = np.random.default_rng(11).standard_normal((2, 3, 12, 12)).astype(np.float32)
    cm, got, want = _on_chip(CNN(gen), x, "small")
    # BatchNorm folds into the convolutions: conv, max-pool, conv, global average, linear
    assert [k.kind for k in cm.kernels] == ["gemm", "elementwise", "gemm", "elementwise", "gemm"]
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_transformer_block_on_the_chip():
    torch.manual_seed(12)
    x = np.random.default_rng(12).standard_normal((1, 8, 32)).astype(np.float32)
    cm, got, want = _on_chip(Block(), x, "small")
    # the batched q @ k^T and p @ v (bmm in core ATen) are the model's matmuls again: one fused attention
    kinds = [k.kind for k in cm.kernels]
    assert kinds.count("attention") == 1 and kinds.count("norm") == 2
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


@pytest.mark.parametrize("which", ["sdpa", "encoder_layer", "sdpa_dynamic_T"])
def test_pytorch_attention_on_the_chip(which):
    """F.scaled_dot_product_attention and nn.TransformerEncoderLayer, as core ATen spells them, still
    become the chip's fused attention (one kernel; q and k are not scaled by kernels of their own), also
    when exported with a symbolic sequence length (then the causal mask is built when the model runs)."""
    torch.manual_seed(15)
    model = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True) if which == "encoder_layer" else SdpaBlock()
    x = np.random.default_rng(15).standard_normal((1, 8, 32)).astype(np.float32)
    dyn = ({1: torch.export.Dim("T", min=2, max=32)},) if which == "sdpa_dynamic_T" else None
    cm, got, want = _on_chip(model, x, "small", dynamic_shapes=dyn)
    kinds = [k.kind for k in cm.kernels]
    assert kinds.count("attention") == 1 and "lookup table" not in kinds, kinds
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_embedding_lm_on_the_chip():
    """Token ids (int64 in PyTorch, int32 here) through the embedding lookup, the folded positions'
    table, a LayerNorm and the LM head."""
    torch.manual_seed(18)
    ids = np.random.default_rng(18).integers(0, 50, (2, 9))
    cm, got, want = _on_chip(TinyLM(), ids, "small")
    assert [k.kind for k in cm.kernels][0] == "embedding"
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
