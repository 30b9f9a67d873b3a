"""The ordinary pipeline's back end: a quantized kernel schedule lowered to a chip Program
(``lower_schedule``), and what it returns, the ``CompiledModel``.

    plan    compiler.lower.planner: DRAM tensors, and per kernel SPM/ACC buffers, packed as rectangles
    tile    compiler.lower.tiling: K tiles (strided-DMA im2col), row groups, M/N tile sizes
            (compiler.lower.search picks them by simulated cycles when asked; compiler.lower.dynamic
            cuts them to whole batch elements for a symbolic dimension)
    emit    compiler.lower.emit: instructions with tokens and repeat registers, built by isa.builder

The dispatcher (``compiler.lower.dispatch.compile_model``) reaches it after tracing, lifting and
quantizing; control flow (``compiler.lower.control_glue``) lowers each of its bodies with it.
A ``CompiledModel`` holds the Program (its manifest describes the DRAM layout), the constant DRAM
image, the quantized schedule (its ``reference`` is the bit-exact numpy evaluation) and the plans;
it implements ``compiler.lower.compiled.Compiled``, so ``runtime`` runs it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from isa.config import ChipConfig
from isa.ints import align_up, cdiv
from isa.program import DRAM_ALIGN, Program

from compiler.lower.compiled import Compiled, named_feeds, unpack_inputs
from compiler.lower.dynamic import cut, fit_ew, fit_gemm, host_feeds
from compiler.lower.emit import EW_MAX_INPUTS, EwCode, KernelCode, emit_program
from compiler.lower.planner import Buffer, plan
from compiler.lower.quantize import QSchedule, dequantize_outputs, input_ints, run_int
from compiler.lower.schedule import ChipCompileError, EwKernel, Schedule, base_to_mn, kernel_inputs, run_float
from compiler.lower.tiling import Tiling, choose, k_tiles, pad_lanes, period, tile_weights



@dataclass
class KernelInfo:
    name: str
    M: int
    K: int
    N: int
    tiling: Tiling
    ktiles: int
    macs: int
    kind: str = "gemm"


@dataclass
class CompiledModel(Compiled):
    """A kernel sequence compiled by the ordinary pipeline (``lower_schedule``)."""
    config: ChipConfig
    program: Program
    qsched: QSchedule
    const_image: np.ndarray          # bytes written at const_base
    const_base: int
    tensor_addr: dict                # tensor index -> DRAM byte address
    input_names: list
    n_outputs: int
    single_output: bool
    kernels: list[KernelInfo]
    plans: dict                      # "dram" -> Plan, "spm"/"acc" -> Plan
    compile_s: float
    timings: dict = field(default_factory=dict)
    dynamic: object = None           # compiler.lower.dynamic.DynSpec when a dimension is symbolic
    search_report: list | None = None  # compiler.lower.search: per kernel, the winner and the default
    asm: str = ""                    # the program's listing (isa.builder.ProgramBuilder.text), to read

    # -- host side of a run ----------------------------------------------------------------
    def feeds(self, inputs) -> dict:
        return named_feeds(self.input_names, inputs)

    def dram_writes(self, feeds: dict) -> list[tuple[int, np.ndarray]]:
        """(address, bytes) the host writes before launch: constants, then the quantized inputs."""
        q = self.qsched
        # the tensor arena starts zeroed (borders of padded tensors that no earlier tensor shared)
        out = [(0, np.zeros(self.const_base, np.uint8)), (self.const_base, self.const_image)]
        for ti, xq in input_ints(q, feeds).items():
            out.append((self.tensor_addr[ti], q.sched.tensors[ti].to_phys(xq)))
        return out

    def output_tensors(self) -> list[int]:
        return sorted({t for t, _ in self.qsched.sched.outputs})

    def read_outputs(self, read) -> tuple[list[np.ndarray], dict]:
        """``read(addr, n, dtype)`` reads DRAM; returns the dequantized outputs and the integer tensors."""
        q, s = self.qsched, self.qsched.sched
        vals = {}
        for ti in self.output_tensors():
            t = s.tensors[ti]
            vals[ti] = t.from_phys(read(self.tensor_addr[ti], t.phys_size, q.dtype(ti)))
        return dequantize_outputs(q, vals), vals

    def reference(self, *inputs) -> list[np.ndarray]:
        """The quantized model evaluated with numpy: what the chip must return, bit for bit."""
        return self._at_length(lambda feeds: run_int(self.qsched, feeds)[0], inputs)

    def float_reference(self, *inputs) -> list[np.ndarray]:
        """The float kernel schedule the quantized one approximates (``schedule.run_float``), float32."""
        def run(feeds):
            return [np.asarray(o, np.float32) for o in run_float(self.qsched.sched, feeds)]
        return self._at_length(run, inputs)

    def _at_length(self, run, inputs) -> list[np.ndarray]:
        """``run(feeds)`` on the inputs; with a symbolic dimension, on the inputs padded to its maximum
        and the outputs cut to its value (what the chip computes)."""
        feeds = self.feeds(unpack_inputs(inputs))
        if self.dynamic is None:
            return run(feeds)
        padded, n = host_feeds(self.dynamic, feeds)
        return cut(self.dynamic, run(padded), n)

    def summary(self) -> str:
        lines = [f"compiled for {self.config.name}: {len(self.program)} instructions, "
                 f"{len(self.kernels)} kernel(s), compile {self.compile_s:.2f} s"]
        for k in self.kernels:
            t = k.tiling
            if k.kind == "elementwise":
                lines.append(f"  {k.name:<10} elementwise sum of {k.K} tensors: {k.M} rows of {k.N} lanes, "
                             f"{t.MT} tile(s) of {t.Mt}")
                continue
            lines.append(f"  {k.name:<10} GEMM {k.M}x{k.K}x{k.N}: {k.ktiles} K tiles, {t.NT} N tiles, "
                         f"{t.MT} M tile(s) of {t.Mt}")
        for name, p in self.plans.items():
            lines.append(f"  {name:<5} footprint {p.footprint} vs live bound {p.bound} "
                         f"({100 * (p.ratio - 1):+.1f}%), best ordering {p.best}; per ordering: "
                         + ", ".join(f"{o} {v}" for o, v in p.per_ordering.items()))
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- lowering

def lower_schedule(q: QSchedule, cfg: ChipConfig, names, single, n_out, spec=None, searcher=None,
                   dram_base: int = 0) -> CompiledModel:
    """A quantized schedule as a Program: the DRAM plan, per kernel its tiling and SPM/ACC buffers,
    then the emitted code. ``dram_base``: where this program's DRAM region starts (control flow
    places bodies side by side)."""
    s: Schedule = q.sched
    R, C = cfg.rows, cfg.cols
    nk = len(s.kernels)
    # ---- DRAM plan: tensors as rectangles (kernel steps x bytes); padded ones live from the start
    last_use = {}
    for i, k in enumerate(s.kernels):
        for t in kernel_inputs(k):
            last_use[t] = i
    for t, _ in s.outputs:
        last_use[t] = nk
    bufs = []
    for ti, t in enumerate(s.tensors):
        start = 0 if t.kind == "input" else t.producer       # borders are zeroed by the producer
        end = last_use.get(ti, start)
        bufs.append(Buffer(f"t{ti}", t.phys_size * q.elem_bytes(ti), start, end))
    dplan = plan(bufs, memory="dram", align=DRAM_ALIGN)
    tensor_addr = {ti: dram_base + dplan.offsets[f"t{ti}"] for ti in range(len(s.tensors))}
    const_base = dram_base + align_up(dplan.footprint, DRAM_ALIGN)
    consts: list[np.ndarray] = []
    cpos = [const_base]

    def put(arr: np.ndarray) -> int:
        addr = cpos[0]
        b = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        consts.append(b)
        pad = (-len(b)) % DRAM_ALIGN
        if pad:
            consts.append(np.zeros(pad, np.uint8))
        cpos[0] += len(b) + pad
        return addr

    codes, infos, spm_bufs, acc_bufs = [], [], [], []
    for i, (k, qk) in enumerate(zip(s.kernels, q.qkernels)):
        if isinstance(k, EwKernel):
            ec, info = _lower_ew(cfg, s, k, qk, tensor_addr)
            if spec is not None:
                ec.tiling, ec.dyn = fit_ew(cfg, ec.tiling, ec.in_rows, ec.out_rows, spec.max,
                                           f"elementwise kernel {k.name}")
                info.tiling = ec.tiling
            spm_bufs.append(Buffer(f"k{i}.A", ec.tiling.spm_rows, i, i))
            acc_bufs.append(Buffer(f"k{i}.acc", ec.tiling.acc_rows, i, i))
            codes.append(ec)
            infos.append(info)
            continue
        what = f"kernel {k.name} (GEMM {k.M}x{k.K}x{k.N}, {k.op_text})"
        src, out = s.tensors[k.src], s.tensors[k.out]
        P = src.phys_offsets(k.gather)                         # int8 elements = bytes
        order, kts, rows = k_tiles(P, R, what)
        a_rows = tensor_addr[k.src] + rows          # row offsets relative to P[0, 0]; the K tiles hold P[0, k]
        eb = q.elem_bytes(k.out)
        offs = base_to_mn(out.phys_offsets(out.identity()), out, k)
        if k.N > 1 and not np.all(np.diff(offs, axis=1) == 1):
            raise ChipCompileError(f"{what}: output channels are not contiguous in DRAM")
        out_rows = tensor_addr[k.out] + offs[:, 0] * eb
        run = _common_period(a_rows, out_rows)
        tl = choose(cfg, k.M, len(kts), k.N, qk.out_int8, run, what,
                    single_ok=qk.out_int8 or qk.bias_q is None)
        w_addr = put(tile_weights(qk.w_q, order, kts, R, C))
        b_addr = put(pad_lanes(qk.bias_q, C)) if qk.bias_q is not None else None
        sc_addr = put(pad_lanes(qk.scale, C)) if qk.out_int8 else None
        if searcher is not None:          # compiler.lower.search: the simulator picks (Mt, nbuf, NB)
            tl = searcher.pick(KernelCode(k.name, tl, kts, a_rows, out_rows, qk.out_int8, w_addr, b_addr,
                                          sc_addr, qk.shift, qk.lo, k.relu, 0, 0, 0, 0), run)
        dk = None
        if spec is not None:
            tl, dk = fit_gemm(cfg, tl, k.M, a_rows, out_rows, spec.max, what, qk.out_int8, qk.bias_q is not None)
        spm_bufs += [Buffer(f"k{i}.A", tl.a_rows, i, i), Buffer(f"k{i}.W", tl.NB * R, i, i)]
        if qk.out_int8:
            spm_bufs.append(Buffer(f"k{i}.O", 2 * tl.Mt, i, i))
        acc_bufs.append(Buffer(f"k{i}.acc", tl.acc_rows, i, i))     # two regions, then the scale rows
        codes.append(KernelCode(k.name, tl, kts, a_rows, out_rows, qk.out_int8, w_addr, b_addr, sc_addr,
                                qk.shift, qk.lo, k.relu, 0, 0, 0, 0, dk))
        infos.append(KernelInfo(k.name, k.M, k.K, k.N, tl, len(kts), k.macs))
    if cpos[0] > cfg.dram_bytes:
        raise ChipCompileError(f"the model needs {cpos[0]} bytes of DRAM (tensors {dplan.footprint}, constants "
                               f"{cpos[0] - const_base}); config {cfg.name!r} has {cfg.dram_bytes} (dram_bytes)")
    borders = {i: [] for i in range(nk)}
    for ti, t in enumerate(s.tensors):
        if t.kind == "kernel" and t.padded:
            if _reused(bufs[ti], bufs, dplan.offsets):     # else the zeroed arena already holds zeros
                borders[t.producer].append(_border_chunks(t, tensor_addr[ti], C))
    if any(borders.values()):
        spm_bufs.append(Buffer("zero", ZERO_ROWS, 0, nk))          # never written: reads as zeros
    splan = plan(spm_bufs, memory="spm")
    aplan = plan(acc_bufs, memory="acc")
    if splan.footprint > cfg.spm_rows or aplan.footprint > cfg.acc_rows:
        raise ChipCompileError(f"SPM/ACC plan exceeds config {cfg.name!r}: {splan.footprint} SPM rows "
                               f"(of {cfg.spm_rows}, spm_rows), {aplan.footprint} ACC rows (of {cfg.acc_rows}, "
                               f"acc_rows)")
    for i, kc in enumerate(codes):
        if isinstance(kc, EwCode):
            kc.spm_base, kc.acc_base = splan.offsets[f"k{i}.A"], aplan.offsets[f"k{i}.acc"]
            continue
        kc.spm_a = splan.offsets[f"k{i}.A"]
        kc.spm_w = splan.offsets[f"k{i}.W"]
        kc.spm_o = splan.offsets.get(f"k{i}.O", 0)
        kc.acc_base = aplan.offsets[f"k{i}.acc"]
    zero = splan.offsets.get("zero")
    prefixes = {i: [(zero, ch) for ch in chunks] for i, chunks in borders.items() if chunks}
    built = emit_program(codes, cfg, prefixes)
    if len(built) > cfg.imem_words:
        raise ChipCompileError(f"the compiled program needs {len(built)} instructions; config {cfg.name!r} "
                               f"holds {cfg.imem_words} (imem_words)")
    prog = built.build("<compiled model>")
    image = np.concatenate(consts) if consts else np.zeros(0, np.uint8)
    prog.manifest = {
        "kind": "compiled-model",
        "inputs": {n: {"addr": tensor_addr[s.inputs[n]], "shape": list(s.tensors[s.inputs[n]].shape),
                       "layout": list(s.tensors[s.inputs[n]].perm), "scale": q.scales[s.inputs[n]]}
                   for n in names},
        "outputs": [{"addr": tensor_addr[t], "dtype": q.dtype(t)} for t, _ in s.outputs],
        "constants": {"addr": const_base, "bytes": int(len(image))},
        "kernels": [{"name": k.name, "M": k.M, "K": k.K, "N": k.N} for k in infos],
    }
    return CompiledModel(cfg, prog, q, image, const_base, tensor_addr, names, n_out, single, infos,
                         {"dram": dplan, "spm": splan, "acc": aplan}, 0.0, asm=built.text())


#: SPM rows reserved (never written) as the source of zero-border stores
ZERO_ROWS = 64


def _reused(b: Buffer, bufs: list, offsets: dict) -> bool:
    """Does a buffer that dies before ``b`` starts share some of ``b``'s bytes?"""
    lo, hi = offsets[b.name], offsets[b.name] + b.size
    return any(o.end < b.start and offsets[o.name] < hi and lo < offsets[o.name] + o.size for o in bufs)


