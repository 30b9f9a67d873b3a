"""The interleaved pipeline (``tc.compile(..., parallel="pipeline", interleave=V)``, compiler/lower/shard.py):
each chip holds ``V`` stage groups (stage ``v`` on the chip at place ``v mod N``), the micro-batches go through
the ring ``V`` times (the last chip feeds the first over the ring's closing link). Every run is bit-exact to
the single-chip reference; the link bytes are computed here from the model's shapes."""
import numpy as np
import pytest

import tetrachip as tc
from isa import ChipConfig
from isa.ints import cdiv
from test_shard import ResCNN

nn = tc.nn
DIMS = (32, 64, 48, 64, 32, 48, 40, 24, 10)        # eight linear layers: eight stages over 4 chips, V = 2


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _exact(res, ref):
    assert len(res.outputs) == len(ref)
    for got, want in zip(res.outputs, ref):
        np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def deep():
    tc.manual_seed(0)
    layers = []
    for i, (a, b) in enumerate(zip(DIMS[:-1], DIMS[1:])):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i + 2 < len(DIMS) else [])
    return nn.Sequential(*layers)


@pytest.mark.parametrize("chips", [2, 4])
def test_interleaved_pipeline_is_bit_exact_and_beats_gpipe(deep, chips):
    """8 micro-batches of one sample: with 2 stage groups per chip the fill and drain are half as long (in
    stage times) as GPipe's, so the run takes fewer cycles than GPipe's on the same model, measured here;
    each chip sends, per micro-batch, the activation after each of its stages but the model's last."""
    x = _x((8, 32), chips)
    ref = tc.compile(deep, [x], "small").reference(x)
    dev = tc.Device("sim", config="small", chips=chips)
    gp = tc.compile(deep, [x], "small", chips=chips, parallel="pipeline", micro_batches=8, interleave=1)
    sm = tc.compile(deep, [x], "small", chips=chips, parallel="pipeline", micro_batches=8, interleave=2)
    assert gp.interleave == 1 and sm.interleave == 2 and len(sm.stages) == 2 * chips
    # the stages: contiguous, non-empty, covering the layers in order
    assert sm.stages[0][0] == 0 and sm.stages[-1][1] == len(DIMS) - 1
    assert all(a < b for a, b in sm.stages) and all(sm.stages[v][1] == sm.stages[v + 1][0]
                                                    for v in range(len(sm.stages) - 1))
    r_gp, r_sm = dev.run(gp, x), dev.run(sm, x)
    _exact(r_gp, ref)
    _exact(r_sm, ref)
    cols = ChipConfig.preset("small").cols
    want = [0] * chips
    for v, (_, b) in enumerate(sm.stages[:-1]):         # one sample per micro-batch: DIMS[b] int8 bytes
        want[v % chips] += 8 * cdiv(DIMS[b], cols) * cols
    assert [st.bytes["link_tx"] for st in r_sm.stats] == want
    if chips == 4:
        assert r_sm.stats.cycles < r_gp.stats.cycles, (r_sm.stats.cycles, r_gp.stats.cycles)


def test_four_stage_groups_a_kernel_per_stage(deep):
    """``interleave=4`` on 2 chips cuts the 8 layers into 8 stages of one kernel each (stage ``v`` on chip
    ``v mod 2``): bit-exact, and each chip sends the activation after each of its stages but the model's last."""
    x = _x((4, 32), 4)
    sm = tc.compile(deep, [x], "small", chips=2, parallel="pipeline", micro_batches=4, interleave=4)
    assert sm.interleave == 4 and sm.stages == [(k, k + 1) for k in range(len(DIMS) - 1)]
    res = tc.Device("sim", config="small", chips=2).run(sm, x)
    _exact(res, tc.compile(deep, [x], "small").reference(x))
    cols = ChipConfig.preset("small").cols
    want = [0, 0]
    for v, (_, b) in enumerate(sm.stages[:-1]):         # one sample per micro-batch: DIMS[b] int8 bytes
        want[v % 2] += 4 * cdiv(DIMS[b], cols) * cols
    assert [st.bytes["link_tx"] for st in res.stats] == want


