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
#: Extra cycles after an ``sld`` (the next instruction issues at t + 1 + this): its row is read
#: from a registered memory port at t and its lane reaches the register at t + 1.
SLD_PENALTY = 1
#: Cycles from a token's signal (at the producer's retire cycle r) to when a consumer may use it.
TOKEN_LATENCY = 1
#: A token counter may not exceed this; a signal that would is an error (TOKEN_OVERFLOW).
TOKEN_MAX = 255
#: VPU pipeline: a row read at cycle t is written at t + VPU_LATENCY (its operands registered as
#: they come from the memory ports, then the ALU's three stages).
VPU_LATENCY = 4
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


# -- Collectives on the links (docs/microarchitecture.md, "Collectives") ----------------------------
#
# The cycle counts below are those of a program made of one collective as ``compiler.lower.collectives``
# emits it (its closing ``fence all`` included) followed by ``halt``, run on every chip of the ring at once.
# They follow from the link rules (latency L, credits C, one flit per cycle, F flits a row), the VPU rule
# and the token latency, and are exact when C >= 2L ("full rate": a receiver that pops every flit as it
# arrives returns each credit before the sender needs it again; every preset has C = 2L) and the blocks
# and chunks are all of one size. With C < 2L each transfer is charged its own credit stalls only
# (``link_transfer_cycles``), which is a lower bound when back-to-back transfers share the credits;
# with uneven blocks the sizes of the largest block and chunk make an upper bound.

#: Cycles from a collective's last retire to its ``halt`` count: the closing ``fence all`` issues one
#: cycle after the last retire, the halt one cycle later, and the count is the halt's cycle + 1.
COLLECTIVE_TAIL = 3


def link_full_rate(cfg: ChipConfig) -> bool:
    """Whether a port streams one flit per cycle for ever: the credits cover a round trip (C >= 2L)."""
    return cfg.link_credits >= 2 * cfg.link_latency


def link_transfer_cycles(cfg: ChipConfig, flits: int) -> int:
    """Cycles from a send's start ``s`` to its last flit ``t_last`` (its retire) when the send starts
    with all its credits and the receiver pops every flit as it arrives: flit f leaves at
    ``s + f + floor(f / C) * max(0, 2L - C)`` (the (f-C)-th flit's credit returns 2L after it left)."""
    if flits <= 0:
        return 0
    stall = max(0, 2 * cfg.link_latency - cfg.link_credits)
    return flits - 1 + (flits - 1) // cfg.link_credits * stall


def min_chunk_rows(cfg: ChipConfig, space: int) -> int:
    """Fewest rows in a chunk of a collective (``collective_chunks``): its send must take at least
    ``max(3, ceil((L + 3) / (QUEUE_DEPTH + 1)))`` cycles, so that the issue stage (one instruction a
    cycle; a chunk needs a send, a receive and, in a reduction, an add) and the receive queue (a
    receive waits in it from its issue until its data arrive, about L later) keep ahead of the link."""
    need = max(3, cdiv(cfg.link_latency + 3, QUEUE_DEPTH + 1))
    return cdiv(need, flits_per_row(cfg, space))


