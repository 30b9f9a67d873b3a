"""Generated GEMM programs give numpy's int32 matmul bit for bit, on many shapes and configs."""

from __future__ import annotations

import numpy as np
import pytest

from isa import ChipConfig, timing
from sim.programs import GemmError, gemm, run_gemm

SHAPES = [
    (1, 1, 1, "tiny"), (1, 1, 1, "base"),
    (4, 4, 4, "tiny"), (8, 8, 8, "tiny"),
    (5, 7, 3, "tiny"),                 # K, N not multiples; M, N smaller than... the 4x4 array
    (3, 2, 2, "base"),                 # M, K, N all smaller than the 16x16 array
    (17, 33, 15, "base"),              # K not a multiple, N smaller than the array
    (100, 300, 77, "base"),
    (64, 64, 64, "base"),
    (40, 24, 40, "small"),
    (300, 70, 40, "small"),            # several weight-slot groups
    (2000, 40, 20, "small"),           # A does not fit SPM: M tiled (two A buffers), M edge
    (1500, 33, 9, "small"),
    (130, 129, 131, "large"),
]


@pytest.mark.parametrize("M,K,N,config", SHAPES)
def test_gemm_bit_exact(M, K, N, config):
    rng = np.random.default_rng(M * 7 + K * 3 + N)
    A = rng.integers(-128, 128, (M, K), dtype=np.int8)
    B = rng.integers(-128, 128, (K, N), dtype=np.int8)
    C, stats, chip = run_gemm(A, B, config)
    assert C.dtype == np.int32
    assert (C == A.astype(np.int32) @ B.astype(np.int32)).all()
    cfg = ChipConfig.preset(config)
    # the MXU cannot beat its peak, and it did at least the GEMM's MACs
    assert stats.cycles >= timing.ideal_gemm_cycles(cfg, M, K, N)
    assert stats.mxu_macs >= M * K * N


def test_gemm_extreme_values():
    A = np.full((20, 50), -128, np.int8)
    B = np.full((50, 19), -128, np.int8)
    C, _, _ = run_gemm(A, B, "small")
    assert (C == 50 * 128 * 128).all()


def test_gemm_512_cube_utilization():
    """The contract's utilization budget (section 7): >= 95% of the MXU on 512^3 on base."""
    rng = np.random.default_rng(0)
    A = rng.integers(-128, 128, (512, 512), dtype=np.int8)
    B = rng.integers(-128, 128, (512, 512), dtype=np.int8)
    C, stats, _ = run_gemm(A, B, "base")
    assert (C == A.astype(np.int32) @ B.astype(np.int32)).all()
    assert 512 ** 3 / (256 * stats.cycles) >= 0.95


def test_gemm_layout_and_errors():
    g = gemm(10, 20, 30, "tiny")
    assert g.a_addr == 0 and g.b_addr >= 200 and g.c_addr >= g.b_addr + 600
    assert g.layout["C"]["dtype"] == "int32"
    assert g.program.manifest["outputs"]["C"][0] == g.c_addr
    with pytest.raises(GemmError):
        gemm(1000, 1000, 1000, "tiny")         # DRAM too small
    with pytest.raises(GemmError):
        gemm(0, 3, 3, "tiny")
