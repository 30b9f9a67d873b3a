"""Symbolic (dynamic) dimensions: one binary for every value of a batch dimension up to a maximum.

    cm = tc.compile(model, {"x": xs, "y": ys}, dynamic={"N": 64},
                    shapes={"x": ("N", 5), "y": ("N", 3)})     # shapes: default axis 0 of every input
    tc.Device("sim").run(cm, {"x": x7, "y": y7})                # any N in 1..64, same Program bytes

How it works:

* The model is traced, planned and quantized once at the declared maximum (``N = max``): every
  tensor that carries the symbol (``(N, 5)`` and ``(N, 3)`` alike) gets its DRAM rectangle for
  ``max`` rows, so the planner packs them all together at their largest size.
* Every kernel's M rows must be batch-major: ``M = max * blk`` with the rows of batch element
  ``b`` those of element 0 shifted by ``b`` times a constant (``fit_gemm``/``fit_ew`` check it
  and raise ``ChipCompileError`` naming the kernel otherwise). M tiles are cut to whole batch
  elements, ``per_tile`` of them, with ``per_tile`` dividing ``max`` (no edge tile).
* The M-tile scalar loop's bound is scalar register ``DYN_REG``: the body runs while the batch
  elements done so far are fewer than the register's value, ``ceil(n / per_tile)`` times. The
  host writes ``n`` there at launch (``Chip.set_args``); the instruction bytes never change.
* The host pads inputs to ``max`` along the symbol (zeros), and reads the first ``n`` along it
  from the outputs. Rows past ``n`` in the last tile compute on those zeros inside their own
  buffers and are never read back.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from isa import regs
from isa.ints import cdiv

from compiler.lower.schedule import ChipCompileError
from compiler.lower.tiling import tile_levels
from compiler.lower.trace import trace

#: the number of the scalar register holding the symbol's value at launch (``isa.regs.DYN_REG``)
DYN_REG = regs.DYN_REG.n


@dataclass(frozen=True)
class DynTile:
    reg: int             # scalar register with n
    per_tile: int        # batch elements per M tile
    a_step: int = 0      # DRAM byte step of the A rows between M tiles (GEMM)
    o_step: int = 0      # ... of the output rows
    ew_steps: tuple = ()  # elementwise: per input, then the output
    #: elementwise, a batch element longer than a tile: its ``sub[0]`` tiles (an inner loop), each the first
    #: shifted by ``sub[1]`` (per input, then the output)
    sub: tuple | None = None


@dataclass(frozen=True)
class DynSpec:
    symbol: str
    max: int
    in_axes: dict        # input name -> axis carrying the symbol
    out_axes: list       # per output: the axis carrying the symbol, or None
    #: kernels without a symbolic loop (norms, softmax, batched matmuls) run at the maximum: set once
    #: ``check_padding`` found the valid outputs independent of the padded positions
    at_max: bool = False

    def to_manifest(self) -> dict:
        return {"symbol": self.symbol, "max": self.max, "register": DYN_REG,
                "inputs": dict(self.in_axes), "outputs": list(self.out_axes)}


def parse(dynamic: dict, shapes: dict | None, names: list[str]) -> tuple[str, int, dict]:
    if len(dynamic) != 1:
        raise ChipCompileError(f"one symbolic dimension per model is supported, got {sorted(dynamic)}")
    (sym, mx), = dynamic.items()
    mx = int(mx)
    if mx < 1:
        raise ChipCompileError(f"symbolic dimension {sym!r}: the maximum must be >= 1, got {mx}")
    axes = {}
    for n in names:
        if shapes is None:
            axes[n] = 0
            continue
        shp = shapes.get(n)
        if shp is None:
            continue
        hits = [i for i, d in enumerate(shp) if d == sym or (isinstance(d, tuple) and d[0] == sym)]
        if len(hits) != 1:
            raise ChipCompileError(f"input {n!r}: shape {shp} must name {sym!r} exactly once")
        axes[n] = hits[0]
    if not axes:
        raise ChipCompileError(f"no input carries the symbolic dimension {sym!r}")
    return sym, mx, axes


def pad_to(a: np.ndarray, axis: int, mx: int) -> np.ndarray:
    """``a`` padded with zeros (or cut) to ``mx`` along ``axis``."""
    a = np.asarray(a)
    n = a.shape[axis]
    if n > mx:
        raise ChipCompileError(f"a symbolic dimension of size {n} exceeds its declared maximum {mx}")
    if n == mx:
        return a
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, mx - n)
    return np.pad(a, pad)


def examples_at_max(arrays: dict, axes: dict, mx: int) -> dict:
    """Examples repeated along the symbol up to the maximum (the compile shapes)."""
    out = {}
    for n, a in arrays.items():
        a = np.asarray(a.numpy() if hasattr(a, "numpy") else a)
        a = a.astype(np.int32 if a.dtype.kind in "iu" else np.float32)     # an index input stays integer
        if n in axes:
            ax = axes[n]
            reps = cdiv(mx, a.shape[ax])
            a = np.take(np.concatenate([a] * reps, axis=ax), np.arange(mx), axis=ax)
        out[n] = a
    return out


def _affine(rows: np.ndarray, nmax: int) -> int | None:
    """Byte step between batch elements if rows of element b are element 0's shifted by b*step."""
    rows = np.asarray(rows, np.int64)
    if len(rows) % nmax:
        return None
    blk = rows.reshape(nmax, -1)
    step = int(blk[1, 0] - blk[0, 0]) if nmax > 1 else 0
    want = blk[0][None, :] + step * np.arange(nmax, dtype=np.int64)[:, None]
    return step if np.array_equal(blk, want) else None


