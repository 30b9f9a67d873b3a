"""Models sharded over chips (``tc.compile(..., chips=N, parallel=...)``, compiler/lower/shard.py) on
``Device("sim", chips=N)`` (``sim.System``).

Every sharded run must return the single-chip model's ``reference`` bit for bit. The link bytes a
pipeline moves are computed here from the model's shapes (each boundary activation of a micro-batch,
whole SPM rows of ``cols`` bytes); a data-parallel run moves none."""
import numpy as np
import pytest

import tetrachip as tc
from isa import ChipConfig
from isa.ints import cdiv

nn, F = tc.nn, tc.functional


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(32, 64), nn.Linear(64, 48), nn.Linear(48, 10)

    def forward(self, x):
        return self.c(self.b(self.a(x).relu()).relu())


class ResCNN(nn.Module):
    """A padded 3x3 conv whose output fans out to a second conv and a residual add two kernels later."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8 * 6 * 6, 5)

    def forward(self, x):
        a = self.c1(x).relu()
        b = self.c3(self.c2(a).relu())
        y = (a + b).relu()
        return self.fc(y.reshape(y.shape[0], -1))


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _exact(res, ref):
    assert len(res.outputs) == len(ref)
    for got, want in zip(res.outputs, ref):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def mlp():
    tc.manual_seed(1)
    return MLP()


@pytest.mark.parametrize("chips,batch", [(2, 8), (4, 8), (3, 5), (2, 1 + 2)])
def test_data_parallel_is_bit_exact_and_moves_nothing(mlp, chips, batch):
    x = _x((batch, 32), batch)
    single = tc.compile(mlp, [x], "small")
    sm = tc.compile(mlp, [x], "small", chips=chips, parallel="data")
    assert sm.parallel == "data" and sm.chips == chips and sm.piece == cdiv(batch, chips)
    res = tc.Device("sim", config="small", chips=chips).run(sm, x)
    _exact(res, single.reference(x))
    assert len(res.stats) == chips and res.stats.link_bytes == 0
    assert res.stats.cycles == max(st.cycles for st in res.stats)


@pytest.mark.parametrize("chips,micro", [(2, 4), (3, 3), (3, 6)])
def test_pipeline_is_bit_exact_and_sends_the_boundary_activations(mlp, chips, micro):
    batch = 6
    x = _x((batch, 32), 7)
    single = tc.compile(mlp, [x], "small")
    sm = tc.compile(mlp, [x], "small", chips=chips, parallel="pipeline", micro_batches=micro)
    res = tc.Device("sim", config="small", chips=chips).run(sm, x)
    _exact(res, single.reference(x))
    # stages: contiguous, non-empty, covering the three layers in order
    assert [a for a, _ in sm.stages] == sorted(a for a, _ in sm.stages) and sm.stages[0][0] == 0
    assert all(b > a for a, b in sm.stages) and sm.stages[-1][1] == 3
    assert all(sm.stages[i][1] == sm.stages[i + 1][0] for i in range(chips - 1))
    # each boundary carries the activation after its last layer: piece x width int8, in whole SPM rows
    cols = ChipConfig.preset("small").cols
    widths = (64, 48)
    piece = cdiv(batch, micro)
    want = [micro * cdiv(piece * widths[b - 1], cols) * cols for _, b in sm.stages[:-1]]
    assert [st.bytes["link_tx"] for st in res.stats] == want + [0]


def test_pipeline_forwards_a_tensor_over_two_stages():
    """The first conv's output is read again by the residual add after two more kernels: when a stage
    boundary falls between, the tensor crosses it (forwarded by the middle chip where it skips one)."""
    tc.manual_seed(3)
    m = ResCNN()
    x = _x((4, 3, 6, 6), 3)
    single = tc.compile(m, [x], "small")
    for chips in (2, 3):
        sm = tc.compile(m, [x], "small", chips=chips, parallel="pipeline", micro_batches=4)
        res = tc.Device("sim", config="small", chips=chips).run(sm, x)
        _exact(res, single.reference(x))
    s = sm.part.qsched.sched
    first = s.kernels[0].out                      # the tensor the fan-out reads later
    readers = [i for i, k in enumerate(s.kernels) if first in _inputs(k)]
    assert max(readers) >= 2                      # read two kernels later
    crossing = [c for c, (a, _) in enumerate(sm.stages[1:]) if a <= max(readers)]
    assert crossing and all(first in [ti for ti, _, _ in sm.live[c]] for c in crossing)


def _inputs(k):
    from compiler.lower.schedule import kernel_inputs
    return kernel_inputs(k)


def test_data_parallel_cnn_and_pipeline_agree():
    tc.manual_seed(4)
    m = ResCNN()
    x = _x((6, 3, 6, 6), 4)
    single = tc.compile(m, [x], "small")
    ref = single.reference(x)
    for par in ("data", "pipeline"):
        sm = tc.compile(m, [x], "small", chips=3, parallel=par)
        _exact(tc.Device("sim", config="small", chips=3).run(sm, x), ref)


def test_auto_picks_the_fewest_cycles_and_caches_the_choice(mlp):
    from compiler.lower import shard
    x = _x((8, 32), 9)
    shard.auto_cache.clear()
    sm = tc.compile(mlp, [x], "small", chips=2)
    assert sm.choices and len(sm.choices) >= 2
    label = sm.parallel if sm.parallel != "pipeline" else f"pipeline/{sm.micro_batches}"
    assert sm.choices[label] == min(sm.choices.values())
    res = tc.Device("sim", config="small", chips=2).run(sm, x)
    assert res.stats.cycles == sm.choices[label]
    assert len(shard.auto_cache) == 1
    again = tc.compile(mlp, [x], "small", chips=2, parallel="auto")
    assert again.choices is None and again.parallel == sm.parallel          # from the cache: nothing simulated
    assert again.micro_batches == sm.micro_batches


def test_a_model_that_mixes_the_batch_is_refused():
    w = _x((16, 4), 1)

    def f(x):
        return (x - x.mean(0, keepdim=True)) @ tc.Tensor(w)
    x = _x((4, 16), 2)
    try:
        tc.compile(f, [x], "small")
    except tc.ChipCompileError:
        pytest.skip("the single-chip compiler refuses a mean over the batch axis")
    with pytest.raises(tc.ChipCompileError, match="mixes samples along axis 0"):
        tc.compile(f, [x], "small", chips=2, parallel="data")


def test_errors_are_clear(mlp):
    x = _x((4, 32))
    with pytest.raises(tc.ChipCompileError, match="chips=0"):
        tc.compile(mlp, [x], "small", chips=0)
    with pytest.raises(tc.ChipCompileError, match="parallel='model'"):
        tc.compile(mlp, [x], "small", chips=2, parallel="model")
    with pytest.raises(tc.ChipCompileError, match="5 pieces of a batch of 4"):
        tc.compile(mlp, [x], "small", chips=5, parallel="data")
    with pytest.raises(tc.ChipCompileError, match="fewer than the chips"):
        tc.compile(mlp, [x], "small", chips=4, parallel="pipeline")
    sm = tc.compile(mlp, [x], "small", chips=2, parallel="data")
    with pytest.raises(tc.TetrachipError, match="sharded over 2 chips; this device has 3"):
        tc.Device("sim", config="small", chips=3).run(sm, x)
    with pytest.raises(tc.TetrachipError, match="batch of 4"):
        tc.Device("sim", config="small", chips=2).run(sm, _x((3, 32)))
    single = tc.compile(mlp, [x], "small")
    with pytest.raises(tc.TetrachipError, match="chips=2"):
        tc.Device("sim", config="small", chips=2).run(single, x)
    with pytest.raises(tc.TetrachipError, match="cannot run a model sharded"):
        tc.Device("numpy").run(sm, x)
    with pytest.raises(tc.TetrachipError, match="chips=-1"):
        tc.Device("sim", config="small", chips=-1)


def _ring_bytes(rows: int, n: int, row_bytes: int, first: int) -> list[int]:
    """Bytes each chip sends in ``n - 1`` ring steps over ``rows`` rows cut in ``n`` near-equal blocks (the first
    ``rows % n`` one row larger), chip ``r`` sending block ``r - k - first`` at step ``k`` (a reduce-scatter:
    ``first = 1``; an all-gather: 0)."""
    size = [rows // n + (1 if b < rows % n else 0) for b in range(n)]
    return [row_bytes * sum(size[(r - k - first) % n] for k in range(n - 1)) for r in range(n)]


def _wide():
    """An MLP whose hidden layer is wide (128) and whose second layer is narrow (24): the Megatron-style pair."""
    tc.manual_seed(1)
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 24), nn.ReLU(), nn.Linear(24, 10))


@pytest.mark.parametrize("chips", [2, 3, 4])
def test_tensor_parallel_mlp_is_bit_exact_and_all_reduces_the_pair(chips):
    """Megatron-style: layer a computes its share of the output features (column parallel) and keeps it; layer b
    multiplies those features by its rows of the weights (row parallel) into int32 partial sums (per N tile the
    batch's rows of ``cols`` int32 lanes), which one all-reduce sums: a ring reduce-scatter of the int32 rows,
    each chip requantizing its block, a ring all-gather of the int8 rows; layer c, whose int32 output is the
    model's, is shared by columns and all-gathered as before: one all-reduce and one all-gather instead of an
    all-gather per layer. The pair moves 4 + 1 bytes per element of b's output (int32 partial sums, int8
    results) where the all-gathers of a's and b's outputs would move 128 + 24 per row: fewer."""
    mlp = _wide()
    x = _x((5, 32), chips)
    single = tc.compile(mlp, [x], "small")
    sm = tc.compile(mlp, [x], "small", chips=chips, parallel="tensor")
    res = tc.Device("sim", config="small", chips=chips).run(sm, x)
    _exact(res, single.reference(x))
    names = [k.name for k in single.qsched.sched.kernels]
    assert sm.collectives == [(names[1], "all-reduce"), (names[2], "all-gather")]
    cfg = ChipConfig.preset("small")
    cols, acc_bytes = cfg.cols, 4
    q = single.qsched
    out = q.sched.outputs[0][0]
    assert q.elem_bytes(out) == 4          # the last layer's output is the model's, kept as int32 accumulators
    rows = 5 * cdiv(24, cols)
    want = [a + b for a, b in zip(_ring_bytes(rows, chips, cols * acc_bytes, 1), _ring_bytes(rows, chips, cols, 0))]
    N, tiles = 10, cdiv(10, cols)
    if tiles >= chips:
        share = [min((c + 1) * tiles // chips * cols, N) - min(c * tiles // chips * cols, N) for c in range(chips)]
    else:
        share = [(c + 1) * N // chips - c * N // chips for c in range(chips)]
    for c in range(chips):                      # step t sends share (c - t) mod chips
        want[c] += sum(5 * cdiv(share[(c - t) % chips] * acc_bytes, cols) * cols for t in range(chips - 1))
    assert [st.bytes["link_tx"] for st in res.stats] == want


def test_tensor_parallel_pair_only_where_it_moves_fewer_bytes(mlp):
    """The test MLP's second layer (64 -> 48) is as wide as its input: an all-reduce of its int32 partial sums
    would move more than the all-gathers of the two layers' int8 outputs, so every layer is all-gathered."""
    x = _x((5, 32), 1)
    sm = tc.compile(mlp, [x], "small", chips=2, parallel="tensor")
    _exact(tc.Device("sim", config="small", chips=2).run(sm, x), tc.compile(mlp, [x], "small").reference(x))
    assert [c for _, c in sm.collectives] == ["all-gather"] * 3


