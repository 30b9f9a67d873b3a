"""Control flow the graph carries: ``where`` (elementwise), ``cond`` (a branch on a runtime
scalar) and ``loop`` (a structured loop over the leading, possibly dynamic, dimension).

The branch/body functions are traced once on INPUT placeholders into closed
``ir.Graph`` bodies. Tensors a body captures from outside (weights, say) are
lifted to extra operands of the IF/LOOP node, so a body refers only to its own
inputs and constants: the chip compiler can lower it to a branch or a loop
whose trip count is a scalar register. Gradients do not flow through ``cond``
and ``loop`` yet: they raise if a gradient is being recorded.
"""
from __future__ import annotations

from . import autograd as ag
from .ir import Graph, Node, Ops, toposort
from .tensor import Tensor, _as_tensor, _err, where

__all__ = ["where", "cond", "loop"]


def _placeholder(i: int, like: Node) -> Node:
    return Node(Ops.INPUT, like.dtype, (), (f"arg{i}", like.shape))


def _close(inputs: list[Node], out: Node) -> tuple[Node, list[Node], list[Node]]:
    """Lift outer (input-independent, non-constant) nodes used by the body into new INPUTs.
    Returns the rewritten output, the outer nodes and the INPUTs that replace them (same order)."""
    inside = {id(i) for i in inputs}
    for nd in toposort([out]):
        if any(id(s) in inside for s in nd.src):
            inside.add(id(nd))
    lifted: dict[int, tuple[Node, Node]] = {}
    new: dict[int, Node] = {}

    def constant(nd: Node) -> bool:  # a constant or a broadcast of one stays inside the body
        return nd.op in (Ops.CONST, Ops.BUFFER) or (nd.op in (Ops.RESHAPE, Ops.EXPAND) and constant(nd.src[0]))

    def outer(nd: Node) -> Node:
        if constant(nd):
            return nd
        if id(nd) not in lifted:
            lifted[id(nd)] = (nd, _placeholder(len(inputs) + len(lifted), nd))
        return lifted[id(nd)][1]

    for nd in toposort([out]):
        if id(nd) not in inside:
            continue
        if nd.op is Ops.INPUT:
            new[id(nd)] = nd
            continue
        src = tuple(new[id(s)] if id(s) in inside else outer(s) for s in nd.src)
        new[id(nd)] = nd if all(a is b for a, b in zip(src, nd.src)) else Node(nd.op, nd.dtype, src, nd.arg)
    body_out = new[id(out)] if id(out) in inside else outer(out)
    return body_out, [o for o, _ in lifted.values()], [p for _, p in lifted.values()]


def _trace(op: str, fn, operands: list[Node]):
    inputs = [_placeholder(i, o) for i, o in enumerate(operands)]
    res = fn(*[Tensor(i) for i in inputs])
    if not isinstance(res, Tensor):
        raise TypeError(f"{op}: the body must return one Tensor, got {type(res).__name__}")
    _no_grad_check(op, [res])
    out, outer, new_inputs = _close(inputs, res.node)
    return inputs, out, outer, new_inputs


def _no_grad_check(op: str, tensors) -> None:
    if ag.grad_enabled() and any(t.requires_grad for t in tensors):
        raise NotImplementedError(f"{op}: gradients through control flow are not supported; "
                                  "use tc.where, or compute under tc.no_grad()")


def cond(pred, true_fn, false_fn, *operands) -> Tensor:
    """``true_fn(*operands)`` if the scalar ``pred`` is true at run time, else ``false_fn(*operands)``.
    Only the taken branch is executed. Both must return tensors of one shape and dtype."""
    pred = _as_tensor(pred)
    if pred.numel() != 1:
        raise _err("cond", [pred.shape], "the predicate must be a single element")
    pred = pred.reshape(()).bool()
    ops = [_as_tensor(o) for o in operands]
    _no_grad_check("cond", ops)
    nodes = [o.node for o in ops]
    ti, tout, touter, tnew = _trace("cond", true_fn, nodes)
    ei, eout, eouter, enew = _trace("cond", false_fn, nodes)
    # both bodies take: the operands, then the then-branch's lifted tensors, then the else-branch's
    t_pad = [_placeholder(len(ti) + len(tnew) + j, o) for j, o in enumerate(eouter)]
    e_pad = [_placeholder(len(ei) + j, o) for j, o in enumerate(touter)]
    if tout.shape != eout.shape or tout.dtype != eout.dtype:
        raise _err("cond", [tout.shape, eout.shape], f"branches return different types ({tout.dtype}, {eout.dtype})")
    then_g = Graph(tuple(ti + tnew + t_pad), tout)
    else_g = Graph(tuple(ei + e_pad + enew), eout)
    return Tensor(Node(Ops.IF, tout.dtype, (pred.node, *nodes, *touter, *eouter), (then_g, else_g)))


def loop(body, init, *xs) -> Tensor:
    """Fold ``body(carry, *x_i)`` over the rows ``x_i`` of ``xs`` (their shared leading dimension,
    which may be dynamic, sets the trip count); returns the final carry.

    ``loop(lambda h, x: (h @ W + x).tanh(), h0, seq)`` runs an RNN over a sequence whose
    length is known only at run time when ``seq`` is a placeholder of shape ``("T", d)``.
    """
    init = _as_tensor(init)
    xs = [_as_tensor(x) for x in xs]
    if not xs:
        raise ValueError("loop: needs at least one tensor to iterate over")
    if any(x.ndim == 0 for x in xs) or len({x.shape[0] for x in xs}) != 1:
        raise _err("loop", [x.shape for x in xs], "scanned tensors need one shared leading dimension")
    _no_grad_check("loop", [init, *xs])
    slices = [Node(Ops.INPUT, x.dtype, (), ("_", x.shape[1:])) for x in xs]
    inputs, out, outer, new_inputs = _trace("loop", body, [init.node, *slices])
    if out.shape != init.shape or out.dtype != init.dtype:
        raise _err("loop", [init.shape, out.shape], f"body returns {out.dtype}, carry is {init.dtype}: "
                   "shape and dtype must be kept")
    node = Node(Ops.LOOP, init.dtype, (init.node, *[x.node for x in xs], *outer),
                (Graph(tuple(inputs + new_inputs), out), len(xs)))
    return Tensor(node)
