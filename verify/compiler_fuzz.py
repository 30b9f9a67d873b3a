"""Random models through ``tc.compile`` on the simulated chip (a compiler fuzzer), seeded and replayable.

Not to be confused with ``verify.fuzz`` (random ISA programs, RTL against the simulator): this module
writes random *models* with the public frontend (``compiler.frontend``: ``nn``, ``functional``, ``Tensor``),
compiles each with ``compiler.lower.dispatch.compile_model`` (``tc.compile``) for a small preset and runs
it on a device (``Device("sim")``, passed in by the caller: ``verify`` does not import ``runtime``).

``generate(seed)`` returns a ``Graph``: an input shape, a config name and a list of ``Layer`` s, each an op
with its arguments and the indices of the values it reads (0 is the input, ``i + 1`` the output of layer
``i``), so the graph is a DAG: fan-out of one value to several consumers, residual adds, concatenation.
Ops on images (N, C, H, W): ``conv`` (kernel 1..5, stride 1..3, padding 0..3, dilation 1..2, groups
dividing the channels, depthwise included), ``bn`` (BatchNorm2d in eval mode), ``maxpool``, ``avgpool``,
``gap`` (global average pooling), ``flatten``; on rows (B, F): ``linear`` (with bias), ``matmul`` (no
bias), ``bmm`` (``x @ y.T`` of two activations); on both: the activations of ``ACTS``, ``layernorm`` /
``rmsnorm`` / ``softmax`` over the last axis, ``add``, ``mul`` (elementwise, of two activations),
``cat``. Sizes are small, often odd or prime, batch 1..5; weights are float32 drawn from a generator
seeded by the layer (``Layer.args["w"]``). The model returns every value nothing reads.
``repr(graph)`` is Python that rebuilds it (``Graph``, ``Layer``), and ``generate(seed)`` rebuilds it
from its seed.

``check(graph, device)`` compiles and runs one graph; the outcome is one of

* ``ok``: the chip's outputs equal ``cm.reference`` bit for bit, ``cm.float_reference`` equals the
  frontend's own value (numpy device) to float32 rounding, and the chip is within the quantization
  bound below of that float value, element by element;
* ``refused``: ``ChipCompileError``, counted by its first words (the primitive op it names) and by the
  graph's layer that brought it (the first prefix of the graph refused the same way);
* ``failure``: anything else: another exception, a mismatch, a bound violation.

**The quantization bound.** Alongside the float value ``f`` of every value of the graph the fuzzer
carries an elementwise bound ``e`` on the chip's error, propagated through the graph in float64 from
first-order error analysis. With ``u(v) = max|f_v| / 127`` (the int8 step of a value calibrated on
the same input, as ``compile`` does with the example input) and ``s_w`` each output channel's weight
step (``max|W[n]| / 127``):

* input: ``e = u/2`` (rounding to int8);
* ``conv`` / ``linear`` / ``matmul``: ``e = |W| * e_in + s_w/2 * (|f_in| + e_in) + u_in s_w / 2``
  (input error through the weights, weight rounding, bias rounding), i.e. the same layer applied to
  the error arrays;
* ``bn`` (a per-channel affine ``a x + c``, which the compiler may fold into a neighbouring layer):
  ``e = |a| e_in + s_a/2 (|f_in| + e_in)`` with ``s_a = max|a| / 127``;
* activations: ``e = L e_in`` with the function's Lipschitz constant ``L`` (``ACTS``);
* max pooling: the window's largest ``e``; average pooling: the window's mean ``e``; ``add``: the sum;
  ``mul`` / ``bmm`` of ``a`` and ``b``: ``|a| e_b + e_a |b| + e_a e_b`` (summed over the contraction);
  ``cat``, ``flatten``: the pieces' ``e``;
* ``layernorm`` / ``rmsnorm``: ``|gamma| 2 e_row (1 + |x_hat|) / sigma`` (``e_row`` the row's largest
  input error, ``sigma`` its standard deviation / RMS), capped at ``2 |gamma| sqrt(F)`` (the output's range);
  ``softmax``: ``p (exp(2 e_row) - 1)``;

and every op's own output adds ``OWN_UNITS[op]`` steps of its output, ``u(out)`` (rounding plus the
error of the chip's approximation of the function: a requantization multiplier, a lookup table,
an integer reciprocal); its terms are scaled by ``REL_SLACK`` (the relative error of requantization
multipliers). The bound thus grows with depth and with the weights' magnitudes, stays tight for a
plain chain of GEMMs (a few steps of the output), and is orders of magnitude below the size of an
indexing, layout or bias error. The check is ``|chip - f| <= e`` for every output element.

``shrink(graph, device, outcome)`` reduces a failing graph (drop layers, smaller batch and sizes,
simpler layer arguments) while it still fails the same way; ``run_fuzz`` runs a seed range and
returns the counts, refusals by op and failures (seed, kind, message, the shrunk graph's text).
"""
from __future__ import annotations

