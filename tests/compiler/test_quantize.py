"""Quantization parameters: requantization scales approximate the real multipliers."""
import numpy as np

from compiler.lower.quantize import SCALE_MAX, quantize_array, requant_params
from isa import semantics as sem
from isa.table import Round


def test_requant_params_approximate_multipliers():
    mult = np.array([0.001, 0.0173, 0.5, 0.25])
    scale, shift = requant_params(mult)
    assert scale.max() <= SCALE_MAX
    assert scale.max() > SCALE_MAX // 2                     # the shift uses the int16 range
    assert np.all(np.abs(scale / 2.0 ** shift - mult) <= 2.0 ** -(shift + 1))


def test_requantize_of_accumulator_matches_float_rounding():
    mult = np.array([0.0123])
    scale, shift = requant_params(mult)
    acc = np.arange(-20000, 20000, 37, dtype=np.int32)[:, None]
    y = sem.requantize(acc, scale, shift, 0, -128, 127, Round.HALF_UP)
    want = np.clip(np.floor(acc * mult[0] + 0.5), -128, 127)
    assert np.abs(y.astype(np.int64) - want).max() <= 1


def test_quantize_array_symmetric():
    x = np.array([-1.0, -0.5, 0.0, 0.26, 1.0, 3.0])
    q = quantize_array(x, 1 / 127)
    assert list(q) == [-127, -64, 0, 33, 127, 127]
