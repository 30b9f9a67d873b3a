"""``Device("cuda")``: the same scheduled kernels as Device("opencl"), rendered as CUDA C and compiled
with NVRTC through cupy (``pip install -e '.[gpu]'``; needs an NVIDIA GPU and driver).
Modules are cached by source for the life of the process."""
from __future__ import annotations

import numpy as np

from isa.ints import cdiv

from compiler.render.cuda import render
from runtime.gpu_common import DeviceUnavailable, bind, run_schedule

BLOCK = 128
INSTALL_HINT = ("install cupy for your CUDA version (`pip install -e '.[gpu]'` brings cupy-cuda12x) "
                "on a machine with an NVIDIA GPU and driver")
_MODULES: dict = {}   # kernel source -> cupy RawKernel
#: the compiler options every rendered kernel is built with (NVRTC here; nvcc in the tests)
NVRTC_OPTIONS = ("--std=c++14",)


def find_cupy():
    try:
        import cupy  # noqa: PLC0415 (optional dependency)
    except ImportError as e:
        raise DeviceUnavailable(f"Device('cuda') needs cupy, which is not installed ({e}); {INSTALL_HINT}") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001  (cupy raises CUDARuntimeError without a driver)
        raise DeviceUnavailable(f"Device('cuda'): no usable CUDA driver ({str(e).strip()}); {INSTALL_HINT}") from None
    if n == 0:
        raise DeviceUnavailable(f"Device('cuda'): no CUDA GPU found; {INSTALL_HINT}")
    return cupy


class CudaBackend:
    name = "cuda"

    def __init__(self):
        self.cp = find_cupy()
        self.launches = 0
        self.log: list[str] = []

    def execute(self, outputs, feeds) -> list[np.ndarray]:
        bound, dims = bind(outputs, feeds)
        self.log = []
        return self.execute_bound(outputs, bound, dims)

    def execute_bound(self, outputs, bound: dict, dims: dict) -> list[np.ndarray]:
        return run_schedule(self, render, outputs, bound, dims)

    def compile(self, rendered) -> None:
        for r in rendered:
            if r.src not in _MODULES:
                _MODULES[r.src] = self.cp.RawKernel(r.src, r.name, options=NVRTC_OPTIONS)

    def upload(self, arr: np.ndarray):
        return self.cp.asarray(arr) if arr.size else self.cp.empty(1, dtype=np.uint8)

    def alloc(self, nbytes: int):
        return self.cp.empty(max(nbytes, 1), dtype=np.uint8)

    def launch(self, r, n: int, args: list) -> None:
        args = [a if kind == "buf" else np.int32(a) if kind == "int" else np.float32(a)
                for (kind, _), a in zip(r.args, args)]
        _MODULES[r.src]((cdiv(n, BLOCK),), (BLOCK,), tuple(args))

    def download(self, buf, arr: np.ndarray) -> None:
        arr.reshape(-1).view(np.uint8)[:] = self.cp.asnumpy(buf.reshape(-1).view(self.cp.uint8))[:arr.nbytes]