import math
import re
import time
import traceback
from dataclasses import dataclass, field, replace

import numpy as np

from compiler.frontend import functional as F
from compiler.frontend.tensor import Tensor, cat
from compiler.lower.dispatch import compile_model
from compiler.lower.schedule import ChipCompileError

CONFIGS = ("tiny", "small")
#: activation -> (frontend function, numpy function, Lipschitz constant)
ACTS = {
    "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0), 1.0),
    "relu6": (lambda t: t.clamp(0, 6), lambda a: np.clip(a, 0, 6), 1.0),
    "sigmoid": (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), 0.25),
    "tanh": (lambda t: t.tanh(), np.tanh, 1.0),
    "gelu": (lambda t: t.gelu(), None, 1.13),
    "silu": (lambda t: t.silu(), lambda a: a / (1 + np.exp(-a)), 1.1),
    "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda a: np.where(a > 0, a, 0.1 * a), 1.0),
}
#: steps of the output's int8 scale each op may add by itself (rounding and approximation)
OWN_UNITS = {"input": 0.5, "conv": 1.0, "linear": 1.0, "matmul": 1.0, "bn": 1.0, "flatten": 0.0,
             "maxpool": 1.0, "avgpool": 1.0, "gap": 1.0, "add": 1.0, "cat": 1.0, "mul": 1.0, "bmm": 1.0,
             "layernorm": 4.0, "rmsnorm": 4.0, "softmax": 4.0, **{a: 1.5 for a in ACTS}}
#: relative slack of every term (requantization multipliers are int16 fractions)
REL_SLACK = 1.02
#: no value of a generated graph reaches this magnitude (float32 stays far from overflow)
MAX_VALUE = 1e3
SMALL = (1, 2, 3, 4, 5, 7)          # channels
SIDES = (3, 4, 5, 6, 7, 8, 9, 11)   # image sides
FEATS = (1, 2, 3, 5, 7, 8, 11, 13, 16, 17)


# ---------------------------------------------------------------------------------------------- the graph

@dataclass
class Layer:
    op: str
    src: tuple
    args: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Layer({self.op!r}, {self.src!r}, {self.args!r})"


@dataclass
class Graph:
    seed: int
    config: str
    shape: tuple                  # the input's shape
    layers: list

    def __repr__(self) -> str:
        body = "".join(f"\n    {ly!r}," for ly in self.layers)
        return f"Graph({self.seed}, {self.config!r}, {self.shape!r}, [{body}\n])"

    def shapes(self) -> list[tuple]:
        """The shape of every value (input first); ValueError when a layer does not fit its inputs."""
        out = [tuple(self.shape)]
        for ly in self.layers:
            if any(s < 0 or s >= len(out) for s in ly.src):
                raise ValueError(f"{ly.op} reads a value not computed yet")
            out.append(_shape(ly, [out[s] for s in ly.src]))
        return out

    def outputs(self) -> list[int]:
        """The values nothing reads (the last layer's always among them)."""
        read = {s for ly in self.layers for s in ly.src}
        n = len(self.layers)
        return [i for i in range(1, n + 1) if i not in read] or [n]

    def ops(self) -> list[str]:
        return [ly.op for ly in self.layers]


def _out_side(i: int, k: int, s: int, p: int, d: int) -> int:
    return (i + 2 * p - d * (k - 1) - 1) // s + 1


