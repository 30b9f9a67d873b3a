"""compiler.ir.patterns: the matcher itself, each composite found in graphs the frontend builds
(module and functional spellings, keepdim variants, other axes), nothing found in near misses, and
the rewritten graph evaluating to the original's values."""
import math

import numpy as np
import pytest

import tetrachip as tc
from compiler.frontend import functional as F
from compiler.frontend import nn
from compiler.ir import dtypes, engine, patterns
from compiler.ir.evaluate import evaluate
from compiler.ir.graph import IRError, Node, Ops, toposort
from compiler.ir.patterns import UPat, scalar
from compiler.lower.trace import trace

RNG = np.random.default_rng(5)
X = RNG.standard_normal((4, 48)).astype(np.float32) * 2
X3 = RNG.standard_normal((2, 5, 8)).astype(np.float32)
Q, K, V = (RNG.standard_normal((2, 6, 8)).astype(np.float32) for _ in range(3))
BOOL_MASK = RNG.random((6, 6)) < 0.7
BOOL_MASK[:, 0] = True
ADD_MASK = (RNG.standard_normal((2, 6, 6)) * 0.5).astype(np.float32)


def _kinds(model, *inputs):
    """(composite kinds of the recognised graph, original values, rewritten values)."""
    outs, _, _, ex = trace(model, list(inputs) if len(inputs) > 1 else inputs[0])
    g = engine.prepare(outs)
    r = patterns.recognise(g)
    kinds = sorted(n.arg.kind for n in toposort(r) if n.op is Ops.COMPOSITE)
    return kinds, evaluate(g, ex[0]), evaluate(r, ex[0]), r


def _manual_softmax(t, dim=-1):
    m = t.max(dim).unsqueeze(dim)                      # keepdim=False, then unsqueeze
    e = (t - m).exp()
    return e / e.sum(dim, keepdim=True)


def _manual_ln(t):
    mu = t.mean(-1, keepdim=True)
    var = ((t - t.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True)
    return (t - mu) / (var + 1e-3).sqrt()


def _one(v):
    """A one-element tensor (an imported model's scalar initializer), not a Python scalar."""
    return tc.Tensor(np.array([v], np.float32))


def _manual_ln_tensor_scalars(t):
    """LayerNorm as ONNX exporters write it below opset 17, eps an initializer."""
    d = t - t.mean(-1, keepdim=True)
    return d / ((d ** 2).mean(-1, keepdim=True) + _one(1e-5)).sqrt()


def _ln_bias_only(t):
    return F.layer_norm(t, 48, None, tc.Tensor(np.linspace(-1, 1, 48).astype(np.float32)))


FOUND = {
    "softmax-F": (lambda t: F.softmax(t, -1), [X], ["softmax"]),
    "softmax-method-axis0": (lambda t: t.softmax(0), [X], ["softmax"]),
    "softmax-3d-dim1": (lambda t: F.softmax(t, 1), [X3], ["softmax"]),
    "softmax-scaled": (lambda t: (t * 0.25).softmax(-1), [X], ["softmax"]),
    "softmax-manual-unsqueeze": (_manual_softmax, [X], ["softmax"]),
    "layernorm-F": (lambda t: F.layer_norm(t, 48), [X], ["layernorm"]),
    "layernorm-module": (nn.LayerNorm(48), [X], ["layernorm"]),
    "layernorm-no-affine": (nn.LayerNorm(48, elementwise_affine=False), [X], ["layernorm"]),
    "layernorm-two-axes": (lambda t: F.layer_norm(t, (5, 8)), [X3], ["layernorm"]),
    "layernorm-manual-pow": (_manual_ln, [X], ["layernorm"]),
    "layernorm-bias-only": (_ln_bias_only, [X], ["layernorm"]),
    "layernorm-tensor-scalars": (_manual_ln_tensor_scalars, [X], ["layernorm"]),
    "rmsnorm-module": (nn.RMSNorm(48), [X], ["rmsnorm"]),
    "rmsnorm-F": (lambda t: F.rms_norm(t, 48), [X], ["rmsnorm"]),
    "rmsnorm-manual": (lambda t: t / (t.square().mean(-1, keepdim=True) + 1e-6).sqrt(), [X], ["rmsnorm"]),
    "gelu-erf": (lambda t: t.gelu(), [X], ["gelu"]),
    "gelu-module": (nn.GELU(), [X], ["gelu"]),
    "gelu-tanh": (lambda t: F.gelu(t, "tanh"), [X], ["gelu"]),
    "silu": (lambda t: F.silu(t), [X], ["silu"]),
    "sigmoid": (nn.Sigmoid(), [X], ["sigmoid"]),
    "sigmoid-divide": (lambda t: 1 / (1 + (-t).exp()), [X], ["sigmoid"]),
    "tanh": (nn.Tanh(), [X], ["tanh"]),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [Q, K, V], ["attention"]),
    "sdpa-causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [Q, K, V],
                    ["attention"]),
    "sdpa-bool-mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, tc.Tensor(BOOL_MASK)), [Q, K, V],
                       ["attention"]),
    "attention-manual-add-mask": (lambda q, k, v: ((q @ k.transpose(-2, -1)) / math.sqrt(8) + tc.Tensor(ADD_MASK))
                                  .softmax(-1) @ v, [Q, K, V], ["attention"]),
    "softmax-where-tensor-inf": (lambda t: tc.where(tc.Tensor(BOOL_MASK[:4]), t[:, :6], _one(-np.inf)).softmax(-1),
                                 [X], ["softmax"]),
    "attention-2d": (lambda q, k, v: (q @ k.T * 0.5).softmax(-1) @ v, [Q[0], K[0], V[0]], ["attention"]),
    "mha-module": (nn.MultiHeadAttention(8, 2), [Q], ["attention"]),
}


