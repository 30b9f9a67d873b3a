"""Attention whose cost follows the number of valid keys: one binary, the key count in a register.

    cm = tc.compile(model.decode_step, feeds, resident_inputs=True,
                    key_bound={"input": "k_cache", "axis": 1, "count": "pos", "offset": 1})

A decode step attends over a key/value cache of ``max_len`` positions of which only the first ``n`` hold
keys (``n = pos + 1``). ``key_bound`` names the cache input's key axis (``input``, ``axis``) and an index
input whose first element plus ``offset`` is ``n`` (``count``, ``offset``). The compiler then bounds, by
``n`` held in scalar register ``DYN_REG`` (written by the host before each run), the kernels over that
axis:

* each batched matmul whose output columns run over the key axis (``q @ k_cache^T``), and each other one
  whose output only elementwise kernels into such a softmax read (``own @ onehot``): its weight relayout and
  its N-tile loop run ``ceil(n / cols)`` tiles (``compiler.lower.bmm_lower``, ``compiler.lower.emit``);
* each softmax over the last axis of a tensor derived from such an output (the scores plus a mask,
  through elementwise kernels): its chunks of ``cols`` keys, ``ceil(n / cols)`` of them
  (``compiler.lower.norms``).

Columns from ``B = ceil(n / cols) * cols`` on are not computed: on the chip they keep whatever DRAM held;
in the integer reference (``quantize.run_int`` with a ``Bound``) they are zero, and a bounded softmax
normalises over its first ``B`` columns, as the chip does. The readers of those columns that are not
bounded (``p @ v_cache``, ``p @ onehot^T``) must not depend on them (the cache rows from ``n`` on are zero,
the one-hot row is zero there): ``check`` verifies at compile time on the calibration feeds that the
outputs are the same whatever those columns hold (zeros or random values) and that the bounded model's
outputs equal the unbounded one's (masked keys weigh exactly zero in the integer softmax), and raises
``ChipCompileError`` otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from isa import regs
from isa.ints import cdiv

from compiler.lower.bmm import BmmKernel
from compiler.lower.schedule import ChipCompileError, EwKernel, NormKernel, Schedule, gather_base, kernel_inputs

#: the scalar register holding the key count ``n`` at launch
KEY_REG = regs.DYN_REG.n
_KEYS = ("input", "axis", "count", "offset")


@dataclass(frozen=True)
class KeyBound:
    """Which kernels are bounded by the key count, and how the host finds the count in the inputs."""
    input: str                      # the cache input whose axis holds the keys
    axis: int
    count: str                      # index input: n = count[0] + offset
    offset: int
    max: int                        # the key axis' size
    granule: int                    # keys per N tile and softmax chunk (the config's cols)
    rows: int                       # keys per K tile (the config's rows)
    kernels: dict = field(default_factory=dict)     # kernel index -> "bmm" (over N) | "softmax" | "bmm_k" (over K)
    reg: int = KEY_REG

    def n(self, feeds: dict) -> int:
        """The key count of a run's inputs (``count[0] + offset``), checked to lie in ``1..max``."""
        v = np.asarray(feeds[self.count]).reshape(-1)
        if v.size < 1:
            raise ChipCompileError(f"key_bound: input {self.count!r} is empty")
        n = int(v[0]) + self.offset
        if not 1 <= n <= self.max:
            raise ChipCompileError(f"key_bound: {self.count!r}[0] + {self.offset} = {n} keys is outside "
                                   f"1..{self.max} ({self.input!r} axis {self.axis})")
        return n

    def limit(self, n: int) -> int:
        """Keys the bounded kernels compute: ``n`` rounded up to whole tiles."""
        return min(self.max, cdiv(n, self.granule) * self.granule)

    def k_limit(self, n: int) -> int:
        """Keys a product bounded over K sums: whole K tiles, at least two (a first and a last)."""
        return min(self.max, max(2, cdiv(n, self.rows)) * self.rows)

    def to_manifest(self) -> dict:
        return {"input": self.input, "axis": self.axis, "count": self.count, "offset": self.offset,
                "max": self.max, "register": self.reg,
                "kernels": {str(i): kind for i, kind in sorted(self.kernels.items())}}


@dataclass
class Bound:
    """A run of the integer reference with bounded kernels for ``n`` keys: ``limit`` keys computed by the
    products over N and the softmaxes (the columns after: zero, or ``rng``'s random int8 values, ``check``),
    ``k_limit`` summed by the products over K."""
    kb: KeyBound
    n: int
    rng: np.random.Generator | None = None

    @property
    def limit(self) -> int:
        return self.kb.limit(self.n)

    @property
    def k_limit(self) -> int:
        return self.kb.k_limit(self.n)

    def fill(self, shape) -> np.ndarray:
        if self.rng is None:
            return np.zeros(shape, np.int64)
        return self.rng.integers(-128, 128, shape)


