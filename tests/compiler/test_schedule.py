"""Lifting: the primitive graph grouped into fused kernels whose float evaluation is the model."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.ir.engine import prepare
from compiler.lower.trace import trace
from compiler.lower.schedule import EwKernel, lift, run_float


def _lift(fn, x):
    outs, names, _, feeds = trace(fn, [x])
    return lift(prepare(outs)), feeds[0]


def _conv_ref(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", win, w)
    return out + b[None, :, None, None]


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1), (2, 0), (1, 2)])
def test_conv_lifts_to_one_fused_kernel(stride, pad):
    tc.manual_seed(0)
    conv = tc.nn.Conv2d(3, 5, 3, stride=stride, padding=pad)
    x = np.random.default_rng(1).standard_normal((2, 3, 7, 6)).astype(np.float32)
    s, feeds = _lift(lambda a: conv(a).relu(), x)
    (k,) = s.kernels
    assert k.relu and k.bias is not None and k.K == 27 and k.N == 5
    assert s.tensors[k.src].pads[2:] == [[pad, pad], [pad, pad]]
    want = np.maximum(_conv_ref(x, conv.weight.numpy(), conv.bias.numpy(), stride, pad), 0)
    assert np.allclose(run_float(s, feeds)[0], want, atol=1e-4)


def test_linear_bias_relu_fuse_and_views_pass_through():
    tc.manual_seed(0)
    lin = tc.nn.Linear(12, 4)
    x = np.random.default_rng(2).standard_normal((3, 2, 6)).astype(np.float32)
    s, feeds = _lift(lambda a: lin(a.reshape(3, 12)).relu().T, x)
    (k,) = s.kernels
    assert (k.M, k.K, k.N, k.relu) == (3, 12, 4, True)
    want = np.maximum(x.reshape(3, 12) @ lin.weight.numpy().T + lin.bias.numpy(), 0).T
    assert np.allclose(run_float(s, feeds)[0], want, atol=1e-5)


def test_relu_not_fused_when_the_pre_activation_is_also_used():
    # relu(y) + y reads y twice: the GEMM keeps no ReLU; the chain is one lookup-table kernel of y
    w = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    s, feeds = _lift(lambda a: (lambda y: y.relu() + y)(a @ tc.Tensor(w)), x)
    gemm, lut = s.kernels
    assert not gemm.relu and isinstance(lut, EwKernel) and lut.op == "lut" and lut.srcs[0][0] == gemm.out
    y = x @ w
    assert np.allclose(run_float(s, feeds)[0], np.maximum(y, 0) + y, atol=1e-5)


def test_residual_add_is_an_elementwise_kernel():
    w = np.random.default_rng(4).standard_normal((4, 4)).astype(np.float32)
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    s, feeds = _lift(lambda a: ((a @ tc.Tensor(w)) + a).relu(), x)
    assert isinstance(s.kernels[-1], EwKernel) and s.kernels[-1].relu
    assert np.allclose(run_float(s, feeds)[0], np.maximum(x @ w + x, 0), atol=1e-5)
