"""CNN and elementwise operations through the ordinary pipeline (``schedule.lift`` -> ``quantize`` ->
``pipeline`` -> ``emit``): BatchNorm folded into the convolution, elementwise functions of one
activation as VPU lookup-table kernels, clips folded into the requantization clamp, maximum/minimum
and residual adds, max/average/global pooling.

Every model runs on ``Device("sim")`` and must equal ``cm.reference`` bit for bit; the chip's
dequantized result must lie within ``TOL`` of the output range from the frontend's own float value
(int8: one step is 1/127 of a tensor's range; a GEMM, a table and a requantization each add about
half a step, so a few steps bound one or two layers)."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.schedule import Kernel
from isa.config import ChipConfig

F = tc.functional
#: the chip's error bound, as a fraction of the largest magnitude of the float output
TOL = 0.04


def _rng(seed):
    return np.random.default_rng(seed)


def _conv(cin, cout, seed, k=3, padding=1, stride=1, bias=True):
    tc.manual_seed(seed)
    return tc.nn.Conv2d(cin, cout, k, stride=stride, padding=padding, bias=bias)


def _bn(c, seed):
    """An eval-mode BatchNorm2d with non-trivial statistics and affine parameters."""
    r = _rng(seed)
    bn = tc.nn.BatchNorm2d(c)
    bn.running_mean = tc.Tensor(r.standard_normal(c).astype(np.float32) * 0.3)
    bn.running_var = tc.Tensor(r.uniform(0.5, 2.0, c).astype(np.float32))
    bn.weight = tc.Tensor(r.uniform(0.5, 1.5, c).astype(np.float32))
    bn.bias = tc.Tensor(r.standard_normal(c).astype(np.float32) * 0.2)
    return bn.eval()


def _check(model, x, cfg="tiny", tol=TOL):
    """Compile, run on the simulator: bit-exact to the reference, close to the frontend's value.
    Returns the compiled model and the error as a fraction of the output range."""
    cm = tc.compile(model, [x], config=cfg)
    res = tc.Device("sim", config=cfg).run(cm, {"x": x})
    np.testing.assert_array_equal(res.outputs[0], cm.reference({"x": x})[0])
    want = model(tc.Tensor(x)).numpy()
    np.testing.assert_allclose(cm.float_reference({"x": x})[0], want, rtol=1e-4, atol=1e-4)
    err = float(np.max(np.abs(res.outputs[0] - want))) / float(np.max(np.abs(want)))
    assert err <= tol, f"error {err:.4f} of the output range exceeds {tol}"
    return cm, err


def _kinds(cm) -> list[str]:
    """The kernels of a compiled model: "gemm", or the elementwise op ("sum", "max", "min", "lut")."""
    return ["gemm" if isinstance(k, Kernel) else k.op for k in cm.qsched.sched.kernels]


# ---------------------------------------------------------------------------------------------- BatchNorm

@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("cfg,n,cin,cout", [("tiny", 1, 3, 5), ("small", 2, 5, 17), ("base", 3, 17, 3)])
def test_batchnorm_folds_into_the_convolution(cfg, n, cin, cout, relu):
    conv, bn = _conv(cin, cout, 1, bias=False), _bn(cout, 2)

    def model(a):
        y = bn(conv(a))
        return y.relu() if relu else y
    x = _rng(3).standard_normal((n, cin, 5, 5)).astype(np.float32)
    cm, _ = _check(model, x, cfg)
    assert _kinds(cm) == ["gemm"]                       # one fused kernel: conv, BN scale and shift, ReLU
    (k,) = cm.qsched.sched.kernels
    assert k.bias is not None and k.relu == relu


def test_batchnorm_after_a_linear_layer_and_a_conv_with_bias():
    tc.manual_seed(4)
    lin, conv = tc.nn.Linear(6, 5), _conv(3, 5, 5)
    bn1, bn2 = _bn(5, 6), _bn(5, 7)
    x = _rng(8).standard_normal((4, 6)).astype(np.float32)
    cm, _ = _check(lambda a: bn1(lin(a).reshape(4, 5, 1, 1)), x, "small")
    assert _kinds(cm) == ["gemm"]
    r = bn1                                     # BatchNorm1d's spelling: (N, C), statistics along C
    cm, _ = _check(lambda a: F.batch_norm(lin(a), r.running_mean, r.running_var, r.weight, r.bias).relu(), x, "small")
    assert _kinds(cm) == ["gemm"]
    x = _rng(9).standard_normal((2, 3, 4, 4)).astype(np.float32)
    cm, _ = _check(lambda a: bn2(conv(a)).relu(), x, "small")
    assert _kinds(cm) == ["gemm"]


@pytest.mark.parametrize("cfg", ["tiny", "small", "base"])
def test_batchnorm_of_any_activation_is_a_diagonal_gemm(cfg):
    """BatchNorm after a residual add, on a graph input (pre-activation) and after max pooling: a
    GEMM with the per-channel scale on its diagonal and the shift as its bias (ReLU fused)."""
    c1, c2 = _conv(3, 5, 62), _conv(3, 5, 63, k=1, padding=0)
    b5, b3 = _bn(5, 64), _bn(3, 65)
    x = _rng(66).standard_normal((2, 3, 6, 6)).astype(np.float32)
    cm, _ = _check(lambda a: b5(c1(a) + c2(a)).relu(), x, cfg)
    assert _kinds(cm) == ["gemm", "gemm", "sum", "gemm"]
    k = cm.qsched.sched.kernels[3]
    assert k.K == k.N == 5 and k.relu and np.count_nonzero(k.weight) == 5
    cm, _ = _check(lambda a: c1(b3(a).relu()), x, cfg)
    assert _kinds(cm) == ["gemm", "gemm"]
    cm, _ = _check(lambda a: b5(F.max_pool2d(c1(a), 2)), x, cfg)
    assert _kinds(cm) == ["gemm", "max", "gemm"]


def test_per_element_constant_beyond_a_diagonal_gemm_is_refused():
    conv = _conv(3, 5, 67)
    x = np.ones((1, 3, 8, 8), np.float32)
    with pytest.raises(tc.ChipCompileError, match="varies per element"):
        tc.compile(lambda a: conv(a).relu() * tc.Tensor(_rng(68).standard_normal((1, 5, 8, 8))), [x], config="tiny")


@pytest.mark.parametrize("cfg", ["tiny", "small"])
def test_per_element_constant_added_is_a_tensor_the_host_writes(cfg):
    """A constant that varies per element, added to an activation (more values than a diagonal GEMM takes),
    is a tensor in DRAM written with the inputs: the add is an elementwise kernel of two tensors."""
    conv = _conv(3, 5, 69)
    c = tc.Tensor(_rng(70).standard_normal((1, 5, 8, 8)).astype(np.float32))
    x = _rng(71).standard_normal((1, 3, 8, 8)).astype(np.float32)
    cm, _ = _check(lambda a: conv(a).relu() + c, x, cfg)
    assert _kinds(cm) == ["gemm", "sum"]
    consts = [t for t in cm.qsched.sched.tensors if t.value is not None]
    assert len(consts) == 1 and consts[0].shape == (1, 5, 8, 8)


def test_position_embeddings_added_to_token_embeddings():
    """GPT's input: a lookup of the tokens plus a constant (T, d) table of positions, then a projection."""
    r = _rng(72)
    emb = tc.Tensor(r.standard_normal((40, 32)).astype(np.float32))
    pos = tc.Tensor(r.standard_normal((12, 32)).astype(np.float32))
    w = tc.Tensor(r.standard_normal((32, 16)).astype(np.float32) * 0.2)
    ids = r.integers(0, 40, (2, 12)).astype(np.int32)
    f = lambda i: (F.embedding(i, emb) + pos) @ w
    cm = tc.compile(f, [ids], config="small")
    res = tc.Device("sim", config="small").run(cm, ids)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(ids)[0])
    want = f(tc.Tensor(ids)).numpy()
    assert np.max(np.abs(res.outputs[0] - want)) <= 0.05 * np.max(np.abs(want))


