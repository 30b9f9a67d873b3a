"""rtl/mem.py: the live-value-table and banked memories against the flat one, port by port and
cycle by cycle.

Both are driven with the same random traffic on a few rows (so writes and reads of one row meet in
every distance of cycles): three write ports with random lane enables (never two of them on one lane
of one row in the same cycle, a race the timing contract leaves undefined), two registered reads
(the second transparent for write port 0) and a combinational one. Every read port's data, and
``peek`` of every row, must agree in every cycle. The banked memory gets the traffic the timing
contract allows it (section 4 of docs/microarchitecture.md): at most one port writes a bank in a
cycle, and the transparent read's row is not written by another port in that cycle.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth import Module
from amaranth.sim import Simulator

from rtl.mem import RowMemory

LANES, BITS, WRITES = 4, 8, 3


def _top(impl: str, depth: int, bank_rows: int = 1, fallback: bool = False):
    """``fallback``: the last write port is the memories' fallback port (``RowMemory.write_port``)."""
    m = Module()
    mems = {}
    for tag in ("flat", impl):
        mem = RowMemory(f"m_{tag.replace('-', '_')}", BITS, LANES, depth, impl=tag, bank_rows=bank_rows)
        ws = [mem.write_port(fallback=fallback and i == WRITES - 1) for i in range(WRITES)]
        rs = [mem.read_port("sync"), mem.read_port("sync", transparent_for=(ws[0],)), mem.read_port("comb")]
        m.submodules[f"mem_{tag.replace('-', '_')}"] = mem
        mems[tag] = (mem, ws, rs)
    # the flat memory's ports follow the other's
    (_, fw, fr), (_, lw, lr) = mems["flat"], mems[impl]
    for a, b in zip(fw, lw):
        m.d.comb += [a.addr.eq(b.addr), a.data.eq(b.data), a.en.eq(b.en)]
    for a, b in zip(fr, lr):
        m.d.comb += a.addr.eq(b.addr)
    return m, mems


def _agree(ctx, cycle, flat, other, depth):
    """Every read port's data (from the second cycle) and every row of ``other`` equal ``flat``'s."""
    (fmem, fr), (mem, rs) = flat, other
    for j, (a, b) in enumerate(zip(fr, rs)):
        if cycle:
            assert ctx.get(b.data) == ctx.get(a.data), (cycle, j)
    for row in range(depth):
        assert mem.peek(ctx, row) == fmem.peek(ctx, row), (cycle, row)


def _simulate(m, bench):
    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("impl", ["lvt", "lvt-bram"])
def test_lvt_memory_matches_flat(impl):
    depth = 16 if impl == "lvt" else 8           # (a LUT RAM bank, a block RAM bank)
    m, mems = _top(impl, depth)
    (flat, _, fr), (mem, ws, rs) = mems["flat"], mems[impl]
    rng = np.random.default_rng(5)
    hot = 3                                      # traffic on rows 0..hot-1 mostly
    seen = {"same_row_next_cycle": 0, "transparent_hits": 0}

    async def bench(ctx):
        last = [None] * WRITES
        for cycle in range(1500):
            taken = set()
            for i, w in enumerate(ws):
                row = int(rng.integers(hot)) if rng.random() < 0.8 else int(rng.integers(depth))
                en = 0
                for k in range(LANES):
                    if rng.random() < 0.5 and (row, k) not in taken:
                        en |= 1 << k
                        taken.add((row, k))
                ctx.set(w.addr, row)
                ctx.set(w.data, int(rng.integers(1 << (BITS * LANES))))
                ctx.set(w.en, en)
                if en and last[i] is not None:
                    seen["same_row_next_cycle"] += any(row == r for r in last if r is not None)
                last[i] = row if en else None
            for r in rs:
                ctx.set(r.addr, int(rng.integers(hot)) if rng.random() < 0.8 else int(rng.integers(depth)))
            if ctx.get(ws[0].en) and ctx.get(ws[0].addr) == ctx.get(rs[1].addr):
                seen["transparent_hits"] += 1
            _agree(ctx, cycle, (flat, fr), (mem, rs), depth)
            await ctx.tick()

    _simulate(m, bench)
    assert seen["same_row_next_cycle"] > 500 and seen["transparent_hits"] > 100, seen


