"""Compiled models on the simulated chip: cycles, MXU utilization, DRAM traffic, memory plans.

    python bench/models.py [--json FILE] [--plot FILE.png] [--quick] [--configs small,base,large] [--only NAME]
                           [--profile]
    python bench/models.py --search [--budget S] [--cache-dir DIR] [--quick] [--configs base]
    python bench/models.py --onnx [--quick] [--configs base]       # adds the imported ONNX zoo models

``--search`` compiles every case three times: the default schedule, ``search=True`` into an
empty cache directory (the search runs), and ``search=True`` again (cache hits); it reports the
cycles of the default and the searched binary, both bit-exact checks, the two search compile
times and their ratio.

Models: GEMMs (int8 x int8, int32 out), the digits MLP, CNN and BatchNorm/pooling CNN (trained on the
reference backend; ``--quick`` uses untrained weights, same shapes and cycles), ResNet-style 3x3 conv
layers with 64 and 128 channels (two conv layers each, the first with bias + ReLU, so both the
requantizing and the int32 epilogue are measured), and the real architectures of examples/zoo.py:
ResNet-18 (ImageNet layout) at 32x32 and 224x224, MobileNetV2 at 224x224, and a decoder-only
transformer written with plain functions (causal, dynamic T). ``--onnx`` adds the models of
examples/onnx_zoo.py imported with ``tc.onnx.load`` (needs the ``onnx`` package): ResNet-18 and MobileNetV2
at 224x224, a BERT encoder (4 layers, d 256, seq 32) and a GPT-2 decoder (6 layers, d 384, seq 64, vocab
1000, additive causal mask), both with their position ids as an input; ``--quick`` takes their small
versions (32x32 images; 2 layers, d 64, seq 16). Every case is compiled with
``tc.compile`` for each config, run once on the simulator and checked bit for bit against the
quantized numpy reference.

Columns: cycles; MXU utilization (``Stats.mxu_utilization``: MACs issued / (rows*cols*cycles));
ideal = useful MACs / (rows*cols*cycles); DRAM bytes read/written; the DRAM plan's footprint vs its
live-bytes bound (and the footprint of every ordering the planner tried, in the JSON); compile
and simulation wall time; err % = largest |chip - float model| relative to the float output's largest
magnitude (the quantization error). ``--profile`` traces each run and prints, per kernel, its
cycles and the unit that bounds it (the busiest: MXU, load, store or VPU). A case that does not
fit a config reports the compiler's error. ``--plot FILE.png`` draws cycles and MXU utilization per case
(bar charts; not with ``--search``).
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


class ConvPair(tc.nn.Module):
    """Two 3x3 convolutions (ResNet basic-block shapes, no residual): conv+bias+ReLU, conv."""

    def __init__(self, cin, cout, stride=1):
        self.a = tc.nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
        self.b = tc.nn.Conv2d(cout, cout, 3, padding=1, bias=False)

    def forward(self, x):
        return self.b(self.a(x).relu())


class BasicBlock(tc.nn.Module):
    """A ResNet basic block with its residual add (an elementwise VPU kernel) after a stem conv."""

    def __init__(self, c):
        self.stem = tc.nn.Conv2d(c, c, 3, padding=1)
        self.a = tc.nn.Conv2d(c, c, 3, padding=1)
        self.b = tc.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        h = self.stem(x).relu()
        return (self.b(self.a(h).relu()) + h).relu()


def _block(c, hw):
    tc.manual_seed(2)
    m = BasicBlock(c)
    x = np.random.default_rng(c * hw).standard_normal((1, c, hw, hw)).astype(np.float32)
    return m, x, None, None


def _gemm(M, K, N):
    rng = np.random.default_rng(M + K + N)
    w = rng.standard_normal((K, N)).astype(np.float32)
    x = rng.standard_normal((M, K)).astype(np.float32)
    return (lambda a: a @ tc.Tensor(w)), x, None, None


def _digits(kind, quick):
    import digits
    if quick:
        tc.manual_seed(0)
        data = digits.load()
        model = digits.mlp() if kind == "mlp" else (digits.BNCNN() if kind == "bncnn" else digits.CNN())
        shape, acc = ((-1, 64) if kind == "mlp" else (-1, 1, 8, 8)), None
    else:
        model, data, shape, acc = digits.trained(kind)
    Xtr, Xte, _, yte = data
    x = Xte.reshape(shape)
    return model, x, [[Xtr[:len(Xte)].reshape(shape)]], (yte, acc)


def _zoo(kind, size):
    """A model of examples/zoo.py (random weights, BatchNorm statistics random) on a random image."""
    import zoo
    if kind == "gpt":
        layers, d, heads, T = size
        x = np.random.default_rng(T).standard_normal((1, T, d)).astype(np.float32)
        return zoo.gpt_decoder(layers, d, heads), x, None, None, {"dynamic": {"T": T}, "shapes": {"x": (1, "T", d)}}
    model = zoo.resnet18() if kind == "resnet18" else zoo.mobilenet_v2()
    return model, zoo.image(size), None, None


def _onnx(name, quick, **kw):
    """A model of examples/onnx_zoo.py through ``tc.onnx.load``, on its example inputs (a tuple when it has
    several)."""
    from examples import onnx_zoo
    proto = onnx_zoo.build(name, small=quick, **kw)
    feeds = onnx_zoo.example_inputs(proto)
    xs = tuple(feeds.values())
    return tc.onnx.load(proto), xs if len(xs) > 1 else xs[0], None, None


def onnx_cases(quick: bool):
    size = "small" if quick else "full"
    return [(f"onnx resnet-18 ({size})", lambda: _onnx("resnet18", quick)),
            (f"onnx mobilenet-v2 ({size})", lambda: _onnx("mobilenet_v2", quick)),
            (f"onnx bert encoder ({size})", lambda: _onnx("bert_encoder", quick, positions="input")),
            (f"onnx gpt-2 decoder ({size})", lambda: _onnx("gpt2_decoder", quick, positions="input", mask="add"))]


def _conv(c, hw, cout=None, stride=1):
    tc.manual_seed(1)
    m = ConvPair(c, cout or c, stride)
    x = np.random.default_rng(c + hw).standard_normal((1, c, hw, hw)).astype(np.float32)
    return m, x, None, None


def cases(quick: bool):
    out = [("gemm 512x512x512", lambda: _gemm(512, 512, 512)),
           ("gemm 100x300x77", lambda: _gemm(100, 300, 77))]
    if not quick:
        out += [("gemm 1024x1024x1024", lambda: _gemm(1024, 1024, 1024)),
                ("gemm 2048x2048x2048", lambda: _gemm(2048, 2048, 2048))]
    out += [("digits mlp", lambda: _digits("mlp", quick)),
            ("digits cnn", lambda: _digits("cnn", quick)),
            ("digits bn-cnn (BatchNorm, pooling)", lambda: _digits("bncnn", quick)),
            ("resnet conv 64ch 14x14", lambda: _conv(64, 14)),
            ("resnet block+residual 64ch 14x14", lambda: _block(64, 14))]
    if not quick:
        out += [("resnet conv 64ch 28x28", lambda: _conv(64, 28)),
                ("resnet conv 64ch 56x56", lambda: _conv(64, 56)),
                ("resnet conv 64->128ch s2 28x28", lambda: _conv(64, 28, 128, 2))]
    out += [("resnet-18 32x32", lambda: _zoo("resnet18", 32)),
            ("gpt decoder 2x64 4 heads T=32", lambda: _zoo("gpt", (2, 64, 4, 32)))]
    if not quick:
        out += [("resnet-18 224x224", lambda: _zoo("resnet18", 224)),
                ("mobilenet-v2 224x224", lambda: _zoo("mobilenet", 224)),
                ("gpt decoder 3x384 6 heads T=64", lambda: _zoo("gpt", (3, 384, 6, 64))),
                ("gpt decoder 6x384 6 heads T=64", lambda: _zoo("gpt", (6, 384, 6, 64)))]
    return out


def kernel_profile(cm, trace) -> list[dict]:
    """Per kernel of the listing (``; kernel NAME`` comments, in program order): the cycles from its first
    instance's start to its last one's retire, each unit's busy cycles (the start-to-retire time of its
    instances: a pipelined unit's overlapping instances count more than once, so this ranks the units
    rather than measuring them) and the unit that bounds it (the busiest)."""
    import re

    from sim.stats import UNIT_NAMES
    owner, pc, cur = {}, 0, "prologue"
    for line in cm.asm.splitlines():
        m = re.match(r"\s*;+\s*kernel (\S+)", line)
        if m:
            cur = m.group(1).rstrip(":")
            continue
        st = line.strip()
        if st and not st.startswith(";") and not st.endswith(":"):
            owner[pc] = cur
            pc += 1
    prof: dict = {}
    for r in trace.records:
        if r.start is None or r.retire is None:
            continue
        k = prof.setdefault(owner.get(r.pc, "?"), {"start": r.start, "end": r.retire, "busy": {}})
        k["start"], k["end"] = min(k["start"], r.start), max(k["end"], r.retire)
        u = UNIT_NAMES[r.unit]
        k["busy"][u] = k["busy"].get(u, 0) + r.retire - r.start
    out = []
    for name, k in sorted(prof.items(), key=lambda kv: kv[1]["start"]):
        busy = {u: v for u, v in k["busy"].items() if u != "scalar"}
        out.append({"kernel": name, "start": k["start"], "cycles": k["end"] - k["start"], "busy": k["busy"],
                    "bound": max(busy, key=busy.get) if busy else "scalar"})
    return out


def profile_table(row) -> str:
    lines = [f"{row['model']} on {row['config']}: per kernel, cycles and the busiest unit (busy cycles)"]
    for k in row["profile"]:
        top = ", ".join(f"{u} {v}" for u, v in sorted(k["busy"].items(), key=lambda kv: -kv[1])[:3])
        lines.append(f"  {k['kernel']:<16}{k['cycles']:>10}  bound by {k['bound']:<6} ({top})")
    return "\n".join(lines)


def run_case(name, build, config, profile: bool = False):
    cfg = ChipConfig.load(config)
    model, x, calib, extra, *kw = build()
    kw = kw[0] if kw else {}
    xs = x if isinstance(x, tuple) else (x,)          # a model of several inputs gives a tuple
    row = {"model": name, "config": cfg.name}
    t0 = time.perf_counter()
    try:
        cm = tc.compile(model, list(xs), config=cfg, calibration=calib, **kw)
    except tc.ChipCompileError as e:
        row["error"] = str(e)
        return row
    row["compile_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    res = tc.Device("sim", config=cfg, trace=profile).run(cm, *xs)
    row["sim_s"] = time.perf_counter() - t1
    if profile:
        row["profile"] = kernel_profile(cm, res.trace)
    st = res.stats
    useful = sum(k.macs for k in cm.kernels)
    row.update(cycles=st.cycles, mxu_utilization=st.mxu_utilization,
               ideal_utilization=useful / (cfg.rows * cfg.cols * st.cycles),
               dram_read=st.bytes["dram_read"], dram_write=st.bytes["dram_write"],
               instructions=sum(len(p) for p in cm.pages), pages=[len(p) for p in cm.pages],
               kernels=[f"{k.name} {k.M}x{k.K}x{k.N}" for k in cm.kernels],
               bit_exact=bool(all(np.array_equal(a, b) for a, b in zip(res.outputs, cm.reference(*xs)))),
               float_error=_float_error(res.outputs, cm.float_reference(*xs)),
               plans={k: p.to_dict() for k, p in cm.plans.items()})
    if extra is not None:
        labels, float_acc = extra
        row["chip_accuracy"] = float(np.mean(np.argmax(res.outputs[0], -1) == labels))
        row["float_accuracy"] = float_acc
    return row


def _float_error(outs, floats) -> float:
    """Largest |chip - float| over the outputs, relative to the float output's largest magnitude."""
    return max(float(np.abs(o - f).max() / max(float(np.abs(f).max()), 1e-12)) for o, f in zip(outs, floats))