# ---------------------------------------------------------------------------------------------- one-input functions

def _hardswish(a):
    return a * (a + 3).clamp(0, 6) * (1 / 6)


FUNCTIONS = {
    "sigmoid": lambda a: a.sigmoid(),
    "tanh": lambda a: a.tanh(),
    "gelu_erf": lambda a: a.gelu(),
    "gelu_tanh": lambda a: a.gelu("tanh"),
    "silu": lambda a: a.silu(),
    "elu": lambda a: a.elu(0.7),
    "leaky_relu": lambda a: a.leaky_relu(0.1),
    "hardswish": _hardswish,
    "softplus": lambda a: F.softplus(a),
    "affine": lambda a: a * 1.5 + 0.25,
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_of_one_activation_is_a_lookup_table(name):
    fn, conv = FUNCTIONS[name], _conv(3, 5, 10)
    x = _rng(11).standard_normal((2, 3, 5, 5)).astype(np.float32)
    cm, _ = _check(lambda a: fn(conv(a) * 2.0), x, "tiny")
    if name == "affine":                        # a scale and a shift of a conv fold into it
        assert _kinds(cm) == ["gemm"]
        return
    assert _kinds(cm) == ["gemm", "lut"]
    assert "vlutld" in cm.asm and "vlut " in cm.asm


@pytest.mark.parametrize("cfg,n", [("tiny", 4), ("small", 3)])
def test_lookup_table_over_several_tiles(cfg, n):
    """More rows than one SPM tile: full tiles in a scalar loop, then the rest (and a residual add's)."""
    conv = _conv(3, 5, 50)
    x = _rng(51).standard_normal((n, 3, 8, 8)).astype(np.float32)
    cm, _ = _check(lambda a: conv(a).silu(), x, cfg)
    assert cm.kernels[1].tiling.MT >= (3 if cfg == "tiny" else 1)
    cm, _ = _check(lambda a: (conv(a) + a[:, :1]).relu(), x, cfg)
    assert cm.kernels[1].tiling.MT >= 2


def test_lookup_table_is_the_quantized_function():
    """The integer reference's table, built here independently: entry j = quantize(sigmoid(int8(j) s_in), s_out)."""
    w = (_rng(12).standard_normal((6, 5)) * 0.5).astype(np.float32)
    x = _rng(13).standard_normal((4, 6)).astype(np.float32) * 2
    cm, _ = _check(lambda a: a.sigmoid() @ tc.Tensor(w), x, "tiny")
    q = cm.qsched
    assert _kinds(cm) == ["lut", "gemm"]
    k = q.sched.kernels[0]
    i = 0
    s_in, s_out = q.scales[k.srcs[0][0]], q.scales[k.out]
    v = np.arange(256).astype(np.uint8).view(np.int8).astype(np.float64) * s_in
    want = np.clip(np.rint(1 / (1 + np.exp(-v)) / s_out), -127, 127).astype(np.int8)
    np.testing.assert_array_equal(q.qkernels[i].table, want)


@pytest.mark.parametrize("cfg,c", [("tiny", 5), ("small", 17), ("base", 17)])
def test_function_of_an_input_and_between_layers(cfg, c):
    """A function of a graph input (no producing kernel) and one between two convolutions
    (its table's output is zero at 0: the padded reader's zero border stays exact)."""
    c1, c2 = _conv(5, c, 14), _conv(c, 3, 15)
    x = _rng(16).standard_normal((2, 5, 5, 5)).astype(np.float32)
    cm, _ = _check(lambda a: c2(c1(a.tanh()).silu()), x, cfg, tol=0.06)
    assert _kinds(cm) == ["lut", "gemm", "lut", "gemm"]


def test_function_with_f0_nonzero_of_a_padded_view_is_refused():
    conv = _conv(3, 5, 17)
    x = np.ones((1, 3, 4, 4), np.float32)
    with pytest.raises(tc.ChipCompileError, match=r"f\(0\) != 0"):
        tc.compile(lambda a: conv(a.pad([None, None, (1, 1), (1, 1)]).sigmoid()), [x], config="tiny")


@pytest.mark.parametrize("lo,hi", [(0, 2), (-1.0, 1.5), (None, 0.5)])
def test_clip_after_a_gemm_folds_into_the_requantization_clamp(lo, hi):
    conv = _conv(3, 5, 18)
    x = (_rng(19).standard_normal((2, 3, 5, 5)) * 3).astype(np.float32)
    model = lambda a: conv(a).clamp(lo, hi)     # noqa: E731
    cm, _ = _check(model, x, "tiny")
    assert _kinds(cm) == ["gemm"]
    want = model(tc.Tensor(x)).numpy()
    assert want.max() == hi                      # the clamp is active: the bound is reached
    q, s_out = cm.qsched.qkernels[0], cm.qsched.scales[cm.qsched.sched.kernels[0].out]
    assert q.hi == int(np.rint(hi / s_out))
    assert cm.reference({"x": x})[0].max() == np.float32(q.hi * s_out)     # the requantizer clamps there


def test_scaled_and_negated_inputs_fold_into_the_weights():
    conv = _conv(3, 5, 48)
    x = _rng(49).standard_normal((2, 3, 5, 5)).astype(np.float32)
    cm, _ = _check(lambda a: conv(a * 3 - a * 0.5).clamp(0, 6), x, "tiny")
    assert _kinds(cm) == ["gemm"]
    cm, _ = _check(lambda a: conv(-a).tanh(), x, "tiny")
    assert _kinds(cm) == ["gemm", "lut"]


def test_constant_added_after_a_relu_is_a_lookup_table():
    conv = _conv(3, 5, 53)
    x = _rng(54).standard_normal((2, 3, 4, 4)).astype(np.float32)
    cm, _ = _check(lambda a: conv(a).relu() + 0.5, x, "tiny")
    assert _kinds(cm) == ["gemm", "lut"] and cm.qsched.sched.kernels[0].relu


@pytest.mark.parametrize("cfg", ["tiny", "small"])
def test_clip_after_an_elementwise_kernel_folds_into_its_clamp(cfg):
    c1, c2 = _conv(3, 5, 57), _conv(3, 5, 58, k=1, padding=0)
    x = (_rng(59).standard_normal((2, 3, 4, 4)) * 2).astype(np.float32)
    cm, _ = _check(lambda a: (c1(a) + c2(a)).clamp(-0.5, 1.0), x, cfg)
    q = cm.qsched.qkernels[2]
    assert _kinds(cm) == ["gemm", "gemm", "sum"] and (q.lo, q.hi) != (-128, 127)    # the clamp is folded
    cm, _ = _check(lambda a: c1(a).maximum(c2(a)).clamp(None, 0.5), x, cfg)
    q = cm.qsched.qkernels[2]
    assert _kinds(cm) == ["gemm", "gemm", "max"] and (q.lo, q.hi) != (-128, 127)


def test_clip_of_a_value_read_twice_is_a_lookup_table():
    conv = _conv(3, 5, 20)
    x = (_rng(21).standard_normal((1, 3, 4, 4)) * 3).astype(np.float32)
    cm, _ = _check(lambda a: (lambda y: y.clamp(0, 2) + y)(conv(a)), x, "tiny")
    assert _kinds(cm) == ["gemm", "lut"]


# ---------------------------------------------------------------------------------------------- two activations

@pytest.mark.parametrize("op,kind", [("maximum", "max"), ("minimum", "min")])
@pytest.mark.parametrize("cfg", ["tiny", "small"])
def test_maximum_and_minimum_of_two_activations(op, kind, cfg):
    c1, c2 = _conv(3, 5, 22), _conv(3, 5, 23, k=1, padding=0)
    x = _rng(24).standard_normal((3, 3, 4, 4)).astype(np.float32)
    cm, _ = _check(lambda a: getattr(c1(a), op)(c2(a) * 0.5), x, cfg)
    assert _kinds(cm) == ["gemm", "gemm", kind]


@pytest.mark.parametrize("cfg", ["tiny", "small", "base"])
def test_residual_add_relu_between_any_producers(cfg):
    """conv + input, then ReLU; a table's output + a conv's, then ReLU; a difference."""
    c1, c2 = _conv(5, 5, 25), _conv(5, 5, 26)
    x = _rng(27).standard_normal((2, 5, 4, 4)).astype(np.float32)
    cm, _ = _check(lambda a: (c1(a) + a).relu(), x, cfg)
    assert _kinds(cm) == ["gemm", "sum"]
    cm, _ = _check(lambda a: (a.sigmoid() + c2(a)).relu() - a * 0.5, x, cfg)
    assert _kinds(cm).count("sum") >= 1 and "lut" in _kinds(cm)


# ---------------------------------------------------------------------------------------------- pooling

@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (3, 1, 1), (2, 1, 0)])
@pytest.mark.parametrize("cfg,n,c", [("tiny", 1, 3), ("small", 4, 5), ("base", 2, 17)])
def test_max_pool(k, s, p, cfg, n, c):
    conv = _conv(3, c, 28)
    x = _rng(29).standard_normal((n, 3, 7, 7)).astype(np.float32)
    cm, _ = _check(lambda a: F.max_pool2d(conv(a).relu(), k, s, p), x, cfg)
    assert _kinds(cm) == ["gemm", "max"]


