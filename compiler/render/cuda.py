"""CUDA C dialect of the kernel renderer (compiled with NVRTC by runtime/cuda_backend.py)."""
from __future__ import annotations

from compiler.ir.graph import Ops
from compiler.render.cstyle import Dialect, Rendered, render as _render
from compiler.render.schedule import Kernel

CUDA = Dialect(
    name="cuda",
    kernel_prefix='extern "C" __global__ void',
    buf_qual="",
    gid="blockIdx.x * blockDim.x + threadIdx.x",
    types={"float32": "float", "int32": "int", "int8": "signed char", "bool": "unsigned char"},
    unsigned="unsigned int",
    funcs={Ops.SQRT: "sqrtf", Ops.EXP: "expf", Ops.LOG: "logf", Ops.SIN: "sinf", Ops.ATAN: "atanf"},
    neg_inf="__int_as_float(0xff800000)",
)


def render(k: Kernel) -> Rendered:
    return _render(k, CUDA)