def run_search_case(name, build, config, budget, cache):
    cfg = ChipConfig.load(config)
    model, x, calib, _, *kw = build()
    if kw:
        return {"model": name, "config": cfg.name, "error": "the search bench runs static shapes only"}
    xs = x if isinstance(x, tuple) else (x,)
    row = {"model": name, "config": cfg.name}
    tp = time.perf_counter()
    try:
        cm0 = tc.compile(model, list(xs), config=cfg, calibration=calib)
    except tc.ChipCompileError as e:
        row["error"] = str(e)
        return row
    row["plain_compile_s"] = time.perf_counter() - tp
    dev = tc.Device("sim", config=cfg)
    r0 = dev.run(cm0, *xs)
    t0 = time.perf_counter()
    cm1 = tc.compile(model, list(xs), config=cfg, calibration=calib, search=True, search_budget_s=budget,
                     cache_dir=cache)
    t1 = time.perf_counter()
    cm2 = tc.compile(model, list(xs), config=cfg, calibration=calib, search=True, search_budget_s=budget,
                     cache_dir=cache)
    t2 = time.perf_counter()
    r1 = dev.run(cm1, *xs)
    row.update(default_cycles=r0.stats.cycles, search_cycles=r1.stats.cycles,
               first_compile_s=t1 - t0, cached_compile_s=t2 - t1, ratio=(t1 - t0) / max(t2 - t1, 1e-9),
               cached_same_binary=cm2.program.code_bytes() == cm1.program.code_bytes(),
               bit_exact=bool(all(np.array_equal(a, b) for a, b in zip(r1.outputs, cm1.reference(*xs)))
                              and all(np.array_equal(a, b) for a, b in zip(r0.outputs, cm0.reference(*xs)))),
               kernels=cm1.search_report)
    return row


