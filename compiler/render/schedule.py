"""Split an IR graph into kernels: fused elementwise chains, fused reductions, host steps.

The scheduler decides which nodes get their own buffer ("realized"): graph
outputs, reductions, control flow (IF/LOOP run on the host), and elementwise
nodes read by more than one consumer. Everything else is fused into the kernel
that reads it: elementwise ops become expressions, movement ops become strided
``View``s on the buffers the kernel loads (so ``(x.T * 2 + 1).exp()`` is one
kernel reading ``x`` with swapped strides). A RESHAPE that no view can express
realizes its source first.

``schedule(outputs, dims)`` returns a ``Schedule``: buffers (sources to upload),
``steps`` in execution order (``Kernel`` or ``HostStep``), and the output buffer
ids. Shapes are concrete: ``dims`` binds every dynamic dimension name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from compiler.ir import dtypes
from compiler.ir.graph import BINARY, MOVEMENT, REDUCE, UNARY, Node, Ops, toposort
from compiler.render.view import View, apply_movement

ELEMENTWISE = UNARY | BINARY | {Ops.WHERE, Ops.CAST}


@dataclass(frozen=True, eq=False)
class Expr:
    """One value computed per kernel element: an elementwise op, a LOAD (arg = (slot, View)) or a CONST."""
    op: object  # an Ops member, or the strings "LOAD" / "CONST"
    dtype: object
    src: tuple = ()
    arg: object = None


@dataclass
class Kernel:
    """``out[i] = expr(i)`` over ``shape``; when ``reduce_op`` is set, ``shape`` is the reduced operand's
    shape and the kernel combines ``expr`` over ``reduce_axes`` (the output keeps them as size 1)."""
    out: int                       # buffer id written
    inputs: list                   # buffer ids read, by LOAD slot
    expr: Expr
    shape: tuple                   # iteration shape
    dtype: object                  # of the output
    reduce_op: Ops | None = None
    reduce_axes: tuple = ()
    out_shape: tuple = ()

    @property
    def numel(self) -> int:
        return math.prod(self.out_shape)


@dataclass
class HostStep:
    """A control-flow node (IF or LOOP) run by the host on realized operands."""
    node: Node
    out: int
    inputs: list


@dataclass
class Schedule:
    buffers: dict = field(default_factory=dict)   # buffer id -> (dtype, shape)
    sources: dict = field(default_factory=dict)   # buffer id -> the BUFFER/INPUT node that fills it
    steps: list = field(default_factory=list)
    outputs: list = field(default_factory=list)   # (buffer id, shape) per graph output, or ("const", Node)
    consts: dict = field(default_factory=dict)

    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, Kernel)]


class _Realize(Exception):
    def __init__(self, node):
        self.node = node


class _Builder:
    def __init__(self, dims: dict):
        self.dims = dims
        self.cons: dict = {}

    def shape(self, n: Node) -> tuple:
        return tuple(self.dims[d] if isinstance(d, str) else d for d in n.shape)

    def mk(self, op, dtype, src=(), arg=None) -> Expr:
        key = (op, dtype, tuple(id(s) for s in src), arg)
        e = self.cons.get(key)
        if e is None:
            e = self.cons[key] = Expr(op, dtype, tuple(src), arg)
        return e


def schedule(outputs: list[Node], dims: dict | None = None) -> Schedule:
    b = _Builder(dict(dims or {}))
    order = toposort(outputs)
    realized = _initial_realized(order, outputs)
    while True:
        try:
            return _build(b, order, outputs, realized)
        except _Realize as r:  # a reshape no view can express: materialise its source and retry
            realized.add(id(r.node))


def _initial_realized(order, outputs) -> set:
    """Kernel roots: outputs, reductions, control flow and sources; then every elementwise node whose
    consumers (seen through movement ops) end up in more than one kernel. Reuse inside one kernel
    costs nothing: the renderer computes each value once."""
    users: dict[int, list] = {}
    for n in order:
        for s in n.src:
            users.setdefault(id(s), []).append(n)
    out = {id(_unreshaped(o)) for o in outputs}
    for n in order:
        if n.op in REDUCE or n.op in (Ops.IF, Ops.LOOP, Ops.BUFFER, Ops.INPUT):
            out.add(id(n))
        if n.op in (Ops.IF, Ops.LOOP):
            out.update(id(s) for s in n.src)
    owners: dict[int, frozenset] = {}
    for n in reversed(order):
        if id(n) in out:
            owners[id(n)] = frozenset([id(n)])
            continue
        own = frozenset().union(*(owners[id(u)] for u in users.get(id(n), [])))
        if n.op in ELEMENTWISE and len(own) > 1:
            out.add(id(n))
            own = frozenset([id(n)])
        owners[id(n)] = own
    return out


def _build(b: _Builder, order, outputs, realized) -> Schedule:
    sch = Schedule()
    for n in order:
        if id(n) not in realized or n.op is Ops.CONST:
            continue
        sch.buffers[id(n)] = (n.dtype, b.shape(n))
        if n.op in (Ops.BUFFER, Ops.INPUT):
            sch.sources[id(n)] = n
        elif n.op in (Ops.IF, Ops.LOOP):
            sch.steps.append(HostStep(n, id(n), [id(s) for s in n.src]))
        else:
            sch.steps.append(_kernel(b, n, realized))
    for o in outputs:
        base = _unreshaped(o)
        sch.outputs.append(("const", o) if base.op is Ops.CONST else (id(base), b.shape(o)))
    return sch


def _unreshaped(n: Node) -> Node:
    """An output that only reshapes a value is that value's buffer, reshaped on the host."""
    while n.op is Ops.RESHAPE:
        n = n.src[0]
    return n


