"""One tensor read by several kernels with different views (ResNet's projection shortcut: a padded 3x3
conv and an unpadded strided 1x1 conv of the same input). The padded reader gives the tensor a zero
border; every other reader's DMA addresses must account for it. Bit-exact on the simulator."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.frontend import nn


@pytest.mark.parametrize("stride,pad", [(2, 1), (1, 1), (1, 2)])
def test_padded_and_unpadded_readers_of_one_tensor(stride, pad):
    rng = np.random.default_rng(stride * 10 + pad)
    tc.manual_seed(stride * 10 + pad)
    a = nn.Conv2d(8, 16, 3, stride=stride, padding=pad)
    b = nn.Conv2d(8, 16, 1, stride=stride)
    x = rng.standard_normal((2, 8, 7, 7)).astype(np.float32)

    def model(x):
        return a(x).relu(), b(x)

    cm = tc.compile(model, [x], "small")
    res = tc.Device("sim", config="small").run(cm, {"x": x})
    ref = cm.reference({"x": x})
    flt = cm.float_reference({"x": x})
    for got, want, f in zip(res.outputs, ref, flt):
        np.testing.assert_array_equal(got, want)
        # both outputs are near the float model: a misread input gives errors of the output's own size
        assert np.abs(got - f).max() < 0.05 * np.abs(f).max() + 0.02


def test_a_padded_read_of_a_one_pixel_multichannel_tensor():
    """A 1x1-pixel output with two channels read by a padded conv: its copy gains a border on axes of size
    1 (TensorInfo.wide), which the border fill must zero (found by the compiler fuzzer)."""
    F = tc.functional
    w1 = tc.Tensor(np.array([1.0, -0.5], np.float32).reshape(2, 1, 1, 1))
    w2 = tc.Tensor(np.array([0.5, 0.25], np.float32).reshape(1, 2, 1, 1))

    def model(x):
        return F.conv2d(F.conv2d(x, w1), w2, padding=1)

    x = np.ones((1, 1, 1, 1), np.float32)
    cm = tc.compile(model, [x], "tiny")
    got = tc.Device("sim", config="tiny").run(cm, x).outputs[0]
    np.testing.assert_array_equal(got, cm.reference(x)[0])
    assert got[0, 0, 0, 0] == 0 and got[0, 0, 1, 1] != 0
