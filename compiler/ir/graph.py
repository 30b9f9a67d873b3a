"""The graph IR: one ``Ops`` enum, a frozen ``Node(op, dtype, src, arg)``, a checker.

Every node carries its dtype and its shape. The shape is inferred (and the node
validated) when the node is built, so a bad graph cannot be constructed: the
``IRError`` names the op and the shapes involved. ``verify`` re-checks a whole
graph (used between passes). A shape entry is an int, or a ``str`` naming a
dynamic dimension (bound when the graph runs, e.g. ``("N", 5)``).

Primitives (everything in ``compiler.frontend.tensor`` is composed from these):

* sources   CONST (scalar, shape ()), BUFFER (a numpy array), INPUT (named placeholder)
* unary     NEG RECIP SQRT EXP LOG SIN ATAN, CAST
* binary    ADD MUL MAX CMPLT CMPEQ   (operands of equal shape and dtype)
* ternary   WHERE
* reduce    SUM PROD RMAX             (arg = axes; reduced axes kept as size 1)
* movement  RESHAPE PERMUTE EXPAND PAD SHRINK FLIP
* control   IF    src = (pred, *operands), arg = (then Graph, else Graph); both bodies take
                  the operands (a bool scalar ``pred`` picks one at run time)
            LOOP  src = (init, *scanned, *invariants), arg = (body Graph, number scanned);
                  the body takes (carry, one row of each scanned tensor, *invariants) and
                  returns the next carry; the scanned tensors' shared leading dimension
                  (static or dynamic) is the trip count; the node's value is the last carry
* composite COMPOSITE  a whole layer found by ``compiler.ir.patterns`` (softmax, LayerNorm, attention...);
                  ``arg`` (a ``patterns.Composite``) gives its shape rule and its meaning

Bodies are closed: their leaves are their own INPUTs, CONSTs and BUFFERs.
"""
from __future__ import annotations

import contextlib
import enum
import math
import os
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compiler.ir import dtypes
from compiler.ir.dtypes import DType


class Ops(enum.Enum):
    CONST = enum.auto(); BUFFER = enum.auto(); INPUT = enum.auto()
    NEG = enum.auto(); RECIP = enum.auto(); SQRT = enum.auto(); EXP = enum.auto()
    LOG = enum.auto(); SIN = enum.auto(); ATAN = enum.auto(); CAST = enum.auto()
    ADD = enum.auto(); MUL = enum.auto(); MAX = enum.auto(); CMPLT = enum.auto(); CMPEQ = enum.auto()
    WHERE = enum.auto()
    SUM = enum.auto(); PROD = enum.auto(); RMAX = enum.auto()
    RESHAPE = enum.auto(); PERMUTE = enum.auto(); EXPAND = enum.auto()
    PAD = enum.auto(); SHRINK = enum.auto(); FLIP = enum.auto()
    IF = enum.auto(); LOOP = enum.auto()
    COMPOSITE = enum.auto()


SOURCE = {Ops.CONST, Ops.BUFFER, Ops.INPUT}
UNARY = {Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.EXP, Ops.LOG, Ops.SIN, Ops.ATAN}
FLOAT_ONLY = UNARY - {Ops.NEG}
BINARY = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPEQ}
COMPARE = {Ops.CMPLT, Ops.CMPEQ}
REDUCE = {Ops.SUM, Ops.PROD, Ops.RMAX}
MOVEMENT = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
CONTROL = {Ops.IF, Ops.LOOP}


class IRError(ValueError):
    """A malformed node: names the op, the operand shapes and what is wrong."""

    def __init__(self, op, shapes, msg: str):
        name = op.name if isinstance(op, Ops) else str(op)
        shp = ", ".join(fmt_shape(s) for s in shapes)
        super().__init__(f"{name}: {msg} (operand shapes: {shp})")


def fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def is_static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def static_prod(shape) -> int:
    return math.prod(d for d in shape if isinstance(d, int))


@dataclass(frozen=True, eq=False)
class Graph:
    """A closed subgraph (a loop body or a branch): INPUT placeholders in, one node out."""
    inputs: tuple
    output: "Node"

    def __str__(self) -> str:
        return to_text([self.output], inputs=self.inputs)


#: Source folders of the tetrachip packages: a node's ``site`` is the first frame outside them.
_PKG_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), d)
                  + os.sep for d in ("isa", "sim", "rtl", "verify", "compiler", "runtime", "tetrachip"))


_in_pkg: dict[str, bool] = {}            # file name -> is it part of a tetrachip package
_recording = [0]                         # > 0: new nodes record their site (``recording_sites``)


