"""A model sharded over chips (``tc.compile(..., chips=N)``) on the Verilog ring (``Device("rtl", chips=N)``:
``rtl.chip.Ring`` through ``verify.cosim``) against the same bundle on ``sim.System``: every chip's cycle count
equal, the outputs bit-exact to the single-chip reference. An MLP on 2 and 4 ``tiny`` chips, pipeline
parallel (link transfers between every stage; also interleaved, two stages per chip with the ring's closing
link), tensor parallel (an all-gather after each layer) and data parallel."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tetrachip as tc
from verify.cosim import available

SIM = os.environ.get("SIM", "verilator")
pytestmark = pytest.mark.xdist_group("shard-rtl")      # one worker builds each ring once


@pytest.fixture(scope="module")
def model():
    tc.manual_seed(0)
    nn = tc.nn
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 16), nn.ReLU(),
                      nn.Linear(16, 4))
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    return m, x, tc.compile(m, [x], "tiny").reference(x)


# (the ring of four is a Verilog model of its own, about three minutes to build: the long lane)
@pytest.mark.parametrize("chips,parallel,interleave", [
    (2, "pipeline", 1), (2, "pipeline", 2), (2, "data", 1), (2, "tensor", 1),
    pytest.param(4, "pipeline", 1, marks=pytest.mark.long), pytest.param(4, "tensor", 1, marks=pytest.mark.long)])
def test_sharded_mlp_on_the_verilog_ring_equals_the_simulator(model, chips, parallel, interleave):
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    m, x, ref = model
    kw = {"micro_batches": 4, "interleave": interleave} if parallel == "pipeline" else {}
    sm = tc.compile(m, [x], "tiny", chips=chips, parallel=parallel, **kw)
    sim = tc.Device("sim", config="tiny", chips=chips).run(sm, x)
    rtl = tc.Device("rtl", config="tiny", chips=chips, simulator=SIM).run(sm, x)
    assert [st.cycles for st in rtl.stats] == [st.cycles for st in sim.stats]
    for got, want in zip(rtl.outputs, ref):
        np.testing.assert_array_equal(got, want)
    assert (sim.stats.link_bytes > 0) == (parallel != "data")


def test_megatron_pair_all_reduce_on_the_verilog_ring_equals_the_simulator():
    """A column/row-parallel GEMM pair (Linear 8->64 with its ReLU, Linear 64->8 with an int8 output for the last
    layer) shares one all-reduce: the
    int32 partial sums reduce-scattered (ACC DMA, VPU adds), requantized per block, all-gathered as int8."""
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    tc.manual_seed(1)
    nn = tc.nn
    m = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 4))
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    ref = tc.compile(m, [x], "tiny").reference(x)
    sm = tc.compile(m, [x], "tiny", chips=2, parallel="tensor")
    assert [k for _, k in sm.collectives] == ["all-reduce", "all-gather"], sm.collectives
    sim = tc.Device("sim", config="tiny", chips=2).run(sm, x)
    rtl = tc.Device("rtl", config="tiny", chips=2, simulator=SIM).run(sm, x)
    assert [st.cycles for st in rtl.stats] == [st.cycles for st in sim.stats]
    for got, want in zip(rtl.outputs, ref):
        np.testing.assert_array_equal(got, want)
