"""Verilog of a Chip or a Ring, through Amaranth's builtin Yosys.

Amaranth 0.5 writes a memory's initial contents into RTLIL one bit at a time (one Python object per
bit): for ``base`` (SPM, ACC and instruction memory hold about 9.4 million bits, all zero at reset)
that alone took most of the generation time. While ``generate`` runs, a memory whose initial
contents are all zero has them written as one constant instead; the RTLIL, and so the Verilog, are
the same.
"""

from __future__ import annotations

import contextlib

from amaranth.back import rtlil, verilog

from .chip import Chip, Ring

__all__ = ["generate"]


@contextlib.contextmanager
def _fast_zero_meminit():
    emitter = getattr(rtlil, "ModuleEmitter", None)
    orig = getattr(emitter, "emit_memory", None)
    if orig is None:                                   # another Amaranth: leave it alone
        yield
        return

    def emit_memory(self, cell_idx, cell):
        if any(cell.init):
            return orig(self, cell_idx, cell)
        bits = cell.width * cell.depth
        self.builder.cell("$meminit_v2", ports={
            "ADDR": self.sigspec(),
            "DATA": f"{bits}'" + "0" * bits,
            "EN": self.sigspec(rtlil._nir.Value.ones(cell.width)),
        }, parameters={
            "MEMID": self.memories[cell_idx].memid, "ABITS": 0, "WIDTH": cell.width, "WORDS": cell.depth,
            "PRIORITY": 0,
        }, src_loc=cell.src_loc)

    emitter.emit_memory = emit_memory
    try:
        yield
    finally:
        emitter.emit_memory = orig


def generate(cfg, chips: int = 1, name: str | None = None, mem: str = "flat", mac: str = "dsp") -> str:
    """Verilog text of ``Chip(cfg)`` (chips == 1) or ``Ring(cfg, chips)``; top module ``name``;
    ``mem``: how SPM and ACC are built (``rtl/mem.py``); ``mac``: how the array's products are
    (``rtl/mac.py``; behavioural, no FPGA primitive)."""
    if chips < 1:
        raise ValueError(f"chips must be >= 1, got {chips}")
    top = Chip(cfg, mac=mac, mem=mem) if chips == 1 else Ring(cfg, chips, mac=mac, mem=mem)
    name = name or (f"tetrachip_{cfg.name}" if chips == 1 else f"tetrachip_ring{chips}_{cfg.name}")
    with _fast_zero_meminit():
        return verilog.convert(top, name=name, emit_src=False)
