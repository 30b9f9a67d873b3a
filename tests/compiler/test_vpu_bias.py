"""A requantized GEMM whose loads the bias DMA would hold back adds its bias on the VPU
(``KernelCode.vbias``, ``compiler.lower.pipeline._vbias_pays``): a depthwise convolution's column blocks
and an expanding 1x1 convolution, as in MobileNetV2. Bit-exact to ``cm.reference``, and fewer cycles than
the same model with the bias loaded into ACC by DMA."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower import pipeline, tiling
from isa.config import ChipConfig
from rtl.fpga.fit import fpga_build_config

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


#: ``tiny`` with its FPGA build's memories (``tetrachip fpga synth --fpga-mem``): 64 ACC rows in banks of 16
TINY_FPGA = fpga_build_config(ChipConfig.preset("tiny"), "banked")


def _repeated_vadds(asm: str) -> list[str]:
    """The ``vadd``s repeated over a loop (the resident blocks' adds, ``emit._vpu_bias``)."""
    return [ln for ln in asm.splitlines() if ln.strip().startswith("vadd") and "rep=" in ln]


def test_resident_bias_blocks_are_exact_and_faster(monkeypatch):
    # each N tile's bias stays in ACC as a block (KernelCode.vbias_rows), added by one repeated vadd, where the
    # rebuilt block copies and doubles the bias row for every M tile and N tile (16-row M tiles here)
    cfg = TINY_FPGA
    tc.manual_seed(3)
    conv = nn.Conv2d(1, 16, 3, padding=1, bias=True)
    x = np.random.default_rng(3).standard_normal((4, 1, 8, 8)).astype(np.float32)

    def model(t):
        return conv(t).clip(0.0, 6.0)        # (a clip: an int8 output)
    cm, cycles = _run(model, x, cfg)
    assert "bias on the VPU" in cm.asm and _repeated_vadds(cm.asm)
    monkeypatch.setattr(pipeline, "vbias_block_rows", lambda *a: 0)
    cm_rebuilt, cycles_rebuilt = _run(model, x, cfg)
    assert "bias on the VPU" in cm_rebuilt.asm and not _repeated_vadds(cm_rebuilt.asm)
    assert cycles < cycles_rebuilt


def test_block_rows_follow_the_vpu_cost():
    # (VPU_LATENCY = 4: an instruction of n rows holds the VPU n + 4 cycles)
    # fewer ACC rows past the regions and scale rows than N tiles: no block of even one row each
    assert pipeline.vbias_block_rows(16, 8, 7) == 0
    # room for whole M tiles: a block of Mt rows each, one vadd
    assert pipeline.vbias_block_rows(16, 8, 8 * 16) == 16
    # 7 rows fit per N tile, 4 divides the 16-row tile: 4 pieces (28 cycles) in one repeated vadd
    assert pipeline.vbias_block_rows(16, 4, 28) == 4
    # 64 N tiles of 64-row M tiles in 128 rows: 2-row blocks take 64 + 32 * 4 = 192 cycles, the rebuilt
    # block 2 * 64 + (2 + 6) * 4 = 160: rebuilt; with a row less it no longer fits beside the 64 bias rows
    assert pipeline.vbias_block_rows(64, 64, 128) == 0
    assert pipeline.vbias_block_rows(64, 64, 127) == 1


def _second_digits_conv(seed: int, hw: int):
    """The digits CNN's second convolution (K = 144: 36 K tiles on ``tiny``, 8 N tiles), requantized to int8 (a
    clip), on 8 images of ``hw`` x ``hw``: (model, input)."""
    tc.manual_seed(seed)
    conv = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=True)
    x = np.random.default_rng(seed).standard_normal((8, 16, hw, hw)).astype(np.float32)
    return (lambda t: conv(t).clip(0.0, 6.0)), x


def test_an_a_ring_kernel_adds_its_bias_on_the_vpu(monkeypatch):
    # a long reduction on small memories streams its A tiles through a ring, again for every N tile: the bias
    # DMA's ACC row per output row adds to the loads that hold the array back (the digits CNN's second conv)
    cfg = TINY_FPGA
    model, x = _second_digits_conv(4, 8)
    cm, cycles = _run(model, x, cfg)
    assert "bias on the VPU" in cm.asm and cm.kernels[0].tiling.a_ring
    monkeypatch.setattr(pipeline, "_vbias_pays", lambda *a, **k: False)
    cm_dma, cycles_dma = _run(model, x, cfg)
    assert "bias on the VPU" not in cm_dma.asm and cm_dma.kernels[0].tiling.a_ring
    assert cycles < cycles_dma


def test_a_long_reduction_runs_column_by_column_with_resident_weights(monkeypatch):
    # the digits CNN's second convolution, shrunk: 36 K tiles on the FPGA memories stream their A tiles through a
    # ring; in column order (nmk) each N tile's 36 weight tiles stay in SPM for all its M tiles, so the load unit
    # moves an A tile per mm instead of an A tile and a weight tile (tiling._choose_col_ring), and each column
    # adds its bias on the VPU from a block of its own
    cfg = TINY_FPGA
    model, x = _second_digits_conv(5, 16)
    cm, cycles = _run(model, x, cfg)
    t = cm.kernels[0].tiling
    assert t.order == "nmk" and t.a_ring and t.NB == t.KT == 36 and t.NT == 8
    heads = [ln for ln in cm.asm.splitlines() if ln.startswith("; kernel ")]
    assert len(heads) == t.NT and all("bias on the VPU" in h for h in heads)
    monkeypatch.setattr(tiling, "_choose_col_ring", lambda *a: None)
    cm_mnk, cycles_mnk = _run(model, x, cfg)
    t2 = cm_mnk.kernels[0].tiling
    assert t2.order == "mnk" and t2.a_ring and t2.NB < t2.KT
    assert cycles < 0.9 * cycles_mnk
