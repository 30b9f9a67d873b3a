"""Design-space sweeps: ChipConfig fields x workloads, simulated on Dask, cached by content hash.

A spec (TOML, docs/sweep.md)::

    base = "base"                                   # the preset (or config file) every point starts from
    workloads = ["gemm:64x64x64", "mlp", "cnn", "conv:16x8x8", "transformer:32x2x8"]

    [grid]                                          # every combination ...
    rows = [8, 16]
    dram_latency = [16, 32, 64]

    # ... or a reproducible random sample instead of [grid]:
    # [random]
    # n = 50
    # seed = 0
    # rows = [4, 8, 16]                             # each point draws one value per field
    # dram_latency = [16, 32, 64]

Each (point, workload) pair is compiled with ``tc.compile`` for the point's config and run once on
``Device("sim")``; the result is one row of the table (``SweepResult.columns``). A config that ChipConfig refuses or a
model that does not fit (ChipCompileError) becomes a row with ``error`` set; the sweep goes on. Rows are cached
in ``cache_dir`` under the SHA-256 of (``CACHE_VERSION``, the sources of isa/, sim/ and compiler/, the config's
fields, the workload): a re-run simulates only the new pairs. Work runs on a Dask cluster: by default a local
cluster of worker processes, or an existing one given by its scheduler address; ``workers=0`` runs in this
process, without Dask.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import itertools
import json
import os
import re
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from isa import ChipConfig
from isa.errors import TetrachipError

#: bump when a change to the compiler or simulator makes cached rows stale
CACHE_VERSION = 2

#: the ChipConfig fields a spec may sweep (all but the name)
FIELDS = tuple(f.name for f in dataclasses.fields(ChipConfig) if f.name != "name")

#: the figures of each row, after the swept fields and ``workload``
FIGURES = ("cycles", "mxu_utilization", "mxu_macs", "dram_read", "dram_write", "dram_bytes", "spm_read",
           "spm_write", "acc_read", "acc_write", "instructions", "compile_s", "sim_s", "error")

WORKLOADS = {
    "gemm": "gemm:MxKxN, an int8 GEMM (M x K) @ (K x N) [default 64x64x64]",
    "mlp": "the digits MLP 64-64-10 (untrained), batch 32",
    "cnn": "the digits CNN (conv 1->16, conv 16->32 stride 2, linear 512->10; untrained), batch 8",
    "conv": "conv:CxHxW, one 3x3 convolution C->C (padding 1, bias, ReLU) on a 1xCxHxW input [default 16x8x8]",
    "transformer": "transformer:DxHxT, a pre-norm nn.TransformerBlock (dim D, H heads) on a 1xTxD input "
                   "[default 32x2x8]",
}
_DEFAULT_DIMS = {"gemm": (64, 64, 64), "conv": (16, 8, 8), "transformer": (32, 2, 8)}


class SweepError(TetrachipError):
    """A bad sweep spec or output request."""


# -- spec ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    base: ChipConfig
    points: tuple[dict, ...]          #: the swept field values of each point, in order
    workloads: tuple[str, ...]
    fields: tuple[str, ...]           #: the swept field names (the table's first columns)

    @property
    def size(self) -> int:
        return len(self.points) * len(self.workloads)


def parse_workload(text: str) -> tuple[str, tuple[int, ...]]:
    """``"gemm:64x32x16"`` -> ("gemm", (64, 32, 16)); a name without dimensions takes its default."""
    name, _, dims = str(text).strip().partition(":")
    if name not in WORKLOADS:
        raise SweepError(f"workload {text!r}: unknown; known: " + "; ".join(WORKLOADS.values()))
    want = len(_DEFAULT_DIMS.get(name, ()))
    if not dims:
        return name, _DEFAULT_DIMS.get(name, ())
    if not want or not re.fullmatch(r"\d+(x\d+)*", dims) or dims.count("x") + 1 != want:
        form = WORKLOADS[name].split(",")[0]
        raise SweepError(f"workload {text!r}: expected {form}" if want else f"workload {text!r}: takes no dimensions")
    vals = tuple(int(d) for d in dims.split("x"))
    if min(vals) < 1:
        raise SweepError(f"workload {text!r}: dimensions must be >= 1")
    return name, vals


def _values(section: str, name: str, v: object) -> list:
    if name not in FIELDS:
        raise SweepError(f"[{section}] {name!r} is not a ChipConfig field; fields: {', '.join(FIELDS)}")
    vals = v if isinstance(v, list) else [v]
    if not vals or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
        raise SweepError(f"[{section}] {name}: expected a number or a non-empty list of numbers, got {v!r}")
    return vals


def load_spec(source: str | Path | dict) -> Spec:
    """A Spec from a TOML file, TOML text or a dict of the same shape (module doc)."""
    here = None                                  # a config file named by ``base`` is found next to the spec file
    if isinstance(source, dict):
        d = source
    else:
        text, where = str(source), "spec"
        if not isinstance(source, str) or "\n" not in source:
            p = Path(source)
            try:
                text, where, here = p.read_bytes().decode("utf-8"), str(p), p.parent
            except OSError as e:
                raise SweepError(f"{p}: cannot read: {e.strerror}") from None
            except UnicodeDecodeError as e:
                raise SweepError(f"{p}: not a TOML sweep spec (not UTF-8 text: {e.reason} at byte {e.start})") from None
        try:
            d = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise SweepError(f"{where}: not valid TOML: {e}") from None
    unknown = set(d) - {"base", "workloads", "grid", "random"}
    if unknown:
        raise SweepError(f"spec: unknown key(s) {', '.join(sorted(unknown))}; expected base, workloads, "
                         "[grid] or [random]")
    base_name = d.get("base", "base")
    if not isinstance(base_name, str):
        raise SweepError(f"spec: base must be a preset name or a config file, got {base_name!r}")
    if here is not None and base_name.endswith((".toml", ".json")) and (here / base_name).is_file():
        base_name = str(here / base_name)
    base = ChipConfig.load(base_name)
    wl = d.get("workloads")
    if not isinstance(wl, list) or not wl or not all(isinstance(w, str) for w in wl):
        raise SweepError("spec: workloads must be a non-empty list of names, e.g. [\"gemm:64x64x64\", \"mlp\"]")
    for w in wl:
        parse_workload(w)
    if ("grid" in d) == ("random" in d):
        raise SweepError("spec: give exactly one of [grid] and [random]")
    if "grid" in d:
        grid = {k: _values("grid", k, v) for k, v in d["grid"].items()}
        names = tuple(grid)
        points = tuple(dict(zip(names, combo)) for combo in itertools.product(*grid.values()))
    else:
        r = dict(d["random"])
        n, seed = r.pop("n", None), r.pop("seed", 0)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SweepError(f"[random] n must be an integer >= 1, got {n!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise SweepError(f"[random] seed must be an integer, got {seed!r}")
        choices = {k: _values("random", k, v) for k, v in r.items()}
        names = tuple(choices)
        rng = np.random.default_rng(seed)
        points = tuple({k: v[int(rng.integers(len(v)))] for k, v in choices.items()} for _ in range(n))
    if not names:
        raise SweepError("spec: the [grid] / [random] section names no ChipConfig field")
    return Spec(base, points, tuple(wl), names)


def point_config(base: ChipConfig, point: dict) -> ChipConfig:
    """The point's ChipConfig (named ``sweep``); raises ConfigError when ChipConfig refuses it."""
    return dataclasses.replace(base, name="sweep", **point)


