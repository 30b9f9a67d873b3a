"""A character-level GPT trained here on the repository's own documentation, generating text on the chip.

    python -m examples.charlm                  # greedy continuation of a prompt on the simulated chip
    python -m examples.charlm --prompt "The simulator" --tokens 60 --temperature 0.8 --top-k 10
    python -m examples.charlm --measure --json out/generation.json   # the figures of docs/generation.md
    python -m examples.charlm --train          # retrain (about 13 minutes on one core) -> examples/charlm.npz

The model (``tc.GPT``: 2 layers, d_model 64, 4 heads, max_len 256) is trained with tc autograd and AdamW on
``docs/*.md`` and ``README.md`` concatenated (no download). Training takes minutes, so its weights ship in
``examples/charlm.npz`` (float16, with the vocabulary they were trained with); ``--train`` makes them again.

The run compiles the model's decode step once (``tc.Generator``), feeds the prompt one character per step to
one resident simulated chip whose DRAM keeps the key/value cache, and generates greedily. It checks that the
chip's tokens equal the integer reference's (``cm.reference`` in the same loop), prints how many agree with
the float model's greedy tokens, and the cycles per token.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np

import tetrachip as tc

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = Path(__file__).resolve().parent / "charlm.npz"
SHAPE = dict(d_model=64, heads=4, layers=2, max_len=256)
PROMPT = "The compiler "
#: text windows saved with the weights: WINDOWS - 1 for calibration, the last one held out
WINDOWS = 5


def corpus() -> str:
    """The training text: docs/*.md (sorted by name) then README.md."""
    return "".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))) + (ROOT / "README.md").read_text()


class Vocab:
    def __init__(self, chars: str):
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        bad = sorted({c for c in text if c not in self.index})
        if bad:
            raise ValueError(f"characters {''.join(bad)!r} are not in the model's vocabulary")
        return np.array([self.index[c] for c in text], np.int32)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def _one_blas_thread():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def train(steps: int = 2000, batch: int = 8, seq: int = 256, lr: float = 3e-3, seed: int = 0, log=print):
    """(model, vocab) trained on ``corpus()`` with AdamW (cosine learning-rate decay)."""
    text = corpus()
    vocab = Vocab("".join(sorted(set(text))))
    data = vocab.encode(text)
    tc.manual_seed(seed)
    model = tc.GPT(len(vocab), **SHAPE)
    opt = tc.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    with _one_blas_thread():
        for it in range(steps):
            opt.lr = lr * 0.5 * (1 + np.cos(np.pi * it / steps))
            ix = rng.integers(0, len(data) - seq - 1, batch)
            x = np.stack([data[i:i + seq] for i in ix])
            y = np.stack([data[i + 1:i + seq + 1] for i in ix])
            logits = model(tc.Tensor(x, tc.int32))
            loss = tc.functional.cross_entropy(logits.reshape(batch * seq, -1), tc.Tensor(y.reshape(-1), tc.int32))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if it % 100 == 0 or it == steps - 1:
                log(f"step {it:5d}  loss {loss.item():.3f}  {time.perf_counter() - t0:.0f} s")
    return model.eval(), vocab


def windows(vocab: Vocab, n: int = WINDOWS, seed: int = 1) -> np.ndarray:
    """``n`` windows of ``max_len`` characters of ``corpus()`` (as token ids), drawn when the weights are saved."""
    data = vocab.encode("".join(c for c in corpus() if c in vocab.index))
    starts = np.random.default_rng(seed).integers(0, len(data) - SHAPE["max_len"], n)
    return np.stack([data[s:s + SHAPE["max_len"]] for s in starts])


def save(model, vocab: Vocab, path: Path = WEIGHTS) -> None:
    """The weights (float16), the vocabulary and ``windows`` of the text (so the figures do not move with the
    docs): the first ones calibrate the quantization, the last one is held out for ``--measure``."""
    np.savez_compressed(path, vocab=np.array(vocab.chars), windows=windows(vocab).astype(np.uint8),
                        **{k: v.astype(np.float16) for k, v in model.state_dict().items()})


def load(path: Path = WEIGHTS):
    """(model, vocab) from the shipped weights."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: make it with python -m examples.charlm --train")
    with np.load(path) as z:
        vocab = Vocab(str(z["vocab"]))
        state = {k: z[k].astype(np.float32) for k in z.files if k not in ("vocab", "windows")}
    model = tc.GPT(len(vocab), **SHAPE)
    model.load_state_dict(state)
    return model.eval(), vocab


def saved_windows(path: Path = WEIGHTS) -> np.ndarray:
    """The text windows saved with the weights, (WINDOWS, max_len) token ids."""
    with np.load(path) as z:
        return z["windows"].astype(np.int32)


def calibration(n: int = WINDOWS - 1) -> list:
    """The quantization's calibration: ``n`` saved windows of the training text."""
    return list(saved_windows()[:min(n, WINDOWS - 1)])


def agreement(a: list, b: list) -> float:
    """Percentage of positions where two token lists agree (up to the first difference, both continue on
    their own tokens, so later positions compare continuations of different texts)."""
    return 100.0 * float(np.mean(np.asarray(a) == np.asarray(b)))


def run(prompt: str, tokens: int, temperature: float, top_k, seed: int, config: str) -> dict:
    model, vocab = load()
    ids = vocab.encode(prompt)
    cal = calibration()
    t0 = time.perf_counter()
    chip = tc.Generator(model, config, "sim", calibration=cal)
    print(f"compiled the decode step once in {time.perf_counter() - t0:.1f} s: {len(chip.cm.program)} instructions")
    out = chip.generate(ids, tokens, temperature, top_k, seed)
    ref = tc.Generator(model, config, "reference", calibration=cal).generate(ids, tokens, temperature, top_k, seed)
    flt = tc.Generator(model, device="numpy").generate(ids, tokens, temperature, top_k, seed)
    print(f"prompt: {prompt!r}")
    print(f"chip:   {vocab.decode(out.tokens)!r}")
    print(f"float:  {vocab.decode(flt.tokens)!r}")
    same = out.tokens == ref.tokens
    print(f"chip == integer reference: {same}; agreement with the float model: "
          f"{agreement(out.tokens, flt.tokens):.0f}% of {tokens} tokens")
    print(f"{out.cycles_per_token:.0f} cycles per token ({len(out.cycles)} decode steps, "
          f"{out.wall_s / len(out.cycles):.2f} s wall per step on the simulator; "
          f"host writes {int(np.median(out.written))} bytes per step)")
    if not same:
        raise SystemExit("the chip's tokens differ from the integer reference's")
    return dict(prompt=prompt, chip=vocab.decode(out.tokens), float=vocab.decode(flt.tokens))


def measure(config: str, tokens: int = 100) -> dict:
    """The figures of docs/generation.md: cycles per decode step at T = 16, 128, 256 tokens so far (and of the
    step compiled without the key bound), greedy agreement chip vs float over ``tokens`` new tokens, wall time
    per step."""
    model, vocab = load()
    cal = calibration()
    chip = tc.Generator(model, config, "sim", calibration=cal)
    ref = tc.Generator(model, config, "reference", calibration=cal)
    flt = tc.Generator(model, device="numpy")
    res = {"config": config, "model": dict(SHAPE, vocab=len(vocab)), "instructions": len(chip.cm.program),
           "compile_s": round(chip.compile_s, 2)}
    held_out = saved_windows()[-1]
    ids = held_out
    out = chip.generate(ids, 1)                     # every position 0..255 once: T = p + 1 tokens so far
    res["cycles_at_T"] = {t: out.cycles[t - 1] for t in (16, 128, 256)}
    res["cycles_min_max"] = [min(out.cycles), max(out.cycles)]
    res["cycles_mean_over_positions"] = round(out.cycles_per_token)
    # the same step compiled without the key bound (attention over all max_len positions at every step)
    whole = tc.Generator(model, config, "sim", calibration=cal, bounded=False)
    res["cycles_unbounded"] = sorted(set(whole.generate(ids[:16], 1).cycles))
    res["wall_s_per_step"] = round(out.wall_s / len(out.cycles), 3)
    res["bytes_written_per_step"] = int(np.median(out.written[1:]))
    prompt = vocab.encode(PROMPT)
    g = chip.generate(prompt, tokens)
    r = ref.generate(prompt, tokens)
    f = flt.generate(prompt, tokens)
    res["greedy"] = {"prompt": PROMPT, "tokens": tokens, "chip_equals_reference": g.tokens == r.tokens,
                     "cycles_per_token": round(g.cycles_per_token),
                     "agreement_with_float_pct": agreement(g.tokens, f.tokens),
                     "first_difference": next((i for i, (a, b) in enumerate(zip(g.tokens, f.tokens)) if a != b),
                                              None),
                     "chip": vocab.decode(g.tokens), "float": vocab.decode(f.tokens),
                     "float_agrees_on_chip_text_pct": _agrees_on(model, list(prompt), g.tokens)}
    # teacher-forced: the chip's and the float model's argmax at every position of the same text
    res["teacher_forced_agreement_pct"] = _teacher_forced(chip, flt, held_out)
    return res


def _agrees_on(model, prompt: list, tokens: list) -> float:
    """Percentage of the chip's greedy tokens that are also the float model's argmax after the same text (the
    chip's own prompt + continuation): agreement step by step, without the drift of two diverging texts."""
    logits = model(np.array(prompt + tokens[:-1], np.int32)).numpy()[0, len(prompt) - 1:]
    return 100.0 * float(np.mean(np.argmax(logits, -1) == np.asarray(tokens)))


def _teacher_forced(chip, flt, ids) -> float:
    """Percentage of positions of ``ids`` where the chip's next-token argmax equals the float model's."""
    model = flt.model
    want = np.argmax(model(ids).numpy()[0], -1)
    got = []
    s = chip.session
    kc, vc = (np.zeros(model.cache_shape, np.float32) for _ in range(2))
    for p, tok in enumerate(ids):
        for name, v in chip._feeds(int(tok), p, (kc, vc)).items():
            s.write(name, v)
        lg, kn, vn = s.run().outputs
        kc[:, p], vc[:, p] = kn, vn
        got.append(int(np.argmax(lg)))
    return 100.0 * float(np.mean(np.asarray(got) == want))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m examples.charlm", description=__doc__.split("\n")[0])
    ap.add_argument("--train", action="store_true", help="train the model and write examples/charlm.npz")
    ap.add_argument("--steps", type=int, default=2000, help="training steps (--train)")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--tokens", type=int, default=40, help="new tokens")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default="base")
    ap.add_argument("--measure", action="store_true", help="the figures of docs/generation.md")
    ap.add_argument("--json", help="write the figures (--measure) or the run's texts as JSON")
    a = ap.parse_args(argv)
    if a.train:
        model, vocab = train(a.steps)
        save(model, vocab)
        print(f"wrote {WEIGHTS} ({WEIGHTS.stat().st_size} bytes, vocabulary of {len(vocab)})")
        return
    try:
        res = measure(a.config, a.tokens) if a.measure else run(a.prompt, a.tokens, a.temperature, a.top_k,
                                                                 a.seed, a.config)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if a.measure:
        print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