def _border_chunks(t, base: int, cols: int) -> tuple[dict, int, int]:
    """DRAM addresses of a padded tensor's zero border in chunks of at most ``cols`` contiguous
    bytes, grouped by length ({length: addresses}), for one slice of the outermost unpadded axis;
    with that axis' count and byte stride (the slices repeat: one nest level)."""
    pshape = t.phys_shape
    outer, ostride, lead = 1, 0, 0
    for i, a in enumerate(t.perm):
        if t.shape[a] > 1:
            if t.pads[a] == [0, 0]:
                outer, ostride, lead = pshape[i], int(np.prod(pshape[i + 1:])), i + 1
            break
    sub = pshape[lead:]
    inner = np.zeros(sub, bool)
    inner[tuple(slice(t.pads[a][0], t.pads[a][0] + t.shape[a]) for a in t.perm[lead:])] = True
    off = np.flatnonzero(~inner.reshape(-1))
    out: dict[int, list] = {}
    if off.size:
        cut = np.flatnonzero(np.diff(off) != 1) + 1
        for seg in np.split(off, cut):
            for i in range(0, len(seg), cols):
                n = min(cols, len(seg) - i)
                out.setdefault(n, []).append(base + int(seg[i]))
    return {n: np.array(v, np.int64) for n, v in out.items()}, outer, ostride


