"""The simulator reads the facts isa/table.py declares: memory dtypes and element bytes, the
requantizer's reset, the VPU op groups."""

from __future__ import annotations

import numpy as np
import pytest

from isa import semantics as sem
from isa.table import QCFG_RESET, SPACE_BYTES, SPACE_DTYPE, SPACE_NAME, VPU_BINARY, VPU_UNARY, Space
from sim import Chip
from sim.handlers import HANDLERS, q_vbin, q_vun

CFG = "tiny"


def run(src: str, setup=None) -> Chip:
    chip = Chip(CFG)
    chip.load(src + "\nhalt\n")
    if setup:
        setup(chip)
    chip.run(max_cycles=100_000)
    return chip


@pytest.mark.parametrize("space", list(Space))
def test_memories_hold_the_space_dtype(space):
    chip = Chip(CFG)
    assert chip.mem(space).dtype == SPACE_DTYPE[space]
    assert chip.mem(space).shape[1] == chip.cfg.cols


@pytest.mark.parametrize("space", list(Space))
def test_dma_counts_bytes_of_the_space(space):
    chip = run(f"dma.ld {SPACE_NAME[space]}[0], dram[0], rows=3")
    cols = chip.cfg.cols
    assert chip.stats.bytes["dram_read"] == 3 * cols * SPACE_BYTES[space]
    assert chip.stats.bytes[SPACE_NAME[space] + "_write"] == 3 * cols * SPACE_BYTES[space]


def test_requantizer_starts_from_the_reset_values():
    x = np.array([[-100_000, -129, 300, 7]], np.int32)

    def setup(chip):
        chip.write_acc(0, x)
    chip = run("vreq spm[0], acc[0], 3", setup)
    assert chip.vpu.qcfg == tuple(QCFG_RESET.values())
    want = sem.requantize(x, 3, *QCFG_RESET.values())
    assert chip.read_spm(0).tolist() == want.tolist()


def test_every_vpu_op_of_a_group_is_served_by_its_format_handler():
    assert all(HANDLERS[m] is q_vbin for m in VPU_BINARY)
    assert all(HANDLERS[m] is q_vun for m in VPU_UNARY)
