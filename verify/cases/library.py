"""Every case of the library, and which run at which level."""

from __future__ import annotations

from collections import Counter

from . import directed, instructions
from .core import VERILOG, Case

CASES: tuple[Case, ...] = instructions.CASES + directed.CASES

_BY_NAME = {c.name: c for c in CASES}
_TWICE = sorted(n for n, k in Counter(c.name for c in CASES).items() if k > 1)
if _TWICE:
    raise AssertionError(f"case names used twice: {', '.join(_TWICE)}")


def by_name(name: str) -> Case:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no case {name!r}") from None


def at_level(level: str, config: str | None = None) -> list[Case]:
    """The cases that run at ``level`` (on ``config`` only, if given), in library order."""
    return [c for c in CASES if c.runs_at(level) and (config is None or c.config == config)]


def verilog_chips(config: str) -> int:
    """Chips of the Verilog model the library's cases of ``config`` run on: a ring as large as
    the largest ring case (the one-chip cases run on chip 0, the other chips halt), else a chip."""
    return max([c.chips for c in at_level(VERILOG, config)] + [1])


def verilog_jobs(config: str, chips: int | None = None) -> list:
    """The ``verify.cosim.Job`` of every case of ``config`` at the Verilog level, on ``chips``
    chips (default ``verilog_chips``)."""
    n = chips or verilog_chips(config)
    return [c.job(n) for c in at_level(VERILOG, config)]
