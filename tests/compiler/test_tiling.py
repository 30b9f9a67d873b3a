"""Tiling: DMA row groups reproduce every address; K tiles follow contiguous columns."""
import numpy as np
import pytest

from compiler.lower.schedule import ChipCompileError
from compiler.lower.tiling import choose, groups, k_tiles
from isa.config import ChipConfig


def _expand(gs):
    out = {}
    for g in gs:
        for c in range(g.count):
            for r in range(g.rows):
                out[g.local + c * g.lstride + r] = g.dram + c * g.dstride + r * g.rstride
    return out


@pytest.mark.parametrize("addrs", [
    list(range(0, 50, 5)),
    [7],
    [a * 100 + b * 2 for a in range(4) for b in range(6)],          # rows of a strided image
    [3, 9, 1, 4, 4, 4, 100, 101, 102, 0],
])
def test_groups_cover_every_row(addrs):
    gs = groups(np.array(addrs))
    got = _expand(gs)
    assert got == {i: a for i, a in enumerate(addrs)}


def test_image_rows_become_one_nest():
    addrs = np.array([a * 100 + b * 2 for a in range(4) for b in range(6)])
    (g,) = groups(addrs)
    assert (g.rows, g.rstride, g.count, g.lstride, g.dstride) == (6, 2, 4, 6, 100)


def test_k_tiles_sort_and_split_columns():
    rows = np.arange(5)[:, None] * 1000
    cols = np.array([2, 0, 1, 10, 11, 12, 13])
    order, tiles, r = k_tiles(rows + cols[None, :], 4, "t")
    assert list(cols[order]) == [0, 1, 2, 10, 11, 12, 13]
    assert [(t.klen, t.col, t.estride) for t in tiles] == [(3, 0, 1), (4, 10, 1)]
    assert list(r) == [0, 1000, 2000, 3000, 4000]


def test_non_separable_gather_is_refused():
    P = np.array([[0, 1], [10, 12]])
    with pytest.raises(ChipCompileError, match="separable"):
        k_tiles(P, 4, "kernel x")


def test_choose_splits_m_when_spm_is_short():
    cfg = ChipConfig.preset("tiny")
    t = choose(cfg, 5000, 3, 4, True, 1, "k")
    assert t.MT > 1 and t.nbuf == 2 and t.spm_rows <= cfg.spm_rows and t.acc_rows <= cfg.acc_rows
    assert t.Mt * (t.MT - 1) < 5000 <= t.Mt * t.MT


@pytest.mark.parametrize("bank_rows, int8", [(32, True), (1, True), (32, False)])
def test_choose_names_acc_when_acc_is_what_does_not_fit(bank_rows, int8):
    # 64 ACC rows in banks of 32: two M-tile regions of a bank each take all of it, so an int8 output's
    # scale rows (one per N tile) fit nowhere, while SPM (256 rows) has room for the tiles
    cfg = ChipConfig.preset("small").replace(spm_rows=256, acc_rows=64, spm_bank_rows=64, acc_bank_rows=bank_rows)
    N = 8 * 63 if bank_rows == 1 else 64          # unbanked: 63 scale rows and two one-row regions
    if not int8 and bank_rows > 1:
        t = choose(cfg, 450, 8, N, int8, 1, "k")
        assert t.acc_rows <= cfg.acc_rows and t.Mt % bank_rows == 0
        return
    with pytest.raises(ChipCompileError, match="needs more ACC rows") as e:
        choose(cfg, 450, 8, N, int8, 1, "k")
    msg = str(e.value)
    assert "SPM" not in msg and "(acc_rows)" in msg
    assert ("acc_bank_rows" in msg) == (bank_rows > 1)
    assert f"take {2 * bank_rows + N // cfg.cols}, it has 64" in msg
