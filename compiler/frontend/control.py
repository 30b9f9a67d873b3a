"""Control flow the graph carries: ``where`` (elementwise), ``cond`` (a branch on a runtime
scalar) and ``loop`` (a structured loop over the leading, possibly dynamic, dimension).

The branch/body functions are traced once on INPUT placeholders into closed
``ir.Graph`` bodies. Tensors a body captures from outside (weights, say) are
lifted to extra operands of the IF/LOOP node, so a body refers only to its own
inputs and constants: the chip compiler can lower it to a branch or a loop
whose trip count is a scalar register. Gradients flow through ``cond`` (each
is another IF over the branches' vector-Jacobian bodies) and through ``loop``
when its trip count is static (the backward graph replays the body per row);
a loop over a dynamic dimension raises if a gradient is being recorded.
"""
from __future__ import annotations

from compiler.frontend import autograd as ag
from compiler.ir.graph import Graph, Node, Ops, substitute, toposort
from compiler.frontend.shapes import shape_error
from compiler.frontend.tensor import Tensor, as_tensor, where

__all__ = ["where", "cond", "loop", "while_loop"]


def _placeholder(i: int, like: Node) -> Node:
    return Node(Ops.INPUT, like.dtype, (), (f"arg{i}", like.shape))


def _close(inputs: list[Node], out: Node) -> tuple[Node, list[Node], list[Node]]:
    """Lift outer (input-independent, non-constant) nodes used by the body into new INPUTs.
    Returns the rewritten output, the outer nodes and the INPUTs that replace them (same order)."""
    inside = _inside(inputs, out)
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
        new[id(nd)] = nd if all(a is b for a, b in zip(src, nd.src)) else \
            Node(nd.op, nd.dtype, src, nd.arg, site=nd.site)
    body_out = new[id(out)] if id(out) in inside else outer(out)
    return body_out, [o for o, _ in lifted.values()], [p for _, p in lifted.values()]


def _call(op: str, fn, args):
    res = fn(*args)
    if not isinstance(res, Tensor):
        raise TypeError(f"{op}: the body must return one Tensor, got {type(res).__name__}")
    return res


def _if(pred: Node, operands: list[Node], inputs: list[Node], then_out: Node, else_out: Node) -> Node:
    """An IF node whose two bodies take ``inputs`` (one per operand), closed over what they capture.
    Both bodies take: the operands, then the then-branch's lifted tensors, then the else-branch's."""
    tout, touter, tnew = _close(inputs, then_out)
    eout, eouter, enew = _close(inputs, else_out)
    t_pad = [_placeholder(len(inputs) + len(tnew) + j, o) for j, o in enumerate(eouter)]
    e_pad = [_placeholder(len(inputs) + j, o) for j, o in enumerate(touter)]
    then_g = Graph(tuple(inputs + tnew + t_pad), tout)
    else_g = Graph(tuple(inputs + e_pad + enew), eout)
    return Node(Ops.IF, tout.dtype, (pred, *operands, *touter, *eouter), (then_g, else_g))


def cond(pred, true_fn, false_fn, *operands) -> Tensor:
    """``true_fn(*operands)`` if the scalar ``pred`` is true at run time, else ``false_fn(*operands)``.
    Only the taken branch is executed. Both must return tensors of one shape and dtype.
    Gradients flow to the operands and to tensors the branches capture: the gradient of each is
    itself a ``cond`` on the same predicate."""
    pred = as_tensor(pred)
    if pred.numel() != 1:
        raise shape_error("cond", [pred.shape], "the predicate must be a single element")
    pred = pred.reshape(()).bool()
    ops = [as_tensor(o) for o in operands]
    args = [Tensor(_placeholder(i, o.node)) for i, o in enumerate(ops)]
    for a, o in zip(args, ops):
        a.requires_grad = o.requires_grad and ag.grad_enabled()
    tres, eres = _call("cond", true_fn, args), _call("cond", false_fn, args)
    if tres.shape != eres.shape or tres.dtype != eres.dtype:
        raise shape_error("cond", [tres.shape, eres.shape],
                          f"branches return different types ({tres.dtype}, {eres.dtype})")
    inputs = [a.node for a in args]
    out = Tensor(_if(pred.node, [o.node for o in ops], inputs, tres.node, eres.node))
    if ag.grad_enabled() and out.dtype.is_float and (tres.requires_grad or eres.requires_grad):
        out.requires_grad, out._ctx = True, _CondGrad(pred, ops, args, tres, eres)
    return out


class _CondGrad(ag.Function):
    """The tape entry of a ``cond``: parents are the operands and captured tensors that need a
    gradient; each gradient is an IF on the same predicate over the two branches' VJP bodies."""

    def __init__(self, pred, ops, args, tres, eres):
        inputs = [a.node for a in args]
        g = Tensor(_placeholder(len(args), tres.node))
        sinks = []
        for res in (tres, eres):
            inside = _inside(inputs, res.node)
            sink: dict = {}
            if res.requires_grad:
                ag.backward(res, g.node, sink=sink, boundary=lambda t, inside=inside: id(t.node) not in inside)
            sinks.append(sink)
        parents, bodies = [], []
        for o, a in zip(ops, args):
            if o.requires_grad:
                parents.append(o)
                bodies.append(tuple(sk.pop(id(a), (None, None))[1] for sk in sinks))
        captured = {k: t for sk in sinks for k, (t, _) in sk.items()}
        for k, t in captured.items():
            parents.append(t)
            bodies.append(tuple(sk[k][1] if k in sk else None for sk in sinks))
        super().__init__(*parents)
        self.pred, self.operands, self.inputs, self.bodies = pred.node, [o.node for o in ops], inputs + [g.node], bodies

    def backward(self, g: Node):
        out = []
        for p, (tn, en) in zip(self.parents, self.bodies):
            zero = ag.const(p.node, 0.0)
            out.append(_if(self.pred, self.operands + [g], self.inputs, tn if tn is not None else zero,
                           en if en is not None else zero))
        return out