_CODE_PACKAGES = ("isa", "sim", "compiler")


def code_hash() -> str:
    """SHA-256 of the Python sources that decide a row's figures (isa/, sim/, compiler/ and this module), so an
    edit to the compiler or the timing model misses the cache instead of returning stale cycles."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    files = sorted(p for pkg in _CODE_PACKAGES for p in (root / pkg).rglob("*.py")) + [Path(__file__).resolve()]
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(base: ChipConfig, point: dict, workload: str, code: str = "") -> str:
    """The content hash of one row: every ChipConfig field but the name, the workload, ``CACHE_VERSION`` and
    ``code`` (``code_hash()``)."""
    fields = {f: getattr(base, f) for f in FIELDS} | point
    blob = json.dumps({"v": CACHE_VERSION, "code": code, "config": fields, "workload": workload}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


# -- one point -----------------------------------------------------------------------------------------------
def _build(workload: str) -> tuple[object, np.ndarray]:
    """(model, input) for a workload; weights and inputs fixed by seeds."""
    from compiler.frontend import nn
    from compiler.frontend.random import manual_seed
    from compiler.frontend.tensor import Tensor
    name, dims = parse_workload(workload)
    rng = np.random.default_rng(sum(dims) + len(name))
    manual_seed(0)
    if name == "gemm":
        m, k, n = dims
        w = rng.standard_normal((k, n)).astype(np.float32)
        return (lambda a: a @ Tensor(w)), rng.standard_normal((m, k)).astype(np.float32)
    if name == "mlp":
        return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)), \
            rng.standard_normal((32, 64)).astype(np.float32)
    if name == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                              nn.ReLU(), nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
        return model, rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
    if name == "conv":
        c, h, w_ = dims
        return nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU()), \
            rng.standard_normal((1, c, h, w_)).astype(np.float32)
    d, heads, t = dims
    if d % heads:
        raise SweepError(f"workload {workload!r}: dim {d} is not divisible by {heads} heads")
    return nn.TransformerBlock(d, heads), rng.standard_normal((1, t, d)).astype(np.float32)


def run_point(base: ChipConfig, point: dict, workload: str) -> dict:
    """One row: compile ``workload`` for the point's config and run it on the simulator. Never raises: an
    error (an invalid config, a model that does not fit, anything else) is the row's ``error``."""
    row = dict(point, workload=workload) | {k: None for k in FIGURES}
    try:
        cfg = point_config(base, point)
        from compiler.lower.dispatch import compile_model
        from runtime.device import Device
        model, x = _build(workload)
        t0 = time.perf_counter()
        cm = compile_model(model, [x], config=cfg)
        t1 = time.perf_counter()
        stats = Device("sim", config=cfg).run(cm, x).stats
        t2 = time.perf_counter()
    except Exception as e:              # noqa: BLE001  (one failed point is a row, not the end of the sweep)
        row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:500]
        return row
    rd, wr = stats.bytes["dram_read"], stats.bytes["dram_write"]
    row.update(cycles=stats.cycles, mxu_utilization=round(stats.mxu_utilization, 6), mxu_macs=stats.mxu_macs,
               dram_read=rd, dram_write=wr, dram_bytes=rd + wr,
               **{k: stats.bytes[k] for k in ("spm_read", "spm_write", "acc_read", "acc_write")},
               instructions=stats.instructions, compile_s=round(t1 - t0, 4), sim_s=round(t2 - t1, 4))
    return row


