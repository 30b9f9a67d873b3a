"""Every frontend op against numpy (float64) for values and finite differences for gradients,
and against torch for values and gradients when torch is importable."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

import numpy_ref as R
import tetrachip as tc

try:
    import torch
except ImportError:  # torch is optional: its comparisons skip
    torch = None

TC = SimpleNamespace(where=tc.where, cat=tc.cat, stack=tc.stack, vstack=tc.vstack, hstack=tc.hstack,
                     F=tc.functional, lib="tc")
TH = SimpleNamespace(where=lambda c, a, b: torch.where(c, a, torch.as_tensor(b, dtype=a.dtype)) if torch else None,
                     cat=torch.cat if torch else None, stack=torch.stack if torch else None,
                     vstack=torch.vstack if torch else None, hstack=torch.hstack if torch else None,
                     F=torch.nn.functional if torch else None, lib="torch")


class C:
    def __init__(self, name, f, npf, args, th=None, dom=(-2.0, 2.0), grad=True, tol=1e-4):
        self.name, self.f, self.npf, self.args, self.th = name, f, npf, args, th or f
        self.dom, self.grad, self.tol = dom, grad, tol


def idx(*a):
    return np.array(a, dtype=np.int64)


def _max(x, axis):
    return x.max(axis)


CASES = [
    # unary
    C("neg", lambda L, a: -a, lambda a: -a, [(3, 5)]),
    C("exp", lambda L, a: a.exp(), np.exp, [(7,)]),
    C("log", lambda L, a: a.log(), np.log, [(3, 5)], dom=(0.2, 3)),
    C("sqrt", lambda L, a: a.sqrt(), np.sqrt, [(3, 5)], dom=(0.2, 3)),
    C("rsqrt", lambda L, a: a.rsqrt(), lambda a: 1 / np.sqrt(a), [(6,)], dom=(0.2, 3)),
    C("abs", lambda L, a: a.abs(), np.abs, [(3, 5)]),
    C("sign", lambda L, a: a.sign(), np.sign, [(3, 5)], grad=False),
    C("reciprocal", lambda L, a: a.reciprocal(), lambda a: 1 / a, [(5,)], dom=(0.5, 2)),
    C("sigmoid", lambda L, a: a.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), [(3, 5)], dom=(-6, 6)),
    C("tanh", lambda L, a: a.tanh(), np.tanh, [(3, 5)]),
    C("relu", lambda L, a: a.relu(), lambda a: np.maximum(a, 0), [(3, 5)]),
    C("gelu", lambda L, a: L.F.gelu(a), R.gelu, [(3, 5)], dom=(-4, 4)),
    C("gelu_tanh", lambda L, a: L.F.gelu(a, approximate="tanh"),
      lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))), [(3, 5)]),
    C("elu", lambda L, a: L.F.elu(a), lambda a: np.where(a > 0, a, np.exp(a) - 1), [(3, 5)]),
    C("selu", lambda L, a: L.F.selu(a),
      lambda a: 1.0507009873554805 * np.where(a > 0, a, 1.6732632423543772 * (np.exp(a) - 1)), [(3, 5)]),
    C("silu", lambda L, a: L.F.silu(a), lambda a: a / (1 + np.exp(-a)), [(3, 5)]),
    C("softplus", lambda L, a: L.F.softplus(a), lambda a: np.log1p(np.exp(a)), [(3, 5)], dom=(-5, 5)),
    C("sin", lambda L, a: a.sin(), np.sin, [(3, 5)], dom=(-5, 5)),
    C("cos", lambda L, a: a.cos(), np.cos, [(3, 5)], dom=(-5, 5)),
    C("tan", lambda L, a: a.tan(), np.tan, [(3, 5)], dom=(-1.2, 1.2)),
    C("atan", lambda L, a: a.atan(), np.arctan, [(3, 5)], dom=(-4, 4)),
    C("acos", lambda L, a: a.acos(), np.arccos, [(3, 5)], dom=(-0.9, 0.9)),
    C("acosh", lambda L, a: a.acosh(), np.arccosh, [(3, 5)], dom=(1.2, 4)),
    C("square", lambda L, a: a.square(), np.square, [(4,)]),
    C("clamp", lambda L, a: a.clamp(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), [(3, 5)]),
    # binary with broadcasting (non-power-of-two, size-1 dims, rank mismatch, scalars)
    C("add_bcast", lambda L, a, b: a + b, np.add, [(3, 5), (5,)]),
    C("add_bcast_both", lambda L, a, b: a + b, np.add, [(3, 1), (1, 5)]),
    C("sub_rank", lambda L, a, b: a - b, np.subtract, [(2, 3, 5), (3, 1)]),
    C("mul_scalar_tensor", lambda L, a, b: a * b, np.multiply, [(3, 5), ()]),
    C("mul_py_scalar", lambda L, a: 2.5 * a - 1, lambda a: 2.5 * a - 1, [(7,)]),
    C("rsub_rdiv", lambda L, a: 1 - 3 / a, lambda a: 1 - 3 / a, [(7,)], dom=(0.5, 2)),
    C("div", lambda L, a, b: a / b, np.divide, [(3, 5), (3, 5)], dom=(0.5, 2)),
    C("pow_tensor", lambda L, a, b: a ** b, np.power, [(3, 5), (5,)], dom=(0.5, 2)),
    C("pow_int", lambda L, a: a ** 3, lambda a: a ** 3, [(3, 5)]),
    C("pow_neg_int", lambda L, a: a ** -2, lambda a: a ** -2.0, [(3, 5)], dom=(0.5, 2)),
    C("pow_half", lambda L, a: a ** 0.5, np.sqrt, [(3, 5)], dom=(0.5, 2)),
    C("rpow", lambda L, a: 2 ** a, lambda a: 2 ** a, [(3, 5)]),
    C("maximum", lambda L, a, b: a.maximum(b), np.maximum, [(3, 5), (1, 5)]),
    C("minimum", lambda L, a, b: a.minimum(b), np.minimum, [(3, 5), (3, 1)]),
    C("eq", lambda L, a, b: a == b, np.equal, [np.array([1., 2, 3]), np.array([1., 0, 3])], grad=False),
    C("ne", lambda L, a, b: a != b, np.not_equal, [np.array([1., 2, 3]), np.array([1., 0, 3])], grad=False),
    C("lt", lambda L, a, b: a < b, np.less, [(3, 5), (5,)], grad=False),
    C("gt", lambda L, a, b: a > b, np.greater, [(3, 5), (3, 1)], grad=False),
    C("le_ge", lambda L, a, b: (a <= b) == (b >= a), lambda a, b: (a <= b) == (b >= a), [(4,), (4,)], grad=False),
    C("where", lambda L, a, b: L.where(a > 0, a, b), lambda a, b: np.where(a > 0, a, b), [(3, 5), (5,)]),
    C("where_scalar", lambda L, a: L.where(a > 0, a, 0.5), lambda a: np.where(a > 0, a, 0.5), [(3, 5)]),
    # reductions
    C("sum_all", lambda L, a: a.sum(), np.sum, [(3, 5)]),
    C("sum_axis", lambda L, a: a.sum(1), lambda a: a.sum(1), [(3, 5, 2)]),
    C("sum_keepdim", lambda L, a: a.sum((0, 2), keepdim=True), lambda a: a.sum((0, 2), keepdims=True), [(3, 5, 2)]),
    C("mean", lambda L, a: a.mean(-1), lambda a: a.mean(-1), [(3, 7)]),
    C("max_axis", lambda L, a: _max(a, 1), lambda a: a.max(1), [(3, 7)], th=lambda L, a: a.amax(1)),
    C("max_all", lambda L, a: a.max(), np.max, [(3, 7)]),
    C("min_axis", lambda L, a: a.min(0), lambda a: a.min(0), [(3, 7)], th=lambda L, a: a.amin(0)),
    C("prod", lambda L, a: a.prod(1), lambda a: a.prod(1), [(3, 5)], dom=(0.5, 1.5)),
    C("var", lambda L, a: a.var(1), lambda a: a.var(1, ddof=1), [(3, 5)]),
    C("std", lambda L, a: a.std(0), lambda a: a.std(0, ddof=1), [(3, 5)]),
    C("logsumexp", lambda L, a: a.logsumexp(1), lambda a: np.log(np.exp(a).sum(1)), [(3, 5)]),
    C("argmax", lambda L, a: a.argmax(1), lambda a: a.argmax(1), [(3, 7)], grad=False),
    C("argmax_all", lambda L, a: a.argmax(), lambda a: a.argmax(), [(3, 7)], grad=False),
    C("argmin", lambda L, a: a.argmin(0), lambda a: a.argmin(0), [(3, 7)], grad=False),
    # matmul
    C("matmul", lambda L, a, b: a @ b, np.matmul, [(3, 5), (5, 6)]),
    C("matmul_vec", lambda L, a, b: a @ b, np.matmul, [(3, 5), (5,)]),
    C("vec_matmul", lambda L, a, b: a @ b, np.matmul, [(5,), (5, 3)]),
    C("bmm", lambda L, a, b: a @ b, np.matmul, [(2, 3, 5), (2, 5, 4)]),
    C("bmm_bcast", lambda L, a, b: a @ b, np.matmul, [(2, 1, 3, 5), (3, 5, 4)]),
    # movement
    C("view_neg1", lambda L, a: a.view(-1, 3) * 1, lambda a: a.reshape(-1, 3), [(2, 3, 5)]),
    C("reshape", lambda L, a: a.reshape(5, 6).sum(0), lambda a: a.reshape(5, 6).sum(0), [(2, 3, 5)]),
    C("permute", lambda L, a: a.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1), [(2, 3, 5)]),
    C("transpose", lambda L, a: a.transpose(0, 2), lambda a: a.swapaxes(0, 2), [(2, 3, 5)]),
    C("T", lambda L, a: a.T, lambda a: a.T, [(3, 5)]),
    C("expand", lambda L, a: a.expand(4, 3, 5), lambda a: np.broadcast_to(a, (4, 3, 5)), [(3, 1)]),
    C("unsqueeze_squeeze", lambda L, a: a.unsqueeze(1).squeeze(), lambda a: a, [(3, 5)]),
    C("flatten", lambda L, a: a.flatten(1), lambda a: a.reshape(2, -1), [(2, 3, 5)]),
    C("flip", lambda L, a: a.flip((0, 1)), lambda a: a[::-1, ::-1], [(3, 5)]),
    C("contiguous", lambda L, a: a.T.contiguous(), lambda a: a.T, [(3, 5)]),
    C("slice_basic", lambda L, a: a[1:, :3], lambda a: a[1:, :3], [(3, 5)]),
    C("slice_step", lambda L, a: a[::2, 1::3], lambda a: a[::2, 1::3], [(7, 8)]),
    C("slice_neg_step", lambda L, a: a.flip(0)[::2] if L.lib == "torch" else a[::-2],
      lambda a: a[::-2], [(7, 3)]),
    C("slice_neg_bounds", lambda L, a: a[-3:-1, 2], lambda a: a[-3:-1, 2], [(7, 5)]),
    C("index_int_none_ellipsis", lambda L, a: a[1, None, ..., -1], lambda a: a[1, None, ..., -1], [(3, 4, 5)]),
    C("index_tensor", lambda L, a, i: a[i], lambda a, i: a[i], [(5, 3), idx(4, 0, -1, 4)]),
    C("index_tensor_2d", lambda L, a, i: a[:, i], lambda a, i: a[:, i], [(3, 5), idx([0, 1], [4, 4])]),
    C("index_two_tensors", lambda L, a, i, j: a[i, j], lambda a, i, j: a[i, j], [(4, 5), idx(0, 3, 1), idx(4, 0, 2)]),
    C("cat", lambda L, a, b: L.cat([a, b], 1), lambda a, b: np.concatenate([a, b], 1), [(3, 2), (3, 5)]),
    C("stack", lambda L, a, b: L.stack([a, b], 1), lambda a, b: np.stack([a, b], 1), [(3, 5), (3, 5)]),
    C("vstack", lambda L, a, b: L.vstack([a, b]), lambda a, b: np.vstack([a, b]), [(5,), (2, 5)]),
    C("hstack", lambda L, a, b: L.hstack([a, b]), lambda a, b: np.hstack([a, b]), [(3, 2), (3, 1)]),
    C("split", lambda L, a: a.split(2, 1)[2] * 1, lambda a: a[:, 4:], [(3, 5)]),
    C("split_sizes", lambda L, a: a.split([1, 4], 1)[1] * 1, lambda a: a[:, 1:], [(3, 5)]),
    C("chunk", lambda L, a: a.chunk(3, 0)[1] * 1, lambda a: a[3:6], [(7, 2)]),
    C("tile", lambda L, a: a.tile(2, 3), lambda a: np.tile(a, (2, 3)), [(3, 5)], th=lambda L, a: a.repeat(2, 3)),
    C("repeat", lambda L, a: a.repeat(2, 1, 3), lambda a: np.tile(a, (2, 1, 3)), [(3, 5)]),
    C("repeat_interleave", lambda L, a: a.repeat_interleave(2, 1), lambda a: np.repeat(a, 2, 1), [(3, 5)]),
    C("pad_value", lambda L, a: L.F.pad(a, (1, 2, 0, 1), value=0.5),
      lambda a: np.pad(a, ((0, 1), (1, 2)), constant_values=0.5), [(3, 5)]),
    # nn functions
    C("softmax", lambda L, a: L.F.softmax(a, -1), R.softmax, [(3, 5)], dom=(-4, 4)),
    C("softmax_dim0", lambda L, a: L.F.softmax(a, 0), lambda a: R.softmax(a, 0), [(3, 5)]),
    C("log_softmax", lambda L, a: L.F.log_softmax(a, -1), R.log_softmax, [(3, 5)], dom=(-4, 4)),
    C("layer_norm", lambda L, a, w, b: L.F.layer_norm(a, (5,), w, b), R.layer_norm, [(3, 5), (5,), (5,)]),
    C("rms_norm", lambda L, a, w: L.F.rms_norm(a, (5,), w, eps=1e-6),
      lambda a, w: a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6) * w, [(3, 5), (5,)]),
    C("batch_norm_train", lambda L, a, w, b: L.F.batch_norm(a, None, None, w, b, training=True),
      lambda a, w, b: (a - a.mean((0, 2, 3), keepdims=True)) / np.sqrt(a.var((0, 2, 3), keepdims=True) + 1e-5)
      * w.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1), [(4, 3, 2, 3), (3,), (3,)], tol=3e-4),
    C("conv2d", lambda L, x, w, b: L.F.conv2d(x, w, b), R.conv2d, [(2, 3, 6, 5), (4, 3, 3, 2), (4,)]),
    C("conv2d_stride_pad_dil", lambda L, x, w: L.F.conv2d(x, w, stride=2, padding=2, dilation=2),
      lambda x, w: R.conv2d(x, w, stride=2, padding=2, dilation=2), [(1, 2, 7, 7), (3, 2, 3, 3)]),
    C("conv2d_groups", lambda L, x, w: L.F.conv2d(x, w, stride=(1, 2), padding=1, groups=3),
      lambda x, w: R.conv2d(x, w, stride=(1, 2), padding=1, groups=3), [(2, 6, 5, 5), (9, 2, 3, 3)]),
    C("conv_transpose2d", lambda L, x, w, b: L.F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
      lambda x, w, b: R.conv_transpose2d(x, w, b, 2, 1, 1), [(2, 3, 4, 3), (3, 2, 3, 3), (2,)]),
    C("conv_transpose2d_groups", lambda L, x, w: L.F.conv_transpose2d(x, w, stride=1, groups=2),
      lambda x, w: R.conv_transpose2d(x, w, groups=2), [(1, 4, 3, 3), (4, 3, 2, 2)]),
    C("conv_transpose2d_dilation", lambda L, x, w: L.F.conv_transpose2d(x, w, stride=2, padding=1, dilation=2),
      lambda x, w: R.conv_transpose2d(x, w, stride=2, padding=1, dilation=2), [(1, 2, 3, 4), (2, 3, 3, 2)]),
    C("max_pool2d", lambda L, x: L.F.max_pool2d(x, 2), lambda x: R.pool2d(x, 2, 2, 0, np.max, 0), [(2, 3, 6, 5)]),
    C("max_pool2d_pad", lambda L, x: L.F.max_pool2d(x, 3, 2, 1),
      lambda x: R.pool2d(x, 3, 2, 1, np.max, -np.inf), [(1, 2, 5, 5)]),
    C("avg_pool2d", lambda L, x: L.F.avg_pool2d(x, 3, 2, 1), lambda x: R.pool2d(x, 3, 2, 1, np.mean, 0),
      [(1, 2, 5, 7)]),
    C("embedding", lambda L, i, w: L.F.embedding(i, w), lambda i, w: w[i], [idx([1, 4], [0, 4]), (5, 3)]),
    # losses
    C("mse", lambda L, a, b: L.F.mse_loss(a, b), lambda a, b: ((a - b) ** 2).mean(), [(3, 5), (3, 5)]),
    C("l1", lambda L, a, b: L.F.l1_loss(a, b), lambda a, b: np.abs(a - b).mean(), [(3, 5), (3, 5)]),
    C("cross_entropy", lambda L, a, t: L.F.cross_entropy(a, t),
      lambda a, t: -R.log_softmax(a)[np.arange(4), t].mean(), [(4, 5), idx(0, 4, 2, 2)]),
    C("cross_entropy_probs", lambda L, a, p: L.F.cross_entropy(a, L.F.softmax(p, -1)),
      lambda a, p: -(R.softmax(p) * R.log_softmax(a)).sum(-1).mean(), [(4, 5), (4, 5)]),
    C("nll", lambda L, a, t: L.F.nll_loss(L.F.log_softmax(a, -1), t, reduction="sum"),
      lambda a, t: -R.log_softmax(a)[np.arange(3), t].sum(), [(3, 5), idx(4, 0, 1)]),
    C("kl_div", lambda L, a, p: L.F.kl_div(L.F.log_softmax(a, -1), L.F.softmax(p, -1), reduction="batchmean"),
      lambda a, p: (R.softmax(p) * (R.log_softmax(p) - R.log_softmax(a))).sum() / 3, [(3, 5), (3, 5)]),
    C("bce", lambda L, a, y: L.F.binary_cross_entropy(a.sigmoid(), y),
      lambda a, y: -(y * np.log(1 / (1 + np.exp(-a))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-a)))).mean(),
      [(3, 5), (3, 5)], dom=(0.1, 0.9)),
]


def _inputs(case, rng):
    out = []
    for a in case.args:
        out.append(a.copy() if isinstance(a, np.ndarray) else rng.uniform(*case.dom, a).astype(np.float32))
    return out


def _tc_inputs(arrs, grad):
    return [tc.Tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrs]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_value_and_grad_vs_numpy(case):
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32)
    arrs = _inputs(case, rng)
    xs = _tc_inputs(arrs, case.grad)
    out = case.f(TC, *xs)
    want = case.npf(*[a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrs])
    got = out.numpy()
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=case.tol, atol=case.tol)
    if not case.grad:
        return
    wout = rng.standard_normal(np.shape(want)).astype(np.float32)
    (out * tc.Tensor(wout)).sum().backward()
    f64 = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrs]
    for i, (x, a) in enumerate(zip(xs, arrs)):
        if a.dtype.kind != "f":
            continue
        num = R.numeric_grad(lambda *v: case.npf(*v) * wout, f64, i)
        np.testing.assert_allclose(x.grad.numpy(), num, rtol=2e-3, atol=2e-3, err_msg=f"grad of input {i}")


def _torch_in(a, grad):
    if a.dtype.kind in "iu":
        return torch.tensor(a, dtype=torch.int64)
    return torch.tensor(a, requires_grad=grad)


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_value_and_grad_vs_torch(case):
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32)
    arrs = _inputs(case, rng)
    xs = _tc_inputs(arrs, case.grad)
    ts = [_torch_in(a, case.grad) for a in arrs]
    out, tout = case.f(TC, *xs), case.th(TH, *ts)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=case.tol, atol=case.tol)
    if not case.grad:
        return
    w = rng.standard_normal(tuple(tout.shape)).astype(np.float32)
    (out * tc.Tensor(w)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    for x, t in zip(xs, ts):
        if t.dtype == torch.float32:
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-3, atol=1e-4)


INT_CASES = [
    ("add_wrap_int8", lambda a, b: a + b, lambda a, b: a + b),
    ("mul_int32", lambda a, b: a * b, lambda a, b: a * b),
    ("sub", lambda a, b: a - b, lambda a, b: a - b),
    ("maximum", lambda a, b: a.maximum(b), np.maximum),
    ("minimum", lambda a, b: a.minimum(b), np.minimum),
    ("where", lambda a, b: tc.where(a > b, a, b), lambda a, b: np.where(a > b, a, b)),
    ("abs", lambda a, b: a.abs(), lambda a, b: np.abs(a)),
    ("sign", lambda a, b: a.sign(), lambda a, b: np.sign(a)),
    ("max_axis", lambda a, b: a.max(1), lambda a, b: a.max(1)),
    ("min_all", lambda a, b: a.min(), lambda a, b: a.min()),
    ("argmax", lambda a, b: a.argmax(0), lambda a, b: a.argmax(0)),
    ("argmin", lambda a, b: a.argmin(1), lambda a, b: a.argmin(1)),
    ("sum_to_int32", lambda a, b: a.sum(0), lambda a, b: a.astype(np.int32).sum(0)),
    ("cat", lambda a, b: tc.cat([a, b], 1), lambda a, b: np.concatenate([a, b], 1)),
    ("index", lambda a, b: a[tc.Tensor([2, 0])][:, ::-2], lambda a, b: a[[2, 0]][:, ::-2]),
    ("matmul", lambda a, b: a @ b.T, lambda a, b: a @ b.T),
    ("eq", lambda a, b: a == b, np.equal),
]


@pytest.mark.parametrize("dt", [tc.int8, tc.int32], ids=str)
@pytest.mark.parametrize("name, f, npf", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_integer_ops_vs_numpy(dt, name, f, npf):
    rng = np.random.default_rng(7)
    a = rng.integers(-100, 100, (3, 5)).astype(dt.np)
    b = rng.integers(-100, 100, (3, 5)).astype(dt.np)
    with np.errstate(over="ignore"):
        want = np.asarray(npf(a, b))
    got = f(tc.Tensor(a), tc.Tensor(b)).numpy()
    if want.dtype.kind in "iu" and got.dtype.kind in "iu" and name not in ("sum_to_int32", "argmax", "argmin"):
        want = want.astype(got.dtype)  # numpy keeps the type; so do we (wrapping)
    np.testing.assert_array_equal(got, want)


def test_bool_ops():
    a = np.array([True, False, True])
    b = np.array([True, True, False])
    ta, tb = tc.Tensor(a), tc.Tensor(b)
    np.testing.assert_array_equal((ta & tb).numpy(), a & b)
    np.testing.assert_array_equal((ta | tb).numpy(), a | b)
    np.testing.assert_array_equal((~ta).numpy(), ~a)
    assert ta.any().item() is True and ta.all().item() is False
    assert ta.sum().item() == 2


def test_zero_size_and_scalar_edges():
    z = tc.zeros(0, 3)
    assert z.sum(0).numpy().tolist() == [0, 0, 0]
    assert tc.cat([z, tc.ones(2, 3)]).shape == (2, 3)
    s = tc.Tensor(np.float32(2.0))
    assert s.shape == () and (s * tc.ones(4)).numpy().tolist() == [2, 2, 2, 2]
    assert tc.ones(1, 1, 3).expand(2, -1, -1).shape == (2, 1, 3)
