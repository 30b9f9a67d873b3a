"""Control flow on the chip: trip counts, branch choices and cycles of the lowered cond / loop /
while_loop models (the same models as tests/compiler/test_control_chip.py), each checked bit for
bit against the quantized reference.

    python bench/search_control.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from isa.outputs import check_outputs, write_atomic  # noqa: E402

import tetrachip as tc  # noqa: E402


def _step(seed=0, d=16):
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((d, d)) * 0.15).astype(np.float32)
    b = (rng.standard_normal(d) * 0.5).astype(np.float32)
    return lambda h: (h @ tc.Tensor(W) + tc.Tensor(b)).relu()


def cases():
    f = _step()
    rng = np.random.default_rng(3)
    xs = [(rng.standard_normal((4, 16)) * s).astype(np.float32) for s in (0.1, 1.0, 4.0)]
    yield ("while_loop until |f(h) - h|max <= 0.1 (4x16, <= 60 trips)",
           lambda h0: tc.while_loop(lambda h: (f(h) - h).abs().max() > 0.1, f, h0, 60), [[x] for x in xs])
    rng = np.random.default_rng(1)
    W1, W2 = ((rng.standard_normal((16, 24)) * 0.3).astype(np.float32) for _ in range(2))
    xs = [(rng.standard_normal((5, 16)) + m).astype(np.float32) for m in (-0.5, 0.5)]
    yield ("cond(sum(x) > 0, relu(x @ W1), x @ W2 + 1)",
           lambda x: tc.cond(x.sum() > 0, lambda v: (v @ tc.Tensor(W1)).relu(), lambda v: v @ tc.Tensor(W2) + 1.0,
                             x), [[x] for x in xs])
    rng = np.random.default_rng(4)
    U = (rng.standard_normal((5, 11)) * 0.3).astype(np.float32)
    Wh = (rng.standard_normal((11, 11)) * 0.2).astype(np.float32)
    h0 = rng.standard_normal((3, 11)).astype(np.float32)
    seq = rng.standard_normal((7, 3, 5)).astype(np.float32)
    yield ("RNN loop, hidden 11, 7 steps",
           lambda h, s: tc.loop(lambda c, x: (c @ tc.Tensor(Wh) + x @ tc.Tensor(U)).relu(), h, s), [[h0, seq]])
    rng = np.random.default_rng(8)
    A = (np.eye(12) * 0.5).astype(np.float32)
    B = (rng.standard_normal((12, 12)) * 0.6).astype(np.float32)
    U2 = (rng.standard_normal((4, 12)) * 0.5).astype(np.float32)
    data = [[rng.standard_normal((2, 12)).astype(np.float32), rng.standard_normal((9, 2, 4)).astype(np.float32)]
            for _ in range(3)]
    yield ("loop over cond(sum|h| > 24, f, g), 9 rows",
           lambda h0, s: tc.loop(lambda h, x: tc.cond(h.abs().sum() > 24.0,
                                                      lambda c, r: c @ tc.Tensor(A) + r @ tc.Tensor(U2),
                                                      lambda c, r: c @ tc.Tensor(B) + r @ tc.Tensor(U2), h, x), h0, s),
           data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    check_outputs(ap, args.json)        # before the work, not after it
    rows, ok = [], True
    for name, model, inputs in cases():
        cm = tc.compile(model, inputs[0], calibration=inputs)
        dev = tc.Device("sim")
        runs = []
        for x in inputs:
            res = dev.run(cm, *x)
            exact = bool(np.array_equal(res.outputs[0], cm.reference(*x)[0]))
            ok &= exact
            runs.append({k: int(v) for k, v in res.ints.items() if k in ("trips", "taken", "then_trips")}
                        | {"cycles": int(res.stats.cycles), "bit_exact": exact})
        rows.append({"model": name, "kind": cm.kind, "instructions": len(cm.program), "runs": runs})
        print(f"{name:<58} {cm.kind:<9} " + "  ".join(
            " ".join(f"{k}={v}" for k, v in r.items() if k != "bit_exact") for r in runs))
    if args.json:
        write_atomic(args.json, json.dumps({"rows": rows}, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