def _run_task(base_fields: dict, point: dict, workload: str) -> dict:
    """The Dask task: plain data in and out (a ChipConfig rebuilt from its fields)."""
    return run_point(ChipConfig(**base_fields), point, workload)


# -- the sweep -----------------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    rows: list[dict]
    columns: tuple[str, ...]
    simulated: int                   #: pairs run in this sweep (the rest came from the cache)
    cached: int
    failed: int
    wall_s: float

    def summary(self) -> str:
        return (f"{len(self.rows)} rows: {self.simulated} simulated, {self.cached} from the cache, "
                f"{self.failed} with an error, {self.wall_s:.1f} s")


def _cache_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / key[:2] / f"{key}.json"


def _cache_get(cache_dir: Path | None, key: str) -> dict | None:
    if cache_dir is None:
        return None
    try:
        return json.loads(_cache_path(cache_dir, key).read_text())
    except (OSError, ValueError):
        return None


def _cache_put(cache_dir: Path | None, key: str, row: dict) -> None:
    if cache_dir is None:
        return
    p = _cache_path(cache_dir, key)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(row))
        tmp.replace(p)
    except OSError as e:
        raise SweepError(f"{cache_dir}: cannot write the cache: {e.strerror}") from None


def _cacheable(row: dict) -> bool:
    """Rows worth keeping: figures, or an error that the same inputs give again (not a lost worker)."""
    err = row["error"]
    return err is None or err.split(":")[0] in ("ConfigError", "ChipCompileError", "SweepError", "ShapeError")


