"""A requantized GEMM whose loads the bias DMA would hold back adds its bias on the VPU
(``KernelCode.vbias``, ``compiler.lower.pipeline._vbias_pays``): a depthwise convolution's column blocks
and an expanding 1x1 convolution, as in MobileNetV2. Bit-exact to ``cm.reference``, and fewer cycles than
the same model with the bias loaded into ACC by DMA."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower import pipeline
from isa.config import ChipConfig

nn = tc.nn


def _run(model, x, cfg):
    cm = tc.compile(model, [x], config=cfg)
    res = tc.Device("sim", config=cfg).run(cm, x)
    for got, want in zip(res.outputs, cm.reference(x)):
        np.testing.assert_array_equal(got, want)
    return cm, res.stats.cycles


@pytest.mark.parametrize("cin,cout,k,groups,stride", [
    (16, 16, 3, 16, 1),         # depthwise: two column blocks of 9 K tiles
    (16, 16, 3, 16, 2),         # depthwise, stride 2
    (8, 48, 1, 1, 1),           # expanding 1x1: one K tile, 6 N tiles
])
def test_bias_on_the_vpu_is_exact_and_faster(monkeypatch, cin, cout, k, groups, stride):
    cfg = ChipConfig.preset("small")
    tc.manual_seed(cin + cout + stride)
    conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=True)
    x = np.random.default_rng(stride).standard_normal((1, cin, 20 * stride, 20 * stride)).astype(np.float32)

    def model(t):
        return conv(t).clip(0.0, 6.0)
    cm, cycles = _run(model, x, cfg)
    assert "bias on the VPU" in cm.asm and "vadd" in cm.asm
    monkeypatch.setattr(pipeline, "_vbias_pays", lambda *a: False)
    cm_dma, cycles_dma = _run(model, x, cfg)
    assert "bias on the VPU" not in cm_dma.asm
    assert cycles < cycles_dma


def test_small_kernels_keep_the_bias_dma():
    # under two M tiles of vbias_min_rows rows: the VPU's passes would not hide behind the MXU
    cfg = ChipConfig.preset("small")
    conv = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=True)
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float32)
    assert 8 * 8 < 2 * pipeline.vbias_min_rows(cfg)
    cm, _ = _run(lambda t: conv(t).relu(), x, cfg)
    assert "bias on the VPU" not in cm.asm
