"""LayerNorm, RMSNorm and softmax written as plain functions or modules, and elementwise GELU, SiLU,
sigmoid and tanh, compiled by the ordinary pipeline (``compiler.lower.norms``): on ``Device("sim")``
bit-exact to ``cm.reference`` (the ``intmath`` integer definitions; ``vlut`` tables), ``float_reference``
equal to the frontend's value, and the chip within 3% of the largest float output (int8 in and out:
two half steps of 1/127, plus the integer rsqrt / exp polynomials; measured at most 1.4%), 4% with
two int8 matmuls around the kernel (measured at most 2.9%)."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.frontend import functional as F
from compiler.frontend import nn
from compiler.lower.schedule import ChipCompileError
from test_lower_ops import BANKED

#: the chip's largest error, as a fraction of the largest float output
BOUND = 0.03


def _model(kind: str, d: int, rng):
    if kind == "softmax":
        return lambda t: F.softmax(t, -1)
    m = nn.LayerNorm(d) if kind == "layernorm" else nn.RMSNorm(d)
    m.weight = tc.Tensor(rng.uniform(0.5, 1.5, d).astype(np.float32))
    if kind == "layernorm":
        m.bias = tc.Tensor(rng.uniform(-0.5, 0.5, d).astype(np.float32))
    return m


def _run(model, x, cfg, n_norm=1, kind="norm", bound=BOUND):
    cm = tc.compile(model, [x], config=cfg)
    assert sum(k.kind == kind for k in cm.kernels) == n_norm
    res = tc.Device("sim", config=cfg).run(cm, {"x": x})
    got, ref = res.outputs[0], cm.reference({"x": x})[0]
    np.testing.assert_array_equal(got, ref)
    flt = cm.float_reference({"x": x})[0]
    front = model(tc.Tensor(x)).numpy()
    np.testing.assert_allclose(flt, front, rtol=1e-4, atol=1e-5)
    err = float(np.abs(got - front).max() / np.abs(front).max())
    assert err <= bound, err
    return cm, got, front


CASES = [("layernorm", 48, 10, "small"), ("layernorm", 100, 37, "base"), ("rmsnorm", 100, 37, "base"),
         ("softmax", 100, 37, "base"), ("softmax", 48, 21, "small"), ("layernorm", 384, 40, "base"),
         ("softmax", 384, 40, "base"), ("layernorm", 12, 9, "tiny"), ("softmax", 12, 9, "tiny"),
         ("rmsnorm", 16, 16, "small"), ("layernorm", 20, 11, "small")]


@pytest.mark.parametrize("kind,d,rows,cfg", CASES, ids=[f"{k}-{d}x{r}-{c}" for k, d, r, c in CASES])
def test_norm_rows(kind, d, rows, cfg):
    rng = np.random.default_rng(d + rows)
    x = (rng.standard_normal((rows, d)) * 1.5 + 0.2).astype(np.float32)
    _run(_model(kind, d, rng), x, cfg)


def test_many_row_groups():
    """More rows than one group's ACC: groups of tiles, the last one short."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((130, 100)) * 2).astype(np.float32)
    cm, _, _ = _run(_model("rmsnorm", 100, rng), x, "small")
    code = [k for k in cm.kernels if k.kind == "norm"][0]
    assert code.M == 130


