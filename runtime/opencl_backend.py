"""``Device("opencl")``: graphs scheduled into fused kernels, rendered as OpenCL C, run via pyopencl.

On machines without a GPU the OpenCL platform is PoCL on the CPU (the
``pocl-binary-distribution`` wheel in the dev extra, or Debian's
``pocl-opencl-icd``). Programs are cached by source for the life of the
process, and all the new kernels of one graph are built as one program (PoCL
compiles a program far faster than the same kernels one by one). Launches use a
fixed work-group size, so a kernel is compiled once whatever the tensor size.

``backend.launches`` counts kernels launched and ``backend.log`` names them
(per ``execute``): that is how the tests see fusion.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from isa.ints import align_up

from compiler.ir.graph import Node
import compiler.render.schedule as sched
from compiler.render.opencl import render
from runtime.gpu_common import DeviceUnavailable, bind, run_schedule

LOCAL = 64
PRECOMPILE_CHUNK = 128
INSTALL_HINT = ("install pyopencl and an OpenCL platform: `pip install -e '.[dev]'` (pulls pyopencl and "
                "the PoCL CPU platform, pocl-binary-distribution), or `pip install pyopencl "
                "pocl-binary-distribution`, or `apt-get install pocl-opencl-icd` for Debian's PoCL")


def _import_cl():
    try:
        import pyopencl as cl  # noqa: PLC0415 (optional dependency)
    except ImportError as e:
        raise DeviceUnavailable(f"Device('opencl') needs pyopencl, which is not installed ({e}); "
                                f"{INSTALL_HINT}") from None
    return cl


def find_device():
    """(pyopencl module, cl.Device) for the first OpenCL device, or DeviceUnavailable saying what to install.
    ``TETRACHIP_OPENCL_PLATFORM`` picks a platform by a substring of its name."""
    cl = _import_cl()
    try:
        platforms = cl.get_platforms()
    except Exception as e:  # pyopencl raises LogicError/RuntimeError when no ICD is found
        raise DeviceUnavailable(f"Device('opencl'): no OpenCL platform found ({str(e).strip()}); "
                                f"{INSTALL_HINT}") from None
    want = os.environ.get("TETRACHIP_OPENCL_PLATFORM", "")
    for p in platforms:
        if want.lower() in p.name.lower():
            try:
                devs = p.get_devices()
            except Exception:  # a platform with no usable device
                continue
            if devs:
                return cl, devs[0]
    raise DeviceUnavailable(f"Device('opencl'): no OpenCL device found"
                            f"{' on a platform matching ' + repr(want) if want else ''}; {INSTALL_HINT}")


#: a kernel every OpenCL C compiler builds: a platform that cannot is unusable on this machine
_PROBE = "__kernel void tetrachip_probe(__global float *a) { a[get_global_id(0)] += 1.0f; }"


def _probe_build(cl, ctx, device) -> None:
    """Build ``_PROBE``; DeviceUnavailable naming the platform and its compiler's message when it fails
    (a PoCL whose LLVM does not know this host CPU answers "unknown target CPU 'generic'" to every build)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            cl.Program(ctx, _PROBE).build()
    except cl.RuntimeError as e:
        log = [ln.strip() for ln in str(e).splitlines() if ln.strip().lower().startswith("error")]
        why = log[0] if log else str(e).strip().splitlines()[0]
        hint = (" (its LLVM does not know this host CPU: a newer PoCL, Debian's pocl-opencl-icd or another "
                "platform, TETRACHIP_OPENCL_PLATFORM, may)") if "unknown target cpu" in why.lower() else ""
        raise DeviceUnavailable(f"Device('opencl'): the platform {device.platform.name.strip()!r} cannot build a "
                                f"kernel for {device.name.strip()!r} on this machine: {why}{hint}") from None


_PROGRAMS: dict = {}   # (context id, kernel source) -> cl.Kernel, shared by every backend in the process
_CONTEXTS: dict = {}   # device -> cl.Context: one per device for the whole process, never freed, so a
                       # context id in _PROGRAMS can never be reused by a later context (INVALID_CONTEXT)


