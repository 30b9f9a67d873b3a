"""The public Python API's argument-tuple fuzzer (issue 22): ``COUNT * fuzz_scale`` calls of cheap entry points
of ``import tetrachip as tc`` (tensor constructors, movement/reduction/indexing ops on small tensors, ``nn``
constructors, ``tc.Device`` and its ``run``, a few ``tc.compile`` calls) with arguments drawn from a pool of edge
cases (0, -1, 2**40, NaN, inf, None, "", [], (), floats, bools, shapes that would exhaust memory).

Every call returns normally or raises a ``TetrachipError``; a plain ``TypeError`` only where Python's own binding
of the arguments to the signature fails (a wrong number or name of arguments). A returned small tensor is also
computed (``.numpy()``) and its shape checked against what was asked for. A failure names the seed, the call
number and the call, so ``TETRACHIP_FUZZ_SEED=seed`` replays the run."""
from __future__ import annotations

import functools
import inspect
import os
import random
import time
import warnings

import numpy as np

import tetrachip as tc
from isa.errors import TetrachipError

COUNT = 2000                   # argument tuples per run at fuzz_scale 1
COMPILE_SHARE = 0.01           # tc.compile calls are the dear ones: about 1 in 100
# a fixed seed in make test (CI sees the same calls every run); TETRACHIP_FUZZ_SEED explores others
SEED = int(os.environ.get("TETRACHIP_FUZZ_SEED", "1"))

NAN, INF = float("nan"), float("inf")
# values an argument is drawn from: sizes, edge numbers, wrong kinds, shapes (some far too large to allocate)
POOL = [0, 1, 2, 3, 4, -1, -3, 2**31, 2**40, -2**40, 2**70, 0.5, 2.0, -0.0, 1e39, NAN, INF, -INF, None, "", "x",
        "float32", "int8", [], (), [2, 3], (2, 3), (3, 2), (6,), (2, -1), (0, 3), (-1,), (2**40,), (2**20, 2**20),
        [[1, 2], [3]], [1.5, NAN], True, False, np.int64(2), np.float32(1.5), np.int8(-3), tc.float32, tc.int8,
        tc.int32, tc.bool, slice(None), slice(0, 2), slice(None, None, -1), slice(0, 3, 0), Ellipsis]
DEVICE_NAMES = ["numpy", "sim", "rtl-", "", None, 3, "NUMPY"]


def _small(rng: random.Random):
    """A fresh small tensor to call methods on (shapes (2, 3), (6,), (1, 2, 3), or an int8 one)."""
    return rng.choice([tc.arange(6).float().reshape(2, 3), tc.arange(6), tc.ones(1, 2, 3),
                          tc.tensor([[1, -2, 3]], dtype=tc.int8)])


def _draw(rng: random.Random):
    r = rng.random()
    if r < 0.08:
        return tc.arange(6).float().reshape(2, 3)
    if r < 0.12:
        return np.full((2, 3), rng.choice([1.0, NAN, INF]), np.float32)
    return rng.choice(POOL)


METHODS = ["reshape", "view", "transpose", "permute", "sum", "mean", "max", "min", "argmax", "matmul", "__getitem__",
           "expand", "pad", "flip", "split", "chunk", "repeat", "tile", "unsqueeze", "squeeze", "flatten", "cast",
           "add", "mul", "div", "sub", "pow", "clamp", "softmax", "var", "repeat_interleave", "item", "where",
           "maximum", "lt", "eq", "relu", "logsumexp", "shrink"]
CONSTRUCTORS = [tc.zeros, tc.ones, tc.full, tc.arange, tc.eye, tc.tensor, tc.randn, tc.rand, tc.randint, tc.uniform,
                tc.bernoulli, tc.randperm, tc.cat, tc.stack, tc.where, tc.hstack, tc.vstack]
MODULES = [tc.nn.Linear, tc.nn.Conv2d, tc.nn.ConvTranspose2d, tc.nn.LayerNorm, tc.nn.RMSNorm, tc.nn.Embedding,
           tc.nn.Dropout, tc.nn.BatchNorm2d, tc.nn.MaxPool2d, tc.nn.AvgPool2d, tc.nn.MultiHeadAttention,
           tc.nn.Flatten, tc.nn.Sequential, tc.nn.TransformerBlock]
FUNCTIONAL = ["conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "batch_norm", "layer_norm", "rms_norm",
              "softmax", "log_softmax", "dropout", "embedding", "one_hot", "mse_loss", "l1_loss", "nll_loss",
              "cross_entropy", "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits", "pad",
              "scaled_dot_product_attention", "relu", "elu", "leaky_relu", "gelu"]
