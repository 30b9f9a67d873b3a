"""Device("cuda"): every frontend op case renders to CUDA C (checked everywhere: the renderer needs
no GPU); the op cases run on the GPU when cupy and one are present (skipped otherwise, with the
reason); a missing cupy gives a message naming what to install."""
import sys

import pytest

from tests.gpu.gpu_helpers import device_or_skip

import test_tensor as T  # the frontend's cases (tests/compiler is on pytest's pythonpath)
from compiler.ir.passes import run_passes
from compiler.render.cuda import render as render_cuda
from compiler.render.schedule import schedule
from runtime.gpu_common import DeviceUnavailable


def test_every_op_case_renders_cuda_c():
    """Record each case's graphs on numpy and render all their kernels for CUDA."""
    from runtime.device import Device
    from runtime.numpy_backend import NumpyBackend
    srcs = set()

    class Rec(NumpyBackend):
        def execute(self, outputs, feeds):
            for k in schedule(run_passes(outputs)).kernels():
                r = render_cuda(k)
                assert r.src.startswith('extern "C" __global__ void ' + r.name)
                assert "get_global_id" not in r.src and "__global " not in r.src
                srcs.add(r.src)
            return super().execute(outputs, feeds)

    dev = Device("numpy")
    dev.backend = Rec()
    with dev:
        for case in T.CASES:
            T.test_value_and_grad_vs_numpy(case)
    assert len(srcs) > 100


def test_missing_cupy_names_what_to_install(monkeypatch):
    import tetrachip as tc
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(DeviceUnavailable, match="pip install -e '.\\[gpu\\]'"):
        tc.Device("cuda")


@pytest.mark.parametrize("case", T.CASES, ids=lambda c: c.name)
def test_op_on_cuda(case):
    dev = device_or_skip("cuda")
    with dev:
        T.test_value_and_grad_vs_numpy(case)
