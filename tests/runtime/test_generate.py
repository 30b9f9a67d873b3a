"""Text generation with a KV cache (runtime.generate): the GPT decode step against the full forward, one
binary on a resident simulated chip against the integer reference, sampling, argument errors."""
from __future__ import annotations

import numpy as np
import pytest

import tetrachip as tc
from compiler.frontend.gpt import MASKED, decode_mask
from runtime.sim_backend import SimBackend

VOCAB, D, HEADS, LAYERS, MAX_LEN = 20, 32, 2, 2, 16


def tiny(seed: int = 0):
    tc.manual_seed(seed)
    return tc.GPT(VOCAB, D, HEADS, LAYERS, MAX_LEN).eval()


def calib():
    rng = np.random.default_rng(5)
    return [rng.integers(0, VOCAB, MAX_LEN), rng.integers(0, VOCAB, MAX_LEN)]


@pytest.fixture(scope="module")
def model():
    return tiny()


@pytest.fixture(scope="module")
def chip(model):
    return tc.Generator(model, "base", "sim", calibration=calib())


@pytest.fixture(scope="module")
def ref(model):
    return tc.Generator(model, "base", "reference", calibration=calib())


def _t(a, dt=None):
    return tc.Tensor(np.asarray(a), dt) if dt is not None else tc.Tensor(np.asarray(a, np.float32))


def test_decode_steps_equal_the_full_causal_forward(model):
    ids = np.array([3, 17, 0, 9, 9, 12, 5], np.int32)
    full = model(ids).numpy()[0]                      # (T, vocab)
    kfull, vfull = model.caches(ids)
    kc, vc = (np.zeros(model.cache_shape, np.float32) for _ in range(2))
    for p, tok in enumerate(ids):
        lg, kn, vn = (o.numpy() for o in model.decode_step(_t([tok], tc.int32), _t([p], tc.int32), _t(kc), _t(vc),
                                                             _t(decode_mask(p, MAX_LEN))))
        np.testing.assert_allclose(lg[0], full[p], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(kn, kfull[:, p], rtol=1e-4, atol=1e-5)
        kc[:, p], vc[:, p] = kn, vn
    np.testing.assert_allclose(vc, vfull, rtol=1e-4, atol=1e-5)
    # a position's logits do not depend on what the caches hold past it (the mask hides it; row pos stays 0)
    rows = np.arange(MAX_LEN)[:, None]
    clean = np.where(rows < 3, kc, 0.0)
    junk = np.where(rows < 3, kc, np.where(rows > 3, 7.0, 0.0))
    a, b = (model.decode_step(_t([1], tc.int32), _t([3], tc.int32), _t(k), _t(k), _t(decode_mask(3, MAX_LEN)))[0]
            .numpy() for k in (clean, junk))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_decode_mask():
    m = decode_mask(2, 5)
    assert m.shape == (1, 5) and list(m[0]) == [0, 0, 0, MASKED, MASKED]


def test_chip_greedy_tokens_equal_the_integer_reference(chip, ref):
    out = chip.generate([4, 1, 8], 9)
    want = ref.generate([4, 1, 8], 9)
    assert len(out.tokens) == 9 and out.tokens == want.tokens
    assert len(out.cycles) == 3 + 9 - 1 and min(out.cycles) > 0
    for lg, lw in zip(out.logits, want.logits):     # the logits themselves, bit for bit
        assert np.array_equal(lg, lw)


def test_one_binary_serves_every_position(chip):
    code = chip.cm.program.code_bytes()
    s = chip.session
    chip_obj, prog, loads = s.chip, s.chip.prog, s.loads
    out = chip.generate([2], 6)
    assert s.chip is chip_obj and s.chip.prog is prog and s.loads == loads == 1
    assert chip.cm.program.code_bytes() == code
    # after the first step the host writes only the token, the position, a mask byte and the new K/V rows
    cache_bytes = 2 * int(np.prod(chip.model.cache_shape))
    assert all(w < cache_bytes // 4 for w in out.written[1:])
    # a second generate on the same chip starts from empty caches: the same tokens again
    assert chip.generate([2], 6).tokens == out.tokens


def test_float_mode_follows_the_float_model(model):
    flt = tc.Generator(model, device="numpy")
    assert flt.cm is None
    prompt = [5, 6]
    out = flt.generate(prompt, 4)
    seq = list(prompt)
    for tok in out.tokens:                        # greedy = argmax of the full forward on what came before
        assert tok == int(np.argmax(model(np.array(seq, np.int32)).numpy()[0, -1]))
        seq.append(tok)


def test_sampling_is_reproducible_and_stays_in_the_top_k(chip, ref):
    a = chip.generate([7, 3], 8, temperature=1.5, top_k=3, seed=11)
    b = ref.generate([7, 3], 8, temperature=1.5, top_k=3, seed=11)
    assert a.tokens == b.tokens                  # equal logits and one seed: the same draws
    assert ref.generate([7, 3], 8, temperature=1.5, top_k=3, seed=11).tokens == b.tokens
    for tok, lg in zip(b.tokens, b.logits):
        assert tok in np.argsort(-lg)[:3]
    draws = {tuple(ref.generate([7, 3], 8, temperature=2.0, seed=s).tokens) for s in range(4)}
    assert len(draws) > 1                         # the seed matters at a high temperature


def test_sample_rule():
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 3.0, 1.0, 2.9, -1.0])
    assert tc.Generator.sample(logits, 0.0, None, rng) == 1
    assert tc.Generator.sample(logits, 5.0, 1, rng) == 1
    seen = {tc.Generator.sample(logits, 10.0, 2, rng) for _ in range(200)}
    assert seen == {1, 3}


