"""Control flow on the chip: the frontend's ``cond`` / ``loop`` / ``while_loop`` lowered to the
scalar unit's branches (``compile_control``, reached from ``tc.compile``); ``until_converged``, the
hand-built loop that runs until a value converges, lives in ``compiler.lower.control_converge``.

**Frontend control flow** (``compile_control``). The model holds one ``cond`` or ``loop`` node;
its operands are model inputs, constants, or computed from the inputs by chip kernels (compiled
together as the ``pre`` body, which runs first; its results are copied to where the bodies read
them); kernels after it (the ``post`` body) read its result and the inputs and give the model's
outputs. Each body (a branch, a loop body) is compiled by the ordinary
pipeline (lift, quantize, tile, plan, emit) into its own DRAM region, and the glue here stitches
the bodies' programs with scalar branches into one ``isa.builder.ProgramBuilder``. The control
flow reserves its registers there (``isa.regs``: ``TRIP_REG`` r14, ``BRANCH_TRIPS`` r15 in a
loop over a cond, ``DYN_REG`` r15 for a symbolic trip count); a body that uses one is refused:

* ``cond(pred, f, g, *xs)``: the predicate is evaluated on the chip, then only the taken branch
  runs (``blt``/``bge`` around the other one); both write one result buffer.
* ``loop(body, init, *xs)``: ``r14`` counts trips (``blt r14, rT, top``); row ``i`` of each
  scanned tensor is copied (``dram[base + r1]``, ``r1 = r14 * row bytes``) into the body's input
  and the body's result is copied over the carry after each trip.
* ``loop`` whose body is ``cond(p(carry), f, g, carry, *rows)``: per trip the predicate on the
  carry picks the branch (``r15`` counts the trips that took ``f``).
* ``while_loop(p, f, c0, max_iter)`` (a ``loop`` whose body is ``cond(p(c), f, identity, c)``):
  once ``p`` is false the carry never changes again, so the chip exits at the first false
  predicate: a data-dependent trip count, read back from DRAM (``res.ints["trips"]``).

A predicate is a threshold on a full reduction (``sum``/``max``) of an elementwise function of
one or two tensors the chip holds (``x``, ``|x|``, ``x - y``, ``|x - y|``; found by probing the
graph numerically, so any spelling works); ``x``/``y`` are the operands, or for ``while_loop`` the
carry and ``f(carry)``. On the chip: SPM rows (lanes past a row's length zeroed by the DMA; for ``max(x)`` the
last row overlaps the previous one instead), ``vsub``/
``vabs`` into ACC, a ``vmax``/``vadd`` chain over rows, ``vrmax``/``vrsum`` with
``signal=scalar``, ``sld`` into ``r1`` and a branch against the integer threshold ``T``: the
float predicate evaluated at ``R * scale`` for every integer reduction ``R`` is a step at ``T``
(checked). The quantized model is defined by that integer rule; ``cm.reference`` evaluates it in
numpy and the chip's result is bit-exact against it. Carry and body result share one int8 scale
(calibrated over every trip), as do a cond's two results.

Not lowered (``ChipCompileError``): more than one control node, operands computed by ops the
chip cannot run, deeper nesting than a cond as a loop body (or the while form), captured non-constant
tensors, a symbolic dimension other than a scan loop's length (``dynamic={"T": max}``: the trip
count is ``r15``, written at launch), scanned rows stored padded or reordered in the body's
input, predicates that are not a threshold on such a reduction. Values move between buffers of
different layouts (a convolution's bordered input) with ``control_glue.move_value``.

The predicate machinery is ``compiler.lower.control_pred``, the bodies and glue code
``compiler.lower.control_glue``; ``until_converged`` (``compiler.lower.control_converge``) is the hand-built
loop this lowering grew from.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from isa.builder import ProgramBuilder, RegisterClash
from isa.config import ChipConfig
from isa.ints import align_up
from isa.program import DRAM_ALIGN
from isa.regs import BRANCH_TRIPS, DYN_REG, TRIP_REG
from isa.regs import ControlGlue as G

from compiler.ir.evaluate import evaluate
from compiler.ir.graph import CONTROL, Node, Ops, substitute, toposort
from compiler.lower.compiled import Compiled, named_feeds, unpack_inputs
from compiler.lower.control_glue import (Body, BufferLayout, compile_body, copy_bytes, inline_body, layout_of,
                                         move_value, phys_offsets_of, pred_code, store_counter)
from compiler.lower.control_pred import (Pred, control_error, float_eval, input_ids, match_pred, structural_keys,
                                         threshold)
from compiler.lower.dynamic import host_feeds
from compiler.lower.quantize import dequantize_outputs, quantize_array
from compiler.lower.schedule import ChipCompileError, TensorInfo, default_perm

# ------------------------------------------------------------------------------- the model

@dataclass
class _Operand:
    name: str | None         # model input name, or None for a constant
    const: np.ndarray | None
    info: TensorInfo         # layout the host writes (unpadded, default order)
    scale: float
    addrs: list              # DRAM addresses the host writes it to (a computed operand: the chip copies it)
    pre: int | None = None   # computed from the inputs: output ``pre`` of the model's ``pre`` body


@dataclass
class ControlModel(Compiled):
    """A compiled model whose output is a ``cond``/``loop``: runs on ``Device("sim")`` like a
    ``CompiledModel``; ``res.ints["trips"]`` (loops) / ``res.ints["taken"]`` (cond, 1 = then)."""
    config: ChipConfig
    program: object
    kind: str                          # "cond" | "loop" | "while"
    bodies: dict
    operands: list
    out_info: BufferLayout
    out_addr: int
    out_scale: float
    out_shape: tuple
    counter_addr: int
    input_names: list
    single: bool
    pred: Pred | None = None
    trips: int = 0                     # loop: static trips; while: max_iter
    identity: str | None = None        # cond: which branch is the identity
    arena: int = 0
    pre: Body | None = None           # kernels computing operands from the inputs (run first)
    pre_inputs: list = field(default_factory=list)   # host writes of the pre kernels' inputs
    post: Body | None = None          # kernels after the cond/loop (their outputs are the model's)
    post_inputs: list = field(default_factory=list)
    branch_args: list = field(default_factory=list)  # loop-cond: loop argument of each branch argument
    compile_s: float = 0.0
    timings: dict = field(default_factory=dict)
    search_report: list | None = None
    dynamic: object = None
    n_outputs: int = 1
    graph: list = field(default_factory=list)        # the traced outputs: the float model

    def feeds(self, inputs) -> dict:
        return named_feeds(self.input_names, inputs)

    def dram_writes(self, feeds: dict) -> list:
        out = [(0, np.zeros(self.arena, np.uint8))]
        for b in list(self.bodies.values()) + [b for b in (self.pre, self.post) if b is not None]:
            out.append((b.cm.const_base, b.cm.const_image))
        for op in self.pre_inputs + self.post_inputs:  # the inputs of the kernels before/after
            out += [(a, op.info.to_phys(_host_int(op, feeds))) for a in op.addrs]
        for op, xq in zip(self.operands, self._operand_ints(feeds)):
            if op.pre is None:
                out += [(a, op.info.to_phys(xq)) for a in op.addrs]
        return out

    def _operand_ints(self, feeds: dict) -> list:
        pre = None
        if self.pre is not None:
            pre = self.pre.run_all({op.name: _host_int(op, feeds) for op in self.pre_inputs})
        return [pre[op.pre] if op.pre is not None else _host_int(op, feeds) for op in self.operands]

    def read_outputs(self, read) -> tuple:
        flat = read(self.out_addr, self.out_info.nbytes, np.int8)
        q = np.asarray(flat).reshape(-1)[self.out_info.offsets].reshape(self.out_shape)
        n = int(read(self.counter_addr, 1, np.int32)[0])
        out = [(q.astype(np.float64) * self.out_scale).astype(np.float32).reshape(self.out_shape)]
        ints = {"out": q, ("taken" if self.kind == "cond" else "trips"): n}
        if self.kind == "loop-cond":
            ints["then_trips"] = int(read(self.counter_addr + 4, 1, np.int32)[0])
        if self.post is not None:
            out, post_ints = self.post.cm.read_outputs(read)
            ints["post"] = post_ints
        return out, ints

    def reference_run(self, feeds: dict) -> tuple:
        """The quantized model in numpy: (outputs, {"trips" | "taken": n, "out": ints})."""
        feeds, dyn_n = self._launch_feeds(feeds)
        xs = self._operand_ints(feeds)
        if self.kind == "cond":
            p = self.pred
            leaves = [xs[int(t)] for t in p.leaves]
            flag = p.value(p.reduce(leaves[0], leaves[1] if len(leaves) > 1 else None))
            br = "then" if flag else "else"
            res = xs[0] if self.identity == br else self.bodies[br].run(dict(enumerate(xs)))
            info = {"taken": int(flag)}
        elif self.kind == "loop-cond":
            c, nthen = xs[0], 0
            for i in range(self.trips):
                flag = self.pred.value(self.pred.reduce(c, None))
                br = "then" if flag else "else"
                nthen += int(flag)
                if self.identity != br:
                    c = self.bodies[br].run({k: (c if j == 0 else xs[j][i]) for k, j in enumerate(self.branch_args)})
            res, info = c, {"trips": self.trips, "then_trips": nthen}
        else:
            body = self.bodies["body"]
            c, n = xs[0], 0
            if self.kind == "loop":
                for i in range(self.trips if dyn_n is None else dyn_n):
                    c = body.run({0: c, **{j + 1: x[i] for j, x in enumerate(xs[1:])}})
                    n += 1
            else:
                p = self.pred
                while n < self.trips:
                    t = body.run({0: c})
                    tags = {"c": c, "f": t}
                    leaves = [tags[x] for x in p.leaves]
                    if not p.value(p.reduce(leaves[0], leaves[1] if len(leaves) > 1 else None)):
                        break
                    c, n = t, n + 1
            res, info = c, {"trips": n}
        res = np.asarray(res, np.int8).reshape(self.out_shape)
        outs = [(res.astype(np.float64) * self.out_scale).astype(np.float32)]
        if self.post is not None:
            ints = {op.name: _host_int(op, feeds) for op in self.post_inputs}
            vals = self.post.run_vals(dict(ints, ctl=res))
            outs = dequantize_outputs(self.post.q, vals)
        return outs, dict(info, out=res)

    def reference(self, *inputs) -> list:
        return self.reference_run(self.feeds(unpack_inputs(inputs)))[0]

    def float_reference(self, *inputs) -> list:
        """The traced graph (``cond``/``loop`` included) on the reference evaluator; with a symbolic
        length, its inputs declared at the length given."""
        feeds, outs = self.feeds(unpack_inputs(inputs)), self.graph
        if self.dynamic is not None:
            host_feeds(self.dynamic, feeds)              # the length is within 1..max
            outs = substitute(outs, {id(n): Node(Ops.INPUT, n.dtype, (), (n.arg[0], feeds[n.arg[0]].shape))
                                     for n in toposort(outs)
                                     if n.op is Ops.INPUT and n.arg[0] in self.dynamic.in_axes})
        return [np.asarray(v, np.float32) for v in evaluate(outs, feeds)]

    def _launch_feeds(self, feeds: dict) -> tuple:
        """Feeds padded to the symbolic maximum and the length (``None`` without a symbol)."""
        if self.dynamic is None:
            return feeds, None
        return host_feeds(self.dynamic, feeds)

    def summary(self) -> str:
        lines = [f"control model ({self.kind}) for {self.config.name}: {len(self.program)} instructions"]
        for k, b in self.bodies.items():
            lines.append(f"  {k}: " + b.cm.summary().replace("\n", "\n    "))
        return "\n".join(lines)


def _host_int(op: _Operand, feeds: dict) -> np.ndarray:
    if op.name is None:
        x = op.const
    else:
        if op.name not in feeds:
            raise ChipCompileError(f"no value for input {op.name!r}")
        x = np.asarray(feeds[op.name])
        if x.shape != op.info.shape:
            raise ChipCompileError(f"input {op.name!r}: shape {x.shape}, the model was compiled for "
                                   f"{op.info.shape}")
    return quantize_array(x, op.scale)


def _operand(node: Node, names: list) -> tuple:
    """(input name, constant value, computed): an operand is a model input, a constant, or computed
    from the inputs by chip kernels (the ``pre`` body)."""
    if node.op is Ops.INPUT and node.arg[0] in names:
        return node.arg[0], None, False
    if not input_ids(node):
        return None, np.asarray(float_eval(node, {}), np.float32), False
    return None, None, True


def _value(op: tuple, node: Node, feeds: dict) -> np.ndarray:
    name, c, computed = op
    if computed:
        return np.asarray(float_eval(node, {k: v for k, v in feeds.items()}), np.float32)
    return feeds[name] if name is not None else c


def _pre_kernels(cm, nodes: list, ops: list, calib: list, cfg, searcher, per_channel: bool,
                 b: ProgramBuilder) -> None:
    """Compile the operands computed from the inputs (one ``pre`` body at ``cm.arena``), emit it
    and the copies of its results to each operand's destinations into ``b``."""
    idx = [j for j, o in enumerate(ops) if o[2]]
    if not idx:
        return
    pre = compile_body(None, calib, {}, [cm.operands[j].scale for j in idx], cfg, cm.arena, searcher, per_channel,
                       "the kernels computing the cond/loop operands", outputs=[nodes[j] for j in idx])
    cm.pre, cm.arena = pre, pre.end
    for name, (t, addr) in pre.ins.items():
        cm.pre_inputs.append(_Operand(name, None, pre.tensor(t), pre.q.scales[t], [addr]))
    inline_body(b, pre, "pre")
    for i, j in enumerate(idx):
        op = cm.operands[j]
        t, view, addr = pre.outs[i]
        op.pre = i
        dst = op.info if isinstance(op.info, BufferLayout) else layout_of(op.info)
        for a in op.addrs:
            move_value(b, addr, layout_of(pre.tensor(t), view), a, dst, cfg)


