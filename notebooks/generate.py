"""Writes the notebooks of this folder from the cell sources below, without outputs.

    python notebooks/generate.py

Edit the cells here, regenerate, and commit both this script and the .ipynb files.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

ROOT_CELL = new_code_cell('''\
import os
import sys
from pathlib import Path

ROOT = Path.cwd()
while not (ROOT / "tetrachip").is_dir() and ROOT != ROOT.parent:   # run from the repo root or notebooks/
    ROOT = ROOT.parent
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)''')

SAVE = '''
out = Path(OUT)
out.mkdir(parents=True, exist_ok=True)


def save(fig, name):
    path = out / name
    fig.savefig(path, dpi=110, bbox_inches="tight")
    print("wrote", path)
'''


def setup(imports: str, rest: str = "") -> list:
    """The cell finding the repository root, then one cell of imports (first), the figure helper and ``rest``."""
    return [ROOT_CELL, new_code_cell(imports + SAVE + rest)]


def params(extra: str = "") -> nbformat.NotebookNode:
    src = ('QUICK = True              # the test suite runs this; `make notebooks` sets False\n'
           'OUT = "out/notebooks"' + extra)
    return new_code_cell(src, metadata={"tags": ["parameters"]})


NB1 = [
    new_markdown_cell(
        "# GEMM and roofline: the simulated chip vs SCALE-Sim's closed form\n\n"
        "An int8 GEMM `C[M,N] = A[M,K] @ B[K,N]` (int32 out) runs on the cycle-level simulator "
        "(`sim.programs.run_gemm`, the program the compiler's GEMM kernels follow) for several array sizes "
        "and shapes. Next to it, SCALE-Sim's published no-stall closed forms for the same R x C array:\n\n"
        "* weight stationary: `ceil(K/R)*ceil(N/C)*(2R+C+M-2) - 1` cycles\n"
        "* output stationary: `ceil(M/R)*ceil(N/C)*(R+C+K-2) - 1` cycles\n\n"
        "Utilization is `M*K*N / (R*C*cycles)` on every side. The closed forms load weights without overlap "
        "and never store results; the chip overlaps the next weight tile's load with the current stream "
        "and moves every int32 result to DRAM through the DMA."),
    params('\nCONFIGS = ["tiny", "small", "base"]'),
    *setup('''\
import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter

import tetrachip as tc
from sim.programs import run_gemm
''', '''
if QUICK:
    CONFIGS = CONFIGS[:2]

def ws_formula(M, K, N, R, C):
    return math.ceil(K / R) * math.ceil(N / C) * (2 * R + C + M - 2) - 1

def os_formula(M, K, N, R, C):
    return math.ceil(M / R) * math.ceil(N / C) * (R + C + K - 2) - 1
'''),
    new_markdown_cell("## Sweep: M (rows streamed per weight tile) and N (output columns, i.e. int32 results stored)"),
    new_code_cell('''\
rng = np.random.default_rng(0)
rows = []
for name in CONFIGS:
    cfg = tc.ChipConfig.preset(name)
    R, C = cfg.rows, cfg.cols
    ms = [1, 2, 4, 8, 16, 32] if QUICK else [1, 2, 4, 8, 16, 32, 64]
    ns = [1, 2, 4, 8] if QUICK else [1, 2, 4, 8, 16]
    shapes = [("M", R * f, 4 * R, 4 * C) for f in ms] + [("N", 4 * R, 4 * R, C * f) for f in ns]
    for sweep, M, K, N in shapes:
        a = rng.integers(-8, 8, (M, K), dtype=np.int8)
        b = rng.integers(-8, 8, (K, N), dtype=np.int8)
        try:
            c, st, _ = run_gemm(a, b, cfg)
        except Exception as e:      # a shape over the config's DRAM is skipped, with the reason
            print(f"{name} {M}x{K}x{N}: skipped ({e})")
            continue
        assert (c == a.astype(np.int32) @ b.astype(np.int32)).all()
        ws, os_ = ws_formula(M, K, N, R, C), os_formula(M, K, N, R, C)
        rows.append(dict(config=name, R=R, C=C, sweep=sweep, M=M, K=K, N=N, cycles=st.cycles, ws=ws, os=os_,
                         util=M * K * N / (R * C * st.cycles), util_ws=M * K * N / (R * C * ws),
                         util_os=M * K * N / (R * C * os_), store_busy=st.busy["store"] / st.cycles,
                         load_busy=st.busy["load"] / st.cycles,
                         dram=st.bytes["dram_read"] + st.bytes["dram_write"], beat=cfg.dma_beat_bytes))
print(f"{'config':<7}{'M':>6}{'K':>6}{'N':>6}{'chip':>9}{'WS form':>9}{'OS form':>9}{'chip/WS':>9}{'store':>7}")
for r in rows:
    print(f"{r['config']:<7}{r['M']:>6}{r['K']:>6}{r['N']:>6}{r['cycles']:>9}{r['ws']:>9}{r['os']:>9}"
          f"{r['cycles'] / r['ws']:>9.2f}{r['store_busy']:>7.0%}")
'''),
    new_code_cell('''\
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for name in CONFIGS:
    for ax, sweep in zip(axes, ["M", "N"]):
        rs = [r for r in rows if r["config"] == name and r["sweep"] == sweep]
        if not rs:
            continue
        x = [r[sweep] for r in rs]
        line, = ax.plot(x, [r["util"] for r in rs], "o-", label=f"{name} {rs[0]['R']}x{rs[0]['C']} chip (sim)")
        ax.plot(x, [r["util_ws"] for r in rs], "--", color=line.get_color(), label=f"{name} WS closed form")
        ax.plot(x, [r["util_os"] for r in rs], ":", color=line.get_color(), label=f"{name} OS closed form")
for ax, sweep, other in zip(axes, ["M", "N"], ["K = 4R, N = 4C", "M = K = 4R"]):
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"{sweep} ({other})")
    ax.set_ylabel("MXU utilization")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=7)
axes[0].set_title("utilization vs M")
axes[1].set_title("utilization vs N")
save(fig, "01_utilization.png")
'''),
    new_markdown_cell("## Roofline\n\nOps are `2*M*K*N`; bytes are the DRAM bytes the simulator counted (A, B "
                      "read; C written as int32). Peak compute is `2*R*C` ops per cycle, peak bandwidth "
                      "`dma_beat_bytes` per cycle per direction (read and write channels)."),
    new_code_cell('''\
fig, ax = plt.subplots(figsize=(6, 4))
for name in CONFIGS:
    rs = [r for r in rows if r["config"] == name]
    cfg = tc.ChipConfig.preset(name)
    peak, bw = 2 * cfg.rows * cfg.cols, 2 * cfg.dma_beat_bytes
    ai = np.array([2 * r["M"] * r["K"] * r["N"] / r["dram"] for r in rs])
    perf = np.array([2 * r["M"] * r["K"] * r["N"] / r["cycles"] for r in rs])
    xs = np.logspace(np.log10(ai.min() / 2), np.log10(ai.max() * 2), 50)
    line, = ax.plot(xs, np.minimum(peak, bw * xs), "-", lw=1)
    ax.plot(ai, perf, "o", color=line.get_color(), label=f"{name} ({cfg.rows}x{cfg.cols})")
ax.set_xscale("log"); ax.set_yscale("log")
ax.xaxis.set_minor_formatter(NullFormatter())
ax.set_xlabel("arithmetic intensity (ops / DRAM byte)")
ax.set_ylabel("ops / cycle")
ax.legend(); ax.grid(alpha=0.3, which="both")
ax.set_title("roofline (lines: min(peak, DRAM bandwidth x intensity))")
save(fig, "01_roofline.png")
'''),
    new_markdown_cell("## Conclusion (computed from the rows above)"),
    new_code_cell('''\
wins = [r for r in rows if r["cycles"] < r["ws"]]
best = max(rows, key=lambda r: r["ws"] / r["cycles"])
print(f"Overlapping weight loads: the chip beats SCALE-Sim's weight-stationary closed form on {len(wins)} of "
      f"{len(rows)} shapes, by up to {best['ws'] / best['cycles']:.2f}x at {best['M']}x{best['K']}x{best['N']} on "
      f"{best['config']} ({best['R']}x{best['C']}): there the formula pays a 2R = {2 * best['R']}-cycle weight fill "
      f"per fold that the chip hides behind the previous stream of M = {best['M']} rows.")
for name in CONFIGS:
    ms = [r for r in rows if r["config"] == name and r["sweep"] == "M"]
    big = max(ms, key=lambda r: r["M"])
    print(f"Storing int32 results on {name}: at M = {big['M']} (K = {big['K']}, N = {big['N']}) the DMA store "
          f"channel is busy {big['store_busy']:.0%} of the run and the chip takes {big['cycles'] / big['ws']:.2f}x "
          f"the closed form's cycles: each result row is {4 * big['C']} bytes through a {big['beat']}-byte beat, "
          f"a cost the formula does not count.")
small = min(rows, key=lambda r: r["ws"])
print(f"The smallest GEMM ({small['M']}x{small['K']}x{small['N']} on {small['config']}) runs "
      f"{small['cycles']} cycles against the formula's {small['ws']}: the fixed cost of the first DMA load "
      f"and the last store (DRAM latency {tc.ChipConfig.preset(small['config']).dram_latency} cycles each way) "
      f"dominates a GEMM this small.")
'''),
]

NB2 = [
    new_markdown_cell(
        "# Design-space exploration: cycles, FPGA area and energy, with Pareto fronts\n\n"
        "A grid over the array size (`rows` x `cols`), the scratchpad and accumulator depths (`spm_rows`, "
        "`acc_rows`) and the DMA width (`dma_beat_bytes`, bytes per beat) is run over a set of workloads (GEMMs, "
        "the digits CNN, a transformer block) by `runtime.sweep` (`tetrachip sweep`'s library: each point is "
        "compiled with `tc.compile` and run on the cycle-level simulator). For every point:\n\n"
        "* **cycles**: `Stats.cycles` of the run;\n"
        "* **FPGA area**: LUTs, DSPs and block RAMs from the project's fit model (`rtl.fpga.fit.estimate`, "
        "calibrated on Yosys' synth_ecp5, docs/fpga.md), on the device named below;\n"
        "* **energy**: the run's counters (MXU multiply-accumulates, SPM/ACC/DRAM bytes) times published "
        "per-access energies (next section).\n\n"
        "Then, per workload, the Pareto fronts cycles vs LUTs and cycles vs energy, with the non-dominated "
        "points marked.\n\n"
        "**Queue depth** is not swept: it is `isa.timing.QUEUE_DEPTH`, a constant of the ISA's timing contract "
        "(the compiler's schedules and the RTL depend on it), not a `ChipConfig` field. Only fields that exist "
        "are swept (`runtime.sweep.FIELDS`)."),
    params('\nBASE = "small"            # the preset every point starts from\n'
           'DEVICE = "ecp5-85k"       # the FPGA the area model counts against (rtl/fpga/devices.py)\n'
           'MAC = "dsp"               # the array\'s multiplier: hard DSP blocks or "lut"'),
    *setup('''\
import math

import matplotlib.pyplot as plt
import numpy as np

from isa.table import SPACE_BITS, Space
from isa.timing import QUEUE_DEPTH
from rtl.fpga.devices import device
from rtl.fpga.fit import estimate
from runtime.sweep import load_spec, point_config, run_sweep
''', '''
if QUICK:            # a few points, run in this process
    GRID = dict(rows=[4, 8], cols=[8], spm_rows=[1024, 4096], acc_rows=[1024], dma_beat_bytes=[4, 8])
    WORKLOADS = ["gemm:32x32x32", "cnn", "transformer:32x2x8"]
else:                # the larger grid, on a local Dask cluster
    GRID = dict(rows=[4, 8, 16], cols=[8, 16], spm_rows=[1024, 4096, 16384], acc_rows=[256, 1024, 4096],
                dma_beat_bytes=[4, 8, 16])
    WORKLOADS = ["gemm:64x64x64", "gemm:128x32x128", "cnn", "transformer:32x2x8"]
print(f"queue depth (isa.timing.QUEUE_DEPTH, not swept): {QUEUE_DEPTH}")
'''),
    new_markdown_cell("## The sweep"),
    new_code_cell('''\
spec = load_spec({"base": BASE, "workloads": WORKLOADS, "grid": GRID})
print(f"{len(spec.points)} points x {len(spec.workloads)} workloads = {spec.size} runs")
result = run_sweep(spec, cache_dir=None if QUICK else ".sweep-cache", workers=0 if QUICK else None)
print(result.summary())
why = {}                     # pairs that did not run, by error type and workload: a count and a first example
for r in result.rows:
    if r["error"]:
        why.setdefault((r["error"].split(":")[0], r["workload"]), [0, r])[0] += 1
for n, r in why.values():
    print(f"  {n} not run, e.g. {dict((k, r[k]) for k in spec.fields)} {r['workload']}: {r['error'][:110]}")
rows = [dict(r) for r in result.rows if r["error"] is None]


def short(r):
    """rows x cols, SPM rows, ACC rows, DMA bytes per beat"""
    return f"{r['rows']}x{r['cols']} s{r['spm_rows']} a{r['acc_rows']} d{r['dma_beat_bytes']}"
'''),
    new_markdown_cell(
        "## Energy model (published per-access energies)\n\n"
        "Source: M. Horowitz, *Computing's energy problem (and what we can do about it)*, ISSCC 2014, "
        "doi:10.1109/ISSCC.2014.6757323, figures for a **45 nm process at 0.9 V**:\n\n"
        "| operation | energy |\n|---|---|\n"
        "| 8-bit integer multiply | 0.2 pJ |\n| 32-bit integer add | 0.1 pJ |\n"
        "| SRAM read, 64 bits, 8 KB / 32 KB / 1 MB array | 10 / 20 / 100 pJ |\n"
        "| DRAM access, 64 bits | 1.3 - 2.6 nJ |\n\n"
        "Assumptions:\n\n"
        "* one MXU multiply-accumulate (int8 x int8 into an int32 partial sum) = 8-bit multiply + 32-bit add "
        "= 0.3 pJ, counted on `Stats.mxu_macs` (slots with a loaded weight row, so padded lanes of a tile count);\n"
        "* SRAM energy per byte = the 64-bit access energy / 8, interpolated linearly in log2(capacity) between "
        "Horowitz's three sizes (and extended along the same line outside them) at the memory's capacity: "
        "SPM = `spm_rows` x `cols` x 1 byte, ACC = `acc_rows` x `cols` x 4 bytes; reads and writes cost the same;\n"
        "* DRAM: the low end, 1.3 nJ per 64 bits (162.5 pJ/byte), so DRAM's share is a lower bound;\n"
        "* no scaling to another node: every figure is Horowitz's 45 nm one. A newer node lowers the logic and "
        "SRAM figures more than the DRAM one, which would raise DRAM's share further; the ranking of points "
        "under a uniform factor is unchanged;\n"
        "* left out: the VPU, instruction issue, queues, link traffic, clock tree and leakage (static energy "
        "grows with cycles x area, which the two fronts show separately)."),
    new_code_cell('''\
PJ_MAC = 0.2 + 0.1                                   # 8-bit multiply + 32-bit add
SRAM_PJ_64 = {8 * 1024: 10.0, 32 * 1024: 20.0, 1024 * 1024: 100.0}   # per 64-bit access, by capacity
DRAM_PJ_BYTE = 1300.0 / 8


def sram_pj_per_byte(capacity):
    caps = np.log2(list(SRAM_PJ_64))
    pj = np.array(list(SRAM_PJ_64.values()))
    x = math.log2(capacity)
    i = 0 if x < caps[1] else 1                      # the segment it falls on (extended at the ends)
    e64 = pj[i] + (pj[i + 1] - pj[i]) * (x - caps[i]) / (caps[i + 1] - caps[i])
    return max(e64, 0.0) / 8


dev = device(DEVICE)
for r in rows:
    cfg = point_config(spec.base, {k: r[k] for k in spec.fields})
    est = estimate(cfg, dev, mac=MAC)
    r.update(luts=est.luts, dsps=est.dsps, brams=est.brams, fits=not est.over(dev))
    spm_cap = cfg.spm_rows * cfg.cols * SPACE_BITS[Space.SPM] // 8
    acc_cap = cfg.acc_rows * cfg.cols * SPACE_BITS[Space.ACC] // 8
    r["e_mac"] = r["mxu_macs"] * PJ_MAC
    r["e_spm"] = (r["spm_read"] + r["spm_write"]) * sram_pj_per_byte(spm_cap)
    r["e_acc"] = (r["acc_read"] + r["acc_write"]) * sram_pj_per_byte(acc_cap)
    r["e_dram"] = r["dram_bytes"] * DRAM_PJ_BYTE
    r["energy_nj"] = (r["e_mac"] + r["e_spm"] + r["e_acc"] + r["e_dram"]) / 1000
print(f"area on {DEVICE} ({dev.luts} LUT, {dev.dsps} DSP, {dev.brams} BRAM), mac={MAC}")
print(f"point: {short.__doc__}")
print(f"{'point':<26}{'workload':<20}{'cycles':>8}{'LUT':>10}{'DSP':>5}{'BRAM':>6}"
      f"{'nJ':>9}{'DRAM%':>7}")
for r in rows:
    print(f"{short(r):<26}{r['workload']:<20}{r['cycles']:>8}{r['luts']:>10}{r['dsps']:>5}{r['brams']:>6}"
          f"{r['energy_nj']:>9.1f}{r['e_dram'] / (1000 * r['energy_nj']):>7.0%}")
'''),
    new_markdown_cell(
        "## Pareto fronts\n\n"
        "A point is on the front when no other point of the same workload is at least as good on both axes "
        "and better on one (both minimized). LUTs dominate the FPGA cost here: SPM and ACC have several write "
        "and combinational read ports, so the fit model prices their depth in LUT RAM (docs/fpga.md); points "
        "that do not fit the device are drawn hollow (the project's FPGA builds shrink them to "
        "`rtl.fpga.fit.FPGA_MEMORY`'s depths for that reason, `--fpga-mem`). The LUT axis is the model's "
        "count for the config as swept, a relative area, not a promise that it places."),
    new_code_cell('''\
def pareto(xs, ys):
    """Indices of the non-dominated points (both minimized)."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    keep = []
    for i in range(len(xs)):
        dom = (xs <= xs[i]) & (ys <= ys[i]) & ((xs < xs[i]) | (ys < ys[i]))
        if not dom.any():
            keep.append(i)
    return sorted(keep, key=lambda i: xs[i])


