"""tetrachip cycle-level simulator: runs Programs per the timing contract (docs/microarchitecture.md).

    from sim import Chip
    chip = Chip("base")
    chip.load(program); chip.write_dram(0, a); chip.set_args(r1=5)
    stats = chip.run()
    print(stats)                       # Stats table; stats.to_dict() for JSON

``System(config, n)`` runs n chips in a ring (``topology="torus2d"``: a 2-D torus). Data semantics
come from ``isa.semantics``.
"""

from .chip import Chip
from .engine import run
from .errors import SimError
from .stats import Record, Stats, Trace
from .system import System

__all__ = ["Chip", "System", "SimError", "Stats", "Trace", "Record", "run"]
