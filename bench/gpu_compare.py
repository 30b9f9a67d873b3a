"""The same GEMMs and a small MLP on numpy, OpenCL (PoCL on a CPU here), CUDA and Triton where
available, next to the virtual chip's simulated cycles converted to time at the config's clock.

    python bench/gpu_compare.py [--quick] [--json FILE] [--config base] [--reps N]

Times are medians of ``--reps`` warm runs (the first run, which compiles kernels, is not timed),
end to end per call: upload, kernels, read back. A backend that cannot start is listed with the
reason (what to install). The chip column runs the int8 GEMM on the cycle-level simulator
(``sim.programs.run_gemm``); it is skipped with a note when the simulator is unavailable.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from isa.outputs import check_outputs, write_atomic  # noqa: E402

import tetrachip as tc  # noqa: E402
from runtime.gpu_common import DeviceUnavailable  # noqa: E402

BACKENDS = ["numpy", "opencl", "cuda", "triton"]
GEMMS_QUICK = [(64, 64, 64), (128, 128, 128), (100, 300, 50)]
GEMMS_FULL = GEMMS_QUICK + [(256, 256, 256), (512, 512, 512)]


def _devices():
    devs, notes = {}, {}
    for name in BACKENDS:
        try:
            devs[name] = tc.Device(name)
        except DeviceUnavailable as e:
            notes[name] = str(e)
    return devs, notes


def median_seconds(fn, reps: int) -> float:
    """Median wall time of ``reps`` calls of ``fn`` after one untimed call (which compiles kernels)."""
    fn()  # warm-up: compiles kernels
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _workloads(quick: bool, rng):
    for m, k, n in (GEMMS_QUICK if quick else GEMMS_FULL):
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        yield f"gemm {m}x{k}x{n}", (lambda a=a, b=b: tc.Tensor(a) @ tc.Tensor(b)), a @ b, (m, k, n)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.05 for s in ((256, 512), (512, 10)))
    ref = np.maximum(x @ w1, 0) @ w2
    ref = np.exp(ref - ref.max(-1, keepdims=True)); ref /= ref.sum(-1, keepdims=True)
    yield "mlp 64x256-512-10 softmax", (lambda: tc.functional.softmax(
        (tc.Tensor(x) @ tc.Tensor(w1)).relu() @ tc.Tensor(w2), -1)), ref, None


def _chip(shape, config: str):
    """(cycles, microseconds at the config's clock) of the int8 GEMM on the simulator, or a note."""
    try:
        from sim.programs import run_gemm
    except Exception as e:  # noqa: BLE001
        return None, f"simulator unavailable ({e})"
    m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.integers(-8, 8, (m, k), dtype=np.int8), rng.integers(-8, 8, (k, n), dtype=np.int8)
    try:
        c, stats, chip = run_gemm(a, b, config)
    except Exception as e:  # noqa: BLE001
        return None, f"simulator failed: {type(e).__name__}: {e}"
    ok = bool((c == a.astype(np.int32) @ b.astype(np.int32)).all())
    from isa import ChipConfig
    clock = (config if isinstance(config, ChipConfig) else ChipConfig.preset(config)).clock_mhz
    return {"cycles": int(stats.cycles), "us": stats.cycles / clock, "clock_mhz": clock, "correct": ok}, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repetitions")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--config", default="base", help="chip config preset for the simulator column")
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args(argv)
    check_outputs(ap, args.json)        # before the work, not after it
    reps = args.reps or (3 if args.quick else 10)
    devs, notes = _devices()
    rng = np.random.default_rng(0)
    rows = []
    for name, build, ref, shape in _workloads(args.quick, rng):
        row = {"workload": name, "ms": {}, "max_abs_err": {}}
        for dname, dev in devs.items():
            try:
                row["ms"][dname] = 1e3 * median_seconds(lambda dev=dev, build=build: dev.run(build()), reps)
                row["max_abs_err"][dname] = float(np.abs(dev.run(build())[0] - ref).max())
            except Exception as e:  # noqa: BLE001  (a backend failing one workload is reported, not fatal)
                notes.setdefault(f"{dname}: {name}", f"{type(e).__name__}: {e}")
        if shape is not None:
            row["chip"], note = _chip(shape, args.config)
            if note:
                notes.setdefault("chip", note)
        rows.append(row)
    _print(rows, devs, notes, args.config)
    if args.json:
        write_atomic(args.json, json.dumps({"config": args.config, "reps": reps, "rows": rows,
                                                "devices": {k: repr(v.backend) for k, v in devs.items()},
                                                "notes": notes}, indent=2))
    return 0


def _print(rows, devs, notes, config):
    names = list(devs)
    head = f"{'workload':28s}" + "".join(f"{n + ' ms':>12s}" for n in names) + \
        (f"{'opencl/numpy':>14s}" if "opencl" in names else "") + f"{'chip cycles':>13s}{'chip us':>10s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        line = f"{r['workload']:28s}" + "".join(
            f"{r['ms'][n]:12.3f}" if n in r["ms"] else f"{'-':>12s}" for n in names)
        if "opencl" in names:
            ok = "opencl" in r["ms"] and "numpy" in r["ms"]
            line += f"{r['ms']['opencl'] / r['ms']['numpy']:14.2f}" if ok else f"{'-':>14s}"
        chip = r.get("chip")
        line += f"{chip['cycles']:13d}{chip['us']:10.2f}" if chip else f"{'-':>13s}{'-':>10s}"
        print(line)
    print(f"(chip: int8 GEMM on the '{config}' config, cycle-level simulator, time at its clock; "
          "GPU columns: float32, end to end per call)")
    for k, v in notes.items():
        print(f"note [{k}]: {v}")


if __name__ == "__main__":
    sys.exit(main())
