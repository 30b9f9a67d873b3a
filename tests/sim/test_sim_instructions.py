"""The simulator's own bookkeeping of instructions: a handler for every instruction the issue
stage does not execute itself, and the MAC count of the array. (What each instruction computes is
checked at every level by the case library, ``verify.cases.instructions``, run here by
test_cases_sim.py.)"""

from __future__ import annotations

import pytest

from isa.table import INSTRUCTIONS
from sim import Chip
from sim.handlers import HANDLERS


def test_every_instruction_has_a_handler():
    issue_stage = {"sld", "sst", "fence", "halt"}
    for ins in INSTRUCTIONS:
        assert (HANDLERS[ins.mnemonic] is None) == (ins.mnemonic in issue_stage), ins.mnemonic


@pytest.mark.parametrize("k", [1, 3, 4])
def test_mxu_macs_count_the_loaded_weight_rows(k):
    chip = Chip("tiny")
    chip.load(f"mxu.lw spm[0], k={k}\nmxu.mm acc[40], spm[10], n=6\nmxu.mma acc[20], spm[10], n=6\nhalt\n")
    chip.run()
    assert chip.stats.mxu_macs == 2 * 6 * k * chip.cfg.cols
