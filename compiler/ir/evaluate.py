"""The reference evaluator: an IR graph executed with numpy, one primitive at a time.

Each primitive's meaning is ``compiler.ir.semantics.apply``; this module only walks the graph,
feeds the placeholders, runs control-flow bodies, and evaluates a SUM of a MUL of broadcast
operands (matmul, convolution, one-hot gathers) as one batched matmul instead of materialising
the broadcast product — same values, far less memory. ``Device("numpy")``
(``runtime/numpy_backend.py``) is this evaluator; the chip compiler calls it for the float
meaning of a graph (control-flow predicates, calibration of control-flow bodies), so it never
needs the runtime.
"""
from __future__ import annotations

import numpy as np

from compiler.ir import semantics
from compiler.ir.graph import Graph, Node, Ops, inputs_of, toposort


def evaluate(outputs: list[Node], feeds: dict) -> list[np.ndarray]:
    """Values of ``outputs`` with the INPUT placeholders bound to ``feeds`` (name -> array)."""
    bound, dims = semantics.bind_inputs_and_dims(inputs_of(outputs), feeds)
    with np.errstate(all="ignore"):
        env = _Env({}, bound, dims)
        _eval_all(outputs, env)
        return [env.get(o) for o in outputs]


class _Env:
    def __init__(self, cache: dict, feeds: dict, dims: dict):
        self.cache, self.feeds, self.dims, self.deferred = cache, feeds, dims, set()

    def get(self, n: Node) -> np.ndarray:
        v = self.cache.get(id(n))
        if v is None:  # a deferred node, needed after all
            v = self.cache[id(n)] = _eval_node(n, self)
        return v


def _eval_all(outputs, env: _Env) -> None:
    order = toposort(outputs)
    _plan_fusion(order, env)
    for n in order:
        if id(n) not in env.cache and id(n) not in env.deferred:
            env.cache[id(n)] = _eval_node(n, env)


def _plan_fusion(order, env: _Env) -> None:
    """Defer MULs consumed only by SUMs (and EXPANDs consumed only by such MULs): the SUM reads
    their operands directly."""
    users: dict[int, list[Node]] = {}
    for n in order:
        for s in n.src:
            users.setdefault(id(s), []).append(n)
    for n in reversed(order):
        us = users.get(id(n), [])
        if not us:
            continue
        if n.op is Ops.MUL and n.dtype.is_float and all(u.op is Ops.SUM for u in us):
            env.deferred.add(id(n))
        elif n.op is Ops.EXPAND and all(id(u) in env.deferred and u.op is Ops.MUL for u in us):
            env.deferred.add(id(n))


def _run_graph(g: Graph, args: list[np.ndarray], dims: dict) -> np.ndarray:
    env = _Env({id(i): a for i, a in zip(g.inputs, args)}, {}, dims)
    _eval_all([g.output], env)
    return env.get(g.output)


def _eval_node(n: Node, env: _Env) -> np.ndarray:
    op = n.op
    if op is Ops.INPUT:
        if id(n) in env.cache:
            return env.cache[id(n)]
        return semantics.source_value(n, env.feeds)
    if op in (Ops.CONST, Ops.BUFFER):
        return semantics.source_value(n, env.feeds)
    if op is Ops.IF:
        pred, *args = (env.get(s) for s in n.src)
        return _run_graph(n.arg[0] if bool(pred) else n.arg[1], args, env.dims)
    if op is Ops.LOOP:
        body, k = n.arg
        carry = env.get(n.src[0])
        scans, rest = [env.get(s) for s in n.src[1:1 + k]], [env.get(s) for s in n.src[1 + k:]]
        for i in range(scans[0].shape[0]):
            carry = _run_graph(body, [carry, *(s[i] for s in scans), *rest], env.dims)
        return np.asarray(carry, dtype=n.dtype.np)
    if op is Ops.SUM and n.src[0].op is Ops.MUL and id(n.src[0]) in env.deferred:
        return _fused_sum_mul(n, env)
    return semantics.apply(n, *(env.get(s) for s in n.src), dims=env.dims)


def _unexpanded(x: Node, env: _Env) -> np.ndarray:
    return env.get(x.src[0]) if x.op is Ops.EXPAND and id(x) in env.deferred else env.get(x)


def _fused_sum_mul(n: Node, env: _Env) -> np.ndarray:
    """SUM(MUL(a, b)) over ``n.arg`` as one batched matmul on the un-broadcast operands."""
    mul = n.src[0]
    full, red = semantics.concrete(mul.shape, env.dims), set(n.arg)
    a, b = (_unexpanded(s, env) for s in mul.src)
    nd = len(full)
    in_a = [a.shape[i] == full[i] and full[i] != 1 for i in range(nd)]
    in_b = [b.shape[i] == full[i] and full[i] != 1 for i in range(nd)]
    if any(full[i] != 1 and not in_a[i] and not in_b[i] for i in range(nd)):  # broadcast on both sides
        out = np.sum(np.multiply(a, b), axis=n.arg, keepdims=True)
        return np.asarray(out).astype(n.dtype.np, copy=False)
    # reduce dims that only one side has before multiplying
    a = a.sum(axis=tuple(i for i in range(nd) if i in red and in_a[i] and not in_b[i]), keepdims=True)
    b = b.sum(axis=tuple(i for i in range(nd) if i in red and in_b[i] and not in_a[i]), keepdims=True)
    batch = [i for i in range(nd) if in_a[i] and in_b[i] and i not in red]
    contract = [i for i in range(nd) if in_a[i] and in_b[i] and i in red]
    a_keep = [i for i in range(nd) if in_a[i] and not in_b[i] and i not in red]
    b_keep = [i for i in range(nd) if in_b[i] and not in_a[i] and i not in red]
    rest_a = [i for i in range(nd) if i not in batch + contract + a_keep]
    rest_b = [i for i in range(nd) if i not in batch + contract + b_keep]
    size = lambda idx: int(np.prod([full[i] for i in idx]))  # noqa: E731
    B, M, K, N = size(batch), size(a_keep), size(contract), size(b_keep)
    am = np.transpose(a, batch + a_keep + contract + rest_a).reshape(B, M, K)
    bm = np.transpose(b, batch + contract + b_keep + rest_b).reshape(B, K, N)
    out = np.matmul(am, bm).reshape([full[i] for i in batch + a_keep + b_keep])
    order = batch + a_keep + b_keep
    out = np.transpose(out, [order.index(i) for i in sorted(order)])
    return np.asarray(out).reshape(semantics.concrete(n.shape, env.dims)).astype(n.dtype.np, copy=False)
