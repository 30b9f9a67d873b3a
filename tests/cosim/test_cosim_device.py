"""``Device("rtl")``: a model compiled with ``tc.compile`` runs on the chip's Verilog (cocotb +
Verilator, or Icarus with SIM=icarus) and gives the same outputs and cycle count as
``Device("sim")``; a missing simulator is a one-line error."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tetrachip as tc
from isa.errors import TetrachipError
from verify.cosim import available

SIM = os.environ.get("SIM", "verilator")


def test_rtl_device_runs_a_compiled_mlp_like_the_simulator():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 4)).astype(np.float32)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    cm = tc.compile(lambda a: (a @ tc.Tensor(w1)).relu() @ tc.Tensor(w2), [x], config="tiny")
    ref = tc.Device("sim", config="tiny", trace=True).run(cm, x)
    res = tc.Device("rtl", config="tiny", trace=True, simulator=SIM).run(cm, x)
    assert res.stats.cycles == ref.stats.cycles > 0
    assert np.array_equal(res.output, ref.output)
    for k in ref.ints:
        assert np.array_equal(res.ints[k], ref.ints[k])
    want = np.maximum(x @ w1, 0) @ w2
    assert np.abs(res.output - want).max() < 0.05 * np.abs(want).max()
    assert res.trace.line_trace() == ref.trace.line_trace()
    assert res.stats.instances == ref.stats.instances
    # measured on the RTL, not copied: instructions issued (trace port) and MXU MACs (trace + program)
    assert res.stats.instructions == ref.stats.instructions > 0
    assert res.stats.mxu_macs == ref.stats.mxu_macs > 0
    assert res.stats.mxu_utilization == ref.stats.mxu_utilization
    # what the RTL run does not measure is said so, not printed as zeros
    d = res.stats.to_dict()
    assert d["busy"] is None and d["bytes"] is None and d["stalls"] is None
    assert "not measured" in res.stats.table()
    # a second input on the same device: the model is built once, the run follows the new input
    x2 = -x
    assert np.array_equal(tc.Device("rtl", config="tiny", simulator=SIM).run(cm, x2).output,
                          tc.Device("sim", config="tiny").run(cm, x2).output)


def test_rtl_device_errors_are_clear(monkeypatch):
    import runtime.sim_backend as sb
    monkeypatch.setattr("verify.cosim.available", lambda sim: "not installed here")
    with pytest.raises(TetrachipError, match="needs an HDL simulator.*not installed here"):
        sb.RtlBackend(config="tiny", simulator="verilator")
