"""Shared helpers for the RTL tests: run an Amaranth testbench, pack/unpack lane vectors."""

from __future__ import annotations

import numpy as np
from amaranth.sim import Simulator


def run(dut, bench, *, vcd: str | None = None, clock: bool = True):
    """Run one async testbench on ``dut`` with a clock; return what the bench returns."""
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    box = {}

    async def tb(ctx):
        box["result"] = await bench(ctx)

    sim.add_testbench(tb)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    return box.get("result")


def pack(values, bits: int) -> int:
    """Lanes (lane 0 in the low bits) as one unsigned integer."""
    mask = (1 << bits) - 1
    out = 0
    for i, v in enumerate(np.asarray(values).reshape(-1).tolist()):
        out |= (int(v) & mask) << (i * bits)
    return out


def unpack(word: int, bits: int, n: int, signed: bool = True) -> np.ndarray:
    mask = (1 << bits) - 1
    vals = [(int(word) >> (i * bits)) & mask for i in range(n)]
    if signed:
        vals = [v - (1 << bits) if v >> (bits - 1) else v for v in vals]
    return np.array(vals, dtype=np.int64)
