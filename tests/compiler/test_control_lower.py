"""A data-dependent loop on the chip: sld reads a VPU result, the scalar unit branches on it."""
import numpy as np
import pytest

from compiler.lower.control_converge import until_converged
from compiler.lower.schedule import ChipCompileError


def test_converges_with_data_dependent_trip_count():
    rng = np.random.default_rng(0)
    b = rng.integers(-1000, 1000, (3, 16))
    loop = until_converged(3, 3, b, 2, tol=0, max_iter=500)
    trips = []
    for scale in (1, 1000, 10 ** 6):
        x0 = rng.integers(-scale, scale, (3, 16))
        x, t, stats = loop.run(x0)
        x_ref, t_ref = loop.reference(x0)
        np.testing.assert_array_equal(x, x_ref)
        assert t == t_ref
        trips.append((t, stats.cycles))
        # converged: one more step changes nothing
        np.testing.assert_array_equal(loop.reference(x)[0], x)
    # one binary, different trip counts chosen by the data; cycles follow the trips
    assert len({t for t, _ in trips}) == 3
    assert sorted(trips) == sorted(trips, key=lambda p: p[1])
    assert "sld" in loop.program.disassemble()


def test_tolerance_and_max_iter():
    x0 = np.full((1, 16), 5000)
    loose = until_converged(1, 1, 0, 1, tol=100)           # x halves until the step is <= 100
    x, t, _ = loose.run(x0)
    assert (x.tolist(), t) == (loose.reference(x0)[0].tolist(), loose.reference(x0)[1])
    assert int(x[0, 0]) == 5000 >> t and t == 6
    capped = until_converged(1, 1, 0, 1, tol=0, max_iter=4)
    x, t, _ = capped.run(x0)
    assert t == 4 and int(x[0, 0]) == 5000 >> 4


def test_errors():
    with pytest.raises(ChipCompileError, match="rows do not fit ACC"):
        until_converged(10 ** 6, 1, 0, 1)
