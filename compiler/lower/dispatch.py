"""``compile``: a tensor program to a chip Program, in named steps; the one dispatcher.

    trace   compiler.lower.trace: the model (a Module or a function of Tensors) on placeholders -> graph IR
    prepare compiler.ir.engine.prepare: constant folding, movement simplification, checks
    lift    compiler.lower.schedule.lift: fused kernels (matmul/conv + bias + ReLU), im2col gathers
    quant   compiler.lower.quantize.quantize: calibration, int8 weights, int32 biases, requant scales
    lower   compiler.lower.pipeline.lower_schedule: tiling, DRAM/SPM/ACC plans, emitted assembly

``compile_model`` picks the lowerer: a transformer block with a symbolic T (or one the graph path
refuses) goes to ``compiler.lower.transformer``, a graph holding a ``cond``/``loop`` to
``compiler.lower.control_lower``, every other graph (transformer modules included) through the
steps above (with ``compiler.lower.dynamic`` for a symbolic dimension and ``compiler.lower.search``
when asked). ``lift`` gets the config's check of the fused attention (``attention.fused_unfit``);
with a symbolic dimension, norm and batched-matmul kernels run at the maximum once
``dynamic.check_padding`` passes. This module imports the lowerers; none of them imports it. Each returns a compiled
model implementing ``compiler.lower.compiled.Compiled``, which ``runtime`` runs.
Errors (``ChipCompileError``) name the op or the dimension and arrive before any simulation.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import time

import numpy as np

from isa.config import ChipConfig
from isa.errors import TetrachipError
from isa.regs import GemmKernel

from compiler.ir import engine
from compiler.ir.graph import CONTROL, toposort
from compiler.lower import control_lower, transformer
from compiler.lower import dynamic as dyn
from compiler.lower import keybound
from compiler.lower import search as srch
from compiler.lower.compiled import nonfinite
from compiler.lower.attention import fused_unfit
from compiler.lower.bmm import BmmKernel
from compiler.lower.compiled import Compiled
from compiler.lower.pipeline import lower_schedule, zero_rows
from compiler.lower.quantize import quantize, run_int
from compiler.lower.schedule import ChipCompileError, NormKernel, lift
from compiler.lower.trace import example_array, index_inputs, trace


def compile_model(model_or_fn, example_inputs, config="base", *, calibration=None, per_channel: bool = True,
                  dynamic: dict | None = None, shapes: dict | None = None, search: bool = False,
                  search_budget_s: float = 20.0, cache_dir=None, resident_inputs: bool = False,
                  key_bound: dict | None = None, borders_always: bool = False,
                  shard: tuple[int, int] | None = None) -> Compiled:
    """Quantize, fuse, tile, plan and emit ``model_or_fn`` for ``config``; see the module doc.

    ``dynamic={"N": 64}`` declares a symbolic dimension with its maximum (axis 0 of every input,
    or where ``shapes={"x": ("N", 5), ...}`` names it): one binary for every N (compiler.lower.dynamic).
    ``search=True`` picks each GEMM kernel's tiling by simulated cycles, cached on disk in
    ``cache_dir`` (compiler.lower.search; ``search_budget_s`` per kernel).
    A ``nn.TransformerBlock`` / ``nn.TransformerEncoderLayer`` (or a ``nn.Sequential`` of them) is lowered
    from its graph like any model (``compiler.ir.patterns`` finds its norms, GELU and attention); with
    ``dynamic={"T": max}`` (axis 1 of ``x``), or where the graph path refuses it, it goes to
    ``compiler.lower.transformer.compile_block`` (the block's integer kernels as one program).
    ``resident_inputs=True`` keeps every input's DRAM its own for the whole program, so a host can leave the
    inputs in a chip's DRAM between runs and rewrite only what changes (``runtime.generate``'s KV cache; the
    ordinary pipeline only).
    ``key_bound={"input": "k_cache", "axis": 1, "count": "pos", "offset": 1}``: the products over that input's
    key axis and the softmaxes after them loop over ``n = count[0] + offset`` keys, a scalar register the
    host writes per run (compiler.lower.keybound): a decode step whose cost follows the position.
    ``borders_always=True`` (the sharding compiler, ``compiler.lower.shard``): the ordinary pipeline keeps its
    codes for re-emission (``pipeline.Lowered``), every padded tensor's border zeroed by its producer; ``shard=(c, n)``
    lowers chip ``c``'s share of each kernel (tensor parallel, ``pipeline.lower_schedule``)."""
    for name, v in (("per_channel", per_channel), ("search", search), ("resident_inputs", resident_inputs),
                    ("borders_always", borders_always)):
        if not isinstance(v, bool):
            raise ChipCompileError(f"{name}={v!r}: True or False")
    for name, v in (("dynamic", dynamic), ("shapes", shapes)):
        if v is not None and not isinstance(v, dict):
            raise ChipCompileError(f"{name}={v!r}: a dict (or None)")
    if isinstance(search_budget_s, bool) or not isinstance(search_budget_s, (int, float)) or \
            not 0 < search_budget_s < float("inf"):
        raise ChipCompileError(f"search_budget_s={search_budget_s!r}: a positive number of seconds")
    check_inputs(model_or_fn, example_inputs, calibration, dynamic=bool(dynamic))
    if key_bound is not None and (dynamic or search or transformer.blocks_of(model_or_fn) is not None):
        raise ChipCompileError("key_bound: the ordinary pipeline only (no symbolic dimension, no search, no "
                               "transformer-block module)")
    if resident_inputs and (dynamic or search or transformer.blocks_of(model_or_fn) is not None):
        raise ChipCompileError("resident_inputs=True: the ordinary pipeline's inputs only (no symbolic dimension, "
                               "no search, no transformer-block module)")
    if transformer.blocks_of(model_or_fn) is not None:
        if not dynamic:                   # the graph path (rewrite rules) first: no special case by class
            model = model_or_fn
            try:
                return compile_model(lambda *xs: model(*xs), example_inputs, config, calibration=calibration,
                                     per_channel=per_channel, search=search, search_budget_s=search_budget_s,
                                     cache_dir=cache_dir, borders_always=borders_always, shard=shard)
            except ChipCompileError:
                pass
        return transformer.compile_block(model_or_fn, example_inputs, config, calibration=calibration,
                                         dynamic=dynamic)
    t0 = time.perf_counter()
    spec = None
    if dynamic:
        if isinstance(example_inputs, dict):
            arrays = dict(example_inputs)
        else:
            lst = list(example_inputs) if isinstance(example_inputs, (list, tuple)) else [example_inputs]
            arrays = {(f"x{i}" if len(lst) > 1 else "x"): a for i, a in enumerate(lst)}
        sym, mx, axes = dyn.parse(dynamic, shapes, list(arrays))
        example_inputs = dyn.examples_at_max(arrays, axes, mx)
        if calibration is not None:
            calibration = [{k: (dyn.pad_to(v, axes[k], mx) if k in axes else v)
                            for k, v in _as_feeds(c, list(arrays)).items()} for c in calibration]
    try:
        cfg = ChipConfig.load(config)
    except TetrachipError:
        raise
    except (TypeError, ValueError) as e:
        raise ChipCompileError(f"invalid config {config!r}: {e}") from None
    if cfg.scalar_regs < GemmKernel.NEEDED:     # their loop registers l0..l2: every config has MIN_LOOP_REGS
        raise ChipCompileError(f"config {cfg.name!r}: compiled kernels need {GemmKernel.NEEDED} scalar registers, "
                               f"it has {cfg.scalar_regs}")
    times = {}
    outputs, names, single, example = trace(model_or_fn, example_inputs)
    if dynamic:
        spec = dyn.DynSpec(sym, mx, axes, dyn.out_axes(model_or_fn, example_inputs, axes, mx, outputs))
    times["trace"] = time.perf_counter() - t0
    if any(n.op in CONTROL for n in toposort(outputs)):     # tc.cond / tc.loop: compiler.lower.control_lower
        if resident_inputs or key_bound is not None:
            raise ChipCompileError(f"{'resident_inputs=True' if resident_inputs else 'key_bound'}: the ordinary "
                                   "pipeline's inputs only (not tc.cond / tc.loop)")
        if index_inputs(toposort(outputs)):
            raise ChipCompileError(f"integer input(s) {index_inputs(toposort(outputs))} with control flow: an "
                                   "embedding lookup runs on the chip only in a graph without tc.cond / tc.loop")
        calib = example if calibration is None else [_as_feeds(c, names) for c in calibration]
        return control_lower.compile_control(outputs, names, single, calib, cfg, per_channel=per_channel,
                                             search=search, search_budget_s=search_budget_s, cache_dir=cache_dir,
                                             t0=t0, spec=spec)
    graph = engine.prepare(outputs)
    calib = example if calibration is None else [_as_feeds(c, names) for c in calibration]
    mkey = None
    if search:                         # a searched compile is cached whole (compiler.lower.search)
        mkey = srch.model_key(graph, calib, cfg, {"per_channel": per_channel, "names": tuple(names),
                                                 "single": single, "dynamic": repr(spec)})
        hit = srch.load_model(mkey, cache_dir)
        if hit is not None:
            hit.timings = {"cached": time.perf_counter() - t0}
            hit.compile_s = hit.timings["total"] = time.perf_counter() - t0
            return hit
    fits = functools.partial(fused_unfit, cfg, cfg.spm_rows - zero_rows(cfg)) if spec is None else \
        (lambda *_: "a symbolic dimension")      # the fused attention sets DYN_REG itself: composed instead
    sched = lift(graph, attention_fits=fits)
    times["lift"] = time.perf_counter() - t0
    q = quantize(sched, calib, per_channel)
    times["quantize"] = time.perf_counter() - t0
    if spec is not None and any(isinstance(k, (NormKernel, BmmKernel)) for k in sched.kernels):
        dyn.check_padding(spec, lambda feeds: run_int(q, feeds)[0], calib[0])
        spec = dataclasses.replace(spec, at_max=True)
    kb = None
    if key_bound is not None:
        kb = keybound.parse(key_bound, names, index_inputs(toposort(outputs)), sched, cfg.cols, cfg.rows)
        keybound.check(kb, lambda feeds, b: run_int(q, feeds, b)[0], keybound.sample(kb, calib))
    searcher = None
    if search:
        searcher = srch.Searcher(cfg, search_budget_s, cache_dir)
    cm = lower_schedule(q, cfg, names, single, len(outputs), spec, searcher, resident_inputs=resident_inputs,
                        paged=True, key_bound=kb, borders_always=borders_always, shard=shard)
    if kb is not None:
        cm.program.manifest["key_bound"] = kb.to_manifest()
    if searcher is not None:
        cm.search_report = searcher.report
        if spec is None and kb is None and shard is None:
            cm = _no_slower_than_default(cm, calib[0], lambda: lower_schedule(
                q, cfg, names, single, len(outputs), resident_inputs=resident_inputs, paged=True,
                borders_always=borders_always))
    if spec is not None:
        cm.dynamic = spec
        cm.program.manifest["dynamic"] = spec.to_manifest()
    times["total"] = cm.compile_s = time.perf_counter() - t0
    cm.timings = times
    if searcher is not None:
        srch.store_model(mkey, cm, cache_dir)
    return cm