@contextlib.contextmanager
def recording_sites():
    """Nodes built inside record their ``site`` (the chip compiler's tracing turns this on: the frame
    walk costs about a microsecond per node, which a training loop on the numpy device need not pay)."""
    _recording[0] += 1
    try:
        yield
    finally:
        _recording[0] -= 1


def caller_site(depth: int = 2) -> tuple | None:
    """``(file, line)`` of the first stack frame outside the tetrachip packages (the user's code that
    built a node), starting ``depth`` frames up; None when there is none."""
    f = sys._getframe(depth)
    while f is not None:
        fn = f.f_code.co_filename
        inside = _in_pkg.get(fn)
        if inside is None:
            inside = _in_pkg[fn] = fn.startswith(_PKG_DIRS)
        if not inside:
            return fn, f.f_lineno
        f = f.f_back
    return None


def fmt_site(site) -> str:
    """``model.py:12`` for a node's ``site``."""
    return f"{os.path.basename(site[0])}:{site[1]}" if site else "?"


@dataclass(frozen=True, eq=False)
class Node:
    """One IR operation. Identity is object identity; ``shape`` is inferred and checked at construction.
    ``site`` is where the user's code built it (``caller_site``, recorded inside ``recording_sites``);
    a rewrite passes the original's on."""
    op: Ops
    dtype: DType
    src: tuple = ()
    arg: Any = None
    shape: tuple = field(init=False, compare=False)
    site: tuple | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "shape", infer_shape(self.op, self.dtype, self.src, self.arg))
        if self.site is None and _recording[0]:
            object.__setattr__(self, "site", caller_site(3))

    def __repr__(self) -> str:
        return f"Node({self.op.name}, {self.dtype}, shape={fmt_shape(self.shape)}, nsrc={len(self.src)})"


def _err(op, src, msg):
    return IRError(op, [s.shape for s in src], msg)


def infer_shape(op: Ops, dtype: DType, src: tuple, arg) -> tuple:  # noqa: C901 (one table of rules)
    if not isinstance(dtype, DType):
        raise _err(op, src, f"dtype must be a DType, got {dtype!r}")
    if op is Ops.CONST:
        if src or not isinstance(arg, (bool, int, float)):
            raise _err(op, src, f"CONST takes no sources and a Python scalar arg, got {arg!r}")
        return ()
    if op is Ops.BUFFER:
        if not isinstance(arg, np.ndarray) or np.dtype(arg.dtype) != np.dtype(dtype.np):
            raise _err(op, src, f"BUFFER arg must be a numpy array of {dtype}")
        return tuple(arg.shape)
    if op is Ops.INPUT:
        name, shape = arg
        if not isinstance(name, str) or not all(isinstance(d, (int, str)) for d in shape):
            raise _err(op, src, f"INPUT arg must be (name, shape), got {arg!r}")
        return tuple(shape)
    if op in UNARY or op is Ops.CAST:
        if len(src) != 1:
            raise _err(op, src, "takes one source")
        if op is Ops.CAST:
            if arg != dtype:
                raise _err(op, src, f"CAST arg {arg} differs from node dtype {dtype}")
        elif src[0].dtype != dtype:
            raise _err(op, src, f"source dtype {src[0].dtype} differs from node dtype {dtype}")
        elif op in FLOAT_ONLY and not dtype.is_float:
            raise _err(op, src, f"needs a float operand, got {dtype}")
        return src[0].shape
    if op in BINARY:
        if len(src) != 2:
            raise _err(op, src, "takes two sources")
        a, b = src
        if a.shape != b.shape:
            raise _err(op, src, "operand shapes differ (broadcast first)")
        if a.dtype != b.dtype:
            raise _err(op, src, f"operand dtypes differ: {a.dtype} vs {b.dtype}")
        want = dtypes.bool_ if op in COMPARE else a.dtype
        if dtype != want:
            raise _err(op, src, f"result dtype must be {want}, got {dtype}")
        return a.shape
    if op is Ops.WHERE:
        c, x, y = src
        if c.dtype != dtypes.bool_:
            raise _err(op, src, f"condition must be bool, got {c.dtype}")
        if not (c.shape == x.shape == y.shape):
            raise _err(op, src, "condition and branches must have one shape (broadcast first)")
        if not (x.dtype == y.dtype == dtype):
            raise _err(op, src, f"branch dtypes {x.dtype}, {y.dtype} must equal {dtype}")
        return x.shape
    if op in REDUCE:
        (x,) = src
        if x.dtype != dtype:
            raise _err(op, src, f"source dtype {x.dtype} differs from {dtype}")
        axes = tuple(arg)
        if sorted(set(axes)) != list(axes) or any(not 0 <= a < len(x.shape) for a in axes):
            raise _err(op, src, f"axes {axes} must be sorted, unique and in range")
        return tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if op in MOVEMENT:
        (x,) = src
        if x.dtype != dtype:
            raise _err(op, src, f"source dtype {x.dtype} differs from {dtype}")
        return _movement_shape(op, x, arg)
    if op is Ops.COMPOSITE:
        if not hasattr(arg, "shape_of") or not src:
            raise _err(op, src, f"COMPOSITE needs sources and a compiler.ir.patterns.Composite arg, got {arg!r}")
        try:
            return arg.shape_of(src)
        except ValueError as e:
            raise _err(op, src, f"{arg}: {e}") from None
    if op is Ops.IF:
        then_g, else_g = arg
        pred, *ops = src
        if pred.shape != () or pred.dtype != dtypes.bool_:
            raise _err(op, src, f"predicate must be a bool scalar, got {pred.dtype}{fmt_shape(pred.shape)}")
        for g in (then_g, else_g):
            _check_body_inputs(op, src, g, ops)
        t, e = then_g.output, else_g.output
        if t.shape != e.shape or t.dtype != e.dtype:
            raise _err(op, src, f"branches differ: {t.dtype}{fmt_shape(t.shape)} vs {e.dtype}{fmt_shape(e.shape)}")
        if dtype != t.dtype:
            raise _err(op, src, f"node dtype {dtype} differs from branch dtype {t.dtype}")
        return t.shape
    if op is Ops.LOOP:
        body, n_scan = arg
        carry, scans, consts = src[0], src[1:1 + n_scan], src[1 + n_scan:]
        if n_scan < 1:
            raise _err(op, src, "needs at least one scanned tensor")
        lens = {s.shape[0] if s.shape else None for s in scans}
        if len(lens) != 1 or None in lens:
            raise _err(op, src, "scanned tensors must share their leading dimension")
        slices = [Node(Ops.INPUT, s.dtype, (), ("_", s.shape[1:])) for s in scans]
        _check_body_inputs(op, src, body, [carry, *slices, *consts])
        out = body.output
        if out.shape != carry.shape or out.dtype != carry.dtype or dtype != carry.dtype:
            raise _err(op, src, f"body returns {out.dtype}{fmt_shape(out.shape)}, carry is "
                       f"{carry.dtype}{fmt_shape(carry.shape)}")
        if not is_static(carry.shape):
            raise _err(op, src, "the carry must have a static shape")
        return carry.shape
    raise _err(op, src, "unknown op")