def _shape(ly: Layer, ins: list[tuple]) -> tuple:  # noqa: C901 (one table of cases)
    a, x = ly.args, ins[0]
    op = ly.op

    def need(cond, why):
        if not cond:
            raise ValueError(f"{op}: {why} (inputs {ins})")
    if op in ("conv", "bn", "maxpool", "avgpool", "gap", "flatten"):
        need(len(x) == 4, "needs an image")
    if op in ("linear", "matmul"):
        need(len(x) == 2, "needs rows")
    if op == "conv":
        n, c, h, w = x
        g = a["groups"]
        need(c % g == 0 and a["cout"] % g == 0, "groups must divide the channels")
        oh, ow = (_out_side(v, a["k"], a["stride"], a["pad"], a["dil"]) for v in (h, w))
        need(oh >= 1 and ow >= 1 and a["pad"] < a["k"] * a["dil"], "window larger than the input")
        return (n, a["cout"], oh, ow)
    if op in ("maxpool", "avgpool"):
        n, c, h, w = x
        k, s, p = a["k"], a["stride"], a["pad"]
        need(2 * p <= k, "padding at most half the window")
        oh, ow = (_out_side(v, k, s, p, 1) for v in (h, w))
        need(oh >= 1 and ow >= 1, "window larger than the input")
        return (n, c, oh, ow)
    if op == "gap":
        return x[:2]
    if op == "flatten":
        return (x[0], math.prod(x[1:]))
    if op in ("linear", "matmul"):
        return (x[0], a["out"])
    if op in ("add", "mul"):
        need(len(ins) == 2 and ins[0] == ins[1], "operands of one shape")
        return x
    if op == "bmm":
        need(len(ins) == 2 and len(x) == len(ins[1]) == 2 and x[1] == ins[1][1], "rows of one width")
        return (x[0], ins[1][0])
    if op == "cat":
        need(len(ins) == 2 and len(ins[0]) == len(ins[1]) and
             all(u == v for i, (u, v) in enumerate(zip(*ins)) if i != 1), "operands equal but on axis 1")
        return x[:1] + (ins[0][1] + ins[1][1],) + x[2:]
    if op in ACTS or op in ("bn", "layernorm", "rmsnorm", "softmax"):
        return x
    raise ValueError(f"unknown op {op!r}")


# ---------------------------------------------------------------------------------------------- weights

def _weights(ly: Layer, ins: list[tuple]) -> dict:
    """The layer's float32 constants, drawn from its own seed (so shrinking keeps them stable)."""
    rng = np.random.default_rng(ly.args.get("w", 0))
    a, x = ly.args, ins[0]
    f32 = lambda v: np.asarray(v, np.float32)
    if ly.op == "conv":
        cpg = x[1] // a["groups"]
        bound = 1 / math.sqrt(cpg * a["k"] ** 2)
        return {"W": f32(rng.uniform(-bound, bound, (a["cout"], cpg, a["k"], a["k"]))) * 1.7,
                "b": f32(rng.uniform(-bound, bound, a["cout"])) if a["bias"] else None}
    if ly.op in ("linear", "matmul"):
        bound = 1.7 / math.sqrt(x[1])
        return {"W": f32(rng.uniform(-bound, bound, (a["out"], x[1]))),
                "b": f32(rng.uniform(-bound, bound, a["out"])) if ly.op == "linear" else None}
    if ly.op == "bn":
        c = x[1]
        return {"mean": f32(rng.normal(0, 0.3, c)), "var": f32(rng.uniform(0.5, 2.0, c)),
                "gamma": f32(rng.uniform(0.5, 1.5, c)), "beta": f32(rng.normal(0, 0.3, c))}
    if ly.op in ("layernorm", "rmsnorm"):
        f = x[-1]
        return {"gamma": f32(rng.uniform(0.5, 1.5, f)), "beta": f32(rng.normal(0, 0.3, f))}
    return {}


# ---------------------------------------------------------------------------------------------- the model

def _layer(ly: Layer, xs: list[Tensor], w: dict) -> Tensor:  # noqa: C901 (one table of cases)
    """One layer written with the public frontend."""
    a, x, op = ly.args, xs[0], ly.op
    T = lambda v: None if v is None else Tensor(v)
    if op == "conv":
        return F.conv2d(x, T(w["W"]), T(w["b"]), a["stride"], a["pad"], a["dil"], a["groups"])
    if op == "linear":
        return x.linear(T(w["W"]), T(w["b"]))
    if op == "matmul":
        return x @ Tensor(np.ascontiguousarray(w["W"].T))
    if op == "bn":
        return F.batch_norm(x, T(w["mean"]), T(w["var"]), T(w["gamma"]), T(w["beta"]), training=False)
    if op == "maxpool":
        return F.max_pool2d(x, a["k"], a["stride"], a["pad"])
    if op == "avgpool":
        return F.avg_pool2d(x, a["k"], a["stride"], a["pad"])
    if op == "gap":
        return x.mean((2, 3))
    if op == "flatten":
        return x.flatten(1)
    if op == "add":
        return x + xs[1]
    if op == "mul":
        return x * xs[1]
    if op == "bmm":
        return x @ xs[1].transpose(0, 1)
    if op == "cat":
        return cat([x, xs[1]], 1)
    if op == "layernorm":
        return F.layer_norm(x, x.shape[-1], T(w["gamma"]), T(w["beta"]))
    if op == "rmsnorm":
        return F.rms_norm(x, x.shape[-1], T(w["gamma"]))
    if op == "softmax":
        return F.softmax(x, -1)
    return ACTS[op][0](x)


