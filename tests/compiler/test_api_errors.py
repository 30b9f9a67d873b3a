"""Directed tests of the public Python API's answers to bad arguments (issue 22): each mistake is one
``TetrachipError`` (its subclass says the kind) whose message names the input and the rule it breaks; never a
raw IndexError / ZeroDivisionError / OverflowError / numpy error, never a silently wrong number."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import tetrachip as tc
from compiler.frontend.shapes import MAX_NUMEL, ArgumentError, ShapeError
from isa.errors import TetrachipError
from runtime.device import DeviceError

X = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def tiny():
    """A Linear(4, 3) compiled for config "tiny", and a simulated chip of that config."""
    tc.manual_seed(0)
    return tc.compile(tc.nn.Linear(4, 3), [X], config="tiny"), tc.Device("sim", config="tiny")


# ------------------------------------------------------------------ tc.compile: example and calibration inputs
@pytest.mark.parametrize("example, words", [
    (np.zeros((0, 4), np.float32), ["'x'", "zero-size"]),          # a 0-row batch (was IndexError)
    (np.float32(1.0), ["'x'", "0-d"]),                              # a 0-d input (was IndexError)
    (np.full((2, 4), np.inf, np.float32), ["'x'", "inf"]),          # (was OverflowError for some models)
    (np.array([[1, np.nan, 2, 3]] * 2, np.float32), ["'x'", "NaN", "(0, 1)"]),   # (was compiled silently)
    (np.full((2, 4), "a"), ["'x'", "numbers"]),
])
def test_compile_refuses_bad_example(example, words):
    with pytest.raises(tc.ChipCompileError) as e:
        tc.compile(lambda x: (x @ tc.ones(4, 3)).relu(), [example], config="tiny")
    for w in words:
        assert w in str(e.value)


def test_compile_refuses_bad_calibration():
    model = tc.nn.Linear(4, 3)
    with pytest.raises(tc.ChipCompileError, match=r"calibration sample 1, input 'x': shape \(3, 5\), the example's "
                                                  r"is \(2, 4\)"):
        tc.compile(model, [X], config="tiny", calibration=[[X], [np.ones((3, 5), np.float32)]])
    with pytest.raises(tc.ChipCompileError, match=r"calibration sample 0, input 'x'.*NaN"):
        tc.compile(model, [X], config="tiny", calibration=[[np.full((2, 4), np.nan, np.float32)]])
    with pytest.raises(tc.ChipCompileError, match="calibration is empty"):
        tc.compile(model, [X], config="tiny", calibration=[])
    with pytest.raises(tc.ChipCompileError, match=r"inputs \['y'\], the model's are \['x'\]"):
        tc.compile(model, {"x": X}, config="tiny", calibration=[{"y": X}])


def test_compile_refuses_bad_model_and_options():
    with pytest.raises(tc.ChipCompileError, match="Module or a function of Tensors, got int"):
        tc.compile(5, [X], config="tiny")
    with pytest.raises(tc.ChipCompileError, match="does not take the 2 example input"):
        tc.compile(tc.nn.Linear(4, 3), [X, X], config="tiny")
    with pytest.raises(tc.ChipCompileError, match="unknown option.*bogus"):
        tc.compile(tc.nn.Linear(4, 3), [X], config="tiny", bogus=1)
    with pytest.raises(tc.ChipCompileError, match="dynamic='N': a dict"):
        tc.compile(tc.nn.Linear(4, 3), [X], config="tiny", dynamic="N")
    with pytest.raises(tc.ChipCompileError, match="per_channel='x': True or False"):
        tc.compile(tc.nn.Linear(4, 3), [X], config="tiny", per_channel="x")


# ------------------------------------------------------------------ chip runs: NaN/inf refused, numpy keeps NaN
def test_chip_run_refuses_nan_and_inf(tiny):
    cm, dev = tiny
    bad = X.copy()
    bad[1, 2] = np.nan
    with pytest.raises(TetrachipError, match=r"input 'x': holds 1 NaN or inf value\(s\), the first nan at index "
                                             r"\(1, 2\)"):
        dev.run(cm, bad)
    bad[1, 2] = -np.inf
    with pytest.raises(TetrachipError, match="input 'x'.*-inf"):
        dev.run(cm, bad)
    with pytest.raises(TetrachipError, match="input 'x': must be numbers"):
        dev.run(cm, np.full((2, 4), None))
    ok = dev.run(cm, X).outputs[0]                 # the device still runs good inputs, as the reference says
    np.testing.assert_array_equal(ok, cm.reference(X)[0])
    bad[1, 2] = np.nan                             # the integer reference quantizes as the chip does: refused too
    with pytest.raises(TetrachipError, match=r"input 'x': holds 1 NaN"):
        cm.reference(bad)
    assert np.isnan(cm.float_reference(bad)[0]).any()      # the float model keeps NaN, as numpy does


def test_numpy_float_run_keeps_nan():
    x = tc.Tensor.placeholder("x", (3,))
    out = (x * 2 + 1).numpy(feeds={"x": np.array([1.0, np.nan, np.inf], np.float32)})
    assert out[0] == 3 and np.isnan(out[1]) and out[2] == np.inf


def test_run_options_and_inputs(tiny):
    cm, dev = tiny
    with pytest.raises(TetrachipError, match="a compiled model .*not a int"):
        dev.backend.session(3, X)                  # was AttributeError
    with pytest.raises(DeviceError, match="does not take option.*bogus"):
        dev.run(cm, X, bogus=1)
    with pytest.raises(TetrachipError, match="trace='x'"):
        dev.run(cm, X, trace="x")
    with pytest.raises(TetrachipError, match="takes 1 input"):
        dev.run(cm, X, X)


# ------------------------------------------------------------------ Device
@pytest.mark.parametrize("name, kw, words", [
    ("bogus", {}, ["unknown device 'bogus'", "numpy"]),
    (None, {}, ["unknown device None"]),
    ("numpy", {"config": "tiny"}, ["Device('numpy') does not take", "config"]),
    ("sim", {"bogus": 1}, ["Device('sim') does not take", "bogus", "max_cycles"]),
    ("sim", {"config": "tiny", "max_cycles": -1}, ["max_cycles=-1"]),
    ("sim", {"config": "tiny", "chips": 0}, ["chips=0"]),
    ("sim", {"config": "tiny", "trace": "yes"}, ["trace='yes'"]),
    ("sim", {"config": "nope"}, ["nope"]),
])
def test_device_arguments(name, kw, words):
    with pytest.raises(TetrachipError) as e:
        tc.Device(name, **kw)
    for w in words:
        assert w in str(e.value)


def test_device_errors_keep_their_builtin_base():
    """Code that caught ValueError for an unknown device, or KeyError for a missing feed, still does."""
    with pytest.raises(ValueError):
        tc.Device("bogus")
    with pytest.raises(KeyError, match="'y' was not fed"):
        (tc.Tensor.placeholder("y", (2,)) * 2).numpy(feeds={})


# ------------------------------------------------------------------ tensor constructors and shapes
@pytest.mark.parametrize("call, kind, words", [
    (lambda: tc.zeros(-1), ShapeError, ["negative size -1"]),                 # was shape (1,)
    (lambda: tc.zeros(2, -3), ShapeError, ["negative size -3"]),              # was shape (2, -3)
    (lambda: tc.ones(2.5), ArgumentError, ["int", "2.5"]),
    (lambda: tc.ones(True), ArgumentError, ["bool"]),
    (lambda: tc.zeros(None), ArgumentError, ["None"]),
    (lambda: tc.zeros("3"), ArgumentError, ["str"]),
    (lambda: tc.randn(2**20, 2**20), ShapeError, [str(MAX_NUMEL)]),
    (lambda: tc.full((2,), 300, tc.int8), ShapeError, ["300", "int8"]),     # was wrapped to 44
    (lambda: tc.ones(2, dtype=tc.int8) + 300, ShapeError, ["300", "int8"]),
    (lambda: tc.tensor(2**40), ShapeError, ["int32"]),                        # was wrapped to 0
    (lambda: tc.tensor([np.nan], dtype=tc.int32), ShapeError, ["NaN"]),
    (lambda: tc.tensor(1e300), ShapeError, ["float32"]),                      # was inf
    (lambda: tc.tensor([[1, 2], [3]]), ArgumentError, ["rectangular"]),
    (lambda: tc.tensor("abc"), ArgumentError, ["numbers"]),
    (lambda: tc.arange(0, 5, 0), ShapeError, ["step"]),
    (lambda: tc.eye(-2), ShapeError, ["negative"]),
    (lambda: tc.randperm(()), ArgumentError, ["n must be an int"]),
    (lambda: tc.cat([]), ShapeError, ["at least one"]),
    (lambda: tc.stack([]), ShapeError, ["at least one"]),
    (lambda: tc.cat([2, -1]), ShapeError, ["0-d"]),                          # was IndexError
    (lambda: tc.Tensor.placeholder("a", (-2,)), ShapeError, ["negative"]),
])
def test_constructor_arguments(call, kind, words):
    with pytest.raises(kind) as e:
        call()
    assert isinstance(e.value, TetrachipError)
    for w in words:
        assert w in str(e.value)


def test_huge_shape_refused_before_allocating():
    tracemalloc.start()
    try:
        for f in (tc.randn, tc.rand, tc.zeros):
            with pytest.raises(ShapeError):
                f(1 << 15, 1 << 15)                 # 2**30 elements: 4 GiB of float32, 8 GiB drawn as float64
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize("call, kind, words", [
    (lambda t: t.reshape(2.0, 3), ArgumentError, ["float"]),
    (lambda t: t.reshape(None), ArgumentError, ["None"]),
    (lambda t: t.sum("a"), ArgumentError, ["dimension"]),
    (lambda t: t.sum(5), ShapeError, ["out of range"]),
    (lambda t: t.transpose(0.0, 1), ArgumentError, ["float"]),
    (lambda t: t[1.5], ShapeError, ["unsupported index"]),
    (lambda t: t[::0], ShapeError, ["step must not be 0"]),                 # was ValueError from slice.indices
    (lambda t: t[0:1.5], ShapeError, ["ints or None"]),
    (lambda t: t.split(0), ShapeError, ["split_size"]),                     # was ZeroDivisionError
    (lambda t: t.chunk(0), ShapeError, ["chunks"]),
    (lambda t: t.pad([(0, 2.5), None]), ArgumentError, ["float"]),          # was truncated to 2
    (lambda t: t.repeat(2**20, 2**20), ShapeError, [str(MAX_NUMEL)]),
    (lambda t: t.sum(keepdim=np.ones(3)), ArgumentError, ["keepdim"]),
    (lambda t: t.pow(2, np.ones(2)), ArgumentError, ["reverse"]),
    (lambda t: bool(t), ArgumentError, ["truth value"]),
    (lambda t: t.item(), ShapeError, ["6 elements"]),
    (lambda t: t.gelu(np.ones(2)), ShapeError, ["approximate"]),          # was numpy's ambiguous truth value
    (lambda t: t[:, :0].max(1), ShapeError, ["empty dimension"]),          # was numpy's error when computed
    (lambda t: tc.functional.mse_loss(t, t, reduction=np.ones(2)), ShapeError, ["reduction"]),
    (lambda t: tc.functional.conv2d(t, (3, 2)), ArgumentError, ["weight must be a Tensor"]),   # was AttributeError
    (lambda t: tc.functional.relu("x"), ArgumentError, ["relu", "Tensor"]),
    (lambda t: tc.functional.pad(t, 0.5), ShapeError, ["pads"]),            # was TypeError from len()
])
def test_tensor_method_arguments(call, kind, words):
    t = tc.arange(6).float().reshape(2, 3)
    with pytest.raises(kind) as e:
        call(t)
    for w in words:
        assert w in str(e.value)


def test_pow_with_a_non_finite_exponent_is_computed():
    """NaN or inf as a float exponent is a float run's business (it was ValueError / OverflowError from int())."""
    out = (tc.tensor([2.0]) ** float("inf")).numpy()
    assert out[0] == np.inf
    assert np.isnan((tc.tensor([2.0]) ** float("nan")).numpy()[0])