#: tiny's array with memories of banks (docs/microarchitecture.md section 4): two units that write one bank race
BANKED = ChipConfig.preset("tiny").replace(name="tiny-banked", spm_rows=256, acc_rows=64, spm_bank_rows=64,
                                           acc_bank_rows=16)


def _kernel_ops(cm, name: str) -> list[str]:
    """The opcodes of kernel ``name`` in the listing (its ``; kernel`` comment to the next one)."""
    ops, on = [], False
    for line in cm.asm.splitlines():
        text = line.split(";")[0].strip()
        if line.startswith("; kernel"):
            on = line.startswith(f"; kernel {name}:")
        elif on and text and not text.endswith(":"):
            ops.append(text.split()[0])
    return ops


@pytest.mark.parametrize("k,s,p", [(3, 2, 1), (2, 2, 0)])
def test_max_pool_on_banked_memories_loops_over_blocks_of_tiles(k, s, p):
    """Banks of 64 SPM rows, beside the zero rows of the next convolution's padded input: the window's input
    tiles and its staging tile in banks of their own; M tiles shorter than the period of the rows' addresses
    (an image's output rows) run as two nested loops, not as one copy of the code per tile."""
    c1, c2 = _conv(3, 16, 30), _conv(16, 4, 31)
    x = _rng(32).standard_normal((2, 3, 16, 16)).astype(np.float32)
    cm, _ = _check(lambda a: c2(F.max_pool2d(c1(a).relu(), k, s, p)), x, BANKED)
    (mx,) = [i for i in cm.kernels if i.name.startswith("max")]
    assert mx.tiling.MT >= 16 and _kernel_ops(cm, mx.name).count("vreq") == 1     # one tile's code