def _check_body_inputs(op, src, g: Graph, operands):
    if len(g.inputs) != len(operands):
        raise _err(op, src, f"body takes {len(g.inputs)} inputs, given {len(operands)}")
    for i, o in zip(g.inputs, operands):
        if i.op is not Ops.INPUT or i.shape != o.shape or i.dtype != o.dtype:
            raise _err(op, src, f"body input {i.dtype}{fmt_shape(i.shape)} does not match operand "
                       f"{o.dtype}{fmt_shape(o.shape)}")


def _movement_shape(op: Ops, x: Node, arg) -> tuple:
    s, src = x.shape, (x,)
    if op is Ops.RESHAPE:
        new = tuple(arg)
        if any(isinstance(d, int) and d < 0 for d in new):
            raise _err(op, src, f"negative size in {fmt_shape(new)}")
        dyn_old = [d for d in s if isinstance(d, str)]
        dyn_new = [d for d in new if isinstance(d, str)]
        lead_ok = s[:len(dyn_old)] == tuple(dyn_old) and new[:len(dyn_new)] == tuple(dyn_new)
        if dyn_old != dyn_new or not lead_ok or static_prod(s) != static_prod(new):
            raise _err(op, src, f"cannot reshape to {fmt_shape(new)}")
        return new
    if op is Ops.PERMUTE:
        if sorted(arg) != list(range(len(s))):
            raise _err(op, src, f"{tuple(arg)} is not a permutation of {len(s)} axes")
        return tuple(s[i] for i in arg)
    if op is Ops.EXPAND:
        new = tuple(arg)
        if len(new) != len(s) or any(a != b and a != 1 for a, b in zip(s, new)):
            raise _err(op, src, f"cannot expand to {fmt_shape(new)}")
        return new
    if op is Ops.PAD:
        if len(arg) != len(s) or any(b < 0 or a < 0 for b, a in arg):
            raise _err(op, src, f"bad padding {arg}")
        if any(isinstance(d, str) and p != (0, 0) for d, p in zip(s, arg)):
            raise _err(op, src, "cannot pad a dynamic dimension")
        return tuple(d if p == (0, 0) else d + p[0] + p[1] for d, p in zip(s, arg))
    if op is Ops.SHRINK:
        if len(arg) != len(s):
            raise _err(op, src, f"bad bounds {arg}")
        out = []
        for d, (b, e) in zip(s, arg):
            if isinstance(d, str):
                if (b, e) != (0, d):
                    raise _err(op, src, "cannot shrink a dynamic dimension")
                out.append(d)
            elif not 0 <= b <= e <= d:
                raise _err(op, src, f"bounds {arg} out of range")
            else:
                out.append(e - b)
        return tuple(out)
    if op is Ops.FLIP:
        if any(not 0 <= a < len(s) for a in arg) or len(set(arg)) != len(arg):
            raise _err(op, src, f"bad flip axes {arg}")
        if any(isinstance(s[a], str) for a in arg):
            raise _err(op, src, "cannot flip a dynamic dimension")
        return s
    raise AssertionError(op)