# (with a fallback port, the last: counted below, it sits idle in a bank another port writes, idle in
# one no other port writes, and writes beside other ports, each in more than 100 cycles)
@pytest.mark.parametrize("depth,bank_rows,fallback", [(16, 4, False), (64, 32, False), (8, 8, False), (12, 8, False),
                                                      (6, 16, False), (16, 4, True), (64, 32, True)])
def test_banked_memory_matches_flat(depth, bank_rows, fallback):
    m, mems = _top("banked", depth, bank_rows, fallback)
    (flat, _, fr), (mem, ws, rs) = mems["flat"], mems["banked"]
    assert mem.nbanks == -(-depth // bank_rows)
    nb = mem.nbanks
    # (LUT RAM banks write and read a cycle late; block RAM ones do not)
    assert mem.late == (min(bank_rows, depth) <= 16)
    rng = np.random.default_rng(7)
    seen = {"banks_written_at_once": 0, "transparent_hits": 0, "same_row_next_cycle": 0,
            "fallback_idle_in_written_bank": 0, "fallback_idle_elsewhere": 0, "fallback_beside_another": 0}

    def row_in(bank):
        row = bank * bank_rows + (int(rng.integers(2)) if rng.random() < 0.7 else int(rng.integers(bank_rows)))
        return min(row, depth - 1)

    async def bench(ctx):
        last = set()
        for cycle in range(1500):
            banks = [int(b) for b in rng.permutation(nb)]
            written = {}
            for i, w in enumerate(ws):
                # a port writes a bank no other port writes in this cycle, or nothing
                en = int(rng.integers(1, 1 << LANES)) if banks and rng.random() < 0.7 else 0
                row = row_in(banks.pop()) if en else int(rng.integers(depth))
                ctx.set(w.addr, row)
                ctx.set(w.data, int(rng.integers(1 << (BITS * LANES))))
                ctx.set(w.en, en)
                if en:
                    written[row] = i
            seen["banks_written_at_once"] += len(written) > 1
            fb = ws[-1]
            if fallback and ctx.get(fb.en) == 0:
                # the unused fallback port's row in a bank another port writes, or in one none writes
                in_written = any(r // bank_rows == ctx.get(fb.addr) // bank_rows for r in written)
                seen["fallback_idle_in_written_bank" if in_written else "fallback_idle_elsewhere"] += 1
            if fallback and ctx.get(fb.en) and len(written) > 1:
                seen["fallback_beside_another"] += 1
            seen["same_row_next_cycle"] += bool(last & written.keys())
            last = set(written)
            for j, r in enumerate(rs):
                row = row_in(int(rng.integers(nb)))
                if j == 1 and written.get(row, 0) != 0:
                    row = next(x for x in range(depth) if written.get(x, 0) == 0)
                ctx.set(r.addr, row)
            seen["transparent_hits"] += written.get(ctx.get(rs[1].addr)) == 0
            _agree(ctx, cycle, (flat, fr), (mem, rs), depth)
            await ctx.tick()

    _simulate(m, bench)
    assert seen["transparent_hits"] > 50 and seen["same_row_next_cycle"] > 100, seen
    if depth > bank_rows:
        assert seen["banks_written_at_once"] > 500, seen
    if fallback:
        assert min(seen[k] for k in ("fallback_idle_in_written_bank", "fallback_idle_elsewhere",
                                     "fallback_beside_another")) > 100, seen


@pytest.mark.parametrize("fallback", [False, True])
def test_banked_memory_needs_one_writer_per_bank(fallback):
    """Two ports writing one bank in one cycle (a race in the contract) do not both land: the test
    above depends on keeping them apart."""
    m, mems = _top("banked", 16, 8, fallback)
    (flat, _, _), (mem, ws, _) = mems["flat"], mems["banked"]

    async def bench(ctx):
        ctx.set(ws[0].addr, 1)
        ctx.set(ws[0].data, 0x11111111)
        ctx.set(ws[0].en, 0xF)
        ctx.set(ws[-1].addr, 2)
        ctx.set(ws[-1].data, 0x22222222)
        ctx.set(ws[-1].en, 0xF)
        await ctx.tick()
        assert (flat.peek(ctx, 1), flat.peek(ctx, 2)) == (0x11111111, 0x22222222)
        assert (mem.peek(ctx, 1), mem.peek(ctx, 2)) != (0x11111111, 0x22222222)

    _simulate(m, bench)


def test_bank_rows_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="bank_rows 3 must be a power of two"):
        RowMemory("m", 8, 4, 16, impl="banked", bank_rows=3)