@pytest.mark.parametrize("name", list(FOUND))
def test_found_and_equal(name):
    model, inputs, want = FOUND[name]
    kinds, before, after, _ = _kinds(model, *inputs)
    assert kinds == want
    for a, b in zip(before, after):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)


def test_composite_args():
    _, _, _, r = _kinds(lambda t: F.layer_norm(t, (5, 8), eps=1e-3), X3)
    (c,) = [n for n in toposort(r) if n.op is Ops.COMPOSITE]
    assert c.arg.axes == (1, 2) and c.arg.eps == pytest.approx(1e-3) and c.arg.affine == (False, False)
    _, _, _, r = _kinds(nn.LayerNorm(48), X)
    (c,) = [n for n in toposort(r) if n.op is Ops.COMPOSITE]
    assert c.arg.affine == (True, True) and len(c.src) == 3
    _, _, _, r = _kinds(FOUND["sdpa-causal"][0], Q, K, V)
    (c,) = [n for n in toposort(r) if n.op is Ops.COMPOSITE]
    assert c.arg.causal and c.arg.mask == "" and c.arg.scale == pytest.approx(1 / math.sqrt(8))
    assert [s.op for s in c.src] == [Ops.INPUT] * 3
    _, _, _, r = _kinds(FOUND["sdpa-bool-mask"][0], Q, K, V)
    (c,) = [n for n in toposort(r) if n.op is Ops.COMPOSITE]
    assert not c.arg.causal and c.arg.mask == "bool" and len(c.src) == 4


def _softmax_no_max(t):
    e = t.exp()
    return e / e.sum(-1, keepdim=True)


def _softmax_axes_differ(t):
    e = (t - t.max(0, keepdim=True)).exp()
    return e / e.sum(1, keepdim=True)


def _ln_unbiased_var(t):
    return (t - t.mean(-1, keepdim=True)) * (t.var(-1, keepdim=True) + 1e-5).rsqrt()


def _ln_mean_other_axis(t):
    xc = t - t.mean(0, keepdim=True)
    return xc * ((xc * xc).mean(-1, keepdim=True) + 1e-5).rsqrt()


MISSES = {
    "softmax-without-max": (_softmax_no_max, [X], []),
    "softmax-axes-differ": (_softmax_axes_differ, [X], []),
    "layernorm-unbiased-variance": (_ln_unbiased_var, [X], []),
    "layernorm-mean-other-axis": (_ln_mean_other_axis, [X], ["rmsnorm"]),  # an RMSNorm of x - mean_0(x)
    "sigmoid-off-by-one": (lambda t: 1 / (2 + (-t).exp()), [X], []),
    "gelu-wrong-half": (lambda t: 0.6 * t * (1 + (t * (1 / math.sqrt(2))).erf()), [X], ["erf"]),
    "silu-of-other": (lambda a, b: a * b.sigmoid(), [X, X], ["sigmoid"]),
    "tanh-wrong-offset": (lambda t: 2.0 * (2.0 * t).sigmoid() - 0.5, [X], ["sigmoid"]),
    "norm-times-activation": (lambda a, b: F.layer_norm(a, 48) * b, [X, X], ["layernorm"]),
    "attention-finite-mask": (lambda q, k, v: tc.where(tc.Tensor(BOOL_MASK), q @ k.transpose(-2, -1), -1e9)
                              .softmax(-1) @ v, [Q, K, V], ["softmax"]),
    "softmax-not-over-keys": (lambda q, k, v: (q @ k.transpose(-2, -1)).softmax(1) @ v, [Q, K, V], ["softmax"]),
}


