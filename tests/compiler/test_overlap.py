"""Kernels of a compiled model run without a fence between them (``compiler.lower.emit.emit_program``,
the fences placed by ``compiler.lower.pipeline``): each run on the simulator is checked bit for bit
and against the happens-before order of its DRAM accesses, logged per instance.

The order checked, per DRAM tensor: every store its producer kernel makes into it (interior and
zero border) retires before any load of a kernel that reads it starts (read after write); and
where a tensor reuses the bytes of one that died before it, every load of the dead tensor retires
before a store of the new one starts (write after read). A program built without the fences the
pipeline places breaks it (``test_checker_catches_missing_fences``), so the check can fail.
"""
from __future__ import annotations

import numpy as np
import pytest

import tetrachip as tc
from compiler.lower import pipeline
from compiler.lower.schedule import kernel_inputs
from sim import state
from sim.errors import SimError


class _Chain(tc.nn.Module):
    """3x3 convolutions with padding: every output is padded for the next (zero-border fills, DRAM reuse)."""

    def __init__(self, c=8, n=4):
        self.convs = [tc.nn.Conv2d(4 if i == 0 else c, c, 3, padding=1) for i in range(n)]

    def forward(self, x):
        for cv in self.convs:
            x = cv(x).relu()
        return x


class _Branches(tc.nn.Module):
    """Two convolutions of the same input (independent kernels), then their sum."""

    def __init__(self, c=8):
        self.a = tc.nn.Conv2d(4, c, 3, padding=1)
        self.b = tc.nn.Conv2d(4, c, 1, bias=False)

    def forward(self, x):
        return (self.a(x).relu() + self.b(x)).relu()


class _Random(tc.nn.Module):
    """A seeded random graph of convolutions (3x3 padded or 1x1, with or without bias and ReLU) on any
    earlier value, and sums of two earlier values: chains, independent branches, residual adds."""

    def __init__(self, seed, c=6, n=6):
        rng = np.random.default_rng(seed)
        self.inp = tc.nn.Conv2d(3, c, 3, padding=1)
        self.ops = []
        for i in range(n):
            j, k = (int(v) for v in rng.integers(0, i + 1, 2))
            kind = ["conv3", "conv1", "add"][int(rng.integers(0, 3)) if i else 0]
            relu = bool(rng.integers(0, 2))
            mod = None if kind == "add" else tc.nn.Conv2d(c, c, 3 if kind == "conv3" else 1,
                                                          padding=1 if kind == "conv3" else 0,
                                                          bias=bool(rng.integers(0, 2)))
            self.ops.append((mod, j, k, relu))

    def forward(self, x):
        xs = [self.inp(x).relu()]
        for mod, j, k, relu in self.ops:
            y = xs[j] + xs[k] if mod is None else mod(xs[j])
            xs.append(y.relu() if relu else y)
        return xs[-1]


def _mlp(d=32, n=4):
    rng = np.random.default_rng(5)
    ws = [rng.standard_normal((d, d)).astype(np.float32) / np.sqrt(d) for _ in range(n)]

    def f(x):
        for w in ws:
            x = (x @ tc.Tensor(w)).relu()
        return x @ tc.Tensor(ws[0])                  # int32 output, no bias
    return f


def _instructions(cm) -> list[str]:
    """The listing's instruction lines, by pc."""
    out = [ln.strip() for ln in cm.asm.splitlines() if ln.strip() and not ln.strip().startswith(";")
           and not ln.strip().endswith(":")]
    assert len(out) == len(cm.program)
    return out


def _kernel_of_pc(cm) -> list[int]:
    """Kernel index of every instruction, from the listing: a border fill belongs to the kernel whose
    output it writes (emitted before that kernel's comment, or inside it after its fence)."""
    lines = cm.asm.splitlines()
    out, cur, owner = [], -1, None
    for i, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith("; kernel "):
            cur, owner = cur + 1, None
        elif s.startswith("; zero the border"):
            rest = [x.strip() for x in lines[i + 1:]]
            nxt = next((j for j, x in enumerate(rest) if x.startswith("; kernel ")), len(rest))
            fill_only = all(x.startswith((";", "loop", "dma.st", "fence")) or x.endswith(":") for x in rest[:nxt])
            owner = cur + 1 if fill_only else cur
        elif s.startswith(";"):
            owner = None if not s.startswith("; zero") else owner
        elif s and not s.endswith(":") and not ln.startswith(";"):
            out.append(cur if owner is None else owner)
    assert len(out) == len(cm.program)
    return out


