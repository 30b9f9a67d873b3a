"""Registers the GPU comparison backends: ``Device("opencl")``, ``Device("cuda")``, ``Device("triton")``.
Importing this is cheap: each backend imports its library (pyopencl, cupy, triton) only when a
Device is built, and says what to install when it is missing."""
from runtime import opencl_backend  # noqa: F401
from runtime import cuda_backend, triton_backend  # noqa: F401,E402
