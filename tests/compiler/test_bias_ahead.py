"""The next N tile's bias DMA runs under the current N tile (``compiler.lower.emit.bias_ahead``): a layer of one
M tile and several N tiles, weights streamed per tile, keeps the array busy across its N tiles."""
import numpy as np

import tetrachip as tc
from compiler.lower.emit import weight_mode


def test_bias_of_the_next_n_tile_loads_under_the_current_one():
    tc.manual_seed(3)
    m = tc.nn.Sequential(tc.nn.Linear(256, 48), tc.nn.ReLU())
    x = np.random.default_rng(3).standard_normal((32, 256)).astype(np.float32)
    cm = tc.compile(m, [x], config="small")
    (k,) = cm.kernels
    tl = k.tiling
    assert tl.MT == 1 and tl.NT >= 4 and tl.KT >= 4 and weight_mode(tl) != "group"
    res = tc.Device("sim", config="small", trace=True).run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    starts = sorted(r.start for r in res.trace.records if r.text.startswith(("mxu.mm ", "mxu.mma ")))
    assert len(starts) == tl.NT * tl.KT
    gaps = np.diff(starts).reshape(-1)
    inner = [gaps[n * tl.KT + j] for n in range(2, tl.NT) for j in range(tl.KT - 1)]
    # from the third N tile on (the first loads its own bias and the second's behind its A tiles), an N tile's
    # first matmul follows the previous N tile's last one as closely as matmuls within an N tile follow each other
    across = [gaps[n * tl.KT - 1] for n in range(2, tl.NT)]
    assert max(across) <= max(inner), (across, max(inner))
