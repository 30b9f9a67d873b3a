"""Kernel renderers for the GPU comparison backends: the graph IR scheduled into fused kernels
(``schedule``), read through strided views (``view``), printed as OpenCL C or CUDA C (``cstyle``,
``opencl``, ``cuda``)."""