def _amax(vals) -> float:
    m = max((float(np.max(np.abs(v))) if np.size(v) else 0.0) for v in vals)
    return m / 127.0 if m > 0 else 1.0


def compile_control(outputs: list, names: list, single: bool, calib: list, cfg, *, per_channel=True,
                    search=False, search_budget_s=20.0, cache_dir=None, t0=None, spec=None) -> ControlModel:
    """``spec`` (compiler.lower.dynamic.DynSpec): a ``loop`` over a symbolic length (axis 0 of its scanned
    inputs) runs ``n`` trips, ``n`` written by the host into ``DYN_REG``: one binary for every length."""
    t0 = time.perf_counter() if t0 is None else t0
    ctl = [n for n in toposort(list(outputs)) if n.op in CONTROL]
    node = ctl[-1]
    if any(n.op in CONTROL for n in toposort(list(node.src))) or len(ctl) != 1:
        raise control_error(f"the chip lowers one tc.cond / tc.loop per model, this one has {len(ctl)}")
    if not all(isinstance(d, int) for d in node.shape) or any(
            not all(isinstance(d, int) for d in s.shape) for s in node.src):
        raise control_error("dynamic dimensions in the graph: declare them with tc.compile(..., dynamic={...})")
    if spec is not None:
        scanned = node.src[1:1 + node.arg[1]] if node.op is Ops.LOOP else []
        if node.op is not Ops.LOOP or list(outputs) != [node] or not scanned or any(
                s.op is not Ops.INPUT or spec.in_axes.get(s.arg[0]) != 0 for s in scanned) or any(
                n.op is Ops.INPUT and n.arg[0] in spec.in_axes and n not in scanned for n in toposort([node])):
            raise control_error(f"a symbolic dimension ({spec.symbol}) with control flow is lowered only as the "
                                "length of a loop's scanned inputs (axis 0, model inputs, the loop being the "
                                "model's output)")
    searcher = None
    if search:
        from compiler.lower.search import Searcher
        searcher = Searcher(cfg, search_budget_s, cache_dir)
    b = ProgramBuilder(cfg)
    b.reserve(TRIP_REG, "the control flow's trip counter / branch flag")   # no body may use it
    try:
        if node.op is Ops.IF:
            cm = _build_cond(node, names, calib, cfg, per_channel, searcher, b)
        else:
            cm = _build_loop(node, names, calib, cfg, per_channel, searcher, b, spec)
        if spec is not None:
            if cm.kind != "loop" or cm.pre is not None:
                raise control_error(f"a symbolic length ({spec.symbol}) is lowered for a plain scan loop only")
            cm.dynamic = spec
        if list(outputs) != [node]:
            _post_kernels(cm, node, list(outputs), names, calib, cfg, searcher, per_channel, b)
    except RegisterClash as e:              # a body needs a register the control flow keeps
        raise control_error(str(e)) from e
    b.emit("halt")
    cm.program = _finish(cfg, b, cm.kind)
    cm.program.manifest = {"kind": "control-model", "control": cm.kind, "counter": cm.counter_addr,
                           "result": cm.out_addr}
    cm.input_names, cm.single, cm.graph = names, single, list(outputs)
    cm.search_report = searcher.report if searcher else None
    cm.compile_s = time.perf_counter() - t0
    cm.timings = {"total": cm.compile_s}
    return cm


