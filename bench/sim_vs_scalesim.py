"""tetrachip's cycle-level simulator vs SCALE-Sim 3.0.0 on weight-stationary int8 GEMMs.

    python bench/sim_vs_scalesim.py [--json FILE] [--plot FILE.png] [--quick] [--no-scalesim] [--repeat N]

Cases: 64^3, 256^3, 512^3 and 100x300x77 on ``base`` (16x16), 1024^3 on ``large`` (128x128).

Our side runs in a fresh child process per case (so its peak RSS is its own, as SCALE-Sim's is):
the GEMM program from ``sim.programs.gemm``, random int8 inputs, one ``Chip.run``; the result is
checked against numpy's int32 matmul bit for bit. ``wall_s`` is the time of ``Chip.run`` (the
lowest of ``--repeat`` runs); ``wall_total_s`` adds program generation and DRAM writes.
Utilization is ``M*K*N / (rows*cols*cycles)`` on both sides (SCALE-Sim's own definition).

SCALE-Sim runs through ``bench/scalesim_runner.py`` in its own venv (installed on first use).
``--quick`` skips the SCALE-Sim cases that take minutes (512^3 and 1024^3) and runs ours once.
``--plot FILE.png`` draws cycles and utilization per case, ours beside SCALE-Sim's (0 where it did not run).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [(64, 64, 64, "base"), (256, 256, 256, "base"), (512, 512, 512, "base"),
         (100, 300, 77, "base"), (1024, 1024, 1024, "large")]
SLOW_SCALESIM = {(512, 512, 512, "base"), (1024, 1024, 1024, "large")}


def _runner():
    spec = importlib.util.spec_from_file_location("scalesim_runner", ROOT / "bench" / "scalesim_runner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ours_child(M, K, N, config, repeat, q):
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from sim import Chip
    from sim.programs import gemm
    rng = np.random.default_rng(1)
    A = rng.integers(-128, 128, (M, K), dtype=np.int8)
    B = rng.integers(-128, 128, (K, N), dtype=np.int8)
    walls, totals = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        g = gemm(M, K, N, config)
        chip = Chip(g.config)
        chip.load(g.program)
        g.write_inputs(chip, A, B)
        t1 = time.perf_counter()
        stats = chip.run()
        t2 = time.perf_counter()
        walls.append(t2 - t1)
        totals.append(t2 - t0)
    C = g.read_output(chip)
    ok = bool((C == A.astype(np.int32) @ B.astype(np.int32)).all())
    cfg = g.config
    q.put({"cycles": stats.cycles, "utilization": M * K * N / (cfg.rows * cfg.cols * stats.cycles),
           "mxu_utilization": stats.mxu_utilization, "wall_s": min(walls), "wall_runs_s": walls,
           "wall_total_s": min(totals), "peak_mem_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "correct": ok, "instructions": stats.instructions, "program_words": len(g.program)})


def run_ours(M, K, N, config, repeat=2) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_ours_child, args=(M, K, N, config, repeat, q))
    p.start()
    out = q.get()
    p.join()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--quick", action="store_true", help="skip SCALE-Sim's slow cases; one run of ours")
    ap.add_argument("--no-scalesim", action="store_true", help="only our simulator")
    ap.add_argument("--repeat", type=int, default=None, help="runs of our simulator per case (lowest wall kept)")
    ap.add_argument("--plot", type=Path, help="write a PNG: cycles and utilization per case, both simulators")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from isa.outputs import check_outputs, write_atomic
    check_outputs(ap, a.json)        # before the work, not after it
    if a.plot:
        from isa import TetrachipError
        from runtime.plots import check_output
        try:
            check_output(a.plot)
        except TetrachipError as e:
            ap.error(str(e))
    from isa.config import ChipConfig
    repeat = a.repeat or (1 if a.quick else 2)
    runner = None
    if not a.no_scalesim:
        runner = _runner()
        runner.ensure_venv()
    results = []
    load_before = os.getloadavg()
    for M, K, N, config in CASES:
        cfg = ChipConfig.preset(config)
        name = f"{M}x{K}x{N}"
        print(f"-- {name} on {config} ({cfg.rows}x{cfg.cols}): tetrachip ...", file=sys.stderr, flush=True)
        ours = run_ours(M, K, N, config, repeat)
        ss = None
        if runner is not None and not (a.quick and (M, K, N, config) in SLOW_SCALESIM):
            print(f"-- {name}: SCALE-Sim ...", file=sys.stderr, flush=True)
            r = runner.run_gemm(M, K, N, cfg.rows, cfg.cols)
            ss = {k: r[k] for k in ("cycles", "utilization", "utilization_macs", "wall_s", "wall_s_process",
                                    "peak_mem_mb")}
        row = {"case": name, "M": M, "K": K, "N": N, "config": config, "array": f"{cfg.rows}x{cfg.cols}",
               "tetrachip": ours, "scalesim": ss}
        if ss:
            row["ratios"] = {"cycles": ours["cycles"] / ss["cycles"],
                             "utilization": ours["utilization"] / ss["utilization_macs"],
                             "speedup": ss["wall_s"] / ours["wall_s"],
                             "memory": ours["peak_mem_mb"] / ss["peak_mem_mb"]}
        results.append(row)
    _print_table(results)
    if a.json:
        write_atomic(a.json, json.dumps({"benchmark": "sim_vs_scalesim", "quick": a.quick, "repeat": repeat,
                                      "cpus": os.cpu_count(), "loadavg_before": load_before,
                                      "loadavg_after": os.getloadavg(), "cases": results}, indent=2) + "\n")
    if a.plot:
        plot_results(results, a.plot)
        print(f"plot: {a.plot}")
    return 0 if all(r["tetrachip"]["correct"] for r in results) else 1


def plot_results(results, path) -> None:
    """Bar charts per case: cycles and utilization of ours and of SCALE-Sim (0 where it did not run)."""
    from runtime.plots import plot_bars
    ss = [r["scalesim"] or {} for r in results]
    plot_bars(path, [f"{r['case']} ({r['array']})" for r in results],
              {"cycles (tetrachip)": [r["tetrachip"]["cycles"] for r in results],
               "cycles (SCALE-Sim)": [s.get("cycles", 0) for s in ss],
               "utilization % (tetrachip)": [100 * r["tetrachip"]["utilization"] for r in results],
               "utilization % (SCALE-Sim)": [100 * s.get("utilization_macs", 0) for s in ss]},
              title="tetrachip vs SCALE-Sim, weight-stationary int8 GEMMs")


def _print_table(results) -> None:
    h = (f"{'case':<14}{'array':>8}{'cycles':>10}{'SS cycles':>10}{'cyc/SS':>7}{'util':>8}{'SS util':>9}"
         f"{'wall s':>9}{'SS wall s':>10}{'speedup':>9}{'MiB':>7}{'SS MiB':>8}{'ok':>4}")
    print(h)
    print("-" * len(h))
    for r in results:
        o, s = r["tetrachip"], r["scalesim"] or {}

        def f(k, fmt, s=s):
            return format(s[k], fmt) if k in s else "-"
        sp = f"{r['ratios']['speedup']:.0f}x" if "ratios" in r else "-"
        cr = f"{r['ratios']['cycles']:.3f}" if "ratios" in r else "-"
        print(f"{r['case']:<14}{r['array']:>8}{o['cycles']:>10}{f('cycles', 'd'):>10}{cr:>7}"
              f"{100 * o['utilization']:>7.1f}%{(format(100 * s['utilization_macs'], '.1f') + '%') if s else '-':>9}"
              f"{o['wall_s']:>9.3f}{f('wall_s', '.2f'):>10}{sp:>9}{o['peak_mem_mb']:>7.0f}"
              f"{f('peak_mem_mb', '.0f'):>8}{'yes' if o['correct'] else 'NO':>4}")


if __name__ == "__main__":
    sys.exit(main())
