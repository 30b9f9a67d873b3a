"""Convolutions and data movement of real models through the ordinary pipeline (``tc.compile``):
grouped and depthwise convolutions, batches and odd shapes, concatenation, splits, slices,
reshapes and transposes between kernels. Each runs on ``Device("sim")`` bit-exact against
``cm.reference`` and close to the frontend's float value; what the chip cannot run raises
``ChipCompileError`` naming the op and the user's source line."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.ir.engine import prepare
from compiler.ir.graph import Ops, recording_sites, toposort
from compiler.lower.pipeline import column_blocks
from compiler.lower.schedule import ChipCompileError
from isa.config import ChipConfig
from isa.ints import cdiv

nn = tc.nn


def _check(model, xs, config, rel=0.05):
    """Compile, run on the simulator; bit-exact to the reference, within ``rel`` of the float model."""
    cm = tc.compile(model, xs, config=config)
    res = tc.Device("sim", config=config).run(cm, *xs)
    ref = cm.reference(*xs)
    assert len(ref) == len(res.outputs)
    for got, want in zip(res.outputs, ref):
        np.testing.assert_array_equal(got, want)
    out = model(*[tc.Tensor(x) for x in xs])
    front = [o.numpy() for o in (out if isinstance(out, (list, tuple)) else [out])]
    for got, f in zip(res.outputs, front):
        assert got.shape == f.shape
        assert np.abs(got - f).max() <= rel * np.abs(f).max()
    return cm, res


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------- grouped

GROUPED = [  # batch, cin, cout, groups, kernel, stride, padding, spatial, config
    (1, 8, 8, 8, 3, 1, 1, 6, "tiny"),            # depthwise, MobileNetV2's 3x3
    (2, 32, 32, 32, 3, 1, 1, 7, "small"),
    (1, 48, 48, 48, 3, 2, 1, 9, "base"),         # depthwise, stride 2
    (3, 20, 20, 20, 3, 2, 1, 7, "base"),         # channels not a multiple of the array
    (1, 12, 18, 3, 3, 1, 1, 6, "small"),         # grouped, 4 -> 6 per group
    (2, 8, 40, 2, 1, 1, 0, 5, "small"),          # grouped 1x1, a group wider than the array
    (1, 6, 12, 6, 3, 1, 1, 5, "tiny"),           # depthwise with a multiplier of 2
]


@pytest.mark.parametrize("b,cin,cout,g,k,s,p,hw,config", GROUPED)
def test_grouped_and_depthwise_conv(b, cin, cout, g, k, s, p, hw, config):
    tc.manual_seed(cin + cout + g)
    conv = nn.Conv2d(cin, cout, k, stride=s, padding=p, groups=g)
    x = _x(b, cin, hw, hw, seed=g)
    cm, res = _check(lambda t: conv(t).relu(), [x], config)
    oh = (hw + 2 * p - k) // s + 1
    M = b * oh * oh
    # useful MACs: each output channel sees cin/groups input channels, independent of the block diagonal
    assert sum(info.macs for info in cm.kernels) == M * cout * (cin // g) * k * k
    # the kernels' MXU slots are those the simulator counted
    assert sum(info.mxu_macs for info in cm.kernels) == res.stats.mxu_macs
    cfg = ChipConfig.preset(config)
    C = cfg.cols
    if cin == g and cout == g:
        # column blocks of C channels read C channels' taps each: at most k*k*C weight rows per block,
        # where the whole block-diagonal GEMM would stream k*k*cin rows per N tile
        assert res.stats.mxu_macs <= M * k * k * C * C * cdiv(cout, C)
        assert len(cm.kernels) == cdiv(cout, C)


def test_column_blocks_keep_groups_whole_and_pack_them():
    # 4 groups of 3 columns, each reading its own 2 weight rows
    mask = np.zeros((8, 12), bool)
    for gi in range(4):
        mask[2 * gi:2 * gi + 2, 3 * gi:3 * gi + 3] = True
    blocks = column_blocks(mask, 8, 12, 8)
    assert [(a, b) for a, b, _ in blocks] == [(0, 6), (6, 12)]           # two whole groups per block of <= 8
    assert [r.tolist() for _, _, r in blocks] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # a group wider than the array is cut into array-wide pieces; its last piece is packed with the
    # next group's pieces only where they fit beside it
    wide = np.zeros((6, 24), bool)
    wide[:2, :10], wide[2:4, 10:20], wide[4:, 20:] = True, True, True
    blocks = column_blocks(wide, 6, 24, 8)
    assert [(a, b) for a, b, _ in blocks] == [(0, 8), (8, 10), (10, 18), (18, 24)]
    assert [r.tolist() for _, _, r in blocks] == [[0, 1], [0, 1], [2, 3], [2, 3, 4, 5]]
    assert [(a, b) for a, b, _ in column_blocks(None, 5, 7, 4)] == [(0, 7)]


class _InvertedResidual(nn.Module):
    """MobileNetV2's block (ReLU for ReLU6): 1x1 expand, 3x3 depthwise, 1x1 project, + x at stride 1."""

    def __init__(self, c, t, stride):
        h = c * t
        self.e, self.d, self.p = nn.Conv2d(c, h, 1), nn.Conv2d(h, h, 3, stride, 1, groups=h), nn.Conv2d(h, c, 1)
        self.stride = stride

    def forward(self, x):
        y = self.p(self.d(self.e(x).relu()).relu())
        return y + x if self.stride == 1 else y