def model_of(g: Graph):
    """The graph as a function of one Tensor, for ``tc.compile``; returns one Tensor or a tuple."""
    shapes = g.shapes()
    ws = [_weights(ly, [shapes[s] for s in ly.src]) for ly in g.layers]
    outs = g.outputs()

    def model(x):
        vals = [x]
        for ly, w in zip(g.layers, ws):
            vals.append(_layer(ly, [vals[s] for s in ly.src], w))
        res = tuple(vals[i] for i in outs)
        return res[0] if len(res) == 1 else res
    return model


def input_of(g: Graph) -> np.ndarray:
    return np.random.default_rng([g.seed, 1]).standard_normal(g.shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------- the bound

def _conv_np(x: np.ndarray, w: np.ndarray, a: dict) -> np.ndarray:
    """float64 conv2d (no bias) by an explicit window sum: an evaluation independent of the frontend."""
    n, c, h, wd = x.shape
    k, s, p, d, g = a["k"], a["stride"], a["pad"], a["dil"], a["groups"]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = _out_side(h, k, s, p, d), _out_side(wd, k, s, p, d)
    cout, cpg = w.shape[:2]
    opg = cout // g
    out = np.zeros((n, cout, oh, ow))
    for i in range(k):
        for j in range(k):
            win = xp[:, :, i * d: i * d + s * (oh - 1) + 1: s, j * d: j * d + s * (ow - 1) + 1: s]
            win = win.reshape(n, g, cpg, oh, ow)
            wk = w[:, :, i, j].reshape(g, opg, cpg)
            out += np.einsum("ngchw,goc->ngohw", win, wk).reshape(n, cout, oh, ow)
    return out


def _pool_np(x: np.ndarray, a: dict, how: str) -> np.ndarray:
    k, s, p = a["k"], a["stride"], a["pad"]
    fill = -np.inf if how == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    oh, ow = _out_side(x.shape[2], k, s, p, 1), _out_side(x.shape[3], k, s, p, 1)
    wins = [xp[:, :, i: i + s * (oh - 1) + 1: s, j: j + s * (ow - 1) + 1: s] for i in range(k) for j in range(k)]
    return np.max(wins, axis=0) if how == "max" else np.mean(wins, axis=0)


def _norm_np(x: np.ndarray, rms: bool, eps: float) -> tuple[np.ndarray, np.ndarray]:
    c = x if rms else x - x.mean(-1, keepdims=True)
    sig = np.sqrt((c * c).mean(-1, keepdims=True) + eps)
    return c / sig, sig


def _erf(v: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(v)


def _step(ly: Layer, fs: list, es: list, w: dict) -> tuple[np.ndarray, np.ndarray]:  # noqa: C901
    """float64 value and propagated error bound (before the op's own rounding) of one layer."""
    a, f, e, op = ly.args, fs[0], es[0], ly.op
    if op in ("conv", "linear", "matmul"):
        W = w["W"].astype(np.float64)
        s_w = np.abs(W).reshape(W.shape[0], -1).max(1) / 127
        s_in = np.abs(f).max() / 127
        if op == "conv":
            lin = lambda v, m: _conv_np(v, m, a)
            per = lambda v: v.reshape(1, -1, 1, 1)
        else:
            lin = lambda v, m: v @ m.T
            per = lambda v: v.reshape(1, -1)
        val = lin(f, W) + (per(w["b"].astype(np.float64)) if w.get("b") is not None else 0)
        err = lin(e, np.abs(W)) + lin(np.abs(f) + e, np.ones_like(W)) * per(s_w / 2) + per(s_in * s_w / 2)
        return val, err
    if op == "bn":
        sc = w["gamma"].astype(np.float64) / np.sqrt(w["var"].astype(np.float64) + 1e-5)
        per = lambda v: v.reshape(1, -1, 1, 1)
        val = (f - per(w["mean"])) * per(sc) + per(w["beta"])
        return val, per(np.abs(sc)) * e + np.abs(sc).max() / 254 * (np.abs(f) + e)
    if op == "maxpool":
        return _pool_np(f, a, "max"), _pool_np(e, a, "max")
    if op == "avgpool":
        return _pool_np(f, a, "avg"), _pool_np(e, a, "avg")
    if op == "gap":
        return f.mean((2, 3)), e.mean((2, 3))
    if op == "flatten":
        return f.reshape(f.shape[0], -1), e.reshape(e.shape[0], -1)
    if op == "add":
        return f + fs[1], e + es[1]
    if op == "mul":
        return f * fs[1], np.abs(f) * es[1] + e * np.abs(fs[1]) + e * es[1]
    if op == "bmm":
        return f @ fs[1].T, np.abs(f) @ es[1].T + e @ np.abs(fs[1]).T + e @ es[1].T
    if op == "cat":
        return np.concatenate(fs, 1), np.concatenate(es, 1)
    if op in ("layernorm", "rmsnorm"):
        rms = op == "rmsnorm"
        xh, sig = _norm_np(f, rms, 1e-6 if rms else 1e-5)
        gam = np.abs(w["gamma"].astype(np.float64))
        val = xh * w["gamma"] + (0 if rms else w["beta"])
        erow = e.max(-1, keepdims=True)
        err = np.minimum(gam * 2 * erow * (1 + np.abs(xh)) / sig, 2 * gam * math.sqrt(f.shape[-1]))
        return val, err
    if op == "softmax":
        z = np.exp(f - f.max(-1, keepdims=True))
        p = z / z.sum(-1, keepdims=True)
        return p, p * np.expm1(np.minimum(2 * e.max(-1, keepdims=True), 50.0))
    fn, lip = ACTS[op][1], ACTS[op][2]
    val = 0.5 * f * (1 + _erf(f / math.sqrt(2))) if op == "gelu" else fn(f)
    return val, lip * e


def bound(g: Graph, x: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(float64 value, elementwise error bound) of every output of ``g`` on ``x`` (module docstring)."""
    shapes = g.shapes()
    f0 = x.astype(np.float64)
    fs, es = [f0], [np.full(f0.shape, OWN_UNITS["input"] * np.abs(f0).max() / 127)]
    for ly in g.layers:
        w = _weights(ly, [shapes[s] for s in ly.src])
        val, err = _step(ly, [fs[s] for s in ly.src], [es[s] for s in ly.src], w)
        fs.append(val)
        es.append(REL_SLACK * (err + OWN_UNITS[ly.op] * np.abs(val).max() / 127))
    return [(fs[i], es[i]) for i in g.outputs()]


# ---------------------------------------------------------------------------------------------- the generator

#: op families a graph may draw from; each graph enables a random subset (swarm testing: a graph
#: without some op reaches deeper into the others)
FAMILIES = ("conv", "dense", "act", "bn", "pool", "gap", "flatten", "norm", "softmax", "add", "cat", "residual",
            "mul", "bmm")


def generate(seed: int, config: str | None = None, max_layers: int = 8, families=FAMILIES,
             acts=tuple(ACTS)) -> Graph:
    """A random graph; the same seed (and arguments) gives the same graph. ``families`` (of ``FAMILIES``)
    and ``acts`` (of ``ACTS``) narrow the ops it draws from."""
    rng = np.random.default_rng([seed, 0])
    pick = lambda seq: seq[int(rng.integers(len(seq)))]
    cfg = config or pick(CONFIGS)
    img = rng.random() < 0.6
    shape = (int(rng.integers(1, 4)), pick(SMALL), pick(SIDES), pick(SIDES)) if img else \
        (int(rng.integers(1, 6)), pick(FEATS))
    fams = [f for f in families if rng.random() < 0.5]
    fams += ["conv" if img else "dense"]          # at least one weighted layer
    acts = [a for a in acts if rng.random() < 0.5] or [pick(list(acts))]
    g = Graph(seed, cfg, shape, [])
    n = int(rng.integers(1, max_layers + 1))
    tries = 0
    vals = [input_of(g).astype(np.float64)]
    while len(g.layers) < n and tries < 20 * n:
        tries += 1
        shapes = g.shapes()
        # mostly the newest value (a chain), sometimes an older one (fan-out)
        src = len(shapes) - 1 if rng.random() < 0.7 else int(rng.integers(len(shapes)))
        ly = _random_layer(rng, pick(fams), acts, shapes, src)
        if ly is None:
            continue
        try:
            ins = [shapes[s] for s in ly.src]
            _shape(ly, ins)
        except ValueError:
            continue
        with np.errstate(all="ignore"):
            v, _ = _step(ly, [vals[s] for s in ly.src], [vals[s] for s in ly.src], _weights(ly, ins))
        if not np.all(np.abs(v) < MAX_VALUE):     # products of products grow without bound
            continue
        vals.append(v)
        g.layers.append(ly)
    if not g.layers:        # every graph computes something
        g.layers.append(Layer("relu", (0,)))
    return g


def _random_layer(rng, fam: str, acts: list, shapes: list, src: int) -> Layer | None:  # noqa: C901
    """One layer of family ``fam`` reading value ``src`` (None where the family does not apply)."""
    x = shapes[src]
    img = len(x) == 4
    w = int(rng.integers(1 << 30))
    if fam in ("add", "cat", "mul", "bmm"):      # a binary op with another value of a compatible shape
        if fam == "bmm" and img:
            return None
        fits = {"add": lambda s: s == x, "mul": lambda s: s == x, "bmm": lambda s: len(s) == 2 and s[1] == x[1],
                "cat": lambda s: len(s) == len(x) and all(u == v for j, (u, v) in enumerate(zip(s, x)) if j != 1)}
        others = [i for i, s in enumerate(shapes) if (i != src or fam in ("mul", "bmm")) and fits[fam](s)]
        return Layer(fam, (src, int(rng.choice(others)))) if others else None
    if fam == "residual":            # a layer keeping the shape, so that an "add" may follow
        if img:
            return Layer("conv", (src,), {"cout": x[1], "k": 3, "stride": 1, "pad": 1, "dil": 1, "groups": 1,
                                          "bias": True, "w": w})
        return Layer("linear", (src,), {"out": x[1], "w": w})
    if fam == "conv" and img:
        c = x[1]
        k = int(rng.integers(1, 6))
        kind = rng.random()
        if kind < 0.2:               # depthwise (channel multiplier 1 or 2)
            groups, cout = c, c * int(rng.integers(1, 3))
        elif kind < 0.35:
            groups = int(rng.choice([d for d in range(1, c + 1) if c % d == 0]))
            cout = groups * int(rng.integers(1, 4))
        else:
            groups, cout = 1, int(rng.choice(SMALL + (8, 11)))
        return Layer("conv", (src,), {"cout": cout, "k": k, "stride": int(rng.integers(1, 4)),
                                      "pad": int(rng.integers(0, 4)), "dil": int(rng.integers(1, 3)),
                                      "groups": groups, "bias": bool(rng.random() < 0.7), "w": w})
    if fam == "dense" and not img:
        return Layer("linear" if rng.random() < 0.7 else "matmul", (src,), {"out": int(rng.choice(FEATS)), "w": w})
    if fam == "act":
        return Layer(str(rng.choice(acts)), (src,))
    if fam == "bn" and img:
        return Layer("bn", (src,), {"w": w})
    if fam == "pool" and img:
        k = int(rng.integers(2, 4))
        return Layer(str(rng.choice(["maxpool", "avgpool"])), (src,),
                     {"k": k, "stride": int(rng.integers(1, k + 1)), "pad": int(rng.integers(0, k // 2 + 1))})
    if fam in ("gap", "flatten") and img:
        return Layer(fam, (src,))
    if fam == "norm":
        return Layer(str(rng.choice(["layernorm", "rmsnorm"])), (src,), {"w": w})
    if fam == "softmax":
        return Layer("softmax", (src,))
    return None


# ---------------------------------------------------------------------------------------------- checking

@dataclass
class Outcome:
    kind: str                    # "ok", "refused", "failure"
    what: str = ""               # refused: the error's first words; failure: its class (below)
    message: str = ""
    worst: float = 0.0           # ok: the largest |chip - float| / bound over the outputs
    layer: str = ""              # refused: the graph's op that brought the refusal (``_blame``)
    seconds: float = 0.0

    def same_failure(self, other: "Outcome") -> bool:
        return self.kind == other.kind == "failure" and self.what == other.what


def refusal_key(msg: str) -> str:
    """A ChipCompileError's first words: the primitive op it names (``RMAX``, ``WHERE``; a ``COMPOSITE`` with
    the pattern's name), the kernel kind (``kernel softmax``), else its first four words, numbers as ``#``."""
    words = msg.split()
    if words and words[0].isupper() and words[0].isidentifier():
        if words[0] == "COMPOSITE" and "): " in msg:
            return f"COMPOSITE {msg.split('): ', 1)[1].split()[0]}"
        return words[0]
    if len(words) > 1 and words[0] == "kernel":
        return f"kernel {words[1].rstrip('0123456789')}"
    return re.sub(r"\d+", "#", " ".join(words[:4]))


def check(g: Graph, device_for) -> Outcome:
    """Compile ``g`` for its config and run it on ``device_for(config)``; see the module docstring."""
    t0 = time.perf_counter()
    try:
        model = model_of(g)
        x = input_of(g)
        try:
            cm = compile_model(model, [x], g.config)
        except ChipCompileError as e:
            return Outcome("refused", refusal_key(str(e)), str(e), layer=_blame(g, refusal_key(str(e))),
                           seconds=time.perf_counter() - t0)
        out = _check_compiled(cm, model, g, x, device_for(g.config))
    except Exception as e:      # noqa: BLE001 (any other exception is a finding)
        tb = traceback.format_exc(limit=-3)
        out = Outcome("failure", f"exception {type(e).__name__}", f"{type(e).__name__}: {e}\n{tb}")
    out.seconds = time.perf_counter() - t0
    return out


def _blame(g: Graph, key: str) -> str:
    """The op of the first layer whose prefix of the graph is refused as the whole graph was."""
    x = input_of(g)
    for i in range(1, len(g.layers) + 1):
        part = replace(g, layers=g.layers[:i])
        try:
            compile_model(model_of(part), [x], g.config)
        except ChipCompileError as e:
            if refusal_key(str(e)) == key:
                return g.layers[i - 1].op
        except Exception:       # noqa: BLE001 (a prefix that fails otherwise blames nothing)
            continue
    return "?"


def _check_compiled(cm, model, g: Graph, x: np.ndarray, device) -> Outcome:
    res = device.run(cm, {"x": x})
    ref = cm.reference({"x": x})
    flt = cm.float_reference({"x": x})
    front = model(Tensor(x))
    front = [t.numpy() for t in (front if isinstance(front, tuple) else (front,))]
    bounds = bound(g, x)
    if not len(res.outputs) == len(ref) == len(flt) == len(front) == len(bounds):
        return Outcome("failure", "output count", f"chip {len(res.outputs)}, reference {len(ref)}, float "
                       f"{len(flt)}, frontend {len(front)}, graph {len(bounds)}")
    worst = 0.0
    for i, (got, want, fl, fr, (fv, fe)) in enumerate(zip(res.outputs, ref, flt, front, bounds)):
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = _where(got, want)
            return Outcome("failure", "chip != reference", f"output {i}: {bad}")
        if fl.shape != fr.shape or not np.allclose(fl, fr, rtol=1e-4, atol=1e-4 * (np.abs(fr).max() + 1e-3)):
            return Outcome("failure", "float_reference != frontend", f"output {i}: {_where(fl, fr)}")
        if not np.allclose(fr, fv, rtol=1e-4, atol=1e-4 * (np.abs(fv).max() + 1e-3)):
            return Outcome("failure", "frontend != numpy", f"output {i}: {_where(fr, fv)}")
        err = np.abs(got.astype(np.float64) - fv)
        ratio = float(np.max(err / np.maximum(fe, 1e-12))) if err.size else 0.0
        if ratio > 1.0:
            j = np.unravel_index(np.argmax(err / np.maximum(fe, 1e-12)), err.shape)
            return Outcome("failure", "outside the quantization bound",
                           f"output {i} at {tuple(map(int, j))}: chip {got[j]:.6g}, float {fv[j]:.6g}, "
                           f"bound {fe[j]:.4g} (|error| / bound = {ratio:.3g}; output step "
                           f"{np.abs(fv).max() / 127:.4g})")
        worst = max(worst, ratio)
    return Outcome("ok", worst=worst)


def _where(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    diff = got != want
    j = np.unravel_index(np.argmax(np.abs(got.astype(np.float64) - want)), got.shape)
    return (f"{int(diff.sum())} of {got.size} elements differ; largest at {tuple(map(int, j))}: {got[j]!r} "
            f"!= {want[j]!r}")


# ---------------------------------------------------------------------------------------------- shrinking

def _candidates(g: Graph):  # noqa: C901
    """Smaller variants of ``g``, simplest first (each may be invalid: the caller checks shapes)."""
    n = len(g.layers)
    for j in reversed(range(n)):                  # drop layer j; its readers read its first input
        keep = g.layers[j].src[0]
        layers = []
        for i, ly in enumerate(g.layers):
            if i == j:
                continue
            src = tuple((keep if s == j + 1 else s) - (1 if s > j + 1 else 0) for s in ly.src)
            layers.append(Layer(ly.op, src, dict(ly.args)))
        if layers:
            yield replace(g, layers=layers)
    shape = list(g.shape)
    for ax, v in enumerate(shape):
        for smaller in sorted({1, v // 2, v - 1}):
            if 1 <= smaller < v:
                yield replace(g, shape=tuple(shape[:ax] + [smaller] + shape[ax + 1:]))
    simpler = {"k": 1, "stride": 1, "pad": 0, "dil": 1, "groups": 1, "bias": False}
    for j, ly in enumerate(g.layers):
        for key, v in ly.args.items():
            opts = []
            if key in simpler and v != simpler[key]:
                opts.append(simpler[key])
            if key in ("cout", "out", "k", "stride", "pad", "dil") and isinstance(v, int) and v > 1:
                opts += [v // 2, v - 1]
            for o in dict.fromkeys(opts):
                if key == "k" and ly.op in ("maxpool", "avgpool") and o < 2:
                    continue
                layers = list(g.layers)
                layers[j] = Layer(ly.op, ly.src, {**ly.args, key: o})
                yield replace(g, layers=layers)
    if g.config != CONFIGS[0]:
        yield replace(g, config=CONFIGS[0])


def shrink(g: Graph, device_for, outcome: Outcome, budget_s: float = 60.0) -> tuple[Graph, Outcome]:
    """Greedily the smallest variant of ``g`` that still fails as ``outcome`` did (within ``budget_s``)."""
    t0 = time.perf_counter()
    progress = True
    while progress and time.perf_counter() - t0 < budget_s:
        progress = False
        for c in _candidates(g):
            try:
                c.shapes()
            except ValueError:
                continue
            o = check(c, device_for)
            if o.same_failure(outcome):
                g, outcome, progress = c, o, True
                break
            if time.perf_counter() - t0 > budget_s:
                break
    return g, outcome


def replay_command(seed: int, config: str | None = None, **gen) -> str:
    """A shell line that rebuilds graph ``seed`` (``generate(seed, config, **gen)``) and prints its outcome."""
    args = ", ".join([str(seed), repr(config)] + [f"{k}={v!r}" for k, v in gen.items()])
    return (f'python -c "import tetrachip as tc; from verify.compiler_fuzz import check, generate; '
            f"print(check(generate({args}), lambda c: tc.Device('sim', config=c)))\"")


def size(g: Graph) -> int:
    """A graph's size for reports: layers, then elements of the input."""
    return len(g.layers) * 10_000 + math.prod(g.shape)


# ---------------------------------------------------------------------------------------------- a campaign

def run_fuzz(device_for, seed: int = 0, count: int = 100, config: str | None = None, shrink_s: float = 60.0,
             progress=None, **gen) -> dict:
    """Graphs ``seed .. seed + count - 1``; counts, refusals by op, failures (shrunk) and timings.

    ``device_for(config_name)`` returns the device that runs a compiled model (``Device("sim", config=...)``);
    ``gen`` goes to ``generate`` (``max_layers``, ``families``, ``acts``)."""
    t0 = time.perf_counter()
    rep = {"graphs": 0, "ok": 0, "refused": 0, "failures": [], "refused_by": {}, "refused_by_layer": {},
           "ops": {}, "ops_ok": {},
           "worst_ratio": 0.0, "seconds": 0.0}
    for s in range(seed, seed + count):
        g = generate(s, config, **gen)
        o = check(g, device_for)
        rep["graphs"] += 1
        for op in set(g.ops()):
            rep["ops"][op] = rep["ops"].get(op, 0) + 1
        if o.kind == "ok":
            rep["ok"] += 1
            rep["worst_ratio"] = max(rep["worst_ratio"], o.worst)
            for op in set(g.ops()):
                rep["ops_ok"][op] = rep["ops_ok"].get(op, 0) + 1
        elif o.kind == "refused":
            rep["refused"] += 1
            rep["refused_by"][o.what] = rep["refused_by"].get(o.what, 0) + 1
            key = f"{o.layer}: {o.what}"
            rep["refused_by_layer"][key] = rep["refused_by_layer"].get(key, 0) + 1
        else:
            small, so = shrink(g, device_for, o, shrink_s)
            rep["failures"].append({"seed": s, "config": g.config, "kind": o.what, "message": o.message,
                                    "replay": replay_command(s, config, **gen),
                                    "shrunk": repr(small), "shrunk_message": so.message,
                                    "layers": len(g.layers), "shrunk_layers": len(small.layers)})
        if progress:
            progress(1)
    rep["seconds"] = round(time.perf_counter() - t0, 2)
    for k in ("refused_by", "refused_by_layer"):
        rep[k] = dict(sorted(rep[k].items(), key=lambda kv: -kv[1]))
    return rep


__all__ = ["ACTS", "CONFIGS", "FAMILIES", "Graph", "Layer", "Outcome", "bound", "check", "generate", "input_of",
           "model_of", "refusal_key", "replay_command", "run_fuzz", "shrink"]
