"""The frontend's op tests (tests/compiler/test_tensor.py), values and gradients, re-run with
``Device("opencl")`` as the default device: the same cases, imported, not copied.

The fixture first records every graph the cases execute (on numpy) and builds all their kernels
in a few programs: PoCL's cost is per program, so this saves most of the compile time."""
import pytest

from tests.gpu.gpu_helpers import device_or_skip

import test_tensor as T  # the frontend's cases (tests/compiler is on pytest's pythonpath)


def _all_cases():
    for case in T.CASES:
        try:
            T.test_value_and_grad_vs_numpy(case)
        except Exception:  # noqa: BLE001  (a failing case fails in its own test below)
            pass


@pytest.fixture(scope="module")
def ocl():
    dev = device_or_skip("opencl")
    dev.backend.precompile(_all_cases)
    return dev


@pytest.mark.parametrize("case", T.CASES, ids=lambda c: c.name)
def test_op_on_opencl(case, ocl):
    before = ocl.backend.launches
    with ocl:
        T.test_value_and_grad_vs_numpy(case)
    assert ocl.backend.launches > before, "nothing ran on the OpenCL device"