def test_convolution_m_tiles_loop_over_images():
    """A padded convolution over a batch: its M tiles (image rows) are translations of each other within an
    image but not across images (the padding), so they run as two loops, tiles of an image and images, with
    one copy of the M tile's code (none unrolled), not one per tile."""
    c1, c2 = _conv(4, 8, 50), _conv(8, 4, 51)
    x = _rng(52).standard_normal((6, 4, 8, 8)).astype(np.float32)
    cm, _ = _check(lambda a: c2(c1(a).relu()), x, BANKED)
    k = cm.kernels[0]
    assert k.tiling.MT >= 6 and k.tiling.M % k.tiling.Mt == 0
    listing = cm.asm.split("; kernel ")[1]
    assert "blocks of" in listing and "; M tile: rows" not in listing


def test_convolution_m_tiles_of_half_an_image_row_are_cut_into_pages():
    """16 ACC rows leave M tiles of half an image row: tiles, rows and images would take three loops, more
    than a GEMM kernel's registers hold, so its M tiles stay unrolled, and a code longer than a page is cut
    between them (not looped over the first blocks only, with the rest unrolled in one uncuttable code)."""
    c1, c2 = _conv(4, 16, 53), _conv(16, 4, 55, k=1, padding=0)
    cfg = ChipConfig.preset("tiny").replace(name="tiny-acc16", spm_rows=256, acc_rows=16, imem_words=512)
    x = _rng(54).standard_normal((3, 4, 12, 12)).astype(np.float32)
    cm, _ = _check(lambda a: c2(c1(a).relu()), x, cfg)
    k = cm.kernels[0]
    assert 12 % k.tiling.Mt == 0 and k.tiling.Mt < 12 and len(cm.pages) > 1


