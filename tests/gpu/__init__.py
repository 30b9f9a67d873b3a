"""Tests of the GPU backends (OpenCL, CUDA, Triton); each skips with the reason where its device cannot start."""
