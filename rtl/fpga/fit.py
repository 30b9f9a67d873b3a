"""Will a config fit a device? A per-MAC / per-memory model, checked before a long build.

The model counts what dominates ``FpgaTop(cfg)``:

* the array: per PE one hard multiplier ("dsp") or ``LUT_PER_LUT_MAC`` LUTs ("lut"), plus
  ``LUT_PER_PE`` LUTs (the 32-bit partial-sum adder) and ``FF_PER_PE`` flip-flops;
* memories: one with a single write port and only registered reads maps to block RAM, one copy per
  read port (the instruction memory); the chip's SPM and ACC have several write ports (DMA, VPU,
  link, scalar unit, MXU) and registered read ports only.
  Built as live-value-table memories (``mem="lvt"``, rtl/mem.py, the FPGA default) they take a
  bank per (write, read) port pair in block or LUT RAM plus a bank select per read port; built
  flat they are flip-flops with read multiplexers (``LUT_PER_FF_MEM_BIT_PORT`` per bit and port);
* the rest (issue stage, queues, VPU, DMA, links, the host top): ``LUT_BASE + LUT_PER_LANE *
  cols`` LUTs, ``FF_BASE + FF_PER_LANE * cols`` FFs, ``DSP_BASE + DSP_PER_LANE * cols``
  multipliers (the issue stage's and the VPU lanes'); without link ports (``links = 0``)
  ``NO_LINKS_LUT_BASE + NO_LINKS_LUT_PER_LANE * cols`` LUTs and ``NO_LINKS_FF`` FFs fewer.

* LUT RAM cells (``Estimate.lut_ram``): the SPM/ACC banks and VPU tables in LUT RAM plus
  ``LUT_RAM_BASE`` (and ``LUT_RAM_LINKS``); each counts as 2 LUTs but takes
  ``Device.lut_ram_sites`` LUT4 sites once nextpnr packs it, so the check also compares the packed
  count (``Estimate.packed_luts``) with the device.

Constants are calibrated on Yosys' synth_ecp5 results (docs/fpga.md lists them); the check refuses a
build whose estimate exceeds the device, and names every resource over.
"""

from __future__ import annotations

from dataclasses import dataclass

from isa.errors import TetrachipError
from isa.ints import cdiv
from isa.table import SPACE_BITS, WORD_BITS, Space
from isa.timing import lut_rows

from ..chip import memory_ports
from ..mem import BANKED, IMPLS, LUTRAM_DEPTH
from .devices import LUT_RAM_COUNTED, Device

__all__ = ["Estimate", "estimate", "estimate_array", "check", "FitError", "MEMORY_PORTS", "fpga_config", "FPGA_MEMORY",
           "FPGA_MEMORY_BANKED", "fpga_memory", "MIN_BANKS", "default_banks", "banked_config",
           "parse_banks"]

#: memory depths that fit every ECP5 the flow knows (``--fpga-mem``) with live-value-table or flat
#: memories: SPM and ACC in LUT RAM and flip-flops
FPGA_MEMORY = {"spm_rows": 64, "acc_rows": 16, "imem_words": 1024}
#: ``--fpga-mem``'s depths for banked memories (``rtl.mem.BANKED``, ``default_banks``): SPM in four
#: block RAM banks of 64 rows, ACC in four 16-row LUT RAM banks (one cell per read port, so ACC's 64 rows
#: cost what 16 rows in 4-row banks did); the depths let a GEMM's M tiles grow from 4-16 rows to 32
#: (docs/fpga.md, "Banked memories")
FPGA_MEMORY_BANKED = {"spm_rows": 256, "acc_rows": 64, "imem_words": 1024}
#: banks a memory of a ``mem="banked"`` build has where its config has none (``default_banks``): the
#: compiler keeps an ACC region being written by the MXU and one being drained in different banks, and
#: SPM's buffers written by different units apart
MIN_BANKS = 4


def fpga_memory(mem: str = "lvt") -> dict:
    """``--fpga-mem``'s depths for memory implementation ``mem``."""
    return dict(FPGA_MEMORY_BANKED if mem in BANKED else FPGA_MEMORY)