def test_gemm_tilings_leave_the_zero_rows_free_where_the_plan_needs_them():
    """A CNN whose convolutions write padded tensors (SPM rows of zeros for their borders, reserved for the whole
    program) and whose last GEMM (300 rows) would tile all of tiny's 1024 SPM rows: the model is lowered again
    with the GEMM tilings leaving the zero rows free."""
    c1, b1, c2, b2 = _conv(1, 16, 40, bias=False), _bn(16, 41), _conv(16, 32, 42, bias=False), _bn(32, 43)
    tc.manual_seed(44)
    fc = tc.nn.Linear(128, 10)

    def model(a):
        y = F.max_pool2d(b1(c1(a)).relu(), 2)
        return fc(F.avg_pool2d(b2(c2(y)).relu(), 2).flatten(1))
    cfg = ChipConfig.preset("tiny").replace(name="tiny-1M", dram_bytes=1 << 20)
    cm, _ = _check(model, _rng(45).standard_normal((300, 1, 8, 8)).astype(np.float32), cfg)
    assert cm.plans["spm"].offsets.get("zero") is not None and cm.plans["spm"].footprint <= cfg.spm_rows


@pytest.mark.parametrize("cfg", ["tiny", "small"])
def test_global_max_pool_chains_max_kernels(cfg):
    conv = _conv(3, 5, 44)
    x = _rng(45).standard_normal((2, 3, 7, 7)).astype(np.float32)
    cm, _ = _check(lambda a: conv(a).max((2, 3)), x, cfg)
    assert _kinds(cm) == ["gemm"] + ["max"] * 6          # 49 positions: 9, then 8 more per kernel
    cm, _ = _check(lambda a: conv(a).min((2, 3)), x, cfg)
    assert _kinds(cm)[:2] == ["gemm", "max"]


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (2, 2, 1), (3, 1, 1)])
def test_max_pool_of_a_signed_input(k, s, p):
    """No ReLU before the pool: the -inf border is read as the window's nearest inside element
    (irregular reads: more DMA instructions than tiny's instruction memory holds)."""
    conv = _conv(3, 5, 30)
    x = _rng(31).standard_normal((2, 3, 6, 6)).astype(np.float32)
    cm, _ = _check(lambda a: F.max_pool2d(conv(a) - 1.0, k, s, p), x, "small")
    assert _kinds(cm) == ["gemm", "max"]
    cm, _ = _check(lambda a: F.max_pool2d(a * 2.0, k, s, p).sigmoid(), x, "small")    # of an input
    kinds = _kinds(cm)                           # sigmoid's NEG may turn the max into a min
    assert kinds[-2] in ("max", "min") and kinds[-1] == "lut"


