"""rtl/mem.py: the live-value-table memories against the flat one, port by port and cycle by cycle.

Both are driven with the same random traffic on a few rows (so writes and reads of one row meet in
every distance of cycles): three write ports with random lane enables (never two of them on one lane
of one row in the same cycle, a race the timing contract leaves undefined), two registered reads
(the second transparent for write port 0) and a combinational one. Every read port's data, and
``peek`` of every row, must agree in every cycle.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth import Module
from amaranth.sim import Simulator

from rtl.mem import RowMemory

LANES, BITS, WRITES = 4, 8, 3


def _top(impl: str, depth: int):
    m = Module()
    mems = {}
    for tag in ("flat", impl):
        mem = RowMemory(f"m_{tag.replace('-', '_')}", BITS, LANES, depth, impl=tag)
        ws = [mem.write_port() for _ in range(WRITES)]
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
            for j, (a, b) in enumerate(zip(fr, rs)):
                if cycle:
                    assert ctx.get(b.data) == ctx.get(a.data), (cycle, j)
            for row in range(depth):
                assert mem.peek(ctx, row) == flat.peek(ctx, row), (cycle, row)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen["same_row_next_cycle"] > 500 and seen["transparent_hits"] > 100, seen
