"""Predicates of frontend control flow on the chip (``compiler.lower.control_lower``): a boolean scalar
recognised as a threshold on a full ``sum``/``max`` of ``x``, ``|x|``, ``x - y`` or ``|x - y|``
over int8 tensors the chip holds.

``match_pred`` finds the reduction and its leaves (tensors identified by structural keys, so a
function traced twice is recognised), ``_probe`` identifies the elementwise form by evaluating it
on random inputs (any spelling works), ``threshold`` turns the float predicate at ``R * scale``
into the integer rule ``R >= T`` (checked to be a step). ``Pred`` evaluates the rule in numpy.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from isa.semantics import wrap32_int

from compiler.ir.evaluate import evaluate
from compiler.ir.graph import Node, Ops, substitute, toposort
from compiler.lower.schedule import ChipCompileError

#: elementwise forms a predicate may reduce (a, b: int8 tensors of one scale)
_FORMS = {"a": lambda a, b: a, "|a|": lambda a, b: np.abs(a), "a-b": lambda a, b: a - b,
          "|a-b|": lambda a, b: np.abs(a - b)}


def control_error(msg: str) -> ChipCompileError:
    return ChipCompileError(f"control flow: {msg}")


def float_eval(out: Node, feeds: dict) -> np.ndarray:
    """The float value of ``out`` (the reference evaluator, ``compiler.ir.evaluate``)."""
    return evaluate([out], feeds)[0]


def structural_keys(roots: list, roles: dict) -> dict:
    """Structural key of every node under ``roots``; ``roles`` maps node ids to a fixed tag (body
    placeholders), so one function traced twice gives equal keys."""
    keys: dict = {}
    for n in toposort(roots):
        if id(n) in roles:
            keys[id(n)] = ("role", roles[id(n)])
            continue
        h = hashlib.sha256(f"{n.op.name}|{n.dtype!r}|{n.shape}|".encode())
        a = n.arg
        if isinstance(a, np.ndarray):
            h.update(np.ascontiguousarray(a).tobytes() + repr((a.dtype, a.shape)).encode())
        elif isinstance(a, tuple) and any(hasattr(x, "output") for x in a):
            h.update(str(id(a)).encode())
        else:
            h.update(repr(a).encode())
        h.update(repr([keys[id(s)] for s in n.src]).encode())
        keys[id(n)] = h.hexdigest()
    return keys


def input_ids(out: Node) -> set:
    return {id(n) for n in toposort([out]) if n.op is Ops.INPUT}


# ------------------------------------------------------------------------------- predicates

@dataclass
class Pred:
    red: str                 # "max" | "sum"
    form: str                # key of _FORMS
    leaves: tuple            # leaf names ("a" operand/tensor tags), 1 or 2
    T: int                   # integer threshold
    hi: bool                 # the predicate's value for R >= T (else its value for R < T is hi's negation)
    scale: float = 1.0

    def value(self, R: int) -> bool:
        return self.hi if R >= self.T else not self.hi

    def reduce(self, a: np.ndarray, b: np.ndarray | None) -> int:
        e = _FORMS[self.form](a.astype(np.int64).ravel(), None if b is None else b.astype(np.int64).ravel())
        r = int(e.max()) if self.red == "max" else int(e.sum())
        return wrap32_int(r)


def match_pred(pred: Node, known: dict, roles: dict) -> tuple:
    """Split a boolean scalar ``pred`` into (reduction kind, form, leaf tags, scalar function node,
    its placeholder). ``known`` maps structural keys of tensors the chip holds to their tags."""
    keys = structural_keys([pred], roles)
    nodes = toposort([pred])
    for r in reversed(nodes):
        if r.op not in (Ops.SUM, Ops.RMAX) or int(np.prod(r.shape)) != 1:
            continue
        e = r.src[0]
        if sorted(r.arg) != list(range(len(e.shape))):
            continue
        leaves = {}
        for n in toposort([e]):
            if keys.get(id(n)) in known:
                leaves.setdefault(known[keys[id(n)]], []).append(n)
        if not 1 <= len(leaves) <= 2:
            continue
        tags = sorted(leaves)
        phs = {t: Node(Ops.INPUT, leaves[t][0].dtype, (), (f"leaf_{t}", leaves[t][0].shape)) for t in tags}
        e2 = substitute([e], {id(n): phs[t] for t in tags for n in leaves[t]})[0]
        if input_ids(e2) != {id(p) for p in phs.values()}:
            continue
        rph = Node(Ops.INPUT, r.dtype, (), ("reduction", r.shape))
        h = substitute([pred], {id(r): rph})[0]
        if input_ids(h) != {id(rph)}:
            continue
        form = _probe(e2, [phs[t] for t in tags])
        if form is None:
            continue
        fk, order = form
        return ("max" if r.op is Ops.RMAX else "sum"), fk, tuple(tags[i] for i in order), h, rph
    raise control_error("the predicate must be a comparison of sum(...) or max(...) over a whole tensor of x, |x|, "
                        "x - y or |x - y| with a constant, where x, y are the cond's operands (or, in a while_loop, "
                        "the carry and the body's result)")


def _probe(e: Node, phs: list) -> tuple | None:
    """Which of _FORMS (and which leaf order) the elementwise graph ``e`` computes, by evaluation."""
    rng = np.random.default_rng(7)
    trials = [[rng.uniform(-2, 2, p.shape).astype(np.float32) for p in phs] for _ in range(3)]
    outs = [np.asarray(float_eval(e, {p.arg[0]: v for p, v in zip(phs, vals)}), np.float64).ravel()
            for vals in trials]
    orders = [(0,)] if len(phs) == 1 else [(0, 1), (1, 0)]
    for fk, f in _FORMS.items():
        if ("b" in fk) != (len(phs) == 2):
            continue
        for order in orders:
            ok = True
            for vals, got in zip(trials, outs):
                a = vals[order[0]].astype(np.float64).ravel()
                b = vals[order[1]].astype(np.float64).ravel() if len(order) == 2 else None
                if got.shape != a.shape or not np.allclose(got, f(a, b), rtol=1e-5, atol=1e-6):
                    ok = False
                    break
            if ok:
                return fk, order
    return None


def threshold(h: Node, rph: Node, red: str, form: str, n: int, scale: float) -> tuple[int, bool]:
    """The integer rule of the predicate: its float value at ``R * scale`` is a step at ``T``."""
    span = {"a": (-128, 127), "|a|": (0, 128), "a-b": (-255, 255), "|a-b|": (0, 255)}[form]
    lo, hi = (span[0], span[1]) if red == "max" else (span[0] * n, span[1] * n)
    name = rph.arg[0]

    def P(R: int) -> bool:
        return bool(np.asarray(float_eval(h, {name: np.full(rph.shape, R * scale, np.float32)})).reshape(-1)[0])

    top = P(hi)
    if P(lo) == top:
        T = lo
    else:
        a, b = lo, hi                   # P(a) != top, P(b) == top
        while b - a > 1:
            m = (a + b) // 2
            a, b = (a, m) if P(m) == top else (m, b)
        T = b
    pts = range(lo, hi + 1) if hi - lo <= 600 else np.unique(np.r_[np.linspace(lo, hi, 400).astype(int), T - 1, T])
    for R in pts:
        if lo <= R <= hi and P(int(R)) != (top if R >= T else not top):
            raise control_error("the predicate is not a threshold on the reduction (it changes value more than once)")
    return int(T), top
