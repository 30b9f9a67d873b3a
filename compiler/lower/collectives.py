"""Collectives over the chip-to-chip links, emitted into one chip's ``ProgramBuilder``.

Every chip of a ring of ``n`` runs the same emitter with its own ``rank``; chip ``rank`` sends on port 0
(to chip ``rank + 1``) and receives on port 1 (from chip ``rank - 1``), the ring wiring of ``sim.System``
(docs/microarchitecture.md, "Links"). A torus row or column is such a ring on another pair of ports
(``ports=(2, 3)`` for the columns of ``System(..., topology="torus2d")``).

Conventions shared by every collective here:

* Data are whole rows of one memory (``space``: ``Space.SPM`` or ``Space.ACC``; the reductions work on
  int32 ACC rows and add with ``vadd``, wrapping). The n blocks of a buffer of ``rows`` rows at ``base``
  are contiguous, block ``b`` at ``base + offset(b)``; when ``rows`` is not a multiple of n the blocks
  are **uneven** (no padding): the first ``rows % n`` blocks have one row more (``split``). A block is
  sent as ``chunks`` chunks split the same way, but never chunks shorter than
  ``isa.timing.min_chunk_rows`` (the issue stage and the receive queue must keep ahead of the link;
  ``isa.timing.collective_chunks`` says how many are cut). A chunk of a smaller block may be empty
  (its transfers and add are then zero-row instances, which the contract allows).
* A collective starts drained (nothing in flight that touches its rows, no token counted for its
  unit pairs) and ends drained: every token it signals is consumed inside it, and it ends with
  ``fence all`` unless ``fence=False`` (then the caller must fence, or wait for the last
  transfer's token, before touching the rows).
* n = 1 emits nothing.
* No fence inside: units are ordered by tokens only (LRX -> VPU -> LTX for a reduction,
  LRX -> LTX to forward a received chunk, VPU -> LRX to free a scratch slot), so the transfer of
  one chunk overlaps the add of another.
* Banks (``cfg.acc_bank_rows`` > 1; docs/microarchitecture.md section 4: two units writing one bank
  at once race): a reduction's receives (LRX) write the scratch while its adds (VPU) write the
  blocks, so the scratch must lie in banks of its own (``reduce_scatter``, ``all_reduce`` refuse it
  otherwise with ValueError; ``scratch_row`` gives the first row that does); ``all_reduce`` fences
  the VPU between its two halves there (the all-gather's receives write the blocks' banks), which
  its closed form (``isa.timing.all_reduce_cycles``, configs without banks) does not count.

The cycles of each collective (a program made of it followed by ``halt``) are
``isa.timing.*_cycles``; the derivation is in docs/microarchitecture.md, "Collectives".
"""

from __future__ import annotations

from collections.abc import Iterator

from isa import timing
from isa.builder import ProgramBuilder, acc, spm
from isa.ints import align_up
from isa.operands import Mem
from isa.table import Space

#: send port, receive port of a ring step (port 0 -> next chip's port 1)
RING_PORTS = (0, 1)