workloads = [w for w in spec.workloads if any(r["workload"] == w for r in rows)]
fronts = {}
for key, label, fname in (("luts", "FPGA LUTs (fit model)", "02_pareto_area.png"),
                          ("energy_nj", "energy (nJ, Horowitz 45 nm)", "02_pareto_energy.png")):
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 3.6), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        rs = [r for r in rows if r["workload"] == w]
        x, y = [r[key] for r in rs], [r["cycles"] for r in rs]
        front = pareto(x, y)
        fronts[(w, key)] = [rs[i] for i in front]
        for r in rs:
            ax.plot(r[key], r["cycles"], "o", color="0.6", mfc="0.6" if r["fits"] else "none", ms=5)
        ax.plot([x[i] for i in front], [y[i] for i in front], "o-", color="C3", ms=7, label="Pareto front")
        for i in front:
            r = rs[i]
            ax.annotate(short(r), (x[i], y[i]), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.ticklabel_format(style="sci", scilimits=(-3, 5))
        ax.set_xlabel(label); ax.set_ylabel("cycles"); ax.set_title(w, fontsize=9); ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"cycles vs {label.split(' (')[0]}: base {BASE}, {len(spec.points)} points "
                 "(labels: " + short.__doc__ + ")", fontsize=9)
    fig.tight_layout()
    save(fig, fname)
