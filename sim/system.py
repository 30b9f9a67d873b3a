"""``System``: several chips of one config in a ring, run together by the event loop (``engine``)."""

from __future__ import annotations

from pathlib import Path

from isa.config import ChipConfig
from isa.encoding import Instruction
from isa.errors import ErrorCode
from isa.program import Program

from .chip import Chip
from .engine import run
from .errors import SimError
from .links import Channel
from .stats import Stats, Trace


class System:
    """N chips of one config in a ring: port 0 of chip i is wired to port 1 of chip (i+1) mod N.

    Each chip has its own program, DRAM and registers (``system.chips[i]``); ``run()`` runs them
    together under one clock and returns their Stats.
    """

    def __init__(self, config: str | Path | ChipConfig = "base", n: int = 2, *, trace: bool = False):
        self.cfg = ChipConfig.load(config)
        if n < 1:
            raise SimError(ErrorCode.ILLEGAL_INSTRUCTION, f"a System needs at least one chip, got {n}")
        if self.cfg.links < 2:
            raise SimError(ErrorCode.LINK_MISMATCH, f"a ring needs 2 link ports per chip; config "
                           f"{self.cfg.name!r} has {self.cfg.links}")
        self.chips = [Chip(self.cfg, trace=trace, index=i, in_system=True) for i in range(n)]

    def __len__(self) -> int:
        return len(self.chips)

    def __getitem__(self, i: int) -> Chip:
        return self.chips[i]

    def load(self, i: int, program: Program | str | Path | bytes | list[Instruction]) -> None:
        self.chips[i].load(program)

    def _wire(self) -> None:
        n = len(self.chips)
        for i, a in enumerate(self.chips):
            b = self.chips[(i + 1) % n]
            a.tx[0] = b.rx[1] = Channel(self.cfg, a, b)
            b.tx[1] = a.rx[0] = Channel(self.cfg, b, a)

    def run(self, max_cycles: int | None = None) -> list[Stats]:
        for ch in self.chips:
            ch._reset()
        self._wire()
        run(self.chips, max_cycles)
        return [ch.stats for ch in self.chips]

    @property
    def cycles(self) -> int:
        return max(ch.stats.cycles for ch in self.chips)

    @property
    def trace(self):
        """All chips' trace records in one Trace (when built with trace=True)."""
        tr = Trace()
        for ch in self.chips:
            if ch.trace is not None:
                tr.records += ch.trace.records
        return tr