@pytest.mark.parametrize("call, match", [
    (lambda g: g.generate(list(range(10)) + [1] * 6, 2), "max_len is 16"),
    (lambda g: g.generate([1], 17), "max_len is 16"),
    (lambda g: g.generate([1, 2], 3, top_k=0), "top_k"),
    (lambda g: g.generate([1, 2], 3, top_k=-2), "top_k"),
    (lambda g: g.generate([1, 2], 3, temperature=-0.5), "temperature"),
    (lambda g: g.generate([1, VOCAB], 3), f"token id {VOCAB}"),
    (lambda g: g.generate([-1], 3), "token id -1"),
    (lambda g: g.generate([], 3), "non-empty"),
    (lambda g: g.generate([1.5], 3), "integer"),
    (lambda g: g.generate([1], 0), "max_new_tokens"),
])
def test_bad_arguments_raise_clear_errors(ref, call, match):
    with pytest.raises(ValueError, match=match):
        call(ref)


def test_bad_models_and_devices(model):
    with pytest.raises(ValueError, match="device"):
        tc.Generator(model, device="gpu")
    with pytest.raises(TypeError, match="decode_step"):
        tc.Generator(tc.nn.Linear(2, 2), device="numpy")
    with pytest.raises(ValueError, match="divisible"):
        tc.GPT(10, 30, 4, 1, 8)
    with pytest.raises(ValueError, match="max_len"):
        tc.GPT(10, 32, 2, 1, 0)
    with pytest.raises(ValueError, match="longer than max_len"):
        model(np.zeros(MAX_LEN + 1, np.int32))


def test_partial_input_writes_match_a_whole_input(chip):
    """A session started on inputs A, then written only where B differs, holds B's DRAM image."""
    cm = chip.cm
    rng = np.random.default_rng(3)
    a = chip._feeds(2, 0, None)
    kc = np.zeros(chip.model.cache_shape, np.float32)
    kc[:, :5] = rng.standard_normal((kc.shape[0], 5, kc.shape[2]))
    b = chip._feeds(9, 5, (kc, kc * 0.5))
    s = SimBackend("base").session(cm, a)
    s.write("ids", b["ids"])
    s.write("pos", b["pos"])
    s.write("mask", np.zeros((1, 5), np.float32), at=(slice(None), slice(1, 6)))
    s.write("k_cache", kc[:, :5], at=(slice(None), slice(0, 5)))
    s.write("v_cache", 0.5 * kc[:, :5], at=(slice(None), slice(0, 5)))
    fresh = np.zeros_like(s.chip.dram)
    for addr, data in cm.dram_writes(cm.feeds(b)):
        d = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        fresh[addr:addr + len(d)] = d
    assert np.array_equal(fresh, s.chip.dram)
    with pytest.raises(tc.TetrachipError, match="no input 'nope'"):
        s.write("nope", [1])
    with pytest.raises(tc.TetrachipError, match="values for a part"):
        s.write("k_cache", np.zeros(3), at=(slice(None), 0))


def test_a_session_needs_resident_inputs():
    w = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    x = np.ones((2, 16), np.float32)
    cm = tc.compile(lambda a: a @ tc.Tensor(w), [x], "base")
    with pytest.raises(tc.TetrachipError, match="resident_inputs"):
        SimBackend("base").session(cm, x)
    cm = tc.compile(lambda a: a @ tc.Tensor(w), [x], "base", resident_inputs=True)
    s = SimBackend("base").session(cm, x)
    for _ in range(2):
        assert np.array_equal(s.run().outputs[0], cm.reference(x)[0])


def test_the_charlm_example_generates_on_the_chip():
    """The shipped character model: its vocabulary round-trips, and the chip's tokens equal the reference's."""
    from examples import charlm
    model, vocab = charlm.load()
    assert vocab.decode(vocab.encode("The chip")) == "The chip"
    with pytest.raises(ValueError, match="not in the model's vocabulary"):
        vocab.encode("\x00")
    cal = charlm.calibration(n=1)
    ids = vocab.encode("The chip ")
    a = tc.Generator(model, "base", "sim", calibration=cal).generate(ids, 3)
    b = tc.Generator(model, "base", "reference", calibration=cal).generate(ids, 3)
    assert a.tokens == b.tokens and len(a.cycles) == len(ids) + 2


def test_bad_calibration(model):
    with pytest.raises(ValueError, match="Generator: a calibration sequence of 17 tokens"):
        tc.Generator(model, "base", "reference", calibration=[np.zeros(MAX_LEN + 1, np.int64)])
    with pytest.raises(ValueError, match="Generator: token id 99 in calibration"):
        tc.Generator(model, "base", "reference", calibration=[[1, 99]])
