"""Run SCALE-Sim 3.0.0 on one GEMM, for comparison with tetrachip's simulator.

SCALE-Sim is installed in its own virtual environment (``.bench/scalesim-venv``
at the repository root, git-ignored) because it crashes with numpy >= 2.4; this module only uses the
standard library, so the same file is both the driver (run under the project's
Python) and the child entry point (run under the SCALE-Sim venv's Python).

API
---
``ensure_venv(path) -> Path``
    Create the venv and install ``scalesim==3.0.0`` and ``numpy<2.4`` into it,
    unless that is already done (a stamp file makes the second call instant).
    Returns the venv's python.

``run_gemm(M, K, N, rows, cols, *, dataflow="ws", workdir=None) -> dict``
    Simulate ``C[M, N] = A[M, K] @ B[K, N]`` on a ``rows x cols`` systolic
    array. Does not install anything: call ``ensure_venv`` first (the CLI does).

CLI: ``python bench/scalesim_runner.py M K N --rows R --cols C [--json out.json]``.

How a GEMM is expressed to SCALE-Sim
------------------------------------
SCALE-Sim's GEMM topology format (``-i gemm``; ``topologies.load_arrays_gemm``)
is a CSV with one header line and rows ``name, M, N, K,`` (note the order
M, N, K and the trailing comma: the last field is dropped by the parser). It
turns such a row into the convolution ``ifmap M x K x 1 channel, filter 1 x K,
N filters, stride 1``, whose operand matrices (``compute/operand_matrix.py``) are

* ifmap  (SCALE-Sim ``Sr x T`` for WS):  ``M x K``  -- our input/activation ``A``
* filter (``K x N``):                       ``K x N`` -- our weights ``B``
* ofmap  (``M x N``):                       ``M x N`` -- our output ``C``

So our ``(M, K, N)`` is written as the row ``gemm, M, N, K,``.

In SCALE-Sim's weight-stationary model (``compute/systolic_compute_ws.py``)
the filter matrix is the stationary operand: its K (reduction) dimension is
laid along the array rows (``ArrayHeight`` = our ``rows``) and its N (output
column) dimension along the array columns (``ArrayWidth`` = our ``cols``). The
K x N weights are cut into ``ceil(K/rows) * ceil(N/cols)`` folds; for each fold
the tile is loaded and all M input rows stream through the array, each
producing one (partial) output row. That matches tetrachip's MXU (K x N weight
tile held in the array, M input rows streamed, partial sums accumulated).
Note SCALE-Sim accumulates partial sums across K-folds for free (it models no
accumulator traffic); each fold costs ``2*rows + cols + M - 2`` demand cycles
(``rows`` to load weights, then ``rows + cols + M - 2`` to stream and drain,
with no overlap between folds), and the reported total is the index of the
last demand cycle, so with no memory stalls

    cycles = ceil(K/rows) * ceil(N/cols) * (2*rows + cols + M - 2) - 1

(checked against its reports: 16^3 on 4x4 -> 415, 64^3 on 16x16 -> 1759,
256^3 on 16x16 -> 77311).

Configuration chosen
--------------------
* ``Dataflow: ws`` (``os``/``is`` accepted for experiments).
* ``InterfaceBandwidth: CALC``: SCALE-Sim's "estimate bandwidth" mode, in which
  the ifmap/filter SRAMs always hit (it computes the DRAM bandwidth needed for
  stall-free execution instead of stalling), and the ofmap drains at ``cols``
  words/cycle. This compares compute timing, not a DRAM model. The stall
  count is still read from the report and returned (it was 0 in every case
  we measured).
* SRAM sizes: each of the ifmap/filter/ofmap SRAMs is sized to hold its whole
  operand (1-byte words; SCALE-Sim hard-codes word size 1), rounded up to whole
  kB, and at least 64 kB, so capacity never throttles and the whole operand
  stays resident (``_sram_kb``).
* No custom layout, no sparsity, no Ramulator trace, and traces are not
  written (``save_disk_space=True``): writing per-cycle trace CSVs would
  dominate wall time and disk.

Returned dict
-------------
``cycles``               SCALE-Sim "Total Cycles" from COMPUTE_REPORT.csv (compute
                         cycles including stalls; excludes the initial DRAM
                         prefetch).
``cycles_incl_prefetch`` "Total Cycles (incl. prefetch)".
``stall_cycles``         "Stall Cycles".
``utilization``          SCALE-Sim's "Overall Util %" as a FRACTION (0..1):
                         ``M*K*N / (rows*cols*cycles)`` as SCALE-Sim computes it.
``utilization_macs``     the same ratio computed here from M, K, N, rows, cols and
                         ``cycles`` (a like-for-like number for our simulator;
                         it equals ``utilization`` when SCALE-Sim counts MACs as
                         M*K*N).
``mapping_efficiency``   "Mapping Efficiency %" as a fraction (mean over folds of
                         occupied PEs / all PEs).
``compute_util``         "Compute Util %" as a fraction (mean over folds of
                         MACs / (PEs * fold cycles)).
``wall_s``               wall time of SCALE-Sim's own simulation call
                         (``scalesim.run_scale``), measured inside the child.
``wall_s_process``       wall time of the whole child process (interpreter start,
                         imports, simulation, reports).
``peak_mem_mb``          peak RSS of the SCALE-Sim child process (its own
                         ``getrusage(RUSAGE_SELF).ru_maxrss``), in MiB.
``reports``              raw report rows: ``{"COMPUTE_REPORT": [{col: value}],
                         "BANDWIDTH_REPORT": [...], "DETAILED_ACCESS_REPORT": [...]}``.
plus the inputs, the SRAM sizes used, and the expected no-stall cycle count
``formula_cycles`` from the formula above.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCALESIM_VERSION = "3.0.0"
REQUIREMENTS = (f"scalesim=={SCALESIM_VERSION}", "numpy<2.4")
REPO_ROOT = Path(__file__).resolve().parents[1]
# .bench/ at the repository root (git-ignored), wherever the caller runs from.
DEFAULT_VENV = REPO_ROOT / ".bench" / "scalesim-venv"
_STAMP = ".tetrachip-scalesim-installed"
_CHILD_FLAG = "--scalesim-child"
_REPORTS = ("COMPUTE_REPORT", "BANDWIDTH_REPORT", "DETAILED_ACCESS_REPORT")
_MIN_SRAM_KB = 64


class ScaleSimError(RuntimeError):
    """SCALE-Sim could not be installed or did not produce its reports."""


# --------------------------------------------------------------------------- venv


def venv_python(path: Path | str = DEFAULT_VENV) -> Path:
    """Path of the python inside the SCALE-Sim venv (whether or not it exists)."""
    return Path(path).absolute() / "bin" / "python"


def venv_ready(path: Path | str = DEFAULT_VENV) -> bool:
    """True when ``ensure_venv(path)`` has completed before (no subprocess started)."""
    stamp = Path(path) / _STAMP
    return venv_python(path).exists() and stamp.exists() and \
        stamp.read_text().strip() == " ".join(REQUIREMENTS)


def ensure_venv(path: Path | str = DEFAULT_VENV) -> Path:
    """Create the SCALE-Sim venv at ``path`` and install SCALE-Sim into it if needed.

    Idempotent: once installed, a stamp file naming the requirements makes later
    calls return at once. Returns the venv's python.
    """
    path = Path(path).absolute()
    py = venv_python(path)
    if venv_ready(path):
        return py
    if not py.exists():
        print(f"creating SCALE-Sim venv in {path}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    print(f"installing {' '.join(REQUIREMENTS)} into {path}", file=sys.stderr)
    proc = subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         *REQUIREMENTS],
        capture_output=True, text=True)
    if proc.returncode != 0:
        raise ScaleSimError(f"pip install {' '.join(REQUIREMENTS)} failed:\n"
                            f"{proc.stderr[-4000:]}")
    check = subprocess.run(
        [str(py), "-c", "import importlib.metadata as m, numpy, scalesim.scale_sim;"
         "print(m.version('scalesim'), numpy.__version__)"],
        capture_output=True, text=True)
    if check.returncode != 0:
        raise ScaleSimError(f"SCALE-Sim does not import in {path}:\n{check.stderr[-4000:]}")
    (path / _STAMP).write_text(" ".join(REQUIREMENTS) + "\n")
    return py


# ---------------------------------------------------------------- input files


def _sram_kb(words: int) -> int:
    """SRAM size in kB holding ``words`` 1-byte words, at least _MIN_SRAM_KB."""
    return max(_MIN_SRAM_KB, math.ceil(words / 1024))


def formula_cycles(M: int, K: int, N: int, rows: int, cols: int) -> int:
    """No-stall weight-stationary cycle count of SCALE-Sim's model (see module doc)."""
    folds = math.ceil(K / rows) * math.ceil(N / cols)
    return folds * (2 * rows + cols + M - 2) - 1


