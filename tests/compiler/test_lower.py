"""Compiled models on the simulator: bit-exact against the quantized reference, errors before simulation."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.quantize import run_int
from compiler.lower.schedule import ChipCompileError
from isa.config import ChipConfig
from isa.errors import TetrachipError


def _run(fn, inputs, config):
    cm = tc.compile(fn, inputs, config=config)
    res = tc.Device("sim", config=config).run(cm, *inputs)
    return cm, res


def _sym_int8(x):
    s = np.abs(x).max() / 127
    return np.clip(np.rint(x / s), -127, 127).astype(np.int64), s


GEMM_SHAPES = [(1, 1, 1, "tiny"), (1, 7, 1, "small"), (5, 1, 9, "small"), (3, 17, 5, "tiny"), (33, 70, 19, "base"),
               (16, 16, 16, "base"), (100, 24, 1, "small"), (129, 17, 9, "tiny"), (7, 130, 37, "small"),
               (300, 40, 20, "small")]


@pytest.mark.parametrize("M,K,N,config", GEMM_SHAPES)
def test_gemm_int32_equals_integer_matmul(M, K, N, config):
    rng = np.random.default_rng(M * 1000 + K * 10 + N)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    cm, res = _run(lambda a: a @ tc.Tensor(w), [x], config)
    # independent expectation: symmetric int8 input, per-column int8 weights, exact int32 product
    xq, _ = _sym_int8(x)
    ws = np.where(np.abs(w).max(0) > 0, np.abs(w).max(0) / 127, 1.0)
    wq = np.clip(np.rint(w / ws), -127, 127).astype(np.int64)
    (t,) = res.ints
    assert np.array_equal(res.ints[t].reshape(M, N), xq @ wq)
    assert np.array_equal(res.outputs[0], cm.reference(x)[0])


@pytest.mark.parametrize("M,K,H,N,config", [(45, 30, 21, 4, "small"), (700, 40, 37, 10, "small"),
                                            (64, 64, 64, 64, "base"), (9, 5, 3, 2, "tiny")])
def test_fused_mlp_bit_exact(M, K, H, N, config):
    rng = np.random.default_rng(K + H)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w1, b1 = rng.standard_normal((K, H)).astype(np.float32), rng.standard_normal(H).astype(np.float32)
    w2 = rng.standard_normal((H, N)).astype(np.float32)

    def fn(a):
        return ((a @ tc.Tensor(w1)) + tc.Tensor(b1)).relu() @ tc.Tensor(w2)

    cm, res = _run(fn, [x], config)
    _, ref = run_int(cm.qsched, cm.feeds([x]))
    for t, v in res.ints.items():
        assert np.array_equal(v, ref[t])
    assert len(cm.kernels) == 2 and cm.qsched.qkernels[0].out_int8
    assert res.stats.mxu_macs >= M * K * H
    real = np.maximum(x @ w1 + b1, 0) @ w2
    assert np.abs(res.outputs[0] - real).max() < 0.05 * np.abs(real).max()


class _CNN(tc.nn.Module):
    def __init__(self):
        self.c1 = tc.nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = tc.nn.Conv2d(8, 12, 3, stride=2, padding=1)
        self.fc = tc.nn.Linear(12 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(self.c2(self.c1(x).relu()).relu().flatten(1))


@pytest.mark.parametrize("config", ["small", "base"])
def test_cnn_bit_exact_and_close_to_float(config):
    tc.manual_seed(3)
    model = _CNN()
    x = np.random.default_rng(0).standard_normal((3, 1, 6, 6)).astype(np.float32)
    cm, res = _run(model, [x], config)
    assert [k.name[:4] for k in cm.kernels] == ["conv", "conv", "matm"]
    assert np.array_equal(res.outputs[0], cm.reference(x)[0])
    real = model(tc.Tensor(x)).numpy()
    assert np.abs(res.outputs[0] - real).max() < 0.1 * np.abs(real).max()


def test_conv_stride_taps_loaded_by_strided_dma():
    tc.manual_seed(1)
    conv = tc.nn.Conv2d(16, 16, 3, padding=1)
    x = np.random.default_rng(2).standard_normal((1, 16, 5, 5)).astype(np.float32)
    cm, res = _run(conv, [x], "base")
    # (kw, ci) of one kernel row are contiguous bytes in NHWC: 3 K tiles per row of taps
    assert cm.kernels[0].ktiles == 9
    assert np.array_equal(res.outputs[0], cm.reference(x)[0])
    text = cm.program.disassemble()
    assert "rep=l1:1, signal=mxu, sync=once" in text and "wait=load" in text


def test_unsupported_op_named_before_simulation():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ChipCompileError, match="PROD"):
        tc.compile(lambda a: (a @ tc.Tensor(np.ones((3, 2), np.float32))).prod(1), [x], config="base")
    with pytest.raises(ChipCompileError, match="varies per element"):
        per_element = tc.Tensor(np.arange(400.0).reshape(2, 200))
        tc.compile(lambda a: (a @ tc.Tensor(np.ones((3, 200), np.float32))).relu() * per_element, [x], config="base")
    with pytest.raises(ChipCompileError, match="MUL.*elementwise product of two activations"):
        tc.compile(lambda a: (a @ tc.Tensor(np.ones((3, 2), np.float32))) * a[:, :2], [x], config="base")
    with pytest.raises(ChipCompileError, match="nothing to run"):
        tc.compile(lambda a: a.reshape(3, 2), [x], config="base")


def test_shapes_beyond_the_chip_name_the_dimension():
    x = np.ones((2, 1024), np.float32)      # 64 K tiles: not even 4 weight slots fit 16 SPM rows
    tight = ChipConfig.preset("base").replace(name="tightspm", spm_rows=16)
    with pytest.raises(ChipCompileError, match="K = 64 tiles .*spm_rows"):
        tc.compile(lambda a: a @ tc.Tensor(np.ones((1024, 2), np.float32)), [x], config=tight)
    x = np.ones((2, 8), np.float32)
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((8, 3000)).astype(np.float32), rng.standard_normal((3000, 2)).astype(np.float32)
    acc2 = ChipConfig.preset("tiny").replace(name="acc2", acc_rows=2)      # no room for a scale row
    with pytest.raises(ChipCompileError, match="N = 3000"):
        tc.compile(lambda a: (a @ tc.Tensor(w1)).relu() @ tc.Tensor(w2), [x], config=acc2)
    few = ChipConfig.preset("small").replace(name="fewwords", imem_words=40)
    with pytest.raises(ChipCompileError, match="imem_words"):
        tc.compile(lambda a: a @ tc.Tensor(w1[:, :50]), [x], config=few)


def test_invalid_config_is_a_clear_error():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(TetrachipError, match="unknown config"):
        tc.compile(lambda a: a @ tc.Tensor(np.ones((3, 2), np.float32)), [x], config="nope")


class _Block(tc.nn.Module):
    """A ResNet basic block: conv+bias+ReLU, conv+bias, + identity, ReLU."""

    def __init__(self, c):
        self.a = tc.nn.Conv2d(c, c, 3, padding=1)
        self.b = tc.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return (self.b(self.a(x).relu()) + x).relu()


def test_residual_block_runs_with_an_elementwise_kernel():
    tc.manual_seed(2)
    stem, block = tc.nn.Conv2d(2, 8, 3, padding=1), _Block(8)
    x = np.random.default_rng(4).standard_normal((2, 2, 5, 5)).astype(np.float32)
    cm, res = _run(lambda a: block(stem(a).relu()), [x], "small")
    assert [k.kind for k in cm.kernels] == ["gemm", "gemm", "gemm", "elementwise"]
    assert np.array_equal(res.outputs[0], cm.reference(x)[0])
    real = block(stem(tc.Tensor(x)).relu()).numpy()
    assert np.abs(res.outputs[0] - real).max() < 0.05 * np.abs(real).max()


def test_chain_of_adds_is_one_vpu_pass():
    rng = np.random.default_rng(5)
    ws = [rng.standard_normal((6, 6)).astype(np.float32) for _ in range(3)]

    def fn(a):
        y0, y1, y2 = (a @ tc.Tensor(w) for w in ws)
        return (((y0 + y1).relu() @ tc.Tensor(ws[0])) + y2 + y1)

    x = rng.standard_normal((7, 6)).astype(np.float32)
    cm, res = _run(fn, [x], "tiny")
    kinds = [k.kind for k in cm.kernels]
    assert kinds.count("elementwise") == 2 and cm.kernels[-1].K == 3      # (.. + y2 + y1): one kernel, 3 inputs
    assert np.array_equal(res.outputs[0], cm.reference(x)[0])


def test_invalid_config_file_and_too_few_registers(tmp_path):
    x = np.ones((2, 3), np.float32)
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    bad = tmp_path / "bad.toml"
    bad.write_text('preset = "base"\nrows = 32\n')
    with pytest.raises(TetrachipError, match="rows \\(32\\) must be <= cols"):
        tc.compile(lambda a: a @ tc.Tensor(w), [x], config=str(bad))
    few = ChipConfig.preset("base").replace(name="fewregs", scalar_regs=8)
    with pytest.raises(ChipCompileError, match="need 14 scalar registers, it has 8"):
        tc.compile(lambda a: a @ tc.Tensor(w), [x], config=few)


def run_on_garbage_dram(cm, x) -> list:
    """The compiled model's outputs on a simulated chip whose DRAM is random bytes before the host's
    writes (what the program must zero itself, e.g. padded borders), as the host reads them back."""
    from sim import Chip
    chip = Chip(cm.config)
    chip.load(cm.program)
    chip.dram[:] = np.random.default_rng(9).integers(0, 256, chip.dram.shape, dtype=np.uint8)
    for addr, data in cm.dram_writes(cm.feeds([x])):
        chip.write_dram(addr, data)
    chip.run()
    return cm.read_outputs(chip.read_dram)[0]


def test_padded_tensors_zero_their_border_on_chip():
    """DRAM full of garbage before launch: borders of padded intermediates are zeroed by the program."""
    tc.manual_seed(2)
    stem, block = tc.nn.Conv2d(2, 8, 3, padding=1), _Block(8)
    x = np.random.default_rng(4).standard_normal((1, 2, 6, 6)).astype(np.float32)
    cm = tc.compile(lambda a: block(stem(a).relu()), [x], config="small")
    assert any(t.padded and t.kind == "kernel" for t in cm.qsched.sched.tensors)
    outs = run_on_garbage_dram(cm, x)
    assert np.array_equal(outs[0], cm.reference(x)[0])


@pytest.mark.parametrize("M,K,N", [(3, 17, 5), (129, 17, 9), (33, 70, 19)])
def test_gemm_on_a_config_with_banks_runs_without_races(M, K, N):
    """With banks (two units writing one bank at once race, docs/microarchitecture.md section 4) the
    GEMM's M tiles are whole ACC banks: the MXU's region, the epilogue's (``vrelu`` in place) and the
    scale rows never share one, so the program runs (no RACE) and equals the reference. The same
    tiling without the alignment races (the check is not vacuous)."""
    import compiler.lower.tiling as tiling
    cfg = ChipConfig.preset("tiny").replace(spm_bank_rows=16, acc_bank_rows=4)
    rng = np.random.default_rng(M + K + N)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)

    def fn(a):
        return (a @ tc.Tensor(w)).relu()
    cm, res = _run(fn, [x], cfg)
    assert np.array_equal(res.outputs[0], cm.reference(x)[0])
    orig = tiling._bank_aligned
    try:
        tiling._bank_aligned = lambda cfg, t, *rest: t
        with pytest.raises(TetrachipError, match="RACE"):
            _run(fn, [x], cfg)
    finally:
        tiling._bank_aligned = orig


def test_a_tiling_with_banks_falls_back_to_one_a_buffer():
    """An M tile grown to a whole ACC bank whose two A buffers no longer fit SPM (the FPGA build's
    64 rows) takes one A buffer; without ``single_ok`` (an int32 output with a bias) it does not."""
    from compiler.lower.tiling import Tiling, _bank_aligned
    cfg = ChipConfig.preset("tiny").replace(spm_rows=64, acc_rows=32, spm_bank_rows=16, acc_bank_rows=8)
    # K = 3 tiles, 3 weight slots (12 rows), 2 staging rows per M row: two 6-row A buffers = 64 rows
    t = Tiling(M=100, N=4, KT=3, NT=1, Mt=6, MT=17, NB=3, nbuf=2, spm_rows=2 * 3 * 6 + 12 + 2 * 6, acc_rows=13)
    got = _bank_aligned(cfg, t, 1, True)
    assert (got.Mt, got.MT, got.nbuf, got.spm_rows, got.acc_rows) == (8, 13, 1, 3 * 8 + 12 + 2 * 8, 2 * 8 + 1), got
    assert _bank_aligned(cfg, t, 1, False) is None