def split(total: int, parts: int) -> list[int]:
    """Sizes of ``parts`` near-equal pieces of ``total`` rows: the first ``total % parts`` one larger."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def offsets(sizes: list[int]) -> list[int]:
    out, o = [], 0
    for s in sizes:
        out.append(o)
        o += s
    return out


def _mem(space: int, addr: int) -> Mem:
    return (acc if space == Space.ACC else spm)[addr]


# -- point to point ----------------------------------------------------------------------------------

def send(e: ProgramBuilder, port: int, space: int, addr: int, rows: int, *,
         wait: str | list | None = None, signal: str | list | None = None) -> None:
    """Send rows ``addr .. addr+rows-1`` of ``space`` on ``port``. ``wait`` names the units that wrote
    those rows (their tokens are consumed when the send starts); ``signal`` the units that may reuse
    the rows once the last flit has left (the send's retire). No fence."""
    e.emit("link.send", port, _mem(space, addr), n=rows, wait=wait, signal=signal)


def recv(e: ProgramBuilder, port: int, space: int, addr: int, rows: int, *,
         wait: str | list | None = None, signal: str | list | None = None) -> None:
    """Receive ``rows`` rows of ``space`` from ``port`` into ``addr ..``. ``wait`` names the units that
    must be done with those rows first; ``signal`` the units that read them (their token counts from
    the receive's retire, when the last row is written). No fence."""
    e.emit("link.recv", port, _mem(space, addr), n=rows, wait=wait, signal=signal)


# -- the ring schedules --------------------------------------------------------------------------------

def _chunks(e: ProgramBuilder, space: int, block_sizes: list[int],
            chunks: int) -> tuple[int, list[list[tuple[int, int]]]]:
    """(c, per block the (offset within the block, rows) of each of its c chunks): c is
    ``isa.timing.collective_chunks`` of the largest block (no chunk shorter than ``min_chunk_rows``)."""
    c = timing.collective_chunks(e.config, max(block_sizes), chunks, space)
    return c, [list(zip(offsets(split(s, c)), split(s, c))) for s in block_sizes]


def _steps(n: int, c: int) -> Iterator[tuple[int, int]]:
    for k in range(n - 1):
        for j in range(c):
            yield k, j


def _gather(e: ProgramBuilder, rank: int, n: int, space: int, block_at: list[int],
            parts: list[list[tuple[int, int]]], c: int, ports: tuple[int, int], first_wait: str | None) -> None:
    """Ring all-gather: at step k chip ``rank`` sends block rank - k and receives block rank - k - 1;
    the send of a chunk at step k >= 1 forwards the chunk received at step k - 1 (LRX -> LTX token).
    ``first_wait``: the unit whose tokens the step-0 sends wait for (one per chunk), if any."""
    tx, rx = ports
    for k, j in _steps(n, c):
        sb, rb = (rank - k) % n, (rank - k - 1) % n
        so, sr = parts[sb][j]
        ro, rr = parts[rb][j]
        send(e, tx, space, block_at[sb] + so, sr, wait=first_wait if k == 0 else "lrx")
        recv(e, rx, space, block_at[rb] + ro, rr, signal="ltx" if k < n - 2 else None)


def _reduce(e: ProgramBuilder, rank: int, n: int, block_at: list[int], parts: list[list[tuple[int, int]]],
            c: int, scratch: int, ports: tuple[int, int], then_send: bool) -> None:
    """Ring reduce-scatter of ACC blocks: at step k chip ``rank`` sends (partial) block rank - k - 1,
    receives block rank - k - 2's partial sum into scratch and adds it into its own copy, so after
    n - 1 steps it holds the full sum of block ``rank``. Chunk j always lands in scratch slot j
    (``scratch + offset of chunk j in the largest block``); the receive of the next step into that slot
    waits for this step's add (VPU -> LRX). ``then_send``: the last adds signal LTX (an all-gather of
    the sums follows)."""
    tx, rx = ports
    big = max(range(n), key=lambda b: sum(r for _, r in parts[b]))
    slot = [o for o, _ in parts[big]]
    for k, j in _steps(n, c):
        sb, rb = (rank - k - 1) % n, (rank - k - 2) % n
        so, sr = parts[sb][j]
        ro, rr = parts[rb][j]
        send(e, tx, Space.ACC, block_at[sb] + so, sr, wait="vpu" if k > 0 else None)
        recv(e, rx, Space.ACC, scratch + slot[j], rr, wait="vpu" if k > 0 else None, signal="vpu")
        last = k == n - 2
        sig = ("ltx" if (then_send or not last) else None, "lrx" if k < n - 2 else None)
        e.emit("vadd", acc[block_at[rb] + ro], acc[block_at[rb] + ro], acc[scratch + slot[j]], n=rr,
               wait="lrx", signal="|".join(s for s in sig if s) or None)


def scratch_row(cfg, end: int) -> int:
    """The first ACC row at or after ``end`` (the blocks' end) that a reduction's scratch may start at:
    ``end`` itself, or the next bank's first row on a config with ACC banks."""
    return align_up(end, cfg.acc_bank_rows)


def _check_scratch(e: ProgramBuilder, lo: int, hi: int, scratch: int, rows: int) -> None:
    """ValueError when the scratch ``scratch .. + rows`` shares an ACC bank with the blocks ``lo .. hi``."""
    b = e.config.acc_bank_rows
    if b > 1 and rows and hi > lo and scratch // b <= (hi - 1) // b and lo // b <= (scratch + rows - 1) // b:
        raise ValueError(f"scratch ACC rows {scratch}..{scratch + rows - 1} share a bank of {b} rows with the blocks "
                         f"(rows {lo}..{hi - 1}): the receives and the adds would write one bank at once; "
                         f"put the scratch at {scratch_row(e.config, hi)} or beyond")


def _fence(e: ProgramBuilder, fence: bool) -> None:
    if fence:
        e.emit("fence", "all")


# -- the collectives -------------------------------------------------------------------------------

def all_gather(e: ProgramBuilder, rank: int, n: int, space: int, base: int, chunk_rows: int, *,
               chunks: int = 1, ports: tuple[int, int] = RING_PORTS, fence: bool = True) -> None:
    """Chip ``rank`` owns block ``rank`` (``chunk_rows`` rows at ``base + rank * chunk_rows``); afterwards
    every chip holds all n blocks (``n * chunk_rows`` rows at ``base``). n - 1 ring steps, each block
    sent as ``chunks`` chunks. Cycles: ``isa.timing.all_gather_cycles``."""
    _check(rank, n)
    if n == 1:
        return
    sizes = [chunk_rows] * n
    c, parts = _chunks(e, space, sizes, chunks)
    _gather(e, rank, n, space, offsets_from(base, sizes), parts, c, ports, None)
    _fence(e, fence)


def reduce_scatter(e: ProgramBuilder, rank: int, n: int, base: int, chunk_rows: int, scratch: int, *,
                   chunks: int = 1, ports: tuple[int, int] = RING_PORTS, fence: bool = True) -> None:
    """Every chip holds n int32 ACC blocks of ``chunk_rows`` rows at ``base``; afterwards chip ``rank``'s
    block ``rank`` (rows ``base + rank * chunk_rows ..``) holds the wrapping sum of that block over all
    chips. Its other blocks hold partial sums (undefined for the caller). ``scratch``: ``chunk_rows``
    ACC rows the receives land in. Cycles: ``isa.timing.reduce_scatter_cycles``."""
    _check(rank, n)
    if n == 1:
        return
    sizes = [chunk_rows] * n
    _check_scratch(e, base, base + n * chunk_rows, scratch, chunk_rows)
    c, parts = _chunks(e, Space.ACC, sizes, chunks)
    _reduce(e, rank, n, offsets_from(base, sizes), parts, c, scratch, ports, False)
    _fence(e, fence)


def all_reduce(e: ProgramBuilder, rank: int, n: int, base: int, rows: int, scratch: int, *,
               chunks: int = 2, ports: tuple[int, int] = RING_PORTS, fence: bool = True) -> None:
    """Every chip holds ``rows`` int32 ACC rows at ``base``; afterwards every chip holds their wrapping
    sum over all chips. Ring reduce-scatter (chip r ends with the sum of block r) then ring all-gather
    of the sums, with no fence between; blocks uneven when n does not divide ``rows`` (``split``), each
    in ``chunks`` chunks so the link moves one chunk while the VPU adds another. ``scratch``:
    ``ceil(rows / n)`` ACC rows. Cycles: ``isa.timing.all_reduce_cycles``."""
    _check(rank, n)
    if n == 1 or rows == 0:
        return
    sizes = split(rows, n)
    _check_scratch(e, base, base + rows, scratch, max(sizes))
    c, parts = _chunks(e, Space.ACC, sizes, chunks)
    at = offsets_from(base, sizes)
    _reduce(e, rank, n, at, parts, c, scratch, ports, True)
    if e.config.acc_bank_rows > 1:              # the gather's receives write the banks the last adds write
        e.emit("fence", "vpu")
    _gather(e, rank, n, Space.ACC, at, parts, c, ports, "vpu")
    _fence(e, fence)


def reduce_scatter_rows(e: ProgramBuilder, rank: int, n: int, base: int, rows: int, scratch: int, *,
                        chunks: int = 2, ports: tuple[int, int] = RING_PORTS, fence: bool = True) -> None:
    """``reduce_scatter`` of ``rows`` int32 ACC rows at ``base`` cut as ``all_reduce`` cuts them (``split``: uneven
    blocks when n does not divide ``rows``): afterwards chip ``rank``'s block ``rank`` holds the wrapping sum of that
    block over all chips. ``scratch``: ``ceil(rows / n)`` ACC rows. With n dividing ``rows`` it is
    ``reduce_scatter(..., rows // n, ...)``, in ``isa.timing.reduce_scatter_cycles``."""
    _check(rank, n)
    if n == 1 or rows == 0:
        return
    sizes = split(rows, n)
    _check_scratch(e, base, base + rows, scratch, max(sizes))
    c, parts = _chunks(e, Space.ACC, sizes, chunks)
    _reduce(e, rank, n, offsets_from(base, sizes), parts, c, scratch, ports, False)
    _fence(e, fence)


def all_gather_rows(e: ProgramBuilder, rank: int, n: int, space: int, base: int, rows: int, *, chunks: int = 2,
                    ports: tuple[int, int] = RING_PORTS, fence: bool = True) -> None:
    """``all_gather`` of ``rows`` rows at ``base`` cut as ``all_reduce`` cuts them (``split``): chip ``rank`` owns
    block ``rank``; afterwards every chip holds all of them. With n dividing ``rows`` it is ``all_gather(...,
    rows // n, ...)``, in ``isa.timing.all_gather_cycles``."""
    _check(rank, n)
    if n == 1 or rows == 0:
        return
    sizes = split(rows, n)
    c, parts = _chunks(e, space, sizes, chunks)
    _gather(e, rank, n, space, offsets_from(base, sizes), parts, c, ports, None)
    _fence(e, fence)


def all_gather_torus(e: ProgramBuilder, index: int, shape: tuple[int, int], space: int, base: int,
                     chunk_rows: int, *, fence: bool = True) -> None:
    """2-D all-gather on a ``shape = (rows, cols)`` torus (``sim.System(topology="torus2d")``): chip
    ``index = r * cols + c`` owns block ``index`` (``chunk_rows`` rows at ``base + index * chunk_rows``).
    An all-gather along its torus row (ports 0 -> 1, rank c) gives it the row's ``cols`` blocks, which
    are contiguous; an all-gather of those groups along its column (ports 2 -> 3, rank r) gives it all.
    Cycles: ``all_gather_cycles(cfg, cols, chunk_rows, space) - 1 + all_gather_cycles(cfg, rows,
    cols * chunk_rows, space)`` (the first's halt is the second's first issue)."""
    rows, cols = shape
    r, c = divmod(index, cols)
    _check(r, rows)
    all_gather(e, c, cols, space, base + r * cols * chunk_rows, chunk_rows, ports=(0, 1),
               fence=rows > 1 or fence)
    all_gather(e, r, rows, space, base, cols * chunk_rows, ports=(2, 3), fence=fence and rows > 1)


def offsets_from(base: int, sizes: list[int]) -> list[int]:
    return [base + o for o in offsets(sizes)]


def _check(rank: int, n: int) -> None:
    if n < 1 or not 0 <= rank < n:
        raise ValueError(f"rank {rank} is not a chip of a ring of {n}")


__all__ = ["send", "recv", "scratch_row", "all_gather", "reduce_scatter", "all_reduce", "all_gather_torus", "split",
           "reduce_scatter_rows", "all_gather_rows", "RING_PORTS"]
