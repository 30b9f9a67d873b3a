"""Models sharded over several simulated chips (``tc.compile(..., chips=N, parallel=...)``): scaling per strategy.

    python bench/scaling.py [--quick] [--json FILE] [--config base] [--chips 1,2,4,8] [--only NAME]
                            [--strategies data,tensor,pipeline] [--topology ring|torus2d] [--resnet224]
                            [--interleave 1,2,4]

For each model, the single-chip compile (``chips=1``) runs once on ``Device("sim")`` (its cycles are the
baseline ``T1``), then each strategy on each chip count runs on ``Device("sim", chips=N)`` (``sim.System``),
in the same process, one after the other:

* cycles (the last chip to halt), speed-up ``T1 / TN``, parallel efficiency ``T1 / (N * TN)``;
* link utilization: bytes sent over the links / (chips x cycles x ``link_width_bytes``), one transmit port
  per chip in use (the ring's "next" port);
* bit-exact: the outputs equal the single-chip ``reference`` (every run is checked; a mismatch fails the
  benchmark with exit status 1);
* compile and simulation wall time.

Models: an MLP of the digits model's shape (64-128-64-10, batch 64, random weights; also on 16 and 64
chips), a deep MLP for the pipeline (16 layers 512 wide, Linear + ReLU, and a 10-class Linear; batch 512: 8
micro-batches of 64 rows on 4 chips, enough rows per weight tile to hide the next tile's load; without
``--quick``), ResNet-18 (ImageNet layout, 10 classes, batch 8; 32x32, and 112x112 without ``--quick``) and a
transformer block (``nn.TransformerBlock(512, 8)``, T 64 without ``--quick``; d 128, 4 heads, T 32 with it);
``--resnet224`` adds ResNet-18 at 224x224 (batch 8; its single-chip program runs as pages, minutes per run).
The JSON's rows also give each run's pages (per chip) and the single chip's MXU utilization.
Pipeline runs take 2 x chips micro-batches where the batch allows (else one per sample: the transformer
block's batch of 1 is one micro-batch, no overlap) and GPipe's contiguous stages (``--interleave V``: ``V``
stage groups per chip; a list ``--interleave 1,2,4`` gives a pipeline row for each); a pipeline row also gives
``interleave``, ``stage_cycles`` and ``bound``, the efficiency its stages would reach with free hand-offs
(``T1 / (N x ShardedModel.schedule_cycles())``: what the fill, the drain and the stages' imbalance leave), and
the efficiency as a product of four factors (``losses``): ``micro_batch`` = ``T1 / (M x sum(stage_cycles))``
(the part's kernels at one micro-batch against the single chip's share), ``bubble`` = ``V M / (V M + N - 1)``
(the fill and drain of equal stages), ``balance`` = ``M x sum(stage_cycles) / (N x schedule_cycles) / bubble``
(the stages' imbalance) and ``handoff`` = ``schedule_cycles / TN`` (the transfers, copies and waits the run adds
to free hand-offs). Data parallel needs a sample per chip. The goals of the
multi-chip issue (data-parallel ResNet-18 at batch 8 on 4 chips >= 90%, tensor-parallel transformer block
d512/8 heads on 4 chips >= 75%, a pipeline of 8 micro-batches over 4 chips >= 80%) are the rows to look at;
docs/sharding.md has the table of the last full run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import tetrachip as tc  # noqa: E402
from isa.config import ChipConfig  # noqa: E402
from isa.outputs import check_outputs, write_atomic  # noqa: E402


def _mlp():
    tc.manual_seed(0)
    nn = tc.nn
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    return m, np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)


def _resnet(size):
    import zoo
    return zoo.resnet18(num_classes=10), zoo.image(size, batch=8)


def _block(d, heads, T):
    tc.manual_seed(0)
    return tc.nn.TransformerBlock(d, heads), np.random.default_rng(T).standard_normal((1, T, d)).astype(np.float32)


def _deep_mlp(layers, width, batch, classes=10):
    tc.manual_seed(0)
    nn = tc.nn
    m = nn.Sequential(*[mod for _ in range(layers) for mod in (nn.Linear(width, width), nn.ReLU())],
                      nn.Linear(width, classes))
    return m, np.random.default_rng(1).standard_normal((batch, width)).astype(np.float32)


DEEP = "deep MLP 16x512-10 (batch 512)"


def models(quick: bool, resnet224: bool = False) -> list:
    """(name, build, more chip counts run without ``--quick`` and without ``--chips``)."""
    out = [("MLP 64-128-64-10 (batch 64)", _mlp, [16, 64]), ("ResNet-18 32x32 (batch 8)", lambda: _resnet(32), [])]
    if quick:
        out.append(("transformer block d128 h4 T32", lambda: _block(128, 4, 32), []))
    else:
        out += [(DEEP, lambda: _deep_mlp(16, 512, 512), []),
                ("ResNet-18 112x112 (batch 8)", lambda: _resnet(112), []),
                ("transformer block d512 h8 T64", lambda: _block(512, 8, 64), [])]
    if resnet224:
        out.append(("ResNet-18 224x224 (batch 8)", lambda: _resnet(224), []))
    return out


def run(name, build, config, chips, strategies, topology, interleave=(None,)) -> list[dict]:
    cfg = ChipConfig.load(config)
    model, x = build()
    t0 = time.perf_counter()
    single = tc.compile(model, [x], cfg)
    t1 = time.perf_counter()
    base = tc.Device("sim", config=cfg).run(single, x)
    t2 = time.perf_counter()
    ref = single.reference(x)
    T1 = base.stats.cycles
    rows = [{"model": name, "config": cfg.name, "strategy": "single", "chips": 1, "cycles": T1, "speedup": 1.0,
             "efficiency": 1.0, "link_util": 0.0, "bit_exact": all(np.array_equal(a, b) for a, b in
                                                                     zip(base.outputs, ref)),
             "compile_s": t1 - t0, "sim_s": t2 - t1, "pages": len(single.pages),
             "mxu_utilization": base.stats.mxu_utilization}]
    B = x.shape[0]
    interleave = tuple(interleave) if isinstance(interleave, (list, tuple)) else (interleave,)
    for n in chips:
        if n == 1:
            continue
        for strat, V in [(s, v) for s in strategies for v in (interleave if s == "pipeline" else (None,))]:
            row = {"model": name, "config": cfg.name, "strategy": strat, "chips": n}
            micro = None
            if strat == "pipeline":
                micro = min(B, 2 * n)
                row["micro_batches"] = micro
            try:
                t0 = time.perf_counter()
                kw = {"interleave": V} if strat == "pipeline" and V else {}
                sm = tc.compile(model, [x], cfg, chips=n, parallel=strat, micro_batches=micro, topology=topology,
                                **kw)
                t1 = time.perf_counter()
                res = tc.Device("sim", config=cfg, chips=n, topology=topology).run(sm, x)
                t2 = time.perf_counter()
            except tc.TetrachipError as e:
                row["error"] = str(e).splitlines()[0][:160]
                rows.append(row)
                continue
            TN = res.stats.cycles
            row.update(cycles=TN, speedup=T1 / TN, efficiency=T1 / (n * TN),
                       link_util=res.stats.link_bytes / (n * TN * cfg.link_width_bytes),
                       bit_exact=all(np.array_equal(a, b) for a, b in zip(res.outputs, ref)),
                       compile_s=t1 - t0, sim_s=t2 - t1, pages=max(len(p) for p in sm.programs))
            if strat == "pipeline":
                sched, M, V = sm.schedule_cycles(), sm.micro_batches, sm.interleave
                work = M * sum(sm.stage_cycles)              # every micro-batch through every stage, free hand-offs
                bubble = V * M / (V * M + n - 1)
                row.update(interleave=V, stage_cycles=sm.stage_cycles, bound=T1 / (n * sched),
                           losses={"micro_batch": T1 / work, "bubble": bubble,
                                   "balance": work / (n * sched) / bubble, "handoff": sched / TN})
            rows.append(row)
    return rows


def table(rows) -> str:
    lines = ["| model | config | strategy | chips | cycles | speed-up | efficiency | link util | bit-exact | "
             "compile s | sim s |", "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['config']} | {r['strategy']} | {r['chips']} | "
                         f"{r['error']} | | | | | | |")
            continue
        strat = r["strategy"] + (f" ({r['micro_batches']} micro-batches" + (
            f", {r['interleave']} stage groups per chip, bound {100 * r['bound']:.1f}%" if "interleave" in r else "")
            + ("; " + " x ".join(f"{k} {100 * v:.1f}%" for k, v in r["losses"].items()) if "losses" in r else "")
            + ")" if "micro_batches" in r else "")
        lines.append(f"| {r['model']} | {r['config']} | {strat} | {r['chips']} | {r['cycles']:,} | "
                     f"{r['speedup']:.2f} | {100 * r['efficiency']:.1f}% | {100 * r['link_util']:.2f}% | "
                     f"{'yes' if r['bit_exact'] else 'NO'} | {r['compile_s']:.1f} | {r['sim_s']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller models, 1/2/4 chips")
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    ap.add_argument("--config", default="base")
    ap.add_argument("--chips", default=None, help="chip counts (default 1,2,4,8; --quick 1,2,4)")
    ap.add_argument("--strategies", default="data,tensor,pipeline")
    ap.add_argument("--topology", default="ring", choices=["ring", "torus2d"])
    ap.add_argument("--only", default="", help="only the models whose name contains this")
    ap.add_argument("--interleave", default=None,
                    help="pipeline: stage groups per chip, a comma-separated list runs each (1: GPipe; default: "
                         "the compiler's choice)")
    ap.add_argument("--resnet224", action="store_true", help="add ResNet-18 224x224 (batch 8)")
    args = ap.parse_args(argv)
    check_outputs(ap, args.json)        # before the work, not after it
    try:
        chips = [int(c) for c in (args.chips or ("1,2,4" if args.quick else "1,2,4,8")).split(",")]
    except ValueError:
        ap.error(f"--chips {args.chips!r}: comma-separated numbers")
    if any(c < 1 for c in chips):
        ap.error("--chips: positive numbers")
    strategies = args.strategies.split(",")
    bad = [s for s in strategies if s not in ("data", "tensor", "pipeline")]
    if bad:
        ap.error(f"--strategies: {', '.join(bad)} (data, tensor, pipeline)")
    try:
        interleave = [None] if args.interleave is None else [int(v) for v in args.interleave.split(",")]
    except ValueError:
        interleave = [0]
    if any(v is not None and v < 1 for v in interleave):
        ap.error(f"--interleave {args.interleave}: positive numbers of stage groups per chip, comma-separated")
    if args.json and not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: no folder {args.json.parent}")
    rows = []
    for name, build, more in models(args.quick, args.resnet224):
        if args.only in name:
            got = run(name, build, args.config, chips + ([] if args.quick or args.chips else more), strategies,
                      args.topology, interleave)
            print("\n".join(table(got).splitlines()[2:]), flush=True)
            rows += got
    print(table(rows))
    if args.json:
        write_atomic(args.json, json.dumps({"rows": rows, "quick": args.quick, "loadavg": os.getloadavg()[0]},
                                        indent=2) + "\n")
    return 1 if any(not r.get("bit_exact", True) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
