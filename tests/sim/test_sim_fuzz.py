"""Random legal programs never crash the simulator: each run halts or stops with a SimError.

Instructions come from tests/isa/isa_strategies.py (derived from the table). A failure prints the
program (hypothesis shows the falsifying example) so it can be replayed.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa import ChipConfig
from isa.encoding import Instruction
from sim import Chip, SimError
from tests.isa.isa_strategies import instructions

TINY = ChipConfig.preset("tiny")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(prog=st.lists(instructions(TINY), min_size=1, max_size=8), seed=st.integers(0, 2**16))
def test_random_programs_halt_or_stop_cleanly(prog, seed):
    chip = Chip(TINY)
    chip.load(prog + [Instruction.make("halt")])
    rng = np.random.default_rng(seed)
    chip.write_dram(0, rng.integers(0, 256, 4096, dtype=np.uint8))
    chip.set_args({r: int(rng.integers(0, 6)) for r in range(1, TINY.scalar_regs)})
    try:
        stats = chip.run(max_cycles=3000)
        assert stats.cycles <= 3000
    except SimError as e:
        assert e.cycle is not None and e.cycle <= 3000
        assert "\n" not in str(e)
