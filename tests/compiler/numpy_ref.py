"""Direct numpy (float64) implementations used as the reference in the frontend tests.
Written independently of compiler/: loops and numpy calls, no shared code."""
import math

import numpy as np


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    s = (stride, stride) if isinstance(stride, int) else stride
    p = (padding, padding) if isinstance(padding, int) else padding
    d = (dilation, dilation) if isinstance(dilation, int) else dilation
    n, cin, h, wd = x.shape
    cout, cpg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.zeros((n, cout, oh, ow))
    opg = cout // groups
    for co in range(cout):
        g = co // opg
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cpg:(g + 1) * cpg, i * s[0]: i * s[0] + d[0] * (kh - 1) + 1: d[0],
                           j * s[1]: j * s[1] + d[1] * (kw - 1) + 1: d[1]]
                out[:, co, i, j] = (patch * w[co]).sum(axis=(1, 2, 3))
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Scatter form: every input pixel adds weight * value into the output."""
    s, p, op, d = stride, padding, output_padding, dilation
    n, cin, h, wd = x.shape
    _, opg, kh, kw = w.shape
    ekh, ekw = d * (kh - 1) + 1, d * (kw - 1) + 1
    cout = opg * groups
    ipg = cin // groups
    full = np.zeros((n, cout, (h - 1) * s + ekh + op, (wd - 1) * s + ekw + op))
    for ci in range(cin):
        g = ci // ipg
        for i in range(h):
            for j in range(wd):
                full[:, g * opg:(g + 1) * opg, i * s:i * s + ekh:d, j * s:j * s + ekw:d] += \
                    x[:, ci, i, j][:, None, None, None] * w[ci][None]
    oh, ow = (h - 1) * s - 2 * p + ekh + op, (wd - 1) * s - 2 * p + ekw + op
    out = full[:, :, p:p + oh, p:p + ow]
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def pool2d(x, k, s, p, reduce, pad_value):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=pad_value)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(xp[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return out


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def layer_norm(x, w=None, b=None, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def erf(x):
    return np.vectorize(math.erf)(x)


def gelu(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def linear(x, w, b):
    return x @ w.T + b


def mha(x, p, prefix, heads):
    b, n, d = x.shape
    q = linear(x, p[prefix + "q_proj.weight"], p[prefix + "q_proj.bias"])
    k = linear(x, p[prefix + "k_proj.weight"], p[prefix + "k_proj.bias"])
    v = linear(x, p[prefix + "v_proj.weight"], p[prefix + "v_proj.bias"])
    split = lambda t: t.reshape(b, n, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    att = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads))
    o = (att @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
    return linear(o, p[prefix + "out_proj.weight"], p[prefix + "out_proj.bias"])


def transformer_block(x, p, heads):
    h = x + mha(layer_norm(x, p["ln1.weight"], p["ln1.bias"]), p, "attn.", heads)
    f = linear(gelu(linear(layer_norm(h, p["ln2.weight"], p["ln2.bias"]), p["fc1.weight"], p["fc1.bias"])),
               p["fc2.weight"], p["fc2.bias"])
    return h + f


def numeric_grad(f, xs, i, eps=1e-6):
    """d sum(f(*xs)) / d xs[i] by central differences in float64."""
    x = xs[i]
    g = np.zeros_like(x, dtype=np.float64)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        idx = it.multi_index
        old = x[idx]
        x[idx] = old + eps
        hi = np.sum(f(*xs))
        x[idx] = old - eps
        lo = np.sum(f(*xs))
        x[idx] = old
        g[idx] = (hi - lo) / (2 * eps)
    return g
