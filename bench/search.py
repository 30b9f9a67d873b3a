"""Schedule search per benchmark model: default vs tiling-only search vs tiling + loop-order search.

    python bench/search.py [--quick] [--budget S] [--configs base] [--only NAME] [--json out.json]

For every case of ``bench/models.py`` (same models, inputs and calibration) this compiles

* the default schedule (``tiling.choose``, loop order ``mnk``),
* ``search=True`` with ``compiler.lower.search.ORDERS = ("mnk",)``: tilings only (Mt, nbuf, NB),
* ``search=True`` with both loop orders (``mnk``, ``nmk``): tilings and orders,
* the last again from its cache (the whole-model entry): no simulation,

each search into its own empty cache directory, runs every binary on the simulator, checks each
bit for bit against the quantized reference, and reports total cycles, the gains, the first vs
cached compile time and, per kernel, the winning order. The search has a time budget per kernel,
so on a loaded machine a rerun can land on another winner; the default is always scored, so a
search never ends slower than the default per kernel.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tetrachip as tc  # noqa: E402
from compiler.lower import search  # noqa: E402
from isa.config import ChipConfig  # noqa: E402
from isa.outputs import check_outputs, write_atomic  # noqa: E402
from models import cases  # noqa: E402


def _exact(cm, res, xs) -> bool:
    return bool(all(np.array_equal(a, b) for a, b in zip(res.outputs, cm.reference(*xs))))


def run(name, build, config, budget, cache: Path) -> dict:
    cfg = ChipConfig.load(config)
    model, x, calib, _, *opts = build()               # as bench/models.py's run_case: options, several inputs
    opts = opts[0] if opts else {}
    xs = x if isinstance(x, tuple) else (x,)
    row = {"model": name, "config": cfg.name}
    dev = tc.Device("sim", config=cfg)
    try:
        cm0 = tc.compile(model, list(xs), config=cfg, calibration=calib, **opts)
    except tc.ChipCompileError as e:
        row["error"] = str(e)
        return row
    r0 = dev.run(cm0, *xs)
    out = {"default": (cm0, r0)}
    saved = search.ORDERS
    try:
        for key, orders in (("tiling", ("mnk",)), ("order", ("mnk", "nmk"))):
            search.ORDERS = orders
            d = cache / key
            t0 = time.perf_counter()
            kw = dict(config=cfg, calibration=calib, search=True, search_budget_s=budget, cache_dir=d, **opts)
            cm = tc.compile(model, list(xs), **kw)
            t1 = time.perf_counter()
            cm2 = tc.compile(model, list(xs), **kw)
            t2 = time.perf_counter()
            res = dev.run(cm, *xs)
            out[key] = (cm, res)
            row[f"{key}_first_compile_s"] = round(t1 - t0, 3)
            row[f"{key}_cached_compile_s"] = round(t2 - t1, 4)
            row[f"{key}_cached_speedup"] = round((t1 - t0) / max(t2 - t1, 1e-9), 1)
            row[f"{key}_cached_same_binary"] = cm2.program.code_bytes() == cm.program.code_bytes()
            row[f"{key}_kernels"] = cm.search_report
    finally:
        search.ORDERS = saved
    for key, (cm, res) in out.items():
        row[f"{key}_cycles"] = int(res.stats.cycles)
        row[f"{key}_bit_exact"] = _exact(cm, res, xs)
        row[f"{key}_dram_read"] = int(res.stats.bytes["dram_read"])
    row["orders"] = [k.tiling.order for k in out["order"][0].kernels if k.kind == "gemm"]
    return row


def table(rows) -> str:
    head = (f"{'model':<34}{'default':>10}{'tiling':>10}{'gain%':>7}{'+order':>10}{'gain%':>7}"
            f"{'1st s':>8}{'cached s':>9}{'x':>7}  orders")
    out = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            out.append(f"{r['model']:<34}error: {r['error'][:80]}")
            continue
        d, t, o = r["default_cycles"], r["tiling_cycles"], r["order_cycles"]
        out.append(f"{r['model']:<34}{d:>10}{t:>10}{100 * (1 - t / d):>7.2f}{o:>10}{100 * (1 - o / d):>7.2f}"
                   f"{r['order_first_compile_s']:>8.2f}{r['order_cached_compile_s']:>9.3f}"
                   f"{r['order_cached_speedup']:>7.0f}  {','.join(r['orders'])}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    ap.add_argument("--quick", action="store_true", help="bench/models.py's quick cases")
    ap.add_argument("--configs", default="base")
    ap.add_argument("--budget", type=float, default=8.0, help="search time budget per kernel (s)")
    ap.add_argument("--only", default="", help="only the cases whose name contains this")
    args = ap.parse_args(argv)
    check_outputs(ap, args.json)        # before the work, not after it
    todo = [(n, b, c) for c in args.configs.split(",") for n, b in cases(args.quick) if args.only in n]
    root = Path(tempfile.mkdtemp(prefix="tetrachip-search-bench-"))
    rows = []
    for name, build, config in todo:
        rows.append(run(name, build, config, args.budget, root / config / name.replace(" ", "_")))
        print(f"done {name} ({config})", file=sys.stderr)
    print(table(rows))
    if args.json:
        write_atomic(args.json, json.dumps({"rows": rows, "budget_s": args.budget, "quick": args.quick},
                                        indent=1, default=str) + "\n")
    bad = [r["model"] for r in rows if "error" not in r and not all(r[f"{k}_bit_exact"] for k in
                                                                    ("default", "tiling", "order"))]
    if bad:
        print(f"NOT bit exact: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