'''),
    new_code_cell('''\
fig, ax = plt.subplots(figsize=(6, 3.5))
best = [min((r for r in rows if r["workload"] == w), key=lambda r: r["energy_nj"]) for w in workloads]
bottom = np.zeros(len(best))
for part, name in (("e_mac", "MXU MACs"), ("e_spm", "SPM"), ("e_acc", "ACC"), ("e_dram", "DRAM")):
    vals = np.array([r[part] / 1000 for r in best])
    ax.bar(range(len(best)), vals, bottom=bottom, label=name)
    bottom += vals
ax.set_xticks(range(len(best)), [w for w in workloads], fontsize=7)
ax.set_ylabel("energy (nJ)"); ax.legend(fontsize=7); ax.set_title("energy by component, lowest-energy point")
save(fig, "02_energy_breakdown.png")
'''),
    new_markdown_cell("## Conclusion (computed)"),
    new_code_cell('''\
def name(r):
    return (f"{r['rows']}x{r['cols']} array, SPM {r['spm_rows']} rows, ACC {r['acc_rows']} rows, "
            f"DMA {r['dma_beat_bytes']} B/beat")


for w in workloads:
    rs = [r for r in rows if r["workload"] == w]
    fast = min(rs, key=lambda r: (r["cycles"], r["luts"]))
    small = fronts[(w, "luts")][0]
    frugal = min(rs, key=lambda r: (r["energy_nj"], r["cycles"]))
    dram = frugal["e_dram"] / (1000 * frugal["energy_nj"])
    print(f"{w}: fastest {fast['cycles']} cycles on {name(fast)} ({fast['luts']} LUT); smallest on the front "
          f"{small['luts']} LUT at {small['cycles']} cycles ({name(small)}); least energy "
          f"{frugal['energy_nj']:.1f} nJ on {name(frugal)}, {dram:.0%} of it DRAM. "
          f"{len(fronts[(w, 'luts')])} of {len(rs)} points on the area front, "
          f"{len(fronts[(w, 'energy_nj')])} on the energy front.")