def _run_logged(cm, x, config, monkeypatch, dram_only: bool = True):
    """Run on the simulator, logging every instance that touches DRAM (``dram_only``, else any memory):
    [unit, pc, start, retire, reads, writes]."""
    log = []
    start = state.Races.start

    def logged(self, unit, pc, s, reads, writes, r=state.INF, ports=()):
        rec = start(self, unit, pc, s, reads, writes, r, ports)
        if any(m == "dram" or not dram_only for m, _, _ in list(reads) + list(writes)):
            log.append(rec)
        return rec
    monkeypatch.setattr(state.Races, "start", logged)
    res = tc.Device("sim", config=config).run(cm, x)
    monkeypatch.setattr(state.Races, "start", start)
    return res, log


def _hits(spans, lo, hi):
    return any(m == "dram" and a < hi and lo < b for m, a, b in spans)


def unfenced_reads(cm, log) -> list[str]:
    """Loads of a kernel's input with no ``fence store``/``fence all`` between the producer's store
    instructions and them in program order: whatever the timing, nothing would order them."""
    s = cm.qsched.sched
    kof = _kernel_of_pc(cm)
    fences = [pc for pc, ins in enumerate(_instructions(cm)) if ins.startswith("fence")]
    bad = []
    for ti, t in enumerate(s.tensors):
        if t.kind != "kernel":
            continue
        lo, hi = cm.tensor_addr[ti], cm.tensor_addr[ti] + t.phys_size * cm.qsched.elem_bytes(ti)
        stores = [x[1] for x in log if kof[x[1]] == t.producer and _hits(x[5], lo, hi)]
        loads = [x[1] for x in log if kof[x[1]] > t.producer and _hits(x[4], lo, hi)]
        if stores and loads and not any(max(stores) < f < min(loads) for f in fences):
            bad.append(f"t{ti}: stores up to pc {max(stores)}, a load at pc {min(loads)}, no fence between")
    return bad


def order_violations(cm, log) -> list[str]:
    """Pairs of DRAM accesses out of the order the kernel schedule requires (see the module docstring)."""
    s = cm.qsched.sched
    kof = _kernel_of_pc(cm)
    rng = {ti: (cm.tensor_addr[ti], cm.tensor_addr[ti] + t.phys_size * cm.qsched.elem_bytes(ti))
           for ti, t in enumerate(s.tensors)}
    readers = {ti: [k for k, kn in enumerate(s.kernels) if ti in kernel_inputs(kn)] for ti in rng}
    last = {ti: max(readers[ti], default=-1) for ti in rng}
    bad = []

    def acc(kernels, lo, hi, writes):
        return [x for x in log if kof[x[1]] in kernels and _hits(x[5] if writes else x[4], lo, hi)]
    for ti, t in enumerate(s.tensors):
        lo, hi = rng[ti]
        if t.kind == "kernel":                                       # read after write
            st = acc([t.producer], lo, hi, True)
            for ld in acc(readers[ti], lo, hi, False):
                late = [x for x in st if x[3] >= ld[2]]
                if late:
                    bad.append(f"t{ti}: load pc {ld[1]} (kernel {kof[ld[1]]}) starts at {ld[2]}, store pc "
                               f"{late[0][1]} (kernel {t.producer}) retires at {late[0][3]}")
        if t.kind != "kernel":
            continue
        for ui in rng:                                               # write after read of reused bytes
            a, b = max(lo, rng[ui][0]), min(hi, rng[ui][1])
            if ui == ti or a >= b or not 0 <= last[ui] < t.producer:
                continue
            lds = acc(readers[ui], a, b, False)
            for x in acc([t.producer], a, b, True):
                early = [ld for ld in lds if ld[3] >= x[2]]
                if early:
                    bad.append(f"t{ti} over t{ui}: store pc {x[1]} starts at {x[2]}, load pc {early[0][1]} "
                               f"retires at {early[0][3]}")
    return bad