def test_max_over_padding_only_is_refused():
    conv = _conv(3, 5, 52)
    x = np.ones((1, 3, 4, 4), np.float32)
    with pytest.raises(tc.ChipCompileError, match="padding only"):
        tc.compile(lambda a: F.max_pool2d(conv(a).relu().pad([None, None, (2, 2), (2, 2)], float("-inf")), 2),
                   [x], config="tiny")


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (3, 1, 0)])
@pytest.mark.parametrize("cfg,n,c", [("tiny", 2, 3), ("small", 1, 17), ("base", 4, 5)])
def test_avg_pool(k, s, p, cfg, n, c):
    conv = _conv(3, c, 32)
    x = _rng(33).standard_normal((n, 3, 7, 7)).astype(np.float32)
    cm, _ = _check(lambda a: F.avg_pool2d(conv(a), k, s, p), x, cfg)
    assert _kinds(cm) == ["gemm", "sum"]        # the window mean: one VPU sum over the window views


@pytest.mark.parametrize("cfg", ["tiny", "small"])
def test_avg_pool_not_counting_the_padding(cfg):
    """The window sum is a VPU sum; the divisor varies along the output's H and W: a diagonal GEMM over
    those 25 positions."""
    conv = _conv(3, 5, 34)
    x = _rng(35).standard_normal((2, 3, 5, 5)).astype(np.float32)
    cm, _ = _check(lambda a: F.avg_pool2d(conv(a), 3, 1, 1, count_include_pad=False), x, cfg)
    assert _kinds(cm) == ["gemm", "sum", "gemm"] and cm.qsched.sched.kernels[2].N == 25


