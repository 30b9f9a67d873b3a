"""Several chips in a ring: a block of rows goes around and comes back; cycles follow the link model.

The expected cycle counts are computed here from the contract's link rules (docs/microarchitecture.md,
"Links"): flit f of a send leaves at t_f = max(s or t_{f-1} + 1, u_{f-C} + L) (no credit needed for
the first C flits), the receiver pops it at u_f = max(s' or u_{f-1} + 1, t_f + L); a send or receive
retires at its last flit.
"""

from __future__ import annotations

import numpy as np
import pytest

from isa import ChipConfig, timing
from sim import System


def flits(s_send: int, s_recv: int, n: int, C: int, L: int) -> tuple[list[int], list[int]]:
    t: list[int] = []
    u: list[int] = []
    for f in range(n):
        tf = s_send if f == 0 else t[-1] + 1
        if f >= C:
            tf = max(tf, u[f - C] + L)
        t.append(tf)
        uf = max(s_recv if f == 0 else u[-1] + 1, tf + L)
        u.append(uf)
    return t, u


@pytest.mark.parametrize("credits", [8, 2])
@pytest.mark.parametrize("nrows", [1, 6])
def test_two_chip_round_trip(credits, nrows):
    cfg = ChipConfig.preset("tiny").replace(name="tiny-ring", link_credits=credits)
    L, C = cfg.link_latency, cfg.link_credits
    F = timing.flits_per_row(cfg, 1)                       # ACC rows: cols * 4 bytes each
    n = nrows * F
    sysm = System(cfg, 2, trace=True)
    # chip 0 sends a block to chip 1 (its port 0 -> chip 1's port 1) and receives it back on port 1
    sysm.load(0, f"link.send 0, acc[0], n={nrows}\nlink.recv 1, acc[100], n={nrows}\nhalt\n")
    # chip 1 receives, then sends the block on (its port 0 -> chip 0's port 1)
    sysm.load(1, f"link.recv 1, acc[0], n={nrows}, signal=ltx\nlink.send 0, acc[0], n={nrows}, wait=lrx\nhalt\n")
    block = np.random.default_rng(7).integers(-(1 << 31), (1 << 31) - 1, (nrows, cfg.cols)).astype(np.int32)
    sysm[0].write_acc(0, block)
    stats = sysm.run()
    assert (sysm[0].read_acc(100, nrows) == block).all()
    assert (sysm[1].read_acc(0, nrows) == block).all()

    # expected timing from the contract
    t1, u1 = flits(1, 1, n, C, L)                  # chip 0 send (issue 0 -> start 1); chip 1 recv (start 1)
    recv1_r = u1[-1]
    send2_s = recv1_r + timing.TOKEN_LATENCY       # chip 1 send waits for its receive's token
    t2, u2 = flits(send2_s, 2, n, C, L)            # chip 0's receive was issued at 1, started at 2
    chip0_halt = max(t1[-1], u2[-1]) + 1           # halt issues when every unit has retired
    chip1_halt = max(recv1_r, t2[-1]) + 1
    assert stats[0].cycles == chip0_halt + 1
    assert stats[1].cycles == chip1_halt + 1
    assert sysm.cycles == max(chip0_halt, chip1_halt) + 1
    retire = {(r.chip, r.pc): r.retire for r in sysm.trace.records if r.unit != 0}
    assert retire[(0, 0)] == t1[-1] and retire[(1, 0)] == u1[-1]
    assert retire[(1, 1)] == t2[-1] and retire[(0, 1)] == u2[-1]
    assert stats[0].bytes["link_tx"] == nrows * cfg.cols * 4


def test_four_chip_ring_passes_a_block_all_the_way_around():
    cfg = ChipConfig.preset("tiny")
    sysm = System(cfg, 4)
    rows = 3
    sysm.load(0, f"link.send 0, spm[0], n={rows}\nlink.recv 1, spm[10], n={rows}\nhalt\n")
    for i in (1, 2, 3):
        sysm.load(i, f"link.recv 1, spm[0], n={rows}, signal=ltx\nlink.send 0, spm[0], n={rows}, wait=lrx\nhalt\n")
    block = np.arange(rows * cfg.cols, dtype=np.int8).reshape(rows, cfg.cols) - 5
    sysm[0].write_spm(0, block)
    sysm.run()
    assert (sysm[0].read_spm(10, rows) == block).all()
    for i in (1, 2, 3):
        assert (sysm[i].read_spm(0, rows) == block).all()