def parse_banks(text: str) -> tuple[int, int]:
    """``--banks``' value: ``N`` (SPM and ACC each in N banks) or ``S,A``; ValueError if neither."""
    try:
        counts = tuple(int(v) for v in str(text).split(","))
    except ValueError:
        counts = ()
    if len(counts) not in (1, 2) or min(counts) < 1:
        raise ValueError(f"{text!r}: a bank count N or two, S,A (SPM, ACC)")
    return (counts * 2)[:2]


def default_banks(spm_rows: int, acc_rows: int) -> dict[str, int]:
    """The banks ``banked_config`` gives memories of ``spm_rows`` and ``acc_rows`` rows without banks, as
    ``{"spm_bank_rows": .., "acc_bank_rows": ..}``: SPM in ``MIN_BANKS`` banks (block RAM when deeper than a
    LUT RAM cell), ACC in banks of a LUT RAM cell's rows (``LUTRAM_DEPTH``) or, where that leaves fewer
    than ``MIN_BANKS``, in ``MIN_BANKS`` (rows per bank a power of two, rounded down)."""
    def rows_per_bank(rows: int, most: int) -> int:
        return min(most, 1 << (max(1, rows // MIN_BANKS).bit_length() - 1))
    return {"spm_bank_rows": rows_per_bank(spm_rows, spm_rows), "acc_bank_rows": rows_per_bank(acc_rows, LUTRAM_DEPTH)}


def banked_config(cfg, mem: str = "banked", banks: int | tuple[int, int] | None = None):
    """``cfg`` with ``default_banks`` where it has no banks of its own (``*_bank_rows`` = 1), for a
    build of memory implementation ``mem`` built from banks (``rtl.mem.BANKED``); else ``cfg``.

    ``banks``: SPM and ACC in that many banks instead (one count for both, or (SPM, ACC); powers
    of two; the config's own banks are replaced): for memories deeper than ``--fpga-mem``'s, whose
    16-row LUT RAM banks would not fit (banks deeper than 16 rows are block RAM)."""
    if mem not in BANKED:
        return cfg
    if banks is None:
        ch = {k: v for k, v in default_banks(cfg.spm_rows, cfg.acc_rows).items() if getattr(cfg, k) == 1}
        return cfg.replace(**ch) if ch else cfg
    counts = (banks, banks) if isinstance(banks, int) else tuple(banks)
    ch = {}
    for space, n in zip(("spm", "acc"), counts):
        rows = getattr(cfg, f"{space}_rows")
        if n < 1 or n & (n - 1):
            raise ValueError(f"banks: a power of two, not {n}")
        if rows % n:
            raise ValueError(f"{n} banks: {space}_rows = {rows} is not a multiple of it")
        ch[f"{space}_bank_rows"] = rows // n
    return cfg.replace(**ch)


def fpga_config(cfg, spm_rows: int | None = None, acc_rows: int | None = None, imem_words: int | None = None):
    """``cfg`` with smaller memories (only those given and smaller than the config's); same name.

    The array, units, widths and timing are the config's; programs that address beyond the smaller
    memories stop with the chip's address error."""
    ch = {k: v for k, v in (("spm_rows", spm_rows), ("acc_rows", acc_rows), ("imem_words", imem_words))
          if v is not None and v < getattr(cfg, k)}
    if "spm_rows" in ch:
        ch["spm_rows"] = max(ch["spm_rows"], lut_rows(cfg))
    return cfg.replace(**ch) if ch else cfg


def fpga_build_config(cfg, mem: str, *, fpga_mem: bool = True, depths: dict | None = None,
                      banks: int | tuple[int, int] | None = None, links: bool = True):
    """The config an FPGA build of ``cfg`` with memory implementation ``mem`` runs (``tetrachip fpga synth/build``,
    ``bench/fpga.py``): ``fpga_mem``: memories at ``fpga_memory(mem)``'s depths; ``depths``
    (``{"spm_rows": .., "acc_rows": .., "imem_words": ..}``, None values ignored) smaller ones still
    (``fpga_config``); then ``banked_config``'s banks for a banked ``mem`` (ValueError for bad ``banks``);
    ``links=False``: no link ports (``links = 0``: the chip without its link units, ``rtl.chip.Chip``)."""
    d = fpga_memory(mem) if fpga_mem else {}
    d.update({k: v for k, v in (depths or {}).items() if v})
    out = banked_config(fpga_config(cfg, **d), mem, banks)
    return out if links else out.replace(links=0)


#: (write ports, registered read ports, combinational read ports) of the chip's memories in the
#: FPGA top, whose links are idle (``rtl/fpga/top.py``: no link transmitter read, no link receiver write)
MEMORY_PORTS = {**memory_ports(idle_links=True), "imem": (1, 1, 0)}

# The array's constants are measured (Yosys synth_ecp5, docs/fpga.md): 8x8 "dsp+reg" 2624 LUT /
# 4426 FF / 64 DSP; with the radix-4 LUT product (2026-12-06) 8x8 "lut+reg" 10535 LUT / 4554 FF,
# "dsp:28+reg" 6875 / 4498, "lut+reg2" 9808 / 6154, "dsp:28+reg2" 6464 / 4950 ("dsp+reg2" 3402 FF).
LUT_PER_PE = 41               #: partial-sum adder (16 + clog2(k+1) bits) and weight mux
FF_PER_PE = 53                #: input, swap, front/shadow weights, partial sum, skew/deskew share
FF_PER_PE_REG = 16            #: per product register stage (``mac="...+reg"`` / ``+reg2``)
LUT_PER_LUT_MAC = 121         #: a LUT product (rtl/mac.py, the weight's radix-4 digits): 124 / 118
LUT_PER_LUT_MAC_REG2 = -11    #: ... fewer with its mid-tree registers (ABC maps each half alone)
FF_PER_LUT_MAC = 2            #: its weight registers hold 9 bits (the digits), not 8
FF_PER_LUT_MAC_REG2 = 41      #: the mid-tree registers (a hard product keeps its stages in the block)
#: flat memories in flip-flops: LUTs per bit and read port (measured 1.5 on tiny's 64-row SPM,
#: 21,152 LUT, and 2.2 on small's 16-row ACC, 53,456 LUT)
LUT_PER_FF_MEM_BIT_PORT = 1.8
# lvt memories (rtl/mem.py), measured on RowMemory alone with the chip's ports (docs/fpga.md):
# SPM 64 rows x 32/64/128 bits: 4,506 / 7,710 / 16,448 LUT; ACC 16 rows x 128/256/512 bits:
# 5,987 / 12,261 / 24,039 LUT
#: LUT RAM cells besides SPM/ACC banks and the VPU's lookup tables: the queues' storage and the
#: issue stage's loop registers (Yosys, ``--fpga-mem`` banked builds without link ports, with the
#: queues' row slots in ``narrow_bits`` bits, 2026-12-07: tiny 1,298 cells less 640 of ACC, small
#: 1,938 less 1,280: 658 both; 843 and 844 before the narrow slots)
LUT_RAM_BASE = 658
LUT_RAM_LINKS = 114           #: the two link units' queues (tiny 1,412 and small 2,052 with them; 167 before)
LUT_PER_SEL_INPUT = 1.33      #: bank select: per row bit, read port and write port beyond the first
LUT_PER_RAM_DEPTH_MUX = 2.1   #: per row bit of a combinational bank and 16-row cell beyond the first
# The rest of the chip (issue stage, queues, DMA, VPU, links, host top), calibrated on two whole-chip
# runs, FpgaTop(tiny --fpga-mem --mem lvt) and FpgaTop(small --fpga-mem --mem lvt) (SPM 64 rows, ACC
# 16), mac="dsp+reg2" with the DSP registers, the flow's ABC script with structural choices, the
# chip's idle links built without their memory ports, the queues' row slots in ``narrow_bits`` bits:
# 25,554 / 41,811 LUT, 10,027 / 18,282 FF, 43 / 103 DSP (Yosys, 2026-12-07); minus the array's and
# the memories' terms above, the difference of the two gives the per-lane part (docs/fpga.md).
# (With 32-bit row slots, 2026-12-06: 28,691 / 43,716 LUT and 10,243 / 18,498 FF gave 14980 + 2178
# per lane and 4708 + 244. The first calibration, mac="dsp", before the
# structural choices and with the link ports: 32,624 / 49,854 LUT and 13,399 / 22,685 FF gave
# 16707 + 2373 per lane and 5809 + 710; before the head registers and the delayed table writes,
# 2015 LUT and 379 FF per lane; with a table per row and three combinational reads, 330 and 335.)
LUT_BASE, LUT_PER_LANE = 10611, 2486
FF_BASE, FF_PER_LANE = 4492, 244
# The same with mem="banked", calibrated on the default FPGA build (``--fpga-mem``: SPM 256 rows in 4
# block RAM banks, ACC 64 in 4 LUT RAM banks), mac="dsp+reg2" with the DSP registers, the flow's ABC
# script with structural choices (``&dch``), the idle links without their memory ports, the queues'
# row slots in ``narrow_bits`` bits, ``sld`` through the store unit's read ports: FpgaTop(tiny) and
# FpgaTop(small) 22,170 / 33,973 LUT, 7,562 / 13,205 FF (Yosys, 2026-12-07). (With a read port of
# ``sld``'s own, 22,895 / 35,471 LUT and 7,582 / 13,225 FF gave 11631 + 880 per lane and 4659 + 231;
# with 32-bit row slots, 2026-12-06: 24,247 / 37,004 LUT and 7,780 /
# 13,423 FF gave 12802 + 925 per lane and 4857 + 231; before, with the link ports: 24,978 / 38,605
# LUT and 7,906 / 13,645 FF gave 12665 + 919 per lane
# and 4887 + 255; at the LVT build's depths, SPM 64 rows in 16-row banks and ACC 16 in 4-row,
# without ``&dch``: 25,564 / 40,099 LUT, 8,017 / 13,868 FF gave 12343 + 1050 and 4886 + 235; before
# the loop counts as count - 2, 14113 + 1022; the first banked builds, 16654 + 796 and 6834 + 739.)
BANKED_LUT_BASE, BANKED_LUT_PER_LANE = 11680, 910
BANKED_FF_BASE, BANKED_FF_PER_LANE = 4638, 263
#: what a chip without link ports (``links = 0``, ``fpga synth/build --no-links``) does not build: the
#: link units, their queues and the token counters of their signals. Measured on FpgaTop(tiny) and
#: FpgaTop(small) --fpga-mem, banked, with the queues' row slots in ``narrow_bits`` bits (Yosys,
#: 2026-12-07): 22,895 -> 21,209 and 35,471 -> 33,630 LUT (1,686 and 1,841 fewer), 7,582 -> 6,982
#: and 13,225 -> 12,625 FF (600 fewer on both: the idle links carry no row data, so their flip-flops
#: do not grow with the lanes). (With 32-bit row slots: 1,890 and 2,125 LUT, 644 FF.)
NO_LINKS_LUT_BASE, NO_LINKS_LUT_PER_LANE = 1530, 39
NO_LINKS_FF = 600
DSP_BASE = 15                 #: the issue stage's multipliers (loop rewinds, the scalar mul)
DSP_PER_LANE = {"ecp5": 3, "ice40": 3}   #: the VPU lane's shared multiplier (32 x 32 in 3 blocks)


class FitError(TetrachipError, ValueError):
    """The design does not fit the device (the message lists needed vs available)."""


@dataclass
class Estimate:
    luts: int
    ffs: int
    dsps: int
    brams: int
    lut_ram: int = 0        #: 16x4 LUT RAM cells (counted in ``luts`` as ``LUT_RAM_COUNTED`` each)

    def packed_luts(self, dev: Device) -> int:
        """The LUT4 sites once packed (``Device.packed_luts``)."""
        return dev.packed_luts(self.luts, self.lut_ram)

    def over(self, dev: Device) -> list[str]:
        out = []
        for k, avail in (("luts", dev.luts), ("ffs", dev.ffs), ("dsps", dev.dsps), ("brams", dev.brams)):
            need = getattr(self, k)
            if need > avail:
                out.append(f"{k[:-1].upper()} {need} needed > {avail} available")
        packed = self.packed_luts(dev)
        if self.luts > dev.luts and packed > self.luts:
            out[0] += f" ({packed} LUT4 sites once packed)"
        if self.luts <= dev.luts < packed:
            out.append(f"LUT4 sites once packed {packed} needed > {dev.luts} available ({self.luts} LUTs with "
                       f"{self.lut_ram} LUT RAM cells at {dev.lut_ram_sites} sites each)")
        return out


def _bram_blocks(width: int, depth: int, dev: Device) -> int:
    """Block RAMs for one width x depth copy (best aspect ratio)."""
    if dev.family == "ecp5":
        modes = [(16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)]
    else:
        modes = [(2048, 2), (1024, 4), (512, 8), (256, 16)]
    return min(cdiv(width, w) * cdiv(depth, d) for d, w in modes)


def _memory(width, depth, ports, dev, mem="flat", lanes=1, bank_rows=1):
    """(luts, ffs, brams, LUT RAM cells) of one memory of ``lanes`` lanes per row."""
    w, r_sync, r_comb = ports
    if w == 1 and r_comb == 0:
        return 0, 0, r_sync * _bram_blocks(width, depth, dev), 0
    bits = width * depth
    if mem == "flat":
        return int(bits * (r_sync + r_comb) * LUT_PER_FF_MEM_BIT_PORT), bits, 0, 0
    if mem in BANKED:
        # rtl/mem.py: a copy of each bank per read port (LUT RAM cells of 16 rows x 4 bits with an
        # output register when a bank is at most LUTRAM_DEPTH rows, else block RAM), an AND-OR of
        # the write ports per bank, a bank select per read port
        rows = min(bank_rows, depth)
        nb, copies = cdiv(depth, rows), r_sync + r_comb
        lut_ram = rows <= LUTRAM_DEPTH and mem == "banked"
        cells = nb * copies * cdiv(width, 4) if lut_ram else 0
        luts = (cells * LUT_RAM_COUNTED
                + nb * (width + lanes) * (w - 1) * LUT_PER_SEL_INPUT + copies * width * (nb - 1) * LUT_PER_SEL_INPUT)
        ffs = r_sync * width if lut_ram else 0
        return int(luts), ffs, 0 if lut_ram else nb * copies * _bram_blocks(width, rows, dev), cells
    # lvt (rtl/mem.py): a bank per (write, read) port pair, a live-value table (a bank number per
    # row and lane, in flip-flops), a bank select per read port; combinational banks (and
    # registered ones of at most LUTRAM_DEPTH rows) in LUT RAM cells of 16 rows x 4 bits, the
    # other registered banks in block RAM
    cells = cdiv(depth, LUTRAM_DEPTH)
    sync_lut = depth <= LUTRAM_DEPTH and mem != "lvt-bram"      # registered-read banks in LUT RAM
    lut_banks = w * (r_comb + (r_sync if sync_lut else 0))
    per_bit = (lut_banks * cells * LUT_RAM_COUNTED / 4 + w * r_comb * (cells - 1) * LUT_PER_RAM_DEPTH_MUX
               + (r_sync + r_comb) * (w - 1) * LUT_PER_SEL_INPUT)
    sel = max(1, (w - 1).bit_length())
    ffs = depth * sel * lanes + (w * r_sync * width if sync_lut else 0)
    brams = 0 if sync_lut else w * r_sync * _bram_blocks(width, depth, dev)
    return int(per_bit * width), ffs, brams, lut_banks * cells * cdiv(width, 4)


def estimate_array(rows: int, cols: int, dev: Device, mac: str = "dsp") -> Estimate:
    """The systolic array alone (``rtl/systolic.py``)."""
    from ..mac import pe_kinds, split_reg
    kinds = [k for row in pe_kinds(rows, cols, mac) for k in row]
    n_dsp_pe = kinds.count("dsp")
    pes = rows * cols
    stages = split_reg(mac)[1]
    n_lut_pe = pes - n_dsp_pe
    luts = LUT_PER_PE * pes + (LUT_PER_LUT_MAC + LUT_PER_LUT_MAC_REG2 * (stages == 2)) * n_lut_pe
    ffs = ((FF_PER_PE + FF_PER_PE_REG * stages) * pes
           + (FF_PER_LUT_MAC + FF_PER_LUT_MAC_REG2 * (stages == 2)) * n_lut_pe)
    return Estimate(int(luts), int(ffs), n_dsp_pe, 0)


def estimate(cfg, dev: Device, *, mac: str = "dsp", mem: str = "lvt", dram_bytes: int = 1 << 14) -> Estimate:
    if mem not in IMPLS:
        raise ValueError(f"memory implementation {mem!r}: one of {', '.join(IMPLS)}")
    arr = estimate_array(cfg.rows, cfg.cols, dev, mac)
    if mem in BANKED:
        luts = BANKED_LUT_BASE + BANKED_LUT_PER_LANE * cfg.cols + arr.luts
        ffs = BANKED_FF_BASE + BANKED_FF_PER_LANE * cfg.cols + arr.ffs
    else:
        luts = LUT_BASE + LUT_PER_LANE * cfg.cols + arr.luts
        ffs = FF_BASE + FF_PER_LANE * cfg.cols + arr.ffs
    if not cfg.links:
        luts, ffs = luts - NO_LINKS_LUT_BASE - NO_LINKS_LUT_PER_LANE * cfg.cols, ffs - NO_LINKS_FF
    dsps = DSP_BASE + DSP_PER_LANE[dev.family] * cfg.cols + arr.dsps
    brams, lut_ram = 0, LUT_RAM_BASE + LUT_RAM_LINKS * bool(cfg.links)
    mems = {"spm": (SPACE_BITS[Space.SPM] * cfg.cols, cfg.spm_rows),
            "acc": (SPACE_BITS[Space.ACC] * cfg.cols, cfg.acc_rows), "imem": (WORD_BITS, cfg.imem_words)}
    for name, (width, depth) in mems.items():
        lu, ff, br, lr = _memory(width, depth, MEMORY_PORTS[name], dev, mem if name != "imem" else "flat",
                                 lanes=cfg.cols if name != "imem" else 1,
                                 bank_rows=getattr(cfg, f"{name}_bank_rows", 1))
        luts, ffs, brams, lut_ram = luts + lu, ffs + ff, brams + br, lut_ram + lr
    dram = min(dram_bytes, cfg.dram_bytes)
    brams += cfg.dma_beat_bytes * _bram_blocks(8, dram // cfg.dma_beat_bytes, dev)
    if lut_rows(cfg) > LUTRAM_DEPTH:        # the VPU's lookup table, a copy per lane (rtl/vpu.py)
        brams += cfg.cols * _bram_blocks(8 * cfg.cols, lut_rows(cfg), dev)
    else:                                   # ... in LUT RAM (its LUTs are in the per-lane constants)
        lut_ram += cfg.cols * cdiv(8 * cfg.cols, 4)
    return Estimate(int(luts), int(ffs), int(dsps), int(brams), int(lut_ram))


def check(cfg, dev: Device, *, mac: str = "dsp", mem: str = "lvt", dram_bytes: int = 1 << 14) -> Estimate:
    """The estimate, or ``FitError`` naming each resource over the device."""
    est = estimate(cfg, dev, mac=mac, mem=mem, dram_bytes=dram_bytes)
    over = est.over(dev)
    if over:
        mems = (f"SPM {cfg.spm_rows} rows, ACC {cfg.acc_rows} rows, imem {cfg.imem_words} words"
                + (f", banks of {cfg.spm_bank_rows} / {cfg.acc_bank_rows} rows" if mem in BANKED else "")
                + ("" if cfg.links else ", no link ports"))
        small_mem = all(getattr(cfg, k) <= v for k, v in fpga_memory(mem).items())
        own_banks = mem in BANKED and any(getattr(cfg, k) != v
                                          for k, v in default_banks(cfg.spm_rows, cfg.acc_rows).items())
        if small_mem and not own_banks:
            hint = ("the memories are already --fpga-mem's: the array and units alone are too big; "
                    "a smaller config or a larger device")
        elif mem in BANKED:
            hint = ("each bank is a copy per read port, block RAM when deeper than 16 rows: try fewer or "
                    "deeper banks (--banks) or --fpga-mem")
        else:
            hint = ("SPM and ACC (several write ports and a combinational read port each) cost LUTs in "
                    "proportion to their rows on an FPGA: try --fpga-mem for the small depths")
        if cfg.links and est.luts > dev.luts:
            hint += (f"; --no-links (no link ports, where none is wired) saves "
                     f"~{NO_LINKS_LUT_BASE + NO_LINKS_LUT_PER_LANE * cfg.cols} LUTs")
        raise FitError(f"config {cfg.name!r} ({mems}, mac={mac}, mem={mem}) does not fit {dev.name}: " + "; ".join(over)
                       + f" (estimate; {hint}; see docs/fpga.md)")
    return est