def collective_chunks(cfg: ChipConfig, rows: int, chunks: int, space: int) -> int:
    """Chunks a collective actually cuts a block of ``rows`` rows into when asked for ``chunks``: at
    most ``chunks``, at least 1, none shorter than ``min_chunk_rows``."""
    return max(1, min(chunks, rows // min_chunk_rows(cfg, space)))


def _ring_edges(cfg: ChipConfig, rows: int, space: int) -> tuple[int, int, int]:
    """(D, alpha, gamma) of a transfer of ``rows`` rows: D its send's duration (s to t_last), alpha the
    gap from a send's start to the next send's on the same port (LTX free at t_last + 1), gamma from a
    send's start to the first use of the data it carries on the receiving chip (the receive retires at
    t_last + L and signals; the token is usable TOKEN_LATENCY later)."""
    d = link_transfer_cycles(cfg, rows * flits_per_row(cfg, space))
    return d, d + 1, d + cfg.link_latency + TOKEN_LATENCY


def p2p_cycles(cfg: ChipConfig, rows: int, space: int) -> int:
    """A point-to-point transfer of ``rows`` rows between neighbours: both chips issue their send /
    receive at cycle 0 (start ``ISSUE_TO_START``); the receive retires at s + D + L."""
    d, _, _ = _ring_edges(cfg, rows, space)
    return ISSUE_TO_START + d + cfg.link_latency + COLLECTIVE_TAIL


def all_gather_cycles(cfg: ChipConfig, n: int, rows: int, space: int, chunks: int = 1) -> int:
    """Ring all-gather of n blocks of ``rows`` rows each, every block sent as ``chunks`` chunks.

    n - 1 steps; the sends of one chip form a chain in which consecutive sends are ``alpha`` apart and
    the send of chunk j at step k + 1 is ``gamma`` after the send of the same chunk at step k (it
    forwards what that one delivered). The longest path from the first send (cycle ISSUE_TO_START) to
    the last, K - 1 = c(n-1) - 1 sends later, takes J of the gamma jumps (each covers c sends) and walks
    the rest at alpha; it is linear in J, so J = 0 or J = n - 2. The last receive retires D + L later.
    """
    if n <= 1 or rows <= 0:
        return 1
    c = collective_chunks(cfg, rows, chunks, space)
    return ring_all_gather_cycles(cfg, n, c, cdiv(rows, c), space)


def ring_all_gather_cycles(cfg: ChipConfig, n: int, c: int, m: int, space: int) -> int:
    """``all_gather_cycles`` of n blocks of exactly ``c`` chunks of ``m`` rows (n >= 2)."""
    d, alpha, gamma = _ring_edges(cfg, m, space)
    k = c * (n - 1)
    path = max((k - 1) * alpha, (n - 2) * gamma + (c - 1) * alpha)
    return ISSUE_TO_START + path + d + cfg.link_latency + COLLECTIVE_TAIL


def _vpu_edges(rows: int) -> tuple[int, int]:
    """(beta, delta) of a VPU add of ``rows`` rows starting at v: the next VPU instance may start at
    v + beta (retire + 1); a unit waiting for its token may start at v + delta."""
    return rows + VPU_LATENCY, rows - 1 + VPU_LATENCY + TOKEN_LATENCY


def reduce_scatter_cycles(cfg: ChipConfig, n: int, rows: int, chunks: int = 1) -> int:
    """Ring reduce-scatter of n blocks of ``rows`` ACC rows each, every block as ``chunks`` chunks.

    Step k sends chunk j of a block (alpha after the previous send), the next chip adds it (VPU, gamma
    after the send started, then ``beta`` per add) and forwards the sum (``delta`` after the add
    started): a chain of P = gamma + delta per step. The longest path to the last add takes J chain
    steps (J = 0 or n - 2, linear in J), the rest of the K - 1 = c(n-1) - 1 chunks at
    M = max(alpha, beta) each, and ends with that add's retire.
    """
    if n <= 1 or rows <= 0:
        return 1
    c = collective_chunks(cfg, rows, chunks, 1)
    return ring_reduce_scatter_cycles(cfg, n, c, cdiv(rows, c))


def ring_reduce_scatter_cycles(cfg: ChipConfig, n: int, c: int, m: int) -> int:
    """``reduce_scatter_cycles`` of n blocks of exactly ``c`` chunks of ``m`` ACC rows (n >= 2)."""
    d, alpha, gamma = _ring_edges(cfg, m, 1)
    beta, delta = _vpu_edges(m)
    p, big = gamma + delta, max(alpha, beta)
    k = c * (n - 1)
    path = gamma + max((n - 2) * p + (c - 1) * big, (k - 1) * big)
    return ISSUE_TO_START + path + m - 1 + VPU_LATENCY + COLLECTIVE_TAIL


def all_reduce_cycles(cfg: ChipConfig, n: int, rows: int, chunks: int = 1) -> int:
    """Ring all-reduce (reduce-scatter then all-gather, no fence between) of ``rows`` ACC rows: n blocks
    of ceil(rows / n) rows (the largest), each as ``chunks`` chunks of ceil(block / chunks) rows.

    The sends form one sequence of 2K, K = c(n-1) (the reduce-scatter's, then the all-gather's). A path
    from the first to the last takes J1 reduce-scatter chain steps (P each), J2 all-gather forwards
    (gamma each), B VPU steps (beta each: only inside the reduce-scatter, between entering the VPU and
    the last chain step, at most K - 1 - c(J1 - 1) of them) and the rest of the 2K - 1 sends at alpha.
    The cost is linear in each of J1 (for J1 >= 1), J2 and B, so the longest path is one of
    J1 in {0, 1, n-1} x J2 in {0, n-2}, B at its bound when beta > alpha. The last receive retires
    D + L after the last send starts.
    """
    if n <= 1 or rows <= 0:
        return 1
    b = cdiv(rows, n)
    c = collective_chunks(cfg, b, chunks, 1)
    return ring_all_reduce_cycles(cfg, n, c, cdiv(b, c))


def ring_all_reduce_cycles(cfg: ChipConfig, n: int, c: int, m: int) -> int:
    """``all_reduce_cycles`` of n blocks of exactly ``c`` chunks of ``m`` ACC rows (n >= 2)."""
    d, alpha, gamma = _ring_edges(cfg, m, 1)
    beta, delta = _vpu_edges(m)
    p = gamma + delta
    k = c * (n - 1)
    best = 0
    for j1 in {0, 1, n - 1}:
        for j2 in {0, n - 2}:
            u = 2 * k - 1 - c * (j1 + j2)
            v = (k - 1 - c * (j1 - 1)) if j1 >= 1 and beta > alpha else 0
            best = max(best, j1 * p + j2 * gamma + v * beta + (u - v) * alpha)
    return ISSUE_TO_START + best + d + cfg.link_latency + COLLECTIVE_TAIL
