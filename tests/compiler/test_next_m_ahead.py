"""Across M tiles the array stays busy (``compiler.lower.emit.next_m_ahead``, ``a_freed_per_mm``): each M tile's
last N tile loads the next M tile's first weight group and bias, and with a single A buffer the next M tile's
A tiles as the last N tile's matmuls free them (not after its last store). One and two A buffers, int8 and int32
outputs, with and without a bias, an edge M tile or none (the M-tile loop's last trip then leaves it),
GEMMs and padded convolutions (A tiles of several row groups)."""
import re

import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.emit import a_freed_per_mm, weight_mode


def _model(kind, k, n):
    tc.manual_seed(5)
    if kind in ("int8", "int8 nobias"):       # the first kernel: ReLU, int8 output
        return tc.nn.Sequential(tc.nn.Linear(k, n, bias=kind == "int8"), tc.nn.ReLU(), tc.nn.Linear(n, 8))
    if kind == "int32 bias":
        return tc.nn.Linear(k, n)
    if kind.startswith("conv"):               # "conv stride": k input channels, n output channels, 3x3, padded
        return tc.nn.Sequential(tc.nn.Conv2d(k, n, 3, padding=1, stride=int(kind.split()[1])), tc.nn.ReLU(),
                                tc.nn.Conv2d(n, 8, 1))
    w = tc.Tensor(np.random.default_rng(k + n).standard_normal((k, n)).astype(np.float32))
    return lambda a: a @ w                    # int32 output, no bias


def _run(rows, k, n, kind):
    shape = (rows, k) if not kind.startswith("conv") else (rows[0], k, rows[1], rows[1])
    x = np.random.default_rng(k * n).standard_normal(shape).astype(np.float32)
    cm = tc.compile(_model(kind, k, n), [x], config="small")
    res = tc.Device("sim", config="small", trace=True).run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    tl = cm.kernels[0].tiling
    mms = sorted((r for r in res.trace.records if r.text.startswith(("mxu.mm ", "mxu.mma "))), key=lambda r: r.start)
    return cm, res, tl, mms[:tl.MT * tl.NT * tl.KT]          # the first kernel's matmuls


@pytest.mark.parametrize("rows, k, n, kind, nbuf, edge", [
    (434, 64, 64, "int8", 2, False),
    (619, 64, 64, "int32 bias", 2, True),
    (249, 128, 128, "int8", 1, True),
    (286, 128, 128, "int8", 1, False),
    (323, 128, 128, "int32", 1, True),
    (1000, 256, 128, "int8", 1, False),
    ((1, 16), 32, 256, "conv 1", 1, False),
    ((2, 20), 32, 256, "conv 2", 1, True),
])
def test_the_next_m_tiles_first_weights_load_under_the_last_n_tile(rows, k, n, kind, nbuf, edge):
    cm, res, tl, mms = _run(rows, k, n, kind)
    assert tl.MT >= 2 and tl.NT >= 2 and tl.nbuf == nbuf and weight_mode(tl) == "group"
    assert (tl.M % tl.Mt != 0) == edge and a_freed_per_mm(tl) == (nbuf == 1)
    # the first weight group of every M tile (a group of KT tiles of 8 rows from the first DRAM columns, no
    # register offset): the kernel's prefetch, then one load per later M tile, each done while the previous M
    # tile computes
    first = re.compile(rf"dma\.ld spm\[.*\], dram\[0x[0-9a-f]+\], rows={tl.KT * 8},")
    group = sorted((r for r in res.trace.records if first.match(r.text)), key=lambda r: r.start)[:tl.MT]
    assert len({r.text.split("dram[")[1].split("]")[0] for r in group}) == 1, [r.text for r in group]
    per_m = tl.NT * tl.KT
    for m in range(1, tl.MT):
        assert mms[(m - 1) * per_m].start < group[m].start and group[m].retire < mms[m * per_m - 1].start, m


@pytest.mark.parametrize("rows, k, n, kind", [
    (249, 128, 128, "int8 nobias"),
    (323, 128, 128, "int32"),
    (1500, 128, 128, "int32"),
])
def test_m_tiles_follow_each_other_without_a_gap(rows, k, n, kind):
    """With a single A buffer and nothing else to load between M tiles (no bias), the next M tile's first
    matmul follows the last one as closely as matmuls within an N tile follow each other; before, its
    weight group and first A tile loaded only after the last N tile was stored."""
    _, _, tl, mms = _run(rows, k, n, kind)
    assert tl.nbuf == 1 and a_freed_per_mm(tl)
    gaps = np.diff([r.start for r in mms])
    per_m = tl.NT * tl.KT
    inner = max(gaps[m * per_m + j] for m in range(tl.MT) for j in range(per_m - 1) if (j + 1) % tl.KT)
    across = [int(gaps[m * per_m - 1]) for m in range(1, tl.MT)]
    assert max(across) <= inner, (across, inner)
    # and so do the N tiles of every M tile after the first (the first's second group loads behind its A tiles)
    n_across = [int(gaps[m * per_m + j * tl.KT - 1]) for m in range(1, tl.MT) for j in range(1, tl.NT)]
    assert max(n_across) <= inner, (n_across, inner)