def _no_slower_than_default(cm, feeds: dict, default):
    """The searched model ``cm``, or the default lowering (``default()``) where that runs the whole model in fewer
    cycles: the search scores each kernel alone, and a kernel's choice that wins alone may lose beside its
    neighbours (docs/compiler.md, "Schedule search"). Both are run once on the simulator with ``feeds``."""
    dm = default()
    c_s, c_d = srch.whole_cycles(cm, feeds), srch.whole_cycles(dm, feeds)
    kept = dm if c_d < c_s else cm
    kept.search_report = cm.search_report
    kept.search_whole = {"searched": c_s, "default": c_d, "kept": "default" if kept is dm else "searched"}
    return kept


def input_names(example_inputs) -> list[str]:
    """The names ``trace`` gives the example inputs: a dict's keys, else ``x`` (one) or ``x0, x1...``."""
    if isinstance(example_inputs, dict):
        return list(example_inputs)
    n = len(example_inputs) if isinstance(example_inputs, (list, tuple)) else 1
    return [f"x{i}" if n > 1 else "x" for i in range(n)]


def _checked_array(what: str, a) -> np.ndarray:
    """One example or calibration input as an array the chip compiler can take, or ``ChipCompileError``
    naming it: numbers (bool, int, float), at least 1-d, no zero-size dimension, floats finite."""
    try:
        arr = np.asarray(a.numpy() if hasattr(a, "numpy") and callable(a.numpy) else a)
    except (TypeError, ValueError) as e:
        raise ChipCompileError(f"{what}: not an array of numbers ({e})") from None
    except TetrachipError as e:
        raise ChipCompileError(f"{what}: {e}") from None
    if arr.dtype.kind not in "biuf":
        raise ChipCompileError(f"{what}: must be numbers (bool, int or float), got {type(a).__name__} of numpy "
                               f"dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ChipCompileError(f"{what}: a 0-d value; a chip input has at least one dimension (e.g. shape (1,))")
    if 0 in arr.shape:
        raise ChipCompileError(f"{what}: shape {arr.shape} has a zero-size dimension; the chip needs at least one "
                               "element along every dimension")
    why = nonfinite(arr)
    if why:
        raise ChipCompileError(f"{what}: {why}; the quantizer needs finite values")
    return arr


def check_inputs(model, example_inputs, calibration=None, dynamic: bool = False) -> None:
    """What ``tc.compile`` checks before tracing: ``model`` callable with as many inputs as given; each example
    and calibration input an array of finite numbers, at least 1-d, without a zero-size dimension; each
    calibration sample the example's inputs by name, of the example's shapes (ranks with a symbolic dimension).
    Every failure is a ``ChipCompileError`` naming the input."""
    if not callable(model):
        raise ChipCompileError(f"the model must be a Module or a function of Tensors, got {type(model).__name__}")
    if isinstance(example_inputs, dict) and not all(isinstance(k, str) and k for k in example_inputs):
        raise ChipCompileError(f"example inputs by name: every name must be a non-empty string, got "
                               f"{list(example_inputs)!r}")
    names = input_names(example_inputs)
    raw = [example_inputs[k] for k in names] if isinstance(example_inputs, dict) else \
        list(example_inputs) if isinstance(example_inputs, (list, tuple)) else [example_inputs]
    if not raw:
        raise ChipCompileError("no example inputs: tc.compile needs one example of each model input")
    try:
        sig = inspect.signature(model.forward if hasattr(model, "forward") else model)
    except (TypeError, ValueError):      # a builtin without a signature: the call itself decides
        sig = None
    if sig is not None:
        try:
            sig.bind(*raw)
        except TypeError as e:
            raise ChipCompileError(f"the model does not take the {len(raw)} example input(s) given: {e}") from None
    shapes = {n: _checked_array(f"example input {n!r}", a).shape for n, a in zip(names, raw)}
    if calibration is None:
        return
    if not isinstance(calibration, (list, tuple)):
        raise ChipCompileError(f"calibration must be a list of samples (each the model's inputs), got "
                               f"{type(calibration).__name__}")
    if not calibration:
        raise ChipCompileError("calibration is empty: give at least one sample, or leave it out (the example "
                               "inputs calibrate)")
    for j, c in enumerate(calibration):
        if isinstance(c, dict):
            if set(c) != set(names):
                raise ChipCompileError(f"calibration sample {j}: inputs {sorted(map(str, c))}, the model's are "
                                       f"{names}")
            vals = [c[n] for n in names]
        else:
            vals = list(c) if isinstance(c, (list, tuple)) else [c]
            if len(vals) != len(names):
                raise ChipCompileError(f"calibration sample {j}: {len(vals)} input(s), the model takes {len(names)}")
        for n, v in zip(names, vals):
            arr = _checked_array(f"calibration sample {j}, input {n!r}", v)
            want = shapes[n]
            if (arr.shape != want) if not dynamic else (arr.ndim != len(want)):
                raise ChipCompileError(f"calibration sample {j}, input {n!r}: shape {arr.shape}, the example's is "
                                       f"{want}" + (" (the rank must match)" if dynamic else ""))


def _as_feeds(c, names) -> dict:
    if isinstance(c, dict):
        return {k: example_array(v) for k, v in c.items()}
    c = c if isinstance(c, (list, tuple)) else [c]
    return {n: example_array(v) for n, v in zip(names, c)}


__all__ = ["compile_model"]
