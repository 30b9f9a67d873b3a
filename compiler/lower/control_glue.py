"""Bodies and glue code of frontend control flow on the chip (``compiler.lower.control_lower``).

A body (a branch, a loop body, the kernels before/after) is compiled by the ordinary pipeline
into a DRAM region of its own (``compile_body``, with ``_retie`` forcing shared int8 scales);
``inline_body`` appends its program to the control flow's ``isa.builder.ProgramBuilder`` (labels
renamed apart, its registers checked against those the control flow reserved). The glue between
bodies, emitted into the same builder: ``copy_bytes`` (DRAM -> SPM -> DRAM rows, an optional
register offset on the source), ``move_value``, ``pred_code`` (the predicate's reduction on the
VPU, ``sld`` and the branch), ``store_counter``. The glue's registers are ``isa.regs.ControlGlue``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from isa.builder import Label, ProgramBuilder, acc, dram, spm
from isa.ints import align_up, cdiv
from isa.program import DRAM_ALIGN
from isa.regs import L0, Reg
from isa.regs import ControlGlue as G
from isa.table import SPACE_BYTES, Space

from compiler.ir import engine
from compiler.ir.graph import CONTROL, toposort
from compiler.lower.control_pred import Pred, control_error
from compiler.lower.pipeline import lower_schedule
from compiler.lower.quantize import ew_int, kernel_int, quantize, quantize_ew, quantize_gemm
from compiler.lower.schedule import EwKernel, TensorInfo, gather_base, kernel_inputs, lift

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
        q.qkernels[i] = quantize_ew(q, k, qk.lo) if isinstance(k, EwKernel) else \
            quantize_gemm(q, k, qk.w_q, qk.s_w, qk.lo)


@dataclass
class Body:
    """One body compiled by the ordinary pipeline into its own DRAM region."""
    cm: object
    ins: dict                # argument index -> (tensor index, DRAM address)
    out_t: int
    out_idx: np.ndarray
    out_addr: int
    end: int                 # first DRAM byte after the region
    outs: list = field(default_factory=list)     # every result: (tensor index, view, DRAM address)
    what: str = "body"       # what it is, for errors (e.g. "loop body")

    @property
    def q(self):
        return self.cm.qsched

    def tensor(self, t: int) -> TensorInfo:
        return self.q.sched.tensors[t]

    def out_layout(self) -> BufferLayout:
        return layout_of(self.tensor(self.out_t), self.out_idx)

    def in_layout(self, j: int) -> BufferLayout:
        return layout_of(self.tensor(self.ins[j][0]))

    def run(self, ints: dict) -> np.ndarray:
        """The quantized body in numpy (``quantize.kernel_int``/``ew_int``): argument ints -> result ints."""
        return self.run_all(ints)[0]

    def run_all(self, ints: dict) -> list:
        s, vals = self.q.sched, self.run_vals(ints)
        return [gather_base(vals[t], s.tensors[t], idx) for t, idx, _ in self.outs]

    def run_vals(self, ints: dict) -> dict:
        """Every tensor's integers (by tensor index) from the arguments' (by argument key)."""
        from compiler.lower.schedule import mn_to_base
        s = self.q.sched
        vals = {t: ints[j] for j, (t, _) in self.ins.items()}
        for i, k in enumerate(s.kernels):
            if isinstance(k, EwKernel):
                vals[k.out] = ew_int(self.q, i, vals)
            else:
                vals[k.out] = mn_to_base(kernel_int(self.q, i, vals[k.src]), s.tensors[k.out], k)
        return vals


def compile_body(g, calib: list, scales: dict, out_scale, cfg, base: int, searcher, per_channel: bool,
                 what: str, outputs: list | None = None) -> Body:
    """A body graph ``g`` (inputs ``arg0..``; ``scales`` by argument index, ``out_scale`` its
    result's), or with ``outputs`` a top-level subgraph (inputs by model input name, one scale per
    output in ``out_scale``), compiled by the ordinary pipeline at DRAM ``base``."""
    nodes = [g.output] if outputs is None else list(outputs)
    out_scales = [out_scale] if outputs is None else (None if out_scale is None else list(out_scale))
    key = (lambda n: int(n[3:])) if outputs is None else (lambda n: n)
    if any(n.op in CONTROL for n in toposort(nodes)):
        raise control_error(f"{what}: nested control flow is not supported on the chip (only the while_loop form)")
    sched = lift(engine.prepare(nodes))
    q = quantize(sched, calib, per_channel)
    names = list(sched.inputs)
    fixed = {sched.inputs[n]: scales[key(n)] for n in names if key(n) in scales}
    for (out_t, out_idx), sc in zip(sched.outputs, out_scales or []):   # None: the model's own outputs
        t = sched.tensors[out_t]
        if t.kind != "kernel" or t.padded or not np.array_equal(np.ravel(out_idx), np.ravel(t.identity())):
            raise control_error(f"{what}: the result must be a whole kernel output (not a view or slice of one)")
        fixed[out_t] = sc
    _retie(q, fixed)
    cm = lower_schedule(q, cfg, names, True, len(nodes), None, searcher, dram_base=base)
    ins = {key(n): (sched.inputs[n], cm.tensor_addr[sched.inputs[n]]) for n in names}
    end = cm.const_base + len(cm.const_image)
    outs = [(t, idx, cm.tensor_addr[t]) for t, idx in sched.outputs]
    return Body(cm, ins, outs[0][0], outs[0][1], outs[0][2], align_up(end, DRAM_ALIGN), outs, what)


def phys_offsets_of(t: TensorInfo, idx=None) -> np.ndarray:
    return t.phys_offsets(t.identity() if idx is None else idx)


@dataclass
class BufferLayout:
    """Where each element of a value (in its logical shape) lies in a DRAM buffer of ``nbytes``."""
    offsets: np.ndarray
    nbytes: int

    def same(self, o: "BufferLayout") -> bool:
        return self.nbytes == o.nbytes and np.array_equal(self.offsets.reshape(-1), o.offsets.reshape(-1))

    @property
    def shape(self) -> tuple:
        return tuple(self.offsets.shape)

    def to_phys(self, x: np.ndarray) -> np.ndarray:
        """The buffer's bytes holding ``x`` (zeros elsewhere, e.g. a convolution input's border)."""
        out = np.zeros(self.nbytes, np.asarray(x).dtype)
        out[self.offsets.reshape(-1)] = np.asarray(x).reshape(-1)
        return out


def layout_of(t: TensorInfo, idx=None) -> BufferLayout:
    return BufferLayout(phys_offsets_of(t, idx), t.phys_size)


def inline_body(b: ProgramBuilder, body: Body, tag: str) -> None:
    """Append a body's program without its ``halt``, labels renamed ``tag_NAME``; a register the body
    uses that the control flow reserved (``ProgramBuilder.reserve``) raises ``RegisterClash``."""
    b.inline(body.cm.program, tag, owner=body.what)


# ------------------------------------------------------------------------------- glue code

def copy_bytes(b: ProgramBuilder, src: int, dst: int, nbytes: int, cfg, src_reg: Reg | None = None) -> None:
    """DRAM -> SPM -> DRAM, rows of ``cols`` bytes (kernels are fenced: SPM row 0 up is free)."""
    C = cfg.cols
    full, rem = divmod(nbytes, C)
    chunk = cfg.spm_rows
    pieces = [(r0 * C, min(chunk, full - r0), C) for r0 in range(0, full, chunk)]
    if rem:
        pieces.append((full * C, 1, rem))
    for i, (off, rows, ln) in enumerate(pieces):     # a piece's load waits until the last store read SPM
        a = src + off
        b.emit("dma.ld", spm[0], dram[a + src_reg if src_reg is not None else a], rows=rows, len=ln, rstride=C,
               wait="store" if i else None, signal="store")
        b.emit("dma.st", dram[dst + off], spm[0], rows=rows, len=ln, rstride=C, wait="load",
               signal="load" if i < len(pieces) - 1 else None)
    b.emit("fence", "all")


def move_value(b: ProgramBuilder, src: int, src_lay: BufferLayout, dst: int, dst_lay: BufferLayout, cfg) -> None:
    """Copy a value between two DRAM buffers of its layouts: a byte copy when they agree, else
    runs contiguous in both, cut to ``cols`` bytes and grouped into strided DMAs (e.g. into the
    interior of a convolution input's zero border)."""
    if src_lay.same(dst_lay):
        return copy_bytes(b, src, dst, src_lay.nbytes, cfg)
    C = cfg.cols
    s, d = src_lay.offsets.reshape(-1), dst_lay.offsets.reshape(-1)
    o = np.argsort(d, kind="stable")
    s, d = s[o], d[o]
    cut = np.flatnonzero((np.diff(s) != 1) | (np.diff(d) != 1)) + 1
    pieces = []                               # (offset in its run, run, src, dst, length)
    for r, (lo, hi) in enumerate(zip(np.r_[0, cut], np.r_[cut, len(s)])):
        for k in range(lo, hi, C):
            pieces.append((k - lo, r, int(s[k]), int(d[k]), min(C, hi - k)))
    pieces.sort()
    groups: list = []                         # [src, dst, length, count, src stride, dst stride]
    for _, _, s0, d0, ln in pieces:
        g = groups[-1] if groups else None
        if g is not None and g[2] == ln and g[3] < cfg.spm_rows:
            if g[3] == 1 and s0 > g[0] and d0 > g[1]:
                g[4], g[5], g[3] = s0 - g[0], d0 - g[1], 2
                continue
            if g[3] > 1 and s0 == g[0] + g[4] * g[3] and d0 == g[1] + g[5] * g[3]:
                g[3] += 1
                continue
        groups.append([s0, d0, ln, 1, C, C])
    for i, (s0, d0, ln, n, ss, ds) in enumerate(groups):
        b.emit("dma.ld", spm[0], dram[src + s0], rows=n, len=ln, rstride=ss, wait="store" if i else None,
               signal="store")
        b.emit("dma.st", dram[dst + d0], spm[0], rows=n, len=ln, rstride=ds, wait="load",
               signal="load" if i < len(groups) - 1 else None)
    b.emit("fence", "all")


def pred_code(b: ProgramBuilder, p: Pred, addrs: list, nbytes: int, cfg, false_label: Label) -> None:
    """Reduce the leaf tensors on the VPU, ``sld`` the result, branch to ``false_label`` when the
    predicate is false."""
    C = cfg.cols
    rows = cdiv(nbytes, C)
    if len(addrs) * rows > cfg.spm_rows or rows > cfg.acc_rows:
        raise control_error(f"a predicate over {nbytes} elements does not fit SPM/ACC on config {cfg.name!r}")
    bufs = [i * rows for i in range(len(addrs))]
    b.comment(f"predicate: {p.red}({p.form}) over {nbytes} elements, threshold {p.T}")
    full, rem = divmod(nbytes, C)
    # a DMA zeroes the lanes past ``len``: neutral for sums and for max of |x|, |x - y| (>= 0); for
    # max(x) the last row is instead the tensor's last ``cols`` bytes (repeats are harmless to a max)
    overlap = rem and p.red == "max" and p.form == "a"
    if overlap and nbytes < C:
        raise control_error(f"max(x) over {nbytes} elements (fewer than the {C} lanes of a row) is not lowered")
    loads = []                                # (SPM row, DRAM address, rows, len)
    for buf, a in zip(bufs, addrs):
        if full:
            loads.append((buf, a, full, C))
        if overlap:
            loads.append((buf + full, a + nbytes - C, 1, C))
        elif rem:
            loads.append((buf + full, a + full * C, 1, rem))
    for j, (row, a, n, ln) in enumerate(loads):
        b.emit("dma.ld", spm[row], dram[a], rows=n, len=ln, rstride=C, signal="vpu" if j == len(loads) - 1 else None)
    D = 0
    if p.form == "a":
        b.emit("vadd", acc[D], spm[bufs[0]], 0, n=rows, wait="load")
    elif p.form == "|a|":
        b.emit("vabs", acc[D], spm[bufs[0]], n=rows, wait="load")
    else:
        b.emit("vsub", acc[D], spm[bufs[0]], spm[bufs[1]], n=rows, wait="load")
        if p.form == "|a-b|":
            b.emit("vabs", acc[D], acc[D], n=rows)
    op, rop = ("vmax", "vrmax") if p.red == "max" else ("vadd", "vrsum")
    if rows > 1:
        b.emit("loop", L0, rows - 1, s0=0, s1=0, s2=1)
        b.emit(op, acc[D], acc[D], acc[D + 1], n=1, rep=L0)
    b.emit(rop, acc[D], acc[D], n=1, signal="scalar")
    b.emit("sld", G.A, acc[D], 0, wait="vpu")
    b.emit("seti", G.B, p.T)
    b.emit("fence", "all")
    # false: hi -> R < T; not hi -> R >= T
    b.emit("blt" if p.hi else "bge", G.A, G.B, false_label)


def store_counter(b: ProgramBuilder, addr: int, *regs: Reg) -> None:
    """Store the counters ``regs`` (int32, in order) to DRAM ``addr`` through ACC row 0."""
    eb = SPACE_BYTES[Space.ACC]
    b.emit("fence", "all")
    for lane, r in enumerate(regs):
        b.emit("sst", r, acc[0], lane)
    b.emit("dma.st", dram[addr], acc[0], rows=1, len=len(regs), rstride=len(regs) * eb, estride=eb)
    b.emit("fence", "all")
