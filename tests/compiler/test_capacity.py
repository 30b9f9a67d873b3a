"""No capacity cliffs: code size follows the number of kernels (not K, M or N), reductions of any
length run, and weights that do not fit SPM stream through a ring of slots. Every case runs on
the simulator bit-exact against the quantized reference and close to the float model."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower import pipeline
from isa.config import ChipConfig
from compiler.lower.emit import weight_mode
from test_lower import run_on_garbage_dram
from test_lower_ops import BANKED


def _gemm(M, K, N, bias=False, relu=False, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((K, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    x = rng.standard_normal((M, K)).astype(np.float32)

    def f(a):
        y = a @ tc.Tensor(w)
        if bias:
            y = y + tc.Tensor(b)
        return y.relu() if relu else y
    return f, x


def _check(f, x, config, rel=0.03):
    """Compile, run on the simulator: bit-exact to ``reference``; the float model is the frontend's
    value and the chip's result is within ``rel`` of its largest magnitude."""
    cm = tc.compile(f, [x], config=config)
    res = tc.Device("sim", config=config).run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    flt = cm.float_reference(x)[0]
    want = f(tc.Tensor(x)).numpy()
    np.testing.assert_allclose(flt, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert np.abs(res.outputs[0] - flt).max() <= rel * np.abs(flt).max()
    return cm, res


@pytest.mark.parametrize("M,K,N,config", [(3, 5000, 8, "base"), (4, 20000, 20, "base"), (5, 20000, 8, "small")])
def test_long_reductions_run(M, K, N, config):
    """More K tiles than a token counter holds (TOKEN_MAX): the weight slots seed fewer tokens."""
    f, x = _gemm(M, K, N, seed=K)
    cm, _ = _check(f, x, config)
    assert cm.kernels[0].ktiles * cm.config.rows >= K


def test_weights_beyond_spm_stream_through_a_ring(monkeypatch):
    """600 K tiles of 4 rows: tiny's SPM holds one row of A tiles and a ring of weight slots, not
    the weight tiles of an N tile; several M and N tiles, a bias and a ReLU, an int8 output (the
    tiling ``choose`` gives without comparing it with an A ring, ``group_ok=False``)."""
    choose = pipeline.choose
    monkeypatch.setattr(pipeline, "choose", lambda *a, **k: choose(*a, **dict(k, group_ok=False)))
    f, x = _gemm(9, 2400, 6, bias=True, relu=True, seed=3)
    w2 = np.random.default_rng(4).standard_normal((6, 5)).astype(np.float32)
    cm, _ = _check(lambda a: f(a) @ tc.Tensor(w2), x, "tiny", rel=0.05)
    t = cm.kernels[0].tiling
    assert weight_mode(t) == "ring" and t.NB < t.KT and t.MT > 1 and t.NT > 1


@pytest.mark.parametrize("M,bias", [(100, True), (61, False)])
def test_a_tiles_stream_when_one_row_exceeds_spm(M, bias):
    """500 K tiles beside 256 SPM rows: A tiles stream through a ring too (reloaded per N tile);
    several M and N tiles, with and without a bias, ReLU, int8 output into a second matmul."""
    cfg = tc.ChipConfig.preset("tiny").replace(name="tinyspm", spm_rows=256, dram_bytes=1 << 20)
    f, x = _gemm(M, 2000, 6, bias=bias, relu=True, seed=M)
    w2 = np.random.default_rng(5).standard_normal((6, 5)).astype(np.float32)
    cm, _ = _check(lambda a: f(a) @ tc.Tensor(w2), x, cfg, rel=0.05)
    t = cm.kernels[0].tiling
    assert t.a_ring and weight_mode(t) == "ring" and t.MT > 1 and t.NT > 1 and t.KT > cfg.spm_rows


@pytest.mark.parametrize("M", [450, 257])
def test_a_ring_slots_are_freed_by_the_mm_only(M):
    """An A ring with short K (16 tiles) and a short last M tile (2 or 1 rows), as the bank-aligned
    tiling of a config with 4 banks chooses it: a K tile's A and weight slots are freed together by
    its ``mm``. (Freed by the ``lw`` too, an ``lw`` retiring before an earlier ``mm`` let the next
    A load overwrite rows that ``mm`` still read: RACE.)"""
    cfg = tc.ChipConfig.preset("tiny").replace(name="tiny4banks", spm_bank_rows=256, acc_bank_rows=64)
    f, x = _gemm(M, 64, 64, bias=True, relu=True, seed=M)
    w2 = np.random.default_rng(6).standard_normal((64, 10)).astype(np.float32)
    cm, _ = _check(lambda a: f(a) @ tc.Tensor(w2), x, cfg, rel=0.05)
    t = cm.kernels[0].tiling
    assert t.a_ring and t.MT > 1 and t.M % t.Mt < 4


def test_a_ring_takes_fewer_slots_where_its_first_choice_does_not_fit():
    """K = 39 tiles on the banked FPGA build's memories (``rtl.fpga.fit.fpga_memory``: SPM 256 rows, ACC 64
    in banks of 16): ``ring_slots`` gives 13 slots, whose 16-row A slots (a whole ACC bank per M tile) and
    weight slots need 260 rows; a ring of 3 (the next divisor of 39) fits. (Before: a refusal naming
    spm_rows, as for ResNet-18's 7x7 stem convolution, K = 147.)"""
    from compiler.lower.tiling import ring_candidates, ring_slots
    cfg = tc.ChipConfig.preset("tiny").replace(name="tinybanked", spm_rows=256, acc_rows=64, spm_bank_rows=16,
                                               acc_bank_rows=16, dram_bytes=1 << 20)
    assert ring_slots(39) == 13 and ring_candidates(39) == [13, 3, 1]
    f, x = _gemm(40, 39 * 4, 8, bias=True, relu=True, seed=39)
    cm, _ = _check(f, x, cfg, rel=0.05)
    t = cm.kernels[0].tiling
    assert t.a_ring and t.KT == 39 and t.NB == 3 and t.Mt % cfg.acc_bank_rows == 0


@pytest.mark.parametrize("int8,bias,relu", [(False, True, True), (False, False, False), (True, True, True),
                                              (True, False, False)])
def test_an_a_ring_shares_each_a_tile_among_n_tiles(int8, bias, relu, monkeypatch):
    """150 K tiles beside ACC too short for tall M tiles: an A ring loads an M tile's A tile and a weight tile
    per ``mm``, more rows than the array streams, unless each A tile serves several N tiles (``Tiling.ng``).
    Int32 output on the banked FPGA memories (SPM 256 rows in banks of 64, ACC 64 in banks of 16: each N
    tile's region a whole bank), int8 output into a second matmul on 64 ACC rows of one bank (6 scale rows), with and
    without a bias and a ReLU; 6 N tiles, the last one 3 columns wide, so groups 0, 1 and 2 of 2 (first,
    middle, last) and an edge M tile. Bit-exact, and in fewer cycles than the same ring with one N tile per
    A tile."""
    from compiler.lower import tiling
    if int8:
        cfg = tc.ChipConfig.preset("tiny").replace(name="tinyacc64", spm_rows=256, acc_rows=64, dram_bytes=1 << 20)
    else:
        cfg = tc.ChipConfig.preset("tiny").replace(name="tinybanked", spm_rows=256, acc_rows=64, spm_bank_rows=64,
                                                   acc_bank_rows=16, dram_bytes=1 << 20)
    f, x = _gemm(45, 600, 23, bias=bias, relu=relu, seed=23)
    w2 = np.random.default_rng(7).standard_normal((23, 5)).astype(np.float32)
    model = (lambda a: f(a) @ tc.Tensor(w2)) if int8 else f
    cm, res = _check(model, x, cfg, rel=0.05)
    t = cm.kernels[0].tiling
    assert t.a_ring and t.ng == 2 and t.NT == 6 and t.KT == 150 and t.M % t.Mt
    assert not int8 or cm.kernels[1].tiling.ng == 1
    monkeypatch.setattr(tiling, "a_ring_groups", lambda cfg, t, out_int8, run: t)
    cm1, res1 = _check(model, x, cfg, rel=0.05)
    assert cm1.kernels[0].tiling.ng == 1
    assert res.stats.cycles < res1.stats.cycles, (res.stats.cycles, res1.stats.cycles)


@pytest.mark.parametrize("M,K,N", [(96, 512, 16), (16, 1152, 32), (9, 2400, 6)])
def test_short_m_tiles_give_way_to_an_a_ring(M, K, N, monkeypatch):
    """K = 512 (128 K tiles) on the ``tiny`` preset: two A buffers of a whole row of A tiles leave M tiles of
    a few rows, each ``mm`` shorter than the next weight load's wait (``mxu_swap_delay`` + rows); with
    K = 1152 or 2400 and M = 16 or 9 (a late ResNet layer), M tiles of 3 or 1 rows, each reloading every
    weight tile. ``choose`` estimates an A ring (shared by several N tiles where that helps) faster
    (``tiling.est_cycles``) and takes it: bit-exact, and in fewer cycles than the resident tiling it chose
    before (``group_ok=False``)."""
    from compiler.lower import tiling
    f, x = _gemm(M, K, N, seed=M)
    cm, res = _check(f, x, "tiny")
    t = cm.kernels[0].tiling
    assert t.a_ring and t.Mt >= min(tiling.short_mm(cm.config), M)
    choose = tiling.choose
    monkeypatch.setattr(pipeline, "choose", lambda *a, **k: choose(*a, **dict(k, group_ok=False)))
    cm0, res0 = _check(f, x, "tiny")
    t0 = cm0.kernels[0].tiling
    assert not t0.a_ring and t0.Mt < min(tiling.short_mm(cm.config), M)
    assert tiling.est_cycles(cm.config, t) < tiling.est_cycles(cm.config, t0)
    assert res.stats.cycles < res0.stats.cycles, (res.stats.cycles, res0.stats.cycles)


@pytest.mark.parametrize("bias,relu,chain", [(True, True, False), (True, False, False), (False, False, True)])
def test_grouped_weights_load_one_n_tile_ahead(bias, relu, chain):
    """Tall M tiles and many N tiles: each N tile's weights are one DMA, loaded during the previous
    N tile (int8 and int32 outputs, with and without a bias, middle N tiles in a loop). Without a
    bias, groups need more than one M tile (``choose``): ACC rows for two M tiles of 350 rows."""
    f, x = _gemm(400 if bias else 700, 40, 150, bias=bias, relu=relu, seed=7)
    w2 = np.random.default_rng(8).standard_normal((150, 60)).astype(np.float32)
    g = (lambda a: f(a) @ tc.Tensor(w2)) if chain else f
    cfg = "base" if bias else tc.ChipConfig.preset("base").replace(name="base700", acc_rows=700 + 10)
    cm, _ = _check(g, x, cfg)
    t = cm.kernels[0].tiling
    assert weight_mode(t) == "group" and t.NT > 2 and (bias or t.MT > 1)


@pytest.mark.parametrize("bias", [True, False])
def test_one_m_tile_without_bias_streams_tiles(bias, monkeypatch):
    """One M tile and no bias: per-tile weight loads (the next N tile's first tile, not its whole group,
    gates its first matmul); with a bias, groups (loaded ahead of the bias load that waits for ACC).
    Both bit-exact; without a bias the tiles are not slower on the simulator than groups (with a bias
    the rule is the earlier one: groups are not always faster, 75,709 against 75,653 cycles here)."""
    f, x = _gemm(512, 256, 128, bias=bias, seed=3)
    cm, res = _check(f, x, "base")
    t = cm.kernels[0].tiling
    assert t.MT == 1 and weight_mode(t) == ("group" if bias else "tile")
    choose = pipeline.choose
    monkeypatch.setattr(pipeline, "choose", lambda *a, **k: choose(*a, **{**k, "bias": not k["bias"]}))
    other, ores = _check(f, x, "base")
    assert weight_mode(other.kernels[0].tiling) != weight_mode(t)
    assert bias or res.stats.cycles <= ores.stats.cycles


@pytest.mark.parametrize("M,K,N,config", [(2, 8, 3000, ChipConfig.preset("tiny").replace(dram_bytes=1 << 17)),
                                          (4, 64, 256, BANKED)])
def test_wide_int8_outputs_run_as_codes_of_fewer_n_tiles(M, K, N, config):
    """An ACC row of per-channel scales per N tile, held for the whole kernel: 750 N tiles beside tiny's 256 ACC
    rows, 64 beside 64 ACC rows in banks of 16 (two regions of a bank each and the scale rows from a bank) do not
    fit, so the kernel runs as several codes of fewer N tiles, each with its own scale rows."""
    f, x = _gemm(M, K, N, bias=True, relu=True, seed=N)
    w2 = np.random.default_rng(5).standard_normal((N, 3)).astype(np.float32)
    cm, _ = _check(lambda a: f(a) @ tc.Tensor(w2), x, config, rel=0.05)
    codes = [k for k in cm.kernels if k.name.startswith("matmul0")]
    assert len(codes) > 1 and sum(k.N for k in codes) == N
    assert all(2 * k.tiling.Mt + k.tiling.NT <= k.tiling.acc_rows <= cm.config.acc_rows for k in codes)


def test_code_size_does_not_grow_with_k():
    """K tiles run as loops: 64 or 256 K tiles, the same code (one M tile each)."""
    sizes = []
    for K in (1024, 4096):
        f, x = _gemm(64, K, 40, bias=True, relu=True, seed=K)
        sizes.append(len(tc.compile(f, [x], config="base").program))
    assert sizes[0] == sizes[1]


class _Basic(tc.nn.Module):
    def __init__(self, cin, cout, stride):
        self.a = tc.nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
        self.b = tc.nn.Conv2d(cout, cout, 3, padding=1)
        self.down = tc.nn.Conv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        idn = self.down(x) if self.down is not None else x
        return (self.b(self.a(x).relu()) + idn).relu()


class _ResNet18(tc.nn.Module):
    """ResNet-18's convolutions at ImageNet size; a 3x3 stride-2 conv stands in for the max-pool."""

    def __init__(self):
        self.stem = tc.nn.Conv2d(3, 64, 7, stride=2, padding=3)
        self.pool = tc.nn.Conv2d(64, 64, 3, stride=2, padding=1)
        plan = [(64, 64, 1), (64, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1),
                (256, 512, 2), (512, 512, 1)]
        self.blocks = [_Basic(*p) for p in plan]

    def forward(self, x):
        h = self.pool(self.stem(x).relu()).relu()
        for b in self.blocks:
            h = b(h)
        return h


def test_resnet18_at_224_fits_instruction_memory():
    tc.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    cm = tc.compile(_ResNet18(), [x], config="base")
    assert sum(k.kind == "gemm" for k in cm.kernels) == 21
    assert len(cm.program) <= cm.config.imem_words // 2


def test_wide_zero_borders_are_nests():
    """A padded tensor's border rows longer than the zero block: whole blocks are one store over a
    nest level (not one store each), and the result is bit-exact with garbage in DRAM."""
    tc.manual_seed(2)
    stem, block = tc.nn.Conv2d(2, 8, 3, padding=1), _Basic(8, 8, 1)
    x = np.random.default_rng(4).standard_normal((1, 2, 5, 150)).astype(np.float32)
    cm = tc.compile(lambda a: block(stem(a).relu()), [x], config="small")
    fill = cm.asm.split("zero the border")[1].split("; kernel")[0]
    assert "rows=64" in fill and "rep=l0:" in fill
    outs = run_on_garbage_dram(cm, x)
    np.testing.assert_array_equal(outs[0], cm.reference(x)[0])
    real = block(stem(tc.Tensor(x)).relu()).numpy()
    assert np.abs(outs[0] - real).max() < 0.05 * np.abs(real).max()


def test_resnet18_at_64_runs_bit_exact():
    """The same network at 64x64 (layer 4 at 2x2) on the simulator: every K-loop shape of the
    224x224 compile (the same K per layer), bit-exact, close to the float network."""
    tc.manual_seed(0)
    m = _ResNet18()
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    cm = tc.compile(m, [x], config="base")
    res = tc.Device("sim").run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    real = m(tc.Tensor(x)).numpy()
    assert np.abs(res.outputs[0] - real).max() < 0.1 * np.abs(real).max()