# ---------------------------------------------------------------------------- walking, printing, checking

def toposort(outputs) -> list[Node]:
    """All nodes reachable from ``outputs``, each after its sources (iterative: deep graphs are fine)."""
    order, seen, stack = [], set(), [(n, False) for n in reversed(list(outputs))]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        stack.extend((s, False) for s in reversed(n.src) if id(s) not in seen)
    return order



def substitute(outputs, mapping: dict) -> list[Node]:
    """``outputs`` with the nodes whose ids are keys of ``mapping`` replaced by its values; the
    nodes above them are rebuilt, every other node is kept as it is."""
    new: dict[int, Node] = {}
    for nd in toposort(outputs):
        if id(nd) in mapping:
            new[id(nd)] = mapping[id(nd)]
            continue
        src = tuple(new[id(s)] for s in nd.src)
        new[id(nd)] = nd if all(a is b for a, b in zip(src, nd.src)) else \
            Node(nd.op, nd.dtype, src, nd.arg, site=nd.site)
    return [new[id(o)] for o in outputs]

def _fmt_arg(n: Node) -> str:
    if n.op is Ops.BUFFER:
        a = n.arg
        return f"<{a.size} values>" if a.size > 4 else np.array2string(a.reshape(-1), separator=",")
    if n.op in CONTROL:
        return "<body>"
    return "" if n.arg is None else str(n.arg)


def to_text(outputs, inputs=()) -> str:
    """One line per node: ``%i = OP dtype(shape) %a %b  arg``; bodies are printed indented after their node."""
    order = toposort(outputs)
    names = {id(n): f"%{i}" for i, n in enumerate(order)}
    lines = []
    for n in order:
        srcs = " ".join(names[id(s)] for s in n.src)
        lines.append(f"{names[id(n)]} = {n.op.name} {n.dtype}{fmt_shape(n.shape)} {srcs}  {_fmt_arg(n)}".rstrip())
        bodies = n.arg if n.op is Ops.IF else (n.arg[0],) if n.op is Ops.LOOP else ()
        for g in bodies:
            lines.extend("    " + ln for ln in str(g).splitlines())
    lines.append("return " + " ".join(names[id(o)] for o in outputs))
    return "\n".join(lines)


_checked: "weakref.WeakSet[Node]" = weakref.WeakSet()


def verify(outputs, _inputs=None) -> None:
    """Re-check every node reachable from ``outputs``: its stored shape matches its rule, INPUT
    names are unique, and every control-flow body is closed (its leaves are its own INPUTs,
    CONSTs or BUFFERs). Raises IRError. Nodes are immutable, so a node's own rule is re-run
    only the first time it is seen; the graph-level checks run every time."""
    names = {}
    for n in toposort(outputs):
        if n not in _checked:
            if infer_shape(n.op, n.dtype, n.src, n.arg) != n.shape:
                raise _err(n.op, n.src, f"stored shape {fmt_shape(n.shape)} disagrees with the op's rule")
            _checked.add(n)
        if n.op is Ops.INPUT:
            if _inputs is not None and not any(n is i for i in _inputs):
                raise _err(n.op, (), f"body refers to an INPUT {n.arg[0]!r} that is not its own")
            if names.setdefault(n.arg[0], n) is not n and _inputs is None:
                other = names[n.arg[0]]
                if other.shape != n.shape or other.dtype != n.dtype:
                    raise _err(n.op, (), f"two inputs named {n.arg[0]!r} with different types")
        if n.op is Ops.IF:
            for g in n.arg:
                verify([g.output], g.inputs)
        if n.op is Ops.LOOP:
            verify([n.arg[0].output], n.arg[0].inputs)


def inputs_of(outputs) -> dict[str, Node]:
    """The named INPUT placeholders of a top-level graph."""
    return {n.arg[0]: n for n in toposort(outputs) if n.op is Ops.INPUT}
