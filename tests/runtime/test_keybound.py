"""A decode step whose attention is bounded by the key count (compiler.lower.keybound): one binary, n = pos + 1
in a register the host writes; the chip bit-exact to the integer reference at every position, its cycles
growing with the position, the bound refused where it would change the model."""
from __future__ import annotations

import numpy as np
import pytest

import tetrachip as tc
from compiler.lower.dispatch import compile_model
from compiler.lower.quantize import run_int
from runtime.generate import KEY_BOUND
from runtime.sim_backend import SimBackend

VOCAB, D, HEADS, LAYERS, MAX_LEN = 20, 32, 2, 1, 64


@pytest.fixture(scope="module")
def model():
    tc.manual_seed(1)
    return tc.GPT(VOCAB, D, HEADS, LAYERS, MAX_LEN).eval()


@pytest.fixture(scope="module")
def seq():
    return np.random.default_rng(4).integers(0, VOCAB, MAX_LEN)


@pytest.fixture(scope="module")
def chip(model, seq):
    return tc.Generator(model, "base", "sim", calibration=[seq])


def feeds_at(gen, seq, p: int, caches=None) -> dict:
    """Decode-step inputs at position ``p`` of ``seq``: the caches of the tokens before it (float forward)."""
    kc, vc = caches if caches is not None else gen.model.caches(seq)
    keep = np.arange(MAX_LEN)[None, :, None] < p
    return gen._feeds(int(seq[p]), p, (np.where(keep, kc, 0), np.where(keep, vc, 0)))


def run_at(session, feeds):
    for name, v in feeds.items():
        session.write(name, v)
    return session.run()


def test_the_attention_kernels_are_bounded(chip):
    kinds = sorted(chip.cm.key_bound.kernels.values())
    assert kinds.count("bmm") == 2 * LAYERS and kinds.count("softmax") == LAYERS    # q @ K^T, own @ onehot; softmax
    assert kinds.count("bmm_k") == 2 * LAYERS                                    # p @ V, p @ onehot^T
    man = chip.cm.program.manifest["key_bound"]
    assert man["input"] == "k_cache" and man["count"] == "pos" and man["max"] == MAX_LEN


@pytest.mark.parametrize("p", [0, 5, 15, 16, 17, 33, 50, MAX_LEN - 2, MAX_LEN - 1])
def test_chip_equals_the_reference_at_every_position(chip, seq, p):
    caches = chip.model.caches(seq)
    f = feeds_at(chip, seq, p, caches)
    res = run_at(chip.session, f)
    assert chip.session.chip.regs[chip.cm.key_bound.reg] == p + 1       # the host wrote n = pos + 1
    want = chip.cm.reference(f)
    for got, w in zip(res.outputs, want):
        assert np.array_equal(got, w)
    # the bounded reference computes what the whole model computes: the keys after pos weigh exactly zero
    for a, b in zip(want, run_int(chip.cm.qsched, chip.cm.feeds(f))[0]):
        assert np.array_equal(a, b)


def test_cycles_follow_the_position_and_the_program_does_not(model, chip, seq):
    s = chip.session
    code = chip.cm.program.code_bytes()
    caches = model.caches(seq)
    cyc = {p: run_at(s, feeds_at(chip, seq, p, caches)).stats.cycles for p in (0, 10, 15, 16, 40, 60)}
    assert s.loads == 1 and chip.cm.program.code_bytes() == code
    assert cyc[0] == cyc[10] == cyc[15]                 # one tile of 16 keys
    assert cyc[15] < cyc[16] < cyc[40] < cyc[60]        # a tile more, more cycles
    full = tc.Generator(model, "base", "sim", calibration=[seq], bounded=False)
    assert full.cm.key_bound is None and chip.bound_error is None
    whole = run_at(full.session, feeds_at(full, seq, 10, caches)).stats.cycles
    assert run_at(full.session, feeds_at(full, seq, 60, caches)).stats.cycles == whole
    assert cyc[10] < whole
    # compiled from example inputs at another position: the same instructions and constants
    cal = [feeds_at(chip, seq, p, caches) for p in (3, 30, 63)]
    a, b = (compile_model(model.decode_step, feeds_at(chip, seq, p, caches), "base", calibration=cal,
                          resident_inputs=True, key_bound=KEY_BOUND) for p in (2, 61))
    assert a.program.code_bytes() == b.program.code_bytes()
    assert np.array_equal(a.const_image, b.const_image)