def _config_text(run_name: str, rows: int, cols: int, dataflow: str,
                 ifmap_kb: int, filter_kb: int, ofmap_kb: int) -> str:
    # Every key read by scalesim 3.0.0's scale_config.read_conf_file. No
    # [network_presets] section: 3.0.0 reads its TopologyCsvLoc from the wrong
    # section; the topology is passed on the command line instead.
    return f"""\
[general]
run_name = {run_name}

[architecture_presets]
ArrayHeight : {rows}
ArrayWidth : {cols}
IfmapSramSzkB : {ifmap_kb}
FilterSramSzkB : {filter_kb}
OfmapSramSzkB : {ofmap_kb}
IfmapOffset : 0
FilterOffset : 10000000
OfmapOffset : 20000000
Bandwidth : 10
Dataflow : {dataflow}
ReadRequestBuffer : 512
WriteRequestBuffer : 512

[run_presets]
InterfaceBandwidth : CALC
UseRamulatorTrace : False

[layout]
IfmapCustomLayout : False
FilterCustomLayout : False
IfmapSRAMBankBandwidth : 10
IfmapSRAMBankNum : 10
IfmapSRAMBankPort : 2
FilterSRAMBankBandwidth : 10
FilterSRAMBankNum : 10
FilterSRAMBankPort : 2

[sparsity]
SparsitySupport : false
"""


