"""Schedule search: simulator-scored tilings, never slower than the default, cached on disk."""
import numpy as np

import tetrachip as tc
from compiler.lower import search


def _mlp():
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 48)).astype(np.float32)
    w2 = rng.standard_normal((48, 10)).astype(np.float32)
    x = rng.standard_normal((300, 64)).astype(np.float32)
    return (lambda a: (a @ tc.Tensor(w1)).relu() @ tc.Tensor(w2)), x


def test_search_exact_not_slower_and_cached(tmp_path):
    f, x = _mlp()
    dev = tc.Device("sim")
    base = dev.run(tc.compile(f, [x]), x).stats.cycles
    runs0 = search.STATS["sim_runs"]
    cm = tc.compile(f, [x], search=True, search_budget_s=3.0, cache_dir=tmp_path)
    runs1 = search.STATS["sim_runs"]
    assert runs1 > runs0                                  # the first compile searched
    res = dev.run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    assert res.stats.cycles <= base
    for r in cm.search_report:
        assert not r["cached"] and r["cycles"] <= r["default_cycles"]
    assert len(list(tmp_path.glob("search-*.json"))) == len(cm.search_report)
    assert len(list(tmp_path.glob("model-*.pkl"))) == 1
    # the second compile reads the cache (the whole model): no simulator run, same binary
    hits = search.STATS["hits"]
    cm2 = tc.compile(f, [x], search=True, cache_dir=tmp_path)
    assert search.STATS["sim_runs"] == runs1
    assert search.STATS["hits"] == hits + len(cm.search_report)
    assert all(r["cached"] for r in cm2.search_report)
    assert cm2.program.code_bytes() == cm.program.code_bytes()
    np.testing.assert_array_equal(dev.run(cm2, x).outputs[0], res.outputs[0])
    # without the whole-model entry the per-kernel entries still spare every simulation
    for p in tmp_path.glob("model-*.pkl"):
        p.unlink()
    cm3 = tc.compile(f, [x], search=True, cache_dir=tmp_path)
    assert search.STATS["sim_runs"] == runs1
    assert all(r["cached"] for r in cm3.search_report)
    assert cm3.program.code_bytes() == cm.program.code_bytes()


def test_new_weights_miss_the_model_cache_hit_the_kernel_cache(tmp_path):
    f, x = _mlp()
    cm = tc.compile(f, [x], search=True, search_budget_s=1.0, cache_dir=tmp_path)
    runs = search.STATS["sim_runs"]
    w = np.random.default_rng(9).standard_normal((64, 10)).astype(np.float32)
    g = (lambda a: a @ tc.Tensor(w))
    tc.compile(g, [x], search=True, search_budget_s=1.0, cache_dir=tmp_path)
    assert search.STATS["sim_runs"] > runs               # a new kernel shape: searched
    runs = search.STATS["sim_runs"]
    w2 = w + 1
    cm2 = tc.compile(lambda a: a @ tc.Tensor(w2), [x], search=True, cache_dir=tmp_path)
    assert search.STATS["sim_runs"] == runs              # same kernel signature, other weights
    assert len(list(tmp_path.glob("model-*.pkl"))) == 3  # ... but a model of its own
    np.testing.assert_array_equal(tc.Device("sim").run(cm2, x).outputs[0], cm2.reference(x)[0])
    assert cm.search_report


def test_cache_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TETRACHIP_CACHE_DIR", str(tmp_path / "c"))
    assert search.cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()


def test_config_is_part_of_the_key(tmp_path):
    f, x = _mlp()
    cm = tc.compile(f, [x], search=True, search_budget_s=1.0, cache_dir=tmp_path)
    kc_sig = {p.name for p in tmp_path.glob("search-*.json")}
    tc.compile(f, [x], config="small", search=True, search_budget_s=1.0, cache_dir=tmp_path)
    assert {p.name for p in tmp_path.glob("search-*.json")} > kc_sig
    assert cm.search_report


def test_source_digest_covers_nested_compiler_files(tmp_path):
    """The whole-model cache key changes when any compiler or isa file changes, however deep."""
    (tmp_path / "compiler" / "lower").mkdir(parents=True)
    (tmp_path / "isa").mkdir()
    deep = tmp_path / "compiler" / "lower" / "emit.py"
    deep.write_text("A = 1\n")
    (tmp_path / "isa" / "table.py").write_text("B = 2\n")
    before = search._source_digest(tmp_path)
    deep.write_text("A = 2\n")
    assert search._source_digest(tmp_path) != before
    real = search._source_digest()
    assert real != search._source_digest(tmp_path)


def test_whole_model_never_slower_than_the_default(tmp_path):
    """The search scores kernels alone; the digits CNN's searched convolutions (longer or shorter M tiles than
    the default's) lose beside each other in the whole program (measured: 467,817 cycles against the default's
    394,100 on base). A searched compile runs both whole models on the simulator and keeps the faster: its
    cycles are the smaller of the two it reports, and the default's are those of a plain compile."""
    from bench import models
    model, x, calib, _ = dict(models.cases(quick=True))["digits cnn"]()
    dev = tc.Device("sim", config="base")
    plain = dev.run(tc.compile(model, [x], config="base", calibration=calib), x).stats.cycles
    cm = tc.compile(model, [x], config="base", calibration=calib, search=True, search_budget_s=1.0,
                    cache_dir=tmp_path)
    res = dev.run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    w = cm.search_whole
    assert w["default"] == plain and res.stats.cycles == min(w["searched"], w["default"]) <= plain
    assert w["kept"] == ("default" if w["default"] < w["searched"] else "searched")
