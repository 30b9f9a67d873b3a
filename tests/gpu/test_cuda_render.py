"""Device("cuda"): every frontend op case renders to CUDA C (checked everywhere: the renderer needs
no GPU); the op cases run on the GPU when cupy and one are present (skipped otherwise, with the
reason); a missing cupy gives a message naming what to install."""
import functools
import sys

import pytest

from tests.gpu.gpu_helpers import device_or_skip

import test_tensor as T  # the frontend's cases (tests/compiler is on pytest's pythonpath)
from compiler.ir.passes import run_passes
from compiler.render.cuda import render as render_cuda
from compiler.render.schedule import schedule
from runtime.gpu_common import DeviceUnavailable


@functools.cache
def _rendered_op_suite() -> dict[str, str]:
    """Every distinct CUDA kernel the renderer makes for the frontend's op cases (values and
    gradients, recorded on numpy): source -> kernel name."""
    from runtime.device import Device
    from runtime.numpy_backend import NumpyBackend
    srcs: dict[str, str] = {}

    class Rec(NumpyBackend):
        def execute(self, outputs, feeds):
            for k in schedule(run_passes(outputs)).kernels():
                r = render_cuda(k)
                assert r.src.startswith('extern "C" __global__ void ' + r.name)
                assert "get_global_id" not in r.src and "__global " not in r.src
                srcs[r.src] = r.name
            return super().execute(outputs, feeds)

    dev = Device("numpy")
    dev.backend = Rec()
    with dev:
        for case in T.CASES:
            T.test_value_and_grad_vs_numpy(case)
    return srcs


def test_every_op_case_renders_cuda_c():
    """Record each case's graphs on numpy and render all their kernels for CUDA."""
    assert len(_rendered_op_suite()) > 100


def test_every_rendered_kernel_compiles_with_nvcc(tmp_path):
    """Every kernel of the op suite compiled to PTX by nvcc (no GPU needed), with the options the
    backend gives NVRTC: one translation unit, each kernel renamed apart so equal names of different
    sources cannot clash. Runs wherever nvcc is installed (make test on the project's machines)."""
    import re
    import shutil
    import subprocess
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed: the rendered CUDA C is checked by the renderer test only")
    from runtime.cuda_backend import NVRTC_OPTIONS
    srcs = _rendered_op_suite()
    unit = []
    for i, (src, name) in enumerate(srcs.items()):
        unit.append(re.sub(rf"\b{re.escape(name)}\b", f"{name}__{i}", src, count=1))
    cu = tmp_path / "op_suite.cu"
    cu.write_text("\n\n".join(unit))
    ptx = tmp_path / "op_suite.ptx"
    res = subprocess.run([nvcc, "-ptx", *NVRTC_OPTIONS, "-o", str(ptx), str(cu)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"nvcc failed on the op suite's kernels:\n{res.stderr[-4000:]}"
    entries = set(re.findall(r"^\.visible \.entry (\w+)\(", ptx.read_text(), flags=re.M))
    assert len(entries) == len(srcs), f"{len(srcs)} kernels rendered, {len(entries)} entries in the PTX"


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