@pytest.mark.parametrize("name", list(MISSES))
def test_near_misses(name):
    model, inputs, want = MISSES[name]
    kinds, before, after, r = _kinds(model, *inputs)
    assert kinds == want
    for a, b in zip(before, after):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)
    if name == "norm-times-activation":       # the activation was not folded in as a weight
        (c,) = [n for n in toposort(r) if n.op is Ops.COMPOSITE]
        assert c.arg.affine == (False, False)


def _inp(name, shape=(3, 4)):
    return Node(Ops.INPUT, dtypes.float32, (), (name, shape))


def _const(v, shape=(3, 4)):
    c = Node(Ops.CONST, dtypes.float32, (), v)
    r = Node(Ops.RESHAPE, dtypes.float32, (c,), (1,) * len(shape))
    return Node(Ops.EXPAND, dtypes.float32, (r,), shape)


def test_upat_commutes_captures_and_checks_names():
    a, b = _inp("a"), _inp("b")
    n = Node(Ops.MUL, dtypes.float32, (_const(3.0), a), None)
    caps = {}
    assert UPat(Ops.MUL, (UPat(Ops.INPUT, name="x"), scalar("c"))).match(n, caps)
    assert caps["x"] is a and caps["c"] == 3.0
    same2 = UPat(Ops.ADD, (UPat(name="x"), UPat(name="x")))
    assert same2.match(Node(Ops.ADD, dtypes.float32, (a, a), None), {})
    assert not same2.match(Node(Ops.ADD, dtypes.float32, (a, b), None), {})
    # structurally equal (distinct) subgraphs bind one name
    e1, e2 = (Node(Ops.EXP, dtypes.float32, (a,), None) for _ in range(2))
    assert same2.match(Node(Ops.ADD, dtypes.float32, (e1, e2), None), {})
    caps = {}
    assert not UPat(Ops.ADD, (UPat(Ops.EXP), UPat(Ops.INPUT)), name="y").match(n, caps) and caps == {}
    recip = Node(Ops.RECIP, dtypes.float32, (_const(4.0),), None)
    assert patterns.scalar_value(recip) == 0.25 and patterns.scalar_value(a) is None


def test_fixed_point_finds_nested_composites():
    """tanh is 2 sigmoid(2x) - 1 and GELU-tanh holds a tanh: inner rules fire first, outer ones then match."""
    kinds, *_ = _kinds(lambda t: t.gelu("tanh") + t.tanh() + t.silu(), X)
    assert kinds == ["gelu", "silu", "tanh"]


def test_composite_node_checks_its_sources():
    a = _inp("a")
    with pytest.raises(IRError, match="layernorm"):
        patterns.composite("layernorm", [a, _inp("w", (4,))], affine=(True, False), axes=(1,))
    with pytest.raises(IRError, match="attention"):
        patterns.composite("attention", [a, _inp("k", (3, 5)), _inp("v")])
    assert patterns.composite("softmax", [a], axes=(1,)).shape == (3, 4)


def test_default_passes_keep_primitives():
    """Devices evaluate primitives: only the chip compiler asks for composites."""
    t = tc.Tensor(X).softmax(-1)
    assert not any(n.op is Ops.COMPOSITE for n in toposort(engine.prepare([t.node])))
    np.testing.assert_allclose(t.numpy(), np.exp(X) / np.exp(X).sum(-1, keepdims=True), rtol=1e-5)


def test_dynamic_rows():
    """A symbolic row count: the composites are found and evaluate with the dimension bound."""
    x = tc.Tensor.placeholder("x", ("N", 48))
    y = F.layer_norm(x, 48).softmax(-1)
    g = engine.prepare([y.node])
    r = patterns.recognise(g)
    assert sorted(n.arg.kind for n in toposort(r) if n.op is Ops.COMPOSITE) == ["layernorm", "softmax"]
    (a,), (b,) = evaluate(g, {"x": X}), evaluate(r, {"x": X})
    np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)