def search_table(rows) -> str:
    head = (f"{'model':<36}{'config':<7}{'default':>10}{'searched':>10}{'gain %':>8}{'1st s':>8}{'cached s':>9}"
            f"{'ratio':>7}{'plain s':>9}  exact")
    out = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            out.append(f"{r['model']:<36}{r['config']:<7}  does not fit: {r['error'][:90]}")
            continue
        gain = 100 * (1 - r["search_cycles"] / r["default_cycles"])
        out.append(f"{r['model']:<36}{r['config']:<7}{r['default_cycles']:>10}{r['search_cycles']:>10}{gain:>8.2f}"
                   f"{r['first_compile_s']:>8.2f}{r['cached_compile_s']:>9.3f}{r['ratio']:>7.1f}"
                   f"{r['plain_compile_s']:>9.3f}  {'yes' if r['bit_exact'] else 'NO'}")
    return "\n".join(out)


def table(rows) -> str:
    head = (f"{'model':<36}{'config':<7}{'cycles':>10}{'MXU %':>8}{'ideal %':>8}{'DRAM rd':>11}{'DRAM wr':>10}"
            f"{'plan/bound':>12}{'compile s':>10}{'sim s':>7}{'err %':>7}  exact")
    out = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            out.append(f"{r['model']:<36}{r['config']:<7}  does not fit: {r['error'][:90]}")
            continue
        d = r["plans"]["dram"]
        acc = ""
        if "chip_accuracy" in r:
            fa = r["float_accuracy"]
            acc = (f"  acc chip {100 * r['chip_accuracy']:.2f}% float {100 * fa:.2f}%" if fa is not None
                   else "  (untrained weights)")
        out.append(f"{r['model']:<36}{r['config']:<7}{r['cycles']:>10}{100 * r['mxu_utilization']:>8.1f}"
                   f"{100 * r['ideal_utilization']:>8.1f}{r['dram_read']:>11}{r['dram_write']:>10}"
                   f"{d['footprint'] / max(d['bound'], 1):>12.3f}{r['compile_s']:>10.2f}{r['sim_s']:>7.2f}"
                   f"{100 * r['float_error']:>7.2f}  "
                   f"{'yes' if r['bit_exact'] else 'NO'}{acc}"
                   + (f"  {len(r['pages'])} pages of {'+'.join(map(str, r['pages']))} instructions"
                      if len(r.get("pages", [])) > 1 else ""))
    plans = [r for r in rows if "error" not in r]
    if plans:
        names = list(plans[0]["plans"]["dram"]["per_ordering"])
        out += ["", "DRAM plan: footprint per ordering (bytes) vs the live-bytes bound",
                f"{'model':<36}{'config':<7}{'bound':>10}" + "".join(f"{n:>11}" for n in names)]
        for r in plans:
            d = r["plans"]["dram"]
            out.append(f"{r['model']:<36}{r['config']:<7}{d['bound']:>10}"
                       + "".join(f"{d['per_ordering'][n]:>11}" for n in names))
    return "\n".join(out)


