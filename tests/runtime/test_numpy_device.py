"""The Device registry and the numpy reference backend."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.ir import dtypes
from compiler.ir import engine
from compiler.ir.graph import Node, Ops
from runtime.device import Device


def test_unknown_device_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown device 'tpu9'; known devices: .*numpy"):
        Device("tpu9")


def test_registering_a_backend_is_one_call():
    calls = []

    class Recording:
        def execute(self, outputs, feeds):
            calls.append(len(outputs))
            return Device("numpy").execute(outputs, feeds)

    Device.register("recording", Recording)
    try:
        assert "recording" in Device.known()
        x = tc.Tensor(np.arange(4, dtype=np.float32)) * 3
        with Device("recording"):
            np.testing.assert_array_equal(x.numpy(), [0, 3, 6, 9])
        assert calls == [1]
        assert isinstance(engine.get_default_device(), Device) and engine.get_default_device().name == "numpy"
    finally:
        Device._backends.pop("recording")


def test_device_run_does_not_cache():
    x = tc.Tensor(np.ones(3, np.float32)) + 1
    (v,) = Device("numpy").run(x)
    np.testing.assert_array_equal(v, [2, 2, 2])
    assert x.node.op is Ops.ADD  # still lazy
    x.realize()
    assert x.node.op is Ops.BUFFER


@pytest.mark.parametrize("dt, a, b", [
    (dtypes.int8, [100, -100, 7], [100, -100, 9]),     # int8 arithmetic wraps as on the chip's lanes
    (dtypes.int32, [2**30, -5, 7], [2**30, 3, -9]),
])
def test_integer_semantics_wrap(dt, a, b):
    x, y = tc.Tensor(np.array(a), dt), tc.Tensor(np.array(b), dt)
    want_add = (np.array(a, dt.np) + np.array(b, dt.np))
    want_mul = (np.array(a, dt.np) * np.array(b, dt.np))
    np.testing.assert_array_equal((x + y).numpy(), want_add)
    np.testing.assert_array_equal((x * y).numpy(), want_mul)
    assert (x + y).numpy().dtype == dt.np


def test_dtype_promotion_rules():
    i8 = tc.Tensor(np.array([1, 2], np.int8))
    assert (i8 + 1).dtype == tc.int8
    assert (i8 + 1.5).dtype == tc.float32
    assert (i8 + tc.Tensor(np.array([1, 2], np.int32))).dtype == tc.int32
    assert (i8 > 1).dtype == tc.bool
    assert i8.sum().dtype == tc.int32 and i8.sum().item() == 3
    assert (i8 / 2).dtype == tc.float32
    assert tc.Tensor([1.0]).argmax().dtype == tc.int32


def test_errors_name_op_and_shapes_at_the_call():
    a, b = tc.ones(2, 3), tc.ones(4, 3)
    with pytest.raises(tc.ShapeError, match=r"add: shapes cannot broadcast \(shapes: \(2, 3\), \(4, 3\)\)"):
        a + b
    with pytest.raises(tc.ShapeError, match=r"matmul: contracted dimensions differ \(shapes: \(2, 3\), \(4, 3\)\)"):
        a @ b
    with pytest.raises(tc.ShapeError, match=r"reshape: cannot reshape 6 elements"):
        a.reshape(4, 2)
    with pytest.raises(tc.ShapeError, match=r"conv2d: channels"):
        tc.functional.conv2d(tc.ones(1, 3, 5, 5), tc.ones(2, 2, 3, 3))
    with pytest.raises(tc.ShapeError, match=r"getitem: index 5 out of range"):
        a[1, 5]
    with pytest.raises(TypeError, match="only float tensors"):
        tc.Tensor([1, 2], requires_grad=True)


def test_realize_without_device_is_a_clear_error():
    saved = engine._default_device[0]
    engine._default_device[0] = None
    try:
        with pytest.raises(RuntimeError, match="import tetrachip"):
            (tc.ones(2) + 1).numpy()
    finally:
        engine._default_device[0] = saved


def test_realized_values_are_reused_by_older_graphs():
    x = tc.Tensor(np.arange(3, dtype=np.float32)) * 2
    y = x + 1
    x.realize()
    node = x.node
    assert node.op is Ops.BUFFER
    np.testing.assert_array_equal(y.numpy(), [1, 3, 5])
    assert Node is not None
