"""Frontend control flow on the chip: tc.cond / tc.loop / tc.while_loop compiled with tc.compile and
run on Device("sim"); results bit-exact against the quantized model, trip counts read back."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.quantize import run_int


def _step(seed=0, d=16):
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((d, d)) * 0.15).astype(np.float32)
    b = (rng.standard_normal(d) * 0.5).astype(np.float32)
    return lambda h: (h @ tc.Tensor(W) + tc.Tensor(b)).relu()


def test_while_loop_until_converged_data_dependent_trips():
    f = _step()
    tol = 0.1
    model = lambda h0: tc.while_loop(lambda h: (f(h) - h).abs().max() > tol, f, h0, 60)
    rng = np.random.default_rng(3)
    xs = [(rng.standard_normal((4, 16)) * s).astype(np.float32) for s in (0.1, 1.0, 4.0)]
    cm = tc.compile(model, [xs[1]], calibration=[[x] for x in xs])
    assert "sld" in cm.program.disassemble() and cm.kind == "while"
    code = cm.program.code_bytes()
    body = cm.bodies["body"]
    s = cm.out_scale
    trips, cycles = [], []
    for x in xs:
        res = tc.Device("sim").run(cm, x)
        assert cm.program.code_bytes() == code
        # independent reference: the body's quantized model (quantize.run_int), iterated here with the
        # float predicate evaluated on the dequantized integers
        c = np.clip(np.rint(x / s), -127, 127)
        n = 0
        while n < 60:
            t = run_int(body.q, {"arg0": (c * s).astype(np.float32)})[1][body.out_t].reshape(c.shape)
            if not np.float32(np.max(np.abs(t.astype(np.int64) - c)) * s) > np.float32(tol):
                break
            c, n = t, n + 1
        np.testing.assert_array_equal(res.ints["out"], c)
        np.testing.assert_array_equal(res.outputs[0], (c * s).astype(np.float32))
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
        assert res.ints["trips"] == n == cm.reference_run({"x": x})[1]["trips"]
        # close to the float model on the reference backend
        np.testing.assert_allclose(res.outputs[0], model(tc.Tensor(x)).numpy(), atol=6 * s)
        trips.append(n)
        cycles.append(res.stats.cycles)
    assert len(set(trips)) >= 2 and max(trips) < 60          # the data decides, and it converged
    assert [c for _, c in sorted(zip(trips, cycles))] == sorted(cycles)


def test_while_loop_with_a_padded_convolution_carry():
    """h <- relu(conv3x3(h, padding=1)) until converged: the carry is stored with a zero border
    (the convolution's input layout); the body's result is copied into its interior."""
    tc.manual_seed(3)
    conv = tc.nn.Conv2d(4, 4, 3, padding=1)
    conv.weight = tc.Tensor((conv.weight.numpy() * 0.3).astype(np.float32))
    f = lambda h: conv(h).relu()
    model = lambda h0: tc.while_loop(lambda h: (f(h) - h).abs().max() > 0.05, f, h0, 40)
    rng = np.random.default_rng(0)
    xs = [(rng.standard_normal((1, 4, 6, 6)) * s).astype(np.float32) for s in (0.3, 1.0, 4.0)]
    cm = tc.compile(model, [xs[0]], calibration=[[x] for x in xs])
    body, s = cm.bodies["body"], cm.out_scale
    assert cm.out_info.nbytes > 4 * 6 * 6                     # the carry buffer has its border
    trips = []
    for x in xs:
        res = tc.Device("sim").run(cm, x)
        c, n = np.clip(np.rint(x / s), -127, 127), 0
        while n < 40:
            t = run_int(body.q, {"arg0": (c * s).astype(np.float32)})[0][0] / s
            t = np.rint(t).astype(np.int64)
            if not np.float32(np.max(np.abs(t - c)) * s) > np.float32(0.05):
                break
            c, n = t, n + 1
        np.testing.assert_array_equal(res.ints["out"], c)
        assert res.ints["trips"] == n
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
        trips.append(n)
    assert len(set(trips)) == 2


def test_cond_and_loop_cond_over_convolutions():
    """Branches that are padded 3x3 convolutions: the operand is moved into the taken branch's
    bordered input; a loop whose body is such a cond picks a branch per trip."""
    tc.manual_seed(3)
    conv, conv2 = tc.nn.Conv2d(4, 4, 3, padding=1), tc.nn.Conv2d(4, 4, 3, padding=1)
    rng = np.random.default_rng(0)
    xs = [(rng.standard_normal((1, 4, 6, 6)) + m).astype(np.float32) for m in (-0.5, 0.5)]
    model = lambda x: tc.cond(x.sum() > 0, lambda v: conv(v).relu(), lambda v: conv2(v), x)
    cm = tc.compile(model, [xs[0]], calibration=[[x] for x in xs])
    for x, want in zip(xs, (0, 1)):
        res = tc.Device("sim").run(cm, x)
        assert res.ints["taken"] == want
        br = cm.bodies["then" if want else "else"]
        np.testing.assert_array_equal(res.outputs[0], run_int(br.q, {"arg0": x})[0][0])
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    seq = np.zeros((4, 1), np.float32)
    lc = lambda h0, r: tc.loop(lambda h, _: tc.cond(h.sum() > 0, lambda c: conv(c).relu(), lambda c: conv2(c), h),
                               h0, r)
    cm = tc.compile(lc, [xs[0], seq], calibration=[[x, seq] for x in xs])
    for x in xs:
        res = tc.Device("sim").run(cm, x, seq)
        ref, info = cm.reference_run({"x0": x, "x1": seq})
        assert res.ints["trips"] == 4 and res.ints["then_trips"] == info["then_trips"]
        np.testing.assert_array_equal(res.outputs[0], ref[0])


def test_cond_data_dependent_predicate_runs_one_branch():
    rng = np.random.default_rng(1)
    W1, W2 = ((rng.standard_normal((16, 24)) * 0.3).astype(np.float32) for _ in range(2))
    model = lambda x: tc.cond(x.sum() > 0, lambda v: (v @ tc.Tensor(W1)).relu(),
                              lambda v: v @ tc.Tensor(W2) + 1.0, x)
    xs = [(rng.standard_normal((5, 16)) + m).astype(np.float32) for m in (-0.5, 0.5, 0.3, -0.3)]
    cm = tc.compile(model, [xs[0]], calibration=[[x] for x in xs])
    sx = cm.operands[0].scale
    seen = set()
    for x in xs:
        res = tc.Device("sim").run(cm, x)
        want = bool(np.float32(np.clip(np.rint(x / sx), -127, 127).sum() * sx) > 0)   # the quantized predicate
        assert res.ints["taken"] == int(want) == int(x.sum() > 0)
        br = cm.bodies["then" if want else "else"]
        ints = run_int(br.q, {"arg0": x})[1][br.out_t]
        np.testing.assert_array_equal(res.ints["out"], ints.reshape(5, 24))
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
        np.testing.assert_allclose(res.outputs[0], model(tc.Tensor(x)).numpy(), atol=4 * cm.out_scale)
        seen.add(want)
    assert seen == {True, False}


def test_cond_with_identity_branch_and_max_predicate():
    rng = np.random.default_rng(2)
    half = np.eye(16, dtype=np.float32) * 0.5
    model = lambda x: tc.cond(x.abs().max() >= 2.0, lambda v: v @ tc.Tensor(half), lambda v: v, x)
    xs = [(rng.uniform(-1, 1, (3, 16)) * s).astype(np.float32) for s in (1.5, 3.0)]
    cm = tc.compile(model, [xs[0]], calibration=[[x] for x in xs])
    assert cm.identity == "else"
    for x, want in zip(xs, (0, 1)):
        res = tc.Device("sim").run(cm, x)
        assert res.ints["taken"] == want
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
        np.testing.assert_allclose(res.outputs[0], model(tc.Tensor(x)).numpy(), atol=2 * cm.out_scale)
    q = np.clip(np.rint(xs[0] / cm.out_scale), -127, 127)
    np.testing.assert_array_equal(tc.Device("sim").run(cm, xs[0]).ints["out"], q)   # untouched operand


def test_cond_on_max_of_negative_values_partial_row():
    """max(x) over 21 elements (a partial last row of lanes) when every element is negative."""
    model = lambda x: tc.cond(x.max() > -0.5, lambda v: v @ tc.Tensor(np.eye(7, dtype=np.float32) * 0.5),
                              lambda v: v, x)
    xs = [np.full((3, 7), v, np.float32) + np.linspace(-0.3, 0, 21, dtype=np.float32).reshape(3, 7)
          for v in (-2.0, -0.3)]
    cm = tc.compile(model, [xs[0]], calibration=[[x] for x in xs])
    for x, want in zip(xs, (0, 1)):                     # max = -2.0 and -0.3
        res = tc.Device("sim").run(cm, x)
        assert res.ints["taken"] == want
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    with pytest.raises(tc.ChipCompileError, match="fewer than"):
        tc.compile(model, [xs[0][:2]])


def test_scan_loop_rnn_odd_sizes():
    rng = np.random.default_rng(4)
    U = (rng.standard_normal((5, 11)) * 0.3).astype(np.float32)
    Wh = (rng.standard_normal((11, 11)) * 0.2).astype(np.float32)
    rnn = lambda h0, seq: tc.loop(lambda h, x: (h @ tc.Tensor(Wh) + x @ tc.Tensor(U)).relu(), h0, seq)
    h0 = rng.standard_normal((3, 11)).astype(np.float32)
    seq = rng.standard_normal((7, 3, 5)).astype(np.float32)
    cm = tc.compile(rnn, [h0, seq])
    res = tc.Device("sim").run(cm, h0, seq)
    assert res.ints["trips"] == 7
    body, s = cm.bodies["body"], cm.out_scale
    c = np.clip(np.rint(h0 / s), -127, 127)
    for i in range(7):                                  # the body's quantized reference, row by row
        xq = np.clip(np.rint(seq[i] / cm.operands[1].scale), -127, 127)
        v = run_int(body.q, {"arg0": c * s, "arg1": xq * cm.operands[1].scale})[1]
        c = v[body.out_t].reshape(3, 11)
    np.testing.assert_array_equal(res.ints["out"], c)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(h0, seq)[0])
    np.testing.assert_allclose(res.outputs[0], rnn(tc.Tensor(h0), tc.Tensor(seq)).numpy(), atol=8 * s)


def test_kernels_after_the_loop_read_its_result_and_an_input():
    """An RNN, then a residual add of h0 and a linear head: the post kernels run after the loop."""
    rng = np.random.default_rng(4)
    U = (rng.standard_normal((5, 11)) * 0.3).astype(np.float32)
    Wh = (rng.standard_normal((11, 11)) * 0.2).astype(np.float32)
    Wo = rng.standard_normal((11, 4)).astype(np.float32)

    def rnn(h0, seq):
        h = tc.loop(lambda h, x: (h @ tc.Tensor(Wh) + x @ tc.Tensor(U)).relu(), h0, seq)
        return (h + h0) @ tc.Tensor(Wo) + 0.25
    h0 = rng.standard_normal((3, 11)).astype(np.float32)
    seq = rng.standard_normal((6, 3, 5)).astype(np.float32)
    cm = tc.compile(rnn, [h0, seq])
    res = tc.Device("sim").run(cm, h0, seq)
    assert res.ints["trips"] == 6 and cm.post is not None
    post = cm.post
    want = run_int(post.q, {"ctl": res.ints["out"] * cm.out_scale, "x0": h0})[0][0]   # the head's own reference
    np.testing.assert_array_equal(res.outputs[0], want)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(h0, seq)[0])
    fl = rnn(tc.Tensor(h0), tc.Tensor(seq)).numpy()
    assert np.abs(res.outputs[0] - fl).max() < 0.03 * np.abs(fl).max()


def test_operands_computed_by_kernels_before_the_loop():
    """init = relu(x @ W0 + b0) runs on the chip first (the "pre" kernels), then the while_loop."""
    rng = np.random.default_rng(6)
    W0 = (rng.standard_normal((10, 16)) * 0.4).astype(np.float32)
    f = _step(1)
    model = lambda x: tc.while_loop(lambda h: (f(h) - h).abs().sum() > 0.5, f, (x @ tc.Tensor(W0)).relu(), 40)
    xs = [(rng.standard_normal((3, 10)) * s).astype(np.float32) for s in (0.3, 1.0, 3.0)]
    cm = tc.compile(model, [xs[0]], calibration=[[x] for x in xs])
    assert cm.pre is not None and cm.pred.red == "sum"
    body, pre, s = cm.bodies["body"], cm.pre, cm.out_scale
    for x in xs:
        res = tc.Device("sim").run(cm, x)
        h = run_int(pre.q, {"x": x})[1][pre.out_t].reshape(3, 16)        # the pre kernels' own reference
        n = 0
        while n < 40:
            t = run_int(body.q, {"arg0": (h * s).astype(np.float32)})[1][body.out_t].reshape(3, 16)
            if not np.float32(np.sum(np.abs(t.astype(np.int64) - h)) * s) > np.float32(0.5):
                break
            h, n = t, n + 1
        np.testing.assert_array_equal(res.ints["out"], h)
        assert res.ints["trips"] == n
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
        np.testing.assert_allclose(res.outputs[0], model(tc.Tensor(x)).numpy(), atol=8 * s)


def test_loop_whose_body_branches_on_the_carry():
    """loop(cond(|h|.sum() > 24, f, g, h, x)) over 9 rows: per trip the chip picks the branch."""
    rng = np.random.default_rng(8)
    A = (np.eye(12) * 0.5).astype(np.float32)
    B = (rng.standard_normal((12, 12)) * 0.6).astype(np.float32)
    U = (rng.standard_normal((4, 12)) * 0.5).astype(np.float32)

    def model(h0, seq):
        return tc.loop(lambda h, x: tc.cond(h.abs().sum() > 24.0, lambda c, r: c @ tc.Tensor(A) + r @ tc.Tensor(U),
                                            lambda c, r: c @ tc.Tensor(B) + r @ tc.Tensor(U), h, x), h0, seq)
    data = [(rng.standard_normal((2, 12)).astype(np.float32), rng.standard_normal((9, 2, 4)).astype(np.float32))
            for _ in range(3)]
    cm = tc.compile(model, list(data[0]), calibration=[list(d) for d in data])
    assert cm.kind == "loop-cond"
    s, sx = cm.out_scale, cm.operands[1].scale
    both = set()
    for h0, seq in data:
        res = tc.Device("sim").run(cm, h0, seq)
        c, nthen = np.clip(np.rint(h0 / s), -127, 127), 0          # the branches' own quantized references
        for i in range(9):
            take = bool(np.float32(np.abs(c).sum() * s) > np.float32(24.0))
            br = cm.bodies["then" if take else "else"]
            xq = np.clip(np.rint(seq[i] / sx), -127, 127)
            c = run_int(br.q, {"arg0": c * s, "arg1": xq * sx})[1][br.out_t].reshape(2, 12)
            nthen += take
            both.add(take)
        np.testing.assert_array_equal(res.ints["out"], c)
        assert (res.ints["trips"], res.ints["then_trips"]) == (9, nthen)
        np.testing.assert_array_equal(res.outputs[0], cm.reference(h0, seq)[0])
    assert both == {True, False}


def test_loop_over_a_symbolic_length_one_binary():
    """tc.compile(..., dynamic={"T": 16}): the trip count is the length the host writes at launch."""
    rng = np.random.default_rng(4)
    U = (rng.standard_normal((5, 11)) * 0.3).astype(np.float32)
    Wh = (rng.standard_normal((11, 11)) * 0.2).astype(np.float32)
    rnn = lambda h0, seq: tc.loop(lambda h, x: (h @ tc.Tensor(Wh) + x @ tc.Tensor(U)).relu(), h0, seq)
    h0 = rng.standard_normal((3, 11)).astype(np.float32)
    seq = rng.standard_normal((16, 3, 5)).astype(np.float32)
    cm = tc.compile(rnn, {"h0": h0, "seq": seq}, dynamic={"T": 16}, shapes={"seq": ("T", 3, 5)})
    code = cm.program.code_bytes()
    body, s, sx = cm.bodies["body"], cm.out_scale, cm.operands[1].scale
    cycles = []
    for T in (1, 7, 16):
        res = tc.Device("sim").run(cm, {"h0": h0, "seq": seq[:T]})
        assert cm.program.code_bytes() == code and res.ints["trips"] == T
        c = np.clip(np.rint(h0 / s), -127, 127)
        for i in range(T):
            xq = np.clip(np.rint(seq[i] / sx), -127, 127)
            c = run_int(body.q, {"arg0": c * s, "arg1": xq * sx})[1][body.out_t].reshape(3, 11)
        np.testing.assert_array_equal(res.ints["out"], c)
        np.testing.assert_array_equal(res.outputs[0], cm.reference({"h0": h0, "seq": seq[:T]})[0])
        cycles.append(res.stats.cycles)
    assert cycles == sorted(cycles) and len(set(cycles)) == 3
    with pytest.raises(tc.ChipCompileError, match="symbolic"):
        tc.compile(lambda x: tc.cond(x.sum() > 0, lambda v: v @ tc.Tensor(Wh), lambda v: v, x), [h0],
                   dynamic={"N": 3})


@pytest.mark.parametrize("model, msg", [
    (lambda x: tc.loop(lambda h, r: h @ tc.Tensor(np.eye(8, dtype=np.float32)), x, tc.zeros(3, 1))
     + tc.loop(lambda h, r: h @ tc.Tensor(np.eye(8, dtype=np.float32)), x, tc.zeros(2, 1)), "one tc.cond"),
    (lambda x: (lambda y: tc.cond(y.sum() > 0, lambda v: v @ tc.Tensor(np.eye(8, dtype=np.float32)), lambda v: v,
                                  y))(x * x[:, :1]), "MUL .* product of two activations"),
    (lambda x: tc.cond((x.sum() - 1.0).abs() > 0.5, lambda v: v @ tc.Tensor(np.eye(8, dtype=np.float32)),
                       lambda v: v, x), "not a threshold"),
    (lambda x: tc.cond((x.exp()).sum() > 1, lambda v: v @ tc.Tensor(np.eye(8, dtype=np.float32)),
                       lambda v: v, x), "predicate must be"),
    (lambda x: tc.loop(lambda h, r: tc.cond(h.sum() > 0, lambda v: tc.cond(v.sum() > 1, lambda u: u @ tc.Tensor(
        np.eye(8, dtype=np.float32)), lambda u: u, v), lambda v: v @ tc.Tensor(-np.eye(8, dtype=np.float32)), h),
        x, tc.zeros(3, 1)), "nested control flow"),
])
def test_not_lowerable_is_a_clear_error(model, msg):
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    with pytest.raises(tc.ChipCompileError, match=msg):
        tc.compile(model, [x])


def test_a_body_needing_the_trip_counter_is_refused():
    """A loop body whose elementwise kernel reads 11 tensors uses r4..r14, and r14 is the loop's trip
    counter (``isa.regs.TRIP_REG``, reserved in the control flow's program builder): the error names both."""
    rng = np.random.default_rng(0)
    h0 = rng.standard_normal((2, 8)).astype(np.float32)
    rows = [rng.standard_normal((3, 2, 8)).astype(np.float32) for _ in range(10)]
    with pytest.raises(tc.ChipCompileError, match=r"'loop body', but r14 is reserved for .*trip counter"):
        tc.compile(lambda h, *xs: tc.loop(lambda c, *rs: sum(rs, c), h, *xs), [h0, *rows])
    cm = tc.compile(lambda h, *xs: tc.loop(lambda c, *rs: sum(rs, c), h, *xs), [h0, *rows[:9]])   # r4..r13
    assert tc.Device("sim").run(cm, h0, *rows[:9]).ints["trips"] == 3