@pytest.mark.parametrize("stride", [1, 2])
def test_mobilenet_v2_block(stride):
    tc.manual_seed(stride)
    block = _InvertedResidual(16, 6, stride)
    cm, res = _check(block, [_x(1, 16, 10, 10, seed=stride)], "base")
    names = [k.name for k in cm.kernels]
    assert sum(n.startswith("conv1.c") for n in names) == 96 // 16        # the depthwise conv's column blocks
    assert "useful MACs" in cm.summary()


def test_grouped_kernel_blocks_that_overflow_instruction_memory_run_as_pages():
    tc.manual_seed(7)
    conv = nn.Conv2d(64, 64, 1, groups=4)
    x = _x(1, 64, 5, 5, seed=10)
    cm = tc.compile(conv, [x], config="small")
    assert len(cm.kernels) == 8                               # 4 groups of 16 channels, 8 columns a block
    few = ChipConfig.preset("small").replace(name="fewwords", imem_words=len(cm.program) - 1)
    cm2 = tc.compile(conv, [x], config=few)
    assert [k.name for k in cm2.kernels] == [k.name for k in cm.kernels]      # the column blocks stay
    assert len(cm2.pages) == 2 and all(len(p) <= few.imem_words for p in cm2.pages)
    res = tc.Device("sim", config=few).run(cm2, x)
    np.testing.assert_array_equal(res.outputs[0], cm2.reference(x)[0])
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])     # the same integer model


def test_depthwise_with_a_symbolic_batch():
    tc.manual_seed(5)
    dw, pw = nn.Conv2d(24, 24, 3, padding=1, groups=24), nn.Conv2d(24, 8, 1)
    model = lambda t: pw(dw(t).relu())  # noqa: E731
    x = _x(4, 24, 6, 6, seed=7)
    cm = tc.compile(model, [x], config="small", dynamic={"N": 4})
    assert [k.name for k in cm.kernels] == ["conv0.c0", "conv0.c1", "conv0.c2", "conv1"]
    for n in (1, 3):
        res = tc.Device("sim", config="small").run(cm, x[:n])
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x[:n])[0])
        f = model(tc.Tensor(x[:n])).numpy()
        assert res.outputs[0].shape == f.shape and np.abs(res.outputs[0] - f).max() <= 0.05 * np.abs(f).max()


def test_grouped_contraction_too_large_is_named():
    w = _x(2048, 64)
    with pytest.raises(ChipCompileError, match="block-diagonal weight"):
        tc.compile(lambda a: (a * tc.Tensor(w)).sum(-1, keepdim=True) @ tc.Tensor(np.ones((1, 2), np.float32)),
                   [_x(2048, 64)], config="base")


# ---------------------------------------------------------------------------------------------- batches, odd shapes

CONVS = [  # batch, cin, cout, spatial, kernel, stride, padding, dilation, config
    (1, 3, 5, 5, 3, 1, 0, 1, "tiny"),
    (2, 3, 7, 7, 3, 2, 1, 1, "small"),
    (3, 5, 13, 11, 3, 3, 2, 1, "base"),
    (5, 7, 3, 5, 1, 1, 0, 1, "small"),
    (4, 13, 5, 7, 3, 1, 3, 1, "base"),
    (2, 3, 5, 11, 3, 1, 2, 2, "small"),
    (5, 5, 7, 7, 2, 3, 1, 2, "base"),
    (3, 7, 13, 5, 5, 2, 2, 1, "tiny"),
]


@pytest.mark.parametrize("b,cin,cout,hw,k,s,p,d,config", CONVS)
def test_conv_batches_and_odd_shapes(b, cin, cout, hw, k, s, p, d, config):
    tc.manual_seed(b * 100 + cin)
    conv = nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d)
    _check(lambda t: conv(t).relu(), [_x(b, cin, hw, hw, seed=k)], config)


