"""The lowerings that place their own SPM/ACC rows, on memories of banks (docs/microarchitecture.md section 4:
two units that write one bank at once race, and the simulator stops the program with ``RACE``).

The presets' banks are one row each, so these run the same models on the presets with SPM and ACC in four
banks each: the transformer block (its LayerNorm's constants, loaded while the VPU starts, in a bank of their
own), tensor parallelism (the all-reduce's scratch apart from the sums it adds into, the all-gather's two link
buffers in banks of their own), the interleaved pipeline's exchanges (the buffers the load unit writes apart
from those the link receiver writes) and a program whose GEMM tiling leaves room for the zero rows and the
output staging's bank. Every run must equal the single-chip reference bit for bit."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower import shard
from isa import ChipConfig
from test_lower_embedding import TextCNN
from test_shard_interleave import deep  # noqa: F401  (the fixture: eight linear layers)

nn = tc.nn


def four_banks(name: str) -> ChipConfig:
    """Preset ``name`` with SPM and ACC each in four banks."""
    cfg = ChipConfig.preset(name)
    return cfg.replace(name=f"{name}-4banks", spm_bank_rows=cfg.spm_rows // 4, acc_bank_rows=cfg.acc_rows // 4)


def _x(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _exact(res, ref):
    assert len(res.outputs) == len(ref)
    for got, want in zip(res.outputs, ref):
        np.testing.assert_array_equal(got, want)


def test_transformer_block():
    cfg = four_banks("small")
    tc.manual_seed(5)
    block = nn.TransformerBlock(32, 4)
    cm = tc.compile(block, _x((1, 32, 32), 5), config=cfg, dynamic={"T": 32})
    assert cm.fused
    dev = tc.Device("sim", config=cfg)
    for T in (7, 32):
        x = _x((1, T, 32), T)
        res = dev.run(cm, x)
        assert np.array_equal(res.ints["out"][:, :T], cm.reference_int(x)), T
        assert np.array_equal(res.outputs[0], cm.reference(x)[0]), T


def _wide():
    tc.manual_seed(1)
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 24), nn.ReLU(), nn.Linear(24, 10))


@pytest.mark.parametrize("chips", [2, 3])
def test_tensor_parallel_all_reduce_and_all_gather(chips):
    cfg = four_banks("small")
    mlp = _wide()
    x = _x((5, 32), chips)
    ref = tc.compile(mlp, [x], cfg).reference(x)
    sm = tc.compile(mlp, [x], cfg, chips=chips, parallel="tensor")
    assert [kind for _, kind in sm.collectives] == ["all-reduce", "all-gather"]
    _exact(tc.Device("sim", config=cfg, chips=chips).run(sm, x), ref)


def test_link_buffers_start_banks():
    """The two groups of chunk buffers (written by different units at once) each start a bank; on the preset
    they are packed from the first free row."""
    cfg = four_banks("tiny")
    bank = cfg.spm_bank_rows
    zero = cfg.spm_rows - 64                                     # zero rows at the top: rows 0..959 are free
    a, b, h = shard._glue_rows(cfg, zero)
    assert a % bank == 0 and b % bank == 0 and b >= a + h and b // bank != (a + h - 1) // bank
    x0, x1, y0, y1, h = shard._exchange_rows(cfg, zero)
    assert x1 == x0 + h and y1 == y0 + h and y0 % bank == 0 and y0 >= x1 and (x1 + h - 1) // bank < y0 // bank
    assert shard._glue_rows(ChipConfig.preset("tiny"), zero)[:2] == (0, shard.CHUNK_ROWS)


def test_link_buffers_need_two_banks():
    cfg = ChipConfig.preset("tiny").replace(name="tiny-2banks", spm_bank_rows=512)
    with pytest.raises(tc.ChipCompileError, match="need two SPM banks"):
        shard._glue_rows(cfg, 64)                                # rows 128..1023 free: one whole bank only


def test_interleaved_pipeline_exchanges(deep):  # noqa: F811  (the imported fixture)
    cfg = four_banks("small")
    x = _x((8, 32), 2)
    ref = tc.compile(deep, [x], cfg).reference(x)
    sm = tc.compile(deep, [x], cfg, chips=2, parallel="pipeline", micro_batches=8, interleave=2)
    assert sm.interleave == 2
    _exact(tc.Device("sim", config=cfg, chips=2).run(sm, x), ref)


def test_gemm_tiling_leaves_a_bank_for_the_zero_rows_and_staging():
    """The convolution's tiling fills SPM; beside the zero rows alone its output staging (the VPU's) would
    need a bank apart from its A tiles and weights (the load unit's): the model is lowered again with a
    whole bank left free."""
    cfg = four_banks("tiny")
    tc.manual_seed(2)
    model = TextCNN(50, 16)
    idx = np.random.default_rng(80).integers(-50, 50, (2, 80))
    cm = tc.compile(model, idx, config=cfg)
    res = tc.Device("sim", config=cfg).run(cm, {"x": idx})
    np.testing.assert_array_equal(res.outputs[0], cm.reference({"x": idx})[0])


@pytest.mark.parametrize("cfg", [four_banks("tiny"), ChipConfig.preset("tiny").replace(
    name="tiny-fpga-banked", spm_rows=256, acc_rows=64, spm_bank_rows=64, acc_bank_rows=16)], ids=["4banks", "fpga"])
def test_bank_aligned_tilings_keep_the_emitters_rules(cfg):
    """M tiles of whole ACC banks may cut one M tile into several, or leave only an A ring: over a grid of GEMM
    shapes, every tiling still obeys the emitter's rules: an int32 GEMM with a bias loaded into ACC, which may not
    have a single A buffer, has two when it has several M tiles (no store -> load gate), and an A ring streams
    beside a weight ring (fewer weight slots than K tiles, ``emit.weight_mode``)."""
    import itertools

    from compiler.lower.emit import weight_mode
    from compiler.lower.tiling import choose
    rings = multi = 0
    for M, KT, N, int8, single_ok in itertools.product((50, 100, 300, 1000), (1, 2, 3, 4, 5, 9, 16, 40),
                                                       (4, 8, 16, 64), (True, False), (True, False)):
        try:
            t = choose(cfg, M, KT, N, int8, 1, "test", single_ok=single_ok, bias=True)
        except tc.ChipCompileError:
            continue
        assert t.Mt % cfg.acc_bank_rows == 0
        if t.a_ring:
            rings += 1
            assert weight_mode(t) == "ring", (M, KT, N, t)
        elif t.MT > 1 and not single_ok:
            multi += 1
            assert t.nbuf >= 2, (M, KT, N, t)
    assert rings and multi                        # the grid reaches both rules


def test_tiling_search(tmp_path):
    cfg = four_banks("small")
    tc.manual_seed(7)
    mlp = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 40))
    x = _x((200, 64), 7)
    cm = tc.compile(mlp, [x], config=cfg, search=True, search_budget_s=2.0, cache_dir=str(tmp_path))
    assert all(k.tiling.Mt % cfg.acc_bank_rows == 0 for k in cm.kernels if hasattr(k.tiling, "Mt"))
    res = tc.Device("sim", config=cfg).run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])


def test_symbolic_batch_m_tiles_are_whole_banks():
    """Two rows a batch element, at most 24 elements, ACC banks of 16 rows: an M tile of 8 elements (16 rows),
    not of 12 (24 rows, a bank and a half: the MXU would write one region while the VPU's ReLU writes the
    other's bank)."""
    cfg = ChipConfig.preset("tiny").replace(name="tiny-fpga-banked", spm_rows=256, acc_rows=64, spm_bank_rows=64,
                                            acc_bank_rows=16)
    rng = np.random.default_rng(4)
    W = rng.standard_normal((8, 8)).astype(np.float32)

    def f(x):
        return (x @ tc.Tensor(W)).relu()
    cm = tc.compile(f, [rng.standard_normal((24, 2, 8)).astype(np.float32)], config=cfg, dynamic={"N": 24})
    (k,) = cm.kernels
    assert k.tiling.Mt % cfg.acc_bank_rows == 0
    dev = tc.Device("sim", config=cfg)
    for n in (1, 9, 24):
        x = rng.standard_normal((n, 2, 8)).astype(np.float32)
        np.testing.assert_array_equal(dev.run(cm, x).outputs[0], cm.reference(x)[0])

