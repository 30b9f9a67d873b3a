"""The lift's decisions must not depend on an activation's size: a per-channel constant of an activation of
more than a few million elements (ResNet-18's stem at 224x224, batch 8) is still seen as per-channel, so it
folds into its kernel as it does for a smaller batch (data parallel compares the two)."""
from __future__ import annotations

import numpy as np

from compiler.lower.bmm import varies
from compiler.lower.schedule import _VARIES_CHUNK, _varies


def test_a_large_materialized_per_channel_constant_varies_along_its_channels_only():
    c = np.arange(8, dtype=np.int8).reshape(1, 8, 1, 1)                 # (int8: a small array of many elements)
    shape = (2, 8, 8, 2 * _VARIES_CHUNK // (2 * 8 * 8) + 3)             # a little over 2 chunks
    x = np.ascontiguousarray(np.broadcast_to(c, shape))                 # not a broadcast view: real strides
    assert x.size > 2 * _VARIES_CHUNK and all(s != 0 for s in x.strides)
    assert [_varies(x, ax) for ax in range(4)] == [False, True, False, False]
    y = x.copy()
    y[-1, 0, -1, -1] += 1                                              # one element in the last chunk differs
    assert [_varies(y, ax) for ax in range(4)] == [True, True, True, True]
    small = x[:1, :, :2, :3]
    assert [_varies(small, ax) for ax in range(4)] == [varies(small, ax) for ax in range(4)]