def run_sweep(spec: Spec, *, cache_dir: str | Path | None = ".sweep-cache", scheduler: str | None = None,
              workers: int | None = None, progress: Callable[[int], object] | None = None) -> SweepResult:
    """Run every (point, workload) pair of ``spec`` not already in ``cache_dir`` (None: no cache).

    ``scheduler``: the address of a running Dask scheduler (``tcp://host:8786``); else a local cluster of
    ``workers`` processes (default: the CPU count) is started for the sweep; ``workers=0`` runs in this
    process. ``progress(n)`` is called as pairs finish (cached ones included)."""
    t0 = time.perf_counter()
    cache = None if cache_dir is None else Path(cache_dir)
    rows: list[dict | None] = [None] * spec.size
    todo: list[tuple[int, str, dict, str]] = []
    same: dict[str, list[int]] = {}              # key -> the indices it fills (a random sample can repeat a point)
    hits = 0
    code = code_hash() if cache is not None else ""
    for i, (point, wl) in enumerate(itertools.product(spec.points, spec.workloads)):
        key = cache_key(spec.base, point, wl, code)
        if key in same:
            same[key].append(i)
            continue
        same[key] = [i]
        hit = _cache_get(cache, key)
        if hit is not None:
            rows[i], hits = hit, hits + 1
        else:
            try:
                point_config(spec.base, point)
            except TetrachipError as e:        # invalid config: a row now, no task
                bad = dict(point, workload=wl) | {k: None for k in FIGURES} | {"error": f"ConfigError: {e}"}
                rows[i] = bad
                _cache_put(cache, key, bad)
            else:
                todo.append((i, key, point, wl))
    pending = sum(len(same[key]) for _, key, _, _ in todo)
    for idx in same.values():                    # repeats of a cached or invalid point
        if rows[idx[0]] is not None:
            for j in idx[1:]:
                rows[j] = rows[idx[0]]
    if progress and spec.size - pending:
        progress(spec.size - pending)

    def done(i: int, key: str, row: dict) -> None:
        for j in same[key]:
            rows[j] = row
        if _cacheable(row):
            _cache_put(cache, key, row)
        if progress:
            progress(len(same[key]))

    base_fields = dataclasses.asdict(spec.base)
    if todo and (workers == 0 and scheduler is None):
        for i, key, point, wl in todo:
            done(i, key, _run_task(base_fields, point, wl))
    elif todo:
        _run_dask(todo, base_fields, scheduler, workers, done)
    columns = (*spec.fields, "workload", *FIGURES)
    table = [{c: r.get(c) for c in columns} for r in rows]      # type: ignore[union-attr]
    failed = sum(r["error"] is not None for r in table)
    return SweepResult(table, columns, simulated=len(todo), cached=hits, failed=failed,
                       wall_s=time.perf_counter() - t0)


def _run_dask(todo: list[tuple[int, str, dict, str]], base_fields: dict, scheduler: str | None, workers: int | None,
              done: Callable[[int, str, dict], None]) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise SweepError("sweep: Dask is not installed (pip install 'dask[distributed]'); or use workers=0 "
                         "(--workers 0) to run in this process") from None
    cluster = None
    try:
        if scheduler is None:
            n = workers or os.cpu_count() or 1
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster)
        else:
            try:
                client = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError, ValueError) as e:
                raise SweepError(f"--scheduler {scheduler}: cannot connect: {e}") from None
        with client:
            futs = {}
            for i, key, point, wl in todo:
                f = client.submit(_run_task, base_fields, point, wl, key=f"sweep-{key}", pure=False)
                futs[f] = (i, key, point, wl)
            for f in as_completed(futs):
                i, key, point, wl = futs[f]
                try:
                    row = f.result()
                except Exception as e:      # noqa: BLE001  (a worker lost or killed: that point's error)
                    row = dict(point, workload=wl) | {k: None for k in FIGURES} | {
                        "error": f"{type(e).__name__}: {e}".splitlines()[0][:500]}
                done(i, key, row)
    finally:
        if cluster is not None:
            cluster.close()


# -- output --------------------------------------------------------------------------------------------------
def write_table(result: SweepResult, path: str | Path) -> Path:
    """Write the table as JSON (a list of rows), CSV or Parquet, by the file's suffix."""
    p = Path(path)
    suffix = p.suffix.lower()
    try:
        if suffix == ".json":
            p.write_text(json.dumps(result.rows, indent=1) + "\n")
        elif suffix == ".csv":
            with p.open("w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=result.columns)
                w.writeheader()
                w.writerows(result.rows)
        elif suffix == ".parquet":
            try:
                import pyarrow as pa
                import pyarrow.parquet as pq
            except ImportError:
                raise SweepError(f"{p}: Parquet needs pyarrow, which is not installed (pip install pyarrow); "
                                 "write .json or .csv instead") from None
            pq.write_table(pa.Table.from_pylist(result.rows), p)
        else:
            raise SweepError(f"{p}: unknown table format {suffix or '(none)'!r}; use .json, .csv or .parquet")
    except OSError as e:
        raise SweepError(f"{p}: cannot write: {e.strerror}") from None
    return p


def read_table(path: str | Path) -> list[dict]:
    """Rows of a table written by ``write_table`` as JSON (what the notebooks read)."""
    return json.loads(Path(path).read_text())