fit = sum(r["fits"] for r in rows)
print(f"{fit} of {len(rows)} runs are on configs the fit model places on {DEVICE}; "
      f"{result.failed} of {len(result.rows)} pairs did not run (config refused or model too large).")
'''),
]


NB3 = [
    new_markdown_cell(
        "# A model on the chip\n\n"
        "A small CNN + MLP compiled with `tc.compile` and run on `tc.Device('sim', trace=True)`: per-kernel "
        "cycles and the unit that bounds each (`bench/models.kernel_profile`), the whole run's busy/stall "
        "breakdown per unit (`Stats`), a timeline from the trace, DRAM traffic; then one binary compiled "
        "with a dynamic batch dimension, swept over N."),
    params('\nCONFIG = "base"'),
    *setup('''\
import hashlib
import importlib.util
import json

import matplotlib.pyplot as plt
import numpy as np

import tetrachip as tc
from sim.stats import UNIT_NAMES
''', '''
spec = importlib.util.spec_from_file_location("bench_models", ROOT / "bench" / "models.py")
bench_models = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_models)
cfg = tc.ChipConfig.preset(CONFIG)
'''),
    new_code_cell('''\
tc.manual_seed(0)
C1, HW = (4, 8) if QUICK else (16, 16)

class Net(tc.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = tc.nn.Conv2d(3, C1, 3, padding=1)
        self.fc1 = tc.nn.Linear(C1 * HW * HW, 64)
        self.fc2 = tc.nn.Linear(64, 10)

    def forward(self, x):
        h = self.conv(x).relu()
        h = h.reshape(x.shape[0], -1)
        return self.fc2(self.fc1(h).relu())

model = Net()
x = np.random.default_rng(0).standard_normal((2, 3, HW, HW)).astype(np.float32)
cm = tc.compile(model, [x], config=cfg)
res = tc.Device("sim", config=cfg, trace=True).run(cm, x)
st = res.stats
ref = cm.reference(x)
print("bit exact vs the quantized reference:", all(np.array_equal(a, b) for a, b in zip(res.outputs, ref)))
print(st)
'''),
    new_markdown_cell("## Per kernel: cycles and the bounding unit"),
    new_code_cell('''\
prof = bench_models.kernel_profile(cm, res.trace)
print(bench_models.profile_table({"model": "Net", "config": cfg.name, "profile": prof}))
fig, ax = plt.subplots(figsize=(8, 3))
units = [u for u in UNIT_NAMES if u != "scalar"]
left = np.zeros(len(prof))
for u in units:
    v = np.array([k["busy"].get(u, 0) for k in prof], float)
    ax.barh([k["kernel"] for k in prof], v, left=left, label=u)
    left += v
ax.set_xlabel("busy cycles (instances' start-to-retire; overlapping instances count more than once)")
ax.legend(fontsize=7); ax.invert_yaxis()
ax.set_title("per kernel: busy cycles by unit")
save(fig, "03_kernels.png")
'''),
    new_markdown_cell("## Per unit: busy vs idle, and the stalls by cause"),
    new_code_cell('''\
fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
busy = {u: st.busy[u] for u in UNIT_NAMES if u != "scalar"}
axes[0].bar(list(busy), [v / st.cycles for v in busy.values()])
axes[0].set_ylabel("busy fraction of the run"); axes[0].set_ylim(0, 1)
axes[0].set_title(f"{st.cycles} cycles; MXU utilization {st.mxu_utilization:.1%}")
stalls = sorted(st.stalls.items(), key=lambda kv: -kv[1])[:12]
axes[1].barh([k for k, _ in stalls], [v for _, v in stalls])
axes[1].invert_yaxis(); axes[1].set_xlabel("stall cycles"); axes[1].set_title("stalls by cause")
save(fig, "03_units.png")
'''),
    new_markdown_cell("## Timeline from the trace (one row per unit; the same records load in Perfetto via "
                      "`res.trace.to_chrome()`)"),
    new_code_cell('''\
fig, ax = plt.subplots(figsize=(12, 3))
spans = {u: [] for u in range(len(UNIT_NAMES))}
for r in res.trace.records:
    if r.retire is not None:
        spans[r.unit].append((r.start, max(r.retire - r.start, 1)))
for u, sp in spans.items():
    ax.broken_barh(sp, (u - 0.4, 0.8), color=f"C{u}")
ax.set_yticks(range(len(UNIT_NAMES)), UNIT_NAMES)
ax.set_xlabel("cycle"); ax.set_title("instruction instances per unit (start to retire)")
save(fig, "03_timeline.png")
(out / "03_trace.json").write_text(json.dumps(res.trace.to_chrome()))
'''),
    new_markdown_cell("## DRAM traffic"),
    new_code_cell('''\
fig, ax = plt.subplots(figsize=(6, 3))
kinds = ["dram_read", "dram_write", "spm_read", "spm_write", "acc_read", "acc_write"]
ax.bar(kinds, [st.bytes[k] for k in kinds])
ax.set_ylabel("bytes"); ax.set_yscale("log"); ax.tick_params(axis="x", rotation=30)
ax.set_title("bytes moved per memory")
save(fig, "03_traffic.png")
floor = (cfg.dma_beat_bytes and max(st.bytes["dram_read"], st.bytes["dram_write"]) / cfg.dma_beat_bytes)
print(f"DRAM: {st.bytes['dram_read']} bytes read, {st.bytes['dram_write']} written; the busier channel "
      f"alone needs {floor:.0f} beats = {floor / st.cycles:.0%} of the run")
'''),
    new_markdown_cell("## One binary, a dynamic batch dimension\n\nThe conv is compiled once with "
                      "`dynamic={'N': NMAX}`; the host writes N into a scalar register at launch."),
    new_code_cell('''\
NMAX = 16 if QUICK else 64
dconv = tc.nn.Conv2d(3, 16, 3, padding=1)
xs = np.random.default_rng(1).standard_normal((NMAX, 3, 8, 8)).astype(np.float32)
dcm = tc.compile(lambda t: dconv(t).relu(), {"x": xs}, config=cfg, dynamic={"N": NMAX}, search=True,
                 cache_dir=out / "search_cache")
digest = hashlib.sha256(dcm.program.to_bytes()).hexdigest()
dev = tc.Device("sim", config=cfg)
sweep = []
for n in sorted({1, 2, NMAX // 4, NMAX // 2, NMAX}):
    feeds = {"x": xs[:n]}
    r = dev.run(dcm, feeds)
    assert all(np.array_equal(a, b) for a, b in zip(r.outputs, dcm.reference(feeds)))
    assert hashlib.sha256(dcm.program.to_bytes()).hexdigest() == digest
    sweep.append((n, r.stats.cycles))
    print(f"N = {n:>3}: {r.stats.cycles:>8} cycles (binary sha256 {digest[:12]})")
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(*zip(*sweep), "o-")
ax.set_xlabel("N (run-time batch)"); ax.set_ylabel("cycles"); ax.set_title("one binary swept over N")
save(fig, "03_dynamic.png")
'''),
    new_markdown_cell("## Conclusion (computed)"),
    new_code_cell('''\
top = max(prof, key=lambda k: k["cycles"])
busiest = max(busy, key=busy.get)
stall = max(st.stalls.items(), key=lambda kv: kv[1]) if st.stalls else ("none", 0)
(n0, c0), (n1, c1) = sweep[0], sweep[-1]
print(f"On {cfg.name} ({cfg.rows}x{cfg.cols}) the model takes {st.cycles} cycles at {st.mxu_utilization:.1%} MXU "
      f"utilization. The longest kernel is {top['kernel']} ({top['cycles']} cycles, {top['cycles'] / st.cycles:.0%} "
      f"of the run, bound by {top['bound']}); over the run the busiest unit is {busiest} "
      f"({busy[busiest] / st.cycles:.0%} busy) and the largest stall cause is {stall[0]} ({stall[1]} cycles). "
      f"The dynamic binary runs N = {n0} in {c0} cycles and N = {n1} in {c1} ({c1 / c0:.1f}x for {n1 / n0:.0f}x "
      f"the batch), from the same bytes.")
'''),
]

NB4 = [
    new_markdown_cell(
        "# The chip vs CPU/GPU\n\n"
        "The same workloads (GEMMs and a small MLP with a softmax) on `tc.Device('numpy')`, "
        "`tc.Device('opencl')` and `cuda`/`triton` where a GPU is present (float32, wall time end to end, median "
        "of warm runs), next to the simulated chip (int8, `tc.compile` + `tc.Device('sim')`; cycles turned "
        "into time), labelled by config and clock:\n\n"
        "* **FPGA (measured)**: the best placed-and-routed fmax of a whole chip in `bench/fpga_results.json`, "
        "on the config it was measured for;\n"
        "* **ASIC (config clock)**: a config's `clock_mhz`, a reporting figure, not a measurement — for the "
        "FPGA config and for `ASIC_CONFIG`."),
    params('\nREPS = 3\nASIC_CONFIG = "base"'),
    *setup('''\
import importlib.util
import json

import matplotlib.pyplot as plt
import numpy as np

import tetrachip as tc
''', '''
spec = importlib.util.spec_from_file_location("gpu_compare", ROOT / "bench" / "gpu_compare.py")
gpu_compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_compare)

fpga = json.loads((ROOT / "bench" / "fpga_results.json").read_text())
presets = set(tc.PRESETS)
placed = [r for r in fpga if r.get("fmax_mhz") and r["config"] in presets]
fp = max(placed, key=lambda r: r["fmax_mhz"])
fpga_cfg, asic_cfg = tc.ChipConfig.preset(fp["config"]), tc.ChipConfig.preset(ASIC_CONFIG)
# (column label, config, clock in MHz)
CHIPS = [(f"chip {fpga_cfg.name} @ FPGA {fp['fmax_mhz']:g} MHz (measured)", fpga_cfg, fp["fmax_mhz"]),
         (f"chip {fpga_cfg.name} @ ASIC {fpga_cfg.clock_mhz:g} MHz (config clock)", fpga_cfg, fpga_cfg.clock_mhz),
         (f"chip {asic_cfg.name} @ ASIC {asic_cfg.clock_mhz:g} MHz (config clock)", asic_cfg, asic_cfg.clock_mhz)]
print(f"FPGA: config {fpga_cfg.name} ({fpga_cfg.rows}x{fpga_cfg.cols}) placed and routed on {fp['device']} at "
      f"{fp['fmax_mhz']} MHz ({fp['status']})")
devs, notes = gpu_compare._devices()
for k, v in notes.items():
    print(f"{k}: unavailable ({v})")
'''),
    new_code_cell('''\
rng = np.random.default_rng(0)
shapes = [(16, 32, 16), (32, 64, 32)] if QUICK else [(32, 64, 32), (64, 64, 64), (64, 128, 64), (100, 120, 60)]
B, D, H = (16, 64, 128) if QUICK else (64, 256, 512)
x = rng.standard_normal((B, D)).astype(np.float32)
w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.05 for s in ((D, H), (H, 10)))


def mlp(t):
    return tc.functional.softmax((t @ tc.Tensor(w1)).relu() @ tc.Tensor(w2), -1)


def mlp_plain(v):                 # the same model in plain numpy: the host's floor without the frontend
    z = np.maximum(v @ w1, 0) @ w2
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


workloads = []
for m, k, n in shapes:
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    workloads.append((f"gemm {m}x{k}x{n}", lambda t, b=b: t @ tc.Tensor(b), lambda v, b=b: v @ b, a))
workloads.append((f"mlp {B}x{D}-{H}-10 softmax", mlp, mlp_plain, x))

rows, notes = [], {}
PLAIN = "plain numpy (no tetrachip)"
for name, f, plain, inp in workloads:
    row = {"workload": name, "ms": {}, "cycles": {}}
    ref = plain(inp)
    row["ms"][PLAIN] = 1e3 * gpu_compare.median_seconds(lambda plain=plain, inp=inp: plain(inp), REPS)
    for dname, dev in devs.items():
        row["ms"][dname] = 1e3 * gpu_compare.median_seconds(
            lambda dev=dev, f=f, inp=inp: dev.run(f(tc.Tensor(inp))), REPS)
        assert np.allclose(dev.run(f(tc.Tensor(inp)))[0], ref, atol=1e-3), (dname, name)
    for label, cfg, mhz in CHIPS:
        if cfg.name not in row["cycles"]:
            try:
                cm = tc.compile(f, [inp], config=cfg)
            except tc.ChipCompileError as e:
                notes[f"{name} on {cfg.name}"] = str(e)
                continue
            res = tc.Device("sim", config=cfg).run(cm, inp)
            assert all(np.array_equal(o, r) for o, r in zip(res.outputs, cm.reference(inp)))
            row["cycles"][cfg.name] = res.stats.cycles
        row["ms"][label] = row["cycles"][cfg.name] / mhz / 1e3
    rows.append(row)
cols = [PLAIN] + list(devs) + [label for label, _, _ in CHIPS]
print(f"{'workload':<26}" + "".join(f"{c[:30]:>32}" for c in cols))
for r in rows:
    print(f"{r['workload']:<26}" + "".join(f"{r['ms'].get(c, float('nan')):>32.4f}" for c in cols))
print("(ms; host backends: float32 wall time end to end; chip: int8 simulated cycles / clock)")
for k, v in notes.items():
    print(f"does not compile: {k}: {v}")
'''),
    new_code_cell('''\
fig, ax = plt.subplots(figsize=(9, 4))
w = 0.8 / len(cols)
for i, c in enumerate(cols):
    ax.bar(np.arange(len(rows)) + i * w, [r["ms"].get(c, np.nan) for r in rows], w, label=c)
ax.set_xticks(np.arange(len(rows)) + w * (len(cols) - 1) / 2, [r["workload"] for r in rows])
ax.set_yscale("log"); ax.set_ylabel("ms per call"); ax.legend(fontsize=7)
ax.set_title("same workloads: host backends (measured wall time) vs chip (simulated cycles at two clocks)")
save(fig, "04_chip_vs_cpu_gpu.png")
'''),
    new_markdown_cell("## Conclusion (computed)"),
    new_code_cell('''\
for r in rows:
    host = {k: v for k, v in r["ms"].items() if not k.startswith("chip") and k != PLAIN}
    fastest = min(host, key=host.get)
    parts = []
    for label, _, _ in CHIPS:
        if label in r["ms"]:
            ratio = host[fastest] / r["ms"][label]
            parts.append(f"{label}: {r['ms'][label]:.4f} ms, "
                         + (f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower") + f" than {fastest}")
    print(f"{r['workload']}: fastest host backend {fastest} {host[fastest]:.4f} ms (plain numpy "
          f"{r['ms'][PLAIN]:.4f} ms); " + "; ".join(parts) + ".")
print("Host backend times include the frontend's graph building, dispatch and transfers (plain numpy shows the "
      "floor without them); chip times are the simulated run of the compiled int8 binary "
      "(DRAM to DRAM), at the clocks labelled.")
'''),
]

NB5 = [
    new_markdown_cell(
        "# Multi-chip scaling\n\n"
        "**Status:** the compiler does not shard a model over several chips yet: `tc.compile` has no "
        "`chips` option (the next cell checks this). What exists is the simulator's `System`: N chips in a "
        "ring, wired through their link ports. Below, a block of ACC rows is passed once around rings of "
        "2, 4 and 8 chips, and the cycles are plotted — the cost of the communication a sharded model "
        "would pay."),
    params('\nCONFIG = "tiny"'),
    *setup('''\
import inspect

import matplotlib.pyplot as plt
import numpy as np

import tetrachip as tc
''', '''
has_chips = "chips" in inspect.signature(tc.compile).parameters
print("tc.compile has a chips option:", has_chips)
if not has_chips:
    print("multi-chip compilation: not implemented yet; showing the System ring only")
'''),
    new_code_cell('''\
cfg = tc.ChipConfig.preset(CONFIG)
NROWS = [1, 4] if QUICK else [1, 4, 16]
CHIPS = [2, 4, 8]
results = []
for nrows in NROWS:
    for n in CHIPS:
        sysm = tc.System(cfg, n)
        # chip 0 sends the block to chip 1, each chip forwards it, chip 0 receives it back on port 1
        sysm.load(0, f"link.send 0, acc[0], n={nrows}\\nlink.recv 1, acc[{nrows}], n={nrows}\\nhalt\\n")
        for i in range(1, n):
            sysm.load(i, f"link.recv 1, acc[0], n={nrows}, signal=ltx\\n"
                         f"link.send 0, acc[0], n={nrows}, wait=lrx\\nhalt\\n")
        block = np.random.default_rng(n).integers(-2**31, 2**31 - 1, (nrows, cfg.cols)).astype(np.int32)
        sysm[0].write_acc(0, block)
        stats = sysm.run()
        assert (sysm[0].read_acc(nrows, nrows) == block).all()
        results.append(dict(rows=nrows, chips=n, cycles=sysm.cycles,
                            link_bytes=sum(s.bytes["link_tx"] for s in stats)))
        print(f"{nrows:>3} rows around {n} chips: {sysm.cycles:>6} cycles, "
              f"{results[-1]['link_bytes']} link bytes sent")
fig, ax = plt.subplots(figsize=(5, 3))
for nrows in NROWS:
    rs = [r for r in results if r["rows"] == nrows]
    ax.plot([r["chips"] for r in rs], [r["cycles"] for r in rs], "o-", label=f"{nrows} ACC rows")
ax.set_xlabel("chips in the ring"); ax.set_ylabel("cycles for one trip around")
ax.set_xticks(CHIPS); ax.legend(); ax.set_title(f"System ring on {cfg.name}")
save(fig, "05_ring.png")
'''),
    new_markdown_cell("## Conclusion (computed)"),
    new_code_cell('''\
rs = [r for r in results if r["rows"] == NROWS[-1]]
per_hop = [(b["cycles"] - a["cycles"]) / (b["chips"] - a["chips"]) for a, b in zip(rs, rs[1:])]
print(f"A block of {NROWS[-1]} ACC rows goes around {rs[0]['chips']} chips in {rs[0]['cycles']} cycles and "
      f"{rs[-1]['chips']} chips in {rs[-1]['cycles']}: about {np.mean(per_hop):.0f} cycles per extra hop "
      f"(link latency {cfg.link_latency}). Scaling of a model over chips waits for the compiler's sharding.")
'''),
]


NOTEBOOKS = {"01_gemm_roofline.ipynb": NB1, "02_design_space.ipynb": NB2, "03_model_on_chip.ipynb": NB3,
             "04_chip_vs_cpu_gpu.ipynb": NB4, "05_multichip.ipynb": NB5}


def build(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` without outputs; cell ids are fixed (stem and index) so regenerating is stable."""
    cells = [nbformat.from_dict(dict(c)) for c in NOTEBOOKS[name]]
    for i, c in enumerate(cells):
        c.id = f"{Path(name).stem[:2]}-{i:02d}"
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"},
                                             "language_info": {"name": "python"}})
    nbformat.validate(nb)
    return nb


def main() -> None:
    for name in NOTEBOOKS:
        nbformat.write(build(name), HERE / name)


if __name__ == "__main__":
    main()
