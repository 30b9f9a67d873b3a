"""Graph rewrites, listed in order in ``PASSES`` and run by ``run_passes`` with the checker between them.

A pass is a rule ``Node -> Node | None`` applied bottom-up by ``rewrite``
(``None`` keeps the node). Rules see nodes whose sources are already
rewritten, and are applied inside control-flow bodies too.
"""
from __future__ import annotations

from typing import Callable

from compiler.ir import semantics
from compiler.ir.graph import CONTROL, Graph, IRError, Node, Ops, toposort, verify

Rule = Callable[[Node], "Node | None"]


def rewrite(outputs, rule: Rule) -> list[Node]:
    """Apply ``rule`` to every node reachable from ``outputs``, sources first; returns the new outputs."""
    new: dict[int, Node] = {}
    for n in toposort(outputs):
        src = tuple(new[id(s)] for s in n.src)
        arg = n.arg
        if n.op is Ops.IF:
            arg = tuple(_rewrite_graph(g, rule) for g in n.arg)
        elif n.op is Ops.LOOP:
            arg = (_rewrite_graph(n.arg[0], rule), n.arg[1])
        same_arg = arg is n.arg or (n.op in CONTROL and all(a is b for a, b in zip(arg, n.arg)))
        same = same_arg and all(a is b for a, b in zip(src, n.src))
        m = n if same else Node(n.op, n.dtype, src, arg, site=n.site)
        r = rule(m)
        if r is not None and (r.shape != n.shape or r.dtype != n.dtype):
            raise IRError(n.op, [s.shape for s in n.src], f"rewritten to {r.op.name} {r.dtype}{r.shape}, "
                          f"which changes the node's type {n.dtype}{n.shape}")
        new[id(n)] = m if r is None else r
    return [new[id(o)] for o in outputs]


def _rewrite_graph(g: Graph, rule: Rule) -> Graph:
    (out,) = rewrite([g.output], rule)
    return g if out is g.output else Graph(g.inputs, out)


# ---------------------------------------------------------------------------- rules

def fold_noops(n: Node) -> Node | None:
    """Drop movement ops and casts that change nothing."""
    if not n.src:
        return None
    x = n.src[0]
    if n.op in (Ops.RESHAPE, Ops.EXPAND) and x.shape == n.shape:
        return x
    if n.op is Ops.PERMUTE and tuple(n.arg) == tuple(range(len(n.arg))):
        return x
    if n.op is Ops.CAST and x.dtype == n.dtype:
        return x
    if n.op is Ops.PAD and all(p == (0, 0) for p in n.arg):
        return x
    if n.op is Ops.SHRINK and all((b, e) == (0, d) for (b, e), d in zip(n.arg, x.shape)):
        return x
    if n.op is Ops.FLIP and not n.arg:
        return x
    if n.op in (Ops.SUM, Ops.PROD, Ops.RMAX) and not n.arg:
        return x
    return None


def merge_movement(n: Node) -> Node | None:
    """Collapse chains: reshape(reshape x), permute(permute x), expand(expand x)."""
    if not n.src or n.src[0].op is not n.op:
        return None
    inner = n.src[0]
    if n.op is Ops.RESHAPE:
        return Node(Ops.RESHAPE, n.dtype, inner.src, n.arg, site=n.site)
    if n.op is Ops.PERMUTE:
        return Node(Ops.PERMUTE, n.dtype, inner.src, tuple(inner.arg[i] for i in n.arg), site=n.site)
    if n.op is Ops.EXPAND:
        return Node(Ops.EXPAND, n.dtype, inner.src, n.arg, site=n.site)
    return None


_FOLDABLE = {Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.EXP, Ops.LOG, Ops.SIN, Ops.ATAN, Ops.CAST,
             Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPEQ, Ops.WHERE}


def fold_constants(n: Node) -> Node | None:
    """Evaluate elementwise ops whose sources are all scalar constants."""
    if n.op in _FOLDABLE and n.src and all(s.op is Ops.CONST for s in n.src):
        import numpy as np
        with np.errstate(all="ignore"):
            v = semantics.apply(n, *(semantics.source_value(s, {}) for s in n.src))
        return Node(Ops.CONST, n.dtype, (), v.item(), site=n.site)
    return None


def simplify_movement(n: Node) -> Node | None:
    """fold_noops and merge_movement to a fixed point at each node."""
    changed = False
    while True:
        r = fold_noops(n) or merge_movement(n)
        if r is None:
            return n if changed else None
        n, changed = r, True


PASSES: list[tuple[str, Rule]] = [
    ("fold_constants", fold_constants),
    ("simplify_movement", simplify_movement),
]


def run_passes(outputs, passes=None, check: bool = True) -> list[Node]:
    """Run the named passes in order, verifying the graph before the first and after each."""
    outputs = list(outputs)
    if check:
        verify(outputs)
    for name, rule in (PASSES if passes is None else passes):
        try:
            outputs = rewrite(outputs, rule)
            if check:
                verify(outputs)
        except ValueError as e:
            raise ValueError(f"graph invalid after pass {name!r}: {e}") from e
    return outputs