def parse(key_bound, names: list, index_names: list, sched: Schedule, granule: int, rows: int) -> KeyBound:
    """The ``KeyBound`` of ``tc.compile(..., key_bound=...)`` for the lifted schedule; ChipCompileError
    names what is wrong."""
    if not isinstance(key_bound, dict) or set(key_bound) - set(_KEYS) \
            or not {"input", "axis", "count"} <= set(key_bound):
        raise ChipCompileError(f"key_bound must be a dict with keys 'input', 'axis', 'count' (and 'offset'), got "
                               f"{key_bound!r}")
    inp, axis, count = key_bound["input"], key_bound["axis"], key_bound["count"]
    offset = key_bound.get("offset", 0)
    for what, v in (("axis", axis), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ChipCompileError(f"key_bound: {what} must be an integer, got {v!r}")
    if inp not in names or inp not in sched.inputs:
        raise ChipCompileError(f"key_bound: the model has no input {inp!r}; inputs: {', '.join(names)}")
    if count not in index_names:
        raise ChipCompileError(f"key_bound: count {count!r} must be an integer (index) input of the model; "
                               f"its index inputs: {', '.join(index_names) or 'none'}")
    t = sched.tensors[sched.inputs[inp]]
    if not 0 <= axis < len(t.shape):
        raise ChipCompileError(f"key_bound: input {inp!r} of shape {t.shape} has no axis {axis}")
    kb = KeyBound(inp, int(axis), count, int(offset), int(t.shape[axis]), granule, rows)
    if kb.max % granule or granule & (granule - 1) or rows & (rows - 1):
        raise ChipCompileError(f"key_bound: axis {axis} of {inp!r} has {kb.max} keys; the bound needs whole tiles "
                               f"of a power-of-two cols (config: cols {granule}, rows {rows})")
    kb = replace(kb, kernels=_bounded_kernels(sched, kb))
    if not any(k == "bmm" for k in kb.kernels.values()):
        raise ChipCompileError(f"key_bound: no batched matmul has its output columns along axis {axis} of "
                               f"{inp!r} (a product like q @ {inp}^T)")
    return kb


def _bounded_kernels(s: Schedule, kb: KeyBound) -> dict:
    """Kernel index -> kind: the products over the key axis, then the softmaxes over tensors derived from
    their outputs through elementwise kernels (the key axis last)."""
    ti = s.inputs[kb.input]
    t = s.tensors[ti]
    shape = [1] * len(t.shape)
    shape[kb.axis] = kb.max
    key_of = np.broadcast_to(np.arange(kb.max).reshape(shape), t.shape)
    out, tagged, probs = {}, set(), set()
    for i, k in enumerate(s.kernels):
        if isinstance(k, BmmKernel) and k.b == ti and k.N == kb.max and len(k.n_axes) == 1:
            keys = gather_base(key_of, t, k.gb)
            if np.array_equal(keys, np.broadcast_to(np.arange(kb.max), keys.shape)):
                out[i] = "bmm"
                tagged.add(k.out)
        elif isinstance(k, BmmKernel) and k.a in probs and k.K == kb.max and k.K > 2 * kb.rows:   # (else: 2 tiles)
            ta = s.tensors[k.a]
            last = np.broadcast_to(np.arange(kb.max), ta.shape)
            keys = gather_base(last, ta, k.ga)
            if np.array_equal(keys, np.broadcast_to(np.arange(kb.max), keys.shape)):
                out[i] = "bmm_k"              # p @ v: the sum runs over the keys
        elif isinstance(k, EwKernel) and s.tensors[k.out].shape[-1] == kb.max \
                and any(src in tagged and s.tensors[src].shape[-1] == kb.max for src, _ in k.srcs):
            tagged.add(k.out)
        elif isinstance(k, NormKernel) and k.comp.kind == "softmax" and k.src in tagged \
                and k.idx.shape[1] == kb.max and np.all(np.diff(k.idx, axis=1) == 1):
            out[i] = "softmax"
            probs.add(k.out)
    # other products whose output columns only an elementwise kernel into a bounded softmax reads (the token's
    # own score spread over the keys, ``own @ onehot``): bounded over N too
    readers: dict = {}
    for k in s.kernels:
        for t_in in kernel_inputs(k):
            readers.setdefault(t_in, []).append(k)
    outs = {t_out for t_out, _ in s.outputs}
    for i, k in enumerate(s.kernels):
        if isinstance(k, BmmKernel) and i not in out and k.N == kb.max \
                and list(k.n_axes) == [len(s.tensors[k.out].shape) - 1] and k.out not in outs and readers.get(k.out) \
                and all(isinstance(r, EwKernel) and r.out in tagged for r in readers[k.out]):
            out[i] = "bmm"
    return out


def sample(kb: KeyBound, feeds: list, most: int = 6) -> list:
    """Up to ``most`` of the calibration ``feeds``, spread over their key counts (the smallest and the largest
    included): the feeds ``check`` runs on."""
    order = sorted(range(len(feeds)), key=lambda i: kb.n(feeds[i]))
    pick = sorted({order[int(round(x))] for x in np.linspace(0, len(order) - 1, min(most, len(order)))})
    return [feeds[i] for i in pick]


def check(kb: KeyBound, run, feeds: list, seed: int = 0) -> None:
    """``run(feeds, bound)`` is the integer reference (``quantize.run_int``'s outputs). On each calibration
    feed: the outputs with the skipped columns zero and random must be equal, and equal to the unbounded
    reference's; else ChipCompileError."""
    rng = np.random.default_rng(seed)
    for f in feeds:
        n = kb.n(f)
        lim = kb.limit(n)
        full = run(f, None)
        zero = run(f, Bound(kb, n))
        rand = run(f, Bound(kb, n, rng))
        for i, (a, b, c) in enumerate(zip(full, zero, rand)):
            if not np.array_equal(b, c):
                raise ChipCompileError(f"key_bound: output {i} depends on the keys from {lim} on with {n} keys "
                                       f"({kb.count!r} = {n - kb.offset}): a reader of the bounded kernels' outputs "
                                       "does not give the skipped keys zero weight")
            if not np.array_equal(a, b):
                raise ChipCompileError(f"key_bound: with {n} keys output {i} differs from the unbounded model's: "
                                       "the keys from n on do not weigh exactly zero (is the mask applied before "
                                       "the softmax?)")


__all__ = ["Bound", "KEY_REG", "KeyBound", "check", "parse", "sample"]
