"""The issue stage's parts alone (rtl/issue_parts.py), their ports driven directly: the scalar ALU
against isa.semantics (random and edge operands), the loop registers against a model of what they
hold (counts, strides, written flags across runs) and the nest's jumps by their definition, the
token counters against a counter model (signals, waits, takes, overflow, clearing) and the issue
check against the contract's rules, case by case."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from isa import ChipConfig
from isa import semantics as sem
from isa.table import MAX_REPEAT_DEPTH, QUEUED_UNITS, SCALAR_ALU, STRIDE_SLOTS, Unit
from isa.timing import TOKEN_MAX
from rtl.issue_parts import IssueCheck, LoopRegisters, ScalarAlu, TokenCounters
from tests.rtl.rtl_helpers import run

TINY = ChipConfig.preset("tiny")
UNITS = len(Unit)
M32 = (1 << 32) - 1
EDGES = [0, 1, -1, 2, 31, 32, 33, -32, 127, -128, 255, 1 << 15, -(1 << 15), (1 << 31) - 1, -(1 << 31),
         (1 << 31) - 2, -(1 << 31) + 1, 0x55555555, -0x55555556]


def _s32(v: int) -> int:
    v &= M32
    return v - (1 << 32) if v >> 31 else v


def _operands(rng, n):
    """Pairs: every pair of edge values, then random 32-bit values and random small shifts."""
    pairs = [(a, b) for a in EDGES for b in EDGES]
    pairs += [(_s32(int(rng.integers(0, 1 << 32))), _s32(int(rng.integers(0, 1 << 32)))) for _ in range(n)]
    pairs += [(_s32(int(rng.integers(0, 1 << 32))), int(rng.integers(-64, 64))) for _ in range(n // 2)]
    return pairs


def test_scalar_alu_matches_semantics():
    """Every ALU op of the table, and the branch compares, against isa.semantics."""
    rng = np.random.default_rng(11)
    dut = ScalarAlu()
    pairs = _operands(rng, 60)

    async def bench(ctx):
        checked = 0
        for a, b in pairs:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            for i, op in enumerate(SCALAR_ALU):
                ctx.set(dut.op, 1 << i)
                assert ctx.get(dut.result) == sem.scalar_alu(op, a, b) & M32, (op, a, b)
                checked += 1
            ctx.set(dut.op, 0)                  # no op: the result is 0; a branch compare
            ctx.set(dut.compare, 1)
            assert ctx.get(dut.result) == 0
            assert ctx.get(dut.lt) == sem.branch_taken("blt", a, b), (a, b)
            assert ctx.get(dut.eq) == sem.branch_taken("beq", a, b), (a, b)
            ctx.set(dut.compare, 0)
        return checked

    assert run(dut, bench, clock=False) == len(pairs) * len(SCALAR_ALU)


def test_loop_registers_hold_counts_and_give_jumps():
    """Writes (some counting 0), nests taken (``load``) at every base and depth, some in the cycle
    of a write (the nest then sees it), a new run forgetting which registers were written (not
    their contents); jumps by their definition
    ``stride_j - sum over inner levels i of (count_i - 1) * stride_i`` (mod 2**32)."""
    cfg = TINY
    rng = np.random.default_rng(5)
    dut = LoopRegisters(cfg)
    n = cfg.loop_regs
    stride_edges = [0, 1, -1, (1 << 31) - 1, -(1 << 31), 64, -64]
    count_edges = [0, 1, 2, M32, 1 << 31, 3]

    def rand_stride():
        if rng.random() < 0.4:
            return stride_edges[rng.integers(len(stride_edges))]
        return _s32(int(rng.integers(0, 1 << 32)))

    def rand_count():
        return count_edges[rng.integers(len(count_edges))] if rng.random() < 0.5 else int(rng.integers(0, 1000))

    def expect(mem, written, base, depth):
        levels = [mem[base + j] if j < depth else (0, (0,) * STRIDE_SLOTS) for j in range(MAX_REPEAT_DEPTH)]
        zero = any(not written[base + j] or mem[base + j][0] == 0 for j in range(depth))
        jumps = []
        for j in range(MAX_REPEAT_DEPTH):
            row = []
            for k in range(STRIDE_SLOTS):
                inner = sum(((levels[i][0] - 1) & M32) * levels[i][1][k] for i in range(j + 1, MAX_REPEAT_DEPTH))
                row.append((levels[j][1][k] - inner) & M32)
            jumps.append(row)
        return [lv[0] for lv in levels], jumps, zero

    async def bench(ctx):
        mem = [(0, (0,) * STRIDE_SLOTS)] * n            # what each register holds (kept across runs)
        checked = 0
        for _run in range(3):
            written = [False] * n
            ctx.set(dut.running, 1)
            for _step in range(14):
                write = rng.random() < 0.6              # a loop instruction issues ...
                if write:
                    lr, count = int(rng.integers(n)), rand_count()
                    strides = tuple(rand_stride() for _ in range(STRIDE_SLOTS))
                    ctx.set(dut.we, 1)
                    ctx.set(dut.lr, lr)
                    ctx.set(dut.count, count)
                    for k in range(STRIDE_SLOTS):
                        ctx.set(dut.stride[k], strides[k])
                nests = [(base, depth) for base in range(n) for depth in range(min(MAX_REPEAT_DEPTH, n - base) + 1)]
                rng.shuffle(nests)
                for i, (base, depth) in enumerate(nests):
                    # ... as the first of these nests is taken into I (``load``), or a cycle before
                    ctx.set(dut.base, base)
                    ctx.set(dut.depth, depth)
                    ctx.set(dut.load, 1)
                    await ctx.tick()
                    ctx.set(dut.load, 0)
                    ctx.set(dut.base, int(rng.integers(n)))     # (D moves on: not looked at)
                    ctx.set(dut.depth, int(rng.integers(MAX_REPEAT_DEPTH + 1)))
                    if write and i == 0:
                        ctx.set(dut.we, 0)
                        mem[lr], written[lr] = (count, strides), True
                    cnts, jumps, zero = expect(mem, written, base, depth)
                    assert ctx.get(dut.zero) == zero, (base, depth, mem, written)
                    for j in range(MAX_REPEAT_DEPTH):
                        if j < depth and written[base + j]:    # (else the nest is empty: not read)
                            assert ctx.get(dut.cnt_m2[j]) == (cnts[j] - 2) & M32, (base, depth, j)
                            assert (ctx.get(dut.cnt_one) >> j) & 1 == (cnts[j] == 1), (base, depth, j)
                        for k in range(STRIDE_SLOTS):
                            assert ctx.get(dut.jump[j][k]) & M32 == jumps[j][k], (base, depth, j, k)
                    checked += 1
            ctx.set(dut.running, 0)                     # the run ends: the next one starts unwritten
            await ctx.tick()
        return checked

    assert run(dut, bench) > 3 * 14 * n


@pytest.mark.parametrize("silent", [(), (Unit.LTX, Unit.LRX)], ids=["all", "no-links"])
def test_token_counters_signal_wait_take_and_overflow(silent):
    """Random signals (up to three events from each queued unit, the scalar unit's mask), waits and
    takes (a unit takes only when its tokens are there, as the units do), checked every cycle
    against a model of the (P, C) counters: each unit's ``ok``, the scalar ``ok``, ``overflow``
    exactly in the cycle after a counter passed TOKEN_MAX (then the run stops: counters
    cleared). ``silent``: the counters of a chip without link ports, whose link units never signal
    (their events are 0 here, as the chip's stubs send)."""
    rng = np.random.default_rng(9)
    dut = TokenCounters(silent=silent)
    ports = {u: getattr(dut, f"t_{u.name.lower()}") for u in QUEUED_UNITS}

    def mask(p):
        return sum(1 << c for c in range(UNITS) if rng.random() < p)

    async def bench(ctx):
        tok = [[0] * UNITS for _ in range(UNITS)]
        overflows = takes = 0
        ctx.set(dut.running, 1)
        for cycle in range(450):
            over = any(v > TOKEN_MAX for row in tok for v in row)
            assert ctx.get(dut.overflow) == over, (cycle, tok)
            if over:                            # the chip stops: one cycle not running clears them
                overflows += 1
                ctx.set(dut.running, 0)
                for u in QUEUED_UNITS:
                    assert ctx.get(ports[u].en) == 0
                await ctx.tick()
                ctx.set(dut.running, 1)
                tok = [[0] * UNITS for _ in range(UNITS)]
                assert not ctx.get(dut.overflow)
                continue
            hot = cycle % 200 < 120             # phases of many signals (towards overflow) and few
            waits = {c: mask(0.3) for c in range(UNITS)}
            oks = {c: all(tok[p][c] for p in range(UNITS) if waits[c] >> p & 1) for c in range(UNITS)}
            take = {c: bool(oks[c] and rng.random() < 0.7) for c in range(UNITS)}
            sig = {p: [mask(0.9 if hot and p in (1, 4) else 0.1) for _ in range(3)] for p in range(UNITS)}
            sig[Unit.SCALAR] = [sig[Unit.SCALAR][0], 0, 0]
            for p in silent:
                sig[p] = [0, 0, 0]
            for u in QUEUED_UNITS:
                ctx.set(ports[u].wait, waits[u])
                ctx.set(ports[u].take, take[u])
                for e in range(3):
                    ctx.set(ports[u].sig_mask[e], sig[u][e])
            ctx.set(dut.scalar_wait, waits[Unit.SCALAR])
            ctx.set(dut.scalar_take, take[Unit.SCALAR])
            ctx.set(dut.scalar_signal, sig[Unit.SCALAR][0])
            nxt = [[tok[p][c] + sum(s >> c & 1 for s in sig[p]) - (take[c] and waits[c] >> p & 1)
                    for c in range(UNITS)] for p in range(UNITS)]
            for u in QUEUED_UNITS:
                assert ctx.get(ports[u].ok) == oks[u], (cycle, u)
                assert ctx.get(ports[u].en) == 1
            assert ctx.get(dut.scalar_ok) == oks[Unit.SCALAR], cycle
            takes += sum(take.values())
            await ctx.tick()
            tok = nxt
        return overflows, takes

    overflows, takes = run(dut, bench)
    assert overflows >= 2 and takes > 300


def test_issue_check_cases():
    """Each kind of head instruction (its one-hot flags) against the contract's rule, over random
    unit states; bit 0 (the scalar unit) of ``q_unit``/``busy``/``ready`` is never looked at."""
    rng = np.random.default_rng(2)
    dut = IssueCheck()
    queued = [int(u) for u in QUEUED_UNITS]

    def expect(kind, unit, fence_units, busy, ready, scalar_ok):
        if kind == "smem":
            return scalar_ok
        if kind == "fence":
            return all(not (busy >> u & 1) for u in queued if fence_units >> u & 1)
        if kind == "halt":
            return all(not (busy >> u & 1) for u in queued)
        if kind == "queued":
            return bool(ready >> unit & 1)
        return True

    async def bench(ctx):
        seen = set()
        for _ in range(1500):
            kind = ["smem", "fence", "halt", "queued", "other"][rng.integers(5)]
            unit = queued[rng.integers(len(queued))] if kind == "queued" else 0
            state = {"fence_units": int(rng.integers(1 << UNITS)), "busy": int(rng.integers(1 << UNITS)),
                     "ready": int(rng.integers(1 << UNITS)), "scalar_ok": int(rng.integers(2))}
            if rng.random() < 0.3:              # a sparse state: drains that complete
                state["busy"] &= int(rng.integers(1 << UNITS)) & int(rng.integers(1 << UNITS))
            for name in ("smem", "fence", "halt"):
                ctx.set(getattr(dut, name), kind == name)
            ctx.set(dut.q_unit, 1 << unit if kind == "queued" else 0)
            for name, v in state.items():
                ctx.set(getattr(dut, name), v)
            want = expect(kind, unit, **state)
            assert ctx.get(dut.can) == want, (kind, unit, state)
            for name in ("busy", "ready", "q_unit"):    # the scalar bit flipped: no change
                was = ctx.get(getattr(dut, name))
                ctx.set(getattr(dut, name), was ^ 1)
                assert ctx.get(dut.can) == want, (kind, unit, state, name)
                ctx.set(getattr(dut, name), was)
            seen.add((kind, want))
        return seen

    seen = run(dut, bench, clock=False)
    assert {(k, w) for k in ("smem", "fence", "halt", "queued") for w in (False, True)} <= seen


def test_parts_elaborate_for_every_preset():
    """The parts build for the larger presets too (loop register and nest widths from the table)."""
    for name in ("small", "base"):
        cfg = ChipConfig.preset(name)
        for dut in (LoopRegisters(cfg), TokenCounters(), IssueCheck(), ScalarAlu()):
            Simulator(dut)