def _per_tile(Mt: int, blk: int, nmax: int, what: str, bank: int = 1) -> int:
    """Batch elements an M tile of at most ``Mt`` rows holds (a divisor of ``nmax``): the most whose rows are a
    whole number of ``bank`` rows (an ACC bank: the MXU writes one region while the VPU or a bias load may
    write the other, docs/microarchitecture.md section 4), else the most."""
    cap = Mt // blk
    if cap < 1:
        raise ChipCompileError(f"{what}: one batch element is {blk} rows, more than an M tile ({Mt} rows)")
    fits = [d for d in range(1, min(cap, nmax) + 1) if nmax % d == 0]
    return max([d for d in fits if d * blk % bank == 0] or fits)


def fit_gemm(cfg, tl, M: int, a_rows, out_rows, nmax: int, what: str, out_int8: bool, bias: bool):
    """The tiling cut to whole batch elements, and the kernel's DynTile."""
    sa, so = _affine(a_rows, nmax), _affine(out_rows, nmax)
    if sa is None or so is None:
        raise ChipCompileError(f"{what}: its rows are not batch-major in the symbolic dimension "
                               f"(M = {M}, maximum {nmax}), so one loop body cannot serve every batch size")
    blk = M // nmax
    d = _per_tile(tl.Mt, blk, nmax, what, cfg.acc_bank_rows)
    Mt, MT = d * blk, nmax // d
    ostage = 2 if out_int8 else 0
    w_rows = tl.spm_rows - tl.nbuf * tl.KT * tl.Mt - ostage * tl.Mt
    scale_rows = tl.acc_rows - 2 * tl.Mt
    nbuf = tl.nbuf if MT > 1 else 1
    if MT > 1 and nbuf == 1 and not out_int8 and bias:
        nbuf = 2                               # the emitter gates a single A buffer otherwise
    t2 = replace(tl, Mt=Mt, MT=MT, nbuf=nbuf, spm_rows=nbuf * tl.KT * Mt + w_rows + ostage * Mt,
                 acc_rows=2 * Mt + scale_rows)
    if t2.spm_rows > cfg.spm_rows:
        raise ChipCompileError(f"{what}: {nbuf} A buffers of {Mt} rows do not fit SPM on config {cfg.name!r}")
    return t2, DynTile(DYN_REG, d, sa * d, so * d)