def plot_rows(rows, path) -> None:
    """Bar charts of cycles and MXU utilization per case (cases a config could not fit are left out)."""
    from runtime.plots import plot_bars
    ok = [r for r in rows if "error" not in r]
    plot_bars(path, [f"{r['model']} ({r['config']})" for r in ok],
              {"cycles": [r["cycles"] for r in ok],
               "MXU utilization %": [100 * r["mxu_utilization"] for r in ok]},
              title="compiled models on the simulated chip")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    ap.add_argument("--plot", type=Path, help="write a PNG: cycles and MXU utilization per case")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller cases; untrained digits models")
    ap.add_argument("--configs", default="small,base,large")
    ap.add_argument("--search", action="store_true", help="default vs searched schedules, cache timing")
    ap.add_argument("--budget", type=float, default=10.0, help="search time budget per kernel (s)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="search cache (default: a fresh temp dir)")
    ap.add_argument("--only", default="", help="only the cases whose name contains this")
    ap.add_argument("--onnx", action="store_true", help="add the ONNX zoo's models, imported (needs onnx)")
    ap.add_argument("--profile", action="store_true",
                    help="trace each run: per kernel, its cycles and the unit that bounds it")
    args = ap.parse_args(argv)
    check_outputs(ap, args.json)        # before the work, not after it
    if args.plot:
        if args.search:
            ap.error("--plot draws the default mode's rows; leave out --search")
        from runtime.plots import check_output
        try:
            check_output(args.plot)
        except tc.TetrachipError as e:
            ap.error(str(e))
    from tqdm import tqdm
    configs = args.configs.split(",")
    todo = [(n, b, c) for n, b in cases(args.quick) + (onnx_cases(args.quick) if args.onnx else [])
            for c in configs if args.only in n]
    rows = []
    if args.search:
        import tempfile
        cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="tetrachip-search-"))
        for name, build, config in tqdm(todo, desc="search", unit="case"):
            rows.append(run_search_case(name, build, config, args.budget, cache / config / name.replace(" ", "_")))
        print(search_table(rows))
        if args.json:
            write_atomic(args.json, json.dumps({"rows": rows, "search": True, "budget_s": args.budget,
                                             "loadavg": os.getloadavg()[0]}, indent=2, default=str) + "\n")
        return 1 if any("error" not in r and not r["bit_exact"] for r in rows) else 0
    for name, build, config in tqdm(todo, desc="bench", unit="case"):
        rows.append(run_case(name, build, config, args.profile))
    print(table(rows))
    for r in rows:
        if "profile" in r:
            print("\n" + profile_table(r))
    bad = [r for r in rows if "error" not in r and not r["bit_exact"]]
    if args.json:
        write_atomic(args.json, json.dumps({"rows": rows, "quick": args.quick,
                                         "loadavg": os.getloadavg()[0]}, indent=2) + "\n")
    if args.plot:
        try:
            plot_rows(rows, args.plot)
        except tc.TetrachipError as e:
            print(f"--plot: {e}", file=sys.stderr)
            return 1
        print(f"plot: {args.plot}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
