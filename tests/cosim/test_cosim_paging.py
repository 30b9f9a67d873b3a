"""A paged program (docs/microarchitecture.md, "Programs longer than imem") on the chip's Verilog: the
cocotb bench loads each page one word per cycle and starts it; SPM, ACC, DRAM and the scalar registers
carry over, and the cycles, memories and per-instance trace equal the simulator's ``Chip.run_pages``."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tetrachip as tc
from isa.asm import assemble
from isa.config import ChipConfig
from verify.cosim import Cosim, Job, available, compare

SIM = os.environ.get("SIM", "verilator")


@pytest.fixture(scope="module")
def cosim():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    return Cosim(ChipConfig.preset("tiny"), 1, SIM)


def test_hand_written_pages_keep_registers_and_memories(cosim):
    cfg = cosim.cfg
    first = assemble("seti r5, 7\nsst r5, spm[2], 1\nsst r6, acc[3], 0\nhalt\n", cfg)
    second = assemble("add r7, r5, r6\nsst r7, acc[1], 0\nsld r8, spm[2], 1\nsst r8, spm[4], 0\nhalt\n", cfg)
    job = Job([first], [None], [{6: 40}], 1000, name="two pages", more=[[second]])
    res = cosim.run([job])[0]
    assert compare(cfg, job, res) is None
    r = res["chips"][0]
    assert r["done"] and r["acc"][1, 0] == 47 and r["spm"][4, 0] == 7
    assert len(res["pages"]) == 2
    assert r["cycles"] == sum(res["pages"]) + len(second)


def test_rtl_device_runs_a_paged_model_like_the_simulator():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((8, 8)).astype(np.float32) * 0.5 for _ in range(30)]

    def model(a):
        for w in ws:
            a = (a @ tc.Tensor(w)).relu()
        return a
    x = rng.standard_normal((6, 8)).astype(np.float32)
    cm = tc.compile(model, [x], config="tiny", dynamic={"N": 6})
    assert len(cm.pages) >= 2
    ref = tc.Device("sim", config="tiny", trace=True).run(cm, x[:5])
    res = tc.Device("rtl", config="tiny", trace=True, simulator=SIM).run(cm, x[:5])
    assert res.stats.cycles == ref.stats.cycles > sum(len(p) for p in cm.pages[1:])
    np.testing.assert_array_equal(res.output, ref.output)
    np.testing.assert_array_equal(res.output, cm.reference(x[:5])[0])
    assert res.trace.line_trace() == ref.trace.line_trace()
    assert res.stats.instances == ref.stats.instances
