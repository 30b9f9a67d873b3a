"""FPGA devices and boards the flow knows: their resources and how nextpnr names them.

Counts are the vendor data sheets' (ECP5: LUT4s, 18x18 multipliers, 18 kbit EBR blocks; iCE40
UP5K: LUT4s, 16x16 MAC16 blocks, 4 kbit EBR blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Device", "Board", "DEVICES", "BOARDS", "device", "board", "LUT_RAM_COUNTED", "LUT_RAM_CELL"]


#: LUTs a 16x4 LUT RAM cell counts as in the flow's LUT figure (``rtl.fpga.flow.cell_resources``, the
#: fit model's constants): its two slices' worth of LUT4s as Yosys reports them
LUT_RAM_COUNTED = 2
#: the ECP5 LUT RAM cell of Yosys' netlists (16 words x 4 bits)
LUT_RAM_CELL = "TRELLIS_DPR16X4"


@dataclass(frozen=True)
class Device:
    name: str
    family: str            #: "ecp5" | "ice40"
    luts: int
    ffs: int
    dsps: int              #: hard multipliers (ECP5 MULT18X18D, iCE40 SB_MAC16)
    brams: int             #: block RAMs (ECP5 DP16KD 18 kbit, iCE40 SB_RAM40_4K 4 kbit)
    bram_bits: int         #: bits per block RAM
    pnr_args: tuple[str, ...]   #: nextpnr's device options
    #: LUT4 sites one 16x4 LUT RAM cell (ECP5 ``TRELLIS_DPR16X4``) takes once nextpnr packs it: its
    #: four LUTs in a PFU's slices A and B, and slice C's two for its write port (nextpnr's "RAM LUTs"
    #: and "RAMW LUTs"); 0 where the flow maps no LUT RAM
    lut_ram_sites: int = 0

    def packed_luts(self, luts: int, lut_ram: int) -> int:
        """LUT4 sites of a design of ``luts`` LUTs in the flow's count (``LUT_RAM_COUNTED`` per LUT RAM
        cell) with ``lut_ram`` LUT RAM cells, once packed: what must fit ``luts`` of the device."""
        return luts + max(0, self.lut_ram_sites - LUT_RAM_COUNTED) * lut_ram


@dataclass(frozen=True)
class Board:
    name: str
    device: str            #: a key of DEVICES
    platform: str          #: amaranth_boards class, "module:Class"
    clk_mhz: float         #: the board's oscillator


DEVICES = {d.name: d for d in [
    Device("ecp5-12k", "ecp5", 12096, 12096, 28, 32, 18432, ("--12k", "--package", "CABGA381"), lut_ram_sites=6),
    Device("ecp5-25k", "ecp5", 24288, 24288, 28, 56, 18432, ("--25k", "--package", "CABGA381"), lut_ram_sites=6),
    Device("ecp5-45k", "ecp5", 43848, 43848, 72, 108, 18432, ("--45k", "--package", "CABGA381"), lut_ram_sites=6),
    Device("ecp5-85k", "ecp5", 83640, 83640, 156, 208, 18432, ("--85k", "--package", "CABGA381"), lut_ram_sites=6),
    Device("ice40-up5k", "ice40", 5280, 5280, 8, 30, 4096, ("--up5k", "--package", "sg48")),
]}

BOARDS = {b.name: b for b in [
    Board("ulx3s-12f", "ecp5-12k", "amaranth_boards.ulx3s:ULX3S_12F_Platform", 25.0),
    Board("ulx3s-25f", "ecp5-25k", "amaranth_boards.ulx3s:ULX3S_25F_Platform", 25.0),
    Board("ulx3s-45f", "ecp5-45k", "amaranth_boards.ulx3s:ULX3S_45F_Platform", 25.0),
    Board("ulx3s-85f", "ecp5-85k", "amaranth_boards.ulx3s:ULX3S_85F_Platform", 25.0),
]}


def device(name: str) -> Device:
    try:
        return DEVICES[name]
    except KeyError:
        raise ValueError(f"unknown device {name!r}; known: {', '.join(DEVICES)}") from None


def board(name: str) -> Board:
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}; known: {', '.join(BOARDS)}") from None
