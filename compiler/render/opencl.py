"""OpenCL C dialect of the kernel renderer (executed by runtime/opencl_backend.py via pyopencl)."""
from __future__ import annotations

from compiler.ir.graph import Ops
from compiler.render.cstyle import Dialect, Rendered, render as _render
from compiler.render.schedule import Kernel

OPENCL = Dialect(
    name="opencl",
    kernel_prefix="__kernel void",
    buf_qual="__global",
    gid="get_global_id(0)",
    types={"float32": "float", "int32": "int", "int8": "char", "bool": "uchar"},
    unsigned="uint",
    funcs={Ops.SQRT: "sqrt", Ops.EXP: "exp", Ops.LOG: "log", Ops.SIN: "sin", Ops.ATAN: "atan"},
    neg_inf="-INFINITY",
)


def render(k: Kernel) -> Rendered:
    return _render(k, OPENCL)