CASES = [
    ("conv chain", lambda: (_Chain(), np.random.default_rng(1).standard_normal((1, 4, 6, 6))), "small"),
    ("conv chain", lambda: (_Chain(), np.random.default_rng(1).standard_normal((1, 4, 6, 6))), "tiny"),
    ("branches", lambda: (_Branches(), np.random.default_rng(2).standard_normal((1, 4, 8, 8))), "small"),
    ("mlp chain", lambda: (_mlp(), np.random.default_rng(3).standard_normal((40, 32))), "small"),
    # M-tile loops (kernels in scalar loops carry their tokens to the next kernel too)
    ("looped chain", lambda: (_Chain(4, 3), np.random.default_rng(2).standard_normal((1, 4, 10, 10))), "tiny"),
]


def _build(make):
    tc.manual_seed(4)
    m, x = make()
    return m, x.astype(np.float32)


@pytest.mark.parametrize("name,make,config", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_overlapped_kernels_exact_and_ordered(name, make, config, monkeypatch):
    m, x = _build(make)
    cm = tc.compile(m, [x], config=config)
    assert len(cm.kernels) >= 3
    assert cm.asm.count("fence all") == 1                      # the program's end only
    assert ("mtile" in cm.asm) == (name == "looped chain")              # the M-tile loop's label
    res, log = _run_logged(cm, x, config, monkeypatch)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    f = cm.float_reference(x)[0]
    assert np.abs(res.outputs[0] - f).max() <= 0.1 * np.abs(f).max()
    assert log and not order_violations(cm, log) and not unfenced_reads(cm, log)


@pytest.mark.parametrize("seed,config", [(s, c) for s in range(8) for c in ("tiny", "small")])
def test_random_graphs_exact_and_ordered(seed, config, monkeypatch):
    tc.manual_seed(seed)
    m = _Random(seed)
    x = np.random.default_rng(seed).standard_normal((1, 3, 5, 5)).astype(np.float32)
    cm = tc.compile(m, [x], config=config)
    res, log = _run_logged(cm, x, config, monkeypatch)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    assert not order_violations(cm, log) and not unfenced_reads(cm, log)


@pytest.mark.parametrize("case", [0, 3], ids=["conv chain", "mlp chain"])
def test_checker_catches_missing_fences(case, monkeypatch):
    """The same programs built without any fence: every kernel's input loads are unordered after its
    producer's stores, and in the MLP chain a kernel reads before they retired (the simulator stops
    on the race or the timing check reports it). The conv chain happens to be in order: only the
    structure shows it is not ordered."""
    m, x = _build(CASES[case][1])
    emit = pipeline.emit_program
    monkeypatch.setattr(pipeline, "emit_program", lambda codes, cfg, prefixes, fences: emit(codes, cfg, prefixes, {}))
    cm = tc.compile(m, [x], config="small")
    monkeypatch.setattr(pipeline, "emit_program", emit)
    assert "fence store" not in cm.asm
    log = []
    try:
        res, log = _run_logged(cm, x, "small", monkeypatch)
    except SimError as err:                                   # overlapping in flight: caught as a race
        assert "RACE" in str(err) and case == 3
        return
    assert case == 0 or order_violations(cm, log)
    assert len(unfenced_reads(cm, log)) == len(cm.kernels) - 1


def test_independent_kernels_overlap():
    """The second convolution does not read the first's output: no fence before it, and it loads
    its input and starts its matmuls before the first kernel's last store retires."""
    m, x = _build(CASES[2][1])
    cm = tc.compile(m, [x], config="small")
    kof = _kernel_of_pc(cm)
    res = tc.Device("sim", config="small", trace=True).run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    lines = [ln.strip() for ln in cm.asm.splitlines()]
    k1 = lines.index(next(ln for ln in lines if ln.startswith("; kernel conv1")))
    assert "fence store" not in lines[k1:k1 + 40]
    recs = res.trace.records
    last_store = max(r.retire for r in recs if kof[r.pc] == 0 and r.text.startswith("dma.st"))
    first_mm = min(r.start for r in recs if kof[r.pc] == 1 and r.text.startswith("mxu.mm"))
    assert first_mm < last_store


def test_overlap_is_faster_than_serial(monkeypatch):
    """The chain with the pipeline's fences against every kernel waiting for the previous one first."""
    m, x = _build(CASES[0][1])
    cm = tc.compile(m, [x], config="small")
    fast = tc.Device("sim", config="small").run(cm, x).stats.cycles
    emit = pipeline.emit_program
    monkeypatch.setattr(pipeline, "emit_program", lambda codes, cfg, prefixes, fences: emit(codes, cfg, prefixes))
    slow_cm = tc.compile(m, [x], config="small")
    res = tc.Device("sim", config="small").run(slow_cm, x)
    np.testing.assert_array_equal(res.outputs[0], slow_cm.reference(x)[0])
    assert fast < res.stats.cycles


class _Layers(tc.nn.Module):
    """``n`` fully connected layers with a bias and ReLU, each reading the previous one's output."""

    def __init__(self, d=64, n=6):
        self.fcs = [tc.nn.Linear(d, d) for _ in range(n)]

    def forward(self, x):
        for fc in self.fcs:
            x = fc(x).relu()
        return x


@pytest.mark.parametrize("config", ["small", "base"])
def test_prefetched_weights_load_under_the_previous_kernel(config, monkeypatch):
    """A chain of dependent kernels: each kernel after the first loads its first weight tiles (one
    DMA instance into its own slots, ``compiler.lower.emit._prefetch``) before its ``fence store``,
    so while the previous kernel still stores; every ``mxu.lw`` reading those rows starts after
    that instance retired (its token), and the chain is bit-exact and in DRAM order."""
    tc.manual_seed(6)
    m = _Layers()
    x = np.random.default_rng(6).standard_normal((48, 64)).astype(np.float32)
    cm = tc.compile(m, [x], config=config)
    res, log = _run_logged(cm, x, config, monkeypatch, dram_only=False)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
    f = cm.float_reference(x)[0]
    assert np.abs(res.outputs[0] - f).max() <= 0.1 * np.abs(f).max()
    dram_log = [r for r in log if any(s[0] == "dram" for s in list(r[4]) + list(r[5]))]
    assert not order_violations(cm, dram_log) and not unfenced_reads(cm, dram_log)
    ins, kof = _instructions(cm), _kernel_of_pc(cm)
    nk = max(kof) + 1
    assert nk == 6
    for k in range(1, nk):
        pcs = [pc for pc, t in enumerate(ins) if kof[pc] == k]
        fence = next(pc for pc in pcs if ins[pc].startswith("fence store"))
        pre = [pc for pc in pcs if pc < fence and ins[pc].startswith("dma.ld spm[") and "signal=mxu" in ins[pc]]
        assert len(pre) == 1 and "wait=" not in ins[pre[0]], ins[pcs[0]:fence + 1]
        (ld,) = [r for r in log if r[1] == pre[0]]
        lws = [r for r in log if kof[r[1]] == k and ins[r[1]].startswith("mxu.lw")
               and any(s[0] == "spm" and w[0] == "spm" and s[1] < w[2] and w[1] < s[2] for s in r[4] for w in ld[5])]
        assert lws and min(r[2] for r in lws) > ld[3]              # read after it arrived
        prev_st = max(r[3] for r in log if kof[r[1]] == k - 1 and ins[r[1]].startswith("dma.st"))
        assert ld[2] < prev_st                     # started before the fence lets the kernel read its input


def test_prefetch_stays_within_the_weight_seeds():
    """An elementwise kernel with a tall last tile (1,568 rows) before a GEMM with more K tiles than weight
    seed tokens (224 > WEIGHT_TOKENS): the prefetch covers at most the seeds (more deadlocked)."""
    rng = np.random.default_rng(0)
    wa, wb = ((rng.standard_normal((64, 512)) * 0.1).astype(np.float32) for _ in range(2))
    w1 = (rng.standard_normal((3584, 512)) * 0.02).astype(np.float32)

    def model(x):
        return ((x @ tc.Tensor(wa)) + (x @ tc.Tensor(wb))).relu().reshape(7, 3584) @ tc.Tensor(w1)
    x = rng.standard_normal((49, 64)).astype(np.float32)
    cm = tc.compile(model, [x], config="base")
    assert cm.kernels[-1].tiling.KT > 64 and cm.kernels[-2].M > 64 * 16
    res = tc.Device("sim", config="base").run(cm, x)
    np.testing.assert_array_equal(res.outputs[0], cm.reference(x)[0])