def _write_inputs(workdir: Path, M: int, K: int, N: int, rows: int, cols: int,
                  dataflow: str) -> dict:
    sram = {"ifmap_kb": _sram_kb(M * K), "filter_kb": _sram_kb(K * N),
            "ofmap_kb": _sram_kb(M * N)}
    run_name = "gemm"
    (workdir / "scalesim.cfg").write_text(
        _config_text(run_name, rows, cols, dataflow, **sram))
    # GEMM topology: header, then "name, M, N, K," (trailing comma required).
    (workdir / "gemm.csv").write_text(f"Layer, M, N, K,\ngemm, {M}, {N}, {K},\n")
    # scalesim 3.0.0 always opens a layout file; with custom layouts off only
    # the header is needed.
    (workdir / "layout.csv").write_text("Layer name,\n")
    return {"sram_kb": sram, "run_name": run_name}


# ---------------------------------------------------------------------- child


def _child_main(argv: list[str]) -> int:
    """Runs under the SCALE-Sim venv: simulate, then write timing/memory as JSON."""
    workdir = Path(argv[0])
    import resource

    from scalesim.scale_sim import scalesim  # type: ignore[import-not-found]

    sim = scalesim(save_disk_space=True, verbose=False,
                   config=str(workdir / "scalesim.cfg"),
                   topology=str(workdir / "gemm.csv"),
                   layout=str(workdir / "layout.csv"),
                   input_type_gemm=True)
    t0 = time.perf_counter()
    sim.run_scale(top_path=str(workdir / "out"))
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    (workdir / "child.json").write_text(json.dumps(
        {"wall_s": wall, "peak_mem_mb": peak_kb / 1024.0}))
    return 0


# --------------------------------------------------------------------- driver