def _post_kernels(cm, node, outputs: list, names: list, calib: list, cfg, searcher, per_channel,
                  b: ProgramBuilder) -> None:
    """The kernels after the cond/loop, emitted into ``b`` (its result is the INPUT ``ctl`` of a ``post``
    body, copied in from the result buffer; the post body's outputs are the model's)."""
    outs = substitute(outputs, {id(node): Node(Ops.INPUT, node.dtype, (), ("ctl", node.shape))})
    fl = [{k: np.asarray(v, np.float32) for k, v in f.items()} for f in calib]
    feeds = [dict(f, ctl=np.asarray(float_eval(node, f), np.float32)) for f in fl]
    post = compile_body(None, feeds, {"ctl": cm.out_scale}, None, cfg, cm.arena, searcher, per_channel,
                        "the kernels after the cond/loop", outputs=outs)
    cm.post, cm.arena = post, post.end
    if "ctl" in post.ins:
        t, addr = post.ins["ctl"]
        if not layout_of(post.tensor(t)).same(cm.out_info):
            raise control_error("the kernels after the cond/loop read its result padded or reordered: not lowered")
        copy_bytes(b, cm.out_addr, addr, cm.out_info.nbytes, cfg)
    inline_body(b, post, "post")
    for name, (t, addr) in post.ins.items():
        if name != "ctl":
            cm.post_inputs.append(_Operand(name, None, post.tensor(t), post.q.scales[t], [addr]))


