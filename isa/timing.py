"""The timing contract's constants and formulas (docs/microarchitecture.md explains each).

This module is the one source of every latency, queue depth and occupancy rule. The simulator
implements these formulas; the RTL meets them cycle for cycle; co-simulation checks both.
Config-dependent numbers (DRAM latency, link latency, credits, array size) come from ChipConfig.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ints import cdiv
from .table import LUT_ENTRIES, SPACE_BYTES

if TYPE_CHECKING:
    from .config import ChipConfig

#: Entries in each unit's instruction queue (issue stalls when the target queue is full).
QUEUE_DEPTH = 4
#: Cycles from a queued instruction's issue to the earliest start of its first instance.
ISSUE_TO_START = 1
#: Extra cycles lost after a taken branch or jump (the next instruction issues at t + 1 + this).
BRANCH_PENALTY = 1
#: Cycles from a token's signal (at the producer's retire cycle r) to when a consumer may use it.
TOKEN_LATENCY = 1
#: A token counter may not exceed this; a signal that would is an error (TOKEN_OVERFLOW).
TOKEN_MAX = 255
#: VPU pipeline: a row read at cycle t is written at t + VPU_LATENCY.
VPU_LATENCY = 3
#: MXU: cycles beyond rows + cols from streaming a row in to writing its result (SPM read, ACC write).
MXU_EXTRA = 2


def mxu_pipe(cfg: ChipConfig) -> int:
    """Cycles from streaming input row i (cycle s+i) to its ACC write (cycle s+i+mxu_pipe)."""
    return cfg.rows + cfg.cols + MXU_EXTRA


def mxu_swap_delay(cfg: ChipConfig) -> int:
    """Cycles after an MM that swaps in new weights starts before the shadow buffer may be reloaded."""
    return cfg.rows + cfg.cols


def row_beats(cfg: ChipConfig, length: int, space: int, estride: int) -> int:
    """DRAM beats for one DMA row of ``length`` elements.

    Contiguous rows (estride == element size) move ceil(bytes / beat) beats; any other stride
    moves one element per beat.
    """
    eb = SPACE_BYTES[space]
    if length <= 0:
        return 0
    if estride == eb:
        return cdiv(length * eb, cfg.dma_beat_bytes)
    return length


def dma_occupancy(cfg: ChipConfig, rows: int, length: int, space: int, estride: int) -> int:
    """Cycles a DMA instance holds its DRAM channel: one beat per cycle, at least one cycle."""
    return max(1, rows * row_beats(cfg, length, space, estride))


def dma_retire(cfg: ChipConfig, start: int, occupancy: int) -> int:
    """Retire cycle of a DMA instance: its last beat's response returns dram_latency later."""
    return start + occupancy - 1 + cfg.dram_latency


def flits_per_row(cfg: ChipConfig, space: int) -> int:
    """Link flits for one SPM or ACC row."""
    return cdiv(cfg.cols * SPACE_BYTES[space], cfg.link_width_bytes)


def lut_rows(cfg: ChipConfig) -> int:
    """SPM rows vlutld reads: the 256-byte table, row-major."""
    return cdiv(LUT_ENTRIES, cfg.cols)


def ideal_gemm_cycles(cfg: ChipConfig, m: int, k: int, n: int) -> int:
    """MXU-bound lower bound of an M x K x N GEMM: every MAC slot busy."""
    return cdiv(m * k * n, cfg.rows * cfg.cols)


#: Program paging (docs/microarchitecture.md, "Programs longer than imem"): cycles the host takes to write
#: one instruction word into imem between two pages (the imem port takes one word per cycle).
PAGE_LOAD_CYCLES_PER_WORD = 1


def page_load_cycles(words: int) -> int:
    """Cycles the chip stands idle while the host writes a page of ``words`` instructions into imem."""
    return PAGE_LOAD_CYCLES_PER_WORD * words


def paged_cycles(runs: list[int], lengths: list[int]) -> int:
    """Reported cycles of a paged program: every page's run (start to halt, as one program's ``cycles``)
    plus the load of every page after the first (the first is loaded before launch, as any program)."""
    if len(runs) != len(lengths):
        raise ValueError(f"{len(runs)} page runs for {len(lengths)} pages")
    return sum(runs) + sum(page_load_cycles(n) for n in lengths[1:])
