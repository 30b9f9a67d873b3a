"""Loop orders (Tiling.order): every order, with several M tiles and A-buffer counts, is bit-exact
against the quantized reference on odd shapes; the search scores orders and caches the winner."""
import numpy as np
import pytest

import tetrachip as tc
from compiler.lower import pipeline as lower
from compiler.lower import search


def _models():
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((45, 40)).astype(np.float32)
    b1 = rng.standard_normal(40).astype(np.float32)
    w2 = rng.standard_normal((40, 19)).astype(np.float32)
    mlp = (lambda a: (a @ tc.Tensor(w1) + tc.Tensor(b1)).relu() @ tc.Tensor(w2) + 0.5,
           rng.standard_normal((37, 45)).astype(np.float32))
    conv = tc.nn.Conv2d(5, 19, 3, padding=1)
    conv2 = tc.nn.Conv2d(19, 21, 3, stride=2)
    cnn = (lambda x: conv2(conv(x).relu()), rng.standard_normal((2, 5, 9, 7)).astype(np.float32))
    return {"mlp": mlp, "cnn": cnn}


def _variants(cfg, base, out_int8, bias, run):
    """(order, Mt, nbuf) tilings around the default: one M tile and about three."""
    step = run if run > 1 else 1
    mts = {base.Mt, max(step, (base.M // 3) // step * step)}
    out = []
    for order in ("mnk", "nmk"):
        for Mt in sorted(mts):
            MT = -(-base.M // Mt)
            for nbuf in sorted({1, 2, MT}):
                NB = base.KT if order == "nmk" else base.NB
                t = search.make(cfg, base, out_int8, bias, run, Mt, nbuf, NB, order)
                if t is not None and (t.Mt, t.nbuf, t.order) not in {(v.Mt, v.nbuf, v.order) for v in out}:
                    out.append(t)
    return out


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_every_order_bit_exact(name, monkeypatch):
    f, x = _models()[name]
    cfg = tc.ChipConfig.load("base")
    choose = lower.choose
    kernels = []

    def record(cfg_, M, KT, N, out_int8, run, what, single_ok=True, **kw):
        base = choose(cfg_, M, KT, N, out_int8, run, what, single_ok=single_ok, **kw)
        kernels.append((base, out_int8, not single_ok, run))
        return base
    monkeypatch.setattr(lower, "choose", record)
    tc.compile(f, [x])
    n_var = [_variants(cfg, *k) for k in kernels]
    dev = tc.Device("sim")
    orders_run = set()
    for i in range(max(len(v) for v in n_var)):
        pick = iter([v[i % len(v)] for v in n_var])
        monkeypatch.setattr(lower, "choose", lambda *a, **k: next(pick))  # noqa: B023  (used by this compile only)
        cm = tc.compile(f, [x])
        res = dev.run(cm, x)                         # every run is under the race detector
        np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
        for k in cm.kernels:
            orders_run.add((k.tiling.order, k.tiling.MT > 1, k.tiling.nbuf >= k.tiling.MT > 1, k.tiling.NT > 1))
    assert ("nmk", True, True, True) in orders_run and ("nmk", True, False, True) in orders_run
    assert ("mnk", True, False, True) in orders_run


def test_search_over_orders_is_cached_and_exact(tmp_path):
    f, x = _models()["mlp"]
    xs = np.concatenate([x] * 8)                     # 296 rows: several M tiles are worth scoring
    cm = tc.compile(f, [xs], search=True, search_budget_s=2.0, cache_dir=tmp_path)
    np.testing.assert_array_equal(tc.Device("sim").run(cm, xs).outputs[0], cm.reference(xs)[0])
    for r in cm.search_report:
        assert set(r["best_per_order"]) == {"mnk", "nmk"}
        assert r["cycles"] <= r["default_cycles"]
        assert r["cycles"] == min(v for v in r["best_per_order"].values() if v is not None)
    runs = search.STATS["sim_runs"]
    for p in tmp_path.glob("model-*.pkl"):
        p.unlink()
    cm2 = tc.compile(f, [xs], search=True, cache_dir=tmp_path)
    assert search.STATS["sim_runs"] == runs and all(r["cached"] for r in cm2.search_report)
    assert [k.tiling for k in cm2.kernels] == [k.tiling for k in cm.kernels]