def _host_info(name: str, shape) -> TensorInfo:
    return TensorInfo(name, tuple(shape), default_perm(tuple(shape)), "input")


def _finish(cfg, b: ProgramBuilder, what: str):
    if len(b) > cfg.imem_words:
        raise control_error(f"{what} needs {len(b)} instructions; config {cfg.name!r} holds {cfg.imem_words}")
    return b.build(f"<{what}>")


def _build_cond(node, names, calib, cfg, per_channel, searcher, b: ProgramBuilder) -> ControlModel:
    then_g, else_g = node.arg
    ops = [_operand(s, names) for s in node.src[1:]]
    n_ops = len(ops)
    if len(then_g.inputs) != n_ops or len(else_g.inputs) != n_ops:
        raise control_error("a cond whose branches capture non-constant tensors is not lowered")
    fl = [{k: np.asarray(v, np.float32) for k, v in f.items()} for f in calib]
    vals = [[_value(o, x, f) for o, x in zip(ops, node.src[1:])] for f in fl]
    argf = [{f"arg{j}": v for j, v in enumerate(vs)} for vs in vals]
    ident = {k: g.output is g.inputs[0] for k, g in (("then", then_g), ("else", else_g))}
    if any(g.output in g.inputs[1:] for g in (then_g, else_g)):
        raise control_error("a branch that returns an operand other than the first is not lowered")
    op_scale = [_amax([v[j] for v in vals]) for j in range(n_ops)]
    outs = {k: [float_eval(g.output, a) for a in argf] for k, g in (("then", then_g), ("else", else_g))}
    out_scale = _amax(outs["then"] + outs["else"])
    if any(ident.values()):
        op_scale[0] = out_scale = max(out_scale, op_scale[0])
    base, bodies = 0, {}
    for k, g in (("then", then_g), ("else", else_g)):
        if not ident[k]:
            bodies[k] = compile_body(g, argf, dict(enumerate(op_scale)), out_scale, cfg, base, searcher,
                                     per_channel, f"cond {k}-branch")
            base = bodies[k].end
    # the predicate: leaves are the operands (tags "0", "1", ...)
    roles = {id(s): str(j) for j, s in enumerate(node.src[1:])}
    known = {("role", str(j)): str(j) for j in range(n_ops)}
    red, form, leaves, h, rph = match_pred(node.src[0], known, roles)
    infos = [_host_info(f"arg{j}", node.src[1 + j].shape) for j in range(n_ops)]
    lf = [int(t) for t in leaves]
    if len(lf) == 2 and (op_scale[lf[0]] != op_scale[lf[1]]
                         or not layout_of(infos[lf[0]]).same(layout_of(infos[lf[1]]))):
        raise control_error("a predicate over two operands needs them to share one shape and scale")
    n = infos[lf[0]].numel
    if infos[lf[0]].phys_size != n:
        raise control_error("a cond predicate over a padded tensor is not lowered")
    T, hi = threshold(h, rph, red, form, n, op_scale[lf[0]])
    pred = Pred(red, form, tuple(leaves), T, hi, op_scale[lf[0]])
    # DRAM: bodies, then the operand buffers, the result, the flag word
    addr = {}
    for j, inf in enumerate(infos):
        addr[j] = base
        base += align_up(inf.phys_size, DRAM_ALIGN)
    # the result buffer takes the first branch's layout; the other one's result is moved into it
    res_info = layout_of(infos[0]) if ident["then"] or ident["else"] else next(iter(bodies.values())).out_layout()
    res_addr, base = base, base + align_up(res_info.nbytes, DRAM_ALIGN)
    cnt, base = base, base + DRAM_ALIGN
    operands, moves = [], {k: [] for k in bodies}
    for j, ((nm, c, _), inf) in enumerate(zip(ops, infos)):
        dests = [addr[j]]
        for k, bk in bodies.items():
            if j in bk.ins:
                if layout_of(inf).same(bk.in_layout(j)):
                    dests.append(bk.ins[j][1])          # the host writes it there too
                else:                                   # e.g. a padded convolution input: the taken branch moves it
                    moves[k].append((addr[j], layout_of(inf), bk.ins[j][1], bk.in_layout(j)))
        operands.append(_Operand(nm, c, inf, op_scale[j], dests))
    cm = ControlModel(cfg, None, "cond", bodies, operands, res_info, res_addr, out_scale, tuple(node.shape),
                      cnt, names, True, pred, 0, next((k for k, v in ident.items() if v), None), base)
    b.comment(f"tetrachip cond: {'then' if hi else 'else'}-branch when {red}({form}) >= {T}")
    _pre_kernels(cm, list(node.src[1:]), ops, fl, cfg, searcher, per_channel, b)
    els, end = b.new_label("cond_else"), b.new_label("cond_end")
    pred_code(b, pred, [addr[j] for j in lf], n, cfg, els)
    for k in ("then", "else"):
        if k == "else":
            b.place(els)
        if ident[k]:
            move_value(b, addr[0], layout_of(infos[0]), res_addr, res_info, cfg)
        else:
            for src, src_lay, dst, dst_lay in moves[k]:
                move_value(b, src, src_lay, dst, dst_lay, cfg)
            inline_body(b, bodies[k], k)
            move_value(b, bodies[k].out_addr, bodies[k].out_layout(), res_addr, res_info, cfg)
        b.emit("seti", TRIP_REG, 1 if k == "then" else 0)          # the flag: which branch ran
        if k == "then":
            b.emit("jmp", end)
    b.place(end)
    store_counter(b, cnt, TRIP_REG)
    return cm


