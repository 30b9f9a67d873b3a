"""``schedule.gather_base``'s fast path for a tensor read whole and in order (a GEMM's plain input, an output read
without its unit axes) gives what the general gather gives, and every other read takes the general path."""
import numpy as np
import pytest

from compiler.lower.schedule import TensorInfo, gather_base


def _slow(x, t, midx):
    """The general gather (``is_identity`` answering no)."""
    orig = TensorInfo.is_identity
    try:
        TensorInfo.is_identity = lambda self, m: False
        return gather_base(x, t, midx)
    finally:
        TensorInfo.is_identity = orig


@pytest.mark.parametrize("shape, view", [((6, 1, 5), (6, 5)), ((6, 1, 5), (6, 1, 5)), ((4, 3, 2), (12, 2)),
                                         ((7,), (7,)), ((3, 1, 1, 4), (3, 4))])
def test_a_whole_tensor_in_order_in_any_shape(shape, view):
    t = TensorInfo("t", shape, tuple(range(len(shape))), "kernel")
    x = np.arange(t.numel, dtype=np.int32).reshape(shape) * 3 - 7
    midx = t.identity().reshape(view)
    assert t.is_identity(midx)
    got = gather_base(x, t, midx)
    assert got.shape == view
    np.testing.assert_array_equal(got, _slow(x, t, midx))
    np.testing.assert_array_equal(got, x.reshape(view))


def test_other_reads_take_the_general_path():
    t = TensorInfo("t", (6, 1, 5), (0, 1, 2), "kernel")
    x = np.arange(30, dtype=np.int32).reshape(6, 1, 5)
    ident = t.identity().reshape(6, 5)
    cases = {"transposed": ident.T.copy(), "shifted": ident + 1, "a row short": ident[:-1],
             "one element swapped": ident.copy()}
    cases["one element swapped"][2, [1, 3]] = cases["one element swapped"][2, [3, 1]]
    for name, midx in cases.items():
        assert not t.is_identity(midx), name
        np.testing.assert_array_equal(gather_base(x, t, midx), _slow(x, t, midx), err_msg=name)
    # the shifted read reaches one element past the end: zero there, as any read outside the tensor
    assert gather_base(x, t, cases["shifted"])[-1, -1] == 0
