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

from dataclasses import dataclass, field, replace

import numpy as np

from isa.config import ChipConfig
from isa.errors import TetrachipError
from isa.ints import align_up, cdiv
from isa.program import DRAM_ALIGN, Program
from isa.table import SPACE_BYTES, Space
from isa.timing import VPU_LATENCY, lut_rows, mxu_swap_delay, row_beats

from compiler.lower.compiled import Compiled, check_finite, named_feeds, unpack_inputs
from compiler.lower.dynamic import cut, fit_ew, fit_gemm, host_feeds
from compiler.lower.emit import (EW_MAX_INPUTS, EwCode, KernelCode, columns_loop, emit_program, split_m_tiles,
                                 vpu_bias, zero_rows)
from compiler.lower.attention import AttnCode, lower_attention
from compiler.lower.norms import NormCode, lower_norm
from compiler.lower.planner import Buffer, plan
from compiler.lower.quantize import QSchedule, dequantize_outputs, input_int, input_ints, run_int
from compiler.lower.bmm import BmmKernel
from compiler.lower.bmm_lower import lower_bmm
from compiler.lower.gather import GatherKernel
from compiler.lower.gather_lower import lower_gather
from compiler.lower.keybound import Bound
from compiler.lower.schedule import (AttnKernel, ChipCompileError, EwKernel, NormKernel, Schedule,
                                     base_to_mn, kernel_inputs, run_float)
from compiler.lower.tiling import Tiling, choose, ew_fits, joint_period, k_tiles, pad_lanes, scale_chunk, tile_weights
from compiler.lower.tiling import common_period as _common_period



@dataclass
class KernelInfo:
    name: str
    M: int
    K: int
    N: int
    tiling: Tiling
    ktiles: int
    macs: int                        # useful multiply-accumulates (a grouped kernel's zero blocks not counted)
    kind: str = "gemm"
    #: multiply-accumulate slots the MXU spends (rows streamed x weight rows x cols, as ``Stats.mxu_macs``)
    mxu_macs: int = 0


@dataclass
class Lowered:
    """What ``lower_schedule`` emitted a program from, for a caller that emits the codes in another order
    (``compiler.lower.shard``): the codes (kernels, column blocks of grouped kernels, kernels that emit
    themselves) with their SPM/ACC places set, the border fills and fences by code index (as
    ``emit.emit_program`` takes them), each kernel's first code, and the SPM row of the never-written zero rows
    (None when no border needs them), and the kernels whose columns chips share (``lower_schedule``'s ``shard``)."""
    codes: list
    prefixes: dict
    fences: dict
    first_code: list
    zero: int | None
    #: tensor parallel: kernel -> per chip, the output it writes as blocks ``(DRAM address of each run, run bytes)``
    split: dict = field(default_factory=dict)
    #: tensor parallel, a row-parallel GEMM (``TensorPlan.rows``): kernel -> its ``Reduce`` (the all-reduce and
    #: requantization ``compiler.lower.shard`` emits after its codes)
    reduce: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TensorPlan:
    """One chip's part of the Megatron-style pairs of a tensor-parallel model (``compiler.lower.shard``):
    ``rows``, per row-parallel GEMM, the K indices of the chip (the columns of its input it holds): it multiplies
    those columns by those rows of the weights into an int32 partial sum in DRAM (``Reduce``; the bias on chip 0
    only); ``ew``, per elementwise kernel between the columns' producer and such a GEMM, the physical offsets of
    its output elements the chip needs (it computes the rows that hold one, instead of a share of the rows)."""
    ew: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)


@dataclass
class Reduce:
    """A row-parallel GEMM's output: ``M`` x ``N`` int32 partial sums at DRAM ``scratch`` (row-major); summed over
    the chips, requantized as the single chip's GEMM does (``vqcfg shift, lo, hi``; ``vreq`` by the scale lanes
    at ``scale_addr``, one row of ``cols`` int32 per N tile) and stored as int8 rows at ``out_rows``."""
    name: str
    scratch: int
    M: int
    N: int
    out_rows: np.ndarray
    scale_addr: int
    shift: int
    lo: int
    hi: int


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
    #: compiler.lower.search, the whole model: {"searched": cycles, "default": cycles, "kept": "searched" | "default"}
    search_whole: dict | None = None
    asm: str = ""                    # the program's listing (isa.builder.ProgramBuilder.text), to read
    resident_inputs: bool = False    # no tensor takes an input's DRAM place during a run (``lower_schedule``)
    #: the program as pages run in turn (docs/microarchitecture.md, "Programs longer than imem"); ``program``
    #: is the first; a program that fits imem is its one page
    pages: list = field(default_factory=list)

    def __post_init__(self):
        if not self.pages:
            self.pages = [self.program]
    key_bound: object = None         # compiler.lower.keybound.KeyBound: attention bounded by a key count
    lowered: Lowered | None = field(default=None, repr=False)   # kept with ``borders_always``

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

    def input_writes(self, name: str, values, at=None) -> list[tuple[int, np.ndarray]]:
        """(address, bytes) that write ``values`` into part of input ``name`` in DRAM: ``at`` is a numpy index
        into the input's shape (None: all of it) and ``values`` has the shape of that part. The values are
        quantized exactly as ``dram_writes`` quantizes the whole input; runs of consecutive bytes go as one
        write. (What a resident chip, ``runtime.sim_backend.SimSession``, writes between runs.)"""
        q = self.qsched
        if name not in q.sched.inputs:
            raise TetrachipError(f"the model has no input {name!r}; inputs: {', '.join(self.input_names)}")
        ti = q.sched.inputs[name]
        t = q.sched.tensors[ti]
        flat = np.arange(int(np.prod(t.shape)), dtype=np.int64).reshape(t.shape)
        try:
            sel = flat if at is None else flat[at]
        except IndexError as e:
            raise TetrachipError(f"input {name!r} of shape {t.shape}: bad index {at!r}: {e}") from None
        values = np.asarray(values)
        if values.shape != np.shape(sel):
            raise TetrachipError(f"input {name!r}: {values.shape} values for a part of shape {np.shape(sel)}")
        ints = input_int(q, name, values).reshape(-1)
        phys = t.to_phys(flat + 1)                  # element -> its position in the DRAM image (1-based)
        where = np.empty(flat.size, np.int64)
        where[phys[phys > 0] - 1] = np.flatnonzero(phys)
        pos = where[np.reshape(sel, -1)]
        order = np.argsort(pos, kind="stable")
        pos, ints = pos[order], ints[order]
        size = ints.dtype.itemsize
        cuts = np.flatnonzero(np.diff(pos) != 1) + 1
        base = self.tensor_addr[ti]
        return [(base + int(p[0]) * size, np.ascontiguousarray(v))
                for p, v in zip(np.split(pos, cuts), np.split(ints, cuts)) if len(p)]

    def zeroed_before_run(self) -> list[tuple[int, int]]:
        """(address, bytes) the program expects to find zero besides what ``dram_writes`` writes: the borders of
        padded intermediate tensors whose place in DRAM another tensor shares (the program zeroes a border
        only where an earlier tensor wrote; a later one may write there too, so a second run on the same DRAM
        needs these zeroed again)."""
        s, q = self.qsched.sched, self.qsched
        spans = {ti: (self.tensor_addr[ti], self.tensor_addr[ti] + t.phys_size * q.elem_bytes(ti))
                 for ti, t in enumerate(s.tensors)}
        out = []
        for ti, t in enumerate(s.tensors):
            lo, hi = spans[ti]
            if t.kind != "kernel" or not t.padded or \
                    not any(a < hi and lo < b for tj, (a, b) in spans.items() if tj != ti):
                continue
            size = q.elem_bytes(ti)
            border = np.flatnonzero(t.to_phys(np.ones(t.shape, np.uint8)) == 0)
            for seg in np.split(border, np.flatnonzero(np.diff(border) != 1) + 1):
                if len(seg):
                    out.append((lo + int(seg[0]) * size, len(seg) * size))
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
        """The quantized model evaluated with numpy: what the chip must return, bit for bit (with a key bound,
        the bounded kernels compute the keys the chip computes for the inputs' key count)."""
        return self._at_length(lambda feeds: run_int(self.qsched, check_finite(feeds), self.bound(feeds))[0], inputs)

    def key_count(self, feeds: dict) -> int | None:
        """The key count a run of ``feeds`` writes to the key register (``key_bound``), None without one."""
        return None if self.key_bound is None else self.key_bound.n(feeds)

    def bound(self, feeds: dict):
        """The reference's ``keybound.Bound`` for ``feeds`` (None without a key bound)."""
        if self.key_bound is None:
            return None
        kb = self.key_bound
        return Bound(kb, kb.n(feeds))

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
        pages = self.pages if len(self.pages) > 1 else []
        lines = [f"compiled for {self.config.name}: {sum(len(p) for p in self.pages)} instructions"
                 + (f" in {len(pages)} pages ({', '.join(str(len(p)) for p in pages)})" if pages else "")
                 + f", {len(self.kernels)} kernel(s), compile {self.compile_s:.2f} s"]
        for k in self.kernels:
            t = k.tiling
            if k.kind == "embedding":
                lines.append(f"  {k.name:<10} table lookup: {k.M} rows of {k.N} from a table of {k.K}")
                continue
            if k.kind in ("norm", "attention"):
                lines.append(f"  {k.name:<10} {k.kind} (VPU): {k.M} rows of {k.N} features")
                continue
            if k.kind == "lookup table":
                lines.append(f"  {k.name:<10} lookup table: {k.M} rows of {k.N} lanes, {t.MT} tile(s) of {t.Mt}")
                continue
            if k.kind == "elementwise":
                lines.append(f"  {k.name:<10} elementwise {k.K} tensors: {k.M} rows of {k.N} lanes, "
                             f"{t.MT} tile(s) of {t.Mt}")
                continue
            lines.append(f"  {k.name:<10} GEMM {k.M}x{k.K}x{k.N}: {k.ktiles} K tiles, {t.NT} N tiles, "
                         f"{t.MT} M tile(s) of {t.Mt}; {k.macs} useful MACs"
                         + (f" of {k.mxu_macs} MXU slots ({100 * k.macs / k.mxu_macs:.1f}%)" if k.mxu_macs else ""))
        for name, p in self.plans.items():
            lines.append(f"  {name:<5} footprint {p.footprint} vs live bound {p.bound} "
                         f"({100 * (p.ratio - 1):+.1f}%), best ordering {p.best}; per ordering: "
                         + ", ".join(f"{o} {v}" for o, v in p.per_ordering.items()))
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- lowering