def test_norms_between_matmuls():
    """Linear -> LayerNorm -> Linear -> softmax on a (B, T, d) input: GEMMs and VPU kernels in one program."""
    rng = np.random.default_rng(9)
    w1 = (rng.standard_normal((24, 40)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((40, 20)) * 0.3).astype(np.float32)
    g = rng.uniform(0.5, 1.5, 40).astype(np.float32)

    def model(t):
        h = F.layer_norm(t @ tc.Tensor(w1), 40, tc.Tensor(g))
        return (h @ tc.Tensor(w2)).softmax(-1)

    x = rng.standard_normal((2, 7, 24)).astype(np.float32)
    cm, _, _ = _run(model, x, "small", n_norm=2)
    assert [k.kind for k in cm.kernels] == ["gemm", "norm", "gemm", "norm"]


ELEMENTWISE = {"gelu": lambda t: t.gelu(), "gelu-tanh": lambda t: F.gelu(t, "tanh"), "silu": F.silu,
               "sigmoid": F.sigmoid, "tanh": F.tanh}


@pytest.mark.parametrize("name,cfg", [("gelu", "small"), ("gelu-tanh", "small"), ("silu", "base"),
                                      ("sigmoid", "tiny"), ("tanh", "small")])
def test_elementwise_lookup(name, cfg):
    """An elementwise composite alone and between two matmuls: one ``vlut`` kernel."""
    rng = np.random.default_rng(3)
    f = ELEMENTWISE[name]
    w1 = (rng.standard_normal((20, 30)) * 0.4).astype(np.float32)
    w2 = (rng.standard_normal((30, 12)) * 0.4).astype(np.float32)
    x = rng.standard_normal((2, 9, 20)).astype(np.float32)
    _run(f, x * 2, cfg, kind="lookup table")
    cm, _, _ = _run(lambda t: f(t @ tc.Tensor(w1)) @ tc.Tensor(w2), x, cfg, kind="lookup table", bound=0.04)
    assert [k.kind for k in cm.kernels] == ["gemm", "lookup table", "gemm"]


def test_unsupported_composites_are_named():
    x = np.ones((4, 16), np.float32)
    with pytest.raises(ChipCompileError, match="last axis"):
        tc.compile(lambda t: F.softmax(t, 0), [x], config="small")
    w_rows = tc.Tensor(np.arange(64, dtype=np.float32).reshape(4, 16))   # a weight that varies along rows
    with pytest.raises(ChipCompileError, match="last axis only"):
        tc.compile(lambda t: F.layer_norm(t, 16) * w_rows, [x], config="small")
    act = lambda t: F.layer_norm(t, 16) * t  # noqa: E731 (an activation is no weight)
    with pytest.raises(ChipCompileError, match="MUL"):
        tc.compile(act, [x], config="small")


@pytest.mark.parametrize("cfg", ["tiny", "small", "base"])
@pytest.mark.parametrize("kind", ["softmax", "layernorm", "transposed"])
def test_norm_over_rows_that_are_not_contiguous(kind, cfg):
    """A norm over the W axis of an image (stored NHWC) or of a transposed view: the view is copied
    row-major by an elementwise kernel first, then normalised. Bit-exact, within 5% of float."""
    tc.manual_seed(12)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    fn = {"softmax": lambda a: F.softmax(conv(a), -1), "layernorm": lambda a: F.layer_norm(conv(a), 6),
          "transposed": lambda a: F.softmax(conv(a).transpose(-1, -2), -1)}[kind]
    x = np.random.default_rng(13).standard_normal((2, 3, 6, 6)).astype(np.float32)
    cm, _, _ = _run(fn, x, cfg, bound=0.05)
    assert [k.kind for k in cm.kernels] == ["gemm", "elementwise", "norm"]


BLOCKS = [("layernorm", 64, 9), ("rmsnorm", 70, 9), ("layernorm", 62, 13), ("softmax", 64, 9),
          ("softmax", 30, 13), ("layernorm", 100, 5)]


@pytest.mark.parametrize("kind,d,rows", BLOCKS, ids=[f"{k}-{d}x{r}" for k, d, r in BLOCKS])
def test_rows_longer_than_acc_pass_through_it_in_blocks(kind, d, rows):
    """Rows whose int32 working arrays alone (a norm's centred values and squares, a softmax's inputs, exponents
    and exponentials: an ACC row of ``cols`` lanes per chunk of features and row of a tile) need more ACC than
    the chip has go through ACC a block of chunks at a time: bit exact, within the usual bound of float, and
    inside the ACC."""
    cfg = BANKED
    arrays = 3 if kind == "softmax" else 2
    assert arrays * -(-d // cfg.cols) * cfg.cols > cfg.acc_rows     # one tile's whole rows cannot be held
    rng = np.random.default_rng(d * rows)
    x = (rng.standard_normal((rows, d)) * 1.5 + 0.2).astype(np.float32)
    cm, _, _ = _run(_model(kind, d, rng), x, cfg)
    assert cm.plans["acc"].footprint <= cfg.acc_rows


@pytest.mark.parametrize("kind", ["layernorm", "softmax"])
def test_rows_longer_than_spm_pass_through_it_in_blocks(kind):
    """Rows whose int8 input and output (a row of ``cols`` lanes each per chunk of features) need more SPM than is
    free: blocks of chunks loaded into SPM and stored from it per pass, bit exact."""
    cfg = BANKED.replace(spm_rows=128, spm_bank_rows=32)
    d, rows = 72, 8
    assert 2 * d > cfg.spm_rows                                     # one tile's rows, in and out
    rng = np.random.default_rng(d * rows)
    x = (rng.standard_normal((rows, d)) * 1.5 + 0.2).astype(np.float32)
    cm, _, _ = _run(_model(kind, d, rng), x, cfg)
    assert cm.plans["spm"].footprint <= cfg.spm_rows


def test_masked_softmax_in_blocks():
    """A causal softmax over 48 keys on 64 ACC rows: the mask rows loaded a block of chunks at a time."""
    cfg = BANKED
    T = 48
    mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    x = np.random.default_rng(5).standard_normal((2, T, T)).astype(np.float32)
    _run(lambda t: F.softmax(t + tc.Tensor(mask), -1), x, cfg)


def test_groups_of_rows_run_as_a_loop():
    """The row groups of a norm run as one loop: the program does not grow with the rows (bit exact for each)."""
    rng = np.random.default_rng(8)
    model = _model("layernorm", 24, rng)
    sizes = []
    for rows in (64, 512):
        x = (rng.standard_normal((rows, 24)) * 2).astype(np.float32)
        cm, _, _ = _run(model, x, "tiny")
        sizes.append(len(cm.program))
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("kind,d", [("layernorm", 768), ("softmax", 512), ("layernorm", 150)])
def test_blocks_of_chunks_run_as_a_loop(kind, d):
    """Rows of hundreds of chunks through the banked memories' ACC and SPM (GPT-2's 768 features: 192 chunks
    of 4): the blocks between the first and the last run as a loop, so the code fits one page of imem."""
    cfg = BANKED
    rng = np.random.default_rng(d)
    x = (rng.standard_normal((8, d)) * 1.5).astype(np.float32)
    cm, _, _ = _run(_model(kind, d, rng), x, cfg)
    assert len(cm.pages or [cm.program]) == 1 and len(cm.program) <= cfg.imem_words
