"""Render a scheduled ``Kernel`` as C source for a GPU dialect (OpenCL C, CUDA C).

One work-item computes one output element. Every number that depends on the
tensor sizes (dims, strides, offsets, pad bounds) and every constant is a
kernel argument, so the source depends only on the kernel's structure: the
same text (and the same compiled program) serves every shape. Values are SSA
temporaries, each computed once; loads are predicated by their view's mask, so
a padded read never touches memory out of range.

``render(kernel, dialect)`` returns a ``Rendered``: the function name (a hash
of the body), the source and the argument list (``("buf", id)``, ``("int", v)``,
``("float", v)``) in signature order.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from compiler.ir import dtypes
from compiler.ir.graph import Ops
from compiler.render.schedule import Expr, Kernel, dim_groups


@dataclass(frozen=True)
class Dialect:
    name: str
    kernel_prefix: str
    buf_qual: str
    gid: str
    types: dict          # dtype name -> C type
    unsigned: str        # unsigned 32-bit type, for wrapping int arithmetic
    funcs: dict          # Ops -> C function name (float math)
    neg_inf: str
    prelude: str = ""


@dataclass(frozen=True)
class Rendered:
    name: str
    src: str
    args: tuple


_ACC = {"float32": "float32", "int32": "int32", "int8": "int32", "bool": "int32"}


class _Ctx:
    def __init__(self, d: Dialect):
        self.d, self.lines, self.args, self.nvar, self.nint, self.nflt = d, [], [], 0, 0, 0
        self.sig: list[str] = []

    def ty(self, dt) -> str:
        return self.d.types[dt.name]

    def var(self, ty: str, expr: str, ind: int) -> str:
        name = f"v{self.nvar}"
        self.nvar += 1
        self.lines.append("  " * ind + f"{ty} {name} = {expr};")
        return name

    def int_param(self, v: int) -> str:
        name = f"i{self.nint}"
        self.nint += 1
        self.sig.append(f"int {name}")
        self.args.append(("int", int(v)))
        return name

    def float_param(self, v: float) -> str:
        name = f"f{self.nflt}"
        self.nflt += 1
        self.sig.append(f"float {name}")
        self.args.append(("float", float(v)))
        return name


def _split(ctx: _Ctx, flat: str, sizes: list[int], names: list[str], ind: int) -> None:
    """Decompose the flat index ``flat`` over ``sizes`` (row-major) into variables ``names``."""
    if not sizes:
        return
    pad = "  " * ind
    if len(sizes) == 1:
        ctx.lines.append(f"{pad}int {names[0]} = {flat};")
        return
    rem = f"r_{names[0]}"
    ctx.lines.append(f"{pad}int {rem} = {flat};")
    for i in range(len(sizes) - 1, 0, -1):
        s = ctx.int_param(sizes[i])
        ctx.lines.append(f"{pad}int {names[i]} = {rem} % {s}; {rem} = {rem} / {s};")
    ctx.lines.append(f"{pad}int {names[0]} = {rem};")


def render(k: Kernel, d: Dialect) -> Rendered:
    ctx = _Ctx(d)
    groups = dim_groups(k)
    red = set(k.reduce_axes)
    gsize = [math.prod(k.shape[i] for i in g) for g in groups]
    gvar = [f"x{j}" for j in range(len(groups))]
    out_g = [j for j, g in enumerate(groups) if g[0] not in red]
    red_g = [j for j, g in enumerate(groups) if g[0] in red]
    n = ctx.int_param(k.numel)
    ctx.lines.append(f"  int gid = {d.gid};")
    ctx.lines.append(f"  if (gid >= {n}) return;")
    _split(ctx, "gid", [gsize[j] for j in out_g], [gvar[j] for j in out_g], 1)
    in_types = {}
    memo: dict[int, str] = {}

    def index(view, ind) -> tuple[str, str | None]:
        terms, conds = [], []
        if view.offset:
            terms.append(ctx.int_param(view.offset))
        for j, g in enumerate(groups):
            st = view.strides[g[-1]]
            if st:
                terms.append(f"{gvar[j]}*{ctx.int_param(st)}")
            if view.mask is not None and len(g) == 1 and view.mask[g[0]] != (0, view.shape[g[0]]):
                lo, hi = view.mask[g[0]]
                conds.append(f"{gvar[j]} >= {ctx.int_param(lo)} && {gvar[j]} < {ctx.int_param(hi)}")
        return (" + ".join(terms) or "0"), (" && ".join(conds) or None)

    def emit(e: Expr, ind: int) -> str:
        if id(e) in memo:
            return memo[id(e)]
        t = ctx.ty(e.dtype)
        if e.op == "LOAD":
            slot, view = e.arg
            in_types[slot] = t
            off, cond = index(view, ind)
            v = ctx.var(t, f"in{slot}[{off}]" if cond is None else f"({cond}) ? in{slot}[{off}] : ({t})0", ind)
        elif e.op == "CONST":
            value, view = e.arg
            p = ctx.float_param(value) if e.dtype.is_float else ctx.int_param(int(value))
            cond = index(view, ind)[1] if view is not None else None
            v = ctx.var(t, f"({t}){p}" if cond is None else f"({cond}) ? ({t}){p} : ({t})0", ind)
        else:
            v = ctx.var(t, _op(d, e, [emit(s, ind) for s in e.src], t), ind)
        memo[id(e)] = v
        return v

    t_out = ctx.ty(k.dtype)
    if k.reduce_op is None:
        v = emit(k.expr, 1)
        ctx.lines.append(f"  out[gid] = {v};")
    else:
        acc_t = ctx.d.types[_ACC[k.dtype.name]]
        ctx.lines.append(f"  {acc_t} acc = {_init(d, k)};")
        r = ctx.int_param(math.prod(gsize[j] for j in red_g))
        ctx.lines.append(f"  for (int rr = 0; rr < {r}; rr++) {{")
        _split(ctx, "rr", [gsize[j] for j in red_g], [gvar[j] for j in red_g], 2)
        v = emit(k.expr, 2)
        ctx.lines.append("    " + _combine(d, k, v))
        ctx.lines.append("  }")
        ctx.lines.append(f"  out[gid] = ({t_out})acc;")
    bufs = [f"{d.buf_qual} {t_out}* out"] + [
        f"{d.buf_qual} const {in_types.get(i, 'float')}* in{i}" for i in range(len(k.inputs))]
    args = tuple([("buf", k.out)] + [("buf", b) for b in k.inputs] + ctx.args)
    body = "(" + ", ".join(bufs + ctx.sig) + ") {\n" + "\n".join(ctx.lines) + "\n}\n"
    name = "k" + hashlib.sha1(body.encode()).hexdigest()[:16]
    return Rendered(name, f"{d.kernel_prefix} {name}{body}", args)


def _op(d: Dialect, e: Expr, a: list[str], t: str) -> str:
    op, dt = e.op, e.dtype
    u = d.unsigned
    if op in d.funcs:
        return f"{d.funcs[op]}({a[0]})"
    if op is Ops.NEG:
        return f"({t})(0u - ({u}){a[0]})" if dt.is_int else f"-{a[0]}"
    if op is Ops.RECIP:
        return f"1.0f / {a[0]}"
    if op is Ops.CAST:
        src = e.src[0].dtype
        if dt == dtypes.bool_:
            return f"({t})({a[0]} != 0)"
        if dt == dtypes.int8 and src.is_float:
            return f"({t})(int){a[0]}"
        return f"({t}){a[0]}"
    if op in (Ops.ADD, Ops.MUL):
        sym = "+" if op is Ops.ADD else "*"
        if dt == dtypes.bool_:
            return f"({t})({a[0]} {'|' if op is Ops.ADD else '&'} {a[1]})"
        if dt.is_int:
            return f"({t})(({u}){a[0]} {sym} ({u}){a[1]})"
        return f"{a[0]} {sym} {a[1]}"
    if op is Ops.MAX:
        if dt.is_float:
            return f"({a[0]} != {a[0]} || {a[0]} > {a[1]}) ? {a[0]} : {a[1]}"
        return f"{a[0]} > {a[1]} ? {a[0]} : {a[1]}"
    if op is Ops.CMPLT:
        return f"({t})({a[0]} < {a[1]})"
    if op is Ops.CMPEQ:
        return f"({t})({a[0]} == {a[1]})"
    if op is Ops.WHERE:
        return f"{a[0]} ? {a[1]} : {a[2]}"
    raise NotImplementedError(f"no C rendering for {op}")


def _init(d: Dialect, k: Kernel) -> str:
    dt = k.dtype
    if k.reduce_op is Ops.SUM:
        return "0"
    if k.reduce_op is Ops.PROD:
        return "1"
    if dt.is_float:
        return d.neg_inf
    return {"int32": "(-2147483647 - 1)", "int8": "-128", "bool": "0"}[dt.name]


def _combine(d: Dialect, k: Kernel, v: str) -> str:
    dt, op, u = k.dtype, k.reduce_op, d.unsigned
    if op is Ops.RMAX:
        if dt.is_float:
            return f"acc = ({v} != {v} || {v} > acc) ? {v} : acc;"
        return f"acc = {v} > acc ? {v} : acc;"
    if dt == dtypes.bool_:
        return f"acc = acc {'|' if op is Ops.SUM else '&'} {v};"
    sym = "+" if op is Ops.SUM else "*"
    if dt.is_int:
        return f"acc = (int)(({u})acc {sym} ({u}){v});"
    return f"acc = acc {sym} {v};"
