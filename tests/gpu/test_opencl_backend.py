"""Device("opencl") itself: fusion visible in the kernel count, programs cached by source,
control flow and dynamic dims, and a clear message (no traceback) when OpenCL is missing."""
import sys

import numpy as np
import pytest

from tests.gpu.gpu_helpers import device_or_skip

import tetrachip as tc
from runtime import opencl_backend
from runtime.gpu_common import DeviceUnavailable


@pytest.fixture(scope="module")
def ocl():
    return device_or_skip("opencl")


def _launched(dev, *tensors, feeds=None):
    out = dev.run(*tensors, feeds=feeds)
    return out, list(dev.backend.log)


def test_elementwise_chain_is_one_kernel(ocl):
    a = np.linspace(-2, 2, 35, dtype=np.float32).reshape(5, 7)
    x = tc.Tensor(a)
    y = ((x.T * 2 + 1).exp().relu().sigmoid() + x.T.abs()).sqrt()
    (got,), log = _launched(ocl, y)
    want = np.sqrt(1 / (1 + np.exp(-np.maximum(np.exp(a.T * 2 + 1), 0))) + np.abs(a.T))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(log) == 1, log


def test_reduce_fuses_its_operand_and_matmul_is_one_kernel(ocl):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    (got,), log = _launched(ocl, (tc.Tensor(a).exp() * 2).sum(1))
    np.testing.assert_allclose(got, (np.exp(a) * 2).sum(1), rtol=1e-5)
    assert len(log) == 1, log
    (got,), log = _launched(ocl, tc.Tensor(a) @ tc.Tensor(b))
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert len(log) == 1, log


def test_shared_value_is_computed_once(ocl):
    x = tc.Tensor(np.arange(6, dtype=np.float32))
    h = (x * 3).exp()
    (s, m), log = _launched(ocl, h.sum(), (h * h).sum())
    assert len(log) == 3, log  # h, then the two reductions read it
    e = np.exp(np.arange(6) * 3.0)
    np.testing.assert_allclose([s, m], [e.sum(), (e * e).sum()], rtol=1e-5)


def test_same_structure_other_shape_reuses_the_program(ocl):
    before = len(opencl_backend._PROGRAMS)
    for n in (3, 17, 200):
        x = tc.Tensor(np.ones((n, 2), np.float32))
        (got,), _ = _launched(ocl, (x * 5 + 1).log().sum(0))
        np.testing.assert_allclose(got, np.full(2, n * np.log(6)), rtol=1e-5)
    assert len(opencl_backend._PROGRAMS) - before <= 1


def test_dtypes_and_integer_wrap(ocl):
    i8 = tc.Tensor(np.array([100, -100, 7], np.int8))
    (got,), _ = _launched(ocl, i8 + i8)
    np.testing.assert_array_equal(got, (np.array([100, -100, 7], np.int8) * 2).astype(np.int8))
    b = tc.Tensor(np.array([1.0, -2.0, 3.0], np.float32))
    (got,), _ = _launched(ocl, (b > 0).cast(tc.int32) + b.cast(tc.int32))
    np.testing.assert_array_equal(got, [2, -2, 4])


def test_control_flow_and_dynamic_dims(ocl):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 4)).astype(np.float32) * 0.3
    seq = tc.Tensor.placeholder("seq", ("T", 4))
    h = tc.loop(lambda h, x: (h @ tc.Tensor(w) + x).tanh(), tc.zeros(4), seq)
    flip = tc.cond(seq.sum() > 0, lambda t: t * 2, lambda t: -t, h)
    for T in (1, 5):
        s = rng.standard_normal((T, 4)).astype(np.float32)
        want_h = np.zeros(4, np.float32)
        for row in s:
            want_h = np.tanh(want_h @ w + row)
        want = want_h * 2 if s.sum() > 0 else -want_h
        (got,) = ocl.run(flip, feeds={"seq": s})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_missing_pyopencl_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyopencl", None)  # import pyopencl now raises ImportError
    with pytest.raises(DeviceUnavailable, match="pip install .*pyopencl") as e:
        tc.Device("opencl")
    assert "pocl" in str(e.value).lower()


def test_no_platform_names_what_to_install(monkeypatch):
    pytest.importorskip("pyopencl", reason="pyopencl is not installed")
    import pyopencl as cl

    def no_platform():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
    monkeypatch.setattr(cl, "get_platforms", no_platform)
    with pytest.raises(DeviceUnavailable, match="no OpenCL platform found.*pocl"):
        tc.Device("opencl")
    monkeypatch.setattr(cl, "get_platforms", lambda: [])
    with pytest.raises(DeviceUnavailable, match="no OpenCL device found"):
        tc.Device("opencl")


def test_devices_created_and_dropped_keep_working(ocl):
    """Backends come and go (every ``Device("opencl")`` makes one); a kernel cached for one must never
    be launched with another's freed context (pyopencl: INVALID_CONTEXT), however ids are reused."""
    import gc
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    for _ in range(12):
        dev = tc.Device("opencl")
        (got,), _ = _launched(dev, (tc.Tensor(a) * 2 + 1).exp().sum(1))
        np.testing.assert_allclose(got, np.exp(a * 2 + 1).sum(1), rtol=1e-5)
        del dev
        gc.collect()


def test_a_platform_that_cannot_build_is_unavailable_with_its_compilers_message():
    """A PoCL whose LLVM does not know the host CPU fails every build: Device('opencl') says so (the tests
    above then skip with that reason) instead of failing at the first kernel."""
    class FakeCL:
        class RuntimeError(Exception):
            pass

        class CompilerWarning(Warning):
            pass

        class Program:
            def __init__(self, ctx, src):
                assert "__kernel" in src

            def build(self):
                raise FakeCL.RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nBuild on <dev>:\n\n"
                                          "error: unknown target CPU 'generic'\nDevice failed to build the program")

    class Dev:
        name = "pthread-CPU "

        class platform:
            name = "Portable Computing Language"

    with pytest.raises(DeviceUnavailable, match=r"'Portable Computing Language' cannot build a kernel for "
                                                r"'pthread-CPU' on this machine: error: unknown target CPU 'generic' "
                                                r"\(its LLVM does not know this host CPU"):
        opencl_backend._probe_build(FakeCL, None, Dev())
