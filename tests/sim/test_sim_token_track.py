"""The trace's token counter tracks: tokens outstanding per producer->consumer pair."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isa import assemble_file
from isa.table import Unit
from isa.timing import TOKEN_MAX
from sim import Chip
from sim.programs import run_gemm
from sim.stats import Record, Trace

EX = Path(__file__).resolve().parents[2] / "examples"


def _left(chip) -> dict:
    """Tokens the chip's counters still hold after the run (signalled, never consumed)."""
    t = chip.tokens
    keys = set(t.ready) | set(t.pending)
    return {k: len(t.ready.get(k, ())) + len(t.pending.get(k, ())) for k in keys}


def _check(chip) -> dict:
    tracks = chip.trace.tokens_outstanding(chip.index)
    assert tracks, "the program uses tokens: some pair must have a track"
    left = _left(chip)
    for key, series in tracks.items():
        values = [n for _, n in series]
        cycles = [t for t, _ in series]
        assert cycles == sorted(set(cycles))
        assert min(values) >= 0, key
        assert max(values) <= TOKEN_MAX, key
        assert values[-1] == left.get(key, 0), key
    ev = [e for e in chip.trace.to_chrome()["traceEvents"] if e["ph"] == "C" and e["name"].startswith("tokens ")]
    names = {e["name"] for e in ev}
    assert names == {f"tokens {Unit(p).name.lower()}->{Unit(c).name.lower()}" for p, c in tracks}
    return tracks


def test_gemm_tiled_token_tracks():
    prog = assemble_file(EX / "gemm_tiled.s", None)
    chip = Chip(prog.config, trace=True)
    chip.load(prog)
    chip.run()
    tracks = _check(chip)
    # every signal recorded is counted once and every wait once: the totals match the records
    recs = chip.trace.records
    for (p, c), series in tracks.items():
        sig = sum(1 for r in recs if r.unit == p and r.signals >> c & 1)
        con = sum(1 for r in recs if r.unit == c and r.waits >> p & 1)
        assert sig > 0 and con > 0
        assert series[-1][1] == sig - con


def test_generated_gemm_token_tracks():
    rng = np.random.default_rng(3)
    A = rng.integers(-128, 128, (40, 24), dtype=np.int8)
    B = rng.integers(-128, 128, (24, 40), dtype=np.int8)
    C, _, chip = run_gemm(A, B, "small", trace=True)
    assert (C == A.astype(np.int32) @ B.astype(np.int32)).all()
    tracks = _check(chip)
    assert (int(Unit.LOAD), int(Unit.MXU)) in tracks        # the A/B tiles feed the MXU through tokens


@pytest.mark.parametrize("n", [0, 5])
def test_sync_once_masks(n):
    """vector_loop.s: each load row signals the VPU, each vmul waits; the sync=once vrelu signals the store
    only in its last instance and the sync=once store waits only in its first. N=0: empty nests, no track."""
    prog = assemble_file(EX / "vector_loop.s", None)
    chip = Chip(prog.config, trace=True)
    chip.load(prog)
    chip.set_args({1: n, 2: 7})
    chip.run()
    recs = chip.trace.records
    L, S, V = int(Unit.LOAD), int(Unit.STORE), int(Unit.VPU)

    def masks(op):
        return [(r.index, r.waits, r.signals) for r in recs if r.text.startswith(op)]
    assert masks("dma.ld") == [(i, 0, 1 << V) for i in range(n)]
    assert masks("vmul") == [(i, 1 << L, 0) for i in range(n)]
    assert masks("vrelu") == [(i, 0, (1 << S) * (i == n - 1)) for i in range(n)]
    assert masks("dma.st") == [(i, (1 << V) * (i == 0), 0) for i in range(n)]
    if n:
        tracks = _check(chip)
        assert set(tracks) == {(L, V), (V, S)}
        assert max(v for _, v in tracks[(V, S)]) == 1
    else:
        assert chip.trace.tokens_outstanding(0) == {}


def test_track_by_hand():
    tr = Trace()
    L, M = int(Unit.LOAD), int(Unit.MXU)
    tr.records += [Record(0, L, 0, 0, "ld", 0, 2, 5, signals=1 << M),      # +1 at 5
                   Record(0, L, 0, 1, "ld", 0, 3, 6, signals=1 << M),      # +1 at 6
                   Record(0, M, 1, 0, "mm", 1, 6, 9, waits=1 << L),        # -1 at 6
                   Record(0, M, 1, 1, "mm", 1, 8, 12, waits=1 << L)]       # -1 at 8
    assert tr.tokens_outstanding(0) == {(L, M): [(0, 0), (5, 1), (8, 0)]}
    assert Record(0, L, 0, 0, "x", 0, 0).waits == 0 == Record(0, L, 0, 0, "x", 0, 0).signals


if __name__ == "__main__":
    pytest.main([__file__])