def _more_reserve(cfg: ChipConfig, have: int, zeros: bool) -> int | None:
    """The next ``spm_reserve`` to lower with when the on-chip plan did not fit beside ``have`` reserved rows
    (None: no larger one helps): the zero rows, if the program has them; then, on a config with SPM banks, a
    whole bank (with the zero rows in it), since a GEMM's output staging, which the VPU writes, takes a bank
    apart from the A tiles and weights the load unit writes (``compiler.lower.planner``)."""
    z = zero_rows(cfg) if zeros else 0
    steps = [z] + ([align_up(max(z, 1), cfg.spm_bank_rows)] if cfg.spm_bank_rows > 1 else [])
    return min((r for r in steps if r > have), default=None)


def lower_schedule(q: QSchedule, cfg: ChipConfig, names, single, n_out, spec=None, searcher=None,
                   dram_base: int = 0, blocks: bool | frozenset = True, resident_inputs: bool = False,
                   paged: bool = False, key_bound=None, borders_always: bool = False,
                   shard: tuple[int, int] | None = None, spm_reserve: int = 0) -> CompiledModel:
    """A quantized schedule as a Program: the DRAM plan, per kernel its tiling and SPM/ACC buffers,
    then the emitted code. ``dram_base``: where this program's DRAM region starts (control flow
    places bodies side by side). ``blocks``: grouped kernels may run as column blocks (True: all, a set:
    those kernel indices, False: none); when the program then overflows instruction memory, it is
    lowered once more with the kernels of the most blocks whole, until it fits. ``resident_inputs``: the
    inputs' DRAM stays theirs to the end of the program (no later tensor takes its place), so a host that
    keeps them in DRAM between runs rewrites only the parts that change. ``paged``: a program longer than
    instruction memory becomes a sequence of pages (``_paginate``; docs/microarchitecture.md, "Programs longer
    than imem") instead of running grouped kernels whole; else (a control-flow body, inlined into one program)
    the grouped kernels run whole until it fits. ``key_bound`` (``compiler.lower.keybound.KeyBound``): its
    kernels loop over the key count in its register. ``borders_always``: every padded
    intermediate's border is zeroed by its producer, even where the arena's zeros would do (a program that runs
    its codes more than once on the same DRAM: ``compiler.lower.shard``); the codes, border fills and fences are
    then kept on the model (``CompiledModel.lowered``) for a caller that emits them in another order. ``shard``
    ``(c, n)``: chip ``c`` of ``n`` (tensor parallel, ``compiler.lower.shard``): a GEMM kernel of at least ``n``
    output columns computes only its share of them (``column_shares``), a batched product its share of the
    slices (heads), a norm and an elementwise kernel their share of the rows (``Lowered.split`` says who writes
    what); the others run whole. ``shard`` ``(c, n, plan)``: also the Megatron-style pairs of ``plan``
    (``TensorPlan``). ``spm_reserve``: SPM rows the GEMM kernels' tilings leave free (the zero rows of the
    borders, ``zero_rows``, which stay reserved for the whole program: when the on-chip plan does not fit
    beside them, the model is lowered once more with them left free; ``_more_reserve``)."""
    full_shard = shard
    tp = shard[2] if shard is not None and len(shard) > 2 else TensorPlan()
    shard = tuple(shard[:2]) if shard is not None else None
    bounded = key_bound.kernels if key_bound is not None else {}
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
        end = nk if resident_inputs and t.kind == "input" else last_use.get(ti, start)
        bufs.append(Buffer(f"t{ti}", t.phys_size * q.elem_bytes(ti), start, end))
    partial = [Buffer(f"r{i}", s.kernels[i].M * s.kernels[i].N * SPACE_BYTES[Space.ACC], i, i) for i in tp.rows]
    dplan = plan(bufs + partial, memory="dram", align=DRAM_ALIGN)
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

    # SPM/ACC buffers belong to one code (a kernel, one column block of a grouped kernel, or a kernel that
    # emits itself), named by its index j, over steps: 2j, its prologue (its constants into its weight slots
    # and ACC, while earlier codes may run), 2j + 1 its body; their ends come from the fences (_plan_onchip)
    codes, infos, spm_bufs, acc_bufs, first_code = [], [], [], [], []
    shared: dict = {}                 # shard: kernel -> every chip's output blocks (Lowered.split)
    reduce: dict = {}                 # shard: row-parallel kernel -> its Reduce
    for i, (k, qk) in enumerate(zip(s.kernels, q.qkernels)):
        if isinstance(k, BmmKernel):
            if spec is not None and not spec.at_max:
                raise ChipCompileError(f"kernel {k.name}: a product of two activations with a symbolic dimension "
                                       "is not supported on the chip")
            first_code.append(len(codes))
            bc, slice_infos, sb, ab = lower_bmm(cfg, s, len(codes), k, qk, tensor_addr, put,
                                                key_reg=key_bound.reg if i in bounded else None,
                                                over="k" if bounded.get(i) == "bmm_k" else "n")
            if shard is not None and k.S >= shard[1] and i not in bounded:       # the slices shared by the chips
                eb = q.elem_bytes(k.out)
                cuts = [share_range(k.S, j, shard[1]) for j in range(shard[1])]
                shared[i] = [[(kc.out_rows, k.N * eb) for _, kc in bc.slices[a:b]] for a, b in cuts]
                a, b = cuts[shard[0]]
                bc.slices, slice_infos = bc.slices[a:b], slice_infos[a:b]
            codes.append(bc)
            infos += [KernelInfo(*a) for a in slice_infos]
            spm_bufs += sb
            acc_bufs += ab
            continue
        if isinstance(k, GatherKernel):                 # compiler.lower.gather_lower: a table lookup
            if spec is not None:
                raise ChipCompileError(f"kernel {k.name} (table lookup): a symbolic dimension is not supported")
            j = len(codes)
            first_code.append(j)
            gc, sb, ab = lower_gather(cfg, s, j, k, qk, tensor_addr, put, cfg.spm_rows - zero_rows(cfg))
            codes.append(gc)
            spm_bufs += sb
            acc_bufs += ab
            infos.append(KernelInfo(k.name, k.ntok, k.V, k.d, None, 0, 0, "embedding"))
            continue
        if isinstance(k, (NormKernel, AttnKernel)):     # compiler.lower.norms / .attention: VPU kernels
            if spec is not None and (not spec.at_max or isinstance(k, AttnKernel)):
                raise ChipCompileError(f"kernel {k.name} ({k.comp}): a symbolic dimension is not supported "
                                       "for norm and attention kernels yet")
            lower = lower_norm if isinstance(k, NormKernel) else lower_attention
            kw = {"key_reg": key_bound.reg} if i in bounded else {}
            nc, n_spm, n_acc = lower(cfg, s, k, qk, tensor_addr, put, cfg.spm_rows - zero_rows(cfg), **kw)
            if shard is not None and isinstance(k, NormKernel) and q.elem_bytes(k.out) == 1:
                per = _share_norm(nc, shard[1], cfg.cols)
                if per is not None:
                    shared[i] = [[(nc.out_addr + np.arange(a, b) * nc.out_rs, nc.qn.d)] for a, b in per]
                    a, b = per[shard[0]]
                    nc.in_addr, nc.out_addr, nc.rows = nc.in_addr + a * nc.in_rs, nc.out_addr + a * nc.out_rs, b - a
            j = len(codes)
            first_code.append(j)
            spm_bufs.append(Buffer(f"k{j}.A", n_spm, 2 * j, 2 * j + 1))      # fenced before and after
            acc_bufs.append(Buffer(f"k{j}.acc", n_acc, 2 * j, 2 * j + 1))
            codes.append(nc)
            M, N, kind = (nc.rows, qk.d, "norm") if isinstance(k, NormKernel) \
                else (qk.B * qk.H * qk.L, qk.dh, "attention")
            infos.append(KernelInfo(k.name, M, 1, N, None, 0, 0, kind))
            continue
        if isinstance(k, EwKernel):
            first_code.append(len(codes))
            j = len(codes)
            ec, info = _lower_ew(cfg, s, k, qk, tensor_addr, spec.max if spec is not None else None,
                                 share=shard if spec is None and q.elem_bytes(k.out) == 1 and i not in tp.ew
                                 else None, keep=tp.ew.get(i))
            if ec.shared is not None:
                shared[i] = ec.shared
            if qk.table is not None:
                addr = put(np.asarray(qk.table, np.int8))
                for pi, p in enumerate(ec.parts()):
                    p.lut_addr, p.lut_loaded = addr, pi > 0
            if spec is not None:
                ec.tiling, ec.dyn = fit_ew(cfg, ec.tiling, ec.in_rows, ec.out_rows, spec.max,
                                           f"elementwise kernel {k.name}")
                ec.tiling = replace(ec.tiling, spm_rows=ec.tiling.spm_rows + ec.lut_rows)   # the table's rows
                info.tiling = ec.tiling
            spm_bufs += [Buffer(f"k{j}.A", max(p.tiling.spm_rows for p in ec.parts()), 2 * j + 1, 2 * j + 1, "load"),
                         Buffer(f"k{j}.O", max(p.tiling.Mt for p in ec.parts()), 2 * j + 1, 2 * j + 1, "vpu")]
            acc_bufs.append(Buffer(f"k{j}.acc", max(p.tiling.acc_rows for p in ec.parts()), 2 * j + 1, 2 * j + 1))
            codes.append(ec)
            infos.append(info)
            continue
        first_code.append(len(codes))
        split = blocks if isinstance(blocks, bool) else i in blocks
        share = None
        if i in tp.rows:                  # row parallel: this chip's K range, an int32 partial sum
            scratch = dram_base + dplan.offsets[f"r{i}"]
            got, reduce[i] = _lower_partial(cfg, q, i, tensor_addr, put, tp.rows[i], scratch, shard[0] == 0)
        elif shard is not None and s.kernels[i].N >= shard[1]:
            ranges = column_shares(s.kernels[i].N, shard[1], C)
            share = ranges[shard[0]]
            out_t, eb = s.tensors[s.kernels[i].out], q.elem_bytes(s.kernels[i].out)
            rows = tensor_addr[s.kernels[i].out] + base_to_mn(out_t.phys_offsets(out_t.identity()), out_t,
                                                               s.kernels[i])[:, 0] * eb
            shared[i] = [[(rows + a * eb, (b - a) * eb)] for a, b in ranges]
        if i not in tp.rows:
            got = _lower_gemm(cfg.replace(spm_rows=cfg.spm_rows - spm_reserve) if spm_reserve else cfg, q, i,
                              tensor_addr, put, spec, searcher, split, share)
        for kc, info in got:
            j, tl = len(codes), kc.tiling
            # the load unit writes the A and weight tiles, the VPU the output staging (they may share banks
            # with buffers of the same writer: compiler.lower.planner)
            spm_bufs += [Buffer(f"k{j}.A", tl.a_rows, 2 * j + 1, 2 * j + 1, "load"),
                         Buffer(f"k{j}.W", tl.w_slots * R, 2 * j, 2 * j, "load")]
            if kc.out_int8:
                spm_bufs.append(Buffer(f"k{j}.O", 2 * tl.Mt, 2 * j + 1, 2 * j + 1, "vpu"))
            acc_bufs.append(Buffer(f"k{j}.acc", tl.acc_rows, 2 * j, 2 * j))     # two regions, then the scale rows
            codes.append(kc)
            infos.append(info)
    if cpos[0] > cfg.dram_bytes:
        raise ChipCompileError(f"the model needs {cpos[0]} bytes of DRAM (tensors {dplan.footprint}, constants "
                               f"{cpos[0] - const_base}); config {cfg.name!r} has {cfg.dram_bytes} (dram_bytes)")
    nc = len(codes)
    last_code = [(first_code[i + 1] if i + 1 < nk else nc) - 1 for i in range(nk)]
    borders = {j: [] for j in first_code}                  # by the producer's first code
    after = [-1] * nc             # per code: the last code that must be done before it writes DRAM
    for ti, t in enumerate(s.tensors):
        if t.kind == "kernel" and t.padded:
            reader = _reused(bufs[ti], bufs, dplan.offsets)
            if reader >= 0:                            # else the zeroed arena already holds zeros
                j = first_code[t.producer]
                borders[j].append(_border_chunks(t, tensor_addr[ti], C))
                after[j] = max(after[j], last_code[min(reader, nk - 1)])
            elif borders_always:
                borders[first_code[t.producer]].append(_border_chunks(t, tensor_addr[ti], C))
    for i, k in enumerate(s.kernels):     # ... and before it reads its inputs
        need = [last_code[s.tensors[t].producer] for t in kernel_inputs(k) if s.tensors[t].kind == "kernel"]
        for j in range(first_code[i], last_code[i] + 1):
            after[j] = max([after[j]] + need)
    # never written (writer None): reads as zeros
    zeros = [Buffer("zero", zero_rows(cfg), 0, 2 * nc, None)] if any(borders.values()) else []
    try:
        fences, splan, aplan = _plan_onchip(cfg, spm_bufs + zeros, acc_bufs, after)
    except ChipCompileError:
        more = _more_reserve(cfg, spm_reserve, bool(zeros))
        if more is None:
            raise
        return lower_schedule(q, cfg, names, single, n_out, spec, searcher, dram_base, blocks, resident_inputs,
                              paged, key_bound, borders_always, full_shard, spm_reserve=more)
    for i, kc in enumerate(codes):
        if hasattr(kc, "place"):                 # compiler.lower.bmm_lower: several GEMMs share the kernel's buffers
            kc.place(splan.offsets, aplan.offsets, i)
            continue
        if isinstance(kc, EwCode):
            for p in kc.parts():
                p.spm_base, p.spm_stage, p.acc_base = (splan.offsets[f"k{i}.A"], splan.offsets[f"k{i}.O"],
                                                       aplan.offsets[f"k{i}.acc"])
            continue
        if isinstance(kc, (NormCode, AttnCode)):
            kc.spm_base, kc.acc_base = splan.offsets[f"k{i}.A"], aplan.offsets[f"k{i}.acc"]
            continue
        kc.spm_a = splan.offsets[f"k{i}.A"]
        kc.spm_w = splan.offsets[f"k{i}.W"]
        kc.spm_o = splan.offsets.get(f"k{i}.O", 0)
        kc.acc_base = aplan.offsets[f"k{i}.acc"]
    zero = splan.offsets.get("zero")
    prefixes = {i: [(zero, ch) for ch in chunks] for i, chunks in borders.items() if chunks}
    built = emit_program(codes, cfg, prefixes, fences)
    builders = [built]
    if len(built) > cfg.imem_words and paged:
        builders = _paginate(codes, cfg, prefixes, fences, built.code_sizes)
    elif len(built) > cfg.imem_words and blocks is not False and len(codes) > nk:
        # too long: the grouped kernels with the most column blocks (the widest, spatially smallest
        # layers, which gain the least from them) run whole, until the estimate fits; then lower again
        sizes = built.code_sizes
        split = sorted((i for i in range(nk) if last_code[i] > first_code[i]),
                       key=lambda i: last_code[i] - first_code[i], reverse=True)
        keep = set(split) if blocks is True else set(blocks) & set(split)
        excess = len(built) - cfg.imem_words
        for i in split:
            if excess <= 0:
                break
            keep.discard(i)
            excess -= sum(sizes[first_code[i]:last_code[i] + 1]) - max(sizes[first_code[i]:last_code[i] + 1])
        try:
            return lower_schedule(q, cfg, names, single, n_out, spec, searcher, dram_base,
                                  blocks=frozenset(keep) if keep else False, resident_inputs=resident_inputs,
                                  key_bound=key_bound, borders_always=borders_always, shard=full_shard,
                                  spm_reserve=spm_reserve)
        except ChipCompileError:
            if keep:
                try:
                    return lower_schedule(q, cfg, names, single, n_out, spec, searcher, dram_base, blocks=False,
                                          resident_inputs=resident_inputs, key_bound=key_bound,
                                          borders_always=borders_always, shard=full_shard,
                                          spm_reserve=spm_reserve)
                except ChipCompileError:
                    pass
    if len(builders) == 1 and len(built) > cfg.imem_words:
        raise ChipCompileError(f"the compiled program needs {len(built)} instructions; config {cfg.name!r} "
                               f"holds {cfg.imem_words} (imem_words)")
    pages = [b.build("<compiled model>" if len(builders) == 1 else f"<compiled model, page {p + 1} of "
                     f"{len(builders)}>") for p, b in enumerate(builders)]
    prog = pages[0]
    image = np.concatenate(consts) if consts else np.zeros(0, np.uint8)
    prog.manifest = {
        "kind": "compiled-model",
        "inputs": {n: {"addr": tensor_addr[s.inputs[n]], "shape": list(s.tensors[s.inputs[n]].shape),
                       "layout": list(s.tensors[s.inputs[n]].perm), "scale": q.scales[s.inputs[n]],
                       "dtype": q.dtype(s.inputs[n])}
                   for n in names},
        "outputs": [{"addr": tensor_addr[t], "dtype": q.dtype(t)} for t, _ in s.outputs],
        "constants": {"addr": const_base, "bytes": int(len(image))},
        "kernels": [{"name": k.name, "M": k.M, "K": k.K, "N": k.N} for k in infos],
    }
    if len(pages) > 1:       # the instructions of every page, in run order (the first page's Program carries this)
        prog.manifest["pages"] = [len(p) for p in pages]
    asm = built.text() if len(builders) == 1 else "\n".join(
        f"; ---- page {p + 1} of {len(builders)}: {len(b)} instructions\n{b.text()}" for p, b in enumerate(builders))
    cm = CompiledModel(cfg, prog, q, image, const_base, tensor_addr, names, n_out, single, infos,
                       {"dram": dplan, "spm": splan, "acc": aplan}, 0.0, asm=asm,
                       resident_inputs=resident_inputs, pages=pages, key_bound=key_bound)
    if borders_always:
        cm.lowered = Lowered(codes, prefixes, fences, first_code, zero, shared, reduce)
    return cm