@pytest.mark.parametrize("chips", [2, 4])
def test_tensor_parallel_all_reduce_cycles_are_the_closed_form(chips):
    """The collectives the compiler emits for a row-parallel layer (``shard.AllReduce``: the library's chunked ring
    reduce-scatter of the layer's int32 ACC rows, then its ring all-gather of the requantized int8 SPM rows) sum
    random partial sums exactly and gather every block, each in its closed form (``isa.timing``; blocks and chunks
    even here: 8 rows x 3 N tiles over 2 or 4 chips)."""
    from compiler.lower.shard import AllReduce, _free_spm
    from isa import timing
    from isa.builder import ProgramBuilder
    from isa.table import Space
    from sim import System
    tc.manual_seed(2)
    m = _wide()
    x = _x((8, 32), 3)
    sm = tc.compile(m, [x], "small", chips=chips, parallel="tensor")
    cfg = sm.config
    ars = [AllReduce(next(iter(p.lowered.reduce.values())), c, chips, _free_spm(cfg, p.lowered.zero), cfg)
           for c, p in enumerate(sm.parts)]
    (t0, t1), = ars[0].groups()
    rows = (t1 - t0) * ars[0].red.M
    assert rows == 8 * cdiv(24, cfg.cols) and rows % chips == 0
    b = rows // chips
    rng = np.random.default_rng(0)

    def run(emit, write, read):
        s = System(cfg, chips)
        for c, ar in enumerate(ars):
            e = ProgramBuilder(cfg)
            emit(ar, e)
            e.emit("halt")
            s.load(c, e.build())
        for c in range(chips):
            write(s[c], c)
        s.run()
        for c in range(chips):
            read(s[c], c)
        return s.cycles

    data = [rng.integers(-(1 << 31), 1 << 31, (rows, cfg.cols), dtype=np.int64).astype(np.int32) for _ in range(chips)]
    tot = np.sum(np.array(data, np.int64), axis=0)
    tot = ((tot + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)

    def summed(chip, c):
        assert (chip.read_acc(c * b, b) == tot[c * b:(c + 1) * b]).all()
    cyc = run(lambda ar, e: ar.emit_reduce(e, t0, t1), lambda chip, c: chip.write_acc(0, data[c]), summed)
    assert cyc == timing.reduce_scatter_cycles(cfg, chips, b, AllReduce.CHUNKS)
    blocks = rng.integers(-128, 128, (rows, cfg.cols)).astype(np.int8)
    at = ars[0].spm

    def gathered(chip, c):
        assert (chip.read_spm(at, rows) == blocks).all()
    cyc = run(lambda ar, e: ar.emit_gather(e, t0, t1),
              lambda chip, c: chip.write_spm(at + c * b, blocks[c * b:(c + 1) * b]), gathered)
    assert cyc == timing.all_gather_cycles(cfg, chips, b, Space.SPM, AllReduce.CHUNKS)


def test_tensor_parallel_conv_splits_output_channels():
    tc.manual_seed(5)
    m = ResCNN()
    x = _x((2, 3, 6, 6), 5)
    single = tc.compile(m, [x], "small")
    for chips in (2, 4):
        sm = tc.compile(m, [x], "small", chips=chips, parallel="tensor")
        res = tc.Device("sim", config="small", chips=chips).run(sm, x)
        _exact(res, single.reference(x))
        # each chip's GEMM kernels compute its share of the output channels, the shares cover them once (the 1x1
        # conv after the 3x3 one is no Megatron-style pair: as many outputs as inputs, an all-reduce would move
        # more than the all-gathers)
        assert all(c == "all-gather" for _, c in sm.collectives), sm.collectives
        for k in (k for k in single.kernels if k.kind == "gemm"):
            got = sorted(next(ki.N for ki in p.kernels if ki.name == k.name) for p in sm.parts)
            assert sum(got) == k.N and got[-1] - got[0] <= max(1, k.N // chips), (k.name, got)


@pytest.mark.parametrize("parallel", ["data", "tensor", "pipeline"])
@pytest.mark.parametrize("chips", [4, 6])
def test_strategies_on_a_torus_are_bit_exact_and_move_what_the_ring_moves(parallel, chips):
    """On a 2x2 / 2x3 torus (4 link ports a chip) the strategies run along a cycle of neighbour links: the same
    results and, per chip of the cycle, the same link bytes as on a ring of as many chips."""
    cfg = ChipConfig.preset("small").replace(name="small-4links", links=4)
    tc.manual_seed(6)
    mlp = _deep()
    x = _x((6, 32), 11)
    ref = tc.compile(mlp, [x], cfg).reference(x)
    on = {}
    for topo in ("ring", "torus2d"):
        sm = tc.compile(mlp, [x], cfg, chips=chips, parallel=parallel, topology=topo,
                        micro_batches=6 if parallel == "pipeline" else None)
        res = tc.Device("sim", config=cfg, chips=chips, topology=topo).run(sm, x)
        _exact(res, ref)
        order = sm.order or list(range(chips))
        on[topo] = sorted(res.stats[order[k]].bytes["link_tx"] for k in range(chips))
    assert on["torus2d"] == on["ring"]
    if parallel != "data":
        assert sum(on["ring"]) > 0


def test_tensor_parallel_pair_on_a_torus_moves_what_the_ring_moves():
    """The pair's all-reduce runs along the torus's cycle of neighbour links (its ports): bit-exact, and per chip
    of the cycle the ring's bytes."""
    cfg = ChipConfig.preset("small").replace(name="small-4links", links=4)
    m, x = _wide(), _x((6, 32), 11)
    ref = tc.compile(m, [x], cfg).reference(x)
    on = {}
    for topo in ("ring", "torus2d"):
        sm = tc.compile(m, [x], cfg, chips=4, parallel="tensor", topology=topo)
        assert [c for _, c in sm.collectives] == ["all-reduce", "all-gather"]
        res = tc.Device("sim", config=cfg, chips=4, topology=topo).run(sm, x)
        _exact(res, ref)
        on[topo] = [res.stats[sm.order[k]].bytes["link_tx"] for k in range(4)]
    assert on["torus2d"] == on["ring"]


def test_torus_needs_four_ports(mlp):
    with pytest.raises(tc.ChipCompileError, match="torus2d needs 4 link ports"):
        tc.compile(mlp, [_x((4, 32))], "small", chips=4, parallel="tensor", topology="torus2d")


def _deep():
    """Seven linear layers (enough kernels for a pipeline of 6 stages)."""
    d = (32, 40, 24, 32, 16, 24, 16, 10)
    layers = []
    for i, (a, b) in enumerate(zip(d[:-1], d[1:])):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i + 2 < len(d) else [])
    return nn.Sequential(*layers)


@pytest.mark.parametrize("chips,d,heads", [(2, 32, 2), (4, 64, 4)])
def test_tensor_parallel_transformer_block_all_reduces_the_mlp(chips, d, heads):
    """A transformer block on ``small`` (heads of 16: the per-head products, not the fused attention). The MLP is
    a Megatron-style pair: its first layer by column, GELU on the chip's columns, its second layer row parallel,
    one all-reduce (4 + 1 bytes per element of its d outputs against 4d + 4d + d for the all-gathers of the
    hidden layer, GELU and output). The attention sends nothing for its per-head work: Q/K/V computed by head,
    the scores, softmax and ``p @ v`` on the chip's heads read only what it wrote; the output projection stays
    column parallel (an all-reduce of its int32 sums would move more than the all-gather of ``p @ v``)."""
    tc.manual_seed(0)
    m = nn.TransformerBlock(d, heads)
    x = _x((1, 8, d), 13)
    single = tc.compile(m, [x], "small")
    sm = tc.compile(m, [x], "small", chips=chips, parallel="tensor")
    _exact(tc.Device("sim", config="small", chips=chips).run(sm, x), single.reference(x))
    ks = single.qsched.sched.kernels
    gemms = [k.name for k in ks if type(k).__name__ == "Kernel"]
    bmms = [k.name for k in ks if type(k).__name__ == "BmmKernel"]
    softmax = [k.name for k in ks if k.name.startswith("softmax")]
    assert len(gemms) == 6 and len(bmms) == 2 and len(softmax) == 1
    reduced = [k for k, c in sm.collectives if c == "all-reduce"]
    gathered = {k for k, c in sm.collectives if c == "all-gather"}
    assert reduced == [gemms[5]]                               # the MLP's second layer
    assert not gathered & {*gemms[:3], bmms[0], *softmax, gemms[4]}, sm.collectives
    assert {bmms[1], gemms[3]} <= gathered


def test_transformer_block_module_every_strategy():
    """nn.TransformerBlock (its graph: norms, the fused attention, GELU table, residuals) over 2 chips: the
    pipeline unrolls its micro-batches (the fused attention uses the loop's registers), each copy with its own
    labels; tensor parallel shares the projections, norms and elementwise kernels, the attention runs whole."""
    tc.manual_seed(0)
    m = nn.TransformerBlock(64, 4)
    x = _x((4, 16, 64), 12)
    ref = tc.compile(m, [x], "base").reference(x)
    for par in ("data", "tensor", "pipeline"):
        sm = tc.compile(m, [x], "base", chips=2, parallel=par)
        _exact(tc.Device("sim", config="base", chips=2).run(sm, x), ref)
