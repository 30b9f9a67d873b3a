"""Many chips: ``tc.compile(model, inputs, chips=N, parallel=...)`` shards a model over chips joined by
their links (``sim.System``: a ring, or a 2-D torus) and returns one ``ShardedModel``, a program per chip.

Every strategy starts from the model compiled for one chip at the whole batch (``ShardedModel.base``: the
reference every sharded run is bit-exact to) and from one compile of the part a chip runs (``part``),
quantized with the same scales (the calibration feeds cut the same way: a per-tensor maximum over the
pieces is the maximum over the whole). Every chip holds the same DRAM image (the part's constants, its
tensors at the same addresses), so a tensor moves between chips as the bytes at its address.

* ``parallel="data"``: the batch (axis 0 of every input and output) split over the chips, weights
  replicated: each chip runs the part's program on its samples; no link traffic. The batch is cut in
  pieces of ``ceil(B / N)`` samples; the last piece is filled up with copies of its last sample.
* ``parallel="tensor"``: every chip computes its share of every kernel (``_tensor``); Megatron-style pairs (a
  column-parallel producer, a row-parallel GEMM with an int32 partial sum) end in one all-reduce (``AllReduce``:
  the library's reduce-scatter, requantization, all-gather), other shared kernels in an all-gather (``AllGather``)
  where a later code reads what another chip wrote.
* ``parallel="pipeline"``: consecutive kernels on consecutive chips (stages balanced by each code's
  simulated cycles), the batch cut in ``micro_batches`` pieces that flow through the stages so the chips
  overlap. Per micro-batch, chip ``s`` receives the tensors live at its stage's start from chip ``s - 1``
  (chip 0 copies the micro-batch's inputs from where the host put them), runs its kernels, copies the
  model outputs it produced to the micro-batch's place, and sends the tensors live after its stage to chip
  ``s + 1``. Transfers go DRAM -> SPM -> link -> SPM -> DRAM in chunks, double-buffered under tokens
  (``Glue``). The micro-batches are a scalar loop over DRAM slots (unrolled where a stage's kernels use the
  loop's registers); each chip's program must fit its instruction memory. With ``interleave=V > 1`` the
  kernels are cut in ``V * N`` stages, stage ``v`` on the chip at place ``v mod N`` (an interleaved schedule:
  the micro-batches go round the ring ``V`` times in groups of ``N``; each task's send and receive run at once,
  ``Exchange``; ``_interleaved_program``).
* ``parallel="auto"``: each strategy that compiles (and micro-batch counts for the pipeline) is simulated
  and the fewest cycles wins; the choice is cached by the model's graph and inputs (``auto_cache``).

Data parallel needs no collective; the pipeline uses point-to-point transfers; tensor parallel the ring
collectives of ``compiler.lower.collectives``. The link contract and
the ring and torus wiring are in docs/microarchitecture.md ("Links"); docs/sharding.md is the user's guide.
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field

import numpy as np

from isa.config import ChipConfig, square_shape
from isa.errors import TetrachipError
from isa.ints import align_up, cdiv
from isa.operands import acc, dram, spm
from isa.regs import ZERO, Reg
from isa.table import Space
from isa.program import DRAM_ALIGN, Program

from compiler.lower import transformer
from compiler.lower.collectives import all_gather_rows, recv, reduce_scatter_rows, scratch_row, send, split
from compiler.lower.compiled import named_feeds
from compiler.lower.dispatch import check_inputs, compile_model
from compiler.lower.emit import emit_program
from compiler.lower.pipeline import CompiledModel, Reduce, TensorPlan, zero_rows
from compiler.lower.schedule import ChipCompileError, EwKernel, Kernel, kernel_inputs

PARALLEL = ("data", "tensor", "pipeline", "auto")
TOPOLOGIES = ("ring", "torus2d")
# the keywords tc.compile passes on to compile_model (its keyword-only parameters)
_COMPILE_OPTIONS = frozenset(n for n, p in inspect.signature(compile_model).parameters.items()
                             if p.kind is inspect.Parameter.KEYWORD_ONLY) - {"calibration"}
#: SPM rows of one transfer chunk at most (two chunks in flight: one filling, one draining)
CHUNK_ROWS = 256


def compile(model, example_inputs, config="base", *, chips: int = 1, parallel: str | None = None,
            micro_batches: int | None = None, topology: str = "ring", calibration=None,
            interleave: int | None = None, **options):
    """``tc.compile``: the model for one chip (``compiler.lower.dispatch.compile_model``, whose keywords
    ``options`` are), or, with ``chips > 1``, sharded over ``chips`` chips (``ShardedModel``):
    ``parallel`` "data" | "pipeline" | "auto" (default "auto"), ``micro_batches`` for the pipeline
    (default: the batch, at most ``4 * chips``), ``interleave`` for the pipeline: the stage groups each chip
    holds (1, the default: GPipe, contiguous stages; ``v > 1``: an interleaved schedule of ``v * chips`` stages;
    ``parallel="auto"`` tries 1, 2 and 4), ``topology`` "ring" | "torus2d" (how the chips the
    bundle runs on are wired; the strategies here use neighbour links only)."""
    if not isinstance(chips, int) or isinstance(chips, bool) or chips < 1:
        raise ChipCompileError(f"chips={chips!r}: a positive number of chips")
    if parallel is not None and parallel not in PARALLEL:
        raise ChipCompileError(f"parallel={parallel!r}: one of {', '.join(PARALLEL)}")
    if topology not in TOPOLOGIES:
        raise ChipCompileError(f"topology={topology!r}: one of {', '.join(TOPOLOGIES)}")
    check_inputs(model, example_inputs, calibration, dynamic=bool(options.get("dynamic")))
    unknown = sorted(set(options) - _COMPILE_OPTIONS)
    if unknown:
        raise ChipCompileError(f"tc.compile: unknown option(s) {', '.join(unknown)}; known: chips, parallel, "
                               f"micro_batches, interleave, topology, calibration, "
                               f"{', '.join(sorted(_COMPILE_OPTIONS))}")
    if interleave is not None and (not isinstance(interleave, int) or isinstance(interleave, bool)
                                   or interleave < 1):
        raise ChipCompileError(f"interleave={interleave!r}: a positive number of stage groups per chip")
    if interleave is not None and (chips == 1 or parallel in ("data", "tensor")):
        raise ChipCompileError(f"interleave={interleave}: the stage groups of a pipeline over chips > 1 "
                               f"(parallel='pipeline' or 'auto'), not chips={chips}, parallel={parallel!r}")
    if chips == 1 and parallel is None:
        return compile_model(model, example_inputs, config, calibration=calibration, **options)
    bad = sorted(set(options) & {"dynamic", "shapes", "search", "key_bound", "resident_inputs"})
    if bad:
        raise ChipCompileError(f"chips={chips}: {', '.join(bad)} not supported for a sharded model yet")
    cfg = ChipConfig.load(config)
    if chips > 1 and cfg.links < 2:
        raise ChipCompileError(f"config {cfg.name!r} has {cfg.links} link port(s) (links); chips in a ring need 2")
    feeds = _feeds(model, example_inputs)
    if transformer.blocks_of(model) is not None:         # a transformer-block module: its graph, like any model
        module = model
        model = lambda *xs: module(*xs)                  # noqa: E731
    calib = [feeds] if calibration is None else [_as_dict(c, list(feeds)) for c in calibration]
    base = compile_model(model, feeds, cfg, calibration=calib, **options)
    if not isinstance(base, CompiledModel):
        raise ChipCompileError(f"chips={chips}: a model of the ordinary kernel pipeline only, not a "
                               f"{type(base).__name__}")
    return _shard(model, feeds, calib, cfg, chips, parallel or "auto", micro_batches, topology, base, options,
                  interleave)


def _shard(model, feeds, calib, cfg, chips, parallel, micro, topology, base, options, interleave=None):
    if parallel == "auto":
        return choose(model, feeds, calib, cfg, chips, micro, topology, base, options, interleave)
    if parallel == "data":
        return _data(model, feeds, calib, cfg, chips, topology, base, options)
    if parallel == "tensor":
        return _tensor(model, feeds, calib, cfg, chips, topology, base, options)
    return _pipeline(model, feeds, calib, cfg, chips, micro, topology, base, options, interleave)


# ---------------------------------------------------------------------------------------------- the bundle

@dataclass
class ShardedModel:
    """A model sharded over ``chips`` chips: ``programs[i]`` runs on chip ``i``; ``host_writes(feeds)[i]`` is what
    the host writes to chip ``i``'s DRAM before launch; ``read_outputs(reads)`` assembles the outputs from
    every chip's DRAM (``reads[i](addr, n, dtype)``). ``programs[i]`` is chip ``i``'s list of pages (one
    Program but for a data-parallel part longer than instruction memory, whose chips run their pages alone).
    ``reference``/``float_reference`` are the single-chip model's (``base``): a run on the chips returns
    ``reference`` bit for bit."""
    config: ChipConfig
    chips: int
    parallel: str
    topology: str
    base: CompiledModel
    part: CompiledModel
    programs: list
    batch: int
    piece: int                         # samples per chip (data) or per micro-batch (pipeline)
    micro_batches: int = 1
    stages: list = field(default_factory=list)       # pipeline: per chip, its kernels [first, end)
    stage_cycles: list = field(default_factory=list)  # pipeline: per chip, its codes' simulated cycles
    live: list = field(default_factory=list)          # pipeline: per stage boundary, the tensors sent
    in_stage: list = field(default_factory=list)      # pipeline: per micro-batch, {input tensor: DRAM address}
    out_stage: list = field(default_factory=list)     # pipeline: per micro-batch, {output tensor: (chip, addr)}
    compile_s: float = 0.0
    choices: dict | None = None                       # "auto": cycles per candidate
    parts: list = field(default_factory=list)         # tensor: per chip, its compile (its share of the weights)
    shape: tuple = (1, 0)                             # the torus's (rows, cols); a ring: (1, chips)
    order: list = field(default_factory=list)         # the chips in the order of the cycle the strategy uses
    interleave: int = 1                               # pipeline: stage groups per chip (stage v on place v mod n)
    collectives: list = field(default_factory=list)   # tensor: (kernel, "all-reduce" | "all-gather") after it

    @property
    def input_names(self) -> list:
        return self.base.input_names

    @property
    def program(self) -> Program:
        return self.programs[0][0]

    dynamic = None

    def feeds(self, inputs) -> dict:
        return named_feeds(self.input_names, inputs)

    def pieces(self, feeds: dict) -> list[dict]:
        """The batch cut into the pieces the chips (data) or the micro-batches (pipeline) take."""
        n = {"data": self.chips, "tensor": 1}.get(self.parallel, self.micro_batches)
        return _cut(feeds, n, self.piece, self.batch)

    def host_writes(self, feeds: dict) -> list[list[tuple[int, np.ndarray]]]:
        """Per chip, (address, bytes) the host writes before launch."""
        _check_batch(feeds, self.batch)
        pieces = self.pieces(feeds)
        if self.parallel == "data":
            return [self.part.dram_writes(p) for p in pieces]
        if self.parallel == "tensor":
            return [p.dram_writes(pieces[0]) for p in self.parts]
        first = self.part.dram_writes(pieces[0])            # constants, hidden constant inputs, micro-batch 0
        staged = []
        for m, p in enumerate(pieces):
            by_addr = dict((a, d) for a, d in self.part.dram_writes(p)[2:])
            staged += [(addr, by_addr[self.part.tensor_addr[ti]]) for ti, addr in self.in_stage[m].items()]
        first_chip = self.order[0] if self.order else 0
        return [first + (staged if c == first_chip else []) for c in range(self.chips)]

    def read_outputs(self, reads: list) -> tuple[list[np.ndarray], dict]:
        """``reads[i](addr, n, dtype)`` reads chip ``i``'s DRAM after the run; the outputs and the integers."""
        part = self.part
        if self.parallel == "tensor":                 # every chip ends with every output: chip 0's
            return part.read_outputs(reads[0])
        got = []
        for i in range(self.chips if self.parallel == "data" else self.micro_batches):
            if self.parallel == "data":
                got.append(part.read_outputs(reads[i]))
                continue
            where = {part.tensor_addr[ti]: ca for ti, ca in self.out_stage[i].items()}

            def read(addr, n, dtype=np.uint8, where=where):
                chip, at = where[addr]
                return reads[chip](at, n, dtype)
            got.append(part.read_outputs(read))
        outs = [np.concatenate([g[0][k] for g in got])[:self.batch] for k in range(len(got[0][0]))]
        ints = {t: np.concatenate([g[1][t] for g in got])[:self.batch] for t in got[0][1]}
        return outs, ints

    def reference(self, *inputs) -> list[np.ndarray]:
        return self.base.reference(*inputs)

    def schedule_cycles(self) -> int:
        """Pipeline: the cycles of this schedule with free hand-offs (each stage's codes taking their simulated
        cycles, ``stage_cycles``): every chip runs its tasks in its program's order, a task as soon as the chip
        is free and the micro-batch has left the stage before. What the fill, the drain and the stages'
        imbalance leave of the ideal; the run adds the transfers and what the codes lose beside each other."""
        n, M, V = self.chips, self.micro_batches, self.interleave
        if V == 1:
            todo = [[(c, m) for m in range(M)] for c in range(n)]
        else:
            todo = [[(k * n + c, g * n + j) for g in range(M // n) for k in range(V) for j in range(n)]
                    for c in range(n)]
        done: dict = {}
        free = [0] * n
        while any(todo):
            for c in range(n):
                while todo[c] and (todo[c][0][0] == 0 or (todo[c][0][0] - 1, todo[c][0][1]) in done):
                    v, m = todo[c].pop(0)
                    free[c] = done[v, m] = max(free[c], done.get((v - 1, m), 0)) + self.stage_cycles[v]
        return max(free)

    def float_reference(self, *inputs) -> list[np.ndarray]:
        return self.base.float_reference(*inputs)

    def summary(self) -> str:
        lines = [f"sharded over {self.chips} chips ({self.topology}), {self.parallel} parallel, config "
                 f"{self.config.name}: batch {self.batch}, " +
                 {"data": f"{self.piece} sample(s) per chip",
                  "tensor": f"each GEMM's output columns shared, {self._collectives()}"}.get(
                     self.parallel, f"{self.micro_batches} micro-batch(es) of {self.piece}" +
                     (f", {self.interleave} stage groups per chip (interleaved)" if self.interleave > 1 else "")) +
                 f"; instructions per chip {[sum(len(p) for p in pg) for pg in self.programs]}; "
                 f"compile {self.compile_s:.2f} s"]
        ks = self.part.qsched.sched.kernels
        for c, (a, b) in enumerate(self.stages):
            chip = self.order[c % self.chips] if self.order else c % self.chips
            lines.append(f"  stage {c} on chip {chip}: kernels {a}..{b - 1} ({', '.join(k.name for k in ks[a:b])}), "
                         f"{self.stage_cycles[c]} cycles per micro-batch, sends "
                         f"{sum(n for _, _, n in self.live[c]) if c < len(self.live) else 0} bytes")
        if self.choices:
            lines.append("  auto: " + ", ".join(f"{k} {v} cycles" for k, v in self.choices.items()))
        return "\n".join(lines)

    def _collectives(self) -> str:
        kinds = [k for _, k in self.collectives]
        return f"{kinds.count('all-reduce')} all-reduce(s), {kinds.count('all-gather')} all-gather(s)"

    def run_on(self, device, *inputs, **kw):
        runner = getattr(device.backend, "run_sharded", None)
        if runner is None:
            raise TetrachipError(f"device {device.name!r} cannot run a model sharded over chips "
                                 "(Device('sim', chips=N) or Device('rtl', chips=N) can)")
        return runner(self, *inputs, **kw)


# ---------------------------------------------------------------------------------------------- inputs

def _as_dict(c, names) -> dict:
    if isinstance(c, dict):
        return {k: _arr(v) for k, v in c.items()}
    c = c if isinstance(c, (list, tuple)) else [c]
    return {n: _arr(v) for n, v in zip(names, c)}


def _arr(v) -> np.ndarray:
    return np.asarray(v.numpy() if hasattr(v, "numpy") else v)


def _feeds(model, example_inputs) -> dict:
    """The example inputs by the names the traced model gives them (a dict stays as it is)."""
    if isinstance(example_inputs, dict):
        return {k: _arr(v) for k, v in example_inputs.items()}
    from compiler.lower.trace import trace
    _, names, _, _ = trace(model, example_inputs)
    lst = list(example_inputs) if isinstance(example_inputs, (list, tuple)) else [example_inputs]
    return {n: _arr(v) for n, v in zip(names, lst)}


def _batch(feeds: dict) -> int:
    sizes = {k: (v.shape[0] if v.ndim else None) for k, v in feeds.items()}
    if any(s is None for s in sizes.values()) or len(set(sizes.values())) != 1:
        raise ChipCompileError("sharding cuts the batch (axis 0 of every input): the inputs' axis 0 sizes are "
                               + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    return next(iter(sizes.values()))


def _check_batch(feeds: dict, batch: int) -> None:
    for k, v in feeds.items():
        if np.ndim(v) == 0 or np.shape(v)[0] != batch:
            raise TetrachipError(f"input {k!r}: the sharded model was compiled for a batch of {batch} "
                                 f"(axis 0), given shape {np.shape(v)}")


def _cut(feeds: dict, n: int, piece: int, batch: int) -> list[dict]:
    """``n`` pieces of ``piece`` samples; the last real sample repeats to fill the last pieces."""
    out = []
    for i in range(n):
        idx = np.minimum(np.arange(i * piece, (i + 1) * piece), batch - 1)
        out.append({k: np.asarray(v)[idx] for k, v in feeds.items()})
    return out


def _part(model, feeds, calib, cfg, n, options, what, resident: bool = False) -> tuple[CompiledModel, int, list]:
    """The model compiled for one of ``n`` pieces of the batch, quantized as the whole (the calibration
    feeds cut the same way), and the pieces of the example. ``resident``: no tensor takes an input's place in
    DRAM (a program that runs its kernels once per micro-batch finds its constant inputs where the host
    wrote them)."""
    B = _batch(feeds)
    if n > B:
        raise ChipCompileError(f"{what}: {n} pieces of a batch of {B}")
    piece = cdiv(B, n)
    pieces = _cut(feeds, n, piece, B)
    pcal = [p for c in calib for p in _cut(c, cdiv(_batch(c), piece), piece, _batch(c))]
    part = compile_model(model, pieces[0], cfg, calibration=pcal, borders_always=True, resident_inputs=resident,
                         **options)
    if not isinstance(part, CompiledModel) or part.lowered is None:
        raise ChipCompileError(f"{what}: a model of the ordinary kernel pipeline only")
    return part, piece, pieces


def _check_samplewise(base: CompiledModel, part: CompiledModel, feeds: dict, pieces: list, what: str) -> None:
    """The pieces' integer outputs, put together, must be the whole batch's: else the model mixes samples
    (a reduction over the batch axis) and cannot be cut along it."""
    B = _batch(feeds)
    whole = base.reference(feeds)
    got = [part.reference(p) for p in pieces]
    for k, w in enumerate(whole):
        cat = np.concatenate([g[k] for g in got])[:B] if np.ndim(w) else None
        if cat is None or cat.shape != w.shape or not np.array_equal(cat, w):
            raise ChipCompileError(f"{what}: output {k} of the batch cut in {len(pieces)} pieces differs from the "
                                   "whole batch's: the model mixes samples along axis 0, which sharding cuts")


# ---------------------------------------------------------------------------------------------- data parallel

def _data(model, feeds, calib, cfg, n, topology, base, options) -> ShardedModel:
    t0 = time.perf_counter()
    part, piece, pieces = _part(model, feeds, calib, cfg, n, options, f"data parallel over {n} chips")
    _check_samplewise(base, part, feeds, pieces, f"data parallel over {n} chips")
    shape = ring_order(topology, n, cfg)[0] if topology == "torus2d" else (1, n)
    return ShardedModel(cfg, n, "data", topology, base, part, [list(part.pages)] * n, _batch(feeds), piece,
                        compile_s=time.perf_counter() - t0, shape=shape, order=list(range(n)))


# ---------------------------------------------------------------------------------------------- tensor parallel

def _tensor(model, feeds, calib, cfg, n, topology, base, options) -> ShardedModel:
    """Every chip runs its share of every kernel on the whole batch (``pipeline.lower_schedule``'s ``shard``): a
    GEMM kernel of at least ``n`` output columns its share of them (whole MXU column tiles where there are
    enough: convolutions split by output channel, linear layers by output feature, attention projections by
    head where the heads are tile-aligned), with only its share of the weights in its DRAM; a product of two
    activations its share of the slices (heads); a norm, softmax, activation or elementwise kernel its share of
    the rows. A ring all-gather (``AllGather``) then leaves the whole output in every chip's DRAM before the
    next kernel reads it, where a later code on some chip reads what another chip wrote (``needed_gathers``).
    The Megatron-style pairs (``megatron_plans``, found from chip 0's part compiled with the shares alone) run
    their GEMM row parallel and end in one all-reduce (``AllReduce``). The fused attention and table lookups
    run whole on every chip."""
    t0 = time.perf_counter()
    plain = compile_model(model, feeds, cfg, calibration=calib, borders_always=True, shard=(0, n), **options)
    if not isinstance(plain, CompiledModel) or plain.lowered is None:
        raise ChipCompileError(f"tensor parallel over {n} chips: a model of the ordinary kernel pipeline only")
    plans = megatron_plans(plain, n, cfg)
    try:
        parts = _tensor_parts(model, feeds, calib, cfg, n, options, plans, plain)
    except ChipCompileError:
        if not plans[0].rows:
            raise
        # a row-parallel GEMM that does not lower (its int32 partial sums' tiling): the all-gathers alone
        parts = _tensor_parts(model, feeds, calib, cfg, n, options, [TensorPlan()] * n, plain)
    split = parts[0].lowered.split
    shape, order, ports = ring_order(topology, n, cfg)
    gathers = needed_gathers(parts)
    if not split and not parts[0].lowered.reduce:
        raise ChipCompileError(f"tensor parallel over {n} chips: no GEMM kernel has {n} output columns to share")
    progs: list = [None] * n
    ks = parts[0].qsched.sched.kernels
    colls = [(ks[i].name, "all-reduce" if i in parts[0].lowered.reduce else "all-gather")
             for i in range(len(ks)) if i in parts[0].lowered.reduce or i in gathers]
    for c, p in enumerate(parts):               # c: the chip's place in the cycle (its share of the columns)
        lw = p.lowered
        nk = len(p.qsched.sched.kernels)
        kc = [*lw.first_code, len(lw.codes)]
        seq, pre, fen = [], {}, {}
        bufs = _glue_rows(cfg, lw.zero)
        for i in range(nk):
            for j in range(kc[i], kc[i + 1]):
                if j in lw.prefixes:
                    pre[len(seq)] = lw.prefixes[j]
                if j in lw.fences:
                    fen[len(seq)] = lw.fences[j]
                seq.append(lw.codes[j])
            if i in lw.reduce:
                seq.append(AllReduce(lw.reduce[i], c, n, _free_spm(cfg, lw.zero), cfg, ports[c]))
            elif i in gathers:
                seq.append(AllGather(p.qsched.sched.kernels[i].name, split[i], c, bufs, cfg, ports[c]))
        e = emit_program(seq, cfg, pre, fen)
        if len(e) > cfg.imem_words:
            raise ChipCompileError(f"tensor parallel over {n} chips: chip {c}'s program needs {len(e)} instructions; "
                                   f"config {cfg.name!r} holds {cfg.imem_words} (imem_words)")
        progs[order[c]] = [e.build(f"<tensor parallel, place {c} of {n}>")]
    B = _batch(feeds)
    return ShardedModel(cfg, n, "tensor", topology, base, parts[0], progs, B, B, compile_s=time.perf_counter() - t0,
                        parts=[parts[order.index(i)] for i in range(n)], shape=shape, order=order, collectives=colls)


def megatron_plans(plain: CompiledModel, n: int, cfg: ChipConfig) -> list[TensorPlan]:
    """Per chip, its part of the Megatron-style pairs of the model (``TensorPlan``), from ``plain``: chip 0's part
    compiled with the shares alone (its ``Lowered.split`` says what every chip writes of every shared kernel).
    A pair is a shared kernel ``X`` (a column-parallel GEMM, the attention's per-head products...) whose output
    only elementwise kernels of one input (``E``, none or more, each the only reader of the one before) lead to a
    GEMM ``B`` with an int8 output that reads nothing else, such that each column of ``B``'s input comes, through
    ``E``, from what one chip wrote of ``X``: ``B`` then runs row parallel (each chip its columns by its rows of the
    weights, an int32 partial sum; ``AllReduce``) and each ``E`` on the rows that hold an element its chip needs.
    Checked element by element on the addresses; ``X``'s all-gather then goes where no chip reads what another
    wrote (``needed_gathers``). A pair is taken only where it moves fewer bytes over the links: per row, its
    all-reduce moves ``4 N + N`` (``B``'s ``N`` int32 sums reduce-scattered, its int8 results all-gathered) where
    the all-gathers it replaces move ``K`` for ``X``, ``K`` for each ``E`` and ``N`` for ``B`` (each times
    ``(n - 1) / n``): ``4 N < K (1 + len(E))`` (a transformer's MLP: ``4 d < 4 d * 2``; its output projection,
    ``4 d >= d``, is not one)."""
    s, q, lw = plain.qsched.sched, plain.qsched, plain.lowered
    readers: dict = {}
    for i, k in enumerate(s.kernels):
        for t in set(kernel_inputs(k)):
            readers.setdefault(t, []).append(i)
    outs = {t for t, _ in s.outputs}
    ew, rows = [{} for _ in range(n)], [{} for _ in range(n)]
    taken: set = set()

    def plain_gemm(k) -> bool:
        return type(k) is Kernel and k.wmask is None

    for b, kb in enumerate(s.kernels):
        if not plain_gemm(kb) or not q.qkernels[b].out_int8 or kb.K < n or b in taken \
                or kb.M + cdiv(kb.M, n) + 1 > cfg.acc_rows or 2 * kb.M + zero_rows(cfg) > cfg.spm_rows:
            continue
        P = s.tensors[kb.src].phys_offsets(kb.gather).astype(np.int64)      # (M, K) element offsets
        chain, t, j, x = [], kb.src, b, None
        levels = []                                                       # per E (last first): its (M, K) offsets
        while t not in outs and readers.get(t) == [j] and s.tensors[t].kind == "kernel":
            p = s.tensors[t].producer
            kp = s.kernels[p]
            if not (isinstance(kp, EwKernel) and len(kp.srcs) == 1 and q.elem_bytes(kp.out) == 1):
                x = p if p in lw.split and p not in taken else None
                break
            ot, (st, idx) = s.tensors[kp.out], kp.srcs[0]
            out_p = ot.phys_offsets(ot.identity()).reshape(-1)
            src_p = s.tensors[st].phys_offsets(idx).reshape(-1)
            order = np.argsort(out_p, kind="stable")
            pos = np.minimum(np.searchsorted(out_p[order], P), len(order) - 1)
            if not np.array_equal(out_p[order][pos], P):
                break
            levels.append((p, P))
            P = src_p[order[pos]].astype(np.int64)
            chain.append(p)
            t, j = st, p
        if x is None or 4 * kb.N >= kb.K * (1 + len(chain)):
            continue
        base = plain.tensor_addr[s.kernels[x].out]
        kidx = []
        for c in range(n):
            W = _elements(lw.split[x][c]) - base
            kidx.append(np.flatnonzero(np.isin(P, W).all(axis=0)))
        got = np.concatenate(kidx)
        if any(len(k) == 0 for k in kidx) or len(got) != kb.K or len(np.unique(got)) != kb.K:
            continue
        taken.update([x, b, *chain])
        for c in range(n):
            rows[c][b] = kidx[c]
            for p, Pe in levels:
                ew[c][p] = np.unique(Pe[:, kidx[c]])
    return [TensorPlan(ew[c], rows[c]) for c in range(n)]


def _elements(blocks: list) -> np.ndarray:
    """The DRAM byte addresses of blocks ``(address of each run, run bytes)`` (``Lowered.split``)."""
    out = [np.asarray(a, np.int64).reshape(-1)[:, None] + np.arange(nb) for a, nb in blocks]
    return np.unique(np.concatenate([o.reshape(-1) for o in out])) if out else np.zeros(0, np.int64)


def code_reads(code) -> np.ndarray | None:
    """The DRAM byte addresses an activation-reading code reads (its weights and other constants aside), or None
    where not known (then it is taken to read everything)."""
    from compiler.lower.bmm_lower import BmmCode
    from compiler.lower.emit import EwCode, KernelCode
    from compiler.lower.norms import NormCode
    if isinstance(code, KernelCode):
        if code.dyn is not None or code.nbound is not None or code.kbound is not None:
            return None
        cols = np.concatenate([kt.col + np.arange(kt.klen) * kt.estride for kt in code.ktiles])
        return (np.asarray(code.a_rows, np.int64)[:, None] + cols[None, :]).reshape(-1)
    if isinstance(code, BmmCode):
        got = []
        for rl, kc in code.slices:
            r = code_reads(kc)
            if r is None or rl.bound is not None:
                return None
            got.append(r)
            for _, _, loads in rl.chunks:
                for g, ln, est in loads:
                    a = (g.dram + np.arange(g.count)[:, None, None] * g.dstride
                         + np.arange(g.rows)[None, :, None] * g.rstride + np.arange(ln)[None, None, :] * est)
                    got.append(a.reshape(-1))
        return np.concatenate(got) if got else np.zeros(0, np.int64)
    if isinstance(code, NormCode):
        if code.bound is not None:
            return None
        return (code.in_addr + np.arange(code.rows)[:, None] * code.in_rs + np.arange(code.qn.d)[None, :]).reshape(-1)
    if isinstance(code, EwCode):
        got = []
        for p in code.parts():
            if p.dyn is not None:
                return None
            got += [(np.asarray(r, np.int64)[:, None] + np.arange(p.L)).reshape(-1) for r in p.in_rows]
        return np.concatenate(got) if got else np.zeros(0, np.int64)
    return None


def needed_gathers(parts: list) -> set:
    """The shared kernels whose all-gather some chip needs: a later code on chip ``c`` reads an element of the
    kernel's output that another chip wrote and ``c`` did not (elements no chip writes, a padded tensor's
    borders, are the same on every chip), or the output is a model output (read from chip 0)."""
    p0 = parts[0]
    s, lw = p0.qsched.sched, p0.lowered
    outs = {t for t, _ in s.outputs}
    need = set()
    for i in lw.split:
        t = s.kernels[i].out
        if t in outs:
            need.add(i)
            continue
        wrote = [_elements(lw.split[i][c]) for c in range(len(parts))]
        later = [j for j in range(i + 1, len(s.kernels)) if t in kernel_inputs(s.kernels[j])]
        for c, p in enumerate(parts):
            foreign = np.setdiff1d(np.concatenate([w for c2, w in enumerate(wrote) if c2 != c]), wrote[c])
            kc = [*p.lowered.first_code, len(p.lowered.codes)]
            for j in later:
                for code in p.lowered.codes[kc[j]:kc[j + 1]]:
                    r = code_reads(code)
                    if r is None or np.isin(r, foreign).any():
                        need.add(i)
                        break
                if i in need:
                    break
            if i in need:
                break
    return need


class AllReduce:
    """A row-parallel GEMM's partial sums (``pipeline.Reduce``: ``M`` x ``N`` int32, row-major in DRAM) summed over
    the chips and requantized (a code that emits itself; ``emit.emit_program`` fences it): an all-reduce whose
    all-gather half moves the requantized int8 rows instead of the int32 sums. Per group of N tiles (``M`` ACC rows
    each, tile-major, with their scale rows): the rows are loaded into ACC; the library's chunked ring
    reduce-scatter (``collectives.reduce_scatter_rows``) leaves chip ``r`` with the sum of block ``r`` of the rows;
    the chip requantizes that block (``vqcfg``, ``vreq`` by its N tile's scale row) into SPM; the library's ring
    all-gather (``collectives.all_gather_rows``) of the int8 blocks gives every chip every row, which it stores as
    the kernel's output rows. Integer addition wraps and is associative, and the requantization is the single
    chip's per element: every chip ends with the single chip's output bit for bit."""

    CHUNKS = 2

    def __init__(self, red: Reduce, rank: int, n: int, region: tuple, cfg: ChipConfig, ports: tuple = (0, 1)):
        self.red, self.rank, self.n, self.cfg, self.ports = red, rank, n, cfg, ports
        self.name = f"all-reduce {red.name}"
        self.spm = region[0]                           # SPM rows region[0]..region[1]-1 are free (not the zero rows)
        M, C = red.M, cfg.cols
        self.NT = cdiv(red.N, C)
        by_acc = (cfg.acc_rows - cdiv(M, n) - 1) // (M + 1)        # a tile's sums and its scale row, the scratch
        self.G = min(self.NT, by_acc, (region[1] - region[0]) // M)
        while self.G > 0 and self._scratch(self.G) + cdiv(self.G * M, n) > cfg.acc_rows:    # banks: the scratch
            self.G -= 1                                                                      # in banks of its own
        if self.G < 1:
            raise ChipCompileError(f"{self.name}: {M} rows of partial sums do not fit ACC ({cfg.acc_rows} rows) or "
                                   f"the free SPM ({region[1] - region[0]} rows)")

    def groups(self) -> list[tuple[int, int]]:
        """The N tiles ``[t0, t1)`` summed by one reduce-scatter and all-gather each."""
        return [(t, min(t + self.G, self.NT)) for t in range(0, self.NT, self.G)]

    def emit_reduce(self, e, t0: int, t1: int) -> None:
        """The reduce-scatter of N tiles ``t0..t1-1``: their ``(t1 - t0) * M`` ACC rows from row 0 (a scale row each
        after them, then the scratch), ``CHUNKS`` chunks a block; ``isa.timing.reduce_scatter_cycles``."""
        g = t1 - t0
        reduce_scatter_rows(e, self.rank, self.n, 0, g * self.red.M, self._scratch(g), chunks=self.CHUNKS,
                            ports=self.ports)

    def _scratch(self, g: int) -> int:
        """The reduce-scatter's scratch for ``g`` N tiles: after their sums and scale rows, in a bank of its own on
        a config with ACC banks (``collectives.scratch_row``)."""
        return scratch_row(self.cfg, g * self.red.M + g)

    def emit_gather(self, e, t0: int, t1: int) -> None:
        """The all-gather of the requantized rows of N tiles ``t0..t1-1`` (SPM rows from ``spm``);
        ``isa.timing.all_gather_cycles``."""
        all_gather_rows(e, self.rank, self.n, Space.SPM, self.spm, (t1 - t0) * self.red.M, chunks=self.CHUNKS,
                        ports=self.ports)

    def emit(self, e) -> None:
        from compiler.lower.tiling import groups
        from isa.regs import L1
        red, cfg, n = self.red, self.cfg, self.n
        M, N, C = red.M, red.N, cfg.cols
        AB = 4
        e.comment(f"{self.name}: {n} chips, {M} x {N} int32")
        for t0, t1 in self.groups():
            g = t1 - t0
            sc = g * M
            for t in range(t0, t1):
                e.emit("dma.ld", acc[(t - t0) * M], dram[red.scratch + t * C * AB], rows=M, len=min(C, N - t * C),
                       rstride=N * AB)
            e.emit("dma.ld", acc[sc], dram[red.scale_addr + t0 * C * AB], rows=g, len=C, rstride=C * AB)
            e.emit("fence", "all")
            self.emit_reduce(e, t0, t1)
            e.emit("vqcfg", shift=red.shift, zp=0, lo=red.lo, hi=red.hi, round="half_up")
            sizes = split(g * M, n)
            lo = sum(sizes[:self.rank])
            hi = lo + sizes[self.rank]
            for t in range(lo // M, cdiv(hi, M) if hi > lo else lo // M):     # the N tiles of this chip's block
                a, b = max(lo, t * M), min(hi, (t + 1) * M)
                e.emit("vreq", spm[self.spm + a], acc[a], acc[sc + t], n=b - a)
            e.emit("fence", "all")
            self.emit_gather(e, t0, t1)
            for t in range(t0, t1):
                ln = min(C, N - t * C)
                for gr in groups(np.asarray(red.out_rows, np.int64) + t * C):
                    mods = {}
                    if gr.count > 1:
                        e.emit("loop", L1, gr.count, s0=gr.dstride, s1=gr.lstride)
                        mods.update(rep=L1)
                    e.emit("dma.st", dram[gr.dram], spm[self.spm + (t - t0) * M + gr.local], rows=gr.rows, len=ln,
                           rstride=gr.rstride, **mods)
            e.emit("fence", "store")
        e.emit("fence", "all")


def _tensor_parts(model, feeds, calib, cfg, n, options, plans, plain) -> list[CompiledModel]:
    """Each chip's compile, with its ``TensorPlan`` (``plain``, chip 0's with the shares alone, where its plan
    is empty)."""
    parts = []
    for c in range(n):
        if c == 0 and not plans[0].rows:
            parts.append(plain)
            continue
        p = compile_model(model, feeds, cfg, calibration=calib, borders_always=True, shard=(c, n, plans[c]),
                          **options)
        if not isinstance(p, CompiledModel) or p.lowered is None:
            raise ChipCompileError(f"tensor parallel over {n} chips: a model of the ordinary kernel pipeline only")
        parts.append(p)
    return parts


class AllGather:
    """A ring all-gather of what the chips wrote of one kernel's output (a code that emits itself;
    ``emit.emit_program`` fences it). ``slices[j]``: the blocks chip ``j`` (place ``j`` of the cycle) wrote, each
    ``(DRAM address of every run, run bytes)``; after ``n - 1`` steps every chip holds every slice. Step ``t``
    sends slice ``rank - t`` to the next chip (``ports[0]``) and receives slice ``rank - t - 1`` from the
    previous one (``ports[1]``), which it stores and sends on at step ``t + 1`` straight from SPM. A run is
    ``ceil(bytes / cols)`` SPM rows, piece major within a block; the slices go in chunks that fit one of two SPM
    buffers, which alternate between sending and receiving under tokens (no fence inside a chunk; a slice with
    fewer chunks sends and receives empty ones)."""

    def __init__(self, name: str, slices: list, rank: int, bufs: tuple, cfg: ChipConfig, ports: tuple = (0, 1)):
        self.name, self.rank, self.bufs, self.cfg, self.ports = f"all-gather {name}", rank, bufs, cfg, ports
        C, H = cfg.cols, bufs[2]
        self.chunks = []                            # per slice: its chunks, each [(addresses, run bytes)]
        for blocks in slices:
            out, cur, used = [], [], 0
            for addrs, wb in blocks:
                P = cdiv(wb, C)
                if P > H:
                    raise ChipCompileError(f"{self.name}: a run of {wb} bytes exceeds the {H} SPM rows of a "
                                           "transfer buffer")
                addrs = np.asarray(addrs, np.int64)
                k = 0
                while k < len(addrs):
                    take = min(len(addrs) - k, (H - used) // P)
                    if take == 0:
                        out.append(cur)
                        cur, used = [], 0
                        continue
                    cur.append((addrs[k:k + take], wb))
                    used += take * P
                    k += take
            if cur:
                out.append(cur)
            self.chunks.append(out)

    def _rows(self, part: list) -> int:
        return sum(len(a) * cdiv(wb, self.cfg.cols) for a, wb in part)

    def _move(self, e, op: str, part: list, buf: int, wait: list, signal: list) -> None:
        from compiler.lower.tiling import groups
        from isa.regs import L1
        C = self.cfg.cols
        todo, off = [], 0
        for addrs, wb in part:
            k = len(addrs)
            for p in range(cdiv(wb, C)):
                todo += [(buf + off + p * k + g.local, g, p * C, min(C, wb - p * C)) for g in groups(addrs)]
            off += k * cdiv(wb, C)
        if not todo:                                # an empty chunk still passes its tokens on
            far = dram[0]
            e.emit(op, *((spm[buf], far) if op == "dma.ld" else (far, spm[buf])), rows=0, wait=wait, signal=signal)
            return
        for idx, (row, g, dp, ln) in enumerate(todo):
            mods = {"wait": wait if idx == 0 else [], "signal": signal if idx == len(todo) - 1 else []}
            if g.count > 1:
                e.emit("loop", L1, g.count, s0=g.lstride if op == "dma.ld" else g.dstride,
                       s1=g.dstride if op == "dma.ld" else g.lstride)
                mods.update(rep=L1, sync="once")
            local, far = spm[row], dram[g.dram + dp]
            if op == "dma.ld":
                e.emit(op, local, far, rows=g.rows, len=ln, rstride=g.rstride, **mods)
            else:
                e.emit(op, far, local, rows=g.rows, len=ln, rstride=g.rstride, **mods)

    def emit(self, e) -> None:
        n, c = len(self.chunks), self.rank
        if n < 2:
            return
        X = self.bufs[:2]
        e.comment(f"{self.name}: {n} chips")
        for ci in range(max(len(ch) for ch in self.chunks)):
            part = [ch[ci] if ci < len(ch) else [] for ch in self.chunks]
            # the load signals the store unit too: a store's footprint (its rows' bounding range) may overlap it
            self._move(e, "dma.ld", part[c], X[0], [], ["ltx", "store"])
            for t in range(n - 1):
                snd, rcv = (c - t) % n, (c - t - 1) % n
                xs, yr = X[t % 2], X[(t + 1) % 2]
                send(e, self.ports[0], Space.SPM, xs, self._rows(part[snd]),
                     wait=["load" if t == 0 else "lrx"], signal=["lrx"] if t + 1 <= n - 2 else [])
                recv(e, self.ports[1], Space.SPM, yr, self._rows(part[rcv]),
                     wait=(["ltx"] if t >= 1 else []) + (["store"] if t >= 2 else []),
                     signal=["store"] + (["ltx"] if t + 1 <= n - 2 else []))
                self._move(e, "dma.st", part[rcv], yr, ["lrx"] + (["load"] if t == 0 else []),
                           ["lrx"] if t + 2 <= n - 2 else [])
            e.emit("fence", "all")


# ---------------------------------------------------------------------------------------------- pipeline

def _pipeline(model, feeds, calib, cfg, n, micro, topology, base, options, interleave=None) -> ShardedModel:
    t0 = time.perf_counter()
    B = _batch(feeds)
    M = micro if micro is not None else min(B, 4 * n)
    if not isinstance(M, int) or M < 1:
        raise ChipCompileError(f"micro_batches={micro!r}: a positive number")
    what = f"pipeline over {n} chips, {M} micro-batch(es)"
    if interleave is not None and interleave > 1:           # what the shapes alone decide, before compiling
        why = _why_not_interleaved(interleave, n, M, None, True)
        if why:
            raise ChipCompileError(f"{what}, interleave={interleave}: {why}")
    part, piece, pieces = _part(model, feeds, calib, cfg, M, options, what, resident=True)
    _check_samplewise(base, part, feeds, pieces, what)
    s, q, lw = part.qsched.sched, part.qsched, part.lowered
    nk, nc = len(s.kernels), len(lw.codes)
    if n > nk:
        raise ChipCompileError(f"{what}: the model has {nk} kernel(s), fewer than the chips")
    kc = [*lw.first_code, nc]
    code_cycles = _code_cycles(part)
    kcycles = [sum(code_cycles[kc[i]:kc[i + 1]]) for i in range(nk)]
    size = {ti: t.phys_size * q.elem_bytes(ti) for ti, t in enumerate(s.tensors)}
    addr = part.tensor_addr
    const = {ti for ti, t in enumerate(s.tensors) if t.kind == "input" and t.value is not None}
    outs = sorted({t for t, _ in s.outputs})
    inputs = [s.inputs[nm] for nm in part.input_names]
    shape, order, ports = ring_order(topology, n, cfg)
    bufs = _glue_rows(cfg, lw.zero)
    V = interleave or 1
    if V > 1:
        # the micro-batch loop needs r14/r15: kernels that use them run unrolled (GPipe) and cannot interleave
        codes_use = emit_program(list(lw.codes), cfg, dict(lw.prefixes), dict(lw.fences)).registers_used
        why = _why_not_interleaved(V, n, M, nk, not codes_use & {MB_REG.n, MB_END.n})
        if why:
            raise ChipCompileError(f"{what}, interleave={V}: {why}")
    return _pipeline_programs(V, n, M, B, piece, part, base, cfg, topology, shape, order, ports, bufs, kc, kcycles,
                              size, addr, const, outs, inputs, what, t0)


def _why_not_interleaved(V: int, n: int, M: int, nk: int, free_regs: bool) -> str | None:
    """Why ``V`` stage groups per chip cannot be scheduled (None: they can)."""
    if n < 2:
        return "an interleaved schedule needs at least 2 chips"
    if M % n:
        return f"an interleaved schedule takes the micro-batches in groups of the chips ({n}): {M} is not a multiple"
    if nk is not None and nk < V * n:
        return f"the model has {nk} kernel(s), fewer than {V * n} stages"
    if not free_regs:
        return f"the kernels use the micro-batch loop's registers r{MB_REG.n}/r{MB_END.n}"
    return None


def _live_at(s, a: int, const: set) -> list[int]:
    """The tensors live before kernel ``a``: read at or after it, produced before it (or inputs), not constants."""
    need = {t for k in s.kernels[a:] for t in kernel_inputs(k)}
    return [ti for ti, t in enumerate(s.tensors) if ti in need and ti not in const
            and (t.kind == "input" or t.producer < a)]


def _append_codes(seq: list, lw, lo: int, hi: int, pre: dict, fen: dict) -> None:
    """Append the lowered codes ``lo..hi-1`` of ``lw`` to ``seq``, with their prefixes and fences keyed
    by their place in ``seq``."""
    for j in range(lo, hi):
        if j in lw.prefixes:
            pre[len(seq)] = lw.prefixes[j]
        if j in lw.fences:
            fen[len(seq)] = lw.fences[j]
        seq.append(lw.codes[j])


def _pipeline_programs(V, n, M, B, piece, part, base, cfg, topology, shape, order, ports, bufs, kc, kcycles, size,
                       addr, const, outs, inputs, what, t0) -> ShardedModel:
    """The pipeline's programs for ``V`` stage groups per chip (``V n`` stages; stage ``v`` on the chip at place
    ``v mod n`` of the cycle)."""
    s, lw = part.qsched.sched, part.lowered
    nv = V * n
    cuts = _balance(kcycles, nv)                                 # stage v: kernels cuts[v]..cuts[v+1]-1
    stages = [(cuts[c], cuts[c + 1]) for c in range(nv)]
    live = [[(ti, addr[ti], size[ti]) for ti in _live_at(s, cuts[c], const)] for c in range(1, nv)]
    producer = {ti: (0 if s.tensors[ti].kind == "input" else
                     next(c for c, (a, b) in enumerate(stages) if a <= s.tensors[ti].producer < b)) for ti in outs}
    # DRAM after the part's image: per micro-batch, its inputs (read by chip 0) and outputs (by their producer)
    at = align_up(part.const_base + len(part.const_image), DRAM_ALIGN)
    in_stage, out_stage = [], []
    slot0 = at
    for _ in range(M):                 # one slot per micro-batch, all of the same size S
        slot = {}
        for ti in inputs:
            slot[ti] = at
            at = align_up(at + size[ti], DRAM_ALIGN)
        in_stage.append(slot)
        slot = {}
        for ti in outs:
            slot[ti] = (order[producer[ti] % n], at)
            at = align_up(at + size[ti], DRAM_ALIGN)
        out_stage.append(slot)
    S = (at - slot0) // M
    scratch = at                       # interleaved: where a chip receives what would overwrite what it sends
    if V > 1:
        at += max(sum(align_up(nb, DRAM_ALIGN) for _, _, nb in lv) for lv in live)
    if at > cfg.dram_bytes:
        raise ChipCompileError(f"{what}: needs {at} bytes of DRAM per chip (the model and {M} micro-batches' inputs "
                               f"and outputs); config {cfg.name!r} has {cfg.dram_bytes} (dram_bytes)")
    progs: list = [None] * n
    scyc = [sum(kcycles[a:b]) for a, b in stages]
    lv_out = [[(ti, a_, nb) for ti, a_, nb in lv] for lv in live]
    if V > 1:
        for c in range(n):
            e = _interleaved_program(c, V, n, M, S, stages, live, inputs, outs, producer, in_stage, out_stage,
                                     addr, size, lw, kc, bufs, cfg, ports, scratch)
            if len(e) > cfg.imem_words:
                raise ChipCompileError(f"{what}, interleave={V}: chip {c}'s program needs {len(e)} instructions; "
                                       f"config {cfg.name!r} holds {cfg.imem_words} (imem_words)")
            progs[order[c]] = [e.build(f"<pipeline, chip {c} of {n}, {V} stage groups>")]
        return ShardedModel(cfg, n, "pipeline", topology, base, part, progs, B, piece, M, stages, scyc, lv_out,
                            in_stage, out_stage, compile_s=time.perf_counter() - t0, shape=shape, order=order,
                            interleave=V)

    def iteration(c: int, m: int, reg) -> tuple[list, dict, dict]:
        """Stage ``c``'s codes for micro-batch ``m`` (with ``reg``: its slot is ``reg`` bytes after slot 0's)."""
        a, b = stages[c]
        seq, pre, fen = [], {}, {}
        if c == 0:
            seq.append(Glue("copy", [(in_stage[m][ti], addr[ti], size[ti]) for ti in inputs], bufs, cfg,
                            reg=reg, reg_on="src"))
        else:
            seq.append(Glue("recv", [(0, ti_addr, nb) for _, ti_addr, nb in live[c - 1]], bufs, cfg,
                            port=ports[c][1]))
        _append_codes(seq, lw, kc[a], kc[b], pre, fen)
        mine = [(addr[ti], out_stage[m][ti][1], size[ti]) for ti in outs if producer[ti] == c]
        if mine:
            seq.append(Glue("copy", mine, bufs, cfg, reg=reg, reg_on="dst"))
        if c < n - 1:
            seq.append(Glue("send", [(ti_addr, 0, nb) for _, ti_addr, nb in live[c]], bufs, cfg, port=ports[c][0]))
        return seq, pre, fen

    for c in range(n):
        # the micro-batches as a scalar loop over the slots (MB_REG: the slot's offset) where the stage's codes
        # leave r14/r15 alone; else unrolled
        seq, pre, fen = iteration(c, 0, MB_REG)
        codes_use = emit_program([x for x in seq if not isinstance(x, Glue)], cfg, pre, fen).registers_used
        if M > 1 and not codes_use & {MB_REG.n, MB_END.n}:
            head = LoopEdge("head", M * S)
            seq = [head] + seq + [LoopEdge("back", S, head)]
            pre = {i + 1: v for i, v in pre.items()}
            fen = {i + 1: v for i, v in fen.items()}
        else:
            seq, pre, fen = [], {}, {}
            for m in range(M):
                s2, p2, f2 = iteration(c, m, None)
                s2, p2, f2 = [LabelPrefix(f"mb{m}_")] + s2, {i + 1: v for i, v in p2.items()}, \
                    {i + 1: v for i, v in f2.items()}
                pre.update({i + len(seq): v for i, v in p2.items()})
                fen.update({i + len(seq): v for i, v in f2.items()})
                seq += s2
        e = emit_program(seq, cfg, pre, fen)
        if len(e) > cfg.imem_words:
            raise ChipCompileError(f"{what}: stage {c}'s program needs {len(e)} instructions; config {cfg.name!r} "
                                   f"holds {cfg.imem_words} (imem_words): more chips (shorter stages)")
        progs[order[c]] = [e.build(f"<pipeline stage {c} of {n}>")]
    return ShardedModel(cfg, n, "pipeline", topology, base, part, progs, B, piece, M, stages, scyc, lv_out,
                        in_stage, out_stage, compile_s=time.perf_counter() - t0, shape=shape, order=order)


def _interleaved_program(c, V, n, M, S, stages, live, inputs, outs, producer, in_stage, out_stage, addr, size, lw,
                         kc, bufs, cfg, ports, scratch):
    """The program of the chip at place ``c`` of an interleaved pipeline: it holds stages ``c, c + n, ...,
    c + (V - 1) n``. The micro-batches go in groups of ``n`` (a scalar loop over the groups: ``MB_REG`` the
    group's first slot offset); per group the chip runs, in order, its stage group ``k = 0 .. V-1`` on the
    group's micro-batches ``j = 0 .. n-1`` (task ``(k, j)``). Each task starts with one ``Exchange``: it sends
    what the task before it left for the next chip (nothing in the first group's first task; the last task's
    after the loop) while it receives its own inputs from the previous chip (stage 0 copies them from the
    micro-batch's slot after the exchange), into ``scratch`` (then copied) where they would overwrite what it
    sends; then it runs its stage's kernels and copies the model outputs they produce to the slot. The chip at
    place ``c`` runs its ``i``-th task in step ``i + c`` of one global schedule, so each send meets its receive
    in the same step; the last chip's stage ``kn - 1`` feeds the first chip's stage ``kn`` over the ring's
    closing link."""
    nv = V * n
    tasks = [(k * n + c, j) for k in range(V) for j in range(n)]
    seq, pre, fen = [LoopEdge("head", (M // n) * n * S)], {}, {}
    head = seq[0]
    xb = _exchange_rows(cfg, lw.zero)

    def out_of(v):
        return [(a_, 0, nb) for _, a_, nb in live[v]] if v < nv - 1 else []

    for i, (v, j) in enumerate(tasks):
        seq.append(LabelPrefix(f"t{v}_{j}_"))
        out = out_of(tasks[i - 1][0] if i else tasks[-1][0])
        after = []
        if v == 0:
            into = []
            after.append(Glue("copy", [(in_stage[j][ti], addr[ti], size[ti]) for ti in inputs], bufs, cfg,
                              reg=MB_REG, reg_on="src"))
        else:
            into = [(0, a_, nb) for _, a_, nb in live[v - 1]]
            if any(lo < d + nb and d < lo + m for _, d, nb in into for lo, _, m in out):
                at, tmp = scratch, []
                for _, d, nb in into:
                    tmp.append((at, d, nb))
                    at += align_up(nb, DRAM_ALIGN)
                into = [(0, t_, nb) for t_, _, nb in tmp]
                after.append(Glue("copy", tmp, bufs, cfg))
        if out or into:
            seq.append(Exchange(out, into, xb[:4], xb[4], cfg, ports[c], first=i == 0))
        seq += after
        a, b = stages[v]
        _append_codes(seq, lw, kc[a], kc[b], pre, fen)
        mine = [(addr[ti], out_stage[j][ti][1], size[ti]) for ti in outs if producer[ti] == v]
        if mine:
            seq.append(Glue("copy", mine, bufs, cfg, reg=MB_REG, reg_on="dst"))
    seq.append(LoopEdge("back", n * S, head))
    last = out_of(tasks[-1][0])
    if last:
        seq.append(Exchange(last, [], xb[:4], xb[4], cfg, ports[c]))
    return emit_program(seq, cfg, pre, fen)


def _exchange_rows(cfg: ChipConfig, zero: int | None) -> tuple:
    """Four chunk buffers in SPM (two to send from, written by the load unit, two to receive into, written by the
    link receiver; ``_buffer_rows``) and the rows of one, clear of the zero rows: the same on every chip (the ends
    of a link cut their transfers alike)."""
    a, b, h = _buffer_rows(cfg, zero, 2, "link exchanges")
    return a, a + h, b, b + h, h


def _balance(cost: list[int], n: int) -> list[int]:
    """Cut ``cost`` (per kernel) into ``n`` non-empty contiguous stages with the smallest largest stage sum
    (dynamic programming over prefix sums); the cut points, 0 first and ``len(cost)`` last."""
    k = len(cost)
    pre = np.concatenate([[0], np.cumsum(cost)]).tolist()
    INF = float("inf")
    best = [[INF] * (k + 1) for _ in range(n + 1)]
    arg = [[0] * (k + 1) for _ in range(n + 1)]
    best[0][0] = 0
    for s in range(1, n + 1):
        for j in range(s, k - (n - s) + 1):
            for i in range(s - 1, j):
                v = max(best[s - 1][i], pre[j] - pre[i])
                if v < best[s][j]:
                    best[s][j], arg[s][j] = v, i
    cuts = [k]
    for s in range(n, 0, -1):
        cuts.append(arg[s][cuts[-1]])
    return cuts[::-1]


def _code_cycles(part: CompiledModel) -> list[int]:
    """Each code's cycles run alone on a fresh chip (the timing of a program does not depend on its data)."""
    from sim import Chip
    lw, cfg = part.lowered, part.config
    out = []
    for j, code in enumerate(lw.codes):
        e = emit_program([code], cfg, {0: lw.prefixes[j]} if j in lw.prefixes else {}, {})
        out.append(Chip(cfg).load(e.build(f"<code {j}>")).run().cycles)
    return out


def _free_spm(cfg: ChipConfig, zero: int | None) -> tuple[int, int]:
    """The longest run of SPM rows ``[lo, hi)`` clear of the zero rows (between two fenced codes)."""
    if zero is None:
        return 0, cfg.spm_rows
    return max([(0, zero), (zero + zero_rows(cfg), cfg.spm_rows)], key=lambda r: r[1] - r[0])


def _buffer_rows(cfg: ChipConfig, zero: int | None, per: int, what: str) -> tuple[int, int, int]:
    """The first rows of two groups of ``per`` chunk buffers in SPM and the rows ``h`` of one (a group's buffers
    back to back), clear of the zero rows. Two different units may write the groups at once (an all-gather's
    load and receive, an exchange's loads and receives), so on a config with SPM banks (``cfg.spm_bank_rows``;
    docs/microarchitecture.md section 4) each group starts a bank and takes whole banks."""
    lo, hi = _free_spm(cfg, zero)
    bank = cfg.spm_bank_rows
    if bank > 1:
        lo = align_up(lo, bank)
        span = (hi - lo) // 2 // bank * bank
        h = min(span // per, CHUNK_ROWS)
        if h < 1:
            raise ChipCompileError(f"config {cfg.name!r}: {what} need two SPM banks (of {bank} rows) clear of the "
                                   f"zero rows")
        return lo, lo + span, h
    h = min((hi - lo) // (2 * per), CHUNK_ROWS)
    if h < 1:
        raise ChipCompileError(f"config {cfg.name!r}: no SPM rows free for {what}")
    return lo, lo + per * h, h


def _glue_rows(cfg: ChipConfig, zero: int | None) -> tuple[int, int, int]:
    """Two chunk buffers in SPM (first rows of each) and the rows of one, clear of the zero rows (``_buffer_rows``:
    in banks of their own on a config with banks)."""
    return _buffer_rows(cfg, zero, 1, "link transfers")


class Glue:
    """A transfer between kernels, as a code that emits itself (``emit.emit_program`` fences it): ``segments``
    of ``(src, dst, bytes)`` DRAM addresses moved in chunks of SPM rows through two buffers. ``copy``: DRAM to
    DRAM on this chip (load, store); ``send``: DRAM out of link port ``port`` (load, link.send; ``dst`` unused);
    ``recv``: link port ``port`` into DRAM (link.recv, store; ``src`` unused). The two ends of a link cut
    the same segments the same way."""

    def __init__(self, kind: str, segments: list, bufs: tuple, cfg: ChipConfig, port: int = 0, reg=None,
                 reg_on: str = "src"):
        self.kind, self.segments, self.bufs, self.cfg, self.port = kind, segments, bufs, cfg, port
        self.reg, self.reg_on = reg, reg_on         # a scalar register added to the src or dst DRAM addresses
        self.name = f"{kind} {sum(n for _, _, n in segments)} bytes"

    def chunks(self) -> list[tuple[int, int, int]]:
        step = self.bufs[2] * self.cfg.cols
        return [(s + o, d + o, min(step, n - o)) for s, d, n in self.segments for o in range(0, n, step)]

    def emit(self, e) -> None:
        C = self.cfg.cols
        chunks = self.chunks()
        e.comment(f"{self.name}" + (f" (link port {self.port})" if self.kind != "copy" else ""))
        src = "lrx" if self.kind == "recv" else "load"
        dst = "ltx" if self.kind == "send" else "store"
        for i, (sa, da, nb) in enumerate(chunks):
            row = self.bufs[i % 2]
            free = dst if i >= 2 else None             # the buffer's last user (two chunks back) is done
            last = src if i + 2 < len(chunks) else None  # ... and this chunk's: the buffer is free again
            rows = cdiv(nb, C)
            if self.kind == "recv":
                recv(e, self.port, Space.SPM, row, rows, wait=free, signal=dst)
            else:
                _dma(e, "dma.ld", row, sa, nb, C, wait=free, signal=dst, reg=self.reg if self.reg_on == "src" else None)
            if self.kind == "send":
                send(e, self.port, Space.SPM, row, rows, wait=src, signal=last)
            else:
                _dma(e, "dma.st", row, da, nb, C, wait=src, signal=last, reg=self.reg if self.reg_on == "dst" else None)
        e.emit("fence", "all")


class Exchange:
    """A send and a receive at once (a code that emits itself, fenced): ``out`` DRAM segments ``(src, _, bytes)``
    out of link port ``ports[0]`` through SPM buffers ``bufs[0:2]`` (load, link.send) while ``into`` segments
    ``(_, dst, bytes)`` come in from port ``ports[1]`` through ``bufs[2:4]`` (link.recv, store), the two chains
    interleaved chunk by chunk under their own tokens (load/ltx, lrx/store). ``rows``: rows of a buffer (both
    ends of a link cut the same segments the same way). ``first``: in the micro-batch loop's first trip (``MB_REG``
    0) the send is skipped (the receive alone is emitted a second time, branched to)."""

    def __init__(self, out: list, into: list, bufs: tuple, rows: int, cfg: ChipConfig, ports: tuple,
                 first: bool = False):
        self.out, self.into, self.bufs, self.rows, self.cfg, self.ports = out, into, bufs, rows, cfg, ports
        self.first = first and bool(out)
        self.name = f"exchange: send {sum(n for *_, n in out)} bytes, receive {sum(n for *_, n in into)} bytes"

    def _chunks(self, segs: list) -> list:
        step = self.rows * self.cfg.cols
        return [(s + o, d + o, min(step, n - o)) for s, d, n in segs for o in range(0, n, step)]

    def _emit(self, e, out: list) -> None:
        C = self.cfg.cols
        so, ri = self._chunks(out), self._chunks(self.into)
        for i in range(max(len(so), len(ri))):
            if i < len(so):
                sa, _, nb = so[i]
                row = self.bufs[i % 2]
                _dma(e, "dma.ld", row, sa, nb, C, wait="ltx" if i >= 2 else None, signal="ltx")
                send(e, self.ports[0], Space.SPM, row, cdiv(nb, C), wait="load",
                     signal="load" if i + 2 < len(so) else None)
            if i < len(ri):
                _, da, nb = ri[i]
                row = self.bufs[2 + i % 2]
                recv(e, self.ports[1], Space.SPM, row, cdiv(nb, C), wait="store" if i >= 2 else None, signal="store")
                _dma(e, "dma.st", row, da, nb, C, wait="lrx", signal="lrx" if i + 2 < len(ri) else None)
        e.emit("fence", "all")

    def emit(self, e) -> None:
        e.comment(self.name + f" (link ports {self.ports[0]} out, {self.ports[1]} in)")
        if not self.first:
            return self._emit(e, self.out)
        alone, done = e.fresh_label("first_trip"), e.fresh_label("exchanged")
        e.emit("beq", MB_REG, ZERO, alone)
        self._emit(e, self.out)
        e.emit("jmp", done)
        e.place(alone)
        self._emit(e, [])
        e.place(done)


def _dma(e, op: str, row: int, addr: int, nbytes: int, C: int, wait=None, signal=None, reg=None) -> None:
    """``nbytes`` contiguous DRAM bytes at ``addr`` (+ register ``reg``) as SPM rows from ``row`` (whole rows,
    then a short one)."""
    full, rem = divmod(nbytes, C)
    parts = ([(row, addr, full, C)] if full else []) + ([(row + full, addr + full * C, 1, rem)] if rem else [])
    for i, (r, a, k, ln) in enumerate(parts):
        w, sg = (wait if i == 0 else None), (signal if i == len(parts) - 1 else None)
        far = dram[a + reg] if reg is not None else dram[a]
        if op == "dma.ld":
            e.emit(op, spm[r], far, rows=k, len=ln, rstride=C, wait=w, signal=sg)
        else:
            e.emit(op, far, spm[r], rows=k, len=ln, rstride=C, wait=w, signal=sg)


#: the pipeline's micro-batch loop: the slot offset and its end (isa.regs: r14/r15, which kernels leave alone)
MB_REG, MB_END = Reg(14), Reg(15)


class LoopEdge:
    """The micro-batch loop's head (``seti`` the offset to 0 and the end to ``value``, the loop label) or its
    back edge (``addi`` the offset by ``value``, one slot; branch back while below the end), as codes that emit
    themselves (fenced: every unit drained around them)."""

    def __init__(self, kind: str, value: int, head: "LoopEdge | None" = None):
        self.kind, self.value, self.head, self.name = kind, value, head, f"micro-batch loop {kind}"
        self.top = None

    def emit(self, e) -> None:
        if self.kind == "head":
            e.emit("seti", MB_REG, 0)
            e.emit("seti", MB_END, self.value)
            self.top = e.label("micro_batch")
        else:
            e.emit("addi", MB_REG, MB_REG, self.value)
            e.emit("blt", MB_REG, MB_END, self.head.top)


class LabelPrefix:
    """Emits nothing but sets the builder's label prefix: each unrolled copy of a stage's codes has its own
    labels."""

    def __init__(self, prefix: str):
        self.prefix, self.name = prefix, f"labels {prefix}"

    def emit(self, e) -> None:
        e.label_prefix = self.prefix


def ring_order(topology: str, n: int, cfg: ChipConfig, shape: tuple | None = None):
    """The chips as a cycle of neighbours: ``(shape, order, ports)``, ``order[k]`` the chip at position ``k``
    and ``ports[k]`` its (send to position k+1, receive from position k-1) link ports. A ring: chip k, ports
    (0, 1). A 2-D torus (``sim.System``'s wiring: port 0 east, 1 west, 2 south, 3 north) of ``shape`` (default
    the most square): along its only row or column, else a cycle through every chip that snakes along the
    rows (an even number of rows; else the columns) and returns along the first column (row)."""
    if topology == "ring":
        return (1, n), list(range(n)), [(0, 1)] * n
    if cfg.links < 4:
        raise ChipCompileError(f"topology torus2d needs 4 link ports per chip; config {cfg.name!r} has "
                               f"{cfg.links} (links)")
    R, C = shape or square_shape(n)
    if R * C != n:
        raise ChipCompileError(f"a torus of shape {R}x{C} does not hold {n} chips")
    if R == 1 or C == 1:
        cells = [(0, c) for c in range(C)] if R == 1 else [(r, 0) for r in range(R)]
    elif R % 2 == 0:
        cells = [(r, c) for r in range(R) for c in (range(1, C) if r % 2 == 0 else range(C - 1, 0, -1))]
        cells += [(r, 0) for r in range(R - 1, -1, -1)]
    elif C % 2 == 0:
        cells = [(r, c) for c in range(C) for r in (range(1, R) if c % 2 == 0 else range(R - 1, 0, -1))]
        cells += [(0, c) for c in range(C - 1, -1, -1)]
    else:
        raise ChipCompileError(f"a {R}x{C} torus: the strategies need a cycle through the chips along links; "
                               "give a shape with an even side")
    order = [r * C + c for r, c in cells]

    def port(a, b) -> int:                       # the port of cell a whose link reaches cell b
        (ra, ca), (rb, cb) = a, b
        if ra == rb and (ca + 1) % C == cb:
            return 0
        if ra == rb and (ca - 1) % C == cb:
            return 1
        if ca == cb and (ra + 1) % R == rb:
            return 2
        return 3
    send = [port(cells[k], cells[(k + 1) % n]) for k in range(n)]
    ports = [(send[k], send[k - 1] ^ 1) for k in range(n)]      # the sender's port's partner: 0-1, 2-3
    return (R, C), order, ports





# ---------------------------------------------------------------------------------------------- auto

#: parallel="auto" decisions by model key (graph, inputs, config, chips): the strategy and micro-batches
auto_cache: dict = {}


#: the interleaved schedules ``parallel="auto"`` tries besides GPipe (stage groups per chip)
AUTO_INTERLEAVE = (2, 4)


def choose(model, feeds, calib, cfg, n, micro, topology, base, options, interleave=None) -> ShardedModel:
    """The strategy (and micro-batch count) with the fewest simulated cycles; the decision is cached."""
    key = _key(base, feeds, cfg, n, micro, f"{topology}|{interleave}")
    if key in auto_cache:
        strat, m, v = auto_cache[key]
        return _shard(model, feeds, calib, cfg, n, strat, m, topology, base, options, v)
    B = _batch(feeds)
    # the whole batch's kernel count (the part's, at a smaller batch, may differ by a lifted constant): a
    # schedule of 4 stage groups per chip, tried only where it has about a kernel per stage, costs no compile
    # on a small model
    nk = len(base.qsched.sched.kernels)
    cands = ([("data", None, None)] if B >= n else []) + [("tensor", None, None)]
    for m in sorted({x for x in ([micro] if micro else [n, 2 * n, 4 * n]) if x <= B}):
        # GPipe, and 2 and 4 stage groups per chip (a shorter fill and drain) where the micro-batches come in
        # groups of the chips
        vs = [interleave] if interleave else [1] + [v for v in AUTO_INTERLEAVE
                                                    if m % n == 0 and (v == 2 or nk >= v * n)]
        cands += [("pipeline", m, v) for v in vs]
    results, best, errors = {}, None, []
    for strat, m, v in cands:
        label = strat if m is None else f"pipeline/{m}" + (f"x{v}" if v and v > 1 else "")
        try:
            sm = _shard(model, feeds, calib, cfg, n, strat, m, topology, base, options, v)
        except ChipCompileError as e:
            errors.append(f"{label}: {e}")
            continue
        cyc = simulate(sm, feeds)
        results[label] = cyc
        if best is None or cyc < best[0]:
            best = (cyc, sm, (strat, m, v))
    if best is None:
        raise ChipCompileError(f"no strategy shards the model over {n} chips: " + "; ".join(errors))
    auto_cache[key] = best[2]
    best[1].choices = results
    return best[1]


def _key(base: CompiledModel, feeds, cfg, n, micro, topology) -> str:
    import hashlib
    h = hashlib.sha256()
    for p in base.pages:
        h.update(p.to_bytes())
    h.update(base.const_image.tobytes())
    for k in sorted(feeds):
        h.update(k.encode() + repr(np.shape(feeds[k])).encode())
    h.update(f"{cfg.digest()}|{n}|{micro}|{topology}".encode())
    return h.hexdigest()


def simulate(sm: ShardedModel, feeds: dict) -> int:
    """Cycles of a run of ``sm`` on ``sim.System`` (the chips' largest count)."""
    from sim import Chip, System
    writes = sm.host_writes(feeds)
    if any(len(p) > 1 for p in sm.programs):          # data parallel, paged: no link traffic, each chip alone
        cyc = 0
        for c in range(sm.chips):
            ch = Chip(sm.config)
            for a, d in writes[c]:
                ch.write_dram(a, d)
            cyc = max(cyc, ch.run_pages(sm.programs[c]).cycles)
        return cyc
    sysm = System(sm.config, sm.chips, **system_kw(sm))
    for c in range(sm.chips):
        sysm.load(c, sm.programs[c][0])
        for a, d in writes[c]:
            sysm[c].write_dram(a, d)
    sysm.run()
    return sysm.cycles


def system_kw(sm: ShardedModel) -> dict:
    """``sim.System``'s topology keywords for the chips ``sm`` was sharded for."""
    return {} if sm.topology == "ring" else {"topology": sm.topology, "shape": tuple(sm.shape)}


__all__ = ["ShardedModel", "compile"]