def _inside(inputs: list[Node], out: Node) -> set:
    inside = {id(i) for i in inputs}
    for nd in toposort([out]):
        if any(id(s) in inside for s in nd.src):
            inside.add(id(nd))
    return inside


def loop(body, init, *xs) -> Tensor:
    """Fold ``body(carry, *x_i)`` over the rows ``x_i`` of ``xs`` (their shared leading dimension,
    which may be dynamic, sets the trip count); returns the final carry.

    ``loop(lambda h, x: (h @ W + x).tanh(), h0, seq)`` runs an RNN over a sequence whose
    length is known only at run time when ``seq`` is a placeholder of shape ``("T", d)``.
    Gradients (to ``init``, ``xs`` and captured tensors) need a static trip count: the backward
    graph replays the body once per row.
    """
    init = as_tensor(init)
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ValueError("loop: needs at least one tensor to iterate over")
    if any(x.ndim == 0 for x in xs) or len({x.shape[0] for x in xs}) != 1:
        raise shape_error("loop", [x.shape for x in xs], "scanned tensors need one shared leading dimension")
    slices = [Node(Ops.INPUT, x.dtype, (), ("_", x.shape[1:])) for x in xs]
    inputs = [_placeholder(i, o) for i, o in enumerate([init.node, *slices])]
    res = _call("loop", body, [Tensor(i) for i in inputs])
    if res.shape != init.shape or res.dtype != init.dtype:
        raise shape_error("loop", [init.shape, res.shape], f"body returns {res.dtype}, carry is {init.dtype}: "
                          "shape and dtype must be kept")
    out_node, outer, new_inputs = _close(inputs, res.node)
    node = Node(Ops.LOOP, init.dtype, (init.node, *[x.node for x in xs], *outer),
                (Graph(tuple(inputs + new_inputs), out_node), len(xs)))
    out = Tensor(node)
    if ag.grad_enabled() and init.dtype.is_float and (res.requires_grad or any(t.requires_grad for t in (init, *xs))):
        if not isinstance(xs[0].shape[0], int):
            raise NotImplementedError(f"loop: gradients need a static trip count, this one is dynamic "
                                      f"({xs[0].shape[0]}); compute under tc.no_grad()")
        out.requires_grad, out._ctx = True, _LoopGrad(body, init, xs)
    return out


def while_loop(cond_fn, body_fn, init, max_iter: int) -> Tensor:
    """``c = init; while cond_fn(c) (at most max_iter times): c = body_fn(c)``; returns ``c``.

    Spelled with the two structured primitives: a ``loop`` of ``max_iter`` trips whose body is
    ``cond(cond_fn(c), body_fn, identity, c)``. Once the predicate is false the carry no longer
    changes, so every later trip is a no-op: the chip exits there (``compiler.lower.control_lower``, a
    data-dependent trip count), the reference backend runs the remaining no-op trips. A loop
    "until converged" is ``while_loop(lambda h: (f(h) - h).abs().max() > tol, f, h0, 100)``.
    """
    if not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"while_loop: max_iter must be a positive int, got {max_iter!r}")
    from compiler.frontend.tensor import zeros
    return loop(lambda c, _row: cond(cond_fn(c), body_fn, lambda v: v, c), as_tensor(init), zeros(max_iter, 1))


class _LoopGrad(ag.Function):
    """The tape entry of a ``loop`` with a static trip count: its gradients are those of the body
    replayed row by row (built once, here, with the output gradient as a placeholder)."""

    def __init__(self, body, init, xs):
        leaves = [Tensor(t.node) for t in (init, *xs)]
        for leaf, t in zip(leaves, (init, *xs)):
            leaf.requires_grad = t.requires_grad
        carry = leaves[0]
        for i in range(xs[0].shape[0]):
            carry = body(carry, *(x[i] for x in leaves[1:]))
        self.g = _placeholder(0, carry.node)
        sink: dict = {}
        if carry.requires_grad:
            inside = _inside([t.node for t in leaves], carry.node)
            ag.backward(carry, self.g, sink=sink, boundary=lambda t: id(t.node) not in inside)
        parents, self.grads = [], []
        for leaf, t in zip(leaves, (init, *xs)):
            if t.requires_grad:
                parents.append(t)
                self.grads.append(sink.pop(id(leaf), (None, None))[1])
        for t, gnode in sink.values():  # captured tensors
            parents.append(t)
            self.grads.append(gnode)
        super().__init__(*parents)

    def backward(self, g: Node):
        return [None if gn is None else substitute([gn], {id(self.g): g})[0] for gn in self.grads]
