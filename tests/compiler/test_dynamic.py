"""Symbolic batch dimension: one binary, the value of N in a scalar register at launch."""
import hashlib

import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.dynamic import DYN_REG
from compiler.lower.schedule import ChipCompileError
from test_lower_ops import BANKED

NS = [1, 7, 32, 64]


def _mlp():
    rng = np.random.default_rng(0)
    W1 = rng.standard_normal((5, 16)).astype(np.float32)
    W2 = rng.standard_normal((3, 16)).astype(np.float32)
    W3 = rng.standard_normal((16, 4)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)

    def f(x, y):        # (N, 5) and (N, 3) share N
        h = ((x @ tc.Tensor(W1) + tc.Tensor(b)) + y @ tc.Tensor(W2)).relu()
        return h @ tc.Tensor(W3)
    return f


def _check(cm, make, dev):
    digest = hashlib.sha256(cm.program.to_bytes()).hexdigest()
    code = cm.program.code_bytes()
    cycles = {}
    for n in NS:
        feeds = make(n)
        res = dev.run(cm, feeds)
        ref = cm.reference(feeds)
        for o, r in zip(res.outputs, ref):
            assert o.shape[0] == n
            np.testing.assert_array_equal(o, r)
        # the binary is byte-identical across every run
        assert hashlib.sha256(cm.program.to_bytes()).hexdigest() == digest
        assert cm.program.code_bytes() == code
        cycles[n] = res.stats.cycles
    return cycles


def test_shared_symbolic_dim_mlp():
    rng = np.random.default_rng(1)
    f = _mlp()
    cm = tc.compile(f, {"x": rng.standard_normal((64, 5)), "y": rng.standard_normal((64, 3))},
                    dynamic={"N": 64}, shapes={"x": ("N", 5), "y": ("N", 3)})
    assert cm.program.manifest["dynamic"]["register"] == DYN_REG
    assert cm.dynamic.out_axes == [0]

    def make(n):
        return {"x": rng.standard_normal((n, 5)).astype(np.float32),
                "y": rng.standard_normal((n, 3)).astype(np.float32)}
    _check(cm, make, tc.Device("sim"))
    # the planner planned the maximum: (N, 5) and (N, 3) inputs hold 64 rows each
    assert cm.plans["dram"].footprint >= 64 * (5 + 3)


def test_rows_per_row_quantized_reference_matches_static():
    """Rows of the dynamic run equal the same rows of a run at the maximum (rows are independent)."""
    rng = np.random.default_rng(2)
    f = _mlp()
    xs, ys = rng.standard_normal((64, 5)).astype(np.float32), rng.standard_normal((64, 3)).astype(np.float32)
    cm = tc.compile(f, {"x": xs, "y": ys}, dynamic={"N": 64})
    dev = tc.Device("sim")
    full = dev.run(cm, {"x": xs, "y": ys}).outputs[0]
    part = dev.run(cm, {"x": xs[:7], "y": ys[:7]}).outputs[0]
    np.testing.assert_array_equal(part, full[:7])


def test_conv_batch_trip_count_from_register():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 4, 3, 3)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((16 * 36, 10)).astype(np.float32) * 0.1

    def f(x):
        h = tc.functional.conv2d(x, tc.Tensor(w)).relu()
        return h.reshape(h.shape[0], -1) @ tc.Tensor(w2)
    cm = tc.compile(f, [rng.standard_normal((64, 4, 8, 8)).astype(np.float32)], dynamic={"N": 64})
    conv = cm.kernels[0]
    assert conv.tiling.MT > 1            # the M-tile loop runs ceil(N / per_tile) times, N from the register
    per_tile = conv.tiling.Mt // 36
    cycles = _check(cm, lambda n: rng.standard_normal((n, 4, 8, 8)).astype(np.float32), tc.Device("sim"))
    trips = {n: -(-n // per_tile) for n in NS}
    assert trips[1] < trips[64]
    for a, b in zip(NS, NS[1:]):
        assert (cycles[a] < cycles[b]) == (trips[a] < trips[b])


def test_errors():
    f = _mlp()
    x, y = np.zeros((8, 5), np.float32), np.zeros((8, 3), np.float32)
    cm = tc.compile(f, {"x": x, "y": y}, dynamic={"N": 8})
    with pytest.raises(ChipCompileError, match="outside 1..8"):
        tc.Device("sim").run(cm, {"x": np.zeros((9, 5)), "y": np.zeros((9, 3))})
    with pytest.raises(ChipCompileError, match="disagree"):
        tc.Device("sim").run(cm, {"x": np.zeros((3, 5)), "y": np.zeros((4, 3))})
    with pytest.raises(ChipCompileError, match="one symbolic dimension"):
        tc.compile(f, {"x": x, "y": y}, dynamic={"N": 8, "T": 4})


def test_dynamic_with_search(tmp_path):
    """Search picks the tiling at the maximum; the dynamic cut keeps whole batch elements per tile."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((16, 4, 3, 3)).astype(np.float32) * 0.3

    def f(x):
        return tc.functional.conv2d(x, tc.Tensor(w)).relu()
    cm = tc.compile(f, [rng.standard_normal((64, 4, 8, 8)).astype(np.float32)], dynamic={"N": 64},
                    search=True, search_budget_s=2.0, cache_dir=tmp_path)
    assert cm.search_report and cm.kernels[0].tiling.Mt % 36 == 0
    cycles = _check(cm, lambda n: rng.standard_normal((n, 4, 8, 8)).astype(np.float32), tc.Device("sim"))
    assert cycles[1] < cycles[64]


def test_elementwise_batch_element_longer_than_a_tile():
    """A batch element of an elementwise kernel longer than its tile (256 features: 64 rows of 4 lanes on a
    4x4 chip whose SPM of 256 rows leaves shorter tiles) runs as an inner loop over its tiles inside the loop
    over the elements the register counts: one binary, bit exact for every N."""
    rng = np.random.default_rng(4)
    w1 = rng.standard_normal((8, 256)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((256, 8)).astype(np.float32) * 0.1
    cfg = BANKED

    def f(x):
        return tc.functional.gelu(x @ tc.Tensor(w1)) @ tc.Tensor(w2)
    cm = tc.compile(f, [rng.standard_normal((64, 8)).astype(np.float32)], dynamic={"N": 64}, config=cfg)
    ew = [k for k in cm.kernels if k.kind == "lookup table"][0]
    assert ew.tiling.Mt < 256 // cfg.cols                        # an element is several tiles
    _check(cm, lambda n: rng.standard_normal((n, 8)).astype(np.float32), tc.Device("sim", config=cfg))
