"""Real model architectures written with the tetrachip frontend, for ``tc.compile`` and ``bench/models.py``.

* ``resnet18(num_classes)``: ResNet-18 in its ImageNet layout (torchvision's): 7x7/2 stem conv, BatchNorm,
  ReLU, 3x3/2 max-pool, four stages of two basic blocks (64, 128, 256, 512 channels; a 1x1/2 conv + BatchNorm
  projection where the shape changes), global average pooling, a linear classifier. Any input size >= 32.
* ``mobilenet_v2(num_classes)``: MobileNetV2 (Sandler et al. 2018, width 1.0): 3x3/2 stem, 17 inverted
  residual blocks (1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 linear projection, residual when the shape
  allows), 1x1 conv to 1280, global average pooling, a linear classifier.
* ``gpt_decoder(layers, d_model, heads)``: a decoder-only transformer stack written with plain functions
  (``F.layer_norm``, matmuls, ``F.softmax`` with a causal mask, ``F.gelu``): pre-LN blocks of causal
  self-attention and a 4x MLP, then a final LayerNorm. Input: (batch, T, d_model) activations.

Weights are random (seeded through ``tc.manual_seed``); BatchNorm layers get random running statistics and
affine parameters (as a trained network has), so folding them is not an identity. Every model is a
``tc.nn.Module`` in eval mode.
"""
from __future__ import annotations

import math

import numpy as np

import tetrachip as tc

nn, F = tc.nn, tc.functional


def _bn(c: int, rng: np.random.Generator) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    bn.weight = tc.Tensor(rng.uniform(0.5, 1.5, c).astype(np.float32))
    bn.bias = tc.Tensor(rng.uniform(-0.2, 0.2, c).astype(np.float32))
    bn.running_mean = tc.Tensor(rng.uniform(-0.2, 0.2, c).astype(np.float32))
    bn.running_var = tc.Tensor(rng.uniform(0.5, 2.0, c).astype(np.float32))
    return bn


class ConvBN(nn.Module):
    """conv (no bias) -> BatchNorm -> optional activation ("relu", "relu6" or None)."""

    def __init__(self, cin, cout, k, stride=1, groups=1, act="relu", rng=None):
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False)
        self.bn = _bn(cout, rng)
        self.act = act

    def forward(self, x):
        y = self.bn(self.conv(x))
        if self.act == "relu":
            return y.relu()
        if self.act == "relu6":
            return y.clip(0.0, 6.0)
        return y


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride, rng):
        self.a = ConvBN(cin, cout, 3, stride, rng=rng)
        self.b = ConvBN(cout, cout, 3, 1, act=None, rng=rng)
        self.down = ConvBN(cin, cout, 1, stride, act=None, rng=rng) if stride != 1 or cin != cout else None

    def forward(self, x):
        short = x if self.down is None else self.down(x)
        return (self.b(self.a(x)) + short).relu()


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000, seed=0):
        tc.manual_seed(seed)
        rng = np.random.default_rng(seed)
        self.stem = ConvBN(3, 64, 7, 2, rng=rng)
        chans, blocks, cin = [64, 128, 256, 512], [], 64
        for i, c in enumerate(chans):
            blocks += [BasicBlock(cin, c, 1 if i == 0 else 2, rng), BasicBlock(c, c, 1, rng)]
            cin = c
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        y = F.max_pool2d(self.stem(x), 3, 2, 1)
        y = self.blocks(y)
        return self.fc(y.mean((2, 3)))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand, rng):
        hid = cin * expand
        self.expand = ConvBN(cin, hid, 1, act="relu6", rng=rng) if expand != 1 else None
        self.dw = ConvBN(hid, hid, 3, stride, groups=hid, act="relu6", rng=rng)
        self.project = ConvBN(hid, cout, 1, act=None, rng=rng)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = x if self.expand is None else self.expand(x)
        y = self.project(self.dw(y))
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    #: (expansion t, channels c, repeats n, first stride s), the paper's Table 2
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]

    def __init__(self, num_classes=1000, seed=0):
        tc.manual_seed(seed)
        rng = np.random.default_rng(seed)
        self.stem = ConvBN(3, 32, 3, 2, act="relu6", rng=rng)
        blocks, cin = [], 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                blocks.append(InvertedResidual(cin, c, s if i == 0 else 1, t, rng))
                cin = c
        self.blocks = nn.Sequential(*blocks)
        self.head = ConvBN(cin, 1280, 1, act="relu6", rng=rng)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x):
        y = self.head(self.blocks(self.stem(x)))
        return self.fc(y.mean((2, 3)))


class GPTDecoder(nn.Module):
    """Pre-LN causal decoder blocks written with plain functions (no transformer module classes)."""

    def __init__(self, layers=6, d_model=384, heads=6, seed=0):
        tc.manual_seed(seed)
        rng = np.random.default_rng(seed)
        self.heads, self.d = heads, d_model
        sd = 1 / math.sqrt(d_model)

        def w(*shape, scale=sd):
            return tc.Tensor((rng.standard_normal(shape) * scale).astype(np.float32))

        self.params = [dict(ln1=(w(d_model, scale=0.1) + 1, w(d_model, scale=0.1)),
                            qkv=w(d_model, 3 * d_model), proj=w(d_model, d_model),
                            ln2=(w(d_model, scale=0.1) + 1, w(d_model, scale=0.1)),
                            fc1=w(d_model, 4 * d_model), fc2=w(4 * d_model, d_model, scale=sd / 2))
                       for _ in range(layers)]
        self.ln_f = (w(d_model, scale=0.1) + 1, w(d_model, scale=0.1))

    def attention(self, x, p):
        b, t, d = x.shape
        h, hd = self.heads, d // self.heads
        q, k, v = (x @ p["qkv"]).reshape(b, t, 3, h, hd).permute(2, 0, 3, 1, 4).chunk(3, 0)
        q, k, v = (z.reshape(b, h, t, hd) for z in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.permute(0, 2, 1, 3).reshape(b, t, d) @ p["proj"]

    def forward(self, x):
        for p in self.params:
            x = x + self.attention(F.layer_norm(x, self.d, *p["ln1"]), p)
            x = x + F.gelu(F.layer_norm(x, self.d, *p["ln2"]) @ p["fc1"]) @ p["fc2"]
        return F.layer_norm(x, self.d, *self.ln_f)


def resnet18(num_classes=1000, seed=0) -> ResNet18:
    return ResNet18(num_classes, seed).eval()


def mobilenet_v2(num_classes=1000, seed=0) -> MobileNetV2:
    return MobileNetV2(num_classes, seed).eval()


def gpt_decoder(layers=6, d_model=384, heads=6, seed=0) -> GPTDecoder:
    return GPTDecoder(layers, d_model, heads, seed).eval()


def image(size: int, batch: int = 1, seed: int = 0) -> np.ndarray:
    """A random normalized (batch, 3, size, size) image batch."""
    return np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)
