"""Verilog of a Chip or a Ring, through Amaranth's builtin Yosys."""

from __future__ import annotations

from amaranth.back import verilog

from .chip import Chip, Ring

__all__ = ["generate"]


def generate(cfg, chips: int = 1, name: str | None = None) -> str:
    """Verilog text of ``Chip(cfg)`` (chips == 1) or ``Ring(cfg, chips)``; top module ``name``."""
    if chips < 1:
        raise ValueError(f"chips must be >= 1, got {chips}")
    top = Chip(cfg) if chips == 1 else Ring(cfg, chips)
    name = name or (f"tetrachip_{cfg.name}" if chips == 1 else f"tetrachip_ring{chips}_{cfg.name}")
    return verilog.convert(top, name=name, emit_src=False)