class OpenCLBackend:
    name = "opencl"

    def __init__(self):
        self.cl, self.device = find_device()
        key = (self.device.platform.name, self.device.name, self.device.int_ptr)
        if key not in _CONTEXTS:
            ctx = self.cl.Context([self.device])
            _probe_build(self.cl, ctx, self.device)
            _CONTEXTS[key] = ctx
        self.ctx = _CONTEXTS[key]
        self.queue = self.cl.CommandQueue(self.ctx)
        self.launches = 0
        self.log: list[str] = []

    def __repr__(self) -> str:
        return f"OpenCLBackend({self.device.name.strip()!r} on {self.device.platform.name.strip()!r})"

    # -------------------------------------------------------------------- Device interface
    def execute(self, outputs: list[Node], feeds: dict) -> list[np.ndarray]:
        bound, dims = bind(outputs, feeds)
        self.log = []
        return self.execute_bound(outputs, bound, dims)

    def execute_bound(self, outputs, bound: dict, dims: dict) -> list[np.ndarray]:
        return run_schedule(self, render, outputs, bound, dims)

    # -------------------------------------------------------------------- what run_schedule calls
    def alloc(self, nbytes: int):
        return self.cl.Buffer(self.ctx, self.cl.mem_flags.READ_WRITE, max(nbytes, 1))

    def launch(self, r, n: int, args: list) -> None:
        args = [a if kind == "buf" else np.int32(a) if kind == "int" else np.float32(a)
                for (kind, _), a in zip(r.args, args)]
        _PROGRAMS[(id(self.ctx), r.src)](self.queue, (align_up(n, LOCAL),), (LOCAL,), *args)

    def download(self, buf, arr: np.ndarray) -> None:
        self.cl.enqueue_copy(self.queue, arr, buf)

    def precompile(self, workload) -> int:
        """Run ``workload()`` on the numpy reference device, recording every graph it executes, then
        build all the kernels those graphs need in a few large programs (PoCL pays a large fixed cost
        per program). A later run of the same workload on this device finds every kernel compiled.
        Returns the number of kernels built."""
        from runtime.device import Device  # noqa: PLC0415
        from runtime.numpy_backend import NumpyBackend  # noqa: PLC0415
        rendered: dict[str, object] = {}

        class Recorder(NumpyBackend):
            def execute(self, outputs, feeds):
                try:
                    s = sched.schedule(outputs, bind(outputs, feeds)[1])
                    rendered.update((r.src, r) for r in map(render, s.kernels()))
                except Exception:  # noqa: BLE001  (recording is best effort; the real run will report)
                    pass
                return super().execute(outputs, feeds)

        dev = Device("numpy")
        dev.backend = Recorder()
        with dev:
            workload()
        before = len(_PROGRAMS)
        self.compile(rendered.values(), chunk=PRECOMPILE_CHUNK)
        return len(_PROGRAMS) - before

    # -------------------------------------------------------------------- helpers
    def compile(self, rendered, chunk: int = 0) -> None:
        new = list({r.src: r for r in rendered if (id(self.ctx), r.src) not in _PROGRAMS}.values())
        step = chunk or len(new) or 1
        for i in range(0, len(new), step):
            part = new[i:i + step]
            with warnings.catch_warnings():  # the compiler's notes on generated code are not the user's
                warnings.simplefilter("ignore", self.cl.CompilerWarning)
                prog = self.cl.Program(self.ctx, "\n".join(r.src for r in part)).build()
            for r in part:
                _PROGRAMS[(id(self.ctx), r.src)] = self.cl.Kernel(prog, r.name)

    def upload(self, arr: np.ndarray):
        mf = self.cl.mem_flags
        if arr.nbytes == 0:
            return self.cl.Buffer(self.ctx, mf.READ_ONLY, 1)
        return self.cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=arr)