@pytest.mark.parametrize("b", [1, 2, 3, 5])
def test_linear_and_residual_batches(b):
    tc.manual_seed(b)
    l1, l2, l3 = nn.Linear(7, 13), nn.Linear(13, 7), nn.Linear(5, 5)
    _check(lambda t: (l2(l1(t).relu()) + t).relu(), [_x(b, 7, seed=b)], "small")
    _check(lambda t: l3(l3(t).relu()), [_x(b, 3, 5, seed=b)], "tiny")
    c1, c2 = nn.Conv2d(5, 5, 3, padding=1), nn.Conv2d(5, 5, 3, padding=1)
    _check(lambda t: (c2(c1(t).relu()) + t).relu(), [_x(b, 5, 7, 7, seed=b)], "base")


# ---------------------------------------------------------------------------------------------- data movement

def test_concat_of_real_channel_counts():
    tc.manual_seed(0)
    a, b, c = nn.Conv2d(16, 32, 3, padding=1), nn.Conv2d(16, 24, 1), nn.Conv2d(72, 8, 3, padding=1)
    # pieces padded by more than a few elements along the channel axis (Inception-style branches + input)
    _check(lambda t: c(tc.cat([a(t).relu(), b(t).relu(), t], 1)), [_x(2, 16, 7, 7)], "base")


def test_densenet_concat_chain():
    tc.manual_seed(1)
    d1, d2 = nn.Conv2d(16, 8, 3, padding=1), nn.Conv2d(24, 8, 3, padding=1)

    def dense(t):
        t = tc.cat([t, d1(t).relu()], 1)
        return tc.cat([t, d2(t).relu()], 1)
    _check(dense, [_x(2, 16, 7, 7, seed=1)], "base")


def test_concat_of_slices_copies_them_first():
    tc.manual_seed(2)
    c1, c3 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(9, 6, 3, padding=1)
    cm, _ = _check(lambda t: c3(tc.cat([c1(t).relu(), t, t[:, :2]], 1)), [_x(2, 3, 5, 5, seed=2)], "small")
    assert any(k.name.startswith("copy") for k in cm.qsched.sched.kernels)
    l1, l3 = nn.Linear(5, 6), nn.Linear(20, 3)
    y = _x(3, 4, 5, seed=3)
    _check(lambda t: l3(tc.cat([l1(t).relu().reshape(3, 24)[:, :10], t.reshape(3, 20)[:, :10]], 1)), [y], "small")


def test_split_chunk_and_padded_conv_on_a_slice():
    tc.manual_seed(3)
    a, b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(4, 6, 1)
    w = nn.Conv2d(4, 6, 3, padding=1)
    x = _x(2, 3, 5, 5, seed=4)
    _check(lambda t: [b(p) for p in a(t).relu().chunk(2, 1)], [x], "small")
    _check(lambda t: w(a(t).relu()[:, 4:]), [x], "small")                  # a 3x3 padded conv of a channel slice
    _check(lambda t: w(a(t).relu()[:, 2:6, 1:4, :]), [x], "small")         # ... of a spatial and channel slice
    cm, _ = _check(lambda t: w(a(t).relu()[:, 4:]), [x], "small")
    assert not any(k.name.startswith("copy") for k in cm.qsched.sched.kernels)   # read in place, zero border
    cm, _ = _check(lambda t: w(a(t)[:, 4:, 1:4].relu()), [x], "small")          # ReLU of a slice: fused
    assert cm.qsched.sched.kernels[0].relu


def _movement_chain(y, t, branch, r):
    """One to three random views of a conv output ``y``: transposes, slices, flips, pads, a channel
    concatenation with (or a residual add of) ``branch(t)``."""
    ref_shape = y.shape
    for _ in range(r.integers(1, 4)):
        k = r.integers(0, 6)
        if k == 0:
            y = y.transpose(2, 3)
        elif k == 1:
            ax = int(r.integers(1, 4))
            if y.shape[ax] > 1:
                b = int(r.integers(0, y.shape[ax] - 1))
                y = y.shrink([(b, int(r.integers(b + 1, y.shape[ax] + 1))) if i == ax else None for i in range(4)])
        elif k == 2:
            y = y.flip(int(r.integers(1, 4)))
        elif k == 3:
            ax = int(r.integers(1, 4))
            y = y.pad([(int(r.integers(0, 3)), int(r.integers(0, 3))) if i == ax else None for i in range(4)])
        elif k == 4 and y.shape[2:] == ref_shape[2:]:
            y = tc.cat([y, branch(t).relu()], 1)
        elif k == 5 and y.shape == ref_shape:
            y = (y + branch(t)).relu()
    return y


