"""where, cond and loop: carried in the graph, evaluated by the reference backend."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.ir.graph import Ops, toposort, verify


def test_where_broadcast_and_dtypes():
    a = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    out = tc.where(tc.Tensor(a) > 0, tc.Tensor(a), tc.Tensor(np.array([10, 20, 30], np.int32)))
    assert out.dtype == tc.float32
    np.testing.assert_array_equal(out.numpy(), np.where(a > 0, a, [10, 20, 30]))


def test_loop_over_dynamic_dimension_one_graph_many_lengths():
    tc.manual_seed(1)
    w = tc.randn(4, 4) * 0.5
    h0 = tc.zeros(4)
    seq = tc.Tensor.placeholder("seq", ("T", 4))
    h = tc.loop(lambda h, x: (h @ w + x).tanh(), h0, seq)
    assert h.shape == (4,)
    loops = [n for n in toposort([h.node]) if n.op is Ops.LOOP]
    assert len(loops) == 1 and loops[0].src[1].shape == ("T", 4)
    verify([h.node])
    wn = w.numpy()
    for t in (0, 1, 3, 7):  # the same graph serves every length
        s = np.random.default_rng(t).standard_normal((t, 4)).astype(np.float32)
        ref = np.zeros(4, np.float32)
        for i in range(t):
            ref = np.tanh(ref @ wn + s[i])
        np.testing.assert_allclose(h.numpy(feeds={"seq": s}), ref, rtol=1e-5, atol=1e-6)


def test_loop_elementwise_over_dynamic_rows_and_two_scans():
    xs = tc.Tensor.placeholder("x", ("N", 3))
    ys = tc.Tensor.placeholder("y", ("N", 3))
    total = tc.loop(lambda acc, x, y: acc + x * y, tc.zeros(3), xs, ys)
    for n in (2, 5):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        y = np.random.default_rng(n + 1).standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(total.numpy(feeds={"x": x, "y": y}), (x * y).sum(0), rtol=1e-5, atol=1e-6)


def test_loop_feeds_must_agree_on_dynamic_dim():
    xs, ys = tc.Tensor.placeholder("x", ("N", 3)), tc.Tensor.placeholder("y", ("N", 3))
    total = tc.loop(lambda acc, x, y: acc + x * y, tc.zeros(3), xs, ys)
    with pytest.raises(ValueError, match="dynamic dim N"):
        total.numpy(feeds={"x": np.zeros((2, 3)), "y": np.zeros((3, 3))})
    with pytest.raises(KeyError, match="'y' was not fed"):
        total.numpy(feeds={"x": np.zeros((2, 3))})


def test_loop_static_length_realizes_and_captured_tensor_is_lifted():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    scale = tc.Tensor(np.float32(2.0)) + 1.0  # computed outside, used inside: lifted to an operand
    out = tc.loop(lambda acc, row: acc * 0.5 + row * scale, tc.zeros(3), tc.Tensor(x))
    body = next(n for n in toposort([out.node]) if n.op is Ops.LOOP).arg[0]
    ref = np.zeros(3, np.float32)
    for r in x:
        ref = ref * 0.5 + r * 3.0
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)
    leaves = [n for n in toposort([body.output]) if not n.src]
    assert all(n.op in (Ops.INPUT, Ops.CONST, Ops.BUFFER) for n in leaves)
    assert len(body.inputs) == 3  # carry, row, lifted `scale`


def test_loop_body_must_keep_carry_shape():
    with pytest.raises(ValueError, match="loop"):
        tc.loop(lambda acc, row: acc.sum(), tc.zeros(3), tc.ones(4, 3))


def test_cond_runtime_predicate_takes_one_branch():
    p = tc.Tensor.placeholder("p", (), tc.float32)
    x = tc.Tensor(np.array([1.0, -2.0, 3.0], np.float32))
    out = tc.cond(p > 0, lambda v: v * 2, lambda v: v.exp(), x)
    np.testing.assert_allclose(out.numpy(feeds={"p": 1.0}), [2, -4, 6])
    np.testing.assert_allclose(out.numpy(feeds={"p": -1.0}), np.exp([1.0, -2.0, 3.0]), rtol=1e-6)
    assert any(n.op is Ops.IF for n in toposort([out.node]))


def test_cond_static_predicate_and_captures_in_both_branches():
    a, b = tc.Tensor(np.float32(3.0)) * 1, tc.Tensor(np.float32(5.0)) * 1
    x = tc.ones(2)
    for flag, want in ((True, 3.0), (False, 5.0)):
        out = tc.cond(tc.Tensor(flag), lambda v: v * a, lambda v: v * b, x)
        np.testing.assert_allclose(out.numpy(), [want, want])


def test_cond_branch_types_must_match():
    with pytest.raises(ValueError, match="cond"):
        tc.cond(tc.Tensor(True), lambda v: v, lambda v: v.sum(), tc.ones(3))


def test_cond_only_taken_branch_runs():
    """The untaken branch would index out of a shape it does not have at run time: it must not run."""
    p = tc.Tensor.placeholder("p", (), tc.bool)
    out = tc.cond(p, lambda v: v + 1, lambda v: (v.log()), tc.Tensor(np.array([-1.0], np.float32)))
    np.testing.assert_allclose(out.numpy(feeds={"p": True}), [0.0])
    assert np.isnan(out.numpy(feeds={"p": False})[0])


def test_loop_gradients_static_trip_count_vs_finite_differences():
    """An RNN h <- tanh(h @ W + x_i): gradients to h0, to every x_i and to the captured W."""
    import numpy_ref as R
    rng = np.random.default_rng(3)
    h0v, xv, wv = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((3,), (5, 3), (3, 3)))
    h0, x, w = (tc.Tensor(v, requires_grad=True) for v in (h0v, xv, wv))
    out = tc.loop(lambda h, row: (h @ w + row).tanh(), h0, x)
    k = np.array([1.0, -2.0, 0.5])
    (out * tc.Tensor(k.astype(np.float32))).sum().backward()

    def rnn(h, xs, ww):
        for r in xs:
            h = np.tanh(h @ ww + r)
        return h * k
    args = [h0v.astype(np.float64), xv.astype(np.float64), wv.astype(np.float64)]
    for i, t in enumerate((h0, x, w)):
        np.testing.assert_allclose(t.grad.numpy(), R.numeric_grad(rnn, args, i), rtol=1e-4, atol=1e-5)


def test_loop_gradient_over_dynamic_dimension_is_refused():
    w = tc.ones(3, requires_grad=True)
    with pytest.raises(NotImplementedError, match="static trip count"):
        tc.loop(lambda acc, row: acc + row * w, tc.zeros(3), tc.Tensor.placeholder("x", ("N", 3)))
    with tc.no_grad():
        out = tc.loop(lambda acc, row: acc + row * w, tc.zeros(3), tc.Tensor.placeholder("x", ("N", 3)))
    np.testing.assert_allclose(out.numpy(feeds={"x": np.ones((2, 3))}), [2, 2, 2])


def test_cond_gradients_to_operands_and_captured_tensors():
    """d/dx and d/dw of cond(p, x*w + x^2, sin(x) * 3) for both predicate values, vs the formulas."""
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    x, w = tc.Tensor(xv, requires_grad=True), tc.Tensor(wv, requires_grad=True)
    p = tc.Tensor.placeholder("p", (), tc.bool)
    out = tc.cond(p, lambda v: v * w + v * v, lambda v: v.sin() * 3, x)
    (out * tc.Tensor(np.arange(1, 5, dtype=np.float32))).sum().backward()
    k = np.arange(1, 5)
    np.testing.assert_allclose(x.grad.numpy(feeds={"p": True}), k * (wv + 2 * xv), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(feeds={"p": False}), k * 3 * np.cos(xv), rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(feeds={"p": True}), k * xv, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(feeds={"p": False}), 0)
    verify([x.grad.node, w.grad.node])


def test_cond_gradient_matches_where_when_static():
    """With a constant predicate, cond and where give the same value and gradients (fine-difference free)."""
    rng = np.random.default_rng(1)
    av = rng.uniform(0.5, 2, (2, 3)).astype(np.float32)
    for flag in (True, False):
        a1, a2 = tc.Tensor(av, requires_grad=True), tc.Tensor(av, requires_grad=True)
        s1, s2 = tc.Tensor(np.float32(0.7), requires_grad=True), tc.Tensor(np.float32(0.7), requires_grad=True)
        c1, c2 = s1 * 1.5, s2 * 1.5  # captured non-leaf tensors
        # the branches capture c1 (what this test checks); cond traces them in this iteration
        y1 = tc.cond(tc.Tensor(flag), lambda a: (a * c1).exp().sum(1), lambda a: a.log().sum(1) * c1, a1)  # noqa: B023
        y2 = tc.where(tc.Tensor(flag), (a2 * c2).exp().sum(1), a2.log().sum(1) * c2)
        y1.sum().backward()
        y2.sum().backward()
        np.testing.assert_allclose(y1.numpy(), y2.numpy(), rtol=1e-6)
        np.testing.assert_allclose(a1.grad.numpy(), a2.grad.numpy(), rtol=1e-5)
        np.testing.assert_allclose(s1.grad.numpy(), s2.grad.numpy(), rtol=1e-5)


def test_dynamic_batch_dimension_through_a_model():
    """A graph whose batch dimension is dynamic: one graph, any batch size, same values as static."""
    tc.manual_seed(2)
    m = tc.nn.Sequential(tc.nn.Linear(5, 7), tc.nn.ReLU(), tc.nn.Linear(7, 3))
    x = tc.Tensor.placeholder("x", ("N", 5))
    y = tc.functional.softmax(m(x)[:, 1:], -1)
    assert y.shape == ("N", 2)
    for n in (1, 6):
        a = np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32)
        want = tc.functional.softmax(m(tc.Tensor(a))[:, 1:], -1).numpy()
        np.testing.assert_allclose(y.numpy(feeds={"x": a}), want, rtol=1e-6, atol=1e-7)


def test_dynamic_dimension_misuse_is_a_clear_error():
    x = tc.Tensor.placeholder("x", ("N", 5))
    with pytest.raises(tc.ShapeError, match="mean: needs a static size"):
        x.mean(0)
    with pytest.raises(tc.ShapeError, match="getitem: dimension 0 is dynamic"):
        x[0]
    with pytest.raises(tc.ShapeError, match=r"add: shapes cannot broadcast \(shapes: \(N, 5\), \(3, 5\)\)"):
        x + tc.ones(3, 5)
