"""Control flow on the chip: the frontend's ``cond`` / ``loop`` / ``while_loop`` lowered to the
scalar unit's branches (``compile_control``, reached from ``tc.compile``), and a hand-built loop
that runs until a value converges (``until_converged``, below).

**Frontend control flow** (``compile_control``). The model holds one ``cond`` or ``loop`` node;
its operands are model inputs, constants, or computed from the inputs by chip kernels (compiled
together as the ``pre`` body, which runs first; its results are copied to where the bodies read
them); kernels after it (the ``post`` body) read its result and the inputs and give the model's
outputs. Each body (a branch, a loop body) is compiled by the ordinary
pipeline (lift, quantize, tile, plan, emit) into its own DRAM region, and the glue here stitches
the bodies' assembly with scalar branches:

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
carry and ``f(carry)``. On the chip: SPM rows (unused lanes filled with a neutral value), ``vsub``/
``vabs`` into ACC, a ``vmax``/``vadd`` chain over rows, ``vrmax``/``vrsum`` with
``signal=scalar``, ``sld`` into ``r1`` and a branch against the integer threshold ``T``: the
float predicate evaluated at ``R * scale`` for every integer reduction ``R`` is a step at ``T``
(checked). The quantized model is defined by that integer rule; ``cm.reference`` evaluates it in
numpy and the chip's result is bit-exact against it. Carry and body result share one int8 scale
(calibrated over every trip), as do a cond's two results.

Not lowered (``ChipCompileError``): more than one control node, operands computed by ops the
chip cannot run, deeper nesting than a cond as a loop body (or the while form), captured non-constant
tensors, a symbolic dimension other than a scan loop's length (``dynamic={"T": max}``: the trip
count is ``r15``, written at launch), padded (convolution) carries, bodies whose result layout
differs from the carry's, predicates that are not a threshold on such a reduction.

**until_converged** (the hand-built mechanism):

    loop = until_converged(rows=1, a=3, b=b_vec, shift=2, tol=0, max_iter=200, config="base")
    x, trips, stats = loop.run(x0)            # on the simulator
    x_ref, trips_ref = loop.reference(x0)     # numpy, the same integer arithmetic

The body is a lane-wise integer fixed-point step on the VPU, ``x <- (a * x + b) >> shift`` over
``rows`` ACC rows of int32 lanes (``b`` per lane). After each step the VPU computes the largest
change, ``max |x_new - x|`` (``vsub``, ``vabs``, a ``vmax`` chain over rows, ``vrmax`` over
lanes) and signals the scalar unit; ``sld`` reads that lane into a register (waiting on the
VPU token) and the scalar unit branches back while it exceeds ``tol`` and fewer than
``max_iter`` trips ran. The trip count is data-dependent: nothing about it is known when the
program is compiled. At the end the result rows and the trip count (``sst`` into an ACC lane)
are stored to DRAM; the host reads both.

For ``0 <= a < 2**shift`` the step is a monotone contraction on the integers, so the sequence is
monotone and stops at a fixed point (``tol = 0`` terminates); ``max_iter`` bounds it anyway.

Registers: r1 trips, r2 tol, r3 max_iter, r4 the change read by ``sld``. ACC rows: x, the new
x, the change, b (``rows`` each), one row for the trip count.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from isa.asm import assemble
from isa.config import ChipConfig

from .schedule import ChipCompileError


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((np.asarray(v, np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


@dataclass
class ConvergeLoop:
    config: ChipConfig
    rows: int
    a: int
    b: np.ndarray            # (rows, cols) int32
    shift: int
    tol: int
    max_iter: int
    program: object
    x_addr: int
    b_addr: int
    out_addr: int
    count_addr: int

    def reference(self, x0) -> tuple[np.ndarray, int]:
        x = np.asarray(x0, np.int64).reshape(self.rows, self.config.cols)
        trips = 0
        while True:
            new = _wrap32(_wrap32(_wrap32(x * self.a) + self.b) >> self.shift)
            diff = int(np.max(np.abs(new - x)))
            x, trips = new, trips + 1
            if trips >= self.max_iter or diff <= self.tol:
                return x.astype(np.int32), trips

    def run(self, x0, trace: bool = False):
        from sim import Chip
        C = self.config.cols
        x0 = np.asarray(x0, np.int32).reshape(self.rows, C)
        chip = Chip(self.config, trace=trace)
        chip.load(self.program)
        chip.write_dram(self.x_addr, x0.reshape(-1).view(np.uint8))
        chip.write_dram(self.b_addr, self.b.astype(np.int32).reshape(-1).view(np.uint8))
        stats = chip.run()
        x = chip.read_dram(self.out_addr, self.rows * C, np.int32).reshape(self.rows, C)
        trips = int(chip.read_dram(self.count_addr, 1, np.int32)[0])
        return x, trips, stats


def until_converged(rows: int, a: int, b, shift: int, tol: int = 0, max_iter: int = 1000,
                    config="base") -> ConvergeLoop:
    cfg = ChipConfig.load(config)
    C = cfg.cols
    b = np.broadcast_to(np.asarray(b, np.int64), (rows, C)).astype(np.int32)
    if not 1 <= rows or 4 * rows + 1 > cfg.acc_rows:
        raise ChipCompileError(f"until_converged: {rows} rows do not fit ACC ({cfg.acc_rows} rows) on "
                               f"config {cfg.name!r}")
    if not 1 <= max_iter < (1 << 15) or not 0 <= shift < 32:
        raise ChipCompileError(f"until_converged: max_iter {max_iter} / shift {shift} out of range")
    X, T, D, B, CNT = 0, rows, 2 * rows, 3 * rows, 4 * rows
    rb = 4 * C                                           # bytes of one int32 row
    x_addr, b_addr, out_addr, count_addr = 0, rows * rb, 2 * rows * rb, 3 * rows * rb
    L = [f"; until converged: x <- ({a} * x + b) >> {shift} over {rows} row(s), while max|dx| > {tol}",
         "    seti r1, 0",
         f"    seti r2, {tol}",
         f"    seti r3, {max_iter}",
         f"    dma.ld acc[{X}], dram[{x_addr}], rows={rows}, len={C}, rstride={rb}, estride=4",
         f"    dma.ld acc[{B}], dram[{b_addr}], rows={rows}, len={C}, rstride={rb}, estride=4",
         "    fence all",
         "top:",
         f"    vmul acc[{T}], acc[{X}], {a}, n={rows}",
         f"    vadd acc[{T}], acc[{T}], acc[{B}], n={rows}",
         f"    vsra acc[{T}], acc[{T}], {shift}, n={rows}",
         f"    vsub acc[{D}], acc[{T}], acc[{X}], n={rows}",
         f"    vabs acc[{D}], acc[{D}], n={rows}"]
    L += [f"    vmax acc[{D}], acc[{D}], acc[{D + i}], n=1" for i in range(1, rows)]
    L += [f"    vrmax acc[{D}], acc[{D}], n=1, signal=scalar",
          f"    vmov acc[{X}], acc[{T}], n={rows}",
          f"    sld r4, acc[{D}], 0, wait=vpu",       # the VPU's result steers the branch
          "    addi r1, r1, 1",
          "    bge r1, r3, done",
          "    blt r2, r4, top",
          "done:",
          "    fence all",
          f"    sst r1, acc[{CNT}], 0",
          f"    dma.st dram[{out_addr}], acc[{X}], rows={rows}, len={C}, rstride={rb}, estride=4",
          f"    dma.st dram[{count_addr}], acc[{CNT}], rows=1, len=1, rstride={rb}, estride=4",
          "    halt"]
    prog = assemble("\n".join(L) + "\n", cfg, "<until_converged>")
    return ConvergeLoop(cfg, rows, int(a), b, int(shift), int(tol), int(max_iter), prog,
                        x_addr, b_addr, out_addr, count_addr)




# =================================================================================== frontend cond / loop

import hashlib
import re
import time

from .ir import CONTROL, Node, Ops, toposort
from .quantize import (EW_COEF_MAX, MAX_SHIFT, QEw, QKernel, ew_int, kernel_int, quantize, quantize_array,
                       requant_params)
from .schedule import EwKernel, TensorInfo, gather_base, kernel_inputs, lift, _default_perm

R_TRIP = 14                     # the trip counter / branch flag: no kernel body uses r14
_RED = {"max": Ops.RMAX, "sum": Ops.SUM}
#: elementwise forms a predicate may reduce (a, b: int8 tensors of one scale)
_FORMS = {"a": lambda a, b: a, "|a|": lambda a, b: np.abs(a), "a-b": lambda a, b: a - b,
          "|a-b|": lambda a, b: np.abs(a - b)}


def _err(msg: str) -> ChipCompileError:
    return ChipCompileError(f"control flow: {msg}")


def _np_eval(out: Node, feeds: dict) -> np.ndarray:
    from runtime.numpy_backend import NumpyBackend     # the reference backend (the float semantics)
    return NumpyBackend().execute([out], feeds)[0]


def _skeys(roots: list, roles: dict) -> dict:
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


def _substitute(out: Node, mapping: dict) -> Node:
    from .control import _substitute as sub
    return sub(out, mapping)


def _inputs(out: Node) -> set:
    return {id(n) for n in toposort([out]) if n.op is Ops.INPUT}


# ------------------------------------------------------------------------------- predicates

@dataclass
class _Pred:
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
        return int(((r + (1 << 31)) % (1 << 32)) - (1 << 31))


def _match_pred(pred: Node, known: dict, roles: dict) -> tuple:
    """Split a boolean scalar ``pred`` into (reduction kind, form, leaf tags, scalar function node,
    its placeholder). ``known`` maps structural keys of tensors the chip holds to their tags."""
    keys = _skeys([pred], roles)
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
        e2 = _substitute(e, {id(n): phs[t] for t in tags for n in leaves[t]})
        if _inputs(e2) != {id(p) for p in phs.values()}:
            continue
        rph = Node(Ops.INPUT, r.dtype, (), ("reduction", r.shape))
        h = _substitute(pred, {id(r): rph})
        if _inputs(h) != {id(rph)}:
            continue
        form = _probe(e2, [phs[t] for t in tags])
        if form is None:
            continue
        fk, order = form
        return ("max" if r.op is Ops.RMAX else "sum"), fk, tuple(tags[i] for i in order), h, rph
    raise _err("the predicate must be a comparison of sum(...) or max(...) over a whole tensor of x, |x|, x - y "
               "or |x - y| with a constant, where x, y are the cond's operands (or, in a while_loop, the "
               "carry and the body's result)")


def _probe(e: Node, phs: list) -> tuple | None:
    """Which of _FORMS (and which leaf order) the elementwise graph ``e`` computes, by evaluation."""
    rng = np.random.default_rng(7)
    trials = [[rng.uniform(-2, 2, p.shape).astype(np.float32) for p in phs] for _ in range(3)]
    outs = [np.asarray(_np_eval(e, {p.arg[0]: v for p, v in zip(phs, vals)}), np.float64).ravel()
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


def _threshold(h: Node, rph: Node, red: str, form: str, n: int, scale: float) -> tuple[int, bool]:
    """The integer rule of the predicate: its float value at ``R * scale`` is a step at ``T``."""
    span = {"a": (-128, 127), "|a|": (0, 128), "a-b": (-255, 255), "|a-b|": (0, 255)}[form]
    lo, hi = (span[0], span[1]) if red == "max" else (span[0] * n, span[1] * n)
    name = rph.arg[0]

    def P(R: int) -> bool:
        return bool(np.asarray(_np_eval(h, {name: np.full(rph.shape, R * scale, np.float32)})).reshape(-1)[0])

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
            raise _err("the predicate is not a threshold on the reduction (it changes value more than once)")
    return int(T), top


# ------------------------------------------------------------------------------- bodies

def _retie(q, fixed: dict) -> None:
    """Force tensors to int8 with the given scales (a loop carry and the body's result share one)
    and recompute the kernels that read or write them, as ``quantize.quantize`` does."""
    s = q.sched
    for ti, sc in fixed.items():
        q.scales[ti] = float(sc)
        q.int32.discard(ti)
    for i, k in enumerate(s.kernels):
        if k.out not in fixed and not any(t in fixed for t in kernel_inputs(k)):
            continue
        qk = q.qkernels[i]
        if isinstance(k, EwKernel):
            mult = np.array([c * q.scales[t] / q.scales[k.out] for (t, _), c in zip(k.srcs, k.coefs)])
            top = float(np.max(np.abs(mult)))
            shift = max(0, min(MAX_SHIFT, int(np.floor(np.log2(EW_COEF_MAX / top))))) if top > 0 else 0
            q.qkernels[i] = QEw(np.rint(mult * 2.0 ** shift).astype(np.int32), shift, qk.lo)
            continue
        s_x = q.scales[k.src]
        b_q = None
        if k.bias is not None:
            b_q = np.clip(np.rint(k.bias / (s_x * qk.s_w)), -(1 << 31), (1 << 31) - 1).astype(np.int32)
        out8 = k.out not in q.int32
        scale, shift = requant_params(s_x * qk.s_w / q.scales[k.out]) if out8 else (np.zeros(k.N, np.int32), 0)
        q.qkernels[i] = QKernel(qk.w_q, b_q, out8, scale, shift, qk.lo, qk.s_w)


@dataclass
class _Body:
    """One body compiled by the ordinary pipeline into its own DRAM region."""
    cm: object
    ins: dict                # argument index -> (tensor index, DRAM address)
    out_t: int
    out_idx: np.ndarray
    out_addr: int
    end: int                 # first DRAM byte after the region
    outs: list = field(default_factory=list)     # every result: (tensor index, view, DRAM address)

    @property
    def q(self):
        return self.cm.qsched

    def tensor(self, t: int) -> TensorInfo:
        return self.q.sched.tensors[t]

    def out_layout(self) -> _Layout:
        return _lay(self.tensor(self.out_t), self.out_idx)

    def in_layout(self, j: int) -> _Layout:
        return _lay(self.tensor(self.ins[j][0]))

    def run(self, ints: dict) -> np.ndarray:
        """The quantized body in numpy (``quantize.kernel_int``/``ew_int``): argument ints -> result ints."""
        return self.run_all(ints)[0]

    def run_all(self, ints: dict) -> list:
        s, vals = self.q.sched, self.run_vals(ints)
        return [gather_base(vals[t], s.tensors[t], idx) for t, idx, _ in self.outs]

    def run_vals(self, ints: dict) -> dict:
        """Every tensor's integers (by tensor index) from the arguments' (by argument key)."""
        from .schedule import mn_to_base
        s = self.q.sched
        vals = {t: ints[j] for j, (t, _) in self.ins.items()}
        for i, k in enumerate(s.kernels):
            if isinstance(k, EwKernel):
                vals[k.out] = ew_int(self.q, i, vals)
            else:
                vals[k.out] = mn_to_base(kernel_int(self.q, i, vals[k.src]), s.tensors[k.out], k)
        return vals


def _compile_body(g, calib: list, scales: dict, out_scale, cfg, base: int, searcher, per_channel: bool,
                  what: str, outputs: list | None = None) -> _Body:
    """A body graph ``g`` (inputs ``arg0..``; ``scales`` by argument index, ``out_scale`` its
    result's), or with ``outputs`` a top-level subgraph (inputs by model input name, one scale per
    output in ``out_scale``), compiled by the ordinary pipeline at DRAM ``base``."""
    from . import engine
    from .lower import DRAM_ALIGN, _lower
    nodes = [g.output] if outputs is None else list(outputs)
    out_scales = [out_scale] if outputs is None else (None if out_scale is None else list(out_scale))
    key = (lambda n: int(n[3:])) if outputs is None else (lambda n: n)
    if any(n.op in CONTROL for n in toposort(nodes)):
        raise _err(f"{what}: nested control flow is not supported on the chip (only the while_loop form)")
    sched = lift(engine.prepare(nodes))
    q = quantize(sched, calib, per_channel)
    names = list(sched.inputs)
    fixed = {sched.inputs[n]: scales[key(n)] for n in names if key(n) in scales}
    for (out_t, out_idx), sc in zip(sched.outputs, out_scales or []):   # None: the model's own outputs
        t = sched.tensors[out_t]
        if t.kind != "kernel" or t.padded or not np.array_equal(np.ravel(out_idx), np.ravel(t.identity())):
            raise _err(f"{what}: the result must be a whole kernel output (not a view or slice of one)")
        fixed[out_t] = sc
    _retie(q, fixed)
    cm = _lower(q, cfg, names, True, len(nodes), None, searcher, dram_base=base)
    if re.search(rf"\br{R_TRIP}\b", cm.asm):
        raise _err(f"{what}: the body needs scalar register r{R_TRIP}, which the control flow keeps")
    ins = {key(n): (sched.inputs[n], cm.tensor_addr[sched.inputs[n]]) for n in names}
    end = cm.const_base + len(cm.const_image)
    outs = [(t, idx, cm.tensor_addr[t]) for t, idx in sched.outputs]
    return _Body(cm, ins, outs[0][0], outs[0][1], outs[0][2], -(-end // DRAM_ALIGN) * DRAM_ALIGN, outs)


def _phys(t: TensorInfo, idx=None) -> np.ndarray:
    return t.phys_offsets(t.identity() if idx is None else idx)


@dataclass
class _Layout:
    """Where each element of a value (in its logical shape) lies in a DRAM buffer of ``nbytes``."""
    offsets: np.ndarray
    nbytes: int

    def same(self, o: "_Layout") -> bool:
        return self.nbytes == o.nbytes and np.array_equal(self.offsets.reshape(-1), o.offsets.reshape(-1))


def _lay(t: TensorInfo, idx=None) -> _Layout:
    return _Layout(_phys(t, idx), t.phys_size)


def _text(body: _Body, tag: str) -> str:
    """A body's assembly without its ``halt``, labels renamed apart."""
    lines = [ln for ln in body.cm.asm.splitlines() if ln.strip() != "halt"]
    labels = [ln[:-1] for ln in lines if re.fullmatch(r"\w+:", ln)]
    text = "\n".join(lines)
    for lb in sorted(labels, key=len, reverse=True):
        text = re.sub(rf"\b{lb}\b", f"{tag}_{lb}", text)
    return text


# ------------------------------------------------------------------------------- glue code

def _copy(L: list, src: int, dst: int, nbytes: int, cfg, src_reg: int | None = None) -> None:
    """DRAM -> SPM -> DRAM, rows of ``cols`` bytes (kernels are fenced: SPM row 0 up is free)."""
    C = cfg.cols
    x = f"+r{src_reg}" if src_reg else ""
    full, rem = divmod(nbytes, C)
    chunk = cfg.spm_rows
    pieces = [(r0 * C, min(chunk, full - r0), C) for r0 in range(0, full, chunk)]
    if rem:
        pieces.append((full * C, 1, rem))
    for i, (off, rows, ln) in enumerate(pieces):     # a piece's load waits until the last store read SPM
        L.append(f"    dma.ld spm[0], dram[{src + off}{x}], rows={rows}, len={ln}, rstride={C}, "
                 + ("wait=store, " if i else "") + "signal=store")
        L.append(f"    dma.st dram[{dst + off}], spm[0], rows={rows}, len={ln}, rstride={C}, wait=load"
                 + (", signal=load" if i < len(pieces) - 1 else ""))
    L.append("    fence all")


def _pred_code(L: list, p: _Pred, addrs: list, nbytes: int, cfg, false_label: str) -> None:
    """Reduce the leaf tensors on the VPU, ``sld`` the result, branch to ``false_label`` when the
    predicate is false."""
    C = cfg.cols
    rows = -(-nbytes // C)
    if len(addrs) * rows > cfg.spm_rows or rows > cfg.acc_rows:
        raise _err(f"a predicate over {nbytes} elements does not fit SPM/ACC on config {cfg.name!r}")
    bufs = [i * rows for i in range(len(addrs))]
    pad = -128 if (p.red == "max" and p.form == "a") else 0       # neutral for the reduction
    L.append(f"; predicate: {p.red}({p.form}) over {nbytes} elements, threshold {p.T}")
    for i, b in enumerate(bufs):
        last = i == len(bufs) - 1 and not pad
        L.append(f"    vmul spm[{b}], spm[{b}], 0, n={rows}" + (", signal=load" if last else ""))
        if pad:
            L.append(f"    vadd spm[{b}], spm[{b}], {pad}, n={rows}" + (", signal=load" if i == len(bufs) - 1 else ""))
    full, rem = divmod(nbytes, C)
    loads = []
    for b, a in zip(bufs, addrs):
        if full:
            loads.append(f"dma.ld spm[{b}], dram[{a}], rows={full}, len={C}, rstride={C}")
        if rem:
            loads.append(f"dma.ld spm[{b + full}], dram[{a + full * C}], rows=1, len={rem}, rstride={C}")
    for j, ld in enumerate(loads):
        L.append("    " + ld + (", wait=vpu" if j == 0 else "") + (", signal=vpu" if j == len(loads) - 1 else ""))
    D = 0
    if p.form == "a":
        L.append(f"    vadd acc[{D}], spm[{bufs[0]}], 0, n={rows}, wait=load")
    elif p.form == "|a|":
        L.append(f"    vabs acc[{D}], spm[{bufs[0]}], n={rows}, wait=load")
    else:
        L.append(f"    vsub acc[{D}], spm[{bufs[0]}], spm[{bufs[1]}], n={rows}, wait=load")
        if p.form == "|a-b|":
            L.append(f"    vabs acc[{D}], acc[{D}], n={rows}")
    op, rop = ("vmax", "vrmax") if p.red == "max" else ("vadd", "vrsum")
    if rows > 1:
        L.append(f"    loop l0, {rows - 1}, s0=0, s1=0, s2=1")
        L.append(f"    {op} acc[{D}], acc[{D}], acc[{D + 1}], n=1, rep=l0:1")
    L.append(f"    {rop} acc[{D}], acc[{D}], n=1, signal=scalar")
    L.append(f"    sld r1, acc[{D}], 0, wait=vpu")
    L.append(f"    seti r2, {p.T}")
    L.append("    fence all")
    # false: hi -> R < T; not hi -> R >= T
    L.append(f"    {'blt' if p.hi else 'bge'} r1, r2, {false_label}")


def _store_counter(L: list, addr: int) -> None:
    L.append("    fence all")
    L.append(f"    sst r{R_TRIP}, acc[0], 0")
    L.append(f"    dma.st dram[{addr}], acc[0], rows=1, len=1, rstride=4, estride=4")
    L.append("    fence all")
    L.append("    halt")


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
class ControlModel:
    """A compiled model whose output is a ``cond``/``loop``: runs on ``Device("sim")`` like a
    ``CompiledModel``; ``res.ints["trips"]`` (loops) / ``res.ints["taken"]`` (cond, 1 = then)."""
    config: ChipConfig
    program: object
    kind: str                          # "cond" | "loop" | "while"
    bodies: dict
    operands: list
    out_info: _Layout
    out_addr: int
    out_scale: float
    out_shape: tuple
    counter_addr: int
    input_names: list
    single: bool
    pred: _Pred | None = None
    trips: int = 0                     # loop: static trips; while: max_iter
    identity: str | None = None        # cond: which branch is the identity
    arena: int = 0
    pre: _Body | None = None           # kernels computing operands from the inputs (run first)
    pre_inputs: list = field(default_factory=list)   # host writes of the pre kernels' inputs
    post: _Body | None = None          # kernels after the cond/loop (their outputs are the model's)
    post_inputs: list = field(default_factory=list)
    branch_args: list = field(default_factory=list)  # loop-cond: loop argument of each branch argument
    compile_s: float = 0.0
    timings: dict = field(default_factory=dict)
    search_report: list | None = None
    dynamic: object = None
    n_outputs: int = 1

    def feeds(self, inputs) -> dict:
        from .lower import CompiledModel
        return CompiledModel.feeds(self, inputs)

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
            from .quantize import dequantize_outputs
            ints = {op.name: _host_int(op, feeds) for op in self.post_inputs}
            vals = self.post.run_vals(dict(ints, ctl=res))
            outs = dequantize_outputs(self.post.q, vals)
        return outs, dict(info, out=res)

    def reference(self, *inputs) -> list:
        return self.reference_run(self._feeds(inputs))[0]

    def _launch_feeds(self, feeds: dict) -> tuple:
        """Feeds padded to the symbolic maximum and the length (``None`` without a symbol)."""
        if self.dynamic is None:
            return feeds, None
        from .dynamic import host_feeds
        return host_feeds(self.dynamic, feeds)

    def _feeds(self, inputs) -> dict:
        if len(inputs) == 1 and isinstance(inputs[0], dict):
            inputs = inputs[0]
        return self.feeds(inputs)

    def summary(self) -> str:
        lines = [f"control model ({self.kind}) for {self.config.name}: {len(self.program)} instructions"]
        for k, b in self.bodies.items():
            lines.append(f"  {k}: " + b.cm.summary().replace("\n", "\n    "))
        return "\n".join(lines)

    def run_on(self, device, *inputs, **kw):
        runner = getattr(device.backend, "run_compiled", None)
        if runner is None:
            from isa.errors import TetrachipError
            raise TetrachipError(f"device {device.name!r} cannot run a compiled chip program")
        return runner(self, *inputs, **kw)


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
    if not _inputs(node):
        return None, np.asarray(_np_eval(node, {}), np.float32), False
    return None, None, True


def _value(op: tuple, node: Node, feeds: dict) -> np.ndarray:
    name, c, computed = op
    if computed:
        return np.asarray(_np_eval(node, {k: v for k, v in feeds.items()}), np.float32)
    return feeds[name] if name is not None else c


def _pre_kernels(cm, nodes: list, ops: list, calib: list, cfg, searcher, per_channel: bool, L: list) -> None:
    """Compile the operands computed from the inputs (one ``pre`` body at ``cm.arena``), emit it
    and the copies of its results to each operand's destinations into ``L``."""
    idx = [j for j, o in enumerate(ops) if o[2]]
    if not idx:
        return
    pre = _compile_body(None, calib, {}, [cm.operands[j].scale for j in idx], cfg, cm.arena, searcher, per_channel,
                        "the kernels computing the cond/loop operands", outputs=[nodes[j] for j in idx])
    cm.pre, cm.arena = pre, pre.end
    for name, (t, addr) in pre.ins.items():
        cm.pre_inputs.append(_Operand(name, None, pre.tensor(t), pre.q.scales[t], [addr]))
    L.append(_text(pre, "pre"))
    for i, j in enumerate(idx):
        op = cm.operands[j]
        t, view, addr = pre.outs[i]
        if not _lay(pre.tensor(t), view).same(_lay(op.info)):
            raise _err(f"operand {j} is computed in another layout than its uses read (a padded or reordered "
                       "tensor): not lowered")
        op.pre = i
        for a in op.addrs:
            _copy(L, addr, a, op.info.phys_size, cfg)


def _amax(vals) -> float:
    m = max((float(np.max(np.abs(v))) if np.size(v) else 0.0) for v in vals)
    return m / 127.0 if m > 0 else 1.0


def compile_control(outputs: list, names: list, single: bool, calib: list, cfg, *, per_channel=True,
                    search=False, search_budget_s=20.0, cache_dir=None, t0=None, spec=None) -> ControlModel:
    """``spec`` (compiler.dynamic.DynSpec): a ``loop`` over a symbolic length (axis 0 of its scanned
    inputs) runs ``n`` trips, ``n`` written by the host into ``DYN_REG``: one binary for every length."""
    t0 = time.perf_counter() if t0 is None else t0
    ctl = [n for n in toposort(list(outputs)) if n.op in CONTROL]
    node = ctl[-1]
    if any(n.op in CONTROL for n in toposort(list(node.src))) or len(ctl) != 1:
        raise _err(f"the chip lowers one tc.cond / tc.loop per model, this one has {len(ctl)}")
    if not all(isinstance(d, int) for d in node.shape) or any(
            not all(isinstance(d, int) for d in s.shape) for s in node.src):
        raise _err("dynamic dimensions in the graph: declare them with tc.compile(..., dynamic={...})")
    if spec is not None:
        scanned = node.src[1:1 + node.arg[1]] if node.op is Ops.LOOP else []
        if node.op is not Ops.LOOP or list(outputs) != [node] or not scanned or any(
                s.op is not Ops.INPUT or spec.in_axes.get(s.arg[0]) != 0 for s in scanned) or any(
                n.op is Ops.INPUT and n.arg[0] in spec.in_axes and n not in scanned for n in toposort([node])):
            raise _err(f"a symbolic dimension ({spec.symbol}) with control flow is lowered only as the length of a "
                       "loop's scanned inputs (axis 0, model inputs, the loop being the model's output)")
    searcher = None
    if search:
        from .search import Searcher
        searcher = Searcher(cfg, search_budget_s, cache_dir)
    build = _build_cond if node.op is Ops.IF else _build_loop
    cm, L = build(node, names, calib, cfg, per_channel, searcher)
    if spec is not None:
        from .dynamic import DYN_REG
        if cm.kind != "loop" or cm.pre is not None:
            raise _err(f"a symbolic length ({spec.symbol}) is lowered for a plain scan loop only")
        i = L.index("loop_top:")
        assert L[i + 1].startswith("    seti r1,") and L[i + 2].startswith(f"    bge r{R_TRIP}, r1,")
        L[i + 1:i + 3] = [f"    bge r{R_TRIP}, r{DYN_REG}, loop_done"]      # n trips, n set at launch
        cm.dynamic = spec
    if list(outputs) != [node]:
        L = L[:-1] + _post_kernels(cm, node, list(outputs), names, calib, cfg, searcher, per_channel) + L[-1:]
    cm.program = _finish(cfg, L, cm.kind)
    cm.program.manifest = {"kind": "control-model", "control": cm.kind, "counter": cm.counter_addr,
                           "result": cm.out_addr}
    cm.input_names, cm.single = names, single
    cm.search_report = searcher.report if searcher else None
    cm.compile_s = time.perf_counter() - t0
    cm.timings = {"total": cm.compile_s}
    return cm


def _post_kernels(cm, node, outputs: list, names: list, calib: list, cfg, searcher, per_channel) -> list:
    """The kernels after the cond/loop (its result is the INPUT ``ctl`` of a ``post`` body, copied
    in from the result buffer; the post body's outputs are the model's)."""
    ph = Node(Ops.INPUT, node.dtype, (), ("ctl", node.shape))
    new: dict = {id(node): ph}
    for n in toposort(outputs):
        if id(n) not in new:
            src = tuple(new.get(id(x), x) for x in n.src)
            new[id(n)] = n if all(a is b for a, b in zip(src, n.src)) else Node(n.op, n.dtype, src, n.arg)
    outs = [new[id(o)] for o in outputs]
    fl = [{k: np.asarray(v, np.float32) for k, v in f.items()} for f in calib]
    feeds = [dict(f, ctl=np.asarray(_np_eval(node, f), np.float32)) for f in fl]
    post = _compile_body(None, feeds, {"ctl": cm.out_scale}, None, cfg, cm.arena, searcher, per_channel,
                         "the kernels after the cond/loop", outputs=outs)
    cm.post, cm.arena = post, post.end
    L = [_text(post, "post")]
    if "ctl" in post.ins:
        t, addr = post.ins["ctl"]
        if not _lay(post.tensor(t)).same(cm.out_info):
            raise _err("the kernels after the cond/loop read its result padded or reordered: not lowered")
        L = []
        _copy(L, cm.out_addr, addr, cm.out_info.nbytes, cfg)
        L.append(_text(post, "post"))
    for name, (t, addr) in post.ins.items():
        if name != "ctl":
            cm.post_inputs.append(_Operand(name, None, post.tensor(t), post.q.scales[t], [addr]))
    return L


def _host_info(name: str, shape) -> TensorInfo:
    return TensorInfo(name, tuple(shape), _default_perm(tuple(shape)), "input")


def _finish(cfg, L: list, what: str):
    text = "\n".join(L) + "\n"
    n = sum(1 for ln in text.splitlines() if ln.startswith(" "))
    if n > cfg.imem_words:
        raise _err(f"{what} needs {n} instructions; config {cfg.name!r} holds {cfg.imem_words}")
    return assemble(text, cfg, f"<{what}>")


def _build_cond(node, names, calib, cfg, per_channel, searcher) -> ControlModel:
    from .lower import DRAM_ALIGN
    then_g, else_g = node.arg
    ops = [_operand(s, names) for s in node.src[1:]]
    n_ops = len(ops)
    if len(then_g.inputs) != n_ops or len(else_g.inputs) != n_ops:
        raise _err("a cond whose branches capture non-constant tensors is not lowered")
    fl = [{k: np.asarray(v, np.float32) for k, v in f.items()} for f in calib]
    vals = [[_value(o, x, f) for o, x in zip(ops, node.src[1:])] for f in fl]
    argf = [{f"arg{j}": v for j, v in enumerate(vs)} for vs in vals]
    ident = {k: g.output is g.inputs[0] for k, g in (("then", then_g), ("else", else_g))}
    if any(g.output in g.inputs[1:] for g in (then_g, else_g)):
        raise _err("a branch that returns an operand other than the first is not lowered")
    op_scale = [_amax([v[j] for v in vals]) for j in range(n_ops)]
    outs = {k: [_np_eval(g.output, a) for a in argf] for k, g in (("then", then_g), ("else", else_g))}
    out_scale = _amax(outs["then"] + outs["else"])
    if any(ident.values()):
        op_scale[0] = out_scale = max(out_scale, op_scale[0])
    base, bodies = 0, {}
    for k, g in (("then", then_g), ("else", else_g)):
        if not ident[k]:
            bodies[k] = _compile_body(g, argf, dict(enumerate(op_scale)), out_scale, cfg, base, searcher,
                                      per_channel, f"cond {k}-branch")
            base = bodies[k].end
    # the predicate: leaves are the operands (tags "0", "1", ...)
    roles = {id(s): str(j) for j, s in enumerate(node.src[1:])}
    known = {("role", str(j)): str(j) for j in range(n_ops)}
    red, form, leaves, h, rph = _match_pred(node.src[0], known, roles)
    infos = [_host_info(f"arg{j}", node.src[1 + j].shape) for j in range(n_ops)]
    lf = [int(t) for t in leaves]
    if len(lf) == 2 and (op_scale[lf[0]] != op_scale[lf[1]] or not _lay(infos[lf[0]]).same(_lay(infos[lf[1]]))):
        raise _err("a predicate over two operands needs them to share one shape and scale")
    n = infos[lf[0]].numel
    if infos[lf[0]].phys_size != n:
        raise _err("a cond predicate over a padded tensor is not lowered")
    T, hi = _threshold(h, rph, red, form, n, op_scale[lf[0]])
    pred = _Pred(red, form, tuple(leaves), T, hi, op_scale[lf[0]])
    # DRAM: bodies, then the operand buffers, the result, the flag word
    addr = {}
    for j, inf in enumerate(infos):
        addr[j] = base
        base += -(-inf.phys_size // DRAM_ALIGN) * DRAM_ALIGN
    res_info = _lay(infos[0]) if ident["then"] or ident["else"] else None
    for k, b in bodies.items():
        if res_info is None:
            res_info = b.out_layout()
        if not res_info.same(b.out_layout()):
            raise _err("the two branches store their results in different layouts")
    res_addr, base = base, base + -(-res_info.nbytes // DRAM_ALIGN) * DRAM_ALIGN
    cnt, base = base, base + DRAM_ALIGN
    operands = []
    for j, ((nm, c, _), inf) in enumerate(zip(ops, infos)):
        dests = [addr[j]]
        for b in bodies.values():
            if j in b.ins:
                if not _lay(inf).same(b.in_layout(j)):
                    raise _err(f"operand {j} is stored padded or reordered in a branch (a padded convolution "
                               "input): not lowered")
                dests.append(b.ins[j][1])
        operands.append(_Operand(nm, c, inf, op_scale[j], dests))
    L = [f"; tetrachip cond: {'then' if hi else 'else'}-branch when {red}({form}) >= {T}"]
    _pred_code(L, pred, [addr[j] for j in lf], n, cfg, "cond_else")
    for k in ("then", "else"):
        if k == "else":
            L.append("cond_else:")
        if ident[k]:
            _copy(L, addr[0], res_addr, res_info.nbytes, cfg)
        else:
            L.append(_text(bodies[k], k))
            _copy(L, bodies[k].out_addr, res_addr, res_info.nbytes, cfg)
        L.append(f"    seti r{R_TRIP}, {1 if k == 'then' else 0}")
        if k == "then":
            L.append("    jmp cond_end")
    L.append("cond_end:")
    _store_counter(L, cnt)
    cm = ControlModel(cfg, None, "cond", bodies, operands, res_info, res_addr, out_scale, tuple(node.shape),
                      cnt, names, True, pred, 0, next((k for k, v in ident.items() if v), None), base)
    pre: list = []
    _pre_kernels(cm, list(node.src[1:]), ops, fl, cfg, searcher, per_channel, pre)
    return cm, L[:1] + pre + L[1:]


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


def _build_loop(node, names, calib, cfg, per_channel, searcher) -> ControlModel:
    from .lower import DRAM_ALIGN
    g, nscan = node.arg
    ops = [_operand(s, names) for s in node.src]
    if len(node.src) != 1 + nscan:
        raise _err("a loop body that captures non-constant tensors is not lowered")
    trips = int(node.src[1].shape[0])
    wf = _while_form(g)
    fl = [{k: np.asarray(v, np.float32) for k, v in f.items()} for f in calib]
    init_vals = [_value(ops[0], node.src[0], f) for f in fl]
    scans = [[_value(o, x, f) for o, x in zip(ops[1:], node.src[1:])] for f in fl]
    if wf is None and g.output.op is Ops.IF:
        return _build_loop_cond(node, g, names, ops, fl, init_vals, scans, trips, cfg, per_channel, searcher)
    if wf is not None:
        ifn, fg, f_is_then = wf
        feeds, seen = [], []
        for c in init_vals:                       # the float loop: every carry, and f of the last
            for _ in range(trips):
                feeds.append({"arg0": c})
                t = np.asarray(_np_eval(fg.output, {"arg0": c}), np.float32)
                seen += [c, t]
                nxt = np.asarray(_np_eval(g.output, {"arg0": c, "arg1": np.zeros(1, np.float32)}), np.float32)
                if np.array_equal(nxt, c):
                    break
                c = nxt
        s_c = _amax(seen)
        body = _compile_body(fg, feeds, {0: s_c}, s_c, cfg, 0, searcher, per_channel, "while_loop body")
        roles = {id(g.inputs[0]): "c"}
        keys_f = _skeys([fg.output], {id(fg.inputs[0]): "c"})
        known = {("role", "c"): "c", keys_f[id(fg.output)]: "f"}
        red, form, leaves, h, rph = _match_pred(ifn.src[0], known, roles)
        n = body.tensor(body.out_t).numel
        if body.out_layout().nbytes != n:
            raise _err("a while_loop predicate over a padded tensor is not lowered")
        T, hi = _threshold(h, rph, red, form, n, s_c)
        pred = _Pred(red, form, tuple(leaves), T, hi if f_is_then else not hi, s_c)
        scan_scales = []
    else:
        feeds, seen = [], []
        for c, xs in zip(init_vals, scans):
            seen.append(c)
            for i in range(trips):
                f = {"arg0": c, **{f"arg{j + 1}": np.asarray(x[i], np.float32) for j, x in enumerate(xs)}}
                feeds.append(f)
                c = np.asarray(_np_eval(g.output, f), np.float32)
                seen.append(c)
        s_c = _amax(seen)
        scan_scales = [_amax([xs[j] for xs in scans]) for j in range(nscan)]
        body = _compile_body(g, feeds, {0: s_c, **{j + 1: s for j, s in enumerate(scan_scales)}}, s_c, cfg, 0,
                             searcher, per_channel, "loop body")
        pred = None
    if 0 not in body.ins:
        raise _err("the loop body does not read its carry")
    c_t, c_addr = body.ins[0]
    c_info = body.in_layout(0)
    if not c_info.same(body.out_layout()):
        raise _err("the body stores its result in another layout than its carry (or the carry is a padded "
                   "convolution input): not lowered")
    base = body.end
    operands = [_Operand(ops[0][0], ops[0][1], _host_info("init", node.src[0].shape), s_c, [c_addr])]
    L = [f"; tetrachip {'while_loop' if wf else 'loop'}: at most {trips} trips, counter r{R_TRIP}",
         f"    seti r{R_TRIP}, 0", "loop_top:", f"    seti r1, {trips}", f"    bge r{R_TRIP}, r1, loop_done"]
    copies = []
    for j in range(nscan if wf is None else 0):
        shape = node.src[1 + j].shape
        inf = _host_info(f"scan{j}", shape)
        rowb = inf.phys_size // shape[0]
        operands.append(_Operand(ops[1 + j][0], ops[1 + j][1], inf, scan_scales[j], [base]))
        if j + 1 in body.ins:
            t = body.tensor(body.ins[j + 1][0])
            row0 = _phys(inf)[0].reshape(-1)
            if inf.perm[0] != 0 or t.phys_size != rowb or not np.array_equal(_phys(t).reshape(-1), row0):
                raise _err(f"scanned tensor {j}: a row is not stored like the body's input (padded or reordered)")
            copies.append((base, body.ins[j + 1][1], rowb))
        base += -(-inf.phys_size // DRAM_ALIGN) * DRAM_ALIGN
    for src, dst, rowb in copies:
        L += [f"    seti r2, {rowb}", f"    mul r1, r{R_TRIP}, r2"]
        _copy(L, src, dst, rowb, cfg, src_reg=1)
    L.append(_text(body, "body"))
    nbytes = c_info.nbytes
    if wf is not None:
        addrs = [{"c": c_addr, "f": body.out_addr}[x] for x in pred.leaves]
        _pred_code(L, pred, addrs, nbytes, cfg, "loop_done")
    _copy(L, body.out_addr, c_addr, nbytes, cfg)
    L += [f"    addi r{R_TRIP}, r{R_TRIP}, 1", "    jmp loop_top", "loop_done:"]
    cnt, base = base, base + DRAM_ALIGN
    _store_counter(L, cnt)
    kind = "while" if wf else "loop"
    cm = ControlModel(cfg, None, kind, {"body": body}, operands, c_info, c_addr, s_c, tuple(node.shape), cnt,
                      names, True, pred, trips, None, base)
    pre: list = []
    _pre_kernels(cm, list(node.src), ops, fl, cfg, searcher, per_channel, pre)
    return cm, L[:1] + pre + L[1:]


def _build_loop_cond(node, g, names, ops, fl, init_vals, scans, trips, cfg, per_channel, searcher):
    """A loop whose body is ``cond(p(carry), f, g, *args)`` (args: the carry and scanned rows):
    per trip the predicate on the carry picks the branch; the carry lives in its own buffer, is
    copied into the taken branch's input and its result copied back; ``r15`` counts the trips
    that took ``f``."""
    from .lower import DRAM_ALIGN
    ifn = g.output
    then_g, else_g = ifn.arg
    args = list(ifn.src[1:])
    ids = [id(x) for x in g.inputs]
    if any(id(a) not in ids for a in args) or len(then_g.inputs) != len(args) or len(else_g.inputs) != len(args):
        raise _err("a cond inside a loop body must take the loop's carry and rows directly (no captured or "
                   "computed operands)")
    amap = [ids.index(id(a)) for a in args]
    if 0 not in amap:
        raise _err("a cond inside a loop body must take the loop's carry")
    nscan = len(node.src) - 1
    ident = {k: (bg.output in bg.inputs) for k, bg in (("then", then_g), ("else", else_g))}
    for k, bg in (("then", then_g), ("else", else_g)):
        if ident[k] and amap[list(bg.inputs).index(bg.output)] != 0:
            raise _err("a branch inside a loop that returns a row instead of the carry is not lowered")
    bfeeds, seen = [], []
    for c, xs in zip(init_vals, scans):          # the float loop: carries and each branch's arguments
        seen.append(c)
        for i in range(trips):
            f = {"arg0": c, **{f"arg{j + 1}": np.asarray(x[i], np.float32) for j, x in enumerate(xs)}}
            bfeeds.append({f"arg{k}": f[f"arg{j}"] for k, j in enumerate(amap)})
            c = np.asarray(_np_eval(g.output, f), np.float32)
            seen.append(c)
    s_c = _amax(seen)
    scan_scales = [_amax([xs[j] for xs in scans]) for j in range(nscan)]
    arg_scale = {k: (s_c if j == 0 else scan_scales[j - 1]) for k, j in enumerate(amap)}
    base, bodies = 0, {}
    for k, bg in (("then", then_g), ("else", else_g)):
        if not ident[k]:
            bodies[k] = _compile_body(bg, bfeeds, arg_scale, s_c, cfg, base, searcher, per_channel,
                                      f"loop's cond {k}-branch")
            base = bodies[k].end
            if re.search(r"\br15\b", bodies[k].cm.asm):
                raise _err(f"the loop's cond {k}-branch needs scalar register r15, which counts its trips")
    red, form, leaves, h, rph = _match_pred(ifn.src[0], {("role", "c"): "c"}, {id(g.inputs[0]): "c"})
    c_info = _host_info("carry", node.src[0].shape)
    n = c_info.numel
    T, hi = _threshold(h, rph, red, form, n, s_c)
    pred = _Pred(red, form, tuple(leaves), T, hi, s_c)
    cm_addr, base = base, base + -(-c_info.phys_size // DRAM_ALIGN) * DRAM_ALIGN
    operands = [_Operand(ops[0][0], ops[0][1], c_info, s_c, [cm_addr])]
    rows = []
    for j in range(nscan):
        shape = node.src[1 + j].shape
        inf = _host_info(f"scan{j}", shape)
        operands.append(_Operand(ops[1 + j][0], ops[1 + j][1], inf, scan_scales[j], [base]))
        rows.append((inf, base, inf.phys_size // shape[0]))
        base += -(-inf.phys_size // DRAM_ALIGN) * DRAM_ALIGN
    cnt, base = base, base + DRAM_ALIGN
    L = [f"; tetrachip loop over a cond: {trips} trips; then-branch when {red}({form}) "
         f"{'>=' if hi else '<'} {T}; r{R_TRIP} trips, r15 then-trips",
         f"    seti r{R_TRIP}, 0", "    seti r15, 0", "loop_top:", f"    seti r1, {trips}",
         f"    bge r{R_TRIP}, r1, loop_done"]
    _pred_code(L, pred, [cm_addr], n, cfg, "br_else")
    for k in ("then", "else"):
        if k == "else":
            L.append("br_else:")
        if not ident[k]:
            b = bodies[k]
            for a, j in enumerate(amap):
                if a not in b.ins:
                    continue
                if j == 0:
                    if not _lay(c_info).same(b.in_layout(a)):
                        raise _err(f"the {k}-branch reads the carry padded or reordered: not lowered")
                    _copy(L, cm_addr, b.ins[a][1], c_info.phys_size, cfg)
                else:
                    inf, addr, rowb = rows[j - 1]
                    t = b.tensor(b.ins[a][0])
                    if inf.perm[0] != 0 or t.phys_size != rowb or \
                            not np.array_equal(_phys(t).reshape(-1), _phys(inf)[0].reshape(-1)):
                        raise _err(f"scanned tensor {j - 1}: a row is not stored like the {k}-branch's input")
                    L += [f"    seti r2, {rowb}", f"    mul r1, r{R_TRIP}, r2"]
                    _copy(L, addr, b.ins[a][1], rowb, cfg, src_reg=1)
            L.append(_text(b, k))
            if not b.out_layout().same(_lay(c_info)):
                raise _err(f"the {k}-branch stores its result in another layout than the carry: not lowered")
            _copy(L, b.out_addr, cm_addr, c_info.phys_size, cfg)
        if k == "then":
            L += ["    addi r15, r15, 1", "    jmp br_join"]
    L += ["br_join:", f"    addi r{R_TRIP}, r{R_TRIP}, 1", "    jmp loop_top", "loop_done:", "    fence all",
          f"    sst r{R_TRIP}, acc[0], 0", "    sst r15, acc[0], 1",
          f"    dma.st dram[{cnt}], acc[0], rows=1, len=2, rstride=8, estride=4", "    fence all", "    halt"]
    cm = ControlModel(cfg, None, "loop-cond", bodies, operands, _lay(c_info), cm_addr, s_c, tuple(node.shape), cnt,
                      names, True, pred, trips, next((k for k, v in ident.items() if v), None), base)
    cm.branch_args = amap
    pre: list = []
    _pre_kernels(cm, list(node.src), ops, fl, cfg, searcher, per_channel, pre)
    return cm, L[:1] + pre + L[1:]


__all__ = ["until_converged", "ConvergeLoop", "compile_control", "ControlModel"]
