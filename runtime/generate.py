"""Text generation with a key/value cache: one decode step per token, from one compiled binary.

    gen = tc.Generator(model, config="base", device="sim", calibration=[ids, ...])
    out = gen.generate(prompt_ids, max_new_tokens=50, temperature=0.0, top_k=None, seed=0)
    out.tokens, out.cycles            # the new tokens; the chip's cycles per decode step

``model`` is a ``tc.nn.GPT`` (``compiler.frontend.gpt``: any object with ``decode_step``, ``cache_shape``,
``max_len`` and ``vocab``). ``decode_step(ids, pos, k_cache, v_cache, mask)`` is compiled ONCE
(``tc.compile``) at its fixed shapes: the caches always hold ``max_len`` positions and the position enters as
data (an index input and an additive mask), so the same program serves every position. It is compiled with
``key_bound`` (``compiler.lower.keybound``): the attention's products and softmax loop over the ``pos + 1``
cached keys, a scalar register the session sets from the position input, so a step's cost follows the
position. ``bounded``: None (default) bounds when the model allows it (else ``bound_error`` says why and
every step attends over all ``max_len``), True requires it, False never bounds.

Devices:

* ``"sim"``: one resident simulated chip (``runtime.sim_backend.SimSession``): the program and the constants
  are loaded once; the caches live in the chip's DRAM between steps. Before each step the host writes only
  the token id, the position, the one mask entry that changes, and the previous step's new key and value
  rows (requantized to the cache input's scale, as the integer reference quantizes the whole cache), then
  runs the program from the start and reads the logits and the new rows.
* ``"reference"``: the same loop with ``cm.reference`` (the integer model in numpy) in place of the chip,
  the whole cache passed as a float array each step: its greedy tokens equal the chip's exactly.
* ``"numpy"``: the float model (``decode_step`` on ``Device("numpy")``): the accuracy baseline.

``calibration``: token sequences whose decode steps (run in float) calibrate the quantization; by default
one sequence of ``max_len`` random tokens (seed 0). Pass text the model was trained on for useful scales.
Prompt tokens are fed one decode step each; the last prompt step's logits give the first new token. Sampling
is on the host with ``numpy.random.default_rng(seed)``: temperature 0 is greedy (argmax), otherwise the
logits divided by the temperature, cut to the ``top_k`` largest when given, are sampled.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from compiler.frontend.gpt import decode_mask
from compiler.frontend.tensor import Tensor
from compiler.ir import dtypes

DEVICES = ("sim", "reference", "numpy")
INPUTS = ("ids", "pos", "k_cache", "v_cache", "mask")
#: decode steps per calibration sequence (evenly spread over it)
CALIBRATION_STEPS = 64
#: the decode step's attention runs over the pos + 1 cached keys (``compiler.lower.keybound``)
KEY_BOUND = {"input": "k_cache", "axis": 1, "count": "pos", "offset": 1}


@dataclass
class Generation:
    """What ``Generator.generate`` returns."""
    tokens: list                      # the new tokens
    prompt: list                      # the prompt's tokens
    device: str
    cycles: list = field(default_factory=list)      # chip cycles per decode step ("sim"), one per position
    written: list = field(default_factory=list)     # bytes the host wrote before each step ("sim")
    logits: list = field(default_factory=list)      # per new token, the logits (vocab,) it was chosen from
    wall_s: float = 0.0

    @property
    def cycles_per_token(self) -> float:
        return float(np.mean(self.cycles)) if self.cycles else 0.0


def _ints(name: str, values, vocab: int, who: str = "generate") -> list[int]:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{who}: {name} must be a non-empty 1-D sequence of token ids, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{who}: {name} must hold integer token ids, got {arr.dtype}")
    bad = arr[(arr < 0) | (arr >= vocab)]
    if bad.size:
        raise ValueError(f"{who}: token id {int(bad[0])} in {name} is outside the vocabulary 0..{vocab - 1}")
    return [int(t) for t in arr]


class Generator:
    """See the module doc. ``cm`` is the compiled decode step (None on ``"numpy"``); ``session`` the resident
    chip (``"sim"``)."""

    def __init__(self, model, config="base", device: str = "sim", calibration=None, max_cycles: int | None = None,
                 bounded: bool | None = None):
        if device not in DEVICES:
            raise ValueError(f"Generator: device must be one of {', '.join(map(repr, DEVICES))}, got {device!r}")
        for attr in ("decode_step", "cache_shape", "max_len", "vocab"):
            if not hasattr(model, attr):
                raise TypeError(f"Generator: the model has no {attr!r} (a tc.GPT has them)")
        self.model, self.device = model, device
        self.max_len, self.vocab = int(model.max_len), int(model.vocab)
        self.cm = self.session = None
        self.compile_s = 0.0
        if device == "numpy":
            return
        from compiler.lower.dispatch import compile_model
        from compiler.lower.schedule import ChipCompileError
        feeds = [f for seq in self._calibration(calibration) for f in self._calibration_feeds(seq)]
        t0 = time.perf_counter()
        self.bound_error = None
        try:
            self.cm = compile_model(model.decode_step, feeds[-1], config, calibration=feeds, resident_inputs=True,
                                    key_bound=KEY_BOUND if bounded is not False else None)
        except ChipCompileError as e:
            if bounded is not None or "key_bound" not in str(e):
                raise
            self.bound_error = str(e)            # this model cannot be bounded: every step attends over max_len
            self.cm = compile_model(model.decode_step, feeds[-1], config, calibration=feeds, resident_inputs=True)
        self.compile_s = time.perf_counter() - t0
        if device == "sim":
            from runtime.sim_backend import SimBackend
            self.session = SimBackend(config, max_cycles=max_cycles).session(self.cm, self._feeds(0, 0, None))

    # -- host side ---------------------------------------------------------------------------------
    def _calibration(self, calibration) -> list[list[int]]:
        if calibration is None:
            return [list(np.random.default_rng(0).integers(0, self.vocab, self.max_len))]
        seqs = [calibration] if np.ndim(calibration) == 1 else list(calibration)
        out = [_ints("calibration", s, self.vocab, "Generator") for s in seqs]
        for s in out:
            if len(s) > self.max_len:
                raise ValueError(f"Generator: a calibration sequence of {len(s)} tokens is longer than max_len "
                                 f"{self.max_len}")
        return out

    def _feeds(self, token: int, pos: int, caches) -> dict:
        kc, vc = caches if caches is not None else (np.zeros(self.model.cache_shape, np.float32),) * 2
        return {"ids": np.array([token], np.int32), "pos": np.array([pos], np.int32), "k_cache": kc,
                "v_cache": vc, "mask": decode_mask(pos, self.max_len)}

    def _calibration_feeds(self, seq: list[int], most: int = CALIBRATION_STEPS) -> list[dict]:
        """Decode-step feeds at up to ``most`` positions of ``seq`` (evenly spread, the last one included), the
        caches from one float forward pass (``GPT.caches``)."""
        kc, vc = self.model.caches(seq)
        n = len(seq)
        pos = sorted({int(round(x)) for x in np.linspace(n - 1, 0, min(most, n))})
        return [self._feeds(seq[p], p, (np.where(np.arange(self.max_len)[None, :, None] < p, kc, 0),
                                        np.where(np.arange(self.max_len)[None, :, None] < p, vc, 0)))
                for p in pos]

    def _float_step(self, feeds: dict):
        t = {k: Tensor(v, dtypes.int32 if k in ("ids", "pos") else dtypes.float32) for k, v in feeds.items()}
        return [o.numpy() for o in self.model.decode_step(*(t[k] for k in INPUTS))]

    @staticmethod
    def sample(logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator) -> int:
        """The next token from ``logits``: argmax at temperature 0, else a draw from the tempered top k."""
        logits = np.asarray(logits, np.float64).reshape(-1)
        if temperature == 0:
            return int(np.argmax(logits))
        z = logits / temperature
        if top_k is not None and top_k < len(z):
            keep = np.argsort(-z, kind="stable")[:top_k]
            cut = np.full_like(z, -np.inf)
            cut[keep] = z[keep]
            z = cut
        p = np.exp(z - z.max())
        return int(rng.choice(len(z), p=p / p.sum()))

    # -- the loop ----------------------------------------------------------------------------------
    def generate(self, prompt_ids, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
                 seed: int = 0) -> Generation:
        prompt = _ints("prompt_ids", prompt_ids, self.vocab)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) \
                or max_new_tokens < 1:
            raise ValueError(f"generate: max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if not np.isfinite(temperature) or temperature < 0:
            raise ValueError(f"generate: temperature must be >= 0 (0: greedy), got {temperature!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k <= 0):
            raise ValueError(f"generate: top_k must be a positive integer or None, got {top_k!r}")
        steps = len(prompt) + max_new_tokens - 1
        if steps > self.max_len:
            raise ValueError(f"generate: a prompt of {len(prompt)} tokens and {max_new_tokens} new tokens need "
                             f"{steps} positions; the model's max_len is {self.max_len}")
        rng = np.random.default_rng(seed)
        out = Generation([], prompt, self.device)
        t0 = time.perf_counter()
        kc, vc = (np.zeros(self.model.cache_shape, np.float32) for _ in range(2))
        if self.session is not None and self.session.runs:       # a second generate: empty caches again
            self.session.write("k_cache", kc)
            self.session.write("v_cache", vc)
            self.session.write("mask", decode_mask(0, self.max_len))
        tok = prompt[0]
        for p in range(steps):
            logits, kn, vn = self._step(tok, p, kc, vc, out)
            kc[:, p], vc[:, p] = kn, vn
            if p + 1 < len(prompt):
                tok = prompt[p + 1]
            else:
                tok = self.sample(logits, temperature, top_k, rng)
                out.tokens.append(tok)
                out.logits.append(logits)
        out.wall_s = time.perf_counter() - t0
        return out

    def _step(self, tok: int, p: int, kc: np.ndarray, vc: np.ndarray, out: Generation):
        """One decode step at position ``p``: (logits (vocab,), k row, v row)."""
        if self.device == "numpy":
            lg, kn, vn = self._float_step(self._feeds(tok, p, (kc, vc)))
        elif self.device == "reference":
            lg, kn, vn = self.cm.reference(self._feeds(tok, p, (kc, vc)))
        else:
            s = self.session
            s.write("ids", np.array([tok], np.int32))
            s.write("pos", np.array([p], np.int32))
            if p:
                s.write("mask", np.zeros(1, np.float32), at=(0, slice(p, p + 1)))
                s.write("k_cache", kc[:, p - 1], at=(slice(None), p - 1))
                s.write("v_cache", vc[:, p - 1], at=(slice(None), p - 1))
            res = s.run()
            out.cycles.append(int(res.stats.cycles))
            out.written.append(s.last_written)
            lg, kn, vn = res.outputs
        return np.asarray(lg).reshape(-1), np.asarray(kn), np.asarray(vn)


__all__ = ["Generation", "Generator"]