def _while_form(g) -> tuple | None:
    """A loop body ``cond(p(c), f, identity, c)`` (either branch order): (IF node, f's graph, f is then)."""
    o = g.output
    if o.op is not Ops.IF or len(o.src) != 2 or o.src[1] is not g.inputs[0]:
        return None
    tg, eg = o.arg
    if eg.output is eg.inputs[0] and tg.output is not tg.inputs[0]:
        return o, tg, True
    if tg.output is tg.inputs[0] and eg.output is not eg.inputs[0]:
        return o, eg, False
    return None


def _build_loop(node, names, calib, cfg, per_channel, searcher, b: ProgramBuilder, spec=None) -> ControlModel:
    """A ``loop`` (``spec``: its trip count is the symbolic length, in ``DYN_REG`` at launch) or a
    ``while_loop``, emitted into ``b``."""
    g, nscan = node.arg
    ops = [_operand(s, names) for s in node.src]
    if len(node.src) != 1 + nscan:
        raise control_error("a loop body that captures non-constant tensors is not lowered")
    trips = int(node.src[1].shape[0])
    wf = _while_form(g)
    fl = [{k: np.asarray(v, np.float32) for k, v in f.items()} for f in calib]
    init_vals = [_value(ops[0], node.src[0], f) for f in fl]
    scans = [[_value(o, x, f) for o, x in zip(ops[1:], node.src[1:])] for f in fl]
    if wf is None and g.output.op is Ops.IF:
        return _build_loop_cond(node, g, names, ops, fl, init_vals, scans, trips, cfg, per_channel, searcher, b)
    if wf is not None:
        ifn, fg, f_is_then = wf
        feeds, seen = [], []
        for c in init_vals:                       # the float loop: every carry, and f of the last
            for _ in range(trips):
                feeds.append({"arg0": c})
                t = np.asarray(float_eval(fg.output, {"arg0": c}), np.float32)
                seen += [c, t]
                nxt = np.asarray(float_eval(g.output, {"arg0": c, "arg1": np.zeros(1, np.float32)}), np.float32)
                if np.array_equal(nxt, c):
                    break
                c = nxt
        s_c = _amax(seen)
        body = compile_body(fg, feeds, {0: s_c}, s_c, cfg, 0, searcher, per_channel, "while_loop body")
        roles = {id(g.inputs[0]): "c"}
        keys_f = structural_keys([fg.output], {id(fg.inputs[0]): "c"})
        known = {("role", "c"): "c", keys_f[id(fg.output)]: "f"}
        red, form, leaves, h, rph = match_pred(ifn.src[0], known, roles)
        n = body.tensor(body.out_t).numel
        if body.out_layout().nbytes != n:
            raise control_error("a while_loop predicate over a padded tensor is not lowered")
        T, hi = threshold(h, rph, red, form, n, s_c)
        pred = Pred(red, form, tuple(leaves), T, hi if f_is_then else not hi, s_c)
        scan_scales = []
    else:
        feeds, seen = [], []
        for c, xs in zip(init_vals, scans):
            seen.append(c)
            for i in range(trips):
                f = {"arg0": c, **{f"arg{j + 1}": np.asarray(x[i], np.float32) for j, x in enumerate(xs)}}
                feeds.append(f)
                c = np.asarray(float_eval(g.output, f), np.float32)
                seen.append(c)
        s_c = _amax(seen)
        scan_scales = [_amax([xs[j] for xs in scans]) for j in range(nscan)]
        body = compile_body(g, feeds, {0: s_c, **{j + 1: s for j, s in enumerate(scan_scales)}}, s_c, cfg, 0,
                            searcher, per_channel, "loop body")
        pred = None
    if 0 not in body.ins:
        raise control_error("the loop body does not read its carry")
    c_t, c_addr = body.ins[0]
    c_info, t_lay = body.in_layout(0), body.out_layout()     # the carry as the body reads / writes it
    base = body.end
    operands = [_Operand(ops[0][0], ops[0][1], c_info, s_c, [c_addr])]
    cu = None
    if wf is not None and not c_info.same(t_lay):
        # a padded carry (a convolution input): the predicate compares f(c) with a copy of the
        # carry in f(c)'s layout
        cu, base = base, base + align_up(t_lay.nbytes, DRAM_ALIGN)
    copies = []
    for j in range(nscan if wf is None else 0):
        shape = node.src[1 + j].shape
        inf = _host_info(f"scan{j}", shape)
        rowb = inf.phys_size // shape[0]
        operands.append(_Operand(ops[1 + j][0], ops[1 + j][1], inf, scan_scales[j], [base]))
        if j + 1 in body.ins:
            t = body.tensor(body.ins[j + 1][0])
            row0 = phys_offsets_of(inf)[0].reshape(-1)
            if inf.perm[0] != 0 or t.phys_size != rowb or not np.array_equal(phys_offsets_of(t).reshape(-1), row0):
                raise control_error(f"scanned tensor {j}: a row is not stored like the body's input "
                                    "(padded or reordered)")
            copies.append((base, body.ins[j + 1][1], rowb))
        base += align_up(inf.phys_size, DRAM_ALIGN)
    cnt, base = base, base + DRAM_ALIGN
    kind = "while" if wf else "loop"
    cm = ControlModel(cfg, None, kind, {"body": body}, operands, c_info, c_addr, s_c, tuple(node.shape), cnt,
                      names, True, pred, trips, None, base)
    b.comment(f"tetrachip {'while_loop' if wf else 'loop'}: at most {trips} trips, counter {TRIP_REG!r}")
    _pre_kernels(cm, list(node.src), ops, fl, cfg, searcher, per_channel, b)
    b.emit("seti", TRIP_REG, 0)
    if cu is not None:
        move_value(b, c_addr, c_info, cu, t_lay, cfg)
    top, done = b.label("loop_top"), b.new_label("loop_done")
    if spec is not None and kind == "loop":        # n trips, n written by the host at launch
        b.reserve(DYN_REG, f"the symbolic length {spec.symbol}")
        b.emit("bge", TRIP_REG, DYN_REG, done)
    else:
        b.emit("seti", G.A, trips)
        b.emit("bge", TRIP_REG, G.A, done)
    for src, dst, rowb in copies:                  # row i of each scanned tensor into the body's input
        b.emit("seti", G.B, rowb)
        b.emit("mul", G.A, TRIP_REG, G.B)
        copy_bytes(b, src, dst, rowb, cfg, src_reg=G.A)
    inline_body(b, body, "body")
    if wf is not None:
        addrs = [{"c": c_addr if cu is None else cu, "f": body.out_addr}[x] for x in pred.leaves]
        pred_code(b, pred, addrs, t_lay.nbytes, cfg, done)
        if cu is not None:
            copy_bytes(b, body.out_addr, cu, t_lay.nbytes, cfg)
    move_value(b, body.out_addr, t_lay, c_addr, c_info, cfg)
    b.emit("addi", TRIP_REG, TRIP_REG, 1)
    b.emit("jmp", top)
    b.place(done)
    store_counter(b, cnt, TRIP_REG)
    return cm


