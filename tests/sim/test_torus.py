"""sim.System(topology="torus2d"): wiring, a block around every torus row and column, and the 2-D
all-gather (rows, then columns) against the ring's."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.lower import collectives as co
from isa import ChipConfig, timing
from isa.builder import ProgramBuilder, spm
from isa.table import Space
from sim import SimError, System
from sim.system import square_shape

TINY4 = ChipConfig.preset("tiny").replace(name="tiny-4links", links=4)


def test_torus_needs_four_ports():
    with pytest.raises(SimError, match="links"):
        System("tiny", 4, topology="torus2d")
    with pytest.raises(SimError, match="shape"):
        System(TINY4, 6, topology="torus2d", shape=(2, 2))
    with pytest.raises(SimError, match="topology"):
        System(TINY4, 4, topology="mesh")


@pytest.mark.parametrize("n,shape", [(1, (1, 1)), (4, (2, 2)), (6, (2, 3)), (7, (1, 7)), (8, (2, 4)),
                                     (12, (3, 4)), (16, (4, 4)), (64, (8, 8))])
def test_default_shape_is_most_square(n, shape):
    assert square_shape(n) == shape
    assert System(TINY4, n, topology="torus2d").shape == shape


def test_wiring():
    s = System(TINY4, 6, topology="torus2d", shape=(2, 3))
    links = set(s.links())
    # chip (r, c) = 3r + c: port 0 -> east (r, c+1 mod 3) port 1, port 2 -> south (r+1 mod 2, c) port 3
    for r in range(2):
        for c in range(3):
            i = 3 * r + c
            assert (i, 0, 3 * r + (c + 1) % 3, 1) in links
            assert (i, 2, 3 * ((r + 1) % 2) + c, 3) in links
    assert len(links) == 12


def _around(s, ring, tx, rx, rows=2):
    """Chip ring[0] sends a block along ``ring`` (each forwards it on port tx) until it comes back."""
    first = ring[0]
    for i in ring:
        e = ProgramBuilder(s.cfg)
        if i == first:
            e.emit("link.send", tx, spm[0], n=rows)
            e.emit("link.recv", rx, spm[20], n=rows)
        else:
            e.emit("link.recv", rx, spm[0], n=rows, signal="ltx")
            e.emit("link.send", tx, spm[0], n=rows, wait="lrx")
        e.emit("halt")
        s.load(i, e.build())


@pytest.mark.parametrize("shape", [(2, 3), (3, 4), (4, 2)])
def test_block_around_every_row_and_column(shape):
    R, C = shape
    rng = np.random.default_rng(4)
    for axis in ("row", "col"):
        for which in range(R if axis == "row" else C):
            s = System(TINY4, R * C, topology="torus2d", shape=shape)
            if axis == "row":
                ring, tx, rx = [which * C + c for c in range(C)], 0, 1
            else:
                ring, tx, rx = [r * C + which for r in range(R)], 2, 3
            others = [i for i in range(R * C) if i not in ring]
            for i in others:
                s.load(i, "halt\n")
            _around(s, ring, tx, rx)
            block = rng.integers(-128, 128, (2, TINY4.cols)).astype(np.int8)
            s[ring[0]].write_spm(0, block)
            s.run()
            assert (s[ring[0]].read_spm(20, 2) == block).all(), (axis, which)
            for i in ring[1:]:
                assert (s[i].read_spm(0, 2) == block).all(), (axis, which, i)
            for i in others:                                 # nothing leaked onto the other chips
                assert not s[i].read_spm(0, 2).any()


@pytest.mark.parametrize("n", [4, 6, 8, 16])
@pytest.mark.parametrize("space,b", [(Space.SPM, 2), (Space.ACC, 1)])
def test_2d_all_gather_equals_ring(n, space, b):
    rng = np.random.default_rng(n)
    dt = np.int8 if space == Space.SPM else np.int32
    blocks = [rng.integers(-100, 100, (b, TINY4.cols)).astype(dt) for _ in range(n)]
    rd = (lambda ch, k: ch.read_spm(4, k)) if space == Space.SPM else (lambda ch, k: ch.read_acc(4, k))

    def go(system, emit):
        for i in range(n):
            e = ProgramBuilder(system.cfg)
            emit(e, i)
            e.emit("halt")
            system.load(i, e.build())
            (system[i].write_spm if space == Space.SPM else system[i].write_acc)(4 + i * b, blocks[i])
        system.run()
        return [rd(system[i], n * b) for i in range(n)]

    torus = System(TINY4, n, topology="torus2d")
    R, C = torus.shape
    got_t = go(torus, lambda e, i: co.all_gather_torus(e, i, (R, C), space, 4, b))
    ring = System(TINY4, n)
    got_r = go(ring, lambda e, i: co.all_gather(e, i, n, space, 4, b))
    want = np.concatenate(blocks)
    for i in range(n):
        assert (got_t[i] == want).all() and (got_r[i] == want).all(), i
    # cycles: the row gather, then (its fence's next cycle) the column gather of cols-block groups
    row = timing.all_gather_cycles(TINY4, C, b, space)
    col = timing.all_gather_cycles(TINY4, R, C * b, space)
    assert torus.cycles == (row - 1 + col if R > 1 else row)
    assert ring.cycles == timing.all_gather_cycles(TINY4, n, b, space)