def _num(text: str):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _read_report(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        rows = [[c.strip() for c in r] for r in csv.reader(f)]
    header = [h for h in rows[0] if h]
    return [{h: _num(v) for h, v in zip(header, r)} for r in rows[1:] if any(r)]


def run_gemm(M: int, K: int, N: int, rows: int, cols: int, *, dataflow: str = "ws",
             workdir: Path | str | None = None,
             venv: Path | str = DEFAULT_VENV, timeout: float | None = None) -> dict:
    """Simulate the GEMM ``A[M,K] @ B[K,N]`` on a ``rows x cols`` array with SCALE-Sim.

    Runs SCALE-Sim in the venv at ``venv`` (see ``ensure_venv``) as a child
    process. Input and report files go to ``workdir`` (kept), or to a temporary
    folder that is removed afterwards. See the module docstring for the keys.
    """
    for name, v in (("M", M), ("K", K), ("N", N), ("rows", rows), ("cols", cols)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if dataflow not in ("ws", "os", "is"):
        raise ValueError(f"dataflow must be 'ws', 'os' or 'is', got {dataflow!r}")
    py = venv_python(venv)
    if not py.exists():
        raise ScaleSimError(f"no SCALE-Sim venv at {venv}: call ensure_venv() first")

    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="scalesim-")
        wd = Path(tmp.name)
    else:
        wd = Path(workdir)
        wd.mkdir(parents=True, exist_ok=True)
    try:
        meta = _write_inputs(wd, M, K, N, rows, cols, dataflow)
        for stale in [wd / "child.json"] + [
                wd / "out" / meta["run_name"] / f"{r}.csv" for r in _REPORTS]:
            stale.unlink(missing_ok=True)
        t0 = time.perf_counter()
        proc = subprocess.run([str(py), str(Path(__file__).resolve()), _CHILD_FLAG, str(wd)],
                              capture_output=True, text=True, timeout=timeout,
                              cwd=str(wd))
        wall_process = time.perf_counter() - t0
        child_json = wd / "child.json"
        if proc.returncode != 0 or not child_json.exists():
            raise ScaleSimError(
                f"SCALE-Sim failed on M={M} K={K} N={N} rows={rows} cols={cols} "
                f"(exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
        child = json.loads(child_json.read_text())
        rep_dir = wd / "out" / meta["run_name"]
        reports = {r: _read_report(rep_dir / f"{r}.csv") for r in _REPORTS}
    finally:
        if tmp is not None:
            tmp.cleanup()

    comp = reports["COMPUTE_REPORT"][0]
    cycles = int(comp["Total Cycles"])
    macs = M * K * N
    return {
        "tool": f"scalesim {SCALESIM_VERSION}",
        "M": M, "K": K, "N": N, "rows": rows, "cols": cols, "dataflow": dataflow,
        "macs": macs,
        "cycles": cycles,
        "cycles_incl_prefetch": int(comp["Total Cycles (incl. prefetch)"]),
        "stall_cycles": int(comp["Stall Cycles"]),
        "utilization": float(comp["Overall Util %"]) / 100.0,
        "utilization_macs": macs / (rows * cols * cycles),
        "mapping_efficiency": float(comp["Mapping Efficiency %"]) / 100.0,
        "compute_util": float(comp["Compute Util %"]) / 100.0,
        "formula_cycles": formula_cycles(M, K, N, rows, cols) if dataflow == "ws" else None,
        "wall_s": float(child["wall_s"]),
        "wall_s_process": wall_process,
        "peak_mem_mb": float(child["peak_mem_mb"]),
        "sram_kb": meta["sram_kb"],
        "bandwidth_mode": "CALC",
        "reports": reports,
    }


# ------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Run SCALE-Sim 3.0.0 on one GEMM M x K times K x N "
                    "(weight-stationary by default) and print its figures.")
    ap.add_argument("M", type=int)
    ap.add_argument("K", type=int)
    ap.add_argument("N", type=int)
    ap.add_argument("--rows", type=int, required=True, help="systolic array rows (ArrayHeight)")
    ap.add_argument("--cols", type=int, required=True, help="systolic array cols (ArrayWidth)")
    ap.add_argument("--dataflow", default="ws", choices=("ws", "os", "is"))
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                    help=f"SCALE-Sim virtual environment (default {DEFAULT_VENV})")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="keep SCALE-Sim's input and report files here")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from isa.outputs import check_outputs, write_atomic      # the project's, not SCALE-Sim's venv
    check_outputs(ap, args.json)        # before the work, not after it
    try:
        ensure_venv(args.venv)
        res = run_gemm(args.M, args.K, args.N, args.rows, args.cols,
                       dataflow=args.dataflow, workdir=args.workdir, venv=args.venv)
    except (ScaleSimError, ValueError, subprocess.CalledProcessError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        write_atomic(args.json, text + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [_CHILD_FLAG]:
        sys.exit(_child_main(sys.argv[2:]))
    sys.exit(main())