LAYERS = [lambda: tc.nn.Linear(4, 3), lambda: tc.nn.Conv2d(2, 2, 3), lambda: tc.nn.LayerNorm(4),
          lambda: tc.nn.MaxPool2d(2), lambda: tc.nn.AvgPool2d(2), lambda: tc.nn.Embedding(5, 4),
          lambda: tc.nn.MultiHeadAttention(4, 2), tc.nn.Flatten, tc.nn.ReLU, lambda: tc.nn.Dropout(0.5),
          lambda: tc.nn.BatchNorm2d(2), lambda: tc.nn.RMSNorm(4), tc.nn.GELU]
_SHAPED = {tc.zeros, tc.ones, tc.randn, tc.rand}          # their result's shape is the shape asked for


class _Compiled:
    """A tiny model compiled once for config "tiny", and a simulated chip to run it on."""
    cm = dev = None

    @classmethod
    def get(cls):
        if cls.cm is None:
            tc.manual_seed(1)
            model = tc.nn.Linear(4, 3)
            cls.cm = tc.compile(model, [np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)],
                                config="tiny")
            cls.dev = tc.Device("sim", config="tiny")
        return cls.cm, cls.dev


@functools.cache
def _chip():
    return tc.Chip("tiny")


def _call(rng: random.Random):
    """One (function, args, kwargs, check) drawn from the table; ``check(result)`` tests an accepted result."""
    kind = rng.random()
    nargs = rng.choice([0, 1, 1, 2, 2, 3, 4])
    args = [_draw(rng) for _ in range(nargs)]
    kw = {}
    if kind < COMPILE_SHARE:
        model = rng.choice([tc.nn.Linear(4, 3), lambda x: x.relu(), 5, None, lambda x, y: x + y])
        ex = rng.choice([np.ones((2, 4), np.float32), np.zeros((0, 4), np.float32), np.float32(1),
                         np.full((2, 4), NAN, np.float32), np.full((2, 4), INF, np.float32), "x", None, [], (),
                         np.ones((2, 5), np.float32), [np.ones((2, 4)), np.ones((2, 4))], {"": np.ones((2, 4))}])
        kw = rng.choice([{}, {"config": "tiny"}, {"config": rng.choice(POOL)}, {"bogus": 1},
                         {"config": "tiny", "calibration": rng.choice([[], [np.ones((3, 5))], np.ones((2, 4)),
                                                                        [[np.full((2, 4), NAN)]], None, [None]])}])
        kw.setdefault("config", "tiny")
        return tc.compile, [model, ex], kw, None
    if kind < 0.06:
        cm, dev = _Compiled.get()
        x = rng.choice([np.ones((2, 4), np.float32), np.full((2, 4), NAN, np.float32), np.ones((3, 4), np.float32),
                        np.ones(4, np.float32), "x", None, np.full((2, 4), 1e30, np.float32), {"x": 1}, {"y": 1},
                        np.ones((2, 4), np.int64) * 2**40, []])
        return dev.run, [cm, x] + args[:rng.choice([0, 0, 1])], {}, None
    if kind < 0.09:                      # the simulator's host access (tc.Chip): addresses, counts, data
        chip = _chip()
        name = rng.choice(["read_dram", "write_dram", "read_spm", "write_spm", "read_acc", "write_acc"])
        if name.startswith("write") and rng.random() < 0.5:
            args = [_draw(rng), rng.choice([np.ones(4, np.int8), b"\x01\x02", np.full(4, 300), [1, 2, 3, 4],
                                            np.full(4, NAN), "abc", np.ones(5, np.int32), _draw(rng)])]
        return getattr(chip, name), args, {}, None
    if kind < 0.15:
        name = rng.choice(DEVICE_NAMES)
        kw = rng.choice([{}, {"config": rng.choice(["tiny", "nope", None, 3, "", [], "tiny-2"])},
                         {"chips": _draw(rng)}, {"max_cycles": _draw(rng)}, {"trace": _draw(rng)},
                         {"topology": _draw(rng)}, {"bogus": 1}])
        if rng.random() < 0.5 and name in ("numpy", "sim"):
            def run_device(name, kw=kw, args=args):
                d = tc.Device(name, **kw)
                return d.run(*args)
            return run_device, [name], {}, None
        return tc.Device, [name], kw, None
    if kind < 0.45:
        fn = rng.choice(CONSTRUCTORS)
        if fn in (tc.zeros, tc.ones, tc.randn, tc.rand) and rng.random() < 0.5:
            kw = {rng.choice(["dtype", "requires_grad", "bogus"]): _draw(rng)}
        check = None
        if fn in _SHAPED:
            want = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args

            def check(t, want=tuple(want)):
                assert t.shape == tuple(int(d) for d in want), f"shape {t.shape}, asked for {want}"
        return fn, args, kw, check
    if kind < 0.55:                      # a working layer called on drawn inputs
        layer = rng.choice(LAYERS)()
        x = rng.choice([tc.ones(2, 4), tc.ones(1, 2, 4, 4), tc.ones(2, 3, 4), tc.tensor([1, 7]), tc.ones(()),
                        np.ones((2, 4), np.float32)] + [_draw(rng)] * 3)
        return layer, [x] + args[:rng.choice([0, 0, 1])], {}, None
    if kind < 0.60:                      # tc.functional on a small tensor (or a drawn value) and drawn arguments
        fn = getattr(tc.functional, rng.choice(FUNCTIONAL))
        x = _small(rng) if rng.random() < 0.8 else _draw(rng)
        more = [rng.choice([_small(rng), tc.ones(1, 2, 4, 4), tc.tensor([0, 1]), _draw(rng)]) for _ in range(nargs)]
        return fn, [x] + more, {}, None
    if kind < 0.67:
        cls = rng.choice(MODULES)
        if rng.random() < 0.3:
            kw = {rng.choice(["bias", "eps", "stride", "padding", "groups", "p", "num_heads", "bogus"]): _draw(rng)}
        return cls, args, kw, None
    t = _small(rng)
    name = rng.choice(METHODS)
    if name == "where":
        return t.where, args, kw, None
    check = None
    if name in ("reshape", "view") and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        n = t.numel()

        def check(r, n=n):
            assert r.numel() == n, f"reshape changed the element count {n} -> {r.numel()}"
    return getattr(t, name), args, kw, check