@pytest.mark.parametrize("cfg,n,c,hw", [("tiny", 1, 3, 7), ("small", 3, 17, 7), ("base", 2, 5, 9)])
def test_global_average_pool_then_linear(cfg, n, c, hw):
    """ResNet's head: conv, ReLU, mean over H and W (49 and 81 positions), a linear classifier."""
    conv = _conv(3, c, 35)
    tc.manual_seed(36)
    fc = tc.nn.Linear(c, 4)
    x = _rng(37).standard_normal((n, 3, hw, hw)).astype(np.float32)
    cm, _ = _check(lambda a: fc(conv(a).relu().mean((2, 3))), x, cfg)
    assert _kinds(cm) == ["gemm", "gemm", "gemm"]
    assert cm.qsched.sched.kernels[1].K == hw * hw


def test_small_cnn_block():
    """conv-BN-ReLU, max pool, conv-BN, residual add, ReLU, SiLU, global average pool, linear."""
    c1, c2 = _conv(3, 5, 38, bias=False), _conv(5, 5, 39, bias=False)
    b1, b2 = _bn(5, 40), _bn(5, 41)
    tc.manual_seed(42)
    fc = tc.nn.Linear(5, 3)

    def model(a):
        y = F.max_pool2d(b1(c1(a)).relu(), 3, 2, 1)
        y = (b2(c2(y)) + y).relu().silu()
        return fc(y.mean((2, 3)))
    x = _rng(43).standard_normal((2, 3, 8, 8)).astype(np.float32)
    cm, _ = _check(model, x, "small", tol=0.06)
    assert _kinds(cm) == ["gemm", "max", "gemm", "sum", "lut", "gemm", "gemm"]


@pytest.mark.parametrize("n", [1, 3])
def test_symbolic_batch(n):
    """Lookup-table, max and pooling kernels with a symbolic batch (rows never straddle two entries)."""
    conv = _conv(3, 5, 46)
    x = _rng(47).standard_normal((4, 3, 6, 6)).astype(np.float32)
    model = lambda a: F.max_pool2d(conv(a).sigmoid(), 2).mean((2, 3))    # noqa: E731
    cm = tc.compile(model, [x], config="small", dynamic={"N": 4})
    res = tc.Device("sim", config="small").run(cm, {"x": x[:n]})
    np.testing.assert_array_equal(res.outputs[0], cm.reference({"x": x[:n]})[0])
    want = model(tc.Tensor(x[:n])).numpy()
    assert np.max(np.abs(res.outputs[0] - want)) <= TOL * np.max(np.abs(want))


def test_compiled_model_with_tables_pickles():
    """compiler.lower.search caches compiled models with pickle: the chains' functions are plain data."""
    import pickle
    conv = _conv(3, 5, 55)
    x = _rng(56).standard_normal((1, 3, 4, 4)).astype(np.float32)
    cm, _ = _check(lambda a: (conv(a).gelu() * 2).sigmoid(), x, "tiny")
    cm2 = pickle.loads(pickle.dumps(cm))
    np.testing.assert_array_equal(cm2.reference({"x": x})[0], cm.reference({"x": x})[0])
    np.testing.assert_array_equal(cm2.float_reference({"x": x})[0], cm.float_reference({"x": x})[0])


def test_rows_longer_than_the_lanes_split_into_full_rows_and_a_remainder():
    """17 channels on base's 16 lanes: max pooling runs rows of 16 lanes, then the 17th channel of
    every pixel as a second part; a table is loaded once for both parts."""
    conv = _conv(3, 17, 60)
    x = _rng(61).standard_normal((2, 3, 6, 6)).astype(np.float32)
    cm, _ = _check(lambda a: F.max_pool2d(conv(a), 2), x, "base")
    assert cm.kernels[1].N == 16 and cm.kernels[1].M == 2 * 3 * 3 * 2      # 18 pixels: 16 lanes + 1
    cm, _ = _check(lambda a: conv(a).tanh(), x, "base")    # 1224 contiguous values: 76 rows of 16, one of 8
    assert _kinds(cm) == ["gemm", "lut"] and cm.kernels[1].M == 77
    assert cm.asm.count("vlutld") == 1 and cm.asm.count("vlut ") == 2
