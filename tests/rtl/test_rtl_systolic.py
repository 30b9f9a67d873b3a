"""The systolic array against numpy matmul (isa.semantics.matmul_rows), several shapes, with swaps."""

from __future__ import annotations

import numpy as np
import pytest

from isa import semantics as sem
from rtl.systolic import SystolicArray
from tests.rtl.rtl_helpers import pack, run, unpack


def _load(ctx, dut, w):
    """Write a weight tile into the shadow buffer, one row per cycle (a generator of awaits)."""
    rows, cols = w.shape
    ctx.set(dut.w_clear, 1)
    for k in range(rows):
        ctx.set(dut.w_we, 1)
        ctx.set(dut.w_row, k)
        ctx.set(dut.w_data.as_value(), pack(w[k], 8))
        yield
        ctx.set(dut.w_clear, 0)
    ctx.set(dut.w_we, 0)


@pytest.mark.parametrize("rows,cols", [(1, 1), (2, 2), (4, 4), (4, 8), (3, 5), (8, 8)])
def test_array_matches_numpy(rows, cols):
    check_array(rows, cols)


def check_array(rows: int, cols: int, mac: str = "dsp") -> None:
    """``SystolicArray(rows, cols, mac)`` against numpy: three weight tiles, each swapped in while
    the previous streams, random input rows."""
    rng = np.random.default_rng(rows * 100 + cols)
    dut = SystolicArray(rows, cols, mac=mac)
    tiles = [rng.integers(-128, 128, (rows, cols)).astype(np.int8) for _ in range(3)]
    inputs = [rng.integers(-128, 128, (int(rng.integers(1, 7)), rows)).astype(np.int8) for _ in tiles]

    async def bench(ctx):
        outs = {}
        # load tile 0 first, then stream; reload the shadow while the previous tile streams,
        # but only after its swap wavefront passed (rows + cols cycles after its first row)
        for _ in _load(ctx, dut, tiles[0]):
            await ctx.tick()
        first_of = []
        t0 = 0
        for x in inputs:
            first_of.append(t0)
            t0 += len(x) + rows + cols      # leave room to reload the shadow
        rows_at = {}
        for j, x in enumerate(inputs):
            for i, row in enumerate(x):
                rows_at[first_of[j] + i] = (j, i, row)
        load_at = {first_of[j] + rows + cols: j + 1 for j in range(len(tiles) - 1)}
        horizon = first_of[-1] + len(inputs[-1]) + dut.LATENCY + 2
        pending_load = None
        for c in range(horizon):
            if c in load_at:
                pending_load = _load(ctx, dut, tiles[load_at[c]])
            if pending_load is not None:
                try:
                    next(pending_load)
                except StopIteration:
                    pending_load = None
            if c in rows_at:
                j, i, row = rows_at[c]
                ctx.set(dut.x.as_value(), pack(row, 8))
                ctx.set(dut.swap, i == 0)
            else:
                ctx.set(dut.x.as_value(), 0)
                ctx.set(dut.swap, 0)
            src = c - dut.LATENCY
            if src in rows_at:
                outs[rows_at[src][:2]] = unpack(ctx.get(dut.y.as_value()), 32, cols)
            await ctx.tick()
        return outs

    outs = run(dut, bench)
    for j, (tile, x) in enumerate(zip(tiles, inputs)):
        want = sem.matmul_rows(x, tile)
        got = np.array([outs[(j, i)] for i in range(len(x))])
        np.testing.assert_array_equal(got, want, err_msg=f"tile {j}")