def _build_loop_cond(node, g, names, ops, fl, init_vals, scans, trips, cfg, per_channel, searcher,
                     b: ProgramBuilder):
    """A loop whose body is ``cond(p(carry), f, g, *args)`` (args: the carry and scanned rows):
    per trip the predicate on the carry picks the branch; the carry lives in its own buffer, is
    copied into the taken branch's input and its result copied back; ``BRANCH_TRIPS`` (r15) counts
    the trips that took ``f``."""
    ifn = g.output
    then_g, else_g = ifn.arg
    args = list(ifn.src[1:])
    ids = [id(x) for x in g.inputs]
    if any(id(a) not in ids for a in args) or len(then_g.inputs) != len(args) or len(else_g.inputs) != len(args):
        raise control_error("a cond inside a loop body must take the loop's carry and rows directly (no captured "
                            "or computed operands)")
    amap = [ids.index(id(a)) for a in args]
    if 0 not in amap:
        raise control_error("a cond inside a loop body must take the loop's carry")
    nscan = len(node.src) - 1
    ident = {k: (bg.output in bg.inputs) for k, bg in (("then", then_g), ("else", else_g))}
    for k, bg in (("then", then_g), ("else", else_g)):
        if ident[k] and amap[list(bg.inputs).index(bg.output)] != 0:
            raise control_error("a branch inside a loop that returns a row instead of the carry is not lowered")
    bfeeds, seen = [], []
    for c, xs in zip(init_vals, scans):          # the float loop: carries and each branch's arguments
        seen.append(c)
        for i in range(trips):
            f = {"arg0": c, **{f"arg{j + 1}": np.asarray(x[i], np.float32) for j, x in enumerate(xs)}}
            bfeeds.append({f"arg{k}": f[f"arg{j}"] for k, j in enumerate(amap)})
            c = np.asarray(float_eval(g.output, f), np.float32)
            seen.append(c)
    s_c = _amax(seen)
    scan_scales = [_amax([xs[j] for xs in scans]) for j in range(nscan)]
    arg_scale = {k: (s_c if j == 0 else scan_scales[j - 1]) for k, j in enumerate(amap)}
    base, bodies = 0, {}
    for k, bg in (("then", then_g), ("else", else_g)):
        if not ident[k]:
            bodies[k] = compile_body(bg, bfeeds, arg_scale, s_c, cfg, base, searcher, per_channel,
                                     f"loop's cond {k}-branch")
            base = bodies[k].end
    red, form, leaves, h, rph = match_pred(ifn.src[0], {("role", "c"): "c"}, {id(g.inputs[0]): "c"})
    c_info = _host_info("carry", node.src[0].shape)
    n = c_info.numel
    T, hi = threshold(h, rph, red, form, n, s_c)
    pred = Pred(red, form, tuple(leaves), T, hi, s_c)
    cm_addr, base = base, base + align_up(c_info.phys_size, DRAM_ALIGN)
    operands = [_Operand(ops[0][0], ops[0][1], c_info, s_c, [cm_addr])]
    rows = []
    for j in range(nscan):
        shape = node.src[1 + j].shape
        inf = _host_info(f"scan{j}", shape)
        operands.append(_Operand(ops[1 + j][0], ops[1 + j][1], inf, scan_scales[j], [base]))
        rows.append((inf, base, inf.phys_size // shape[0]))
        base += align_up(inf.phys_size, DRAM_ALIGN)
    cnt, base = base, base + DRAM_ALIGN
    cm = ControlModel(cfg, None, "loop-cond", bodies, operands, layout_of(c_info), cm_addr, s_c, tuple(node.shape), cnt,
                      names, True, pred, trips, next((k for k, v in ident.items() if v), None), base)
    cm.branch_args = amap
    b.comment(f"tetrachip loop over a cond: {trips} trips; then-branch when {red}({form}) "
              f"{'>=' if hi else '<'} {T}; {TRIP_REG!r} trips, {BRANCH_TRIPS!r} then-trips")
    _pre_kernels(cm, list(node.src), ops, fl, cfg, searcher, per_channel, b)
    counter = "the loop's count of then-branch trips"
    b.reserve(BRANCH_TRIPS, counter)               # no branch body may use it
    b.emit("seti", TRIP_REG, 0)
    b.emit("seti", BRANCH_TRIPS, 0)
    top, done = b.label("loop_top"), b.new_label("loop_done")
    els, join = b.new_label("br_else"), b.new_label("br_join")
    b.emit("seti", G.A, trips)
    b.emit("bge", TRIP_REG, G.A, done)
    pred_code(b, pred, [cm_addr], n, cfg, els)
    for k in ("then", "else"):
        if k == "else":
            b.place(els)
        if not ident[k]:
            bk = bodies[k]
            for a, j in enumerate(amap):
                if a not in bk.ins:
                    continue
                if j == 0:
                    move_value(b, cm_addr, layout_of(c_info), bk.ins[a][1], bk.in_layout(a), cfg)
                else:
                    inf, addr, rowb = rows[j - 1]
                    t = bk.tensor(bk.ins[a][0])
                    if inf.perm[0] != 0 or t.phys_size != rowb or \
                            not np.array_equal(phys_offsets_of(t).reshape(-1), phys_offsets_of(inf)[0].reshape(-1)):
                        raise control_error(f"scanned tensor {j - 1}: a row is not stored like the {k}-branch's input")
                    b.emit("seti", G.B, rowb)
                    b.emit("mul", G.A, TRIP_REG, G.B)
                    copy_bytes(b, addr, bk.ins[a][1], rowb, cfg, src_reg=G.A)
            inline_body(b, bk, k)
            move_value(b, bk.out_addr, bk.out_layout(), cm_addr, layout_of(c_info), cfg)
        if k == "then":
            b.emit("addi", BRANCH_TRIPS, BRANCH_TRIPS, 1)
            b.emit("jmp", join)
    b.place(join)
    b.emit("addi", TRIP_REG, TRIP_REG, 1)
    b.emit("jmp", top)
    b.place(done)
    store_counter(b, cnt, TRIP_REG, BRANCH_TRIPS)
    b.release(BRANCH_TRIPS, counter)
    return cm


__all__ = ["compile_control", "ControlModel"]
