"""Schedule search: per GEMM kernel, tilings scored by the simulator's cycle count, winners cached.

    cm = tc.compile(model, [x], config="base", search=True)            # search, or a cache hit
    cm = tc.compile(model, [x], search=True, search_budget_s=5.0, cache_dir="/tmp/tc-cache")

A candidate is ``(Mt, nbuf, NB, order)``: the M tile's rows, the A buffers (1, 2: double
buffering, or with ``nmk`` one per M tile), the weight-tile slots in SPM (how far weight loads
run ahead of the matmuls) and the loop order (``Tiling.order``): ``mnk`` (M tile, N tile, K tile:
an M tile's A tiles reused across N, weights re-streamed per M tile) or ``nmk`` (N tile, M tile,
K tile: a column's weight tiles loaded once and reused across M; A re-streamed per column unless
every M tile keeps its buffer). ``Mt`` decides how many weight loads each M tile repeats and how
long each ``mm`` streams, ``nbuf`` whether A loads overlap the previous tile, ``NB`` the weight
prefetch depth. Every candidate is checked against SPM/ACC and the emitter's rules (``make``),
emitted as a one-kernel program with the kernel's real DRAM address pattern, and run on
``sim.Chip`` (the cost model; timing does not depend on the data).

Beam search: the beam starts from ``tiling.choose``'s default, a coarse ladder of M tiles and
the default's M tile in ``nmk``; each round scores every unscored neighbour of the beam (``Mt``
doubled/halved/one block more or less, ``nbuf`` toggled or one per M tile, ``NB`` one K group
more or less, the same tiles in the other order) and keeps the best ``BEAM``; a kernel whose default streams
its A tiles through a ring (``Tiling.a_ring``: nothing else fits, or the shared ring of ``tiling.a_ring_groups``)
keeps it (these knobs do not describe a ring); it stops when the
beam no longer changes or the kernel's time budget is spent. The default is always a candidate,
so the winner is never slower than it (per kernel, as measured); a kernel's winner may still lose beside
its neighbours, so ``compiler.lower.dispatch`` runs the searched and the default whole model once each and
keeps the faster (``CompiledModel.search_whole``). ``ORDERS`` lists the orders
tried (``("mnk",)``: tilings only).

Cache: one JSON file per kernel in ``cache_dir`` (default ``$TETRACHIP_CACHE_DIR`` or
``~/.cache/tetrachip``), named by the sha256 of the kernel signature (M, K tiles, N, epilogue,
the relative DRAM row pattern of its input and output), the orders and the ``ChipConfig`` digest. A cached
kernel runs no simulation (``STATS["sim_runs"]`` counts them).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from isa.ints import align_up, cdiv

from compiler.lower.tiling import Tiling

BEAM = 3
VERSION = 3
#: loop orders the search tries (``Tiling.order``); ``("mnk",)`` searches tilings only
ORDERS = ("mnk", "nmk")
#: simulator invocations and cache behaviour since import (tests read it)
STATS = {"sim_runs": 0, "hits": 0, "misses": 0}


def cache_dir(path=None) -> Path:
    p = Path(path or os.environ.get("TETRACHIP_CACHE_DIR") or Path.home() / ".cache" / "tetrachip")
    p.mkdir(parents=True, exist_ok=True)
    return p


def make(cfg, base: Tiling, out_int8: bool, bias: bool, run: int, Mt: int, nbuf: int, NB: int,
         order: str = "mnk") -> Tiling | None:
    """A tiling with these knobs, or None if it breaks a memory limit or an emitter rule.
    ``order`` "nmk" keeps a column's weight tiles resident (``NB == KT``); its ``nbuf`` may also be
    ``MT`` (every M tile its own A buffer: later columns reuse the A tiles)."""
    R = cfg.rows
    M, KT = base.M, base.KT
    if base.a_ring:                               # an A ring's knobs are not these: its default only
        return base if (Mt, nbuf, NB, order) == (base.Mt, base.nbuf, base.NB, base.order) else None
    # weight slots (compiler.lower.emit.weight_mode): whole N tiles' worth, or a ring that KT fills evenly;
    # M tiles up to M (the default's may be longer: a whole ACC bank)
    if not 1 <= Mt <= max(M, base.Mt) or NB < 1 or (NB % KT if NB >= KT else KT % NB) or order not in ("mnk", "nmk"):
        return None
    if Mt % cfg.acc_bank_rows:
        return None                               # banks: M tiles of whole ACC banks (tiling._bank_aligned)
    MT = cdiv(M, Mt)
    if order == "nmk" and NB != KT:
        return None
    if nbuf not in (1, 2) and not (order == "nmk" and nbuf == MT):
        return None
    if MT == 1:
        nbuf = 1
    elif run > 1 and Mt % run:
        return None                               # full M tiles must be translations of the first
    if MT > 1 and nbuf == 1 and not out_int8 and bias:
        return None                               # a single A buffer needs the store->load gate
    ostage = 2 if out_int8 else 0
    scale_rows = base.acc_rows - 2 * base.Mt
    spm = _staging_at(cfg, nbuf * KT * Mt + NB * R) + ostage * Mt
    acc = 2 * Mt + scale_rows
    if spm > cfg.spm_rows or acc > cfg.acc_rows:
        return None
    return replace(base, Mt=Mt, MT=MT, nbuf=nbuf, NB=NB, spm_rows=spm, acc_rows=acc, order=order)


def _staging_at(cfg, loaded: int) -> int:
    """The output staging's first SPM row after ``loaded`` rows of A tiles and weights: the next bank's on a
    config with SPM banks (the VPU writes it while the load unit writes those; docs/microarchitecture.md
    section 4)."""
    return align_up(loaded, cfg.spm_bank_rows)


def signature(kc, cfg, run: int, orders=None) -> str:
    a = np.asarray(kc.a_rows, np.int64)
    o = np.asarray(kc.out_rows, np.int64)
    sig = {"v": VERSION, "M": kc.tiling.M, "N": kc.tiling.N, "KT": kc.tiling.KT,
           "k": [(t.klen, t.estride) for t in kc.ktiles], "int8": kc.out_int8,
           "bias": kc.bias_addr is not None, "relu": kc.relu, "run": run,
           "a": hashlib.sha256((a - a[0]).tobytes()).hexdigest(),
           "o": hashlib.sha256((o - o[0]).tobytes()).hexdigest(), "cfg": cfg.digest(), "orders": list(orders or ORDERS)}
    return hashlib.sha256(json.dumps(sig, sort_keys=True, default=str).encode()).hexdigest()


def score(kc, tl: Tiling, cfg) -> int | None:
    """Cycles of the kernel alone with tiling ``tl`` on the simulator; None if it has too many instructions."""
    from sim import Chip
    from compiler.lower.emit import emit_program
    R = cfg.rows
    k2 = replace(kc, tiling=tl, spm_a=0, spm_w=tl.a_rows, spm_o=_staging_at(cfg, tl.a_rows + tl.w_slots * R),
                 acc_base=0)
    b = emit_program([k2], cfg)
    limit = cfg.imem_words if tl.order == "mnk" else cfg.imem_words // 8   # nmk unrolls one kernel per column
    if len(b) > limit:
        return None
    chip = Chip(cfg)
    chip.load(b.build("<search candidate>"))
    STATS["sim_runs"] += 1
    return int(chip.run().cycles)


def whole_cycles(cm, feeds: dict) -> int:
    """Cycles of a run of the compiled model ``cm`` on ``sim.Chip`` with ``feeds`` (its pages in turn)."""
    from sim import Chip
    chip = Chip(cm.config)
    for addr, data in cm.dram_writes(feeds):
        chip.write_dram(addr, data)
    return int(chip.run_pages(list(cm.pages)).cycles)


class Searcher:
    """``pick(kc, run)`` -> the best tiling for a kernel (cached); ``report`` per kernel."""

    def __init__(self, cfg, budget_s: float = 20.0, path=None, beam: int = BEAM, orders=None):
        self.cfg, self.budget, self.beam = cfg, float(budget_s), beam
        self.orders = tuple(orders or ORDERS)
        self.dir = cache_dir(path)
        self.report: list[dict] = []

    def pick(self, kc, run: int) -> Tiling:
        key = signature(kc, self.cfg, run, self.orders)
        f = self.dir / f"search-{key}.json"
        base = kc.tiling
        bias = kc.bias_addr is not None
        if f.exists():
            try:
                d = json.loads(f.read_text())
                tl = make(self.cfg, base, kc.out_int8, bias, run, d["Mt"], d["nbuf"], d["NB"], d.get("order", "mnk"))
                if tl is not None:
                    STATS["hits"] += 1
                    self.report.append({"kernel": kc.name, "cached": True, **d})
                    return tl
            except (ValueError, KeyError, TypeError):
                pass
        STATS["misses"] += 1
        best, d = self._search(kc, run, bias)
        f.write_text(json.dumps(d, indent=1) + "\n")
        self.report.append({"kernel": kc.name, "cached": False, **d})
        return best

    def _search(self, kc, run: int, bias: bool):
        cfg, base = self.cfg, kc.tiling
        t0 = time.perf_counter()
        scored: dict[tuple, int | None] = {}
        KT = base.KT

        def knobs(t: Tiling) -> tuple:
            return (t.Mt, t.nbuf, t.NB, t.order)

        def tiling(k: tuple) -> Tiling | None:
            return make(cfg, base, kc.out_int8, bias, run, *k)

        def ev(k: tuple):
            if k not in scored:
                t = tiling(k)
                scored[k] = None if t is None else score(kc, t, cfg)
            return scored[k]

        d0 = knobs(base)
        default = ev(d0)
        step = run if run > 1 else max(1, cfg.rows)
        mmax = max((m for m in range(step, base.M + step, step) if tiling((min(m, base.M), 2, base.NB, "mnk"))),
                   default=base.Mt)
        seeds = {d0, (min(mmax, base.M), 2, base.NB, "mnk"), (min(mmax, base.M), 1, base.NB, "mnk")}
        for frac in (2, 4):
            m = max(step, (mmax // frac) // step * step)
            seeds.add((min(m, base.M), 2, base.NB, "mnk"))
        if "nmk" in self.orders:       # the default's M tile with resident weights / resident A
            MT0 = cdiv(base.M, base.Mt)
            seeds |= {(base.Mt, base.nbuf, KT, "nmk"), (base.Mt, MT0, KT, "nmk")}
        seeds = {k for k in seeds if k[3] in self.orders}
        beam = [d0]
        for s in sorted(seeds, key=str):
            if time.perf_counter() - t0 > self.budget:
                break
            ev(s)
        rounds = 0
        while time.perf_counter() - t0 <= self.budget:
            rounds += 1
            ranked = sorted((k for k, v in scored.items() if v is not None), key=lambda k: (scored[k], str(k)))
            new_beam = ranked[:self.beam]
            if new_beam == beam and rounds > 1:
                break
            beam = new_beam
            for Mt, nb, NB, od in beam:
                near = [(Mt * 2, nb, NB, od), (Mt // 2, nb, NB, od), (Mt + step, nb, NB, od),
                        (Mt - step, nb, NB, od), (min(Mt * 2, base.M), nb, NB, od), (Mt, 3 - nb, NB, od),
                        (Mt, nb, NB + KT, od), (Mt, nb, NB - KT, od)]
                if od == "nmk":            # the same M tile with every A tile resident, or streamed
                    near += [(Mt, cdiv(base.M, Mt), NB, od), (Mt, 2, NB, od)]
                for other in self.orders:  # the same tiles in the other loop order
                    if other != od:
                        near.append((Mt, min(nb, 2), KT if other == "nmk" else max(NB, base.NB), other))
                for nk in near:
                    if time.perf_counter() - t0 > self.budget:
                        break
                    ev(nk)
        ranked = sorted((k for k, v in scored.items() if v is not None), key=lambda k: (scored[k], str(k)))
        win = ranked[0] if ranked else d0
        if default is not None and scored.get(win, default) >= default:
            win = d0                                  # ties keep the default
        by_order = {o: min((v for k, v in scored.items() if v is not None and k[3] == o), default=None)
                    for o in self.orders}
        d = {"Mt": win[0], "nbuf": win[1], "NB": win[2], "order": win[3], "cycles": scored.get(win),
             "default": list(d0), "default_cycles": default, "best_per_order": by_order,
             "candidates": sum(v is not None for v in scored.values()),
             "search_s": round(time.perf_counter() - t0, 3)}
        return tiling(win) or base, d


# ---------------------------------------------------------------------------------------------- whole models
# A searched compile is also cached whole (``model-<key>.pkl``): the key covers the prepared graph
# (ops, dtypes, edges, every constant's bytes), the calibration data, the flags, the config digest
# and the source of the compiler and ISA packages, so a cached model is never stale. Graphs whose
# node arguments are not plain data (control-flow bodies) are not cached whole.

_PLAIN = (int, float, bool, str, type(None))


def _arg_digest(a, h) -> bool:
    if isinstance(a, np.ndarray):
        h.update(f"nd{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
        return True
    if isinstance(a, (tuple, list)):
        h.update(b"(")
        ok = all(_arg_digest(x, h) for x in a)
        h.update(b")")
        return ok
    if isinstance(a, _PLAIN) or type(a).__name__ in ("DType",) or isinstance(a, np.generic):
        h.update(repr(a).encode())
        return True
    return False


def _source_digest(root: Path | None = None) -> str:
    """A digest of every compiler and isa source file (nested folders included): a whole-model
    cache entry made by other compiler code is never hit."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[2] if root is None else root
    for pkg in ("compiler", "isa"):
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def model_key(graph_outputs: list, calib: list, cfg, flags: dict) -> str | None:
    from compiler.ir.graph import toposort
    h = hashlib.sha256(f"model v{VERSION} {_source_digest()} {cfg.digest()!r} {sorted(flags.items())!r} "
                       f"{ORDERS!r}".encode())
    nodes = toposort(list(graph_outputs))
    idx = {id(n): i for i, n in enumerate(nodes)}
    for n in nodes:
        h.update(f"|{n.op.name} {n.dtype!r} {[idx[id(s)] for s in n.src]}".encode())
        if not _arg_digest(n.arg, h):
            return None
    h.update(repr([idx[id(o)] for o in graph_outputs]).encode())
    for feeds in calib:
        for k in sorted(feeds):
            h.update(k.encode())
            _arg_digest(np.asarray(feeds[k]), h)
    return h.hexdigest()


def load_model(key: str | None, path=None):
    import pickle
    if key is None:
        return None
    f = cache_dir(path) / f"model-{key}.pkl"
    if not f.exists():
        return None
    try:
        cm = pickle.loads(f.read_bytes())
    except Exception:            # a damaged entry is recompiled and rewritten
        return None
    STATS["hits"] += len(cm.search_report or [])
    cm.search_report = [dict(r, cached=True) for r in (cm.search_report or [])]
    return cm


def store_model(key: str | None, cm, path=None) -> None:
    import pickle
    if key is None:
        return
    f = cache_dir(path) / f"model-{key}.pkl"
    tmp = f.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(cm, protocol=pickle.HIGHEST_PROTOCOL))
    tmp.replace(f)
