"""RTL co-simulation throughput: cycles per second of the Verilog chip under cocotb (Verilator by
default, ``--sim icarus``) for tiny/small/base, and the wall time of one 100,000-cycle program.

    python bench/cosim_speed.py [--json out.json] [--quick] [--configs tiny,small,base] [--sim verilator]

Throughput is measured on a DMA + VPU loop of about 20,000 cycles (``--quick``: 2,000): RTL
cycles from start to done over the wall time of that span (``cycles_per_s``; the DRAM model and
the trace/DRAM-write log are HDL, Python sleeps until done), and over the whole job including the
host driver and the read-back of the trace log, DRAM, SPM and ACC (``job_cycles_per_s``). The
100,000-cycle program is the same loop on ``tiny`` with a larger trip count; its ``process_s`` is
the wall time of the whole ``Cosim.run`` (simulator start, load, run, read-back, compare data).
Build times are reported apart (the model is cached under build/cosim/; ``build_s`` is 0 when
the cached model was reused).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from isa import ChipConfig, assemble  # noqa: E402
from isa.outputs import check_outputs, write_atomic  # noqa: E402
from verify.cosim import Cosim, Job, compare  # noqa: E402

LOOP = """
        loop l0, r1, s0=1, s1=COLS
        loop l1, r1, s0=1, s1=1
        dma.ld spm[0], dram[0], rep=l0:1, signal=vpu
        vmul acc[0], spm[0], 3, rep=l1:1, wait=load
        vadd acc[0], acc[0], r2, rep=l1:1
        vrelu spm[600], acc[0], rep=l1:1
        fence all
        addi r3, r3, 1
        bne r3, r4, top
        halt
"""


def program(cfg, outer: int):
    src = f".config {cfg.name}\n        seti r3, 0\n        seti r4, {outer}\ntop:" + LOOP
    return assemble(src, cfg)


def measure(cfg, sim, cycles_target: int, check: bool) -> dict:
    cs = Cosim(cfg, 1, sim)
    t = time.perf_counter()
    cs.build()
    build = time.perf_counter() - t
    # one outer iteration: 200 rows, about 4 cycles a row on the VPU
    outer = max(1, cycles_target // 2420)       # one outer iteration: 200 rows, about 2,420 cycles
    prog = program(cfg, outer)
    dram = np.zeros(cfg.dram_bytes, np.uint8)
    dram[:1 << 16] = np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8)
    job = Job([prog], [dram], [{1: 200, 2: -7}], cycles_target * 3, 0, f"loop x{outer}")
    t = time.perf_counter()
    res = cs.run([job])[0]
    total = time.perf_counter() - t
    cyc = res["bench_cycles"]
    out = {"config": cfg.name, "simulator": cs.simulator, "cycles": cyc, "run_loop_s": round(res["wall_s"], 3),
           "job_s": round(res["job_s"], 3), "process_s": round(total, 3), "cycles_per_s": round(cyc / res["wall_s"]),
           "job_cycles_per_s": round(cyc / res["job_s"]), "opt": cs.opt,
           "build_s": round(build, 1), "generate_s": round(cs.generate_s, 1), "model_build_s": round(cs.build_s, 1)}
    if check:
        out["matches_sim"] = compare(cfg, job, res) is None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--configs", default="tiny,small,base")
    ap.add_argument("--sim", default=None)
    a = ap.parse_args(argv)
    check_outputs(ap, a.json)        # before the work, not after it
    target = 2000 if a.quick else 20000
    rows = []
    for name in a.configs.split(","):
        rows.append(measure(ChipConfig.preset(name), a.sim, target, check=True))
        print(rows[-1], flush=True)
    long = measure(ChipConfig.preset("tiny"), a.sim, 10000 if a.quick else 100000, check=False)
    print(f"{'config':<8}{'cycles':>10}{'cycles/s':>12}{'job c/s':>12}{'process s':>11}{'build s':>10}")
    for r in rows:
        print(f"{r['config']:<8}{r['cycles']:>10}{r['cycles_per_s']:>12}{r['job_cycles_per_s']:>12}"
              f"{r['process_s']:>11}{r['build_s']:>10}")
    base = rows[0]["cycles_per_s"]
    for r in rows[1:]:
        print(f"{r['config']} / {rows[0]['config']} throughput: {r['cycles_per_s'] / base:.2f}x")
    print(f"{long['cycles']}-cycle program on tiny: {long['process_s']} s wall for the whole run "
          f"({long['cycles_per_s']} cycles/s start to done)")
    if a.json:
        write_atomic(a.json, json.dumps({"throughput": rows, "long_program": long}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