def _paginate(codes: list, cfg: ChipConfig, prefixes: dict, fences: dict, sizes: list) -> list:
    """The program of ``codes`` as pages of at most ``imem_words`` instructions, cut between codes: each page is
    ``emit_program`` of a run of consecutive codes (its tokens drained, every unit fenced, ``halt``), so a page
    starts as a program does (no token, nothing in flight); the SPM/ACC plan holds across pages, each code's
    buffers being its own. ``sizes``: the codes' instruction counts in the one-program emission (an estimate
    of their size in a page; each page is emitted and checked). A GEMM kernel too long for a page of its own
    is first cut between its M tiles into parts that each fit (``compiler.lower.emit.split_m_tiles``; the
    first keeps the kernel's fence and border fill); one that cannot be cut so is a ChipCompileError."""
    cap = cfg.imem_words
    codes, prefixes, fences, sizes = _split_long(codes, cfg, prefixes, fences, sizes)
    pages, a, n = [], 0, len(codes)
    while a < n:
        b, est = a, PAGE_SLACK
        while b < n and est + sizes[b] <= cap:
            est += sizes[b]
            b += 1
        b = max(b, a + 1)
        while True:
            page = _page(codes, cfg, prefixes, fences, a, b)
            if len(page) <= cap:
                break
            if b == a + 1:
                kc = codes[a]
                raise ChipCompileError(f"kernel {getattr(kc, 'name', f'#{a}')}: its code needs {len(page)} "
                                       f"instructions as a page of its own; config {cfg.name!r} holds {cap} "
                                       "(imem_words)" + ("" if isinstance(kc, KernelCode) and kc.mtiles else
                                                         "; it cannot be cut into parts of whole M tiles that "
                                                         "fit a page each"))
            b -= 1
        pages.append(page)
        a = b
    return pages


