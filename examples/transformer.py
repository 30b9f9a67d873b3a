"""A transformer block (d_model 64, 4 heads, GELU MLP 256) on the simulated chip, T symbolic.

    python examples/transformer.py [--config base] [--blocks N] [--json out.json]

Compiles ``tc.nn.TransformerBlock(64, 4)`` once with ``dynamic={"T": 64}`` and runs the same
binary for T = 1, 17, 64 (``--blocks N``: a ``Sequential`` of N blocks); prints per T the error
against the float block, whether the result is bit exact against the integer numpy model, cycles,
MXU utilization and DRAM traffic, then the attention's DRAM traffic fused (online softmax, K/V
blocks streamed) vs unfused (scores and probabilities through DRAM). Also a CLI model file:
``tetrachip run examples/transformer.py``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time

import numpy as np

import tetrachip as tc

D, HEADS, TMAX = 64, 4, 64

tc.manual_seed(0)
model = tc.nn.TransformerBlock(D, HEADS)
_rng = np.random.default_rng(0)
calibration = [[_rng.standard_normal((1, TMAX, D)).astype(np.float32)] for _ in range(2)]
inputs = _rng.standard_normal((1, 17, D)).astype(np.float32)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="base")
    ap.add_argument("--json", default=None)
    ap.add_argument("--blocks", type=int, default=1, help="a Sequential of this many blocks")
    a = ap.parse_args(argv)
    net = model if a.blocks == 1 else tc.nn.Sequential(model, *(tc.nn.TransformerBlock(D, HEADS)
                                                               for _ in range(a.blocks - 1)))
    from compiler.lower.transformer import compile_block, cycles_by_phase, dram_bytes_by_phase

    t0 = time.perf_counter()
    cm = tc.compile(net, calibration[0][0], config=a.config, calibration=calibration, dynamic={"T": TMAX})
    compile_s = time.perf_counter() - t0
    sha = hashlib.sha256(cm.program.to_bytes()).hexdigest()[:16]
    print(cm.summary())
    print(f"binary sha256 {sha}...  (one binary for every T <= {TMAX})")
    rng = np.random.default_rng(1)
    report = {"config": a.config, "compile_s": compile_s, "instructions": len(cm.program), "runs": []}
    print(f"{'T':>4} {'bit exact':>9} {'max err':>9} {'mean err':>9} {'out LSB':>8} {'cycles':>9} "
          f"{'MXU util':>8} {'DRAM bytes':>11}")
    for T in (1, 17, 64):
        x = rng.standard_normal((1, T, D)).astype(np.float32)
        res = tc.Device("sim", config=a.config).run(cm, x)
        exact = bool(np.array_equal(res.ints["out"][:, :T], cm.reference_int(x)))
        err = np.abs(res.outputs[0] - cm.float_reference(x)[0])
        st = res.stats
        dram = st.bytes["dram_read"] + st.bytes["dram_write"]
        assert hashlib.sha256(cm.program.to_bytes()).hexdigest()[:16] == sha
        print(f"{T:>4} {str(exact):>9} {err.max():>9.4f} {err.mean():>9.4f} {cm.s_out:>8.4f} "
              f"{st.cycles:>9,} {100 * st.mxu_utilization:>7.2f}% {dram:>11,}")
        report["runs"].append(dict(T=T, bit_exact=exact, max_err=float(err.max()), mean_err=float(err.mean()),
                                   cycles=st.cycles, mxu_utilization=st.mxu_utilization, dram_bytes=dram))
    un = compile_block(net, calibration[0][0], a.config, calibration=calibration, dynamic={"T": TMAX},
                       fused=False)
    x = rng.standard_normal((1, TMAX, D)).astype(np.float32)
    print(f"\nattention at T = {TMAX}: DRAM bytes of the attention phase (the K/V stores are in the QKV phase, "
          "equal in both)")
    for name, c in (("fused", cm), ("unfused", un)):
        r = tc.Device("sim", config=a.config, trace=True).run(c, x)
        ph = dram_bytes_by_phase(c.program, c.layout, r.trace)
        tot = r.stats.bytes["dram_read"] + r.stats.bytes["dram_write"]
        att = sum(v for k, v in ph.items() if k.endswith("attention"))
        print(f"  {name:<8} attention {att:>9,} B   whole program {tot:>9,} B   "
              f"cycles {r.stats.cycles:>9,}")
        report[name] = dict(attention_bytes=att, total_bytes=tot, cycles=r.stats.cycles, phases=ph)
    print(f"  ratio    {report['unfused']['attention_bytes'] / report['fused']['attention_bytes']:.1f}x")
    r = tc.Device("sim", config=a.config, trace=True).run(cm, x)
    report["phase_cycles"] = cycles_by_phase(cm.layout, r.trace)
    print(f"\ncycles per phase at T = {TMAX} (fused; VPU busy {100 * r.stats.busy['vpu'] / r.stats.cycles:.0f}%)")
    for name, c in report["phase_cycles"].items():
        print(f"  {name:<30} {c:>9,}")
    print(f"compile {compile_s:.2f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