def _kernel(b: _Builder, root: Node, realized) -> Kernel:
    slots: dict[int, int] = {}
    inputs: list[int] = []
    memo: dict = {}

    def view_of(n: Node, mops: tuple) -> View:
        view = View.contiguous(b.shape(n))
        for m in mops:
            v = apply_movement(view, m.op.name, m.arg, b.shape(m))
            if v is None:
                raise _Realize(m.src[0])
            view = v
        return view

    def load(n: Node, mops: tuple) -> Expr:
        view = view_of(n, mops)
        if id(n) not in slots:
            slots[id(n)] = len(inputs)
            inputs.append(id(n))
        return b.mk("LOAD", n.dtype, (), (slots[id(n)], view))

    def computes(n: Node) -> bool:  # an elementwise op fused here, looking through movement ops
        while n.op in MOVEMENT and id(n) not in realized:
            n = n.src[0]
        return n.op in ELEMENTWISE and id(n) not in realized

    def build(n: Node, mops: tuple, top=False) -> Expr:
        key = (id(n), mops)
        if key in memo:
            return memo[key]
        if n.op is Ops.CONST:  # a scalar; under a PAD it reads as 0 outside the view's mask
            view = view_of(n, mops) if any(m.op is Ops.PAD for m in mops) else None
            e = b.mk("CONST", n.dtype, (), (n.arg, view if view is not None and view.mask is not None else None))
        elif id(n) in realized and not top:
            e = load(n, mops)
        elif n.op is Ops.PAD and computes(n.src[0]):
            # the padding reads as 0 whatever the fused ops would make of it (1/0 is not 0)
            inner = build(n.src[0], (n,) + mops)
            valid = b.mk("CONST", dtypes.bool_, (), (True, view_of(n.src[0], (n,) + mops)))
            e = b.mk(Ops.WHERE, n.dtype, (valid, inner, b.mk("CONST", n.dtype, (), (0, None))))
        elif n.op in MOVEMENT:
            e = build(n.src[0], (n,) + mops)
        elif n.op in ELEMENTWISE:
            e = b.mk(n.op, n.dtype, tuple(build(s, mops) for s in n.src), n.arg if n.op is Ops.CAST else None)
        else:
            raise AssertionError(f"cannot fuse {n.op.name}")
        memo[key] = e
        return e

    if root.op in REDUCE:
        src = root.src[0]
        expr = build(src, ())
        return Kernel(id(root), inputs, expr, b.shape(src), root.dtype, root.op, tuple(root.arg), b.shape(root))
    expr = build(root, (), top=True)
    return Kernel(id(root), inputs, expr, b.shape(root), root.dtype, None, (), b.shape(root))


# ---------------------------------------------------------------------------- canonical iteration space

def loads(e: Expr, acc=None) -> list:
    """The LOADs of an expression, and its CONSTs that carry a mask (both index through a View)."""
    acc = {} if acc is None else acc
    if e.op == "LOAD" or (e.op == "CONST" and e.arg[1] is not None):
        acc[id(e)] = e
    for s in e.src:
        loads(s, acc)
    return list(acc.values())


def dim_groups(k: Kernel) -> list[list[int]]:
    """Groups of adjacent iteration dims that index every load as one dim (size-1 dims dropped):
    the renderer iterates over the groups, so a contiguous elementwise kernel is 1-D at any rank."""
    views = [e.arg[1] for e in loads(k.expr)]
    red = set(k.reduce_axes)
    keep = [i for i, d in enumerate(k.shape)
            if d != 1 or any(v.mask is not None and v.mask[i] != (0, 1) for v in views)]
    groups: list[list[int]] = []
    for i in keep:
        if groups:
            j = groups[-1][-1]
            ok = (j in red) == (i in red) and all(
                (v.mask is None or (v.mask[j] == (0, v.shape[j]) and v.mask[i] == (0, v.shape[i])))
                and v.strides[j] == v.strides[i] * v.shape[i] for v in views)
            if ok:
                groups[-1].append(i)
                continue
        groups.append([i])
    return groups