def fit_ew(cfg, tl, in_rows: list, out_rows, nmax: int, what: str):
    seqs = list(in_rows) + [out_rows]
    steps = [_affine(r, nmax) for r in seqs]
    if any(s is None for s in steps):
        raise ChipCompileError(f"{what}: its rows are not batch-major in the symbolic dimension (maximum {nmax})")
    if len(in_rows) + 3 >= DYN_REG:
        raise ChipCompileError(f"{what}: {len(in_rows)} inputs leave no scalar register for the symbolic "
                               f"dimension")
    blk = tl.M // nmax
    nin = len(in_rows)
    if blk > tl.Mt:                 # an element in several tiles, each the first shifted (an inner loop)
        for Mt in (m for m in range(tl.Mt, 0, -1) if blk % m == 0):
            lv = tile_levels([np.asarray(r)[:blk] for r in seqs], Mt, blk // Mt, 1)
            if lv and lv[0][0] == blk // Mt:
                t2 = replace(tl, Mt=Mt, MT=nmax * (blk // Mt), spm_rows=nin * Mt, acc_rows=2 * Mt)
                return t2, DynTile(DYN_REG, 1, ew_steps=tuple(steps), sub=(blk // Mt, tuple(lv[0][1])))
        raise ChipCompileError(f"{what}: one batch element is {blk} rows, more than an M tile ({tl.Mt} rows), "
                               "and its rows are not tiles of one shape")
    d = _per_tile(tl.Mt, blk, nmax, what)
    Mt, MT = d * blk, nmax // d
    t2 = replace(tl, Mt=Mt, MT=MT, spm_rows=nin * Mt, acc_rows=2 * Mt)     # the input tiles (EwCode)
    return t2, DynTile(DYN_REG, d, ew_steps=tuple(s * d for s in steps))


def out_axes(model_or_fn, arrays: dict, axes: dict, mx: int, outputs_at_max: list) -> list:
    """Which axis of each output carries the symbol: trace once more at ``max + 1`` and compare."""
    bigger = {n: (pad_to(a, axes[n], mx + 1) if n in axes else a) for n, a in arrays.items()}
    outs, _, _, _ = trace(model_or_fn, bigger)
    res = []
    for o1, o2 in zip(outputs_at_max, outs):
        diff = [i for i, (p, q) in enumerate(zip(o1.shape, o2.shape)) if p != q]
        if len(diff) > 1:
            raise ChipCompileError(f"an output of shape {o1.shape} carries the symbolic dimension twice")
        res.append(diff[0] if diff else None)
    return res


def check_padding(spec: DynSpec, run, feeds: dict, seed: int = 0) -> None:
    """Kernels that run at the maximum (``DynSpec.at_max``: norms, softmax, batched matmuls over the
    symbol) compute on padded positions too; that is harmless only when no valid output depends on them
    (rows of a norm are independent; a causal mask gives the padded keys exactly zero probability for
    every valid query). ``run(feeds)`` (the integer model at the maximum) is evaluated at a few lengths
    with zero and with random padding; any difference in the valid outputs raises ChipCompileError."""
    rng = np.random.default_rng(seed)
    for n in sorted({1, spec.max // 2} - {0, spec.max}):
        zero, rand = dict(feeds), dict(feeds)
        for name, ax in spec.in_axes.items():
            a = np.asarray(feeds[name], np.float32)
            valid = np.take(a, np.arange(n), axis=ax)
            zero[name] = pad_to(valid, ax, spec.max)
            noise = rng.standard_normal(a.shape).astype(np.float32) * float(np.abs(a).max() or 1.0)
            keep = (np.arange(spec.max) < n).reshape([-1 if i == ax else 1 for i in range(a.ndim)])
            rand[name] = np.where(keep, zero[name], noise)
        for i, (o0, o1) in enumerate(zip(cut(spec, run(zero), n), cut(spec, run(rand), n))):
            if not np.array_equal(o0, o1):
                raise ChipCompileError(f"output {i}: with {spec.symbol!r} = {n} its valid part depends on the "
                                       f"padded positions (a reduction over {spec.symbol!r} without a causal mask), "
                                       "so the kernels that run at the maximum cannot serve every length")


def host_feeds(spec: DynSpec, feeds: dict) -> tuple[dict, int]:
    """Inputs padded to the maximum, and the symbol's value (equal in every input that carries it)."""
    ns = {feeds[n].shape[ax] for n, ax in spec.in_axes.items()}
    if len(ns) != 1:
        raise ChipCompileError(f"inputs disagree on the symbolic dimension {spec.symbol!r}: sizes {sorted(ns)}")
    n = ns.pop()
    if not 1 <= n <= spec.max:
        raise ChipCompileError(f"symbolic dimension {spec.symbol!r} = {n} is outside 1..{spec.max}")
    return {k: (pad_to(v, spec.in_axes[k], spec.max) if k in spec.in_axes else v) for k, v in feeds.items()}, n


def cut(spec: DynSpec, outs: list, n: int) -> list:
    return [o if ax is None else np.take(o, np.arange(n), axis=ax) for o, ax in zip(outs, spec.out_axes)]
