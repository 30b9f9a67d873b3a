"""The next N tile's bias DMA runs under the current N tile (``compiler.lower.emit.bias_ahead``): a layer of one
M tile and several N tiles keeps the array busy across its N tiles, its weights streamed per tile or grouped."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.emit import weight_mode


@pytest.mark.parametrize("rows, k, n, mode", [(32, 256, 48, "tile"), (200, 128, 64, "group")])
def test_bias_of_the_next_n_tile_loads_under_the_current_one(rows, k, n, mode):
    tc.manual_seed(3)
    m = tc.nn.Sequential(tc.nn.Linear(k, n), tc.nn.ReLU())
    x = np.random.default_rng(3).standard_normal((rows, k)).astype(np.float32)
    cm = tc.compile(m, [x], config="small")
    (kern,) = cm.kernels
    tl = kern.tiling
    assert tl.MT == 1 and tl.NT >= 4 and weight_mode(tl) == mode
    res = tc.Device("sim", config="small", trace=True).run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    starts = sorted(r.start for r in res.trace.records if r.text.startswith(("mxu.mm ", "mxu.mma ")))
    assert len(starts) == tl.NT * tl.KT
    gaps = np.diff(starts)
    inner = [gaps[i * tl.KT + j] for i in range(2, tl.NT) for j in range(tl.KT - 1)]
    # from the third N tile on (the first loads its own bias and the second's behind its A tiles), an N tile's
    # first matmul follows the previous N tile's last one as closely as matmuls within an N tile follow each other
    across = [gaps[i * tl.KT - 1] for i in range(2, tl.NT)]
    assert max(across) <= max(inner), (across, max(inner))