@pytest.mark.parametrize("seed", range(12))
def test_random_views_between_convs(seed):
    """Random movement between two convolutions (the second one grouped or not): bit-exact or a
    ChipCompileError, never a wrong result."""
    rng = np.random.default_rng(seed)
    tc.manual_seed(seed)
    b, cin, hw = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(4, 9))
    cout = int(rng.integers(2, 9))
    c1, cb = nn.Conv2d(cin, cout, 3, padding=int(rng.integers(0, 2))), nn.Conv2d(cin, cout, 1)
    branch = lambda t: cb(t)[:, :, :c1(t).shape[2], :c1(t).shape[3]]  # noqa: E731

    def chain(t):
        return _movement_chain(c1(t).relu(), t, branch, np.random.default_rng(seed + 7))
    y0 = chain(tc.Tensor(np.zeros((b, cin, hw, hw), np.float32)))
    k2, s2, p2 = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 3))
    g2 = int(rng.choice([1, y0.shape[1]]))
    if min(y0.shape[2:]) + 2 * p2 < k2:
        k2 = 1
    c2 = nn.Conv2d(y0.shape[1], y0.shape[1] * 2 if g2 > 1 else 5, k2, stride=s2, padding=p2, groups=g2)
    _check(lambda t: c2(chain(t)), [_x(b, cin, hw, hw, seed=seed)], ["tiny", "small", "base"][seed % 3], rel=0.08)


def test_stack_copies_pieces_to_pad_their_new_axis():
    tc.manual_seed(6)
    l1, l2 = nn.Linear(5, 6), nn.Linear(4, 3)
    cm, _ = _check(lambda t: l2(tc.stack([l1(t)[..., :4], l1(t)[..., 2:]], 1)), [_x(3, 4, 5, seed=8)], "small")
    assert sum(k.name.startswith("copy") for k in cm.qsched.sched.kernels) == 2
    c1, c2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 1)
    _check(lambda t: tc.stack([c1(t), c2(t)], 1), [_x(2, 3, 5, 5, seed=9)], "base")


def test_reshapes_transposes_and_flips_between_kernels():
    tc.manual_seed(4)
    a = nn.Conv2d(3, 8, 3, padding=1)
    c1, c5 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 6, 1)
    x = _x(2, 3, 5, 5, seed=5)
    shuffle = lambda t: a(a(t).relu().reshape(2, 2, 4, 5, 5).transpose(1, 2).reshape(2, 8, 5, 5)[:, :3])  # noqa: E731
    _check(shuffle, [x], "small")
    _check(lambda t: c5(tc.cat([c1(t), c1(t).flip(3)], 2)), [x], "small")
    _check(lambda t: a(c1(t).flip(2)[:, :3]), [x], "small")
    _check(lambda t: c5(c1(t).relu().pad([None, None, (1, 0), (0, 2)])), [x], "small")
    _check(lambda t: a(t).permute(0, 2, 3, 1), [x], "small")
    _check(lambda t: c1(a(t).relu().transpose(2, 3)[:, 5:]), [x], "small")      # a padded conv of a transposed slice
    l1, l2, l3 = nn.Linear(5, 6), nn.Linear(4, 3), nn.Linear(20, 3)
    y = _x(3, 4, 5, seed=6)
    _check(lambda t: l2(l1(t).relu().transpose(1, 2)), [y], "small")
    _check(lambda t: l3(l1(t).relu().reshape(3, 6, 4)[:, :5].reshape(3, 20)), [y], "small")


# ---------------------------------------------------------------------------------------------- errors

def test_errors_name_the_users_source_line():
    w = tc.Tensor(np.ones((3, 2), np.float32))

    def model(a):
        y = a @ w
        return y.prod(1)
    line = model.__code__.co_firstlineno + 2                 # the line that calls prod
    with pytest.raises(ChipCompileError, match=rf"PROD .* at test_lower_conv\.py:{line}$"):
        tc.compile(model, [np.ones((2, 3), np.float32)], config="base")

    conv = nn.Conv2d(3, 4, 3, padding=1)

    class Gated(nn.Module):
        def forward(self, t):
            return conv(t) * t[:, :1]                          # an elementwise product of two activations
    line = Gated.forward.__code__.co_firstlineno + 1
    with pytest.raises(ChipCompileError, match=rf"at test_lower_conv\.py:{line}$"):
        tc.compile(Gated(), [_x(1, 3, 4, 4)], config="small")


def test_node_sites_survive_the_passes():
    x = tc.Tensor(np.ones((2, 3), np.float32))
    with recording_sites():
        y = (x.reshape(3, 2).reshape(2, 3) * 2.0).exp()      # the passes rebuild EXP on merged reshapes
    assert (x * 2.0).node.site is None                       # outside tracing no site is recorded
    line = test_node_sites_survive_the_passes.__code__.co_firstlineno + 3
    nodes = toposort(prepare([y.node]))
    assert not any(n.op is Ops.RESHAPE and n.src[0].op is Ops.RESHAPE for n in nodes)
    exp = [n for n in nodes if n.op is Ops.EXP]
    assert exp and exp[0].site[0] == __file__ and exp[0].site[1] == line
