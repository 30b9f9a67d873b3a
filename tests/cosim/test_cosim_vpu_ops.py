"""A compiled CNN using the VPU's lookup table (``vlutld``/``vlut``), ``vmax``/``vmin`` elementwise
kernels (max pooling, ``maximum``, split rows) and a folded clip runs on the chip's Verilog exactly
as on the simulator: the same outputs and the same cycle count."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tetrachip as tc
from verify.cosim import available

SIM = os.environ.get("SIM", "verilator")
F = tc.functional


def test_rtl_device_runs_lookup_table_and_pooling_kernels_like_the_simulator():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    tc.manual_seed(0)
    conv = tc.nn.Conv2d(3, 5, 3, padding=1)
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)

    def model(a):
        y = conv(a)
        return F.max_pool2d(y.silu(), 2).maximum(F.avg_pool2d(y, 2)).clamp(-0.5, 1.0)
    cm = tc.compile(model, [x], config="tiny")
    assert "vlut " in cm.asm and "vmax " in cm.asm
    ref = tc.Device("sim", config="tiny").run(cm, x)
    res = tc.Device("rtl", config="tiny", simulator=SIM).run(cm, x)
    assert res.stats.cycles == ref.stats.cycles > 0
    assert np.array_equal(res.output, ref.output)
    assert np.array_equal(res.output, cm.reference(x)[0])