def test_generation_is_exact_and_the_register_follows_partial_writes(model, chip, seq):
    ref = tc.Generator(model, "base", "reference", calibration=[seq])
    out = chip.generate([4, 1, 8], 30)                  # 32 positions: two tiles of keys
    assert out.tokens == ref.generate([4, 1, 8], 30).tokens
    assert out.cycles[0] == out.cycles[15] < out.cycles[16] == out.cycles[31]
    s = SimBackend("base").session(chip.cm, feeds_at(chip, seq, 7))
    assert s.chip.regs[chip.cm.key_bound.reg] == 8
    s.write("pos", np.array([40], np.int32), at=slice(0, 1))
    assert s.chip.regs[chip.cm.key_bound.reg] == 41
    with pytest.raises(tc.TetrachipError, match="outside 1..64"):
        s.write("pos", np.array([MAX_LEN], np.int32))
    assert s.chip.regs[chip.cm.key_bound.reg] == 41    # nothing written


def test_a_bound_that_changes_the_model_is_refused(model, chip, seq):
    """Without the mask the keys after pos get weight: bounding them would change the outputs."""
    cal = []
    for p in (5, 20, 40):
        f = feeds_at(chip, seq, p)
        f["k_cache"] = f["k_cache"] + 0.5            # keys after pos score q . 0.5 and are not masked
        f["mask"] = np.zeros_like(f["mask"])
        cal.append(f)
    with pytest.raises(tc.ChipCompileError, match="differs from the unbounded model"):
        compile_model(model.decode_step, cal[0], "base", calibration=cal, resident_inputs=True, key_bound=KEY_BOUND)


@pytest.mark.parametrize("kb, match", [
    ({"input": "nope", "axis": 1, "count": "pos"}, "no input 'nope'"),
    ({"input": "k_cache", "axis": 1, "count": "mask"}, "count 'mask' must be an integer"),
    ({"input": "k_cache", "axis": 3, "count": "pos"}, "has no axis 3"),
    ({"input": "k_cache", "axis": 2, "count": "pos"}, "no batched matmul"),
    ({"input": "k_cache", "axis": "1", "count": "pos"}, "axis must be an integer"),
    ({"input": "k_cache", "count": "pos"}, "must be a dict with keys"),
    (("k_cache", 1), "must be a dict with keys"),
])
def test_bad_key_bounds_are_named(model, chip, seq, kb, match):
    f = feeds_at(chip, seq, 3)
    with pytest.raises(tc.ChipCompileError, match=match):
        compile_model(model.decode_step, f, "base", calibration=[f], resident_inputs=True, key_bound=kb)
    with pytest.raises(tc.ChipCompileError, match="ordinary pipeline only"):
        compile_model(model.decode_step, f, "base", key_bound=KEY_BOUND, search=True)


def test_a_model_that_cannot_be_bounded_runs_unbounded_unless_required():
    tc.manual_seed(2)
    odd = tc.GPT(VOCAB, D, HEADS, 1, 20).eval()            # 20 keys: not whole tiles of 16
    cal = [np.arange(20) % VOCAB]
    gen = tc.Generator(odd, "base", "reference", calibration=cal)
    assert gen.cm.key_bound is None and "20 keys" in gen.bound_error
    assert len(gen.generate([1, 2], 3).tokens) == 3
    with pytest.raises(tc.ChipCompileError, match="has 20 keys"):
        tc.Generator(odd, "base", "reference", calibration=cal, bounded=True)


def test_a_device_run_writes_the_key_count(chip, seq):
    """``Device("sim").run`` (a fresh chip per run, not a session) sets the register from the inputs too."""
    for p in (3, 45):
        f = feeds_at(chip, seq, p)
        got = tc.Device("sim").run(chip.cm, f)
        outs = got.outputs if hasattr(got, "outputs") else got[0]
        for a, b in zip(outs, chip.cm.reference(f)):
            assert np.array_equal(a, b)
