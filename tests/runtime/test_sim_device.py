"""Device("sim") runs compiled models; Device("rtl") says what is missing when it cannot run."""
import numpy as np
import pytest

import tetrachip as tc
from isa.errors import TetrachipError


def _model():
    w = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    return lambda a: (a @ tc.Tensor(w)).relu(), w


def test_run_returns_outputs_and_stats():
    fn, w = _model()
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    cm = tc.compile(fn, [x], config="small")
    res = tc.Device("sim", config="small").run(cm, x)
    out, stats = res
    assert out.shape == (3, 4) and stats.cycles > 0 and stats.mxu_macs > 0
    assert np.abs(out - np.maximum(x @ w, 0)).max() < 0.05
    assert np.array_equal(out, cm.reference(x)[0])


def test_trace_records_instances():
    fn, _ = _model()
    x = np.ones((2, 6), np.float32)
    cm = tc.compile(fn, [x], config="small")
    res = tc.Device("sim", config="small", trace=True).run(cm, x)
    ev = res.trace.to_chrome()["traceEvents"]
    assert any(e.get("name", "").startswith("mxu.mm") for e in ev)


def test_config_mismatch_and_bad_input_shape():
    fn, _ = _model()
    x = np.ones((2, 6), np.float32)
    cm = tc.compile(fn, [x], config="small")
    with pytest.raises(TetrachipError, match="compiled for config 'small'"):
        tc.Device("sim", config="base").run(cm, x)
    with pytest.raises(TetrachipError, match="shape"):
        tc.Device("sim", config="small").run(cm, np.ones((3, 6), np.float32))


def test_rtl_device_names_the_missing_piece(monkeypatch):
    # runs on the Verilog when an HDL simulator is installed (tests/cosim/test_cosim_device.py)
    monkeypatch.setattr("verify.cosim.available", lambda sim: "not installed")
    with pytest.raises(TetrachipError, match="co-simulation"):
        tc.Device("rtl", config="base")


def test_default_device_sim_realizes_a_supported_graph():
    w = np.eye(5, 3, dtype=np.float32)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    with tc.Device("sim", config="base"):
        y = (tc.Tensor.placeholder("x", (2, 5)) @ tc.Tensor(w)).numpy(feeds={"x": x})
    assert np.abs(y - x @ w).max() <= np.abs(x).max() / 127 * 1.01
