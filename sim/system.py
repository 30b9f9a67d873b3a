"""``System``: several chips of one config in a ring or a 2-D torus, run together by the event loop
(``engine``). The wiring is documented in docs/microarchitecture.md, "Links"."""

from __future__ import annotations

from pathlib import Path

from isa.config import ChipConfig, square_shape
from isa.encoding import Instruction
from isa.errors import ErrorCode
from isa.program import Program

from .chip import Chip
from .engine import run
from .errors import SimError
from .links import Channel
from .stats import Stats, Trace


TOPOLOGIES = ("ring", "torus2d")



class System:
    """N chips of one config, each with its own program, DRAM and registers (``system.chips[i]``);
    ``run()`` runs them together under one clock and returns their Stats.

    ``topology="ring"`` (2 link ports a chip): port 0 of chip i is wired to port 1 of chip (i+1) mod N.
    ``topology="torus2d"`` (4 link ports a chip): the chips form ``shape = (rows, cols)`` (default the
    most square factorisation of N), chip ``i = r * cols + c``; port 0 is wired to port 1 of its east
    neighbour (r, c+1 mod cols) and port 2 to port 3 of its south neighbour (r+1 mod rows, c), so every
    torus row is a ring on ports 0/1 and every column a ring on ports 2/3.
    """

    def __init__(self, config: str | Path | ChipConfig = "base", n: int = 2, *, trace: bool = False,
                 topology: str = "ring", shape: tuple[int, int] | None = None):
        self.cfg = ChipConfig.load(config)
        if n < 1:
            raise SimError(ErrorCode.ILLEGAL_INSTRUCTION, f"a System needs at least one chip, got {n}")
        if topology not in TOPOLOGIES:
            raise SimError(ErrorCode.LINK_MISMATCH, f"unknown topology {topology!r}; known: {', '.join(TOPOLOGIES)}")
        need = 2 if topology == "ring" else 4
        if self.cfg.links < need:
            raise SimError(ErrorCode.LINK_MISMATCH, f"a {topology} needs {need} link ports per chip (config "
                           f"field links); config {self.cfg.name!r} has links = {self.cfg.links}")
        if topology == "ring":
            if shape is not None:
                raise SimError(ErrorCode.LINK_MISMATCH, "shape= is for topology='torus2d'; a ring has none")
            self.shape: tuple[int, int] = (1, n)
        else:
            self.shape = square_shape(n) if shape is None else (int(shape[0]), int(shape[1]))
            if self.shape[0] < 1 or self.shape[1] < 1 or self.shape[0] * self.shape[1] != n:
                raise SimError(ErrorCode.LINK_MISMATCH, f"a torus of shape {shape} does not hold {n} chips")
        self.topology = topology
        self.chips = [Chip(self.cfg, trace=trace, index=i, in_system=True) for i in range(n)]

    def __len__(self) -> int:
        return len(self.chips)

    def __getitem__(self, i: int) -> Chip:
        return self.chips[i]

    def load(self, i: int, program: Program | str | Path | bytes | list[Instruction]) -> None:
        self.chips[i].load(program)

    def links(self) -> list[tuple[int, int, int, int]]:
        """Every full-duplex link as (chip a, port pa, chip b, port pb)."""
        n = len(self.chips)
        if self.topology == "ring":
            return [(i, 0, (i + 1) % n, 1) for i in range(n)]
        rows, cols = self.shape
        out = []
        for i in range(n):
            r, c = divmod(i, cols)
            out.append((i, 0, r * cols + (c + 1) % cols, 1))           # east
            out.append((i, 2, (r + 1) % rows * cols + c, 3))           # south
        return out

    def _wire(self) -> None:
        for i, pa, j, pb in self.links():
            a, b = self.chips[i], self.chips[j]
            a.tx[pa] = b.rx[pb] = Channel(self.cfg, a, b)
            b.tx[pb] = a.rx[pa] = Channel(self.cfg, b, a)

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