def _binds(fn, args, kw) -> bool:
    """Whether Python can bind ``args``/``kw`` to ``fn``'s signature (a failing bind is Python's TypeError)."""
    try:
        inspect.signature(fn).bind(*args, **kw)
        return True
    except TypeError:
        return False
    except ValueError:                   # no signature to read: assume it binds
        return True


def _one(rng: random.Random, i: int) -> str | None:
    """Call number ``i``: None, or the description of an unexpected outcome."""
    fn, args, kw, check = _call(rng)
    desc = f"{getattr(fn, '__qualname__', fn)}(*{args!r}, **{kw!r})"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = fn(*args, **kw)
            if isinstance(out, tc.Tensor) and all(isinstance(d, int) for d in out.shape) and out.numel() <= 4096:
                out.numpy()
    except TetrachipError:
        return None
    except TypeError as e:
        if _binds(fn, args, kw):
            return f"call {i}: {desc} raised TypeError (the arguments bind to the signature): {e}"
        return None
    except Exception as e:   # noqa: BLE001 (the fuzzer's point: any other exception is a defect)
        return f"call {i}: {desc} raised {type(e).__name__}: {e}"
    if check is not None and isinstance(out, tc.Tensor):
        try:
            check(out)
        except AssertionError as e:
            return f"call {i}: {desc} returned a wrong result: {e}"
    return None


def test_fuzz_api_tuples(fuzz_scale):
    n = COUNT * fuzz_scale
    rng = random.Random(SEED)
    t0 = time.perf_counter()
    failures = []
    for i in range(n):
        f = _one(rng, i)
        if f is not None:
            failures.append(f)
    tc.manual_seed(0)
    wall = time.perf_counter() - t0
    print(f"API fuzzer: {n} argument tuples, seed {SEED}, {len(failures)} unexpected, {wall:.1f} s")
    assert not failures, (f"seed {SEED} (TETRACHIP_FUZZ_SEED={SEED} replays it): {len(failures)} of {n} calls "
                          f"failed; first ones:\n" + "\n".join(failures[:10]))


def test_pool_reaches_every_entry_point():
    """The table is exercised: every constructor, module and method name is drawn in one run's worth of seeds."""
    rng, seen = random.Random(1), set()
    for _ in range(COUNT):
        fn, *_ = _call(rng)
        seen.add(getattr(fn, "__name__", None))
    names = {f.__name__ for f in CONSTRUCTORS + MODULES} | {getattr(tc.Tensor, m).__name__ for m in METHODS} | \
        {"compile", "run", "Device", "run_device"} | set(FUNCTIONAL) | \
        {"read_dram", "write_dram", "read_spm", "write_spm", "read_acc", "write_acc"}
    assert names <= seen, f"never drawn: {sorted(names - seen)}"