# ------------------------------------------------------------------ nn modules
@pytest.mark.parametrize("call, words", [
    (lambda: tc.nn.Linear(0, 4), ["in_features", ">= 1", "0"]),            # was ZeroDivisionError
    (lambda: tc.nn.Linear(8, 0), ["out_features"]),                        # tc.compile raised IndexError later
    (lambda: tc.nn.Linear(8.0, 4), ["in_features must be an int"]),
    (lambda: tc.nn.Conv2d(3, 4, 0), ["kernel_size"]),
    (lambda: tc.nn.Conv2d(3, 4, 3, groups=2), ["divisible by groups"]),
    (lambda: tc.nn.Conv2d(3, 4, 3, stride=0), ["stride"]),
    (lambda: tc.nn.LayerNorm(4, eps=-1), ["eps"]),
    (lambda: tc.nn.LayerNorm(()), ["normalized_shape"]),
    (lambda: tc.nn.Embedding(-1, 4), ["num_embeddings"]),
    (lambda: tc.nn.Dropout(1.5), ["p"]),
    (lambda: tc.nn.MaxPool2d(0), ["kernel_size"]),
    (lambda: tc.nn.MultiHeadAttention(6, 4), ["divisible"]),
    (lambda: tc.nn.MultiHeadAttention(4, 2)(tc.ones(2, 4)), ["(batch, length, embed_dim)"]),
    (lambda: tc.nn.Sequential(tc.nn.ReLU(), 3), ["layer 1"]),
    (lambda: tc.GPT(0, 4, 2, 1, 8), ["vocab"]),
    (lambda: tc.optim.SGD(tc.nn.Linear(2, 2).parameters(), lr=float("nan")), ["lr"]),
    (lambda: tc.ones(2).sum().backward(), ["does not require grad"]),
    (lambda: tc.nn.Linear(4, 3)(tc.ones(2, 4), 5), ["Linear", "positional"]),   # Python's TypeError, as one of ours
    (lambda: tc.nn.ReLU()("x"), ["ReLU", "must be a Tensor"]),                  # was AttributeError
    (lambda: tc.nn.BatchNorm2d(2)(tc.ones(())), ["BatchNorm2d", "(N, 2, ...)"]),  # was IndexError
])
def test_module_arguments(call, words):
    with pytest.raises(TetrachipError) as e:
        call()
    for w in words:
        assert w in str(e.value)


def test_layers_take_numpy_arrays():
    tc.manual_seed(0)
    lin = tc.nn.Linear(4, 3)
    np.testing.assert_array_equal(lin(X).numpy(), lin(tc.tensor(X)).numpy())


def test_shape_limit():
    """The shape limit is one constant; a shape right at it is accepted lazily (nothing allocated)."""
    assert tc.zeros(MAX_NUMEL).shape == (MAX_NUMEL,)
    with pytest.raises(ShapeError):
        tc.zeros(MAX_NUMEL + 1)