def _page(codes: list, cfg: ChipConfig, prefixes: dict, fences: dict, a: int, b: int):
    """``emit_program`` of ``codes[a:b]``, their fences and border fills."""
    return emit_program(codes[a:b], cfg, {i - a: v for i, v in prefixes.items() if a <= i < b},
                        {i - a: v for i, v in fences.items() if a <= i < b})


def _split_long(codes: list, cfg: ChipConfig, prefixes: dict, fences: dict, sizes: list) -> tuple:
    """``codes`` with every GEMM kernel whose page of its own would exceed ``imem_words`` replaced by the
    fewest parts (``split_m_tiles``) that each fit a page, and ``prefixes``, ``fences`` and ``sizes``
    renumbered (a part's size: its page's, an overestimate). Kernels that do not fit and cannot be cut are
    left whole (``_paginate`` names them). A kernel with its bias on the VPU (``vbias``) is cut with the
    bias DMA instead."""
    cap = cfg.imem_words
    out, pre, fen, sz = [], {}, {}, []
    for i, kc in enumerate(codes):
        parts = None
        if isinstance(kc, KernelCode) and sizes[i] + PAGE_SLACK > cap \
                and len(_page(codes, cfg, prefixes, fences, i, i + 1)) > cap:
            # a kernel with its bias on the VPU is cut as the same tiling with the bias DMA (its own
            # prologue builds the bias block once, which a later part would lack)
            whole = replace(kc, vbias=False) if vpu_bias(kc) else kc
            for n in range(max(2, -(-sizes[i] // (cap - PAGE_SLACK))), kc.tiling.MT + 1):
                parts = split_m_tiles(whole, n)
                if parts is None:
                    break
                own = _own_pages(parts, cfg, {0: prefixes[i]} if i in prefixes else {},
                                 {0: fences[i]} if i in fences else {}, cap)
                if own is not None:
                    break
                parts = None
        j0 = len(out)
        if i in prefixes:
            pre[j0] = prefixes[i]
        if i in fences:
            fen[j0] = fences[i]
        if parts is None:
            out.append(kc)
            sz.append(sizes[i])
        else:
            out += parts
            sz += [len(p) for p in own]
    return out, pre, fen, sz


def _own_pages(parts: list, cfg: ChipConfig, prefix: dict, fence: dict, cap: int) -> list | None:
    """Each part emitted as a page of its own (the first with the kernel's prefix and fence), or None as
    soon as one exceeds ``cap`` (a cut into too few parts is refused after emitting one part, not all:
    with many M tiles the search over part counts stays near one emission of the kernel)."""
    own = []
    for j, p in enumerate(parts):
        code = emit_program([p], cfg, prefix if j == 0 else {}, fence if j == 0 else {})
        if len(code) > cap:
            return None
        own.append(code)
    return own


#: instructions a page adds to its codes' (its first tokens' seeds, the last drains, ``fence all``, ``halt``)
PAGE_SLACK = 24


def share_range(total: int, c: int, n: int) -> tuple[int, int]:
    """Chip ``c``'s share ``[a, b)`` of ``total`` things cut in ``n`` contiguous nearly equal shares."""
    return c * total // n, (c + 1) * total // n


def _share_norm(nc, n: int, Q: int) -> list | None:
    """Every chip's rows ``[a, b)`` of a norm kernel, in whole tiles of ``Q`` rows (a masked softmax: whole
    periods of its mask tiles); None when there are fewer than ``n`` of those."""
    unit = Q * max(1, nc.mask_tiles)
    units = cdiv(nc.rows, unit)
    if units < n:
        return None
    return [(min(a * unit, nc.rows), min(b * unit, nc.rows)) for a, b in (share_range(units, j, n) for j in range(n))]


def column_shares(N: int, n: int, cols: int) -> list[tuple[int, int]]:
    """``N`` output columns shared by ``n`` chips: whole tiles of ``cols`` columns each where there are at least
    ``n`` tiles (the MXU's passes stay full), else columns; every chip gets at least one column (``N >= n``)."""
    T = cdiv(N, cols)
    if T >= n:
        return [(min(c * T // n * cols, N), min((c + 1) * T // n * cols, N)) for c in range(n)]
    return [(c * N // n, (c + 1) * N // n) for c in range(n)]


def _lower_gemm(cfg: ChipConfig, q: QSchedule, i: int, tensor_addr: dict, put, spec, searcher,
                blocks: bool = True, share: tuple[int, int] | None = None) -> list:
    """GEMM kernel ``i`` as (KernelCode, KernelInfo) per column block (``column_blocks``): one for a dense
    kernel; a grouped kernel's blocks each read only the K columns whose weights are nonzero in them
    (their own gather columns and K tiles, weight sub-matrix, bias and scale lanes, output columns). ``share``
    ``(a, b)``: only output columns ``a:b`` (a chip's share, tensor parallel)."""
    s, k, qk = q.sched, q.sched.kernels[i], q.qkernels[i]
    R, C = cfg.rows, cfg.cols
    src, out = s.tensors[k.src], s.tensors[k.out]
    eb = q.elem_bytes(k.out)
    offs = base_to_mn(out.phys_offsets(out.identity()), out, k)
    if k.N > 1 and not np.all(np.diff(offs, axis=1) == 1):
        raise ChipCompileError(f"kernel {k.name} (GEMM {k.M}x{k.K}x{k.N}, {k.op_text}): output channels are "
                               "not contiguous in DRAM")
    P = src.phys_offsets(k.gather)                             # int8 elements = bytes
    parts = _blocks_to_run(k, P, cfg, blocks)
    if share is not None:
        parts = [(max(n0, share[0]), min(n1, share[1]), ks, kt) for n0, n1, ks, kt in parts
                 if max(n0, share[0]) < min(n1, share[1])]
    if qk.out_int8:                   # codes of at most as many N tiles as ACC holds scale rows for
        parts = [(a, min(a + cap, n1), ks, kt) for n0, n1, ks, kt in parts
                 for cap in [scale_chunk(cfg, cdiv(n1 - n0, C)) * C] for a in range(n0, n1, cap)]
    res = []
    for b, (n0, n1, ks, (order, kts, rows)) in enumerate(parts):
        name = k.name if len(parts) == 1 else f"{k.name}.c{b}"
        what = f"kernel {name} (GEMM {k.M}x{len(ks)}x{n1 - n0}, {k.op_text})"
        a_rows = tensor_addr[k.src] + rows          # row offsets relative to P[0, 0]; the K tiles hold P[0, k]
        out_rows = tensor_addr[k.out] + offs[:, n0] * eb
        run = _common_period(a_rows, out_rows)
        bias = qk.bias_q[n0:n1] if qk.bias_q is not None else None
        tl, vrows = None, 0
        vbias = (bias is not None and qk.out_int8 and k.M >= 2 * vbias_min_rows(cfg) and searcher is None
                 and spec is None)
        if vbias:
            # the default tiling (its own arguments: an int8 output with a bias, no spec; kept if it stays)
            try:
                t0 = choose(cfg, k.M, len(kts), n1 - n0, qk.out_int8, run, what, bias=True, group_ok=True)
            except TetrachipError:
                t0 = None
            if t0 is not None and t0.order == "nmk":
                # an A ring in column order (resident weights): each column's bias as a resident block where
                # ACC has room for the blocks (``emit.vpu_bias``), else by DMA
                vrows = vbias_block_rows(t0.Mt, t0.NT, cfg.acc_rows - t0.acc_rows)
                vbias = vrows > 0 and _vbias_pays(cfg, kts, t0.NT, a_loads=t0.NT)
                tl = replace(t0, acc_rows=t0.acc_rows + t0.NT * vrows) if vbias else t0
            elif not _vbias_pays(cfg, kts, cdiv(n1 - n0, C)):
                # an A ring (nothing else fits SPM) loads the A tiles again for every N tile (group): with them
                vbias = t0 is not None and t0.a_ring and _vbias_pays(cfg, kts, t0.NT, a_loads=t0.NT // t0.ng)
                tl = None if vbias else t0
        if vbias and tl is None:   # the tiling leaves ACC for the bias (a rebuilt block of Mt rows and the NT bias
            try:                   # rows, or NT resident blocks: ``vbias_block_rows``)
                tl = choose(cfg.replace(acc_rows=vbias_acc_rows(cfg, cdiv(n1 - n0, C), k.M)), k.M, len(kts),
                            n1 - n0, qk.out_int8, run, what, bias=False)
                vrows = vbias_block_rows(tl.Mt, tl.NT, cfg.acc_rows - tl.acc_rows)
                tl = replace(tl, acc_rows=tl.acc_rows + (tl.NT * vrows if vrows else tl.NT + tl.Mt))
            except TetrachipError:
                vbias = False
        if tl is None:
            tl = choose(cfg, k.M, len(kts), n1 - n0, qk.out_int8, run, what, single_ok=qk.out_int8 or bias is None,
                        bias=bias is not None, group_ok=spec is None)
        if tl.order == "nmk" and not columns_loop(KernelCode(name, tl, kts, a_rows, out_rows, qk.out_int8, 0, None,
                                                             None, 0, 0, False, 0, 0, 0, 0)):
            # a column's M tiles unrolled: NT copies of the code, which no page break can cut (split_m_tiles)
            vbias, vrows = False, 0
            tl = choose(cfg, k.M, len(kts), n1 - n0, qk.out_int8, run, what, single_ok=qk.out_int8 or bias is None,
                        bias=bias is not None, group_ok=spec is None, columns=False)
        w_addr = put(tile_weights(qk.w_q[ks, n0:n1], order, kts, R, C))
        b_addr = put(pad_lanes(bias, C)) if bias is not None else None
        sc_addr = put(pad_lanes(qk.scale[n0:n1], C)) if qk.out_int8 else None
        if searcher is not None:          # compiler.lower.search: the simulator picks (Mt, nbuf, NB)
            tl = searcher.pick(KernelCode(name, tl, kts, a_rows, out_rows, qk.out_int8, w_addr, b_addr,
                                          sc_addr, qk.shift, qk.lo, k.relu, 0, 0, 0, 0), run)
        dk = None
        if spec is not None:
            tl, dk = fit_gemm(cfg, tl, k.M, a_rows, out_rows, spec.max, what, qk.out_int8, bias is not None)
        useful = k.M * (len(ks) * (n1 - n0) if k.wmask is None else int(np.count_nonzero(k.wmask[ks, n0:n1])))
        res.append((KernelCode(name, tl, kts, a_rows, out_rows, qk.out_int8, w_addr, b_addr, sc_addr,
                               qk.shift, qk.lo, k.relu, 0, 0, 0, 0, dk, hi=qk.hi, vbias=vbias, vbias_rows=vrows),
                    KernelInfo(name, k.M, len(ks), n1 - n0, tl, len(kts), useful,
                               mxu_macs=k.M * sum(t.klen for t in kts) * tl.NT * C)))
    return res


def _lower_partial(cfg: ChipConfig, q: QSchedule, i: int, tensor_addr: dict, put, kidx: np.ndarray,
                   scratch: int, bias_on: bool) -> tuple[list, Reduce]:
    """Row-parallel GEMM kernel ``i`` on one chip (``TensorPlan.rows``): its input's columns ``kidx`` by
    those rows of the weights, an int32 ``M`` x ``N`` partial sum stored row-major at DRAM ``scratch`` (with the
    bias where ``bias_on``: one chip adds it); the (KernelCode, KernelInfo) and the ``Reduce`` that finishes it
    (the sum over the chips, then the kernel's requantization)."""
    s, k, qk = q.sched, q.sched.kernels[i], q.qkernels[i]
    R, C = cfg.rows, cfg.cols
    AB = SPACE_BYTES[Space.ACC]
    src, out = s.tensors[k.src], s.tensors[k.out]
    kidx = np.asarray(kidx, np.int64)
    what = f"kernel {k.name} (GEMM {k.M}x{k.K}x{k.N}, {k.op_text}), {len(kidx)} rows of its weights from {kidx[0]}"
    P = src.phys_offsets(k.gather)
    order, kts, rows = k_tiles(P[:, kidx], R, what)
    a_rows = tensor_addr[k.src] + rows
    out_rows = scratch + np.arange(k.M, dtype=np.int64) * (k.N * AB)
    run = _common_period(a_rows, out_rows)
    bias = qk.bias_q if (bias_on and qk.bias_q is not None) else None
    tl = choose(cfg, k.M, len(kts), k.N, False, run, what, single_ok=bias is None, bias=bias is not None)
    w_addr = put(tile_weights(qk.w_q[kidx, :], order, kts, R, C))
    b_addr = put(pad_lanes(bias, C)) if bias is not None else None
    offs = base_to_mn(out.phys_offsets(out.identity()), out, k)
    red = Reduce(k.name, scratch, k.M, k.N, tensor_addr[k.out] + offs[:, 0] * q.elem_bytes(k.out),
                 put(pad_lanes(qk.scale, C)), qk.shift, qk.lo, qk.hi)
    code = KernelCode(f"{k.name}.rows{kidx[0]}", tl, kts, a_rows, out_rows, False, w_addr, b_addr, None, 0, 0,
                      False, 0, 0, 0, 0)
    info = KernelInfo(code.name, k.M, len(kidx), k.N, tl, len(kts), k.M * len(kidx) * k.N,
                      mxu_macs=k.M * sum(t.klen for t in kts) * tl.NT * C)
    return [(code, info)], red


#: M tiles a ``vbias`` kernel is cut into (fewer where they would have under ``vbias_min_rows`` rows; a kernel
#: of under two such tiles keeps the bias DMA): the VPU's passes over an M tile then run beside the MXU's next
#: one, and the last tile's, which nothing hides, is short (measured on MobileNetV2's depthwise layers)
VBIAS_M_TILES = 4
#: the least rows of a ``vbias`` M tile, in mm lengths that hide the next weight load (``vbias_min_rows``)
VBIAS_TILE_FACTOR = 4
#: the share of the MXU's cycles from which the loads hold it back (``_vbias_pays``)
VBIAS_LOAD_SHARE = 0.75


def vbias_min_rows(cfg: ChipConfig) -> int:
    """The least rows of a ``vbias`` kernel's M tile: ``VBIAS_TILE_FACTOR`` times the rows an ``mm`` streams to
    hide the next ``mxu.lw`` (the swap delay and a weight tile's rows, docs/microarchitecture.md): 192 on
    ``base``; shorter tiles leave the MXU waiting for weights."""
    return VBIAS_TILE_FACTOR * (mxu_swap_delay(cfg) + cfg.rows)


def vbias_block_rows(Mt: int, NT: int, room: int) -> int:
    """Rows of each N tile's resident bias block (``KernelCode.vbias_rows``) in ``room`` ACC rows past a
    ``vbias`` tiling's regions and scale rows, or 0 where rebuilding one block of ``Mt`` rows per N tile (its
    row copied, doubled, added: ``compiler.lower.emit._vpu_bias``) costs the VPU fewer cycles. A VPU
    instruction of ``n`` rows holds the VPU ``n + VPU_LATENCY`` cycles (docs/microarchitecture.md): a block
    of ``b`` rows adds the tile in ``ceil(Mt / b)`` of them; the rebuilt block copies ``Mt`` rows in
    ``1 + ceil(log2 Mt)`` and adds them in one. Blocks also where the rebuilt block and the ``NT`` bias rows
    do not fit ``room``. A block that divides ``Mt`` is preferred (up to twice the pieces of the longest that
    fits): one repeated ``vadd`` then covers an M tile, two VPU instructions per N tile with the ``vreq``, so
    the VPU's queue (``QUEUE_DEPTH``) holds two N tiles' and the front end reaches the next loads sooner."""
    b = min(Mt, room // NT)
    if b < 1:
        return 0
    div = next(d for d in range(b, 0, -1) if Mt % d == 0)
    if cdiv(Mt, div) <= 2 * cdiv(Mt, b):
        b = div
    resident = Mt + cdiv(Mt, b) * VPU_LATENCY
    rebuilt = 2 * Mt + (2 + (Mt - 1).bit_length()) * VPU_LATENCY
    return b if resident < rebuilt or room < NT + Mt else 0


def _vbias_pays(cfg: ChipConfig, kts: list, NT: int, a_loads: int = 1) -> bool:
    """Does a requantized GEMM with K tiles ``kts`` and ``NT`` N tiles run faster with its bias added on the
    VPU (``KernelCode.vbias``)? The DMA that fills each N tile's ACC region with the bias moves an ACC row
    (4 bytes a lane) per output row, beside the A tiles' row per K tile: the load unit's busiest traffic in a
    kernel of few K tiles (an expanding 1x1 convolution, a depthwise convolution's column block). On the VPU
    the bias costs two more passes per N tile (broadcast, add) beside the requantization's one. Per output
    row of an M tile: the loads with the bias are at least ``VBIAS_LOAD_SHARE`` of the MXU's cycles (they
    hold it back) and the VPU's three passes stay within the busier of the two. ``a_loads``: how many times
    the A tiles are loaded (an A ring's, once per group of N tiles: ``Tiling.a_ring``)."""
    a = a_loads * sum(row_beats(cfg, t.klen, Space.SPM, t.estride) for t in kts)      # A loads (int8)
    b = NT * row_beats(cfg, cfg.cols, Space.ACC, SPACE_BYTES[Space.ACC])             # bias rows (int32)
    mxu = NT * len(kts)
    return a + b >= VBIAS_LOAD_SHARE * mxu and 3 * NT <= max(a + b, mxu)


def vbias_acc_rows(cfg: ChipConfig, NT: int, M: int) -> int:
    """The ACC rows to tile a ``vbias`` kernel for: a tiling that fits them (two regions of ``Mt`` rows and
    ``NT`` scale rows) leaves room for the bias block (``Mt`` rows) and the ``NT`` bias rows, and has at
    least ``VBIAS_M_TILES`` M tiles (the VPU's passes over one tile run beside the MXU's next one)."""
    return min((cfg.acc_rows - 2 * NT) * 2 // 3 + NT, 2 * max(vbias_min_rows(cfg), cdiv(M, VBIAS_M_TILES)) + NT)


def _blocks_to_run(k, P: np.ndarray, cfg: ChipConfig, blocks: bool = True) -> list:
    """``(n0, n1, rows, k_tiles(...))`` per code of GEMM kernel ``k`` with input addresses ``P``: the
    grouped kernel's column blocks when they take fewer MXU passes (K tiles x N tiles) than the
    whole block-diagonal GEMM, else the whole GEMM as one block."""
    what = f"kernel {k.name} (GEMM {k.M}x{k.K}x{k.N}, {k.op_text})"
    whole = [(0, k.N, np.arange(k.K), k_tiles(P, cfg.rows, what))]
    if k.wmask is None or not blocks:
        return whole
    split = [(n0, n1, ks, k_tiles(P[:, ks], cfg.rows, f"{what}, columns {n0}:{n1}"))
             for n0, n1, ks in column_blocks(k.wmask, k.K, k.N, cfg.cols)]

    def passes(blocks) -> int:
        return sum(len(kt[1]) * cdiv(n1 - n0, cfg.cols) for n0, n1, _, kt in blocks)
    return split if passes(split) < passes(whole) else whole


def column_blocks(wmask: np.ndarray | None, K: int, N: int, cols: int) -> list[tuple[int, int, np.ndarray]]:
    """``(n0, n1, rows)``: the output columns ``n0:n1`` of a kernel cut into blocks of at most ``cols``
    columns and the weight rows each needs (those nonzero in ``wmask``, all rows when it is None).
    Runs of columns with the same rows (a group) are kept whole in one block where they fit, and
    packed with their neighbours while the block has room."""
    if wmask is None:
        return [(0, N, np.arange(K))]
    change = np.flatnonzero(np.any(wmask[:, 1:] != wmask[:, :-1], axis=0)) + 1
    bounds = [0, *change.tolist(), N]
    pieces = []                                            # groups, cut to at most ``cols`` columns
    for a, b in zip(bounds[:-1], bounds[1:]):
        pieces += [(c, min(c + cols, b)) for c in range(a, b, cols)]
    blocks, n0, n1 = [], 0, 0
    for a, b in pieces:
        if b - n0 > cols:
            blocks.append((n0, n1))
            n0 = a
        n1 = b
    blocks.append((n0, n1))
    return [(a, b, np.flatnonzero(np.any(wmask[:, a:b], axis=1))) for a, b in blocks]


def _reused(b: Buffer, bufs: list, offsets: dict) -> int:
    """The last step that uses a buffer dying before ``b`` starts and sharing some of ``b``'s bytes; -1 if none."""
    lo, hi = offsets[b.name], offsets[b.name] + b.size
    return max((o.end for o in bufs if o.end < b.start and offsets[o.name] < hi and lo < offsets[o.name] + o.size),
               default=-1)


def _plan_onchip(cfg: ChipConfig, spm_bufs: list, acc_bufs: list, after: list[int]):
    """Fences (``emit_program``) and the SPM and ACC plans of the most overlapping kernel order that fits.

    ``after[i]``: the last kernel whose stores kernel ``i`` must wait for. A ``fence store`` before
    kernel ``m``'s body waits for every kernel before ``m``, and a kernel's prologue (step ``2m``:
    constants into its weight slots and ACC) runs while the kernels since the last fence compute,
    so a kernel's SPM/ACC buffers stay reserved up to the next fence (through the fenced kernel's
    prologue; its body, step ``2m + 1``, may reuse them). First, a kernel fences only when it reads
    (or, by a border fill, overwrites) what a kernel after the last fence stored: independent
    kernels overlap. If that does not fit, every kernel fences before its body; while that does not
    fit, the kernel at the fullest step waits for the previous one before its prologue instead."""
    nk = len(after)
    fences, done = {}, 0                       # every kernel before ``done`` has stored everything
    for i in range(nk):
        if after[i] >= done:
            fences[i], done = "body", i
    tries = [fences, {i: "body" for i in range(1, nk)}]
    while tries:
        fences = tries.pop(0)
        life = [next((2 * m - (fences[m] == "prologue") for m in range(j + 1, nk) if m in fences), 2 * nk - 1)
                for j in range(nk)]
        sb = [b if b.name == "zero" else replace(b, end=life[b.start // 2]) for b in spm_bufs]
        ab = [replace(b, end=life[b.start // 2]) for b in acc_bufs]
        splan = plan(sb, memory="spm", align=cfg.spm_bank_rows)
        aplan = plan(ab, memory="acc", align=cfg.acc_bank_rows)
        if splan.footprint <= cfg.spm_rows and aplan.footprint <= cfg.acc_rows:
            return fences, splan, aplan
        todo = [k for k in range(1, nk) if fences.get(k) != "prologue"]
        if not tries and todo:

            def full(k, sb=sb, ab=ab):
                return max(sum(b.size for b in bs if b.start <= t <= b.end) / cap
                           for t in (2 * k, 2 * k + 1) for bs, cap in ((sb, cfg.spm_rows), (ab, cfg.acc_rows)))
            tries.append({**fences, max(todo, key=full): "prologue"})
    raise ChipCompileError(f"SPM/ACC plan exceeds config {cfg.name!r}: {splan.footprint} SPM rows "
                           f"(of {cfg.spm_rows}, spm_rows), {aplan.footprint} ACC rows (of {cfg.acc_rows}, acc_rows)")


def _border_chunks(t, base: int, cols: int) -> tuple[dict, int, int]:
    """DRAM addresses of a padded tensor's zero border in chunks of at most ``cols`` contiguous
    bytes, grouped by length ({length: addresses}), for one slice of the outermost unpadded axis;
    with that axis' count and byte stride (the slices repeat: one nest level)."""
    pshape = t.phys_shape
    outer, ostride, lead = 1, 0, 0
    for i, a in enumerate(t.perm):
        if t.shape[a] > 1 or t.pads[a] != [0, 0]:      # (a size-1 axis may be padded: TensorInfo.wide)
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


def _lower_ew(cfg, s: Schedule, k: EwKernel, qk, tensor_addr, blocks: int | None = None,
              share: tuple[int, int] | None = None, keep: np.ndarray | None = None) -> tuple[EwCode, KernelInfo]:
    """Rows of L lanes, contiguous in every input and in the output, in the output's memory order.
    With a symbolic batch of at most ``blocks`` entries, a row never straddles two entries; without
    one, contiguous blocks longer than a row may be cut into rows of ``cols`` lanes and a remainder
    (``EwCode.rest``). ``share`` ``(c, n)``: where every part has at least ``n`` rows, chip ``c`` of ``n``
    computes its share of each part's rows (``EwCode.shared``: every chip's output rows). ``keep``: only the rows
    that hold one of these output elements (physical offsets; a tensor-parallel chip's columns, ``TensorPlan.ew``)."""
    what = f"elementwise kernel {k.name}"
    if len(k.srcs) > EW_MAX_INPUTS:
        raise ChipCompileError(f"{what}: {len(k.srcs)} inputs, at most {EW_MAX_INPUTS} are supported")
    out = s.tensors[k.out]
    out_p = out.phys_offsets(out.identity()).reshape(-1)
    order = np.argsort(out_p, kind="stable")
    seqs = [out_p[order]] + [s.tensors[t].phys_offsets(idx).reshape(-1)[order] for t, idx in k.srcs]
    n = len(order)
    L = next(w for w in range(min(cfg.cols, n), 0, -1) if n % (w * (blocks or 1)) == 0 and _runs(seqs, w))
    starts = [np.arange(0, n, L)]                       # each row's first element, in output order
    R = _block(seqs, n, cfg.cols) if blocks is None and L < cfg.cols else None
    if R is not None and (n // R) * cdiv(R, cfg.cols) < n // L:
        # contiguous blocks of R > cols elements (e.g. 17 channels on 16 lanes): rows of cols lanes,
        # then a second part of the R % cols lanes left in every block
        b0 = np.arange(0, n, R)[:, None]
        L, full = cfg.cols, R // cfg.cols
        starts = [(b0 + np.arange(full) * L).reshape(-1)] + ([b0[:, 0] + full * L] if R % L else [])
    lut = lut_rows(cfg) if qk.table is not None else 0      # a lookup-table kernel keeps its table in SPM
    lanes = [L, R % L if R else 0][:len(starts)]
    shared = None
    if share is not None and all(len(st) >= share[1] for st in starts):
        c, n = share
        shared = [[(tensor_addr[k.out] + seqs[0][st[slice(*share_range(len(st), j, n))]], w)
                   for st, w in zip(starts, lanes)] for j in range(n)]
        starts = [st[slice(*share_range(len(st), c, n))] for st in starts]
    if keep is not None:
        starts = [st[np.isin(seqs[0][st[:, None] + np.arange(w)], keep).any(axis=1)]
                  for st, w in zip(starts, lanes)]
        lanes = [w for st, w in zip(starts, lanes) if len(st)]
        starts = [st for st in starts if len(st)]
        if not starts:
            raise ChipCompileError(f"{what}: none of its rows holds an element this chip needs")
    parts = [_ew_part(cfg, k, qk, what, [tensor_addr[k.out]] + [tensor_addr[t] for t, _ in k.srcs], seqs, st,
                      w, lut) for st, w in zip(starts, lanes)]
    for a, b in zip(parts, parts[1:]):
        a.rest = b
    ec = parts[0]
    ec.shared = shared
    return ec, KernelInfo(k.name, sum(p.tiling.M for p in parts), len(k.srcs), L, ec.tiling, 0, 0,
                          "lookup table" if lut else "elementwise")


def _runs(seqs: list, w: int) -> bool:
    """Are all element sequences contiguous within consecutive blocks of ``w``?"""
    return all(np.all(np.diff(a.reshape(-1, w), axis=1) == 1) for a in seqs)


def _block(seqs: list, n: int, cols: int) -> int | None:
    """The longest block length above ``cols`` (a divisor of ``n``) within which every sequence is
    contiguous, or None."""
    return next((w for w in range(n, cols, -1) if n % w == 0 and _runs(seqs, w)), None)


def _ew_part(cfg, k: EwKernel, qk, what: str, bases: list, seqs: list, starts: np.ndarray, L: int,
             lut: int) -> EwCode:
    """The code of rows of ``L`` lanes starting at elements ``starts`` (in output order)."""
    rows = len(starts)
    out_rows = bases[0] + seqs[0][starts]
    in_rows = [b + a[starts] for b, a in zip(bases[1:], seqs[1:])]
    nin = len(in_rows)
    # (the SPM zero block of padded tensors' borders may be live during the kernel: left free)
    Mt = min(rows, (cfg.spm_rows - lut - zero_rows(cfg)) // (nin + 1), cfg.acc_rows // 2)
    while Mt > 0 and not ew_fits(cfg, nin, Mt, lut, zero_rows(cfg)):     # the staging tile in a bank of its own
        Mt -= 1
    if Mt < 1:
        raise ChipCompileError(f"{what}: {nin} inputs do not fit SPM on config {cfg.name!r}")
    if Mt < rows:
        # M tiles of whole periods of the rows' addresses, or a period of whole M tiles (at least half the
        # rows that fit): tiles of one shape, which a loop nest runs (tiling.tile_levels)
        p = joint_period(*in_rows, out_rows)
        if p > 1 and Mt >= p:
            Mt = Mt // p * p
        elif p > 1:
            Mt = next((d for d in range(Mt, cdiv(Mt, 2) - 1, -1) if p % d == 0), Mt)
    MT = cdiv(rows, Mt)
    tl = Tiling(rows, L, nin, 1, Mt, MT, 0, 1, nin * Mt + lut, 2 * Mt)     # spm_rows: the inputs and the table
    return EwCode(k.name, tl, L, in_rows, out_rows, list(qk.coefs), qk.shift, qk.lo, 0, 0,
                  op={"sum": "vadd", "max": "vmax", "min": "vmin", "lut": "vadd"}[k.op], lut_rows=lut, hi=qk.hi)


def reference_tensors(cm: CompiledModel, feeds: dict) -> dict:
    """Every tensor of the quantized reference (integers), by tensor index."""
    return run_int(cm.qsched, feeds)[1]


__all__ = ["CompiledModel", "KernelInfo", "lower_schedule", "reference_tensors"]