def _lower_ew(cfg, s: Schedule, k: EwKernel, qk, tensor_addr) -> tuple[EwCode, KernelInfo]:
    """Rows of L lanes, contiguous in every input and in the output, in the output's memory order."""
    what = f"elementwise kernel {k.name}"
    if len(k.srcs) > EW_MAX_INPUTS:
        raise ChipCompileError(f"{what}: {len(k.srcs)} inputs, at most {EW_MAX_INPUTS} are supported")
    out = s.tensors[k.out]
    out_p = out.phys_offsets(out.identity()).reshape(-1)
    order = np.argsort(out_p, kind="stable")
    seqs = [out_p[order]] + [s.tensors[t].phys_offsets(idx).reshape(-1)[order] for t, idx in k.srcs]
    n = len(order)
    L = next(w for w in range(min(cfg.cols, n), 0, -1)
             if n % w == 0 and all(np.all(np.diff(a.reshape(-1, w), axis=1) == 1) for a in seqs))
    rows = n // L
    out_rows = tensor_addr[k.out] + seqs[0].reshape(-1, L)[:, 0]
    in_rows = [tensor_addr[t] + a.reshape(-1, L)[:, 0] for (t, _), a in zip(k.srcs, seqs[1:])]
    nin = len(in_rows)
    Mt = min(rows, cfg.spm_rows // (nin + 1), cfg.acc_rows // 2)
    if Mt < 1:
        raise ChipCompileError(f"{what}: {nin} inputs do not fit SPM on config {cfg.name!r}")
    if Mt < rows:
        p = _common_period(in_rows[0], out_rows)
        if p > 1 and all(_common_period(r, out_rows) == p for r in in_rows) and Mt >= p:
            Mt = Mt // p * p
    MT = cdiv(rows, Mt)
    tl = Tiling(rows, L, nin, 1, Mt, MT, 0, 1, (nin + 1) * Mt, 2 * Mt)
    ec = EwCode(k.name, tl, L, in_rows, out_rows, list(qk.coefs), qk.shift, qk.lo, 0, 0)
    return ec, KernelInfo(k.name, rows, nin, L, tl, 0, 0, "elementwise")


def _common_period(a_rows, out_rows) -> int:
    p = period(a_rows)
    if p > 1:
        d = out_rows[p:] - out_rows[:-p]
        if len(d) and not np.all(d == d[0]):
            p = 1
    return p


def reference_tensors(cm: CompiledModel, feeds: dict) -> dict:
    """Every tensor of the quantized reference (integers), by tensor index."""
    return run_int(cm.qsched, feeds)[1]


__all__ = ["CompiledModel", "KernelInfo", "lower_schedule", "reference_tensors"]
