"""The assembly examples run on the simulator with correct results (inputs in DRAM, outputs vs numpy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim import Chip

EX = Path(__file__).resolve().parents[2] / "examples"


def test_gemm_tiled_example():
    chip = Chip("tiny", trace=True)
    chip.load(EX / "gemm_tiled.s")
    rng = np.random.default_rng(3)
    A = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    B = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    chip.write_dram(0x0000, A)
    chip.write_dram(0x0400, B)
    stats = chip.run()
    C = chip.read_dram(0x0800, 64, np.int32).reshape(8, 8)
    assert (C == A.astype(np.int32) @ B.astype(np.int32)).all()
    assert stats.mxu_macs >= 8 * 8 * 8 and stats.cycles > 0
    assert len(chip.trace.line_trace().splitlines()) == len(chip.trace.retired()) + 1


@pytest.mark.parametrize("n,bias", [(1, 0), (10, -7), (60, 100)])
def test_vector_loop_example(n, bias):
    chip = Chip("tiny")
    chip.load(EX / "vector_loop.s")
    x = np.random.default_rng(n).integers(-128, 128, (n, 4), dtype=np.int8)
    chip.write_dram(0x000, x)
    chip.set_args(r1=n, r2=bias)
    chip.run()
    y = chip.read_dram(0x800, n * 4, np.int8).reshape(n, 4)
    assert (y == np.clip(np.maximum(x.astype(np.int64) * 3 + bias, 0), -128, 127)).all()