def test_interleaved_residual_crosses_the_closing_link():
    """A conv output read again two kernels later, over 2 chips and 4 stages: the tensors live at each cut
    (the residual among them) cross the boundaries, the last chip's go back to the first."""
    tc.manual_seed(3)
    m = ResCNN()
    x = _x((4, 3, 6, 6), 3)
    ref = tc.compile(m, [x], "small").reference(x)
    sm = tc.compile(m, [x], "small", chips=2, parallel="pipeline", micro_batches=4, interleave=2)
    _exact(tc.Device("sim", config="small", chips=2).run(sm, x), ref)
    assert sm.interleave == 2 and len(sm.stages) == 4
    assert any(len(lv) > 1 for lv in sm.live)           # some boundary carries more than one tensor


def test_interleaved_on_a_torus():
    cfg = ChipConfig.preset("small").replace(name="small-4links", links=4)
    tc.manual_seed(1)
    layers = []
    for i, (a, b) in enumerate(zip(DIMS[:-1], DIMS[1:])):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i + 2 < len(DIMS) else [])
    m = nn.Sequential(*layers)
    x = _x((4, 32), 5)
    sm = tc.compile(m, [x], cfg, chips=4, parallel="pipeline", micro_batches=4, interleave=2, topology="torus2d")
    _exact(tc.Device("sim", config=cfg, chips=4, topology="torus2d").run(sm, x), tc.compile(m, [x], cfg).reference(x))


def test_interleave_errors(deep):
    x = _x((6, 32))
    with pytest.raises(tc.ChipCompileError, match="interleave=0"):
        tc.compile(deep, [x], "small", chips=2, parallel="pipeline", interleave=0)
    with pytest.raises(tc.ChipCompileError, match="interleave=2: the stage groups of a pipeline"):
        tc.compile(deep, [x], "small", chips=2, parallel="data", interleave=2)
    with pytest.raises(tc.ChipCompileError, match="3 is not a multiple"):
        tc.compile(deep, [x], "small", chips=2, parallel="pipeline", micro_batches=3, interleave=2)
    with pytest.raises(tc.ChipCompileError, match="fewer than 12 stages"):
        tc.compile(deep, [x], "small", chips=3, parallel="pipeline", micro_batches=3, interleave=4)


def test_auto_tries_the_interleaved_schedule(deep):
    from compiler.lower import shard
    x = _x((8, 32), 2)
    shard.auto_cache.clear()
    sm = tc.compile(deep, [x], "small", chips=2, parallel="auto", micro_batches=4)
    # 8 kernels: a kernel per stage with 4 stage groups on 2 chips
    assert {"pipeline/4", "pipeline/4x2", "pipeline/4x4"} <= set(sm.choices)
    best = min(sm.choices, key=sm.choices.get)
    V = int(best.split("x")[1]) if best.startswith("pipeline/4x") else 1
    assert (sm.parallel, sm.interleave) == (best.split("/")[0], V)
    res = tc.Device("sim", config="small", chips=2).run(sm, x)
    assert res.stats.cycles == sm.choices[best]
    _exact(res, tc.compile(deep, [x], "small").reference(x))
    again = tc.compile(deep, [x], "small", chips=2, parallel="auto", micro_batches=4)
    assert again.choices is None and (again.parallel, again.interleave) == (sm.parallel, sm.interleave)


@pytest.mark.parametrize("chips,micro,V", [(4, 8, 1), (4, 8, 2), (2, 4, 3), (3, 6, 2)])
def test_schedule_cycles_of_equal_stages_is_the_textbook_bubble(chips, micro, V):
    """Equal stages of ``t`` cycles: GPipe and the interleaved schedule take ``(V M + N - 1) t`` (efficiency
    ``V M / (V M + N - 1)``); one stage twice as slow sets the pace of every step it is in."""
    from compiler.lower.shard import ShardedModel
    t = 7
    sm = ShardedModel.__new__(ShardedModel)
    sm.chips, sm.micro_batches, sm.interleave, sm.stage_cycles = chips, micro, V, [t] * (V * chips)
    assert sm.schedule_cycles() == (V * micro + chips - 1) * t
    if V == 1:
        sm.stage_cycles = [t] * (chips - 1) + [2 * t]
        assert sm.schedule_cycles() == (chips - 1) * t + micro * 2 * t
